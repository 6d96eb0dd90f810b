"""The public entry point: validate -> plan -> build (render/compile/cache) -> load -> launch.

``get_paged_mqa_logits_metadata`` is a drop-in for DeepGEMM's function of the same
name. CUDA tensors run the JIT kernel on the tensor's device and current stream;
CPU tensors run the pure-PyTorch reference. Under ``torch.compile`` the call goes
through the ``jitmeta::paged_mqa_logits_metadata`` custom op (:mod:`jitmeta.ops`);
eagerly it does not, because the dispatcher would cost more than the whole call.

The eager CUDA path is built to cost a few microseconds of host time: after the first
call of a configuration, a call is one knob snapshot, a handful of tensor checks, one
dict lookup and the launch (see ``_eager``).
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field

import torch

from . import envs
from .heuristics.arch import DeviceLimits, limits_from_device
from .heuristics.plan import SCHEDULES, Plan, plan, workspace_words
from .jit import build as jit_build
from .jit import runtime
from .reference import reference_schedule, varlen_atoms

__all__ = ["get_paged_mqa_logits_metadata", "InputValueError", "CaptureCompileError",
           "Launcher", "device_limits", "plan_for", "prepare", "build_for", "validate"]

log = logging.getLogger("jitmeta")

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


class InputValueError(ValueError):
    """JITMETA_CHECK_INPUTS=1 found a value the kernel cannot schedule."""


class CaptureCompileError(RuntimeError):
    """A call inside CUDA-graph capture would need a compile, a module load or an
    allocation: warm it before capturing."""


# --- validation ------------------------------------------------------------------------

def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return (f"tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device}, "
                f"contiguous={t.is_contiguous()})")
    return f"{type(t).__name__} {t!r}"


def _int_arg(name: str, value: object, lo: int = 1, symbolic: bool = False) -> int:
    ok = (int, torch.SymInt) if symbolic else int
    if isinstance(value, bool) or not isinstance(value, ok):
        raise TypeError(f"{name} must be an int >= {lo}; got {_describe(value)}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}; got {value}")
    return value


def validate(context_lens, block_kv, num_sms, indices, out, split_kv, schedule, *,
             pdl: bool = False, fake: bool = False) -> tuple[torch.Tensor, int, int]:
    """Check every argument; returns (context_lens as 2-D, batch, next_n).

    ``fake=True`` is the custom op's fake (meta) implementation: sizes and scalars may
    be symbolic there, and there is no data pointer to check for alignment.
    """
    if not isinstance(context_lens, torch.Tensor):
        raise TypeError(f"context_lens must be a torch.Tensor; got {_describe(context_lens)}")
    if context_lens.dtype != torch.int32:
        raise TypeError(f"context_lens must have dtype torch.int32; got {context_lens.dtype}")
    if context_lens.device.type not in ("cpu", "cuda"):
        raise ValueError(f"context_lens must be a CPU or CUDA tensor; got device "
                         f"{context_lens.device}")
    if context_lens.dim() not in (1, 2):
        raise ValueError("context_lens must be 2-D [batch, next_n] (or 1-D [batch]); got "
                         f"shape {tuple(context_lens.shape)}")
    if not context_lens.is_contiguous():
        raise ValueError("context_lens must be contiguous; got strides "
                         f"{context_lens.stride()} for shape {tuple(context_lens.shape)} "
                         "(call .contiguous())")
    ctx2 = context_lens.view(-1, 1) if context_lens.dim() == 1 else context_lens
    batch, next_n = ctx2.shape
    if batch < 1 or next_n < 1:
        raise ValueError(f"context_lens must have batch >= 1 and next_n >= 1; got shape "
                         f"{tuple(context_lens.shape)}")
    _int_arg("num_sms", num_sms, symbolic=fake)
    _int_arg("block_kv", block_kv, symbolic=fake)
    _int_arg("split_kv", split_kv, symbolic=fake)
    if split_kv % block_kv:
        raise ValueError(f"block_kv must divide split_kv; got block_kv={block_kv}, "
                         f"split_kv={split_kv}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool; got {_describe(pdl)}")
    atoms = -(-next_n // 2) if next_n >= 2 else 1
    if batch * atoms > INT32_MAX:
        raise ValueError(f"context_lens batch {batch} x {atoms} atoms exceeds int32 row "
                         "indices")
    if indices is not None:
        if not isinstance(indices, torch.Tensor):
            raise TypeError(f"indices must be a torch.Tensor or None; got {_describe(indices)}")
        if indices.dtype != torch.int32:
            raise TypeError(f"indices must have dtype torch.int32; got {indices.dtype}")
        if indices.dim() != 1 or indices.shape[0] != batch:
            raise ValueError(f"indices must be 1-D [batch={batch}]; got shape "
                             f"{tuple(indices.shape)}")
        if not indices.is_contiguous():
            raise ValueError("indices must be contiguous (call .contiguous())")
        if indices.device != context_lens.device:
            raise ValueError(f"indices must be on context_lens' device {context_lens.device}; "
                             f"got {indices.device}")
        if next_n != 1:
            raise ValueError(f"indices (varlen mode) requires next_n == 1; context_lens has "
                             f"next_n = {next_n} (shape {tuple(context_lens.shape)})")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor or None; got {_describe(out)}")
        if out.dtype != torch.int32:
            raise TypeError(f"out must have dtype torch.int32; got {out.dtype}")
        if tuple(out.shape) != (num_sms + 1, 2):
            raise ValueError(f"out must have shape [num_sms + 1, 2] = [{num_sms + 1}, 2]; "
                             f"got {tuple(out.shape)}")
        if out.device != context_lens.device:
            raise ValueError(f"out must be on context_lens' device {context_lens.device}; "
                             f"got {out.device}")
        if not out.is_contiguous() or (not fake and out.data_ptr() % 8):
            raise ValueError("out must be contiguous and 8-byte aligned")
    return ctx2, batch, next_n


def check_values(ctx2: torch.Tensor, indices, split_kv: int) -> None:
    """The opt-in device-side value check (JITMETA_CHECK_INPUTS=1); synchronizes."""
    if bool((ctx2 < 0).any()):
        bad = int(torch.nonzero(ctx2.reshape(-1) < 0)[0])
        raise InputValueError(f"context_lens must be >= 0; element {bad} (flat index) is "
                              f"{int(ctx2.reshape(-1)[bad])}")
    if indices is None:
        next_n = ctx2.shape[1]
        atoms = -(-next_n // 2) if next_n >= 2 else 1
        lens = ctx2[:, -1].to(torch.int64)
    else:  # one length per greedy atom, as the kernel counts them
        atoms = 1
        lens = varlen_atoms(ctx2[:, 0], indices)[1]
    total = int(((lens + split_kv - 1) // split_kv).sum()) * atoms
    if total > UINT32_MAX:
        raise InputValueError(f"context_lens sum to {total} kv splits (x atoms), more than "
                              "the kernel's uint32 arithmetic holds (4294967295)")


# --- device planning and launch ------------------------------------------------------

_limits: dict[int, DeviceLimits] = {}


def device_limits(device: int) -> DeviceLimits:
    """The planner's limits of CUDA device ``device`` (read once per device)."""
    lim = _limits.get(device)
    if lim is None:
        lim = _limits[device] = limits_from_device(device)
    return lim


