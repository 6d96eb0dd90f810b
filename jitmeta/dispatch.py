"""The orchestrator: request -> plan -> source -> build -> load -> launch.

:func:`prepare` wires the stages for one shape and returns the family's loaded call;
:func:`eager` is the hot path of the public function: after the first call of a
configuration, a call is one knob snapshot, a handful of tensor checks, one dict lookup
and the launch.
"""

from __future__ import annotations

import logging
import threading

import torch

from . import envs, kernels
from .heuristics.arch import DeviceLimits, limits_from_device
from .heuristics.plan import Plan
from .jit import build as jit_build
from .jit import runtime, workspace
from .jit.runtime import CaptureCompileError
from .kernels.paged_mqa import describe_plan
from .reference import reference_schedule
from .validate import check_values, validate

__all__ = ["device_limits", "plan_for", "build_plan", "prepare", "eager", "reset"]

log = logging.getLogger("jitmeta")

_limits: dict[int, DeviceLimits] = {}


def device_limits(device: int) -> DeviceLimits:
    """The planner's limits of CUDA device ``device`` (read once per device)."""
    lim = _limits.get(device)
    if lim is None:
        lim = _limits[device] = limits_from_device(device)
    return lim


def plan_for(batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
             schedule: str, device: int, knobs: envs.Knobs | None = None) -> Plan:
    return kernels.plan(batch, next_n, varlen, num_sms, split_kv, schedule,
                        device_limits(device), knobs)


def _capturing(device: int) -> bool:
    """Whether the current stream of CUDA ``device`` is capturing a CUDA graph."""
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def build_plan(p: Plan, knobs: envs.Knobs | None = None, *, cache=None,
               offline: bool | None = None) -> jit_build.Built:
    """The cubin of plan ``p`` (memory, disk cache or NVRTC; no GPU needed). A miss
    that cannot compile (offline, or no NVRTC) names the configuration and the warm
    command that produces it."""
    knobs = envs.snapshot() if knobs is None else knobs
    fam = kernels.family(p.code.schedule)
    disk = cache if cache is not None else jit_build.cache_for(knobs)
    root = disk.root if disk is not None else None
    return jit_build.build(fam.source(p.code), knobs, cache=disk, offline=offline,
                           example=p.to_dict,
                           hint=lambda: fam.warm_command(p, knobs, cache_dir=root),
                           what=lambda: describe_plan(p))


# Loaded calls by (knobs, device, shape): ``prepare`` is idempotent per key. Bounded,
# least recently inserted first out (a serving engine sees a few hundred shapes).
_prepared: dict[tuple, object] = {}
_prepared_lock = threading.Lock()
_MAX_PREPARED = 4096


def prepare(device: int, batch: int, next_n: int, varlen: bool, num_sms: int,
            split_kv: int, schedule: str, knobs: envs.Knobs | None = None,
            capturing: bool | None = None):
    """Plan, build (compile or load from cache) and load the kernel for a shape.

    Returns the family's loaded call (e.g. a :class:`paged_mqa.ScheduleCall`). Outside
    CUDA-graph capture it also reserves a spare workspace for the device when the call
    needs one. Inside capture it never compiles, loads or allocates: an unprepared shape
    raises :class:`CaptureCompileError`.
    """
    knobs = envs.snapshot() if knobs is None else knobs
    key = (knobs, device, batch, next_n, varlen, num_sms, split_kv, schedule)
    call = _prepared.get(key)
    if call is not None:
        return call
    fam = kernels.family(schedule)
    p = plan_for(batch, next_n, varlen, num_sms, split_kv, schedule, device, knobs)
    src = fam.source(p.code)
    disk = jit_build.cache_for(knobs)
    jkey = jit_build.key_for(src, knobs, disk)[0]
    mod = runtime.get_module(device, jkey)
    if mod is None:
        if _capturing(device) if capturing is None else capturing:
            raise CaptureCompileError(
                f"jitmeta: the first call of {p.code.name} (batch {batch}) on cuda:{device} "
                "happens inside CUDA-graph capture, where it would compile and load a "
                "kernel. Warm it before capturing: run the same call once eagerly, or "
                f"jitmeta.warm(device={device}, load=True, batches=...) at start-up (the "
                f"cubin alone, no GPU needed: {fam.warm_command(p, knobs)})")
        built = build_plan(p, knobs, cache=disk)
        mod = runtime.load_module(device, built.key, built.cubin, built.names,
                                  fam.max_dynamic_smem(p, device_limits(device)))
    call = fam.call(device, p, mod.functions[src.kernels[0]])
    if call.ws_words and not (_capturing(device) if capturing is None else capturing):
        workspace.reserve_spare(device, call.ws_words)
    with _prepared_lock:
        _prepared[key] = call
        while len(_prepared) > _MAX_PREPARED:
            del _prepared[next(iter(_prepared))]
    return call


# --- the eager call ------------------------------------------------------------------

class _CallState:
    """Per knob snapshot: the served configurations (key -> loaded call) of the fast
    path. A configuration is remembered only after validate() accepted it."""

    __slots__ = ("knobs", "check_inputs", "calls", "lock")

    def __init__(self, knobs: envs.Knobs):
        self.knobs = knobs
        self.check_inputs = knobs.check_inputs
        self.calls: dict[tuple, object] = {}
        self.lock = threading.Lock()

    def remember(self, key: tuple, call) -> None:
        with self.lock:
            if len(self.calls) >= _MAX_PREPARED:
                del self.calls[next(iter(self.calls))]
            self.calls[key] = call


