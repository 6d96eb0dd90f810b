"""Pure-PyTorch schedule (docs/schedule.md): the CPU path and the tests' oracle.

Vectorized (cumsum + searchsorted), in int64. For "smxx"/"sm90" that equals the
kernel's uint32 arithmetic whenever the total number of work units fits in uint32 (the
caller's contract; ``JITMETA_CHECK_INPUTS=1`` verifies it); "sm100" sums its work in
64 bits, as its kernel does.
"""

from __future__ import annotations

import torch

__all__ = ["reference_schedule", "sm_starts", "varlen_atoms", "sm100_requests"]

SCHEDULE_FORMATS = ("smxx", "sm90", "sm100")


def sm_starts(total: torch.Tensor | int, num_sms: int, schedule: str,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """``start(s)`` for s = 0..num_sms (int64), for any schedule format ("sm100"
    splits its work as "smxx" does)."""
    total = int(total)
    q, r = divmod(total, num_sms)
    s = torch.arange(num_sms + 1, dtype=torch.int64, device=device)
    if schedule in ("smxx", "sm100"):
        return s * q + torch.clamp(s, max=r)
    if schedule == "sm90":
        pivot = num_sms - r
        return s * q + torch.clamp(s - pivot, min=0)
    raise ValueError(f"schedule must be one of {SCHEDULE_FORMATS}, got {schedule!r}")


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


def sm100_requests(context_lens: torch.Tensor, indices: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(start_token, tokens, ctx) of the "sm100" requests, int64.

    Non-varlen (``context_lens`` ``[B, N]``): request r starts at token r*N, has N
    tokens and the length of its last column. Varlen (``N == 1``): a request is a
    maximal run of equal consecutive ``indices``, with the length of its last token.
    """
    batch, next_n = context_lens.shape
    dev = context_lens.device
    if indices is None:
        start = torch.arange(batch, dtype=torch.int64, device=dev) * next_n
        tokens = torch.full((batch,), next_n, dtype=torch.int64, device=dev)
        return start, tokens, context_lens[:, -1].to(torch.int64)
    idx = indices.reshape(-1)
    boundary = torch.ones(batch, dtype=torch.bool, device=dev)
    boundary[1:] = idx[1:] != idx[:-1]
    start = torch.nonzero(boundary).flatten().to(torch.int64)
    end = torch.empty_like(start)  # the last token of each run
    end[:-1] = start[1:] - 1
    end[-1:] = batch - 1
    return start, end - start + 1, context_lens[end, 0].to(torch.int64)


def _sm100_schedule(ctx2: torch.Tensor, num_sms: int, indices: torch.Tensor | None,
                    split_kv: int) -> torch.Tensor:
    batch, next_n = ctx2.shape
    start, tokens, ctx = sm100_requests(ctx2, indices)
    work = (ctx + split_kv - 1) // split_kv * tokens
    prefix = torch.cumsum(work, 0)
    n = prefix.numel()
    total = int(prefix[-1]) if n else 0
    w = sm_starts(total, num_sms, "sm100", ctx2.device)
    if n == 0:  # no tokens: every row is the end sentinel (0, 0)
        return torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=ctx2.device)
    i = torch.searchsorted(prefix, w, right=True)
    inside = i < n
    ic = torch.clamp(i, max=max(n - 1, 0))
    before = torch.where(i > 0, prefix[torch.clamp(i - 1, min=0)], torch.zeros_like(i))
    col0 = torch.where(inside, start[ic], torch.full_like(i, batch * next_n))
    col1 = torch.where(inside, (w - before) // tokens[ic], torch.zeros_like(i))
    return torch.stack((col0, col1), dim=1).to(torch.int32)


def reference_schedule(context_lens: torch.Tensor, num_sms: int,
                       indices: torch.Tensor | None = None, *, split_kv: int = 256,
                       schedule: str = "smxx") -> torch.Tensor:
    """The exact schedule as an int32 ``[num_sms + 1, 2]`` tensor on the input's device.

    ``context_lens`` is ``[batch, next_n]`` (or ``[batch]``); ``indices`` (varlen)
    requires ``next_n == 1``. ``schedule``: "smxx", "sm90" (rows are ``(q_atom_idx,
    kv_split_idx)``) or "sm100" (rows are ``(q_token_idx, kv_split_idx)``). No argument checking beyond shapes: the public
    :func:`jitmeta.get_paged_mqa_logits_metadata` validates.
    """
    ctx2 = context_lens.reshape(context_lens.shape[0], -1) if context_lens.dim() == 1 \
        else context_lens
    batch, next_n = ctx2.shape
    dev = ctx2.device
    if schedule == "sm100":
        return _sm100_schedule(ctx2, num_sms, indices, split_kv)
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