_PLAN_KNOBS = ("JITMETA_VARIANT", "JITMETA_THREADS", "JITMETA_CHUNK", "JITMETA_SMEM_BUDGET",
               "JITMETA_ARCH", "JITMETA_NVRTC_FLAGS", "JITMETA_OFFLINE",
               "JITMETA_DISABLE_DISK_CACHE", "JITMETA_CACHE_DIR")
_plan_token = envs.token_reader(*_PLAN_KNOBS)
_call_token = envs.token_reader(*_PLAN_KNOBS, "JITMETA_CHECK_INPUTS")


def plan_for(batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
             schedule: str, device: int) -> Plan:
    return plan(batch, next_n, varlen, num_sms, split_kv, schedule, device_limits(device))


_POINTER, _UINT32 = runtime.POINTER, runtime.UINT32
_EMIT_TYPES = (_POINTER, _POINTER, _UINT32, _UINT32, _UINT32, _POINTER, _POINTER)


@dataclass(frozen=True)
class Launcher:
    """Everything a call needs after the first one: no planning, no Python loops.

    Calling it launches the kernels through :func:`runtime.launch`; the caller has made
    the device's context current and chosen the stream and the workspace.
    """

    device: int
    plan: Plan
    emit: object
    cooperative: bool
    threads: int
    grid: int
    dyn_smem: int
    ws_words: int
    # derived from ``plan`` (one shape): what the hot path reads without a lookup
    batch: int = field(init=False, repr=False)
    next_n: int = field(init=False, repr=False)
    num_sms: int = field(init=False, repr=False)
    out_shape: tuple[int, int] = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "batch", self.plan.batch)
        object.__setattr__(self, "next_n", self.plan.next_n)
        object.__setattr__(self, "num_sms", self.plan.num_sms)
        object.__setattr__(self, "out_shape", (self.plan.num_sms + 1, 2))

    def __call__(self, ctx_ptr: int, idx_ptr: int, batch: int, next_n: int, num_sms: int,
                 out_ptr: int, stream: int, ws_ptr: int, pdl: bool) -> None:
        args = (ctx_ptr, idx_ptr, batch, next_n, num_sms, out_ptr, ws_ptr)
        if not self.cooperative:
            runtime.launch(self.emit, self.grid, self.threads, self.dyn_smem, stream, args,
                           _EMIT_TYPES, pdl)
            return
        grid = min(self.grid, _grid_caps.get(self.device, self.grid))
        while True:
            try:
                runtime.launch(self.emit, grid, self.threads, self.dyn_smem, stream, args,
                               _EMIT_TYPES, pdl, True)
                return
            except runtime.DriverError as exc:
                if exc.code != runtime.COOPERATIVE_LAUNCH_TOO_LARGE or grid == 1:
                    raise
                grid = _shrink_grid(self.device, grid)


