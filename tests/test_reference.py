"""``jitmeta.reference_schedule`` against the naive line-by-line oracle (tests/spec_oracle.py).

Randomness is fresh on every run. The seed is printed in the session output and
included in every assertion message; rerun a failure with
``JITMETA_TEST_SEED=<seed> pytest tests/test_reference.py``.
Tests of the oracle alone (hand-worked examples) have "oracle" in their names:
``pytest tests/test_reference.py -k oracle``.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

try:
    from spec_oracle import spec_schedule
except ImportError:  # tests/ imported as a package
    from tests.spec_oracle import spec_schedule

try:
    from jitmeta import reference_schedule
except ImportError:
    try:  # e.g. a stale editable install that sees jitmeta as a namespace package
        from jitmeta.reference import reference_schedule
    except ImportError:  # not written yet: the oracle's own tests still run
        reference_schedule = None

needs_reference = pytest.mark.skipif(
    reference_schedule is None, reason="jitmeta.reference_schedule is not importable yet")

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

FORMATS = ("smxx", "sm90")
SPLITS = (64, 128, 256, 512)



# --- helpers ---------------------------------------------------------------------------

def _as_int32(v: int) -> int:
    """A uint32 value from the oracle as the int32 the kernel's output tensor holds."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def _oracle_tensor(rows) -> torch.Tensor:
    return torch.tensor([[_as_int32(q), _as_int32(k)] for q, k in rows], dtype=torch.int32)


def _run_reference(ctx, num_sms, indices, split_kv, schedule, one_d=False):
    if one_d:
        t = torch.tensor([row[0] for row in ctx], dtype=torch.int32)
    else:
        t = torch.tensor(ctx, dtype=torch.int32)
    idx = None if indices is None else torch.tensor(indices, dtype=torch.int32)
    return reference_schedule(t, num_sms, idx, split_kv=split_kv, schedule=schedule)


def _mismatch(ctx, num_sms, indices, split_kv, schedule, one_d=False):
    """None if reference == oracle, else (reference tensor, oracle tensor)."""
    got = _run_reference(ctx, num_sms, indices, split_kv, schedule, one_d)
    exp = _oracle_tensor(spec_schedule(ctx, num_sms, indices, split_kv, schedule))
    if (got.dtype == torch.int32 and got.device.type == "cpu"
            and tuple(got.shape) == (num_sms + 1, 2) and torch.equal(got, exp)):
        return None
    return got, exp


