"""The planner (``jitmeta/heuristics/plan.py``): boundaries, limits, overrides, code sets.

Pure Python: no GPU and no compiler. Every boundary is asserted twice: once as the
value the documented formulas (``smem_static`` / ``smem_dynamic`` / ``smem_chunked``)
give, and once as the literal number worked out by hand in the comment beside it, so
that a change of formula shows up here as well as in the compiled cubins.

Randomness is fresh on every run; the seed is printed and put in every assertion
message. Rerun a failure with ``JITMETA_TEST_SEED=<seed> pytest tests/test_plan.py``.
"""

from __future__ import annotations

import os
import random

import pytest

import jitmeta
from jitmeta import envs
from jitmeta.heuristics.arch import ARCH_TABLE, DeviceLimits, limits_for_arch
from jitmeta.heuristics.plan import (DEFAULT_CHUNK, DEFAULT_THREADS, MIN_STATIC_CAPACITY,
                                     WORD, PlanError, codes_for_batches, plan, smem_chunked,
                                     smem_dynamic, smem_scratch, smem_static)

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

FORMATS = ("smxx", "sm90")
KIB = 1024


@pytest.fixture(scope="module", autouse=True)
def _log_seed(request):
    line = f"tests/test_plan.py random seed: {SEED_NOTE}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    print(line)


@pytest.fixture
def sm90() -> DeviceLimits:
    return limits_for_arch("sm_90")


def _plan(batch, limits, varlen=False, next_n=1, num_sms=132, split_kv=256,
          schedule="smxx"):
    return plan(batch, next_n, varlen, num_sms, split_kv, schedule, limits)


# --- formula-derived boundaries (independent of plan()'s control flow) ------------------

def largest_static_batch(limits: DeviceLimits, threads: int, varlen: bool) -> int:
    """Largest power-of-two bucket whose static tile fits the static limit (0 if none)."""
    best, cap = 0, MIN_STATIC_CAPACITY
    while smem_static(cap, threads, varlen, limits.smem_reserved_bytes) \
            <= limits.smem_static_bytes:
        best, cap = cap, cap * 2
    return best


def largest_dynamic_batch(limits: DeviceLimits, threads: int, varlen: bool) -> int:
    """Largest batch whose dynamic-variant static + dynamic bytes fit the opt-in limit."""
    static, _ = smem_dynamic(0, threads, varlen, limits.smem_reserved_bytes)
    return (limits.smem_optin_bytes - static) // WORD - 1


def expected_variant(batch, limits, threads, chunk, varlen) -> str | None:
    """The documented decision: static, else dynamic, else chunked, else none."""
    rsv = limits.smem_reserved_bytes
    cap = MIN_STATIC_CAPACITY
    while cap < batch:
        cap *= 2
    if smem_static(cap, threads, varlen, rsv) <= limits.smem_static_bytes:
        return "static"
    if sum(smem_dynamic(batch, threads, varlen, rsv)) <= limits.smem_optin_bytes:
        return "dynamic"
    if smem_chunked(chunk, threads, varlen, rsv) <= limits.smem_static_bytes:
        return "chunked"
    return None


# --- the formulas themselves, by hand ---------------------------------------------------

def test_smem_formulas_by_hand():
    # scratch: (threads / 32 + 2) summaries of 4 B (dense) or 16 B (varlen)
    assert smem_scratch(1024, False) == 34 * 4 == 136
    assert smem_scratch(1024, True) == 34 * 16 == 544
    assert smem_scratch(256, False) == 10 * 4 == 40
    # static: (capacity + 1) words + scratch + reserved
    assert smem_static(8192, 1024, False, 1024) == 8193 * 4 + 136 + 1024 == 33932
    assert smem_static(8192, 1024, True, 1024) == 8193 * 4 + 544 + 1024 == 34340
    assert smem_static(16384, 1024, False, 1024) == 65540 + 136 + 1024 == 66700
    assert smem_static(1024, 1024, False, 0) == 4100 + 136 == 4236
    # dynamic: static part rounded up to 16 (1160 -> 1168; 1568 stays), tile (b+1) words
    assert smem_dynamic(8193, 1024, False, 1024) == (1168, 8194 * 4)
    assert smem_dynamic(8193, 1024, True, 1024) == (1568, 8194 * 4)
    assert smem_dynamic(10, 1024, False, 0) == (144, 44)
    # chunked: the same tile as static with the chunk as capacity
    assert smem_chunked(8192, 1024, False, 1024) == 33932
    assert smem_chunked(1024, 256, True, 0) == 1025 * 4 + 10 * 16 == 4260


