"""The public surface: the drop-in function, the planner view and the oracle.

``get_paged_mqa_logits_metadata`` is a drop-in for DeepGEMM's function of the same
name. CUDA tensors run the JIT kernel on the tensor's device and current stream; CPU
tensors run the pure-PyTorch reference. Under ``torch.compile`` the call goes through
the ``jitmeta::paged_mqa_logits_metadata`` custom op (:mod:`jitmeta.ops`); eagerly it
does not, because the dispatcher would cost more than the whole call
(:func:`jitmeta.dispatch.eager`).
"""

from __future__ import annotations

import torch

from . import dispatch, kernels
from .heuristics.arch import limits_for_arch, normalize_arch
from .heuristics.plan import Plan
from .jit.runtime import CaptureCompileError
from .reference import reference_schedule as _reference
from .args import MAX_NUM_SMS, MAX_SPLIT_KV, InputValueError, bool_arg, describe, int_arg

__all__ = ["get_paged_mqa_logits_metadata", "plan", "reference_schedule",
           "InputValueError", "CaptureCompileError", "require_cuda_device"]

_is_compiling = torch.compiler.is_compiling


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  indices: torch.Tensor | None = None, *,
                                  out: torch.Tensor | None = None, split_kv: int = 256,
                                  schedule: str = "smxx", pdl: bool = False
                                  ) -> torch.Tensor:
    """Per-SM start rows of the paged MQA-logits schedule.

    Parameters
    ----------
    context_lens : torch.Tensor
        int32, contiguous, ``[batch, next_n]`` (``[batch]`` means ``next_n = 1``).
    block_kv : int
        KV block size; must divide ``split_kv`` (validated; does not change the result).
    num_sms : int
        SMs the consumer kernel uses (1 to 2^20); the result has ``num_sms + 1`` rows.
    indices : torch.Tensor, optional
        int32 ``[batch]`` token -> request map (varlen/prefill); needs ``next_n == 1``.
    out : torch.Tensor, optional
        Preallocated int32 ``[num_sms + 1, 2]`` on the same device (CUDA graphs).
    split_kv : int
        KV tokens per split (default 256; 1 to 2^30).
    schedule : {"smxx", "sm90", "sm100"}
        Row format (``docs/schedule.md``): which one a consumer reads is in the README.
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
    return dispatch.eager(context_lens, block_kv, num_sms, indices, out, split_kv,
                          schedule, pdl)


def _through_op(context_lens, block_kv, num_sms, indices, out, split_kv, schedule, pdl):
    """The traceable form: one custom op, checked by its fake implementation."""
    ops = torch.ops.jitmeta
    if out is None:
        return ops.paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices,
                                             split_kv, schedule, pdl)
    ops.paged_mqa_logits_metadata_out(context_lens, block_kv, num_sms, out, indices,
                                      split_kv, schedule, pdl)
    return out


def require_cuda_device(device) -> int:
    """``device`` as the index of a CUDA device that exists, or a clear error."""
    index = int_arg("device", device, 0)
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={index} needs a CUDA GPU, but torch sees none (torch "
                           f"{torch.__version__}, CUDA build: {torch.version.cuda}); give "
                           "an arch instead (e.g. arch='sm_90') to plan or warm without "
                           "a GPU")
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device must be a CUDA device index below {count}; got {index}")
    return index


def plan(batch: int, next_n: int = 1, varlen: bool = False, num_sms: int | None = None,
         split_kv: int = 256, schedule: str = "smxx", *, arch: str | None = None,
         device: int | None = None) -> Plan:
    """The variant decision for a shape, with the numbers behind it.

    Limits come from ``arch`` (a named arch table, no GPU needed) or CUDA ``device``
    (default: the current device when one is present, else ``sm_90``). ``num_sms``
    defaults to the device's (or the arch table's) SM count.
    """
    batch = int_arg("batch", batch, 1)
    next_n = int_arg("next_n", next_n, 1)
    varlen = bool_arg("varlen", varlen)
    if varlen and next_n != 1:
        raise ValueError(f"varlen=True requires next_n == 1; got next_n={next_n}")
    if num_sms is not None:
        num_sms = int_arg("num_sms", num_sms, 1, MAX_NUM_SMS)
    split_kv = int_arg("split_kv", split_kv, 1, MAX_SPLIT_KV)
    if not isinstance(schedule, str) or schedule not in kernels.SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(kernels.SCHEDULES)}; got "
                         f"{schedule!r}")
    if arch is not None and device is not None:
        raise ValueError("give arch or device, not both")
    if arch is not None:
        limits = limits_for_arch(normalize_arch(arch), num_sms)
    elif device is None and not torch.cuda.is_available():
        limits = limits_for_arch("sm_90", num_sms)
    else:
        index = torch.cuda.current_device() if device is None else require_cuda_device(device)
        limits = dispatch.device_limits(index)
    return kernels.plan(batch, next_n, varlen, num_sms or limits.sm_count, split_kv,
                        schedule, limits)


def reference_schedule(context_lens: torch.Tensor, num_sms: int,
                       indices: torch.Tensor | None = None, *, split_kv: int = 256,
                       schedule: str = "smxx") -> torch.Tensor:
    """The exact schedule, computed with PyTorch ops on the input's device (the oracle).

    Same arguments and result as :func:`get_paged_mqa_logits_metadata` (without
    ``block_kv``/``out``); no kernel, no compiler.
    """
    if not isinstance(context_lens, torch.Tensor):
        raise TypeError(f"context_lens must be a torch.Tensor; got {describe(context_lens)}")
    num_sms = int_arg("num_sms", num_sms, 1, MAX_NUM_SMS)
    split_kv = int_arg("split_kv", split_kv, 1, MAX_SPLIT_KV)
    if not isinstance(schedule, str) or schedule not in kernels.SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(kernels.SCHEDULES)}; got "
                         f"{schedule!r}")
    return _reference(context_lens, num_sms, indices, split_kv=split_kv, schedule=schedule)