def _shrink(ctx, num_sms, indices, split_kv, schedule, one_d, budget=400):
    """Greedy shrink of a failing case (fewer tokens, fewer SMs, smaller lengths)."""
    ctx = [list(r) for r in ctx]
    indices = None if indices is None else list(indices)

    def fails(c, s, i):
        try:
            return _mismatch(c, s, i, split_kv, schedule, one_d) is not None
        except Exception:
            return False  # only shrink towards the same kind of failure

    changed = True
    while changed and budget > 0:
        changed = False
        chunk = len(ctx) // 2
        while chunk >= 1:  # drop chunks of tokens, halves first, then smaller
            pos = len(ctx) - chunk
            while pos >= 0 and len(ctx) > chunk and budget > 0:
                budget -= 1
                c = ctx[:pos] + ctx[pos + chunk:]
                i = None if indices is None else indices[:pos] + indices[pos + chunk:]
                if fails(c, num_sms, i):
                    ctx, indices, changed = c, i, True
                pos = min(pos, len(ctx)) - chunk
            chunk //= 2
        if indices is None and len(ctx[0]) > 1 and budget > 0:  # fewer columns
            for n in range(1, len(ctx[0])):
                budget -= 1
                c = [r[len(r) - n:] for r in ctx]
                if fails(c, num_sms, None):
                    ctx, changed = c, True
                    break
        for s in sorted({1, 2, 3, num_sms // 2, num_sms - 1}):  # fewer SMs
            if 1 <= s < num_sms and budget > 0:
                budget -= 1
                if fails(ctx, s, indices):
                    num_sms, changed = s, True
                    break
        for pos in range(len(ctx)):  # smaller lengths
            for col in range(len(ctx[pos])):
                for v in (0, 1, split_kv, ctx[pos][col] // 2):
                    if v < ctx[pos][col] and budget > 0:
                        budget -= 1
                        c = [list(r) for r in ctx]
                        c[pos][col] = v
                        if fails(c, num_sms, indices):
                            ctx, changed = c, True
                            break
    return ctx, num_sms, indices


def check(ctx, num_sms, indices=None, split_kv=256, schedule="smxx", *, one_d=False,
          label=""):
    """Assert reference == oracle exactly, with a reproducible, shrunk report."""
    bad = _mismatch(ctx, num_sms, indices, split_kv, schedule, one_d)
    if bad is None:
        return
    got, exp = bad
    head = (f"[{SEED_NOTE}] {label} batch={len(ctx)} next_n={len(ctx[0])} "
            f"num_sms={num_sms} varlen={indices is not None} split_kv={split_kv} "
            f"schedule={schedule} one_d={one_d}")
    if got.dtype != torch.int32 or tuple(got.shape) != (num_sms + 1, 2):
        pytest.fail(f"{head}: reference returned dtype={got.dtype} shape={tuple(got.shape)}, "
                    f"expected int32 [{num_sms + 1}, 2]")
    rows = (got != exp).any(dim=1).nonzero().flatten().tolist()
    s0 = rows[0]
    sctx, ssms, sidx = _shrink(ctx, num_sms, indices, split_kv, schedule, one_d)
    sbad = _mismatch(sctx, ssms, sidx, split_kv, schedule, one_d)
    small = ""
    if sbad is not None:
        small = (f"\n  shrunk: context_lens={sctx} num_sms={ssms} indices={sidx}"
                 f"\n    reference={sbad[0].tolist()}\n    oracle   ={sbad[1].tolist()}")
    pytest.fail(f"{head}: {len(rows)} rows differ; first row {s0}: "
                f"reference={got[s0].tolist()} oracle={exp[s0].tolist()}{small}")


# --- random case generation -------------------------------------------------------------

def _lens(rng: random.Random, n: int, split_kv: int) -> list[int]:
    """n context lengths drawn from one of several mixtures."""
    style = rng.choice(["zeros", "small", "near", "large", "mixed", "mixed", "huge_tiny",
                        "sparse", "multiples", "tiny"])

    def one(kind):
        if kind == "zeros":
            return 0
        if kind == "tiny":
            return rng.randint(0, 8)
        if kind == "small":
            return rng.randint(0, 3 * split_kv)
        if kind == "near":
            return max(0, rng.randint(0, 16) * split_kv + rng.choice((-1, 0, 1)))
        if kind == "multiples":
            return rng.randint(0, 8) * split_kv
        return rng.randint(0, 131072)  # large

    if style in ("zeros", "small", "near", "large", "multiples", "tiny"):
        return [one(style) for _ in range(n)]
    if style == "mixed":
        kinds = ("zeros", "tiny", "small", "near", "large", "multiples")
        return [one(rng.choice(kinds)) for _ in range(n)]
    if style == "huge_tiny":
        out = [rng.randint(0, 8) for _ in range(n)]
        out[rng.randrange(n)] = 131072 - rng.randint(0, 3)
        return out
    # sparse: mostly zeros, a few large
    out = [0] * n
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(n)] = rng.randint(1, 131072)
    return out


def _indices(rng: random.Random, b: int) -> list[int]:
    """A token -> request map: runs of equal ids, often unsorted and repeating."""
    style = rng.choice(["runs", "runs", "runs_pool", "runs_pool", "sorted_long",
                        "tiny_pool", "one_run", "distinct", "alternate"])
    if style == "one_run":
        return [rng.randint(0, 50)] * b
    if style == "distinct":
        out = list(range(b))
        rng.shuffle(out)
        return out
    if style == "alternate":  # 0,1,0,1,...: repeats that are never adjacent
        return [t % 2 for t in range(b)]
    if style == "tiny_pool":
        return [rng.randint(0, 2) for _ in range(b)]
    out: list[int] = []
    rid = 0
    pool = max(1, b // 4)
    while len(out) < b:
        length = rng.randint(1, 64) if style == "sorted_long" else rng.randint(1, 4)
        if style == "runs_pool":  # ids from a small pool: non-adjacent repeats
            rid = rng.randrange(pool)
        elif style == "runs":  # unsorted ids
            rid = rng.randint(0, 10 * b)
        else:
            rid += 1
        out.extend([rid] * length)
    return out[:b]


def _num_sms(rng: random.Random, b: int, big: bool) -> int:
    r = rng.random()
    if r < 0.15 or big and r < 0.5:
        return rng.randint(301, 4096)
    if r < 0.3:
        return b + rng.randint(1, 300)  # more SMs than requests
    if r < 0.4:
        return rng.choice((1, 2, 78, 108, 114, 132, 148, 170))
    return rng.randint(1, 300)


def _batch(rng: random.Random, big: bool) -> int:
    if big:
        return rng.randint(301, 3000)
    r = rng.random()
    if r < 0.1:
        return rng.choice((1, 2, 31, 32, 33, 64, 96, 128, 256))
    return rng.randint(1, 300)


def _case(rng: random.Random, varlen: bool, big: bool):
    b = _batch(rng, big)
    split_kv = rng.choice(SPLITS)
    schedule = rng.choice(FORMATS)
    num_sms = _num_sms(rng, b, big)
    if varlen:
        ctx = [[v] for v in _lens(rng, b, split_kv)]
        return ctx, num_sms, _indices(rng, b), split_kv, schedule, rng.random() < 0.3
    next_n = rng.randint(1, 6)
    last = _lens(rng, b, split_kv)
    if rng.random() < 0.5:  # MTP-like rows: L - N + 1 + j
        ctx = [[max(0, v - next_n + 1 + j) for j in range(next_n)] for v in last]
    else:  # only the last column matters; fill the others with noise
        ctx = [[rng.randint(0, 131072) for _ in range(next_n - 1)] + [v] for v in last]
    one_d = next_n == 1 and rng.random() < 0.3
    return ctx, num_sms, None, split_kv, schedule, one_d


# family -> (blocks, cases per block, varlen, big)
RANDOM_FAMILIES = {
    "nonvarlen": (10, 160, False, False),
    "varlen": (10, 160, True, False),
    "nonvarlen_big": (4, 6, False, True),
    "varlen_big": (4, 6, True, True),
}


@needs_reference
@pytest.mark.parametrize("family,block", [(f, b) for f, (n, *_) in RANDOM_FAMILIES.items()
                                          for b in range(n)])
def test_random_vs_spec(family, block):
    _, per_block, varlen, big = RANDOM_FAMILIES[family]
    for i in range(per_block):
        key = f"{SEED}/{family}/{block}/{i}"
        ctx, num_sms, indices, split_kv, schedule, one_d = _case(random.Random(key), varlen,
                                                                  big)
        check(ctx, num_sms, indices, split_kv, schedule, one_d=one_d, label=f"case {key}")


# --- explicit edge cases of docs/schedule.md -------------------------------------------------

def _modes():
    """(id, next_n, varlen) for the modes every edge case is run in."""
    return [("n1", 1, False), ("n2", 2, False), ("n3", 3, False), ("n5", 5, False),
            ("varlen", 1, True)]


def _build(lens, next_n, varlen, indices=None):
    ctx = [[v] * next_n for v in lens]
    if varlen and indices is None:
        indices = [t // 3 for t in range(len(lens))]  # runs of 3: pair + single
    return ctx, (indices if varlen else None)


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 2, 132, 4096])
@pytest.mark.parametrize("length", [0, 1, 255, 256, 257, 131072])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_batch_one(mode, length, num_sms, schedule):
    _, next_n, varlen = mode
    ctx, idx = _build([length], next_n, varlen)
    check(ctx, num_sms, idx, 256, schedule, label="B=1")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 132, 4096])