def test_sm90_limits_table():
    lim = limits_for_arch("sm_90")
    assert (lim.arch, lim.sm_count, lim.max_threads_per_block) == ("sm_90", 132, 1024)
    assert (lim.smem_static_bytes, lim.smem_optin_bytes, lim.smem_reserved_bytes) \
        == (48 * KIB, 232448, 1024)
    assert limits_for_arch("90a").arch == "sm_90a"
    assert limits_for_arch("sm_80").smem_reserved_bytes == 0
    assert limits_for_arch("sm_90", 78).sm_count == 78


# --- boundaries on sm_90 -----------------------------------------------------------------

@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_static_dynamic_boundary(sm90, varlen):
    # bucket 8192: 33932 B (dense) / 34340 B (varlen) <= 49152; bucket 16384: > 49152
    assert largest_static_batch(sm90, DEFAULT_THREADS, varlen) == 8192
    last = _plan(8192, sm90, varlen)
    assert (last.variant, last.code.capacity, last.grid) == ("static", 8192, 1)
    assert last.smem_static_bytes == (34340 if varlen else 33932)
    assert last.smem_dynamic_bytes == 0
    assert last.smem_static_bytes <= 48 * KIB
    first = _plan(8193, sm90, varlen)
    assert (first.variant, first.code.capacity, first.grid) == ("dynamic", 0, 1)
    assert first.smem_static_bytes == (1568 if varlen else 1168)
    assert first.smem_dynamic_bytes == 8194 * 4
    assert "static" in last.reason and "dynamic" in first.reason


@pytest.mark.parametrize("varlen,largest", [(False, 57819), (True, 57719)],
                         ids=["dense", "varlen"])
