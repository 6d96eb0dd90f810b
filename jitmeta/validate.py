"""Argument checks of the public API: every error names the argument, what was expected
and what was given, before anything is planned, compiled or launched.

Bounds (documented in the README): ``num_sms`` and ``split_kv`` as in :mod:`jitmeta.args`;
``block_kv`` 1 to ``split_kv`` and dividing it; row indices (``batch x atoms``, or
tokens for "sm100") must fit int32.
"""

from __future__ import annotations

import torch

from .args import (INT32_MAX, MAX_NUM_SMS, MAX_SPLIT_KV, UINT32_MAX, InputValueError,
                   describe, int_arg)

__all__ = ["validate", "check_values"]


def validate(context_lens, block_kv, num_sms, indices, out, split_kv, schedule,
             schedules: tuple[str, ...], *, pdl: bool = False, fake: bool = False
             ) -> tuple[torch.Tensor, int, int]:
    """Check every argument; returns (context_lens as 2-D, batch, next_n).

    ``fake=True`` is the custom op's fake (meta) implementation: sizes and scalars may
    be symbolic there, and there is no data pointer to check for alignment.
    """
    if not isinstance(context_lens, torch.Tensor):
        raise TypeError(f"context_lens must be a torch.Tensor; got {describe(context_lens)}")
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
    num_sms = int_arg("num_sms", num_sms, 1, MAX_NUM_SMS, symbolic=fake)
    split_kv = int_arg("split_kv", split_kv, 1, MAX_SPLIT_KV, symbolic=fake)
    block_kv = int_arg("block_kv", block_kv, 1, symbolic=fake)
    if split_kv % block_kv:
        raise ValueError(f"block_kv must divide split_kv; got block_kv={block_kv}, "
                         f"split_kv={split_kv}")
    if not isinstance(schedule, str) or schedule not in schedules:
        raise ValueError(f"schedule must be one of {', '.join(schedules)}; got {schedule!r}")
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool; got {describe(pdl)}")
    if schedule == "sm100":
        rows, what = batch * next_n, f"batch {batch} x next_n {next_n} tokens"
    else:
        rows = batch * (-(-next_n // 2) if next_n >= 2 else 1)
        what = f"batch {batch} x {rows // batch} atoms"
    if rows > INT32_MAX:
        raise ValueError(f"context_lens {what} exceeds int32 row indices")
    if indices is not None:
        if not isinstance(indices, torch.Tensor):
            raise TypeError(f"indices must be a torch.Tensor or None; got {describe(indices)}")
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
            raise TypeError(f"out must be a torch.Tensor or None; got {describe(out)}")
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


def check_values(ctx2: torch.Tensor, indices, split_kv: int, schedule: str) -> None:
    """The value checks a kernel needs (negative lengths; for the atom formats, a total
    past uint32). Reads the values, so on CUDA it synchronizes (JITMETA_CHECK_INPUTS=1
    only); the CPU path always runs it."""
    from .reference import varlen_atoms

    flat = ctx2.reshape(-1)
    if bool((flat < 0).any()):
        bad = int(torch.nonzero(flat < 0)[0])
        raise InputValueError(f"context_lens must be >= 0; element {bad} (flat index) is "
                              f"{int(flat[bad])}")
    if schedule == "sm100":  # 64-bit work sums: no total can overflow
        return
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