@pytest.mark.parametrize("batch", [32, 64, 1024])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_batch_multiple_of_32(mode, batch, num_sms, schedule):
    _, next_n, varlen = mode
    rng = random.Random(f"{SEED}/mult32/{mode[0]}/{batch}/{num_sms}/{schedule}")
    for lens in ([rng.randint(0, 2048) for _ in range(batch)],
                 [0] * (batch - 1) + [257],  # all work in the last (32k-1-th) request
                 [300] + [0] * (batch - 1)):
        ctx, idx = _build(lens, next_n, varlen)
        if varlen:
            idx = [t // rng.randint(1, 4) for t in range(batch)]
        check(ctx, num_sms, idx, 256, schedule, label="B multiple of 32")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 7, 132, 4096])
@pytest.mark.parametrize("batch", [1, 2, 31, 32, 64, 1024])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_all_zero_lengths(mode, batch, num_sms, schedule):
    _, next_n, varlen = mode
    ctx, idx = _build([0] * batch, next_n, varlen)
    a = 1 if varlen else -(-next_n // (2 if next_n >= 2 else 1))
    # docs/schedule.md: total 0 -> every row is (B*A, 0) non-varlen, (B, 0) varlen.
    want_row = [batch, 0] if varlen else [batch * a, 0]
    want = [want_row] * (num_sms + 1)
    assert [list(r) for r in spec_schedule(ctx, num_sms, idx, 256, schedule)] == want, \
        "oracle violates the all-zero rule"
    got = _run_reference(ctx, num_sms, idx, 256, schedule)
    assert got.tolist() == want, f"[{SEED_NOTE}] all-zero lengths: reference={got.tolist()}"
    check(ctx, num_sms, idx, 256, schedule, label="all zero")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("split_kv", SPLITS)
@pytest.mark.parametrize("delta", [-1, 0, 1])
@pytest.mark.parametrize("mult", [1, 2, 3])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_multiples_of_split_kv(mode, mult, delta, split_kv, schedule):
    _, next_n, varlen = mode
    length = mult * split_kv + delta  # 255, 256, 257, 511, 512, 513, ... at split 256
    rng = random.Random(f"{SEED}/mult/{mode[0]}/{mult}/{delta}/{split_kv}/{schedule}")
    for lens in ([length] * 40,
                 [length, 0, length, 1, length],
                 [rng.choice((length - 1, length, length + 1)) for _ in range(97)]):
        for num_sms in (1, 3, 16, 132, 500):
            ctx, idx = _build(lens, next_n, varlen)
            check(ctx, num_sms, idx, split_kv, schedule, label=f"length {length}")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 132, 4096])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_one_huge_among_tiny(mode, where, num_sms, schedule):
    _, next_n, varlen = mode
    rng = random.Random(f"{SEED}/huge/{mode[0]}/{where}/{num_sms}/{schedule}")
    for batch in (2, 100, 1000):
        lens = [rng.randint(0, 4) for _ in range(batch)]
        pos = {"first": 0, "middle": batch // 2, "last": batch - 1}[where]
        lens[pos] = 131072
        ctx, idx = _build(lens, next_n, varlen)
        check(ctx, num_sms, idx, 256, schedule, label=f"huge at {where}")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 2, 4096, "batch+1", "2*batch", "batch*A+1"])
