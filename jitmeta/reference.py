"""Pure-PyTorch schedule (SPEC section 2): the CPU path and the tests' oracle.

Vectorized (cumsum + searchsorted), in int64, which equals the kernel's uint32
arithmetic whenever the total number of work units fits in uint32 (the caller's
contract; ``JITMETA_CHECK_INPUTS=1`` verifies it).
"""

from __future__ import annotations

import torch

__all__ = ["reference_schedule", "sm_starts", "varlen_atoms"]


def sm_starts(total: torch.Tensor | int, num_sms: int, schedule: str,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """``start(s)`` for s = 0..num_sms (int64), for either schedule format."""
    total = int(total)
    q, r = divmod(total, num_sms)
    s = torch.arange(num_sms + 1, dtype=torch.int64, device=device)
    if schedule == "smxx":
        return s * q + torch.clamp(s, max=r)
    if schedule == "sm90":
        pivot = num_sms - r
        return s * q + torch.clamp(s - pivot, min=0)
    raise ValueError(f"schedule must be 'smxx' or 'sm90', got {schedule!r}")


def varlen_atoms(context_lens: torch.Tensor, indices: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_start, atom_ctx) of the greedy atoms: within each run of equal
    consecutive ``indices``, atoms start at even offsets from the run start and take
    the context length of their last token."""
    ctx = context_lens.reshape(-1).to(torch.int64)
    idx = indices.reshape(-1)
    b = ctx.numel()
    t = torch.arange(b, dtype=torch.int64, device=ctx.device)
    boundary = torch.ones(b, dtype=torch.bool, device=ctx.device)
    boundary[1:] = idx[1:] != idx[:-1]
    run_start = torch.cummax(torch.where(boundary, t, torch.zeros_like(t)), dim=0).values
    is_start = (t - run_start) % 2 == 0
    pairs_next = torch.zeros(b, dtype=torch.bool, device=ctx.device)
    pairs_next[:-1] = ~boundary[1:]  # token t+1 continues t's run
    last = torch.where(is_start & pairs_next, t + 1, t)
    starts = t[is_start]
    return starts, ctx[last[is_start]]


def reference_schedule(context_lens: torch.Tensor, num_sms: int,
                       indices: torch.Tensor | None = None, *, split_kv: int = 256,
                       schedule: str = "smxx") -> torch.Tensor:
    """The exact schedule as an int32 ``[num_sms + 1, 2]`` tensor on the input's device.

    ``context_lens`` is ``[batch, next_n]`` (or ``[batch]``); ``indices`` (varlen)
    requires ``next_n == 1``. No argument checking beyond shapes: the public
    :func:`jitmeta.get_paged_mqa_logits_metadata` validates.
    """
    ctx2 = context_lens.reshape(context_lens.shape[0], -1) if context_lens.dim() == 1 \
        else context_lens
    batch, next_n = ctx2.shape
    dev = ctx2.device
    if indices is None:
        atom = 2 if next_n >= 2 else 1
        a = -(-next_n // atom)
        segs = (ctx2[:, -1].to(torch.int64) + split_kv - 1) // split_kv
        prefix = torch.cumsum(segs, 0) * a
        total = int(prefix[-1]) if batch else 0
        starts = sm_starts(total, num_sms, schedule, dev)
        qi = torch.searchsorted(prefix, starts, right=True)
        inside = qi < batch
        qc = torch.clamp(qi, max=batch - 1)
        before = torch.where(qi > 0, prefix[torch.clamp(qi - 1, min=0)],
                             torch.zeros_like(qi))
        off = starts - before
        n = torch.where(inside, segs[qc], torch.zeros_like(qi))
        safe_n = torch.clamp(n, min=1)
        col0 = torch.where(n > 0, qi * a + off // safe_n, qi * a)
        col1 = torch.where(n > 0, off % safe_n, torch.zeros_like(off))
        out = torch.stack((col0, col1), dim=1)
        if schedule == "sm90":
            out[num_sms, 0] = batch * a
            out[num_sms, 1] = 0
        return out.to(torch.int32)
    token_start, atom_ctx = varlen_atoms(ctx2[:, 0], indices)
    segs = (atom_ctx + split_kv - 1) // split_kv
    prefix = torch.cumsum(segs, 0)
    total = int(prefix[-1]) if prefix.numel() else 0
    starts = sm_starts(total, num_sms, schedule, dev)
    ai = torch.searchsorted(prefix, starts, right=True)
    m = prefix.numel()
    col0 = torch.where(ai < m, token_start[torch.clamp(ai, max=m - 1)],
                       torch.full_like(ai, batch))
    before = torch.where(ai > 0, prefix[torch.clamp(ai - 1, min=0)], torch.zeros_like(ai))
    return torch.stack((col0, starts - before), dim=1).to(torch.int32)