# Blocks a cooperative launch may have on each device. The planner assumes one block per
# SM of the device; a process confined to fewer SMs (an MPS active-thread percentage,
# green contexts) gets the launch refused, and then the grid is halved until it fits
# (the chunked kernel serves any grid: blocks take more slabs each) and remembered.
_grid_caps: dict[int, int] = {}


def _shrink_grid(device: int, grid: int) -> int:
    smaller = max(1, grid // 2)
    with _launchers_lock:
        if smaller < _grid_caps.get(device, grid + 1):
            _grid_caps[device] = smaller
            log.warning("jitmeta: cuda:%d refused a cooperative launch of %d blocks (fewer "
                        "SMs available to this process than the device has); using at "
                        "most %d blocks from now on", device, grid, smaller)
    return smaller


_launchers: "collections.OrderedDict[tuple, Launcher]" = collections.OrderedDict()
_launchers_lock = threading.Lock()
_MAX_LAUNCHERS = 4096


def launcher_ws_words(p: Plan) -> int:
    """Workspace words a call of ``p`` needs (0 unless chunked)."""
    if p.variant != "chunked":
        return 0
    return workspace_words(p.batch, p.code.capacity, p.code.varlen)


def _capturing(device: int) -> bool:
    """Whether the current stream of CUDA ``device`` is capturing a CUDA graph."""
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def _max_dynamic_smem(p: Plan, device: int) -> int:
    if p.variant != "dynamic":
        return 0
    return device_limits(device).smem_optin_bytes - p.smem_static_bytes


def build_for(device: int, batch: int, next_n: int, varlen: bool, num_sms: int,
              split_kv: int, schedule: str) -> tuple[Plan, jit_build.Built]:
    """Plan a shape for ``device``'s limits and build its cubin (memory, disk or NVRTC).

    Needs no GPU once the device's limits are known; concurrent callers compile each
    cache key once (``jit.build``'s per-key locks).
    """
    p = plan_for(batch, next_n, varlen, num_sms, split_kv, schedule, device)
    return p, jit_build.build(p.code, p)


def prepare(device: int, batch: int, next_n: int, varlen: bool, num_sms: int,
            split_kv: int, schedule: str) -> Launcher:
    """Plan, build (compile or load from cache) and load the kernels for a shape.

    Outside CUDA-graph capture it also reserves, for the chunked variant, a workspace
    that a later capture on any stream of ``device`` can adopt (see ``_Workspace``).
    Inside capture it never compiles, loads or allocates: a configuration whose module
    is not loaded yet raises :class:`CaptureCompileError`.
    """
    key = (device, batch, next_n, varlen, num_sms, split_kv, schedule, _plan_token())
    hit = _launchers.get(key)
    if hit is not None:
        if hit.ws_words and not _spares.get(device):
            _replenish(device, hit.ws_words)
        return hit
    p = plan_for(batch, next_n, varlen, num_sms, split_kv, schedule, device)
    mod = runtime.get_module(device, jit_build.key_for(p.code)[0])
    capturing = None
    if mod is None:
        capturing = _capturing(device)
        if capturing:
            raise CaptureCompileError(
                f"jitmeta: the first call for {p.code.name} (batch {batch}) on cuda:{device} "
                "happens inside CUDA-graph capture, where it would compile and load a "
                "kernel. Warm it before capturing: run the same call once eagerly, or "
                f"jitmeta.warm(device={device}, load=True, batches=...) at start-up (the "
                f"cubin alone, no GPU needed: {jit_build.warm_command(p)})")
        built = jit_build.build(p.code, p)
        mod = runtime.load_module(device, built.key, built.cubin, built.names,
                                  _max_dynamic_smem(p, device))
    launcher = Launcher(
        device=device, plan=p, emit=mod.functions["jitmeta_emit"],
        cooperative=p.variant == "chunked", threads=p.threads, grid=p.grid,
        dyn_smem=p.smem_dynamic_bytes, ws_words=launcher_ws_words(p))
    if launcher.ws_words and not (_capturing(device) if capturing is None else capturing):
        _reserve_spare(device, launcher.ws_words)
    with _launchers_lock:
        _launchers[key] = launcher
        while len(_launchers) > _MAX_LAUNCHERS:
            _launchers.popitem(last=False)
    return launcher


# --- the chunked variant's workspace ------------------------------------------------------
#
# The chunked variant's blocks pass their summaries through a small global workspace
# whose epoch word tells one launch's slots from the previous one's (layout in
# templates/jitmeta_schedule.cuh). Invariants:
# * a workspace starts zeroed (runtime.allocate) and serves one launch at a time;
# * one workspace per (device, stream): two streams never share one, so their kernels
#   can overlap freely; the per-thread default stream (handle 2) is a different stream
#   in each thread, so it is keyed by thread too;
# * a workspace's lock is held while a call picks it and enqueues its kernel;
# * buffers come from the driver (runtime.allocate), not from PyTorch's caching
#   allocator: a first call during torch.compile's CUDA-graph warm-up must not take
#   memory from a graph's private pool; they are never freed (a captured graph may
#   hold a pointer into an old one);
# * nothing is allocated during CUDA-graph capture: a capture stream without a large
#   enough workspace adopts the spare reserved for its device by an earlier eager
#   chunked call or by prepare() (warm(load=True)), which reserve the next spare once
#   one was adopted; with no spare, CaptureCompileError says to warm first.
# Graphs captured on one stream share that stream's workspace: replay them in one
# stream order (as engines do), or capture them on different streams.

_WS_MIN_WORDS = 1 << 16  # 256 KiB: the slots + the slab summaries of > 2^26 tokens
_PER_THREAD_STREAM = 2   # CU_STREAM_PER_THREAD


class _Workspace:
    __slots__ = ("lock", "buffers", "words", "ptr")

    def __init__(self):
        self.lock = threading.Lock()
        self.buffers: list[tuple[int, int]] = []  # (address, words), newest last
        self.words = 0
        self.ptr = 0

    def pointer(self, device: int, stream: int, words: int) -> int:
        """Address of at least ``words`` int32 words; call with ``self.lock`` held."""
        if words > self.words:
            if _capturing(device):
                buf = _take_spare(device, words)
                if buf is None:
                    raise CaptureCompileError(
                        f"jitmeta: a chunked-variant call ({words} workspace words) is "
                        f"being captured on stream {stream:#x} of cuda:{device}, which has "
                        "no workspace, and nothing may be allocated during capture. Warm "
                        "first: one eager call of a chunked shape on this device before "
                        f"capturing (any stream), or jitmeta.warm(device={device}, "
                        "load=True), reserves a workspace that the capture stream adopts; "
                        "each new capture stream adopts one, and the next eager call or "
                        "warm reserves the next (or run one eager call on the capture "
                        "stream itself)")
            else:
                buf = _new_buffer(device, max(words, 2 * self.words, _WS_MIN_WORDS))
                _reserve_spare(device, words)
            self.buffers.append(buf)
            self.ptr, self.words = buf
        return self.ptr


_workspaces: dict[tuple, _Workspace] = {}
_spares: dict[int, list[tuple[int, int]]] = {}
_ws_lock = threading.Lock()


def _new_buffer(device: int, words: int) -> tuple[int, int]:
    return runtime.allocate(device, 4 * words), words


def _reserve_spare(device: int, words: int) -> None:
    """Keep one workspace of at least ``words`` words for ``device``'s next capture
    stream (allocates; never call during capture)."""
    with _ws_lock:
        spares = _spares.setdefault(device, [])
        if any(w >= words for _, w in spares):
            return
        spares.append(_new_buffer(device, max(words, _WS_MIN_WORDS)))


def _replenish(device: int, words: int) -> None:
    """Reserve the next spare after a capture stream adopted the last one (not during
    capture, where nothing may be allocated)."""
    if not _capturing(device):
        _reserve_spare(device, words)


def _take_spare(device: int, words: int) -> tuple[int, int] | None:
    with _ws_lock:
        spares = _spares.get(device, [])
        for i, (_, w) in enumerate(spares):
            if w >= words:
                return spares.pop(i)
    return None


def _workspace_key(device: int, stream: int) -> tuple:
    if stream == _PER_THREAD_STREAM:
        return (device, stream, threading.get_ident())
    return (device, stream)


def _stream_workspace(device: int, stream: int) -> _Workspace:
    key = _workspace_key(device, stream)
    ws = _workspaces.get(key)
    if ws is None:
        with _ws_lock:
            ws = _workspaces.setdefault(key, _Workspace())
    return ws


# --- the call ----------------------------------------------------------------------------

class _CallState:
    """Per set of knob values: whether to check values, and the served configurations
    (key -> Launcher) of the eager fast path."""

    __slots__ = ("check_inputs", "calls", "lock")

    def __init__(self, check_inputs: bool):
        self.check_inputs = check_inputs
        self.calls: dict[tuple, Launcher] = {}
        self.lock = threading.Lock()

    def remember(self, key: tuple, launcher: Launcher) -> None:
        with self.lock:
            if len(self.calls) >= _MAX_LAUNCHERS:
                del self.calls[next(iter(self.calls))]
            self.calls[key] = launcher


_states: dict[tuple, _CallState] = {}
_states_lock = threading.Lock()
_MAX_STATES = 64


def _new_state(token: tuple) -> _CallState:
    check = bool(envs.get("JITMETA_CHECK_INPUTS"))  # raises EnvError on a bad value
    with _states_lock:
        state = _states.get(token)
        if state is None:
            if len(_states) >= _MAX_STATES:
                del _states[next(iter(_states))]
            state = _states[token] = _CallState(check)
    return state


_Tensor = torch.Tensor
_I32 = torch.int32
_is_compiling = torch.compiler.is_compiling
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if _raw_stream is None:  # a torch without the raw accessor: the public (slower) one
    def _raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  indices: torch.Tensor | None = None, *,
                                  out: torch.Tensor | None = None, split_kv: int = 256,
                                  schedule: str = "smxx", pdl: bool = False
                                  ) -> torch.Tensor:
    """Per-SM start ``(q_atom_idx, kv_split_idx)`` rows of the paged MQA-logits schedule.

    Parameters
    ----------
    context_lens : torch.Tensor
        int32, contiguous, ``[batch, next_n]`` (``[batch]`` means ``next_n = 1``).
    block_kv : int
        KV block size; must divide ``split_kv`` (validated; does not change the result).
    num_sms : int
        SMs the consumer kernel uses; the result has ``num_sms + 1`` rows.
    indices : torch.Tensor, optional
        int32 ``[batch]`` token -> request map (varlen/prefill); needs ``next_n == 1``.
    out : torch.Tensor, optional
        Preallocated int32 ``[num_sms + 1, 2]`` on the same device (CUDA graphs).
    split_kv : int
        KV tokens per split (default 256).
    schedule : {"smxx", "sm90"}
        Row format (section 2 of the spec).
    pdl : bool
        Launch with programmatic dependent launch (CUDA only): the kernel may start
        while the previous kernel on the stream drains, and waits for its results.

    Returns
    -------
    torch.Tensor
        int32 ``[num_sms + 1, 2]``: row ``s`` starts SM ``s``; row ``num_sms`` is the end.

    Notes
    -----
    CUDA tensors launch on the current stream of the tensor's device, with no
    host-device synchronization. Inside ``torch.compile`` the call is the custom op
    ``torch.ops.jitmeta.paged_mqa_logits_metadata`` (``..._out`` with ``out``).
    Inside CUDA-graph capture a warmed call never compiles, allocates (with ``out``)
    or synchronizes; an unwarmed one raises :class:`CaptureCompileError`.
    """
    if _is_compiling():
        return _through_op(context_lens, block_kv, num_sms, indices, out, split_kv,
                           schedule, pdl)
    return _eager(context_lens, block_kv, num_sms, indices, out, split_kv, schedule, pdl)


