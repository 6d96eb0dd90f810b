"""A deliberately naive, line-by-line pure-Python reading of the schedule semantics
(docs/schedule.md).

This is the tests' independent oracle for :func:`jitmeta.reference_schedule`. It
uses only plain lists and ints (no torch, no numpy), masks every addition and
multiplication to uint32 exactly as the kernel's arithmetic does, forms varlen atoms
with a serial greedy loop and finds each SM's start with a linear upper-bound scan.
It is written for clarity, not speed; its steps are numbered in the order
docs/schedule.md describes them.

Format "sm100" (its own numbered steps) sums work in 64 bits: its oracle uses plain,
unbounded Python ints and never masks.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF

SCHEDULE_FORMATS = ("smxx", "sm90", "sm100")


def u32(x: int) -> int:
    """Wrap a Python int to uint32."""
    return x & MASK32


def ceil_div_u32(x: int, d: int) -> int:
    """ceil(x / d) as the kernel computes it: (x + d - 1) / d in uint32."""
    return u32(u32(x) + d - 1) // d


def start_of(s: int, total: int, num_sms: int, schedule: str) -> int:
    """Non-varlen step 4 (also varlen step 3): start(s)."""
    q_ = total // num_sms  # step 4: q_ = total // S
    r = total % num_sms  # step 4: r = total % S
    if schedule == "smxx":
        # step 4, "smxx": start(s) = s*q_ + min(s, r)
        return u32(u32(s * q_) + min(s, r))
    if schedule == "sm90":
        # step 4, "sm90": pivot = S - r; start(s) = s*q_ + (s - pivot if s > pivot else 0)
        pivot = num_sms - r
        extra = s - pivot if s > pivot else 0
        return u32(u32(s * q_) + extra)
    raise ValueError(f"schedule must be one of {SCHEDULE_FORMATS}, got {schedule!r}")


def upper_bound(sorted_vals: list[int], value: int) -> int:
    """Number of leading entries <= value (linear scan; the list is non-decreasing)."""
    i = 0
    while i < len(sorted_vals) and sorted_vals[i] <= value:
        i += 1
    return i


def _schedule_non_varlen(context_lens, num_sms, split_kv, schedule):
    B = len(context_lens)
    N = len(context_lens[0])

    # Step 1: ctx[q] = context_lens[q, N-1] (last column); segs[q] = ceil(ctx[q] / split_kv).
    ctx = [u32(context_lens[q][N - 1]) for q in range(B)]
    segs = [ceil_div_u32(ctx[q], split_kv) for q in range(B)]

    # Step 2: atom = 2 if N >= 2 else 1; A = ceil(N / atom).
    atom = 2 if N >= 2 else 1
    A = (N + atom - 1) // atom

    # Step 3: P = inclusive prefix sum of segs; total = P[B-1] * A.
    P = []
    running = 0
    for q in range(B):
        running = u32(running + segs[q])
        P.append(running)
    PA = [u32(P[q] * A) for q in range(B)]  # P[q]*A, used by steps 3 and 5
    total = PA[B - 1]

    rows = []
    for s in range(num_sms + 1):
        # Step 4: start(s) in the requested format.
        start = start_of(s, total, num_sms, schedule)

        # Step 5: qi = number of q with P[q]*A <= start(s) (upper bound).
        qi = upper_bound(PA, start)
        # off = start(s) - (P[qi-1]*A if qi > 0 else 0)
        before = PA[qi - 1] if qi > 0 else 0
        off = u32(start - before)
        # n = segs[qi] if qi < B else 0
        n = segs[qi] if qi < B else 0
        # Row s = (qi*A + off // n, off % n) if n > 0, else (qi*A, 0).
        if n > 0:
            rows.append((u32(u32(qi * A) + off // n), off % n))
        else:
            rows.append((u32(qi * A), 0))

    # Step 4, "sm90": row S is forced to (B*A, 0).
    if schedule == "sm90":
        rows[num_sms] = (u32(B * A), 0)
    return rows


def _schedule_varlen(context_lens, num_sms, indices, split_kv, schedule):
    B = len(context_lens)
    if len(indices) != B:
        raise ValueError(f"indices has {len(indices)} entries, context_lens has {B}")
    if any(len(row) != 1 for row in context_lens):
        raise ValueError("varlen mode requires next_n == 1")
    lens = [row[0] for row in context_lens]

    # Step 1: greedy atoms from the left. At token t, if t+1 < B and
    # indices[t] == indices[t+1], tokens t and t+1 form one atom with context
    # length context_lens[t+1] and t advances by 2; otherwise token t alone is an
    # atom with context_lens[t] and t advances by 1.
    token_start = []
    atom_ctx = []
    t = 0
    while t < B:
        if t + 1 < B and indices[t] == indices[t + 1]:
            token_start.append(t)
            atom_ctx.append(u32(lens[t + 1]))
            t += 2
        else:
            token_start.append(t)
            atom_ctx.append(u32(lens[t]))
            t += 1
    M = len(token_start)

    # Step 2: segs[a] = ceil(atom_ctx[a] / split_kv); P = inclusive prefix sum; total = P[M-1].
    segs = [ceil_div_u32(c, split_kv) for c in atom_ctx]
    P = []
    running = 0
    for a in range(M):
        running = u32(running + segs[a])
        P.append(running)
    total = P[M - 1]

    rows = []
    for s in range(num_sms + 1):
        # Step 3: start(s) as in the non-varlen step 4 (no forced tail row for sm90).
        start = start_of(s, total, num_sms, schedule)
        # Step 4: a = upper bound of start(s) in P;
        # row s = (token_start[a] if a < M else B, start(s) - (P[a-1] if a > 0 else 0)).
        a = upper_bound(P, start)
        q_col = token_start[a] if a < M else B
        before = P[a - 1] if a > 0 else 0
        rows.append((q_col, u32(start - before)))
    return rows


def _schedule_sm100(context_lens, num_sms, indices, split_kv):
    B = len(context_lens)
    N = len(context_lens[0])
    T = B * N

    # Step 1: the requests, as (start token, number of tokens, ctx).
    starts, tokens, ctxs = [], [], []
    if indices is None:
        # request r starts at token r*N, has N tokens, ctx = context_lens[r][N-1]
        for r in range(B):
            starts.append(r * N)
            tokens.append(N)
            ctxs.append(context_lens[r][N - 1])
    else:
        if len(indices) != B:
            raise ValueError(f"indices has {len(indices)} entries, context_lens has {B}")
        if N != 1:
            raise ValueError("varlen mode requires next_n == 1")
        # a request is a maximal run of equal consecutive indices; ctx is the context
        # length of the run's last token
        t = 0
        while t < B:
            u = t
            while u + 1 < B and indices[u + 1] == indices[t]:
                u += 1
            starts.append(t)
            tokens.append(u - t + 1)
            ctxs.append(context_lens[u][0])
            t = u + 1
    R = len(starts)

    # Step 2: work[r] = ceil(ctx / split_kv) * tokens[r]; W = inclusive prefix sum (no
    # wrap); total = W[R-1], 0 if there are no requests.
    W = []
    running = 0
    for r in range(R):
        segs = (ctxs[r] + split_kv - 1) // split_kv
        running += segs * tokens[r]
        W.append(running)
    total = W[R - 1] if R > 0 else 0

    # Step 3: q_ = total // S, r_ = total % S.
    q_ = total // num_sms
    r_ = total % num_sms

    rows = []
    for s in range(num_sms + 1):
        # Step 3: w(s) = s*q_ + min(s, r_).
        w = s * q_ + min(s, r_)
        # Step 4: i = first request with W[i] > w(s).
        i = upper_bound(W, w)
        if i < R:
            before = W[i - 1] if i > 0 else 0
            rows.append((starts[i], (w - before) // tokens[i]))
        else:
            rows.append((T, 0))
    return rows


def spec_schedule(context_lens, num_sms, indices=None, split_kv=256, schedule="smxx"):
    """The schedule: ``num_sms + 1`` ``(q, kv)`` tuples (uint32 values;
    for "sm100" exact integers).

    ``context_lens`` is a list of lists ``[batch][next_n]`` of ints (a flat list of
    ints is accepted as ``[batch][1]``); ``indices`` is a list of ints or None.
    """
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
    if schedule not in SCHEDULE_FORMATS:
        raise ValueError(f"schedule must be one of {SCHEDULE_FORMATS}, got {schedule!r}")
    context_lens = [list(row) if isinstance(row, (list, tuple)) else [row]
                    for row in context_lens]
    if not context_lens or not context_lens[0]:
        raise ValueError("context_lens must be non-empty [batch][next_n]")
    if schedule == "sm100":
        return _schedule_sm100(context_lens, num_sms,
                               None if indices is None else list(indices), split_kv)
    if indices is None:
        return _schedule_non_varlen(context_lens, num_sms, split_kv, schedule)
    return _schedule_varlen(context_lens, num_sms, list(indices), split_kv, schedule)