# By the raw values of every knob (what envs.snapshot() is keyed by too): the hot path
# reads them and finds its state in one lookup; a new set of values takes a snapshot.
_states: dict[tuple, _CallState] = {}
_states_lock = threading.Lock()
_MAX_STATES = 64


def _state(token: tuple) -> _CallState:
    knobs = envs.snapshot()  # raises EnvError on a malformed value
    if knobs.token != token:  # the environment changed meanwhile: do not cache
        return _CallState(knobs)
    with _states_lock:
        state = _states.get(token)
        if state is None:
            if len(_states) >= _MAX_STATES:
                del _states[next(iter(_states))]
            state = _states[token] = _CallState(knobs)
    return state


def reset() -> None:
    """Forget every prepared call and fast-path entry (tests)."""
    with _prepared_lock:
        _prepared.clear()
    with _states_lock:
        _states.clear()


_Tensor = torch.Tensor
_I32 = torch.int32
_token = envs.token_reader(*envs.KNOBS)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if _raw_stream is None:  # a torch without the raw accessor: the public (slower) one
    def _raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream


def eager(c, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """The eager call (also the custom ops' CPU and CUDA implementation)."""
    token = _token()
    state = _states.get(token)
    if state is None:
        state = _state(token)
    # Fast path: plain CUDA tensors in a configuration already served under these knob
    # values. The key holds everything validate() derives from shapes and scalars; what
    # it cannot hold (dtype, device, layout, exact types) is re-checked here. Anything
    # else takes the slow path, whose validate() raises the precise error.
    if (type(c) is _Tensor and c.is_cuda and c.dtype is _I32 and c.is_contiguous()
            and type(num_sms) is int and type(block_kv) is int and type(split_kv) is int
            and type(schedule) is str and type(pdl) is bool):
        dev = c.get_device()
        if indices is None:
            call = state.calls.get((dev, c.shape, None, num_sms, block_kv, split_kv,
                                    schedule))
        elif (type(indices) is _Tensor and indices.is_cuda and indices.dtype is _I32
              and indices.is_contiguous() and indices.get_device() == dev):
            call = state.calls.get((dev, c.shape, indices.shape, num_sms, block_kv,
                                    split_kv, schedule))
        else:
            call = None
        if call is not None and (
                out is None or (type(out) is _Tensor and out.is_cuda and out.dtype is _I32
                                and out.shape == call.out_shape
                                and out.get_device() == dev and out.is_contiguous()
                                and not out.data_ptr() & 7)):
            return _run(call, state, c, indices, out, pdl)
    return _slow(state, c, block_kv, num_sms, indices, out, split_kv, schedule, pdl)


def _slow(state, c, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """First call of a configuration (or an unusual argument): validate fully, then run."""
    ctx2, batch, next_n = validate(c, block_kv, num_sms, indices, out, split_kv, schedule,
                                   kernels.SCHEDULES, pdl=pdl)
    num_sms, block_kv, split_kv = int(num_sms), int(block_kv), int(split_kv)
    if not ctx2.is_cuda:
        check_values(ctx2, indices, split_kv, schedule)  # no sync needed on the CPU
        res = reference_schedule(ctx2, num_sms, indices, split_kv=split_kv, schedule=schedule)
        if out is None:
            return res
        out.copy_(res)
        return out
    dev = ctx2.get_device()
    call = prepare(dev, batch, next_n, indices is not None, num_sms, split_kv, schedule,
                   state.knobs)
    state.remember((dev, c.shape, None if indices is None else indices.shape, num_sms,
                    block_kv, split_kv, schedule), call)
    return _run(call, state, c, indices, out, pdl)


def _run(call, state: _CallState, c, indices, out, pdl):
    """Launch a validated call on the current stream of the tensor's device."""
    dev = call.device
    if state.check_inputs:
        _check_in_call(call, c, indices)
    stream = _raw_stream(dev)
    if out is None:
        out = c.new_empty(call.out_shape)
    idx_ptr = 0 if indices is None else indices.data_ptr()
    pushed = runtime.make_current(dev)
    try:
        if call.ws_words:
            if not workspace.has_spare(dev) and not _capturing(dev):
                workspace.reserve_spare(dev, call.ws_words)  # a capture took the last one
            ws = workspace.stream_workspace(dev, stream)
            with ws.lock:  # one launch at a time uses this stream's workspace
                ptr = ws.ptr if call.ws_words <= ws.words else ws.grow(
                    dev, stream, call.ws_words, lambda: _capturing(dev),
                    f"a {call.plan.variant}-variant call")
                call(c.data_ptr(), idx_ptr, out.data_ptr(), stream, ptr, pdl)
        else:
            call(c.data_ptr(), idx_ptr, out.data_ptr(), stream, 0, pdl)
    finally:
        if pushed:
            runtime.pop_current()
    return out


_warned: set[str] = set()


def _check_in_call(call, c, indices) -> None:
    """JITMETA_CHECK_INPUTS=1 on the CUDA path; skipped (once warned) inside capture,
    where the check's synchronization is illegal and the values are not final."""
    if _capturing(call.device):
        if "check-capture" not in _warned:
            _warned.add("check-capture")
            log.warning("jitmeta: JITMETA_CHECK_INPUTS=1 does not check values inside "
                        "CUDA-graph capture (the check synchronizes); eager calls are "
                        "checked")
        return
    ctx2 = c.view(-1, 1) if c.dim() == 1 else c
    check_values(ctx2, indices, call.plan.code.split_kv, call.plan.schedule)
