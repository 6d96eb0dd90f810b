"""Format "sm100": ``jitmeta.reference_schedule`` against the naive oracle.

The oracle (``spec_oracle.spec_schedule(..., schedule="sm100")``) builds the requests
with plain loops and sums work in unbounded Python ints; the reference is vectorized
torch in int64. Also here: a Python model of the kernel's varlen scan summary (the
composable summary of a run of tokens in templates/jitmeta_sm100.cuh), checked for
associativity and against the oracle's totals.

Randomness is fresh on every run; the seed is printed and named in every assertion
message. Rerun with ``JITMETA_TEST_SEED=<seed> pytest tests/test_reference_sm100.py``.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from jitmeta import reference_schedule
from jitmeta.reference import sm100_requests

try:
    from spec_oracle import spec_schedule
except ImportError:  # tests/ imported as a package
    from tests.spec_oracle import spec_schedule

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

INT32_MAX = 2**31 - 1
MASK64 = 2**64 - 1


def oracle(ctx, num_sms, indices=None, split_kv=256) -> torch.Tensor:
    rows = spec_schedule(ctx, num_sms, indices, split_kv, "sm100")
    for q, k in rows:
        assert 0 <= q <= INT32_MAX and 0 <= k <= INT32_MAX, (q, k)
    return torch.tensor(rows, dtype=torch.int32)


def reference(ctx, num_sms, indices=None, split_kv=256) -> torch.Tensor:
    t = torch.tensor(ctx, dtype=torch.int32)
    idx = None if indices is None else torch.tensor(indices, dtype=torch.int32)
    return reference_schedule(t, num_sms, idx, split_kv=split_kv, schedule="sm100")


def check(ctx, num_sms, indices=None, split_kv=256, label=""):
    got = reference(ctx, num_sms, indices, split_kv)
    want = oracle(ctx, num_sms, indices, split_kv)
    assert got.dtype == torch.int32 and tuple(got.shape) == (num_sms + 1, 2)
    if not torch.equal(got, want):
        rows = (got != want).any(dim=1).nonzero().flatten()[:4].tolist()
        detail = [(r, got[r].tolist(), want[r].tolist()) for r in rows]
        pytest.fail(f"{label}: reference != oracle at (row, reference, oracle) {detail}; "
                    f"batch={len(ctx)} next_n={len(ctx[0])} num_sms={num_sms} "
                    f"split_kv={split_kv} varlen={indices is not None} ({SEED_NOTE})")


def column(lens):
    return [[v] for v in lens]


# --- the oracle on hand-worked examples ---------------------------------------------

def test_oracle_hand_worked_dense():
    # requests: ctx 10 -> 1 split x 2 tokens = 2 units; ctx 513 -> 3 x 2 = 6; total 8,
    # 4 SMs: w = 0, 2, 4, 6, 8
    rows = spec_schedule([[300, 10], [0, 513]], 4, None, 256, "sm100")
    assert rows == [(0, 0), (2, 0), (2, 1), (2, 2), (4, 0)]


def test_oracle_hand_worked_varlen():
    # runs [0, 1] (ctx of token 1: 0 -> no work), [2] (600 -> 3 units), [3, 4, 5]
    # (ctx 256 -> 1 split x 3 tokens); W = 0, 3, 6; 5 SMs: q = 1, r = 1,
    # w = 0, 2, 3, 4, 5, 6
    rows = spec_schedule(column([7, 0, 600, 1, 1, 256]), 5, [4, 4, 9, 4, 4, 4], 256,
                         "sm100")
    assert rows == [(2, 0), (2, 2), (3, 0), (3, 0), (3, 0), (6, 0)]


def test_oracle_hand_worked_kv_split_index():
    # one run of 4 tokens with 2 splits each: 8 units, w(s) = 2s -> split index w // 4
    rows = spec_schedule(column([0, 0, 0, 512]), 4, [1, 1, 1, 1], 256, "sm100")
    assert rows == [(0, 0), (0, 0), (0, 1), (0, 1), (4, 0)]


def test_oracle_does_not_wrap_past_2_32():
    # 3 requests of 2^31 - 1 splits each (split_kv 1): a uint32 sum would wrap
    rows = spec_schedule([[INT32_MAX]] * 3, 2, None, 1, "sm100")
    total = 3 * INT32_MAX
    assert rows[1] == (1, total // 2 + 1 - INT32_MAX)  # w(1) = q + 1 (total is odd)
    assert rows[2] == (3, 0)


# --- edge cases ---------------------------------------------------------------------------

@pytest.mark.parametrize("varlen,next_n", [(True, 1), (False, 1), (False, 2), (False, 3),
                                           (False, 4)])
@pytest.mark.parametrize("length", [0, 1, 255, 256, 257, INT32_MAX])
def test_batch_one(varlen, next_n, length):
    for num_sms in (1, 3, 132, 4096):
        ctx = [[length] * next_n]
        check(ctx, num_sms, [5] if varlen else None, label="B=1")


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
@pytest.mark.parametrize("batch", [32, 64, 96, 1024])
def test_batch_multiple_of_32(varlen, batch):
    rng = random.Random(f"{SEED}/m32/{varlen}/{batch}")
    for num_sms in (1, 7, 132, batch, batch + 3):
        next_n = 1 if varlen else rng.randint(1, 4)
        ctx = [[rng.randint(0, 5000) for _ in range(next_n)] for _ in range(batch)]
        idx = runs(rng, batch) if varlen else None
        check(ctx, num_sms, idx, label="B multiple of 32")


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
@pytest.mark.parametrize("num_sms", [1, 5, 132, 5000])
def test_all_lengths_zero(varlen, num_sms):
    batch, next_n = 70, 1 if varlen else 3
    ctx = [[0] * next_n for _ in range(batch)]
    idx = [i // 3 for i in range(batch)] if varlen else None
    want = [[batch * next_n, 0]] * (num_sms + 1)
    assert [list(r) for r in spec_schedule(ctx, num_sms, idx, 256, "sm100")] == want
    assert reference(ctx, num_sms, idx).tolist() == want


@pytest.mark.parametrize("num_sms", [1, 2, 132, 4096])
def test_one_run_covers_the_batch(num_sms):
    rng = random.Random(f"{SEED}/onerun/{num_sms}")
    batch = rng.randint(1, 600)
    lens = [rng.randint(0, 70000) for _ in range(batch)]
    check(column(lens), num_sms, [3] * batch, label="one run")
    # only the last token's length counts: the rows are (0, w(s) // batch) or (T, 0)
    got = reference(column(lens), num_sms, [3] * batch)
    total = -(-lens[-1] // 256) * batch
    q, r = divmod(total, num_sms)
    for s in range(num_sms + 1):
        w = s * q + min(s, r)
        assert got[s].tolist() == ([0, w // batch] if w < total else [batch, 0]), SEED_NOTE


@pytest.mark.parametrize("num_sms", [1, 3, 132, 4096])
def test_every_token_its_own_run(num_sms):
    rng = random.Random(f"{SEED}/distinct/{num_sms}")
    batch = rng.randint(1, 500)
    lens = [rng.choice((0, 1, 255, 256, 257, rng.randint(0, 10**5))) for _ in range(batch)]
    check(column(lens), num_sms, list(range(batch)), label="distinct")
    # equal to the dense format with next_n = 1
    assert torch.equal(reference(column(lens), num_sms, list(range(batch))),
                       reference(column(lens), num_sms))


def test_non_adjacent_repeats_are_separate_runs():
    idx = [1, 1, 2, 1, 1, 1, 2, 2]
    lens = [0, 300, 700, 5, 6, 513, 0, 256]
    for num_sms in (1, 2, 5, 17):
        check(column(lens), num_sms, idx, label="non-adjacent repeats")
    start, tokens, ctx = sm100_requests(torch.tensor(column(lens), dtype=torch.int32),
                                        torch.tensor(idx, dtype=torch.int32))
    assert start.tolist() == [0, 2, 3, 6] and tokens.tolist() == [2, 1, 3, 2]
    assert ctx.tolist() == [300, 700, 513, 256]


@pytest.mark.parametrize("delta", [-1, 0, 1])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_lengths_at_256k(delta, varlen):
    rng = random.Random(f"{SEED}/256k/{delta}/{varlen}")
    batch = rng.randint(1, 300)
    next_n = 1 if varlen else rng.randint(1, 4)
    ctx = [[rng.choice((2**18 + delta, rng.randint(0, 2**18))) for _ in range(next_n)]
           for _ in range(batch)]
    for num_sms in (1, 132, 3000):
        check(ctx, num_sms, runs(rng, batch) if varlen else None, label="256k +- 1")


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
@pytest.mark.parametrize("split_kv", [1, 64, 256])
def test_work_past_2_32(varlen, split_kv):
    """Many tokens of ~2^31 - 1: the total passes 2^32 (and 2^40 with split_kv 1)."""
    rng = random.Random(f"{SEED}/u64/{varlen}/{split_kv}")
    batch = rng.randint(600, 1000)
    next_n = 1 if varlen else rng.randint(1, 4)
    ctx = [[INT32_MAX - rng.randint(0, 300) for _ in range(next_n)] for _ in range(batch)]
    idx = runs(rng, batch) if varlen else None
    total = int(reference_total(ctx, idx, split_kv))
    assert total > 2**32
    for num_sms in (1, 3, 132, 4096):
        check(ctx, num_sms, idx, split_kv, label="past 2^32")


def test_num_sms_above_batch_and_large():
    rng = random.Random(f"{SEED}/sms")
    for varlen in (False, True):
        batch = rng.randint(1, 40)
        next_n = 1 if varlen else rng.randint(1, 4)
        ctx = [[rng.randint(0, 3000) for _ in range(next_n)] for _ in range(batch)]
        for num_sms in (batch + 1, 4096, 4097, 9000):
            check(ctx, num_sms, runs(rng, batch) if varlen else None, label="many SMs")


def test_unsorted_indices_and_one_d_input():
    rng = random.Random(f"{SEED}/unsorted")
    batch = 200
    idx = [rng.choice((5, -3, 99, 0)) for _ in range(batch)]
    lens = [rng.randint(0, 9000) for _ in range(batch)]
    check(column(lens), 11, idx, label="unsorted indices")
    one_d = reference_schedule(torch.tensor(lens, dtype=torch.int32), 11,
                               torch.tensor(idx, dtype=torch.int32), schedule="sm100")
    assert torch.equal(one_d, reference(column(lens), 11, idx))


def test_batch_2_24_closed_form():
    """B = 2^24 tokens (too many for the oracle's loops): every token its own run of
    one split (ctx 1..256) except a run of 3 at the end with ctx 257 (2 splits):
    request i < 2^24 - 3 covers work [i, i + 1), the last covers 6 units."""
    batch = 2**24
    ctx = torch.randint(1, 257, (batch, 1), dtype=torch.int32,
                        generator=torch.Generator().manual_seed(SEED & 0xFFFF))
    ctx[-1, 0] = 257
    idx = torch.arange(batch, dtype=torch.int32)
    idx[-3:] = -1
    num_sms = 132
    got = reference_schedule(ctx, num_sms, idx, schedule="sm100")
    last = batch - 3
    total = last + 6
    q, r = divmod(total, num_sms)
    for s in range(num_sms + 1):
        w = s * q + min(s, r)
        want = [w, 0] if w < last else ([last, (w - last) // 3] if w < total else [batch, 0])
        assert got[s].tolist() == want, (s, SEED_NOTE)


# --- random cases --------------------------------------------------------------------------

def runs(rng: random.Random, batch: int) -> list[int]:
    """Runs of 1..6 (sometimes long), ids reused so that some neighbours merge."""
    out, rid = [], 0
    while len(out) < batch:
        n = rng.randint(20, 200) if rng.random() < 0.1 else rng.randint(1, 6)
        out += [rid % 7 if rng.random() < 0.3 else rid] * n
        rid += 1
    return out[:batch]


def reference_total(ctx, idx, split_kv):
    c = torch.tensor(ctx, dtype=torch.int32)
    start, tokens, lens = sm100_requests(
        c, None if idx is None else torch.tensor(idx, dtype=torch.int32))
    return ((lens + split_kv - 1) // split_kv * tokens).sum()


@pytest.mark.parametrize("block", range(4))
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_random_vs_oracle(varlen, block):
    for k in range(40):
        rng = random.Random(f"{SEED}/random/{varlen}/{block}/{k}")
        batch = rng.choice((rng.randint(1, 10), rng.randint(1, 300), rng.randint(300, 900)))
        next_n = 1 if varlen else rng.randint(1, 5)
        kind = rng.choice(("small", "edges", "large", "zeros_mostly"))
        def length():
            if kind == "small":
                return rng.randint(0, 3000)
            if kind == "edges":
                return rng.choice((0, 1, 255, 256, 257, 511, 512, 513))
            if kind == "large":
                return rng.randint(0, INT32_MAX)
            return 0 if rng.random() < 0.9 else rng.randint(0, 10**6)
        ctx = [[length() for _ in range(next_n)] for _ in range(batch)]
        idx = runs(rng, batch) if varlen else None
        num_sms = rng.choice((1, 2, 3, 132, rng.randint(1, 5000)))
        split_kv = rng.choice((1, 64, 256, 1024))
        check(ctx, num_sms, idx, split_kv, label=f"random case {block}/{k} kind={kind}")


# --- the kernel's varlen summary, modelled in Python -------------------------------------

NONE = None


def summary_of(words, lo):
    """Summary of tokens [lo, lo + len(words) - 1): words are (seg, boundary) pairs,
    the last one the halo (the token after the segment). (lastb, closed, lead_seg):
    the leading run end (before the first boundary) at token e keeps its segs in
    lead_seg and adds lead_seg * (e + 1) to closed; its run start is subtracted when
    it becomes known."""
    lastb, closed, lead_seg, leads = NONE, 0, 0, 0
    for i in range(len(words) - 1):
        t = lo + i
        seg, bnd = words[i]
        if bnd:
            lastb = t
        if words[i + 1][1]:  # t ends a run
            if lastb is not NONE:
                closed = (closed + seg * (t - lastb + 1)) & MASK64
            else:
                leads += 1
                assert leads == 1, "two run ends before the first boundary"
                lead_seg = seg
                closed = (closed + seg * (t + 1)) & MASK64
    return (lastb, closed, lead_seg)


IDENTITY = (NONE, 0, 0)


def compose(a, b):
    """"a then b", as Sm100Summary<true>::compose."""
    has = a[0] is not NONE
    if not has:
        assert not (a[2] and b[2]), "both sides have a leading run end"
    closed = (a[1] + b[1] - (b[2] * a[0] if has else 0)) & MASK64
    lead_seg = a[2] if has else a[2] + b[2]
    return (b[0] if b[0] is not NONE else a[0], closed, lead_seg)


def words_of(lens, idx, split_kv):
    b = len(lens)
    out = []
    for t in range(b + 1):
        if t == b:
            out.append((0, True))
        else:
            out.append(((lens[t] + split_kv - 1) // split_kv, t == 0 or idx[t] != idx[t - 1]))
    return out


def test_summary_compose_is_associative_and_splits_anywhere():
    rng = random.Random(f"{SEED}/summary")
    for k in range(300):
        b = rng.randint(1, 60)
        lens = [rng.choice((0, 1, 300, INT32_MAX, rng.randint(0, 10**6))) for _ in range(b)]
        idx = runs(rng, b)
        split_kv = rng.choice((1, 256))
        words = words_of(lens, idx, split_kv)
        cuts = sorted(rng.sample(range(b + 1), rng.randint(0, min(4, b + 1))))
        bounds = [0, *cuts, b]
        parts = [summary_of(words[x:y + 1], x) for x, y in zip(bounds, bounds[1:])]
        whole = summary_of(words, 0)
        left = IDENTITY
        for p in parts:
            left = compose(left, p)
        right = IDENTITY
        for p in reversed(parts):
            right = compose(p, right)
        assert left == whole == right, (k, SEED_NOTE)
        assert compose(IDENTITY, whole) == whole == compose(whole, IDENTITY)
        if len(parts) >= 3:
            a, bb, c = parts[:3]
            assert compose(compose(a, bb), c) == compose(a, compose(bb, c)), (k, SEED_NOTE)
        # a prefix of the batch starts with a boundary: no leading run end, and its work
        # (closed) equals the sum of the requests' work
        assert whole[2] == 0
        assert whole[1] == int(reference_total(column(lens), idx, split_kv)), SEED_NOTE
        # an inner segment evaluated with its true incoming run start
        if cuts:
            x = cuts[0]
            rs = max(t for t in range(x) if words[t][1]) if x else 0
            inner = summary_of(words[x:b + 1], x)
            got = (inner[1] - inner[2] * rs) & MASK64
            prefix = summary_of(words[:x + 1], 0)
            assert got == (whole[1] - prefix[1]) & MASK64, SEED_NOTE


# --- the public API on the CPU path --------------------------------------------------------

def test_public_api_cpu_path_and_value_check():
    import jitmeta
    from jitmeta import args, envs, validate

    rng = random.Random(f"{SEED}/api")
    lens = [INT32_MAX - rng.randint(0, 1000) for _ in range(1500)]  # > 750 atoms of 2^23
    idx = runs(rng, 1500)
    c = torch.tensor(lens, dtype=torch.int32)
    i = torch.tensor(idx, dtype=torch.int32)
    assert int(reference_total(column(lens), idx, 256)) > 2**32
    with envs.override(JITMETA_CHECK_INPUTS=True):  # 64-bit work: no uint32 limit
        got = jitmeta.get_paged_mqa_logits_metadata(c, 64, 132, i, schedule="sm100")
    assert torch.equal(got, oracle(column(lens), 132, idx)), SEED_NOTE
    with pytest.raises(args.InputValueError, match="uint32"):  # the atom formats wrap
        validate.check_values(c.view(-1, 1), i, 256, "smxx")
    with pytest.raises(args.InputValueError, match=">= 0"):
        validate.check_values(torch.tensor([[5], [-1]], dtype=torch.int32), None, 256, "sm100")