def _through_op(context_lens, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """The traceable form: one custom op, checked by its fake implementation."""
    ops = torch.ops.jitmeta
    if out is None:
        return ops.paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices,
                                             split_kv, schedule, pdl)
    ops.paged_mqa_logits_metadata_out(context_lens, block_kv, num_sms, out, indices,
                                      split_kv, schedule, pdl)
    return out


def _eager(c, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """The eager call (also the custom op's CPU and CUDA implementation)."""
    token = _call_token()
    state = _states.get(token)
    if state is None:
        state = _new_state(token)
    # Fast path: plain CUDA tensors in a configuration already served under these knob
    # values. A configuration is remembered only after validate() accepted it, and the
    # key holds everything validate() derives from shapes and scalars; what the key
    # cannot hold (dtype, device, layout, exact types) is re-checked here. Anything
    # else takes the slow path, whose validate() raises the precise error.
    if (type(c) is _Tensor and c.is_cuda and c.dtype is _I32 and c.is_contiguous()
            and type(num_sms) is int and type(block_kv) is int and type(split_kv) is int
            and type(schedule) is str and type(pdl) is bool):
        dev = c.get_device()
        if indices is None:
            launcher = state.calls.get((dev, c.shape, None, num_sms, block_kv, split_kv,
                                        schedule))
        elif (type(indices) is _Tensor and indices.is_cuda and indices.dtype is _I32
              and indices.is_contiguous() and indices.get_device() == dev):
            launcher = state.calls.get((dev, c.shape, indices.shape, num_sms, block_kv,
                                        split_kv, schedule))
        else:
            launcher = None
        if launcher is not None and (
                out is None or (type(out) is _Tensor and out.is_cuda and out.dtype is _I32
                                and out.shape == launcher.out_shape
                                and out.get_device() == dev and out.is_contiguous()
                                and not out.data_ptr() & 7)):
            return _run(launcher, state, c, indices, out, pdl)
    return _slow(state, c, block_kv, num_sms, indices, out, split_kv, schedule, pdl)


def _slow(state, c, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """First call of a configuration (or an unusual argument): validate fully, then run."""
    ctx2, batch, next_n = validate(c, block_kv, num_sms, indices, out, split_kv, schedule,
                                   pdl=pdl)
    if not ctx2.is_cuda:
        if state.check_inputs:
            check_values(ctx2, indices, split_kv)
        res = reference_schedule(ctx2, num_sms, indices, split_kv=split_kv, schedule=schedule)
        if out is None:
            return res
        out.copy_(res)
        return out
    dev = ctx2.get_device()
    launcher = prepare(dev, batch, next_n, indices is not None, num_sms, split_kv,
                       schedule)
    state.remember((dev, c.shape, None if indices is None else indices.shape, num_sms,
                    block_kv, split_kv, schedule), launcher)
    return _run(launcher, state, c, indices, out, pdl)


def _run(launcher: Launcher, state: _CallState, c, indices, out, pdl):
    """Launch a validated call on the current stream of the tensor's device."""
    dev = launcher.device
    if state.check_inputs:
        _check_in_call(launcher, c, indices)
    stream = _raw_stream(dev)
    if out is None:
        out = c.new_empty(launcher.out_shape)
    idx_ptr = 0 if indices is None else indices.data_ptr()
    pushed = runtime.make_current(dev)
    try:
        if launcher.ws_words:
            if not _spares.get(dev):  # a capture stream adopted the last spare
                _replenish(dev, launcher.ws_words)
            ws = _stream_workspace(dev, stream)
            with ws.lock:  # one launch at a time uses this stream's workspace
                launcher(c.data_ptr(), idx_ptr, launcher.batch, launcher.next_n,
                         launcher.num_sms, out.data_ptr(), stream,
                         ws.pointer(dev, stream, launcher.ws_words), pdl)
        else:
            launcher(c.data_ptr(), idx_ptr, launcher.batch, launcher.next_n,
                     launcher.num_sms, out.data_ptr(), stream, 0, pdl)
    finally:
        if pushed:
            runtime.pop_current()
    return out


_warned: set[str] = set()


def _check_in_call(launcher: Launcher, c, indices) -> None:
    """JITMETA_CHECK_INPUTS=1 on the CUDA path; skipped (once warned) inside capture,
    where the check's synchronization is illegal and the values are not final."""
    if _capturing(launcher.device):
        if "check-capture" not in _warned:
            _warned.add("check-capture")
            log.warning("jitmeta: JITMETA_CHECK_INPUTS=1 does not check values inside "
                        "CUDA-graph capture (the check synchronizes); eager calls are "
                        "checked")
        return
    ctx2 = c.view(-1, 1) if c.dim() == 1 else c
    check_values(ctx2, indices, launcher.plan.code.split_kv)


# Registering the torch.ops.jitmeta.* custom ops goes with the API (jitmeta's package
# __init__ is lazy, so `from jitmeta import api` must not leave them unregistered).
from . import ops as _ops  # noqa: E402,F401 - import for its registration effect