def test_sm90_dynamic_chunked_boundary(sm90, varlen, largest):
    # dense:  1168 + 4 (b + 1) <= 232448  ->  b <= (232448 - 1172) / 4 = 57819
    # varlen: 1568 + 4 (b + 1) <= 232448  ->  b <= (232448 - 1572) / 4 = 57719
    assert largest_dynamic_batch(sm90, DEFAULT_THREADS, varlen) == largest
    last = _plan(largest, sm90, varlen)
    assert last.variant == "dynamic"
    assert last.smem_bytes <= sm90.smem_optin_bytes
    # 1168 + 57820 * 4 == 1568 + 57720 * 4 == 232448: the opt-in limit exactly
    assert last.smem_bytes == 232448
    first = _plan(largest + 1, sm90, varlen)
    assert first.variant == "chunked"
    assert (first.code.capacity, first.grid) == (DEFAULT_CHUNK, -(-(largest + 1) // 8192))
    assert first.grid == 8
    assert first.smem_static_bytes == (34340 if varlen else 33932)
    assert first.smem_dynamic_bytes == 0


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_static_buckets(sm90, varlen):
    for batch, cap in [(1, 1024), (1024, 1024), (1025, 2048), (2048, 2048), (2049, 4096),
                       (4096, 4096), (4097, 8192), (8192, 8192)]:
        p = _plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity) == ("static", cap), batch
        assert p.smem_static_bytes == smem_static(cap, 1024, varlen, 1024), batch


def test_chunked_grid_for_huge_batches(sm90):
    for batch in (57820, 65536, 2**20, 2**24, 2**24 + 1):
        p = _plan(batch, sm90)
        assert p.variant == "chunked", batch
        assert p.grid == -(-batch // DEFAULT_CHUNK), batch
        assert p.smem_static_bytes == 33932
    assert _plan(2**24, sm90).grid == 2048


def test_next_n_and_num_sms_do_not_change_boundaries(sm90):
    for next_n in (1, 2, 3, 6):
        for num_sms in (1, 132, 4096):
            got = [_plan(b, sm90, False, next_n, num_sms).variant
                   for b in (8192, 8193, 57819, 57820)]
            assert got == ["static", "dynamic", "dynamic", "chunked"], (next_n, num_sms)


# --- boundaries for hand-built limits ----------------------------------------------------

# (limits, extra overrides, dense (largest static, largest dynamic), varlen (same))
HAND_LIMITS = [
    pytest.param(
        DeviceLimits("sm_80", 108, smem_optin_bytes=166912, smem_reserved_bytes=0), {},
        # dense: static part ceil16(136) = 144; (166912 - 148) / 4 = 41691
        # varlen: static part 544;           (166912 - 548) / 4 = 41591
        (8192, 41691), (8192, 41591), id="a100"),
    pytest.param(
        DeviceLimits("sm_89", 128, smem_optin_bytes=101376, smem_reserved_bytes=0), {},
        # dense: (101376 - 148) / 4 = 25307; varlen: (101376 - 548) / 4 = 25207
        (8192, 25307), (8192, 25207), id="l40s"),
    pytest.param(
        DeviceLimits("sm_90", 16, smem_static_bytes=16 * KIB, smem_optin_bytes=64 * KIB),
        {"JITMETA_CHUNK": 2048},
        # static: bucket 2048 = 9356 / 9764 B <= 16384, bucket 4096 = 17548 B > 16384
        # dense: (65536 - 1172) / 4 = 16091; varlen: (65536 - 1572) / 4 = 15991
        (2048, 16091), (2048, 15991), id="small-smem"),
    pytest.param(
        DeviceLimits("sm_90", 132), {"JITMETA_THREADS": 256},
        # 256 threads: scratch 40 B (dense) / 160 B (varlen)
        # dense: ceil16(1064) = 1072; (232448 - 1076) / 4 = 57843
        # varlen: ceil16(1184) = 1184; (232448 - 1188) / 4 = 57815
        (8192, 57843), (8192, 57815), id="256-threads"),
]


@pytest.mark.parametrize("limits,knobs,dense,varlen_bounds", HAND_LIMITS)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_hand_built_limits_boundaries(limits, knobs, dense, varlen_bounds, varlen):
    static_max, dynamic_max = varlen_bounds if varlen else dense
    with envs.override(**knobs):
        threads = knobs.get("JITMETA_THREADS", DEFAULT_THREADS)
        assert largest_static_batch(limits, threads, varlen) == static_max
        assert largest_dynamic_batch(limits, threads, varlen) == dynamic_max
        assert _plan(static_max, limits, varlen).variant == "static"
        assert _plan(static_max, limits, varlen).code.capacity == static_max
        assert _plan(static_max + 1, limits, varlen).variant == "dynamic"
        last = _plan(dynamic_max, limits, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= limits.smem_optin_bytes
        first = _plan(dynamic_max + 1, limits, varlen)
        assert first.variant == "chunked"
        assert first.smem_static_bytes <= limits.smem_static_bytes
        assert first.threads == threads


def test_planner_respects_max_threads_per_block():
    """A device limited to 256 threads per block must get a plan that launches there.

    No JITMETA_THREADS is set, so the planner has to pick threads within the limit
    rather than blame a variable the user never set.
    """
    lim = DeviceLimits("sm_90", 132, max_threads_per_block=256)
    p = _plan(100, lim)
    assert p.threads <= 256
    assert p.smem_static_bytes <= lim.smem_static_bytes


# --- the plan never exceeds its limits (property) ----------------------------------------

def _random_limits(rng: random.Random) -> DeviceLimits:
    cc = rng.choice(sorted(ARCH_TABLE))
    static = rng.choice([48 * KIB, 32 * KIB, 16 * KIB, rng.randrange(4 * KIB, 48 * KIB)])
    optin = rng.choice([static, 64 * KIB, 101376, 166912, 232448,
                        rng.randrange(static, 256 * KIB)])
    return DeviceLimits(f"sm_{cc}", rng.randrange(1, 200), smem_static_bytes=static,
                        smem_optin_bytes=max(optin, static),
                        smem_reserved_bytes=rng.choice([0, 1024]))


def test_plan_never_exceeds_limits_property():
    rng = random.Random(SEED)
    outcomes = {"static": 0, "dynamic": 0, "chunked": 0, "error": 0}
    for case in range(3000):
        limits = _random_limits(rng)
        knobs = {}
        if rng.random() < 0.5:
            knobs["JITMETA_SMEM_BUDGET"] = rng.randrange(1, 256 * KIB)
        if rng.random() < 0.3:
            knobs["JITMETA_THREADS"] = rng.choice([32, 64, 128, 256, 512, 1024])
        if rng.random() < 0.3:
            knobs["JITMETA_CHUNK"] = rng.choice([32, 256, 1024, 4096, 8192, 12000])
        batch = min(2**24, int(2 ** rng.uniform(0, 24.5)))
        varlen = rng.random() < 0.5
        next_n = 1 if varlen else rng.randrange(1, 7)
        num_sms = rng.randrange(1, 5000)
        note = (f"{SEED_NOTE} case {case}: batch={batch} varlen={varlen} limits={limits} "
                f"knobs={knobs}")
        budget = knobs.get("JITMETA_SMEM_BUDGET")
        eff = limits.with_budget(budget)
        threads = knobs.get("JITMETA_THREADS", DEFAULT_THREADS)
        chunk = knobs.get("JITMETA_CHUNK", DEFAULT_CHUNK)
        if "JITMETA_CHUNK" not in knobs:  # the default tile halves until it fits
            while chunk > 32 and smem_chunked(chunk, threads, varlen,
                                              eff.smem_reserved_bytes) > eff.smem_static_bytes:
                chunk //= 2
        want = expected_variant(batch, eff, threads, chunk, varlen)
        with envs.override(**knobs):
            try:
                p = plan(batch, next_n, varlen, num_sms, 256,
                         rng.choice(FORMATS), limits)
            except PlanError as exc:
                outcomes["error"] += 1
                assert want is None, f"{note}: PlanError {exc} but {want} fits"
                continue
        outcomes[p.variant] += 1
        assert p.variant == want, note
        assert p.threads == threads and p.threads <= limits.max_threads_per_block, note
        assert p.smem_static_bytes <= eff.smem_static_bytes, note
        assert p.smem_bytes <= eff.smem_optin_bytes, note
        if budget is not None:
            assert p.smem_bytes <= budget, note
        assert (p.batch, p.next_n, p.num_sms) == (batch, next_n, num_sms), note
        rsv = eff.smem_reserved_bytes
        if p.variant == "static":
            cap = p.code.capacity
            assert cap >= batch and (cap == MIN_STATIC_CAPACITY or cap // 2 < batch), note
            assert p.grid == 1 and p.smem_dynamic_bytes == 0, note
            assert p.smem_static_bytes == smem_static(cap, threads, varlen, rsv), note
        elif p.variant == "dynamic":
            assert p.grid == 1 and p.code.capacity == 0, note
            assert (p.smem_static_bytes, p.smem_dynamic_bytes) \
                == smem_dynamic(batch, threads, varlen, rsv), note
        else:
            assert p.code.capacity == chunk, note
            assert p.grid == -(-batch // chunk) and p.grid * chunk >= batch, note
            assert p.smem_static_bytes == smem_chunked(chunk, threads, varlen, rsv), note
            assert p.smem_dynamic_bytes == 0, note
    print(f"{SEED_NOTE}: outcomes {outcomes}")
    assert min(outcomes.values()) > 0, f"{SEED_NOTE}: sweep missed an outcome {outcomes}"


# --- env overrides -----------------------------------------------------------------------

def test_forced_variants(sm90):
    with envs.override(JITMETA_VARIANT="static"):
        p = _plan(8192, sm90)
        assert (p.variant, p.code.capacity) == ("static", 8192)
        assert "JITMETA_VARIANT" in p.reason
    with envs.override(JITMETA_VARIANT="dynamic"):
        p = _plan(1, sm90)
        assert (p.variant, p.smem_static_bytes, p.smem_dynamic_bytes) == ("dynamic", 1168, 8)
        assert _plan(57819, sm90).variant == "dynamic"
    with envs.override(JITMETA_VARIANT="chunked"):
        p = _plan(1, sm90)
        assert (p.variant, p.grid, p.code.capacity) == ("chunked", 1, 8192)
        assert _plan(2**24, sm90, varlen=True).grid == 2048


@pytest.mark.parametrize("variant,batch", [("static", 8193), ("static", 2**20),
                                           ("dynamic", 57820), ("dynamic", 2**24)])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_impossible_forced_variant_raises(sm90, variant, batch, varlen):
    with envs.override(JITMETA_VARIANT=variant):
        with pytest.raises(PlanError, match="JITMETA_VARIANT") as info:
            _plan(batch, sm90, varlen)
    assert variant in str(info.value) and str(batch) in str(info.value)


def test_forced_variant_varlen_dynamic_boundary(sm90):
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert _plan(57719, sm90, varlen=True).variant == "dynamic"
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            _plan(57720, sm90, varlen=True)


def test_forced_chunked_with_oversized_chunk_names_the_chunk(sm90):
    # chunk 16384: 65540 + 136 + 1024 B > 49152: chunked cannot fit at any batch.
    # The culprit is JITMETA_CHUNK; the message must say so (not advise "use chunked").
    with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=16384):
        with pytest.raises(PlanError) as info:
            _plan(100000, sm90)
    assert "JITMETA_CHUNK" in str(info.value), str(info.value)


def test_threads_override(sm90):
    with envs.override(JITMETA_THREADS="256"):
        p = _plan(5000, sm90)
        assert (p.variant, p.threads, p.code.threads) == ("static", 256, 256)
        assert p.smem_static_bytes == 8193 * 4 + 40 + 1024 == 33836
    with envs.override(JITMETA_THREADS=512):
        assert _plan(100000, sm90).threads == 512


@pytest.mark.parametrize("threads", [48, 2048, 1056])
def test_bad_threads_override_raises(sm90, threads):
    with envs.override(JITMETA_THREADS=threads):
        with pytest.raises(PlanError, match="JITMETA_THREADS"):
            _plan(10, sm90)


def test_chunk_override(sm90):
    with envs.override(JITMETA_CHUNK="1024"):
        p = _plan(100000, sm90, varlen=True)
        assert (p.variant, p.code.capacity, p.grid) == ("chunked", 1024, 98)
        assert p.smem_static_bytes == 1025 * 4 + 544 + 1024 == 5668
        # the chunk does not move the static/dynamic decisions
        assert _plan(8192, sm90).variant == "static"
        assert _plan(57819, sm90).variant == "dynamic"


def test_oversized_chunk_without_fallback_raises(sm90):
    with envs.override(JITMETA_CHUNK=16384):
        assert _plan(57819, sm90).variant == "dynamic"
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384"):
            _plan(57820, sm90)


def test_smem_budget_override(sm90):
    # budget 40000 B: static bucket 8192 (33932 / 34340 B) still fits;
    # dense dynamic:  1172 + 4 b <= 40000 -> b <= 9707
    # varlen dynamic: 1572 + 4 b <= 40000 -> b <= 9607
    with envs.override(JITMETA_SMEM_BUDGET="40000"):
        eff = sm90.with_budget(40000)
        assert largest_dynamic_batch(eff, 1024, False) == 9707
        assert largest_dynamic_batch(eff, 1024, True) == 9607
        assert _plan(8192, sm90).variant == "static"
        assert _plan(9707, sm90).variant == "dynamic"
        assert _plan(9708, sm90).variant == "chunked"
        assert _plan(9607, sm90, varlen=True).variant == "dynamic"
        assert _plan(9608, sm90, varlen=True).variant == "chunked"
        assert "budget 40000" in _plan(9708, sm90).reason
    # budget 20000 B: bucket 4096 (17548 B) is the last static; dynamic to
    # (20000 - 1172) / 4 = 4707; the default chunk (33932 B) no longer fits, a 2048 one does
    with envs.override(JITMETA_SMEM_BUDGET=20000, JITMETA_CHUNK=2048):
        assert _plan(4096, sm90).code.capacity == 4096
        assert _plan(4097, sm90).variant == "dynamic"
        assert _plan(4707, sm90).variant == "dynamic"
        p = _plan(4708, sm90)
        assert (p.variant, p.code.capacity, p.smem_static_bytes) == ("chunked", 2048, 9356)
    # without JITMETA_CHUNK the default tile halves until it fits: 4096 (17548 B)
    with envs.override(JITMETA_SMEM_BUDGET=20000):
        p = _plan(4708, sm90)
        assert (p.variant, p.code.capacity, p.smem_static_bytes) == ("chunked", 4096, 17548)
    with envs.override(JITMETA_SMEM_BUDGET=100):
        with pytest.raises(PlanError):
            _plan(1, sm90)


def test_arch_override(sm90):
    base = _plan(5000, sm90)
    for value, want in [("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("SM_100", "sm_100")]:
        with envs.override(JITMETA_ARCH=value):
            p = _plan(5000, sm90)
        assert p.code.arch == want, value
        assert p.code.name.endswith(want)
        assert (p.variant, p.code.capacity, p.smem_bytes) \
            == (base.variant, base.code.capacity, base.smem_bytes)


def test_overrides_read_from_environment(sm90, monkeypatch):
    """The planner reads the real environment lazily (no override needed)."""
    monkeypatch.setenv("JITMETA_VARIANT", "chunked")
    monkeypatch.setenv("JITMETA_CHUNK", "4096")
    p = _plan(10, sm90)
    assert (p.variant, p.code.capacity) == ("chunked", 4096)
    monkeypatch.setenv("JITMETA_VARIANT", "bogus")
    with pytest.raises(envs.EnvError, match="JITMETA_VARIANT"):
        _plan(10, sm90)


def test_bad_plan_arguments(sm90):
    with pytest.raises(PlanError, match="schedule"):
        _plan(10, sm90, schedule="sm100")
    for kwargs in ({"batch": 0}, {"next_n": 0}, {"num_sms": 0}, {"split_kv": 0}):
        args = {"batch": 10, "next_n": 1, "num_sms": 4, "split_kv": 256} | kwargs
        with pytest.raises(PlanError, match=">= 1"):
            plan(args["batch"], args["next_n"], False, args["num_sms"], args["split_kv"],
                 "smxx", sm90)


def test_public_plan_wrapper():
    p = jitmeta.plan(8193, arch="sm_90", num_sms=78)
    assert (p.variant, p.num_sms, p.code.arch) == ("dynamic", 78, "sm_90")
    d = p.to_dict()
    assert d["variant"] == "dynamic" and d["smem_bytes"] == 1168 + 8194 * 4
    assert d["code_name"] == p.code.name
    assert jitmeta.plan(10, arch="sm_100").num_sms == 148  # from the arch table


# --- codes_for_batches: a handful of cubins for every batch ------------------------------

def _coarse_sweep(rng: random.Random, hi: int) -> list[int]:
    pts = set(range(1, min(hi, 70000) + 1, 97))
    pts.update(int(2 ** (e / 64)) for e in range(0, 64 * 24 + 1))
    pts.update(rng.randrange(1, hi + 1) for _ in range(300))
    return sorted(p for p in pts if 1 <= p <= hi)


@pytest.mark.parametrize("varlen,next_n", [(False, 1), (False, 2), (False, 5), (True, 1)],
                         ids=["dense-n1", "dense-n2", "dense-n5", "varlen"])
@pytest.mark.parametrize("schedule", FORMATS)
@pytest.mark.parametrize("num_sms", [1, 132, 4096])
def test_codes_for_all_batches_are_few(sm90, varlen, schedule, next_n, num_sms):
    codes = codes_for_batches([(1, 2**24)], next_n, varlen, num_sms, 256, schedule, sm90)
    # static buckets 1024, 2048, 4096, 8192; one dynamic; one chunked
    assert len(codes) == 6 and len(codes) < 10
    assert sorted((c.variant, c.capacity) for c in codes) == [
        ("chunked", 8192), ("dynamic", 0), ("static", 1024), ("static", 2048),
        ("static", 4096), ("static", 8192)]
    for code, example in codes.items():
        assert example.code == code
        assert (code.varlen, code.schedule, code.arch) == (varlen, schedule, "sm_90")
    rng = random.Random(f"{SEED}-{varlen}-{schedule}-{next_n}-{num_sms}")
    brute = {_plan(b, sm90, varlen, next_n, num_sms, 256, schedule).code
             for b in _coarse_sweep(rng, 2**24)}
    assert brute == set(codes), SEED_NOTE


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_exhaustive_sweep(sm90, varlen):
    """Every batch 1..60000 (which crosses every boundary) plus a stride to 2**24."""
    batches = list(range(1, 60001)) + list(range(60001, 2**24 + 1, 4099)) + [2**24]
    brute = {_plan(b, sm90, varlen).code for b in batches}
    assert brute == set(codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", sm90))


@pytest.mark.parametrize("knobs", [
    {"JITMETA_SMEM_BUDGET": 40000, "JITMETA_CHUNK": 4096},
    {"JITMETA_SMEM_BUDGET": 20000, "JITMETA_CHUNK": 2048},
    {"JITMETA_THREADS": 256},
    {"JITMETA_VARIANT": "chunked"},
], ids=["budget40k", "budget20k", "threads256", "forced-chunked"])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_brute_force_under_overrides(sm90, knobs, varlen):
    rng = random.Random(SEED)
    with envs.override(**knobs):
        codes = codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "sm90", sm90)
        batches = sorted(set(range(1, 12001)) | set(_coarse_sweep(rng, 2**24)))
        brute = {_plan(b, sm90, varlen, schedule="sm90").code for b in batches}
    assert brute == set(codes), f"{SEED_NOTE} {knobs}"
    assert 1 <= len(codes) < 10


def test_codes_for_several_ranges(sm90):
    codes = codes_for_batches([(1, 100), (9000, 9000), (3000, 3001)], 1, False, 132, 256,
                              "smxx", sm90)
    assert sorted((c.variant, c.capacity) for c in codes) == [
        ("dynamic", 0), ("static", 1024), ("static", 4096)]
    brute = {_plan(b, sm90).code for b in list(range(1, 101)) + [9000, 3000, 3001]}
    assert brute == set(codes)


def test_num_sms_and_next_n_do_not_change_the_code():
    rng = random.Random(SEED)
    for case in range(300):
        batch = int(2 ** rng.uniform(0, 24))
        varlen = rng.random() < 0.5
        sched = rng.choice(FORMATS)
        a = limits_for_arch("sm_90", rng.randrange(1, 500))
        b = limits_for_arch("sm_90", rng.randrange(1, 500))
        p1 = plan(batch, 1, varlen, rng.randrange(1, 5000), 256, sched, a)
        p2 = plan(batch, 1 if varlen else rng.randrange(1, 9), varlen,
                  rng.randrange(1, 5000), 256, sched, b)
        assert p1.code == p2.code, f"{SEED_NOTE} case {case}: batch {batch}"
        assert p1.grid == p2.grid and p1.smem_bytes == p2.smem_bytes, SEED_NOTE


def test_code_depends_on_what_changes_the_source(sm90):
    base = _plan(100, sm90).code
    assert _plan(100, sm90, varlen=True).code != base
    assert _plan(100, sm90, schedule="sm90").code != base
    assert _plan(100, sm90, split_kv=128).code != base
    assert len({base.name, _plan(100, sm90, split_kv=128).code.name,
                _plan(100, sm90, schedule="sm90").code.name}) == 3
