"""The planner (``jitmeta/heuristics/plan.py``): boundaries, limits, overrides, code sets.

Pure Python: no GPU and no compiler. Every boundary is asserted twice: once as the
value the documented formulas (``smem_static`` / ``smem_dynamic`` / ``smem_chunked``,
built on ``tile_words(n) = n + n // 32 + 1``, with static buckets at
``static_threads(cap, threads)`` threads) give, and once as the literal number worked out
by hand in the comment beside it, so that a change of formula shows up here as well as
in the compiled cubins.

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
                                     WORD, PlanError, codes_for_batches, largest_tile, plan,
                                     smem_chunked, smem_dynamic, smem_scratch, smem_static,
                                     static_threads, tile_words)

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

FORMATS = ("smxx", "sm90")
KIB = 1024



@pytest.fixture
def sm90() -> DeviceLimits:
    return limits_for_arch("sm_90")


def _plan(batch, limits, varlen=False, next_n=1, num_sms=132, split_kv=256,
          schedule="smxx"):
    return plan(batch, next_n, varlen, num_sms, split_kv, schedule, limits)


# --- formula-derived boundaries (independent of plan()'s control flow) ------------------

def bucket_threads(cap: int, threads: int, forced: bool) -> int:
    """Threads of a static bucket, as documented (not through ``static_threads``): a
    quarter of the capacity, clamped to [min(256, threads), threads]; JITMETA_THREADS
    (``forced``) everywhere when set."""
    return threads if forced else max(min(256, threads), min(threads, cap // 4))


def largest_static_batch(limits: DeviceLimits, threads: int, varlen: bool,
                         forced: bool = False) -> int:
    """Largest power-of-two bucket whose static tile fits the static limit (0 if none)."""
    best, cap = 0, MIN_STATIC_CAPACITY
    while smem_static(cap, bucket_threads(cap, threads, forced), varlen,
                      limits.smem_reserved_bytes) <= limits.smem_static_bytes:
        best, cap = cap, cap * 2
    return best


def largest_dynamic_batch(limits: DeviceLimits, threads: int, varlen: bool) -> int:
    """Largest batch whose dynamic-variant static + dynamic bytes fit the opt-in limit.

    A bisection over ``smem_dynamic`` itself (not ``largest_tile``, which is under test).
    """
    def fits(b: int) -> bool:
        return sum(smem_dynamic(b, threads, varlen, limits.smem_reserved_bytes)) \
            <= limits.smem_optin_bytes
    if not fits(0):
        return -1
    lo, hi = 0, limits.smem_optin_bytes  # a tile of b elements takes more than b bytes
    assert not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def expected_variant(batch, limits, threads, chunk, varlen, forced=False) -> str | None:
    """The documented decision: static, else dynamic, else chunked, else none."""
    rsv = limits.smem_reserved_bytes
    cap = MIN_STATIC_CAPACITY
    while cap < batch:
        cap *= 2
    if smem_static(cap, bucket_threads(cap, threads, forced), varlen, rsv) \
            <= limits.smem_static_bytes:
        return "static"
    if sum(smem_dynamic(batch, threads, varlen, rsv)) <= limits.smem_optin_bytes:
        return "dynamic"
    if smem_chunked(chunk, threads, varlen, rsv) <= limits.smem_static_bytes:
        return "chunked"
    return None


# --- the formulas themselves, by hand ---------------------------------------------------

def test_tile_words_by_hand():
    # element i sits at word i + i // 32, plus the halo word: n + n // 32 + 1
    assert tile_words(0) == 0 + 0 + 1 == 1          # the halo alone
    assert tile_words(1) == 1 + 0 + 1 == 2
    assert tile_words(31) == 31 + 0 + 1 == 32
    assert tile_words(32) == 32 + 1 + 1 == 34       # the first spare word
    assert tile_words(1024) == 1024 + 32 + 1 == 1057
    assert tile_words(2048) == 2048 + 64 + 1 == 2113
    assert tile_words(4096) == 4096 + 128 + 1 == 4225
    assert tile_words(8192) == 8192 + 256 + 1 == 8449
    assert tile_words(8193) == 8193 + 256 + 1 == 8450
    assert tile_words(16384) == 16384 + 512 + 1 == 16897
    # largest_tile inverts it: the largest n with tile_words(n) <= words
    assert largest_tile(0) == -1                      # not even the halo fits
    assert largest_tile(-7) == -1
    assert largest_tile(1) == 0
    assert largest_tile(32) == 31                     # tile_words(31) = 32
    assert largest_tile(33) == 31                     # tile_words(32) = 34 > 33
    assert largest_tile(34) == 32
    assert largest_tile(1056) == 1023                 # tile_words(1023) = 1023 + 31 + 1 = 1055
    assert largest_tile(1057) == 1024
    assert largest_tile(8449) == 8192
    # sm_90 dense dynamic: (232448 - 1168) / 4 = 57820 words; 56067 + 1752 + 1 = 57820
    assert largest_tile(57820) == 56067
    # sm_90 varlen dynamic at 256 threads: (232448 - 1184) / 4 = 57816 words;
    # 56063 + 1751 + 1 = 57815 <= 57816 < 56064 + 1752 + 1 = 57817
    assert largest_tile(57816) == 56063


def test_tile_words_matches_the_kernel_layout():
    """Element i at word i + i // 32 (the .cuh's pad): the n + 1 words used (elements
    and halo) never collide, and the halo (element n) is the last word of the tile."""
    for n in range(0, 2100):
        words = [i + i // 32 for i in range(n + 1)]
        assert len(set(words)) == n + 1, n
        assert max(words) == tile_words(n) - 1, n
    # the point of the spare word: thread t walking its slice of 32 starts at element
    # 32 t, so at each step the 32 lanes of a warp sit on 32 different banks
    for step in range(32):
        assert len({(32 * t + step + (32 * t + step) // 32) % 32 for t in range(32)}) == 32


def test_largest_tile_round_trip():
    for n in range(0, 70001):
        w = tile_words(n)
        assert largest_tile(w) == n, n                # exact fit
        assert largest_tile(w - 1) == n - 1, n        # one word short
        assert tile_words(n + 1) > w, n               # strictly increasing
    for w in range(0, 70001):
        n = largest_tile(w)
        assert n >= -1, w
        if n >= 0:
            assert tile_words(n) <= w, w
        assert tile_words(n + 1) > w, w
    for n in (2**20 - 1, 2**20, 2**24, 2**24 + 30, 2**31 - 1):  # far out
        assert largest_tile(tile_words(n)) == n
        assert largest_tile(tile_words(n) - 1) == n - 1
        # one more word holds one more element, unless that element (a multiple of 32)
        # also needs its spare word
        assert largest_tile(tile_words(n) + 1) == (n if (n + 1) % 32 == 0 else n + 1)
    rng = random.Random(SEED)
    for _ in range(2000):
        w = rng.randrange(0, 2**32)
        n = largest_tile(w)
        assert tile_words(n) <= w < tile_words(n + 1), f"{SEED_NOTE}: words {w}"


def test_smem_formulas_by_hand():
    # scratch: (threads / 32 + 2) summaries of 4 B (dense) or 16 B (varlen)
    assert smem_scratch(1024, False) == 34 * 4 == 136
    assert smem_scratch(1024, True) == 34 * 16 == 544
    assert smem_scratch(512, False) == 18 * 4 == 72
    assert smem_scratch(512, True) == 18 * 16 == 288
    assert smem_scratch(256, False) == 10 * 4 == 40
    assert smem_scratch(256, True) == 10 * 16 == 160
    # static: tile_words(capacity) words + scratch + reserved
    assert smem_static(8192, 1024, False, 1024) == 8449 * 4 + 136 + 1024 == 34956
    assert smem_static(8192, 1024, True, 1024) == 8449 * 4 + 544 + 1024 == 35364
    assert smem_static(16384, 1024, False, 1024) == 16897 * 4 + 136 + 1024 == 68748
    assert smem_static(1024, 1024, False, 0) == 1057 * 4 + 136 == 4364
    assert smem_static(1024, 256, False, 1024) == 1057 * 4 + 40 + 1024 == 5292
    assert smem_static(2048, 512, True, 1024) == 2113 * 4 + 288 + 1024 == 9764
    # dynamic: static part rounded up to 16 (1160 -> 1168; 1568 stays), tile_words(b) words
    assert smem_dynamic(8193, 1024, False, 1024) == (1168, 8450 * 4) == (1168, 33800)
    assert smem_dynamic(8193, 1024, True, 1024) == (1568, 8450 * 4) == (1568, 33800)
    assert smem_dynamic(10, 1024, False, 0) == (144, 11 * 4) == (144, 44)
    assert smem_dynamic(31, 1024, False, 0) == (144, 32 * 4) == (144, 128)
    assert smem_dynamic(32, 1024, False, 0) == (144, 34 * 4) == (144, 136)  # + spare word
    # 256 threads: 40 + 1024 = 1064 -> 1072; 160 + 1024 = 1184 stays
    assert smem_dynamic(1, 256, False, 1024) == (1072, 2 * 4) == (1072, 8)
    assert smem_dynamic(1, 256, True, 1024) == (1184, 8)
    # chunked: the same tile as static with the chunk as capacity
    assert smem_chunked(8192, 1024, False, 1024) == 34956
    assert smem_chunked(1024, 256, True, 0) == 1057 * 4 + 10 * 16 == 4388
    assert smem_chunked(2048, 1024, False, 1024) == 2113 * 4 + 136 + 1024 == 9612
    # every formula, against tile_words, over a range
    for n in (1, 31, 32, 33, 1000, 1024, 4097, 8192, 12000):
        for t in (32, 256, 1024):
            for varlen in (False, True):
                sc = smem_scratch(t, varlen)
                assert smem_static(n, t, varlen, 1024) == 4 * tile_words(n) + sc + 1024
                assert smem_chunked(n, t, varlen, 0) == 4 * tile_words(n) + sc
                st, dyn = smem_dynamic(n, t, varlen, 1024)
                assert dyn == 4 * tile_words(n)
                assert st % 16 == 0 and 0 <= st - (sc + 1024) < 16


def test_static_threads_by_hand():
    for cap in (1024, 2048, 4096, 8192, 16384):
        for t in (32, 64, 96, 128, 256, 512, 1024):
            assert static_threads(cap, t) == bucket_threads(cap, t, False), (cap, t)
            assert static_threads(cap, t) <= t
    # max(min(256, threads), min(threads, capacity // 4))
    assert static_threads(1024, 1024) == max(256, min(1024, 256)) == 256
    assert static_threads(2048, 1024) == max(256, min(1024, 512)) == 512
    assert static_threads(4096, 1024) == max(256, min(1024, 1024)) == 1024
    assert static_threads(8192, 1024) == max(256, min(1024, 2048)) == 1024
    assert static_threads(16384, 1024) == 1024                   # never above threads
    # a block limit of 512: the 4096 and 8192 buckets stop at 512
    assert static_threads(1024, 512) == max(256, min(512, 256)) == 256
    assert static_threads(2048, 512) == max(256, min(512, 512)) == 512
    assert static_threads(4096, 512) == max(256, min(512, 1024)) == 512
    # at or below 256 threads every bucket takes all of them
    for cap in (1024, 2048, 4096, 8192):
        assert static_threads(cap, 256) == 256
        assert static_threads(cap, 128) == max(128, min(128, cap // 4)) == 128
        assert static_threads(cap, 32) == 32


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
    # bucket 8192 (1024 threads): 8449 * 4 + 136 + 1024 = 34956 B (dense) /
    # 8449 * 4 + 544 + 1024 = 35364 B (varlen) <= 49152; bucket 16384: 68748 B > 49152
    assert largest_static_batch(sm90, DEFAULT_THREADS, varlen) == 8192
    last = _plan(8192, sm90, varlen)
    assert (last.variant, last.code.capacity, last.grid) == ("static", 8192, 1)
    assert last.threads == static_threads(8192, DEFAULT_THREADS) == 1024
    assert last.smem_static_bytes == smem_static(8192, 1024, varlen, 1024)
    assert last.smem_static_bytes == (35364 if varlen else 34956)
    assert last.smem_dynamic_bytes == 0
    assert last.smem_static_bytes <= 48 * KIB
    first = _plan(8193, sm90, varlen)
    assert (first.variant, first.code.capacity, first.grid) == ("dynamic", 0, 1)
    assert first.threads == DEFAULT_THREADS == 1024
    assert first.smem_static_bytes == (1568 if varlen else 1168)
    assert first.smem_dynamic_bytes == tile_words(8193) * 4 == 8450 * 4 == 33800
    assert "static" in last.reason and "dynamic" in first.reason


@pytest.mark.parametrize("varlen,largest", [(False, 56067), (True, 55970)],
                         ids=["dense", "varlen"])
def test_sm90_dynamic_chunked_boundary(sm90, varlen, largest):
    # dense:  1168 + 4 tile_words(b) <= 232448 -> tile_words(b) <= 231280 / 4 = 57820
    #         56067 + 56067 // 32 + 1 = 56067 + 1752 + 1 = 57820;  56068 -> 57821
    # varlen: 1568 + 4 tile_words(b) <= 232448 -> tile_words(b) <= 230880 / 4 = 57720
    #         55970 + 55970 // 32 + 1 = 55970 + 1749 + 1 = 57720;  55971 -> 57721
    assert largest_dynamic_batch(sm90, DEFAULT_THREADS, varlen) == largest
    assert largest_tile((sm90.smem_optin_bytes - (1568 if varlen else 1168)) // WORD) \
        == largest
    last = _plan(largest, sm90, varlen)
    assert last.variant == "dynamic"
    assert last.smem_bytes <= sm90.smem_optin_bytes
    # 1168 + 57820 * 4 == 1568 + 57720 * 4 == 232448: the opt-in limit exactly
    assert last.smem_dynamic_bytes == (57720 if varlen else 57820) * 4
    assert last.smem_bytes == 232448
    first = _plan(largest + 1, sm90, varlen)
    assert first.variant == "chunked"
    assert (first.code.capacity, first.grid) == (DEFAULT_CHUNK, -(-(largest + 1) // 8192))
    assert first.grid == 7  # 6 * 8192 = 49152 < 55971, 56068 <= 7 * 8192 = 57344
    assert first.threads == 1024
    assert first.smem_static_bytes == (35364 if varlen else 34956)
    assert first.smem_dynamic_bytes == 0


# (batch, bucket, threads, dense bytes, varlen bytes) with the default 1024 threads:
# threads = max(min(256, 1024), min(1024, bucket // 4)); bytes = 4 tile_words + scratch + 1024
SM90_BUCKETS = [
    (1, 1024, 256, 5292, 5412),          # 1057 * 4 + 40 (160) + 1024
    (1024, 1024, 256, 5292, 5412),
    (1025, 2048, 512, 9548, 9764),       # 2113 * 4 + 72 (288) + 1024
    (2048, 2048, 512, 9548, 9764),
    (2049, 4096, 1024, 18060, 18468),    # 4225 * 4 + 136 (544) + 1024
    (4096, 4096, 1024, 18060, 18468),
    (4097, 8192, 1024, 34956, 35364),    # 8449 * 4 + 136 (544) + 1024
    (8192, 8192, 1024, 34956, 35364),
]


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_static_buckets(sm90, varlen):
    for batch, cap, threads, dense_b, varlen_b in SM90_BUCKETS:
        p = _plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity) == ("static", cap), batch
        assert p.threads == p.code.threads == static_threads(cap, 1024) == threads, batch
        assert p.smem_static_bytes == smem_static(cap, threads, varlen, 1024), batch
        assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch


@pytest.mark.parametrize("forced", [128, 512, 1024])
def test_threads_override_applies_to_every_static_bucket(sm90, forced):
    """JITMETA_THREADS replaces static_threads in every bucket (and dynamic/chunked)."""
    with envs.override(JITMETA_THREADS=forced):
        for batch, cap, *_ in SM90_BUCKETS:
            for varlen in (False, True):
                p = _plan(batch, sm90, varlen)
                assert (p.variant, p.code.capacity, p.threads) == ("static", cap, forced)
                assert p.smem_static_bytes == smem_static(cap, forced, varlen, 1024)
        assert _plan(8193, sm90).threads == forced
        assert _plan(10**6, sm90).threads == forced
    # 1024 on the 1024 bucket: 1057 * 4 + 136 + 1024 = 5388 B (the default there is 5292 B)
    with envs.override(JITMETA_THREADS=1024):
        assert _plan(100, sm90).smem_static_bytes == 5388
    assert _plan(100, sm90).smem_static_bytes == 5292


def test_chunked_grid_for_huge_batches(sm90):
    for batch in (56068, 57820, 65536, 2**20, 2**24, 2**24 + 1):
        p = _plan(batch, sm90)
        assert p.variant == "chunked", batch
        assert p.grid == -(-batch // DEFAULT_CHUNK), batch
        assert p.threads == 1024, batch
        assert p.smem_static_bytes == 34956  # 8449 * 4 + 136 + 1024
    assert _plan(2**24, sm90).grid == 2048  # 2**24 / 8192


def test_next_n_and_num_sms_do_not_change_boundaries(sm90):
    for next_n in (1, 2, 3, 6):
        for num_sms in (1, 132, 4096):
            got = [_plan(b, sm90, False, next_n, num_sms).variant
                   for b in (8192, 8193, 56067, 56068)]
            assert got == ["static", "dynamic", "dynamic", "chunked"], (next_n, num_sms)


# --- boundaries for hand-built limits ----------------------------------------------------

# (limits, extra overrides, dense (largest static, largest dynamic), varlen (same))
# largest dynamic b: the largest with tile_words(b) = b + b // 32 + 1 <= W words
HAND_LIMITS = [
    pytest.param(
        DeviceLimits("sm_80", 108, smem_optin_bytes=166912, smem_reserved_bytes=0), {},
        # static: bucket 8192 = 8449 * 4 + 136 (544) = 33932 (34340) B <= 49152
        # dense: static part ceil16(136) = 144; W = (166912 - 144) / 4 = 41692;
        #        40428 + 1263 + 1 = 41692, 40429 -> 41693
        # varlen: static part 544;          W = (166912 - 544) / 4 = 41592;
        #        40331 + 1260 + 1 = 41592, 40332 -> 41593
        (8192, 40428), (8192, 40331), id="a100"),
    pytest.param(
        DeviceLimits("sm_89", 128, smem_optin_bytes=101376, smem_reserved_bytes=0), {},
        # dense: W = (101376 - 144) / 4 = 25308; 24541 + 766 + 1 = 25308, 24542 -> 25309
        # varlen: W = (101376 - 544) / 4 = 25208; 24444 + 763 + 1 = 25208, 24445 -> 25209
        (8192, 24541), (8192, 24444), id="l40s"),
    pytest.param(
        DeviceLimits("sm_90", 16, smem_static_bytes=16 * KIB, smem_optin_bytes=64 * KIB),
        {"JITMETA_CHUNK": 2048},
        # static: bucket 2048 (512 threads) = 2113 * 4 + 72 (288) + 1024 = 9548 (9764) B
        # <= 16384; bucket 4096 (1024 threads) = 4225 * 4 + 136 + 1024 = 18060 B > 16384
        # dense: W = (65536 - 1168) / 4 = 16092; 15604 + 487 + 1 = 16092, 15605 -> 16093
        # varlen: W = (65536 - 1568) / 4 = 15992; 15507 + 484 + 1 = 15992, 15508 -> 15993
        # chunk 2048 (1024 threads): 2113 * 4 + 136 (544) + 1024 = 9612 (10020) B <= 16384
        (2048, 15604), (2048, 15507), id="small-smem"),
    pytest.param(
        DeviceLimits("sm_90", 132), {"JITMETA_THREADS": 256},
        # 256 threads everywhere: scratch 40 B (dense) / 160 B (varlen);
        # static bucket 8192 = 8449 * 4 + 40 (160) + 1024 = 34860 (34980) B <= 49152
        # dense: ceil16(1064) = 1072; W = (232448 - 1072) / 4 = 57844;
        #        56091 + 1752 + 1 = 57844, 56092 -> 57845
        # varlen: ceil16(1184) = 1184; W = (232448 - 1184) / 4 = 57816;
        #        56063 + 1751 + 1 = 57815 (4 B to spare), 56064 + 1752 + 1 = 57817 > W
        (8192, 56091), (8192, 56063), id="256-threads"),
    pytest.param(
        DeviceLimits("sm_90", 132, max_threads_per_block=512), {},
        # block limit 512: dynamic/chunked get 512 threads, static buckets
        # 256 / 512 / 512 / 512; bucket 8192 = 8449 * 4 + 72 (288) + 1024 = 34892 (35108) B
        # dense: ceil16(72 + 1024) = 1104; W = (232448 - 1104) / 4 = 57836;
        #        56083 + 1752 + 1 = 57836, 56084 -> 57837
        # varlen: ceil16(288 + 1024) = 1312; W = (232448 - 1312) / 4 = 57784;
        #        56032 + 1751 + 1 = 57784, 56033 -> 57785
        (8192, 56083), (8192, 56032), id="512-thread-device"),
]


@pytest.mark.parametrize("limits,knobs,dense,varlen_bounds", HAND_LIMITS)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_hand_built_limits_boundaries(limits, knobs, dense, varlen_bounds, varlen):
    static_max, dynamic_max = varlen_bounds if varlen else dense
    forced = "JITMETA_THREADS" in knobs
    with envs.override(**knobs):
        threads = knobs.get("JITMETA_THREADS", min(DEFAULT_THREADS,
                                                   limits.max_threads_per_block))
        assert largest_static_batch(limits, threads, varlen, forced) == static_max
        assert largest_dynamic_batch(limits, threads, varlen) == dynamic_max
        top = _plan(static_max, limits, varlen)
        assert top.variant == "static"
        assert top.code.capacity == static_max
        assert top.threads == bucket_threads(static_max, threads, forced)
        assert top.smem_static_bytes <= limits.smem_static_bytes
        for batch, cap, *_ in SM90_BUCKETS:  # every smaller bucket is static too
            if cap <= static_max:
                p = _plan(batch, limits, varlen)
                assert (p.variant, p.code.capacity) == ("static", cap)
                assert p.threads == bucket_threads(cap, threads, forced)
        assert _plan(static_max + 1, limits, varlen).variant == "dynamic"
        assert _plan(static_max + 1, limits, varlen).threads == threads
        last = _plan(dynamic_max, limits, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= limits.smem_optin_bytes
        # one more element no longer fits (it may need two words: the spare one)
        assert sum(smem_dynamic(dynamic_max + 1, threads, varlen,
                                limits.smem_reserved_bytes)) > limits.smem_optin_bytes
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
    assert p.threads == static_threads(1024, 256) == 256
    assert p.smem_static_bytes <= lim.smem_static_bytes
    for batch in (1, 2048, 4096, 8192, 8193, 10**6):  # every bucket, dynamic, chunked
        assert _plan(batch, lim).threads == 256, batch
    # a limit that is not a multiple of 32 rounds down to whole warps: 100 -> 96
    odd = DeviceLimits("sm_90", 132, max_threads_per_block=100)
    for batch in (1, 8192, 8193, 10**6):
        assert _plan(batch, odd).threads == 96, batch


# --- the plan never exceeds its limits (property) ----------------------------------------

def _random_limits(rng: random.Random) -> DeviceLimits:
    cc = rng.choice(sorted(ARCH_TABLE))
    static = rng.choice([48 * KIB, 32 * KIB, 16 * KIB, rng.randrange(4 * KIB, 48 * KIB)])
    optin = rng.choice([static, 64 * KIB, 101376, 166912, 232448,
                        rng.randrange(static, 256 * KIB)])
    return DeviceLimits(f"sm_{cc}", rng.randrange(1, 200), smem_static_bytes=static,
                        smem_optin_bytes=max(optin, static),
                        smem_reserved_bytes=rng.choice([0, 1024]),
                        max_threads_per_block=rng.choice([1024, 1024, 1024, 512, 256]))


def test_plan_never_exceeds_limits_property():
    rng = random.Random(SEED)
    outcomes = {"static": 0, "dynamic": 0, "chunked": 0, "error": 0}
    for case in range(3000):
        limits = _random_limits(rng)
        knobs = {}
        if rng.random() < 0.5:
            knobs["JITMETA_SMEM_BUDGET"] = rng.randrange(1, 256 * KIB)
        if rng.random() < 0.3:
            knobs["JITMETA_THREADS"] = rng.choice(
                [t for t in (32, 64, 128, 256, 512, 1024)
                 if t <= limits.max_threads_per_block])
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
        forced = "JITMETA_THREADS" in knobs
        threads = knobs.get("JITMETA_THREADS", min(DEFAULT_THREADS,
                                                   limits.max_threads_per_block))
        chunk = knobs.get("JITMETA_CHUNK", DEFAULT_CHUNK)
        if "JITMETA_CHUNK" not in knobs:  # the default tile halves until it fits
            while chunk > 32 and smem_chunked(chunk, threads, varlen,
                                              eff.smem_reserved_bytes) > eff.smem_static_bytes:
                chunk //= 2
        want = expected_variant(batch, eff, threads, chunk, varlen, forced)
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
        assert p.threads <= limits.max_threads_per_block and p.threads % 32 == 0, note
        if p.variant == "static":
            assert p.threads == bucket_threads(p.code.capacity, threads, forced), note
        else:
            assert p.threads == threads, note
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
            assert p.smem_static_bytes == smem_static(cap, p.threads, varlen, rsv), note
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
        assert (p.variant, p.code.capacity, p.threads) == ("static", 8192, 1024)
        assert "JITMETA_VARIANT" in p.reason
        # a forced static plan keeps the per-bucket default threads
        p = _plan(1, sm90)
        assert (p.code.capacity, p.threads, p.smem_static_bytes) == (1024, 256, 5292)
    with envs.override(JITMETA_VARIANT="dynamic"):
        p = _plan(1, sm90)
        # tile_words(1) = 1 + 0 + 1 = 2 words = 8 B; 136 + 1024 = 1160 -> 1168
        assert (p.variant, p.smem_static_bytes, p.smem_dynamic_bytes) == ("dynamic", 1168, 8)
        assert p.threads == 1024
        assert _plan(56067, sm90).variant == "dynamic"
    with envs.override(JITMETA_VARIANT="chunked"):
        p = _plan(1, sm90)
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 1, 8192, 1024)
        assert _plan(2**24, sm90, varlen=True).grid == 2048


# dense's first batch past the dynamic limit is 56068 (varlen's, 55971, is below it)
@pytest.mark.parametrize("variant,batch", [("static", 8193), ("static", 2**20),
                                           ("dynamic", 56068), ("dynamic", 2**24)])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_impossible_forced_variant_raises(sm90, variant, batch, varlen):
    with envs.override(JITMETA_VARIANT=variant):
        with pytest.raises(PlanError, match="JITMETA_VARIANT") as info:
            _plan(batch, sm90, varlen)
    assert variant in str(info.value) and str(batch) in str(info.value)


def test_forced_variant_varlen_dynamic_boundary(sm90):
    # 1568 + 4 tile_words(55970) = 1568 + 4 * 57720 = 232448; 55971 -> 232452
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert _plan(55970, sm90, varlen=True).variant == "dynamic"
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            _plan(55971, sm90, varlen=True)


def test_forced_chunked_with_oversized_chunk_names_the_chunk(sm90):
    # chunk 16384: 16897 * 4 + 136 + 1024 = 68748 B > 49152: chunked cannot fit at any
    # batch. The culprit is JITMETA_CHUNK; the message must say so (not advise "use chunked").
    with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=16384):
        with pytest.raises(PlanError) as info:
            _plan(100000, sm90)
    assert "JITMETA_CHUNK" in str(info.value), str(info.value)


def test_threads_override(sm90):
    with envs.override(JITMETA_THREADS="256"):
        p = _plan(5000, sm90)
        assert (p.variant, p.threads, p.code.threads) == ("static", 256, 256)
        assert p.smem_static_bytes == 8449 * 4 + 40 + 1024 == 34860
    # without it the 8192 bucket takes 1024 threads: 8449 * 4 + 136 + 1024 = 34956
    p = _plan(5000, sm90)
    assert (p.threads, p.smem_static_bytes) == (1024, 34956)
    with envs.override(JITMETA_THREADS=512):
        assert _plan(100000, sm90).threads == 512
        assert _plan(10000, sm90).threads == 512   # dynamic
        assert _plan(100, sm90).threads == 512     # static bucket 1024 (default 256)


@pytest.mark.parametrize("threads", [48, 2048, 1056])
def test_bad_threads_override_raises(sm90, threads):
    with envs.override(JITMETA_THREADS=threads):
        with pytest.raises(PlanError, match="JITMETA_THREADS"):
            _plan(10, sm90)


def test_chunk_override(sm90):
    with envs.override(JITMETA_CHUNK="1024"):
        p = _plan(100000, sm90, varlen=True)
        # grid: 97 * 1024 = 99328 < 100000 <= 98 * 1024 = 100352
        assert (p.variant, p.code.capacity, p.grid) == ("chunked", 1024, 98)
        assert p.smem_static_bytes == 1057 * 4 + 544 + 1024 == 5796
        # the chunk does not move the static/dynamic decisions (nor their threads)
        assert (_plan(8192, sm90).variant, _plan(8192, sm90).threads) == ("static", 1024)
        assert (_plan(100, sm90).variant, _plan(100, sm90).threads) == ("static", 256)
        assert _plan(56067, sm90).variant == "dynamic"


def test_oversized_chunk_without_fallback_raises(sm90):
    # chunk 16384 needs 68748 B of static smem (> 49152)
    with envs.override(JITMETA_CHUNK=16384):
        assert _plan(56067, sm90).variant == "dynamic"
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384"):
            _plan(56068, sm90)


def test_smem_budget_override(sm90):
    # budget 40000 B: static bucket 8192 (34956 / 35364 B) still fits;
    # dense dynamic:  1168 + 4 tile_words(b) <= 40000 -> tile_words(b) <= 9708:
    #                 9413 + 294 + 1 = 9708, 9414 -> 9709
    # varlen dynamic: 1568 + 4 tile_words(b) <= 40000 -> tile_words(b) <= 9608:
    #                 9316 + 291 + 1 = 9608, 9317 -> 9609
    # the default chunk (34956 / 35364 B) still fits: it stays 8192
    with envs.override(JITMETA_SMEM_BUDGET="40000"):
        eff = sm90.with_budget(40000)
        assert largest_dynamic_batch(eff, 1024, False) == 9413
        assert largest_dynamic_batch(eff, 1024, True) == 9316
        assert _plan(8192, sm90).variant == "static"
        assert _plan(8192, sm90, varlen=True).variant == "static"
        assert _plan(9413, sm90).variant == "dynamic"
        assert _plan(9413, sm90).smem_bytes == 1168 + 9708 * 4 == 40000
        p = _plan(9414, sm90)
        assert (p.variant, p.code.capacity, p.grid) == ("chunked", 8192, 2)
        assert _plan(9316, sm90, varlen=True).variant == "dynamic"
        assert _plan(9316, sm90, varlen=True).smem_bytes == 1568 + 9608 * 4 == 40000
        assert _plan(9317, sm90, varlen=True).variant == "chunked"
        assert "budget 40000" in _plan(9414, sm90).reason
    # budget 20000 B: bucket 4096 (4225 * 4 + 136 + 1024 = 18060 B) is the last static
    # (8192: 34956 B); dense dynamic: tile_words(b) <= (20000 - 1168) / 4 = 4708:
    # 4565 + 142 + 1 = 4708, 4566 -> 4709; the default chunk (34956 B) no longer fits,
    # a 2048 one does: 2113 * 4 + 136 + 1024 = 9612 B
    with envs.override(JITMETA_SMEM_BUDGET=20000, JITMETA_CHUNK=2048):
        p = _plan(4096, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes) \
            == ("static", 4096, 1024, 18060)
        assert _plan(4097, sm90).variant == "dynamic"
        assert _plan(4565, sm90).variant == "dynamic"
        p = _plan(4566, sm90)
        assert (p.variant, p.code.capacity, p.smem_static_bytes) == ("chunked", 2048, 9612)
        assert p.smem_static_bytes == smem_chunked(2048, 1024, False, 1024)
    # without JITMETA_CHUNK the default tile halves until it fits: 8192 (34956 B) ->
    # 4096 (4225 * 4 + 136 + 1024 = 18060 B <= 20000)
    with envs.override(JITMETA_SMEM_BUDGET=20000):
        p = _plan(4566, sm90)
        assert (p.variant, p.code.capacity, p.smem_static_bytes) == ("chunked", 4096, 18060)
        assert p.grid == 2
    # budget 6000 B: the default chunk halves 8192 (34956 B) -> 4096 (18060 B) ->
    # 2048 (9612 B) -> 1024 (1057 * 4 + 136 + 1024 = 5388 B <= 6000); static bucket 1024
    # (256 threads: 5292 B) fits, bucket 2048 (9548 B) does not; dense dynamic:
    # tile_words(b) <= (6000 - 1168) / 4 = 1208: 1171 + 36 + 1 = 1208, 1172 -> 1209
    with envs.override(JITMETA_SMEM_BUDGET=6000):
        p = _plan(1024, sm90)
        assert (p.variant, p.threads, p.smem_static_bytes) == ("static", 256, 5292)
        assert _plan(1025, sm90).variant == "dynamic"
        assert _plan(1171, sm90).variant == "dynamic"
        p = _plan(1172, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 1024, 5388, 2)
        assert _plan(10**6, sm90).grid == 977  # 976 * 1024 = 999424 < 10**6
    # budget 5300 B: static bucket 1024 (5292 B, 256 threads) still fits, but the chunk of
    # 1024 at 1024 threads (5388 B) does not: it halves once more, to 512:
    # (512 + 16 + 1) * 4 + 136 + 1024 = 3276 B; dynamic: tile_words(b) <= (5300 - 1168)
    # / 4 = 1033 -> b <= 1001 (1001 + 31 + 1), below the 1024 bucket: never chosen
    with envs.override(JITMETA_SMEM_BUDGET=5300):
        assert _plan(1024, sm90).variant == "static"
        p = _plan(1025, sm90)
        assert (p.variant, p.code.capacity, p.smem_static_bytes, p.grid) \
            == ("chunked", 512, 3276, 3)
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
    # 1168 + 4 tile_words(8193) = 1168 + 8450 * 4 = 34968
    assert d["variant"] == "dynamic" and d["smem_bytes"] == 1168 + 8450 * 4 == 34968
    assert d["threads"] == 1024
    small = jitmeta.plan(100, arch="sm_90").to_dict()
    assert (small["variant"], small["capacity"], small["threads"], small["smem_bytes"]) \
        == ("static", 1024, 256, 5292)
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
    # static buckets 1024 (256 threads), 2048 (512), 4096, 8192 (1024); one dynamic; one
    # chunked (1024 threads each)
    assert len(codes) == 6 and len(codes) < 10
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 8192, 1024), ("dynamic", 0, 1024), ("static", 1024, 256),
        ("static", 2048, 512), ("static", 4096, 1024), ("static", 8192, 1024)]
    for code, example in codes.items():
        assert example.code == code
        assert (code.varlen, code.schedule, code.arch) == (varlen, schedule, "sm_90")
    rng = random.Random(f"{SEED}-{varlen}-{schedule}-{next_n}-{num_sms}")
    brute = {_plan(b, sm90, varlen, next_n, num_sms, 256, schedule).code
             for b in _coarse_sweep(rng, 2**24)}
    assert brute == set(codes), SEED_NOTE


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_exhaustive_sweep(sm90, varlen):
    """Every batch 1..60000 (which crosses every boundary: the last dynamic batch is
    56067 dense / 55970 varlen) plus a stride to 2**24."""
    batches = list(range(1, 60001)) + list(range(60001, 2**24 + 1, 4099)) + [2**24]
    brute = {_plan(b, sm90, varlen).code for b in batches}
    assert brute == set(codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", sm90))


@pytest.mark.parametrize("knobs", [
    {"JITMETA_SMEM_BUDGET": 40000, "JITMETA_CHUNK": 4096},
    {"JITMETA_SMEM_BUDGET": 20000, "JITMETA_CHUNK": 2048},
    {"JITMETA_SMEM_BUDGET": 20000},
    {"JITMETA_SMEM_BUDGET": 5300},
    {"JITMETA_THREADS": 256},
    {"JITMETA_THREADS": 1024},
    {"JITMETA_VARIANT": "chunked"},
], ids=["budget40k", "budget20k", "budget20k-default-chunk", "budget5300", "threads256",
        "threads1024", "forced-chunked"])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_brute_force_under_overrides(sm90, knobs, varlen):
    rng = random.Random(SEED)
    with envs.override(**knobs):
        codes = codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "sm90", sm90)
        batches = sorted(set(range(1, 12001)) | set(_coarse_sweep(rng, 2**24)))
        brute = {_plan(b, sm90, varlen, schedule="sm90").code for b in batches}
    assert brute == set(codes), f"{SEED_NOTE} {knobs}"
    assert 1 <= len(codes) < 10


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_brute_force_on_a_512_thread_device(varlen):
    lim = DeviceLimits("sm_90", 132, max_threads_per_block=512)
    codes = codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", lim)
    # static 1024 (256 threads), 2048 / 4096 / 8192 (512); dynamic and chunked (512)
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 8192, 512), ("dynamic", 0, 512), ("static", 1024, 256),
        ("static", 2048, 512), ("static", 4096, 512), ("static", 8192, 512)]
    rng = random.Random(SEED)
    batches = sorted(set(range(1, 12001)) | set(range(55000, 57001))
                     | set(_coarse_sweep(rng, 2**24)))
    assert {_plan(b, lim, varlen).code for b in batches} == set(codes), SEED_NOTE


def test_codes_for_several_ranges(sm90):
    codes = codes_for_batches([(1, 100), (9000, 9000), (3000, 3001)], 1, False, 132, 256,
                              "smxx", sm90)
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("dynamic", 0, 1024), ("static", 1024, 256), ("static", 4096, 1024)]
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
