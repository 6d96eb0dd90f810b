"""The public entry point: validate -> plan -> build (render/compile/cache) -> load -> launch.

``get_paged_mqa_logits_metadata`` is a drop-in for DeepGEMM's function of the same
name. CUDA tensors run the JIT kernel on the tensor's device and current stream;
CPU tensors run the pure-PyTorch reference.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import torch

from . import envs
from .heuristics.arch import DeviceLimits, limits_from_device
from .heuristics.plan import SCHEDULES, Plan, plan
from .jit import build as jit_build
from .jit import runtime
from .reference import reference_schedule, varlen_atoms

__all__ = ["get_paged_mqa_logits_metadata", "InputValueError", "CaptureCompileError",
           "device_limits", "plan_for", "prepare"]

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


class InputValueError(ValueError):
    """JITMETA_CHECK_INPUTS=1 found a value the kernel cannot schedule."""


class CaptureCompileError(RuntimeError):
    """A call inside CUDA-graph capture would need a compile or a module load."""


# --- validation ------------------------------------------------------------------------

def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return (f"tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device}, "
                f"contiguous={t.is_contiguous()})")
    return f"{type(t).__name__} {t!r}"


def _int_arg(name: str, value: object, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {lo}; got {_describe(value)}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}; got {value}")
    return value


def validate(context_lens, block_kv, num_sms, indices, out, split_kv, schedule
             ) -> tuple[torch.Tensor, int, int]:
    """Check every argument; returns (context_lens as 2-D, batch, next_n)."""
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
    _int_arg("num_sms", num_sms)
    _int_arg("block_kv", block_kv)
    _int_arg("split_kv", split_kv)
    if split_kv % block_kv:
        raise ValueError(f"block_kv must divide split_kv; got block_kv={block_kv}, "
                         f"split_kv={split_kv}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
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
        if not out.is_contiguous() or out.data_ptr() % 8:
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
    lim = _limits.get(device)
    if lim is None:
        lim = _limits[device] = limits_from_device(device)
    return lim


_PLAN_KNOBS = ("JITMETA_VARIANT", "JITMETA_THREADS", "JITMETA_CHUNK", "JITMETA_SMEM_BUDGET",
               "JITMETA_ARCH", "JITMETA_NVRTC_FLAGS", "JITMETA_OFFLINE",
               "JITMETA_DISABLE_DISK_CACHE", "JITMETA_CACHE_DIR")


def plan_for(batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
             schedule: str, device: int) -> Plan:
    return plan(batch, next_n, varlen, num_sms, split_kv, schedule, device_limits(device))


@dataclass(frozen=True)
class Launcher:
    """Everything a call needs after the first one: no planning, no Python loops."""

    device: int
    plan: Plan
    emit: object
    summarize: object | None
    threads: int
    grid: int
    dyn_smem: int
    ws_words: int

    def __call__(self, ctx_ptr: int, idx_ptr: int, batch: int, next_n: int, num_sms: int,
                 out_ptr: int, stream: int, ws_ptr: int, pdl: bool) -> None:
        P, U = runtime.POINTER, runtime.UINT32
        if self.summarize is not None:
            runtime.launch(self.summarize, self.grid, self.threads, 0, stream,
                           (ctx_ptr, idx_ptr, batch, next_n, ws_ptr), (P, P, U, U, P), pdl)
        runtime.launch(self.emit, self.grid, self.threads, self.dyn_smem, stream,
                       (ctx_ptr, idx_ptr, batch, next_n, num_sms, out_ptr, ws_ptr),
                       (P, P, U, U, U, P, P), pdl)


_launchers: "collections.OrderedDict[tuple, Launcher]" = collections.OrderedDict()
_launchers_lock = threading.Lock()
_MAX_LAUNCHERS = 4096


def _env_token() -> tuple:
    return tuple(envs.raw(name) for name in _PLAN_KNOBS)


def prepare(device: int, batch: int, next_n: int, varlen: bool, num_sms: int,
            split_kv: int, schedule: str) -> Launcher:
    """Plan, build (compile or load from cache) and load the kernels for a shape."""
    key = (device, batch, next_n, varlen, num_sms, split_kv, schedule, _env_token())
    hit = _launchers.get(key)
    if hit is not None:
        return hit
    p = plan_for(batch, next_n, varlen, num_sms, split_kv, schedule, device)
    capturing = torch.cuda.is_current_stream_capturing()
    lim = device_limits(device)
    key_, *_ = jit_build.key_for(p.code)
    if capturing and (device, key_) not in runtime.loaded_modules():
        raise CaptureCompileError(
            f"jitmeta: the first call for {p.code.name} (batch {batch}) happens inside "
            "CUDA-graph capture, where it would compile and load a kernel. Warm it "
            "before capturing: call jitmeta.warm(...) or run the same call once eagerly "
            f"(or at build time: {jit_build.warm_command(p)})")
    built = jit_build.build(p.code, p)
    max_dyn = lim.smem_optin_bytes - p.smem_static_bytes if p.variant == "dynamic" else 0
    mod = runtime.load_module(device, built.key, built.cubin, built.names, max_dyn)
    launcher = Launcher(
        device=device, plan=p, emit=mod.functions["jitmeta_emit"],
        summarize=mod.functions.get("jitmeta_summarize"), threads=p.threads, grid=p.grid,
        dyn_smem=p.smem_dynamic_bytes, ws_words=p.grid * (4 if varlen else 1)
        if p.variant == "chunked" else 0)
    with _launchers_lock:
        _launchers[key] = launcher
        while len(_launchers) > _MAX_LAUNCHERS:
            _launchers.popitem(last=False)
    return launcher


# Workspace of the chunked variant, per (device, stream): grown, never freed while a
# captured graph may still use an older buffer.
_workspaces: dict[tuple[int, int], list[torch.Tensor]] = {}


def _workspace(device: int, stream: int, words: int) -> int:
    bufs = _workspaces.get((device, stream))
    if bufs and bufs[-1].numel() >= words:
        return bufs[-1].data_ptr()
    size = max(words, 2 * bufs[-1].numel() if bufs else 1024)
    buf = torch.empty(size, dtype=torch.int32, device=f"cuda:{device}")
    _workspaces.setdefault((device, stream), []).append(buf)
    return buf.data_ptr()


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
        Launch with programmatic dependent launch (CUDA only).

    Returns
    -------
    torch.Tensor
        int32 ``[num_sms + 1, 2]``: row ``s`` starts SM ``s``; row ``num_sms`` is the end.
    """
    ctx2, batch, next_n = validate(context_lens, block_kv, num_sms, indices, out, split_kv,
                                   schedule)
    if envs.get("JITMETA_CHECK_INPUTS"):
        check_values(ctx2, indices, split_kv)
    if not ctx2.is_cuda:
        res = reference_schedule(ctx2, num_sms, indices, split_kv=split_kv, schedule=schedule)
        if out is None:
            return res
        out.copy_(res)
        return out
    device = ctx2.device.index if ctx2.device.index is not None else torch.cuda.current_device()
    launcher = prepare(device, batch, next_n, indices is not None, num_sms, split_kv,
                       schedule)
    if out is None:
        out = torch.empty((num_sms + 1, 2), dtype=torch.int32, device=ctx2.device)
    stream = torch.cuda.current_stream(device).cuda_stream
    ws = _workspace(device, stream, launcher.ws_words) if launcher.ws_words else 0
    with runtime.device_context(device):
        launcher(ctx2.data_ptr(), indices.data_ptr() if indices is not None else 0, batch,
                 next_n, num_sms, out.data_ptr(), stream, ws, pdl)
    return out