@pytest.mark.parametrize("mode", _modes(), ids=lambda m: m[0])
def test_edge_num_sms_extremes(mode, num_sms, schedule):
    _, next_n, varlen = mode
    rng = random.Random(f"{SEED}/sms/{mode[0]}/{num_sms}/{schedule}")
    for batch in (1, 5, 33, 300):
        a = 1 if varlen else -(-next_n // (2 if next_n >= 2 else 1))
        s = {"batch+1": batch + 1, "2*batch": 2 * batch,
             "batch*A+1": batch * a + 1}.get(num_sms, num_sms)
        for lens in ([rng.randint(0, 1024) for _ in range(batch)], [1] * batch,
                     [256] * batch):
            ctx, idx = _build(lens, next_n, varlen)
            check(ctx, s, idx, 256, schedule, label=f"num_sms={num_sms}")


@needs_reference
@pytest.mark.parametrize("num_sms", [1, 3, 132, 4096])
@pytest.mark.parametrize("lens", [[5], [300, 0, 0], [0, 0, 700], [1, 2, 3, 4],
                                  [0] * 32, [257] * 64 + [0] * 3],
                         ids=["single", "trailing_zeros", "leading_zeros", "ramp",
                              "zeros32", "full_then_zeros"])
@pytest.mark.parametrize("next_n", [1, 2, 3, 4])
def test_edge_sm90_forced_tail_row(next_n, lens, num_sms):
    ctx = [[v] * next_n for v in lens]
    a = -(-next_n // (2 if next_n >= 2 else 1))
    assert tuple(spec_schedule(ctx, num_sms, None, 256, "sm90")[num_sms]) == (len(lens) * a, 0)
    got = _run_reference(ctx, num_sms, None, 256, "sm90")
    assert got[num_sms].tolist() == [len(lens) * a, 0], \
        f"[{SEED_NOTE}] sm90 tail row: reference={got.tolist()}"
    check(ctx, num_sms, None, 256, "sm90", label="sm90 tail")
    # varlen sm90 has no forced tail row: compare the whole schedule as well.
    check([[v] for v in lens], num_sms, list(range(len(lens))), 256, "sm90",
          label="sm90 varlen tail")


ODD_RUNS = [
    [9, 9, 9],  # one run of 3: pair (0,1) + single 2
    [4, 4, 4, 4, 4],  # pair, pair, single
    [1, 2, 2, 2, 3, 3, 3, 3, 3],  # single; pair + single; pair + pair + single
    [7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 9],
    [0] * 31,
    [0] * 33,
]


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 2, 5, 132])
@pytest.mark.parametrize("indices", ODD_RUNS, ids=lambda x: f"runs{len(x)}")
def test_edge_varlen_odd_run_ends_with_single(indices, num_sms, schedule):
    b = len(indices)
    # Distinct lengths per token, so using the wrong token's length is visible.
    for lens in ([(t + 1) * 200 for t in range(b)], [(b - t) * 300 for t in range(b)],
                 [0 if t % 2 else 600 for t in range(b)]):
        check([[v] for v in lens], num_sms, indices, 256, schedule, label="odd run")


NON_ADJACENT = [
    [0, 1, 0, 1],
    [3, 3, 1, 3, 3, 3, 1, 1],
    [5, 6, 5, 5, 6, 6, 6, 5],
    [2, 1, 0, 1, 2],
    [0, 1] * 20,
    [1, 1, 0, 1, 1, 0, 1, 1],
]


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 2, 5, 132])
@pytest.mark.parametrize("indices", NON_ADJACENT, ids=lambda x: "-".join(map(str, x[:8])))
def test_edge_varlen_non_adjacent_repeats(indices, num_sms, schedule):
    b = len(indices)
    for lens in ([(t + 1) * 200 for t in range(b)], [513, 1, 256, 257] * (b // 4 + 1)):
        check([[v] for v in lens[:b]], num_sms, indices, 256, schedule,
              label="non-adjacent repeats")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("varlen", [False, True], ids=["nonvarlen", "varlen"])
@pytest.mark.parametrize("batch", [1, 32, 77])
def test_edge_one_d_context_lens(batch, varlen, schedule):
    rng = random.Random(f"{SEED}/1d/{batch}/{varlen}/{schedule}")
    lens = [rng.randint(0, 3000) for _ in range(batch)]
    idx = [t // 2 for t in range(batch)] if varlen else None
    for num_sms in (1, 132):
        t1 = torch.tensor(lens, dtype=torch.int32)
        t2 = t1.reshape(batch, 1)
        it = None if idx is None else torch.tensor(idx, dtype=torch.int32)
        r1 = reference_schedule(t1, num_sms, it, split_kv=256, schedule=schedule)
        r2 = reference_schedule(t2, num_sms, it, split_kv=256, schedule=schedule)
        assert torch.equal(r1, r2), f"[{SEED_NOTE}] 1-D != [batch, 1]"
        check([[v] for v in lens], num_sms, idx, 256, schedule, one_d=True, label="1-D")


@needs_reference
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("varlen", [False, True], ids=["nonvarlen", "varlen"])
def test_large_batch_2_16(varlen, schedule):
    b = 1 << 16
    rng = random.Random(f"{SEED}/large/{varlen}/{schedule}")
    lens = _lens(rng, b, 256)
    if varlen:
        check([[v] for v in lens], 132, _indices(rng, b), 256, schedule, label="B=2^16")
    else:
        check([[max(0, v - 1), v] for v in lens], 132, None, 256, schedule, label="B=2^16")


# --- the oracle itself against hand-worked examples --------------------------------------

HAND_WORKED = [
    # context_lens, num_sms, indices, split_kv, schedule, expected
    #
    # ctx=[300,0,513] -> segs=[2,0,3], A=1, P=[2,2,5], total=5, S=4: q_=1, r=1.
    # smxx starts: 0,2,3,4,5.  s0: qi=0 off=0 n=2 -> (0,0).  s1: start 2, P<=2 for
    # q=0,1 -> qi=2, off=2-2=0, n=3 -> (2,0).  s2: (2,1).  s3: (2,2).  s4: qi=3 -> (3,0).
    ([[300], [0], [513]], 4, None, 256, "smxx",
     [(0, 0), (2, 0), (2, 1), (2, 2), (3, 0)]),
    # Same, sm90: pivot=4-1=3; starts s*1 + (s-3 if s>3): 0,1,2,3,5.
    # s1: qi=0 off=1 -> (0,1).  s2: (2,0).  s3: (2,1).  s4 forced (B*A,0)=(3,0).
    ([[300], [0], [513]], 4, None, 256, "sm90",
     [(0, 0), (0, 1), (2, 0), (2, 1), (3, 0)]),
    # N=3 -> atom=2, A=2. Last column: ctx=[257,1] -> segs=[2,1], P=[2,3], P*A=[4,6],
    # total=6, S=3: q_=2, r=0, starts 0,2,4,6.  s1: qi=0 off=2 n=2 -> (0*2+1, 0).
    # s2: qi=1 (4<=4) off=0 n=1 -> (2,0).  s3: qi=2 -> (4,0).
    ([[5, 6, 257], [1, 1, 1]], 3, None, 256, "smxx",
     [(0, 0), (1, 0), (2, 0), (4, 0)]),
    # Same with S=2: q_=3, r=0, starts 0,3,6.  s1: qi=0 off=3 n=2 -> (0+3//2, 3%2)=(1,1).
    ([[5, 6, 257], [1, 1, 1]], 2, None, 256, "smxx",
     [(0, 0), (1, 1), (4, 0)]),
    # B=1, ctx=512 -> segs=[2], total=2, S=4: q_=0, r=2.  smxx starts min(s,2): 0,1,2,2,2
    # -> (0,0),(0,1), then qi=1 n=0 -> (1,0) x3.
    ([[512]], 4, None, 256, "smxx",
     [(0, 0), (0, 1), (1, 0), (1, 0), (1, 0)]),
    # sm90: pivot=2, starts max(0,s-2): 0,0,0,1,2 -> (0,0)x3, (0,1), forced (1,0).
    ([[512]], 4, None, 256, "sm90",
     [(0, 0), (0, 0), (0, 0), (0, 1), (1, 0)]),
    # All zero, N=2 (A=1), B=2: total=0, every start 0, qi=2 -> (B*A,0)=(2,0).
    ([[0, 0], [0, 0]], 3, None, 256, "smxx", [(2, 0)] * 4),
    # All zero, N=3 (A=2), B=2 -> (4,0) everywhere, sm90 too.
    ([[0, 0, 0], [0, 0, 0]], 2, None, 256, "sm90", [(4, 0)] * 3),
    # Varlen indices [7,7,7,3,7,7], ctx [10,300,600,5,256,257]:
    # t0: 7==7 -> atom(start 0, ctx[1]=300); t2: 7!=3 -> single(2, 600);
    # t3: 3!=7 -> single(3, 5); t4: 7==7 -> atom(4, ctx[5]=257).
    # token_start=[0,2,3,4], segs=[2,3,1,2], P=[2,5,6,8], total=8, S=3: q_=2, r=2.
    # smxx starts 0,3,6,8.  s1: a=1 -> (2, 3-2=1).  s2: a=3 -> (4, 0).  s3: a=4=M -> (6, 0).
    ([[10], [300], [600], [5], [256], [257]], 3, [7, 7, 7, 3, 7, 7], 256, "smxx",
     [(0, 0), (2, 1), (4, 0), (6, 0)]),
    # sm90: pivot=1, starts 2s + max(0,s-1): 0,2,5,8.  s1: a=1 -> (2,0).  s2: a=2 -> (3,0).
    ([[10], [300], [600], [5], [256], [257]], 3, [7, 7, 7, 3, 7, 7], 256, "sm90",
     [(0, 0), (2, 0), (3, 0), (6, 0)]),
    # Varlen [0,1,0,1] (no neighbours equal): 4 single atoms, split 64: segs=[1,1,1,1],
    # P=[1,2,3,4], total=4, S=2: starts 0,2,4 -> (0,0), a=2 -> (2,0), a=4 -> (4,0).
    ([[1], [2], [3], [4]], 2, [0, 1, 0, 1], 64, "smxx",
     [(0, 0), (2, 0), (4, 0)]),
    # Varlen one run [5,5,5], ctx [1000,1,300]: atom(0, ctx[1]=1), single(2, 300).
    # segs=[1,2], P=[1,3], total=3, S=3: starts 0,1,2,3 -> (0,0); a=1 -> (2,0);
    # a=1 -> (2,1); a=2=M -> (B=3, 0).
    ([[1000], [1], [300]], 3, [5, 5, 5], 256, "smxx",
     [(0, 0), (2, 0), (2, 1), (3, 0)]),
    # Varlen all zero, B=3: total=0 -> (B,0) everywhere.
    ([[0], [0], [0]], 2, [1, 1, 2], 256, "sm90", [(3, 0)] * 3),
]


@pytest.mark.parametrize("case", HAND_WORKED, ids=lambda c: f"S{c[1]}-{c[4]}"
                         f"-{'varlen' if c[2] else 'n' + str(len(c[0][0]))}-B{len(c[0])}")
def test_oracle_hand_worked(case):
    ctx, num_sms, indices, split_kv, schedule, expected = case
    assert spec_schedule(ctx, num_sms, indices, split_kv, schedule) == expected


@needs_reference
@pytest.mark.parametrize("case", HAND_WORKED, ids=lambda c: f"S{c[1]}-{c[4]}"
                         f"-{'varlen' if c[2] else 'n' + str(len(c[0][0]))}-B{len(c[0])}")
def test_reference_hand_worked(case):
    ctx, num_sms, indices, split_kv, schedule, expected = case
    got = _run_reference(ctx, num_sms, indices, split_kv, schedule)
    assert got.tolist() == [list(r) for r in expected]


def test_oracle_uint32_masking():
    # The oracle's arithmetic is uint32: helpers wrap like the kernel.
    try:
        from spec_oracle import ceil_div_u32, start_of, u32
    except ImportError:
        from tests.spec_oracle import ceil_div_u32, start_of, u32
    assert u32(2**32 + 5) == 5
    assert u32(-1) == 0xFFFFFFFF
    assert ceil_div_u32(0, 256) == 0
    assert ceil_div_u32(257, 256) == 2
    assert ceil_div_u32(0xFFFFFFFF, 256) == 0  # (x + 255) wraps to 254 -> 0
    assert [start_of(s, 10, 4, "smxx") for s in range(5)] == [0, 3, 6, 8, 10]
    assert [start_of(s, 10, 4, "sm90") for s in range(5)] == [0, 2, 4, 7, 10]
