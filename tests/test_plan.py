"""The planner (``jitmeta/heuristics/plan.py``): boundaries, limits, overrides, code sets.

Pure Python: no GPU and no compiler. Every boundary is asserted twice: once as the
value the documented formulas (``smem_static`` / ``smem_dynamic`` / ``smem_chunked``,
built on ``tile_words(n) = n + n // 32 + 1``, with static buckets at
``static_threads(cap, threads)`` threads) give, and once as the literal number worked out
by hand in the comment beside it, so that a change of formula shows up here as well as
in the compiled cubins.

The policy under test: static buckets while they fit the static limit, then chunked: the
default chunk of 8192 (halved until it fits the static limit), unless a smaller slab of
1024, 2048 or 4096 elements still gives every SM at most one slab (batch <= sm_count *
slab), in which case the smallest such slab, at static_threads(slab) threads (unless
JITMETA_THREADS is set); a cooperative grid of at most one block per SM. On sm_90 (132
SMs) that is slab 1024 (256 threads) up to 135168, 2048 (512) up to 270336, 4096 (1024)
up to 540672, then 8192 (1024). ``dynamic`` serves a batch only when forced with
JITMETA_VARIANT.

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
                                     SLAB_SIZES, WORD, PlanError, _boundaries, chunked_grid,
                                     codes_for_batches, largest_tile, plan, smem_chunked,
                                     smem_dynamic, smem_scratch, smem_static, static_threads,
                                     tile_words, workspace_words)

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


def expected_grid(batch: int, chunk: int, sm_count: int, threads: int) -> int:
    """Blocks of a chunked launch, as documented: at most one per SM, one per thread of
    a block and 1024 in all; the slabs are spread evenly (the fewest slabs per block),
    and no block is left without one."""
    slabs = -(-batch // chunk)
    most = min(slabs, sm_count, threads, 1024)
    per = -(-slabs // most)
    return -(-slabs // per)


# the slab sizes of the documented policy, smallest first (a literal, not SLAB_SIZES)
SLABS = (1024, 2048, 4096)


def default_chunk(limits: DeviceLimits, threads: int, varlen: bool) -> int:
    """The default chunk: 8192 halved (not below 32) until its tile at the default
    ``threads`` fits the static limit (``limits`` after the budget)."""
    chunk = 8192
    while chunk > 32 and smem_chunked(chunk, threads, varlen, limits.smem_reserved_bytes) \
            > limits.smem_static_bytes:
        chunk //= 2
    return chunk


def expected_slab(batch: int, sm_count: int, chunk: int) -> int | None:
    """The slab the documented policy takes instead of the default ``chunk``: the
    smallest one smaller than it that still needs no more slabs than there are SMs
    (one per block at most); None if none does."""
    fits = [c for c in SLABS if c < chunk and -(-batch // c) <= sm_count]
    return min(fits) if fits else None


def expected_chunked(batch, limits, threads, varlen, forced_threads=False,
                     chunk_knob=None) -> tuple[int, int, int, int] | None:
    """The documented chunked choice: (chunk, threads, static bytes, grid), or None.

    The chunk is JITMETA_CHUNK (``chunk_knob``) as given, at ``threads``; else the
    default chunk (``default_chunk``) at ``threads``, unless a smaller slab serves
    (``expected_slab``): then that slab at bucket_threads(slab) threads.
    """
    rsv = limits.smem_reserved_bytes
    t = threads
    if chunk_knob is not None:
        chunk = chunk_knob
    else:
        chunk = default_chunk(limits, threads, varlen)
        slab = expected_slab(batch, limits.sm_count, chunk)
        if slab is not None:
            chunk, t = slab, bucket_threads(slab, threads, forced_threads)
    smem = smem_chunked(chunk, t, varlen, rsv)
    if smem > limits.smem_static_bytes:
        return None
    return chunk, t, smem, expected_grid(batch, chunk, limits.sm_count, t)


def expected_plan(batch, limits, threads, varlen, forced_threads=False, chunk_knob=None,
                  variant_knob=None) -> tuple | None:
    """The documented decision as (variant, capacity, threads, static bytes, dynamic
    bytes, grid): the forced variant if it fits; else static, else chunked; else None.
    ``limits`` are the limits after the budget."""
    rsv = limits.smem_reserved_bytes
    cap = MIN_STATIC_CAPACITY
    while cap < batch:
        cap *= 2
    t = bucket_threads(cap, threads, forced_threads)
    st = smem_static(cap, t, varlen, rsv)
    static = ("static", cap, t, st, 0, 1) if st <= limits.smem_static_bytes else None
    if variant_knob == "static":
        return static
    if variant_knob == "dynamic":
        st, dyn = smem_dynamic(batch, threads, varlen, rsv)
        return ("dynamic", 0, threads, st, dyn, 1) \
            if st + dyn <= limits.smem_optin_bytes else None
    ch = expected_chunked(batch, limits, threads, varlen, forced_threads, chunk_knob)
    chunked = None if ch is None else ("chunked", ch[0], ch[1], ch[2], 0, ch[3])
    if variant_knob == "chunked":
        return chunked
    return static or chunked


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
    # each slab at its default threads (static_threads(slab, 1024): 256 / 512 / 1024):
    # the same bytes as the static bucket of its size
    assert smem_chunked(1024, 256, False, 1024) == 1057 * 4 + 40 + 1024 == 5292
    assert smem_chunked(1024, 256, True, 1024) == 1057 * 4 + 160 + 1024 == 5412
    assert smem_chunked(2048, 512, False, 1024) == 2113 * 4 + 72 + 1024 == 9548
    assert smem_chunked(2048, 512, True, 1024) == 2113 * 4 + 288 + 1024 == 9764
    assert smem_chunked(4096, 1024, False, 1024) == 4225 * 4 + 136 + 1024 == 18060
    assert smem_chunked(4096, 1024, True, 1024) == 4225 * 4 + 544 + 1024 == 18468
    assert smem_chunked(8192, 1024, True, 1024) == 8449 * 4 + 544 + 1024 == 35364
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


def test_chunked_grid_by_hand():
    assert (DEFAULT_CHUNK, SLAB_SIZES) == (8192, SLABS) == (8192, (1024, 2048, 4096))
    # slabs = ceil(batch / chunk); at most min(slabs, sm_count, threads, 1024) blocks;
    # per = ceil(slabs / that) slabs per block; grid = ceil(slabs / per)
    assert chunked_grid(1, 8192, 132, 1024) == 1
    assert chunked_grid(8193, 1024, 132, 256) == 9           # 8 * 1024 = 8192 < 8193
    assert chunked_grid(135168, 1024, 132, 256) == 132       # 132 * 1024: one slab each
    assert chunked_grid(135169, 2048, 132, 512) == 67        # 66 * 2048 = 135168 < 135169
    assert chunked_grid(270337, 4096, 132, 1024) == 67       # 66 * 4096 = 270336 < 270337
    assert chunked_grid(540672, 4096, 132, 1024) == 132      # 132 * 4096: one slab each
    assert chunked_grid(540673, 8192, 132, 1024) == 67       # 66 * 8192 = 540672 < 540673
    assert chunked_grid(8193, 2048, 132, 512) == 5           # 4 * 2048 = 8192 < 8193
    assert chunked_grid(56068, 2048, 132, 512) == 28         # 27 * 2048 = 55296 < 56068
    assert chunked_grid(270336, 2048, 132, 512) == 132       # 132 * 2048: one slab each
    assert chunked_grid(270337, 8192, 132, 1024) == 34       # 33 * 8192 = 270336 < 270337
    assert chunked_grid(2**20, 8192, 132, 1024) == 128       # 128 slabs, one each
    # 2048 slabs on 132 SMs: per = ceil(2048 / 132) = 16 (132 * 15 = 1980 < 2048);
    # grid = 2048 / 16 = 128 (four SMs idle rather than blocks of 15 and 16 slabs)
    assert chunked_grid(2**24, 8192, 132, 1024) == 128
    assert chunked_grid(2**24 + 1, 8192, 132, 1024) == 129   # 2049 slabs: 16 * 128 < 2049
    # 78 SMs: per = ceil(2048 / 78) = 27 (78 * 26 = 2028 < 2048); ceil(2048 / 27) = 76
    # (27 * 75 = 2025 < 2048 <= 2052)
    assert chunked_grid(2**24, 8192, 78, 1024) == 76
    # the block size caps the grid (one polling thread per block): 256 -> per 8
    assert chunked_grid(2**24, 8192, 500, 256) == 256
    assert chunked_grid(2**24, 8192, 132, 32) == 32          # per 64
    # slab 1024 at 256 threads on 2000 SMs: 2048000 = 2000 slabs, at most 256 blocks ->
    # per = ceil(2000 / 256) = 8 (256 * 7 = 1792 < 2000), grid 2000 / 8 = 250
    assert chunked_grid(2048000, 1024, 2000, 256) == 250
    # and 1024 blocks at most: 2048 slabs on 2000 SMs -> per 2
    assert chunked_grid(2**24, 8192, 2000, 1024) == 1024
    assert chunked_grid(2**24, 1024, 5000, 1024) == 1024     # 16384 slabs, per 16
    # 10**6 / 1024: 977 slabs (976 * 1024 = 999424); per = ceil(977 / 132) = 8
    # (132 * 7 = 924 < 977); ceil(977 / 8) = 123 (8 * 122 = 976 < 977)
    assert chunked_grid(10**6, 1024, 132, 1024) == 123
    assert chunked_grid(17 * 2048, 2048, 16, 1024) == 9      # 17 slabs, per 2
    assert chunked_grid(2**24, 8192, 1, 1024) == 1           # one SM: one block
    # against a brute force: the fewest slabs per block that needs no more blocks than
    # the cap; then as few blocks as that allows, none of them empty
    for slabs in range(1, 300):
        for sms in (1, 2, 3, 7, 16, 33, 132):
            for t in (32, 64, 256, 1024):
                cap = min(sms, t, 1024)
                per = next(p for p in range(1, slabs + 1) if -(-slabs // p) <= cap)
                grid = chunked_grid(slabs * 64 - 5, 64, sms, t)
                assert grid == -(-slabs // per), (slabs, sms, t)
                assert grid <= cap and (grid - 1) * per < slabs <= grid * per


def test_workspace_words_by_hand():
    # 4 epoch words + 8 words for each of 1024 block slots + one summary per slab:
    # 1 word (dense) or 4 words (varlen, 16 B)
    assert workspace_words(1, 8192, False) == 4 + 8192 + 1 == 8197
    assert workspace_words(1, 8192, True) == 4 + 8192 + 4 == 8200
    assert workspace_words(8193, 2048, False) == 4 + 8192 + 5 == 8201
    assert workspace_words(8193, 2048, True) == 4 + 8192 + 5 * 4 == 8216
    assert workspace_words(8193, 1024, False) == 4 + 8192 + 9 == 8205
    assert workspace_words(135168, 1024, True) == 4 + 8192 + 132 * 4 == 8724
    assert workspace_words(2**24, 8192, False) == 4 + 8192 + 2048 == 10244
    assert workspace_words(2**24, 8192, True) == 4 + 8192 + 2048 * 4 == 16388
    assert workspace_words(2**24 + 1, 8192, False) == 4 + 8192 + 2049 == 10245
    assert workspace_words(2**24 + 1, 8192, True) == 4 + 8192 + 2049 * 4 == 16392
    # 2**26 varlen tokens: 8192 slabs -> 4 + 8192 + 32768 = 40964 words, under 1 << 16
    assert workspace_words(2**26, 8192, True) == 40964 < 1 << 16


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
def test_sm90_static_chunked_boundary(sm90, varlen):
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
    # 8193 <= 132 * 1024 = 135168: chunked with the smallest slab, 1024, at
    # static_threads(1024, 1024) = 256 threads; 8 * 1024 = 8192 < 8193 <= 9 * 1024: 9 slabs,
    # one block each; 1057 * 4 + 40 (160) + 1024 = 5292 (5412) B
    first = _plan(8193, sm90, varlen)
    assert (first.variant, first.code.capacity, first.grid) == ("chunked", 1024, 9)
    assert first.threads == first.code.threads == 256
    assert first.smem_static_bytes == smem_chunked(1024, 256, varlen, 1024)
    assert first.smem_static_bytes == (5412 if varlen else 5292)
    assert first.smem_dynamic_bytes == 0
    assert "static" in last.reason
    assert "9 cooperative block(s) over 9 slab(s) of 1024 elements" in first.reason
    assert "dynamic" not in first.reason


# (last batch of a slab, its slab, threads, dense / varlen bytes, then the next batch's
# chunk, threads, slabs, dense / varlen bytes) on sm_90, 132 SMs: a slab serves while every
# SM's block gets at most one slab of it, so up to 132 * slab; the next batch needs 133
# slabs of it and takes the next size: 132 * c = 66 * 2c, so 67 slabs of 2c, 67 blocks
SM90_SLAB_EDGES = [
    # 132 * 1024 = 135168; 1057 * 4 + 40 (160) + 1024 = 5292 (5412) B at 256 threads;
    # 2113 * 4 + 72 (288) + 1024 = 9548 (9764) B at 512 threads
    pytest.param(135168, 1024, 256, 5292, 5412, 2048, 512, 9548, 9764, id="1024-2048"),
    # 132 * 2048 = 270336; 4225 * 4 + 136 (544) + 1024 = 18060 (18468) B at 1024 threads
    pytest.param(270336, 2048, 512, 9548, 9764, 4096, 1024, 18060, 18468, id="2048-4096"),
    # 132 * 4096 = 540672; the default chunk: 8449 * 4 + 136 (544) + 1024 = 34956 (35364) B
    pytest.param(540672, 4096, 1024, 18060, 18468, 8192, 1024, 34956, 35364,
                 id="4096-8192"),
]


@pytest.mark.parametrize("last_batch,slab,threads,dense_b,varlen_b,"
                         "next_chunk,next_threads,next_dense_b,next_varlen_b", SM90_SLAB_EDGES)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_slab_boundaries(sm90, varlen, last_batch, slab, threads, dense_b, varlen_b,
                              next_chunk, next_threads, next_dense_b, next_varlen_b):
    assert last_batch == 132 * slab
    # the last batch of the slab: 132 slabs, 132 blocks (min(132, 132 SMs, threads, 1024))
    last = _plan(last_batch, sm90, varlen)
    assert (last.variant, last.code.capacity, last.threads, last.code.threads, last.grid) \
        == ("chunked", slab, threads, threads, 132)
    assert last.smem_static_bytes == (varlen_b if varlen else dense_b)
    assert last.smem_static_bytes == smem_chunked(slab, threads, varlen, 1024)
    assert last.smem_dynamic_bytes == 0
    assert f"132 cooperative block(s) over 132 slab(s) of {slab} elements" in last.reason
    # one more: 133 slabs of the slab would leave a block two; the next size (67 slabs)
    first = _plan(last_batch + 1, sm90, varlen)
    assert (first.variant, first.code.capacity, first.threads, first.code.threads,
            first.grid) == ("chunked", next_chunk, next_threads, next_threads, 67)
    assert first.smem_static_bytes == (next_varlen_b if varlen else next_dense_b)
    assert first.smem_static_bytes == smem_chunked(next_chunk, next_threads, varlen, 1024)
    assert first.smem_dynamic_bytes == 0
    assert f"67 cooperative block(s) over 67 slab(s) of {next_chunk} elements" in first.reason
    # both sides against the documented policy (the grid too)
    for p in (last, first):
        assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == expected_chunked(p.batch, sm90, 1024, varlen), p.batch
    # the half-way point of the next size is still on it: 132 * 1.5 slab
    mid = _plan(last_batch + last_batch // 2, sm90, varlen)
    assert (mid.code.capacity, mid.threads) == (next_chunk, next_threads)


@pytest.mark.parametrize("varlen,largest", [(False, 56067), (True, 55970)],
                         ids=["dense", "varlen"])
def test_sm90_forced_dynamic_limit(sm90, varlen, largest):
    # dense:  1168 + 4 tile_words(b) <= 232448 -> tile_words(b) <= 231280 / 4 = 57820
    #         56067 + 56067 // 32 + 1 = 56067 + 1752 + 1 = 57820;  56068 -> 57821
    # varlen: 1568 + 4 tile_words(b) <= 232448 -> tile_words(b) <= 230880 / 4 = 57720
    #         55970 + 55970 // 32 + 1 = 55970 + 1749 + 1 = 57720;  55971 -> 57721
    assert largest_dynamic_batch(sm90, DEFAULT_THREADS, varlen) == largest
    assert largest_tile((sm90.smem_optin_bytes - (1568 if varlen else 1168)) // WORD) \
        == largest
    # unforced, neither side of the dynamic limit is dynamic: b <= 132 * 1024, so slab
    # 1024 at 256 threads; 54 * 1024 = 55296 < b <= 55 * 1024 = 56320: 55 slabs, one
    # block each
    for batch in (largest, largest + 1):
        p = _plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 1024, 256, 55)
    with envs.override(JITMETA_VARIANT="dynamic"):
        first = _plan(8193, sm90, varlen)
        assert (first.variant, first.code.capacity, first.grid) == ("dynamic", 0, 1)
        assert first.threads == DEFAULT_THREADS == 1024
        # 136 (544) + 1024 = 1160 (1568) -> rounded up to 16: 1168 (1568)
        assert first.smem_static_bytes == (1568 if varlen else 1168)
        assert first.smem_dynamic_bytes == tile_words(8193) * 4 == 8450 * 4 == 33800
        assert "JITMETA_VARIANT" in first.reason and "dynamic" in first.reason
        last = _plan(largest, sm90, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= sm90.smem_optin_bytes
        # 1168 + 57820 * 4 == 1568 + 57720 * 4 == 232448: the opt-in limit exactly
        assert last.smem_dynamic_bytes == (57720 if varlen else 57820) * 4
        assert last.smem_bytes == 232448
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            _plan(largest + 1, sm90, varlen)


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
    """JITMETA_THREADS replaces static_threads in every bucket (and every slab and the
    default chunk)."""
    with envs.override(JITMETA_THREADS=forced):
        for batch, cap, *_ in SM90_BUCKETS:
            for varlen in (False, True):
                p = _plan(batch, sm90, varlen)
                assert (p.variant, p.code.capacity, p.threads) == ("static", cap, forced)
                assert p.smem_static_bytes == smem_static(cap, forced, varlen, 1024)
        # the slabs (static_threads: 256 / 512 / 1024 unless set) keep their ranges:
        # 8193 and 135168 <= 132 * 1024; 135169 and 270336 <= 132 * 2048; 270337 and
        # 540672 <= 132 * 4096; 540673 and 10**6 on the default chunk
        for batch, chunk in ((8193, 1024), (135168, 1024), (135169, 2048), (270336, 2048),
                             (270337, 4096), (540672, 4096), (540673, 8192),
                             (10**6, 8192)):
            p = _plan(batch, sm90)
            assert (p.variant, p.code.capacity, p.threads) == ("chunked", chunk, forced), \
                batch
            assert p.smem_static_bytes == smem_chunked(chunk, forced, False, 1024), batch
    # 1024 on the 1024 bucket: 1057 * 4 + 136 + 1024 = 5388 B (the default there is 5292 B)
    with envs.override(JITMETA_THREADS=1024):
        assert _plan(100, sm90).smem_static_bytes == 5388
    assert _plan(100, sm90).smem_static_bytes == 5292


# (batch, chunk, threads, slabs, grid, dense bytes, varlen bytes) on sm_90 (132 SMs):
# slab 1024 (256 threads: 1057 * 4 + 40 (160) + 1024 B) up to 132 * 1024 = 135168,
# slab 2048 (512 threads: 2113 * 4 + 72 (288) + 1024 B) up to 132 * 2048 = 270336,
# slab 4096 (1024 threads: 4225 * 4 + 136 (544) + 1024 B) up to 132 * 4096 = 540672,
# then the default 8192 (1024 threads: 8449 * 4 + 136 (544) + 1024 B);
# grid = ceil(slabs / per), per = ceil(slabs / min(slabs, 132, threads, 1024))
SM90_CHUNKED = [
    (8193, 1024, 256, 9, 9, 5292, 5412),            # 8 * 1024 = 8192 < 8193
    (56068, 1024, 256, 55, 55, 5292, 5412),         # 54 * 1024 = 55296 < 56068 <= 56320
    (57820, 1024, 256, 57, 57, 5292, 5412),         # 57344 < 57820 <= 57 * 1024 = 58368
    (65536, 1024, 256, 64, 64, 5292, 5412),         # 65536 / 1024
    (135168, 1024, 256, 132, 132, 5292, 5412),      # 132 * 1024: one slab per SM
    (135169, 2048, 512, 67, 67, 9548, 9764),        # 66 * 2048 = 135168 < 135169
    (200000, 2048, 512, 98, 98, 9548, 9764),        # 97 * 2048 = 198656 < 200000 <= 200704
    (270336, 2048, 512, 132, 132, 9548, 9764),      # 132 * 2048: one slab per SM
    (270337, 4096, 1024, 67, 67, 18060, 18468),     # 66 * 4096 = 270336 < 270337
    (400000, 4096, 1024, 98, 98, 18060, 18468),     # 97 * 4096 = 397312 < 400000 <= 401408
    (540672, 4096, 1024, 132, 132, 18060, 18468),   # 132 * 4096: one slab per SM
    (540673, 8192, 1024, 67, 67, 34956, 35364),     # 66 * 8192 = 540672 < 540673
    (2**20, 8192, 1024, 128, 128, 34956, 35364),    # 2**20 / 8192 = 128 <= 132
    (2**24, 8192, 1024, 2048, 128, 34956, 35364),   # per 16 (1980 < 2048 <= 2112); 2048 / 16
    (2**24 + 1, 8192, 1024, 2049, 129, 34956, 35364),  # per 16; 16 * 128 = 2048 < 2049
]


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_chunked_grid_for_huge_batches(sm90, varlen):
    for batch, chunk, threads, slabs, grid, dense_b, varlen_b in SM90_CHUNKED:
        p = _plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == ("chunked", chunk, threads, grid), batch
        assert p.grid == expected_grid(batch, chunk, 132, threads), batch
        assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch
        assert p.smem_dynamic_bytes == 0, batch
        assert (f"{grid} cooperative block(s) over {slabs} slab(s) of {chunk} elements"
                in p.reason), (batch, p.reason)
    assert _plan(2**24, sm90, varlen).grid == 128


def test_chunked_plan_follows_the_device_sm_count():
    # 78 SMs: slab 2048 up to 78 * 2048 = 159744 (78 slabs, 78 blocks); 159745 takes
    # slab 4096 (up to 78 * 4096 = 319488): 39 * 4096 = 159744 < 159745 -> 40 slabs, 40
    # blocks (before the slabs, the default chunk: 19 * 8192 = 155648 < 159745, 20 slabs)
    lim = limits_for_arch("sm_90", 78)
    assert (_plan(159744, lim).code.capacity, _plan(159744, lim).grid) == (2048, 78)
    p = _plan(159745, lim)
    assert (p.code.capacity, p.threads, p.grid) == (4096, 1024, 40)
    # 2**24: per = ceil(2048 / 78) = 27, grid = ceil(2048 / 27) = 76 (27 * 75 = 2025 < 2048)
    assert _plan(2**24, lim).grid == 76
    # 4 SMs: 4 * 1024 = 4096 and 4 * 2048 = 8192, so no batch past the static buckets
    # takes slab 1024 or 2048; 8193 <= 4 * 4096 = 16384 takes slab 4096: 2 * 4096 = 8192
    # < 8193 -> 3 slabs, 3 blocks; 16385 takes the default chunk: 3 slabs of 8192
    lim = limits_for_arch("sm_90", 4)
    p = _plan(8193, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 4096, 1024, 3)
    p = _plan(16384, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 4096, 1024, 4)
    p = _plan(16385, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 8192, 1024, 3)
    assert _plan(2**24, lim).grid == 4                  # per = 2048 / 4 = 512
    # one SM: 1 * 4096 < 8193, so no slab; one block however large the batch
    lim = limits_for_arch("sm_90", 1)
    assert (_plan(8193, lim).code.capacity, _plan(8193, lim).grid) == (8192, 1)
    assert _plan(2**24, lim).grid == 1
    # 2000 SMs: slab 1024 up to 2000 * 1024 = 2048000: 2000 slabs, at most 256 blocks (its
    # 256 threads): per = ceil(2000 / 256) = 8 (256 * 7 = 1792 < 2000), grid 2000 / 8 = 250
    lim = limits_for_arch("sm_90", 2000)
    p = _plan(2048000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (1024, 256, 250)
    # slab 2048 up to 2000 * 2048 = 4096000: 2000 slabs, at most 512 blocks (its 512
    # threads): per = ceil(2000 / 512) = 4, grid = 2000 / 4 = 500
    p = _plan(4096000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (2048, 512, 500)
    # slab 4096 up to 2000 * 4096 = 8192000: 2000 slabs, at most 1024 blocks: per 2,
    # grid 1000
    p = _plan(8192000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (4096, 1024, 1000)
    # 2**24 on 2000 SMs: 2048 slabs of 8192, at most 1024 blocks -> per 2, grid 1024
    p = _plan(2**24, lim)
    assert (p.code.capacity, p.threads, p.grid) == (8192, 1024, 1024)
    # the plan's num_sms argument (the output's SM count) moves none of it
    for num_sms in (1, 78, 132, 4096):
        p = _plan(2**24, limits_for_arch("sm_90", 78), num_sms=num_sms)
        assert (p.code.capacity, p.grid, p.num_sms) == (8192, 76, num_sms)


# (sm_count, [(batch, chunk, threads, slabs, grid)]) on hand-built sm_90 devices (1 KiB
# reserved, 48 KiB static: the bytes of each (chunk, threads) are those of sm_90:
# 1024 / 256 -> 5292 (5412), 2048 / 512 -> 9548 (9764), 4096 / 1024 -> 18060 (18468),
# 8192 / 1024 -> 34956 (35364) B); a slab serves up to sm_count * slab;
# grid = ceil(slabs / per), per = ceil(slabs / min(slabs, sm_count, threads, 1024))
SLAB_BYTES = {(1024, 256): (5292, 5412), (2048, 512): (9548, 9764),
              (4096, 1024): (18060, 18468), (8192, 1024): (34956, 35364)}
DEVICE_SLAB_EDGES = [
    pytest.param(78, [
        (8193, 1024, 256, 9, 9),            # 8 * 1024 = 8192 < 8193
        (79872, 1024, 256, 78, 78),         # 78 * 1024: one slab per SM
        (79873, 2048, 512, 40, 40),         # 39 * 2048 = 79872 < 79873
        (159744, 2048, 512, 78, 78),        # 78 * 2048
        (159745, 4096, 1024, 40, 40),       # 39 * 4096 = 159744 < 159745
        (319488, 4096, 1024, 78, 78),       # 78 * 4096
        (319489, 8192, 1024, 40, 40),       # 39 * 8192 = 319488 < 319489
        # 2048 slabs: per = ceil(2048 / 78) = 27 (78 * 26 = 2028 < 2048), 2048 / 27 -> 76
        (2**24, 8192, 1024, 2048, 76),
    ], id="78-sms"),
    pytest.param(300, [
        (8193, 1024, 256, 9, 9),
        # 257 slabs of 1024 need 257 blocks but its 256 threads allow 256: per 2, grid
        # ceil(257 / 2) = 129
        (263168, 1024, 256, 257, 129),      # 257 * 1024
        # 300 * 1024 = 307200: 300 slabs, per = ceil(300 / 256) = 2, grid 150
        (307200, 1024, 256, 300, 150),
        (307201, 2048, 512, 151, 151),      # 150 * 2048 = 307200 < 307201
        (614400, 2048, 512, 300, 300),      # 300 * 2048: 300 <= 512 blocks
        (614401, 4096, 1024, 151, 151),     # 150 * 4096 = 614400 < 614401
        (1228800, 4096, 1024, 300, 300),    # 300 * 4096
        (1228801, 8192, 1024, 151, 151),    # 150 * 8192 = 1228800 < 1228801
        # 2048 slabs: per = ceil(2048 / 300) = 7 (300 * 6 = 1800 < 2048), grid
        # ceil(2048 / 7) = 293 (7 * 292 = 2044 < 2048)
        (2**24, 8192, 1024, 2048, 293),
    ], id="300-sms"),
    pytest.param(5, [
        # 5 * 1024 = 5120 and 5 * 2048 = 10240: 8193 takes slab 2048 (slab 1024 would
        # need 9 > 5 slabs): 4 * 2048 = 8192 < 8193 -> 5 slabs
        (8193, 2048, 512, 5, 5),
        (10240, 2048, 512, 5, 5),           # 5 * 2048
        (10241, 4096, 1024, 3, 3),          # 2 * 4096 = 8192 < 10241 <= 12288
        (20480, 4096, 1024, 5, 5),          # 5 * 4096
        (20481, 8192, 1024, 3, 3),          # 2 * 8192 = 16384 < 20481 <= 24576
        (2**24, 8192, 1024, 2048, 5),       # per = ceil(2048 / 5) = 410, 2048 / 410 -> 5
    ], id="5-sms"),
]


@pytest.mark.parametrize("sm_count,rows", DEVICE_SLAB_EDGES)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_slab_boundaries_follow_the_device_sm_count(sm_count, rows, varlen):
    lim = limits_for_arch("sm_90", sm_count)
    assert lim.sm_count == sm_count
    for batch, chunk, threads, slabs, grid in rows:
        p = _plan(batch, lim, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == ("chunked", chunk, threads, grid), batch
        assert p.smem_static_bytes == SLAB_BYTES[chunk, threads][varlen], batch
        assert p.smem_dynamic_bytes == 0, batch
        assert (f"{grid} cooperative block(s) over {slabs} slab(s) of {chunk} elements"
                in p.reason), (batch, p.reason)
        assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == expected_chunked(batch, lim, 1024, varlen), batch
        # the plan's own SM count moves nothing
        q = _plan(batch, lim, varlen, num_sms=7)
        assert (q.code, q.grid) == (p.code, p.grid), batch


def test_next_n_and_num_sms_do_not_change_boundaries(sm90):
    for next_n in (1, 2, 3, 6):
        for num_sms in (1, 132, 4096):
            got = [(p.variant, p.code.capacity) for p in
                   (_plan(b, sm90, False, next_n, num_sms)
                    for b in (8192, 8193, 56067, 56068, 135168, 135169, 270336, 270337,
                              540672, 540673))]
            assert got == [("static", 8192), ("chunked", 1024), ("chunked", 1024),
                           ("chunked", 1024), ("chunked", 1024), ("chunked", 2048),
                           ("chunked", 2048), ("chunked", 4096), ("chunked", 4096),
                           ("chunked", 8192)], (next_n, num_sms)


# --- boundaries for hand-built limits ----------------------------------------------------

# (limits, extra overrides, dense (largest static, largest forced dynamic), varlen (same),
#  chunked plans [(batch, chunk, threads, dense bytes, varlen bytes, grid)], the first at
#  the largest static batch + 1)
# largest dynamic b: the largest with tile_words(b) = b + b // 32 + 1 <= W words
# grid = ceil(slabs / per), per = ceil(slabs / min(slabs, sm_count, threads, 1024))
HAND_LIMITS = [
    pytest.param(
        DeviceLimits("sm_80", 108, smem_optin_bytes=166912, smem_reserved_bytes=0), {},
        # static: bucket 8192 = 8449 * 4 + 136 (544) = 33932 (34340) B <= 49152
        # dense: static part ceil16(136) = 144; W = (166912 - 144) / 4 = 41692;
        #        40428 + 1263 + 1 = 41692, 40429 -> 41693
        # varlen: static part 544;          W = (166912 - 544) / 4 = 41592;
        #        40331 + 1260 + 1 = 41592, 40332 -> 41593
        (8192, 40428), (8192, 40331),
        # no reserved bytes: slab 1024 (256 threads): 1057 * 4 + 40 (160) = 4268 (4388) B
        # up to 108 * 1024 = 110592; slab 2048 (512 threads): 2113 * 4 + 72 (288) = 8524
        # (8740) B up to 108 * 2048 = 221184; slab 4096 (1024 threads): 4225 * 4 + 136
        # (544) = 17036 (17444) B up to 108 * 4096 = 442368; then 8192 (1024 threads):
        # 33932 (34340) B; one past each edge: 54 slabs of the slab + 1 -> 55 of the next;
        # 2**24: 2048 slabs, per = ceil(2048 / 108) = 19 (1944 < 2048 <= 2052),
        # grid = ceil(2048 / 19) = 108 (19 * 107 = 2033 < 2048)
        [(8193, 1024, 256, 4268, 4388, 9), (110592, 1024, 256, 4268, 4388, 108),
         (110593, 2048, 512, 8524, 8740, 55), (221184, 2048, 512, 8524, 8740, 108),
         (221185, 4096, 1024, 17036, 17444, 55), (442368, 4096, 1024, 17036, 17444, 108),
         (442369, 8192, 1024, 33932, 34340, 55), (2**24, 8192, 1024, 33932, 34340, 108)],
        id="a100"),
    pytest.param(
        DeviceLimits("sm_89", 128, smem_optin_bytes=101376, smem_reserved_bytes=0), {},
        # dense: W = (101376 - 144) / 4 = 25308; 24541 + 766 + 1 = 25308, 24542 -> 25309
        # varlen: W = (101376 - 544) / 4 = 25208; 24444 + 763 + 1 = 25208, 24445 -> 25209
        (8192, 24541), (8192, 24444),
        # bytes as a100; slab 1024 up to 128 * 1024 = 131072, 2048 up to 262144, 4096 up
        # to 524288; one past each edge: 64 slabs of the slab + 1 -> 65 of the next;
        # 2**24: 2048 slabs, per 16, grid 128
        [(8193, 1024, 256, 4268, 4388, 9), (131072, 1024, 256, 4268, 4388, 128),
         (131073, 2048, 512, 8524, 8740, 65), (262144, 2048, 512, 8524, 8740, 128),
         (262145, 4096, 1024, 17036, 17444, 65), (524288, 4096, 1024, 17036, 17444, 128),
         (524289, 8192, 1024, 33932, 34340, 65), (2**24, 8192, 1024, 33932, 34340, 128)],
        id="l40s"),
    pytest.param(
        DeviceLimits("sm_90", 16, smem_static_bytes=16 * KIB, smem_optin_bytes=64 * KIB),
        {"JITMETA_CHUNK": 2048},
        # static: bucket 2048 (512 threads) = 2113 * 4 + 72 (288) + 1024 = 9548 (9764) B
        # <= 16384; bucket 4096 (1024 threads) = 4225 * 4 + 136 + 1024 = 18060 B > 16384
        # dense: W = (65536 - 1168) / 4 = 16092; 15604 + 487 + 1 = 16092, 15605 -> 16093
        # varlen: W = (65536 - 1568) / 4 = 15992; 15507 + 484 + 1 = 15992, 15508 -> 15993
        (2048, 15604), (2048, 15507),
        # JITMETA_CHUNK=2048 as given, at the default 1024 threads (no slab switch):
        # 2113 * 4 + 136 (544) + 1024 = 9612 (10020) B <= 16384; 2049 -> 2 slabs;
        # 16 * 2048 = 32768 -> 16 blocks; 32769 -> 17 slabs, per 2, grid ceil(17 / 2) = 9;
        # 2**24: 8192 slabs, per 512, grid 16
        [(2049, 2048, 1024, 9612, 10020, 2), (32768, 2048, 1024, 9612, 10020, 16),
         (32769, 2048, 1024, 9612, 10020, 9), (2**24, 2048, 1024, 9612, 10020, 16)],
        id="small-smem"),
    pytest.param(
        DeviceLimits("sm_90", 16, smem_static_bytes=16 * KIB, smem_optin_bytes=64 * KIB),
        {},
        # as small-smem, without JITMETA_CHUNK: the default chunk halves 8192 (34956 /
        # 35364 B) -> 4096 (4225 * 4 + 136 (544) + 1024 = 18060 (18468) B > 16384) ->
        # 2048 (9612 (10020) B <= 16384); the only slab below 2048 is 1024 (256
        # threads): 1057 * 4 + 40 (160) + 1024 = 5292 (5412) B, up to 16 * 1024 = 16384;
        # past it the halved default chunk at the default 1024 threads: 9612 (10020) B
        (2048, 15604), (2048, 15507),
        # 2049 -> 3 slabs of 1024 (2048 < 2049 <= 3072); 16384 -> 16; 16385 -> 9 of 2048
        # (8 * 2048 = 16384); 2**24: 8192 slabs of 2048, per 512, grid 16
        [(2049, 1024, 256, 5292, 5412, 3), (16384, 1024, 256, 5292, 5412, 16),
         (16385, 2048, 1024, 9612, 10020, 9), (2**24, 2048, 1024, 9612, 10020, 16)],
        id="small-smem-default-chunk"),
    pytest.param(
        DeviceLimits("sm_90", 132), {"JITMETA_THREADS": 256},
        # 256 threads everywhere: scratch 40 B (dense) / 160 B (varlen);
        # static bucket 8192 = 8449 * 4 + 40 (160) + 1024 = 34860 (34980) B <= 49152
        # dense: ceil16(1064) = 1072; W = (232448 - 1072) / 4 = 57844;
        #        56091 + 1752 + 1 = 57844, 56092 -> 57845
        # varlen: ceil16(1184) = 1184; W = (232448 - 1184) / 4 = 57816;
        #        56063 + 1751 + 1 = 57815 (4 B to spare), 56064 + 1752 + 1 = 57817 > W
        (8192, 56091), (8192, 56063),
        # every slab keeps the forced 256 threads: 1024: 1057 * 4 + 40 (160) + 1024 =
        # 5292 (5412) B up to 135168; 2048: 2113 * 4 + 40 (160) + 1024 = 9516 (9636) B
        # up to 270336; 4096: 4225 * 4 + 40 (160) + 1024 = 17964 (18084) B up to 540672;
        # then 8192: 34860 (34980) B; 67 slabs past each edge; 2**24: grid 128
        [(8193, 1024, 256, 5292, 5412, 9), (135168, 1024, 256, 5292, 5412, 132),
         (135169, 2048, 256, 9516, 9636, 67), (270336, 2048, 256, 9516, 9636, 132),
         (270337, 4096, 256, 17964, 18084, 67), (540672, 4096, 256, 17964, 18084, 132),
         (540673, 8192, 256, 34860, 34980, 67), (2**24, 8192, 256, 34860, 34980, 128)],
        id="256-threads"),
    pytest.param(
        DeviceLimits("sm_90", 600), {"JITMETA_THREADS": 256},
        # as 256-threads (the SM count moves no smem figure), but the block size caps
        # the grid before the SMs do: at most 256 blocks.
        (8192, 56091), (8192, 56063),
        # slab 1024 up to 600 * 1024 = 614400: 600 slabs, per = ceil(600 / 256) = 3,
        # grid 200; 614401: 614400 = 300 * 2048 -> 301 slabs of 2048, per 2, grid
        # ceil(301 / 2) = 151; likewise 2048 up to 1228800, 4096 up to 2457600 (600
        # slabs, 200 blocks) and 301 slabs, 151 blocks one past each;
        # 2**24: 2048 slabs, per 8, grid 256
        [(8193, 1024, 256, 5292, 5412, 9), (614400, 1024, 256, 5292, 5412, 200),
         (614401, 2048, 256, 9516, 9636, 151), (1228800, 2048, 256, 9516, 9636, 200),
         (1228801, 4096, 256, 17964, 18084, 151), (2457600, 4096, 256, 17964, 18084, 200),
         (2457601, 8192, 256, 34860, 34980, 151), (2**24, 8192, 256, 34860, 34980, 256)],
        id="600-sms-256-threads"),
    pytest.param(
        DeviceLimits("sm_90", 132, max_threads_per_block=512), {},
        # block limit 512: dynamic gets 512 threads, static buckets 256 / 512 / 512 / 512;
        # bucket 8192 = 8449 * 4 + 72 (288) + 1024 = 34892 (35108) B
        # dense: ceil16(72 + 1024) = 1104; W = (232448 - 1104) / 4 = 57836;
        #        56083 + 1752 + 1 = 57836, 56084 -> 57837
        # varlen: ceil16(288 + 1024) = 1312; W = (232448 - 1312) / 4 = 57784;
        #        56032 + 1751 + 1 = 57784, 56033 -> 57785
        (8192, 56083), (8192, 56032),
        # slab 1024 at static_threads(1024, 512) = 256: 5292 (5412) B; slab 2048 at
        # static_threads(2048, 512) = 512: 9548 (9764) B; slab 4096 at
        # static_threads(4096, 512) = 512: 4225 * 4 + 72 (288) + 1024 = 17996 (18212) B;
        # chunk 8192 at 512 threads: 34892 (35108) B; edges as on sm_90 (132 SMs)
        [(8193, 1024, 256, 5292, 5412, 9), (135168, 1024, 256, 5292, 5412, 132),
         (135169, 2048, 512, 9548, 9764, 67), (270336, 2048, 512, 9548, 9764, 132),
         (270337, 4096, 512, 17996, 18212, 67), (540672, 4096, 512, 17996, 18212, 132),
         (540673, 8192, 512, 34892, 35108, 67), (2**24, 8192, 512, 34892, 35108, 128)],
        id="512-thread-device"),
]


@pytest.mark.parametrize("limits,knobs,dense,varlen_bounds,chunked", HAND_LIMITS)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_hand_built_limits_boundaries(limits, knobs, dense, varlen_bounds, chunked, varlen):
    static_max, dynamic_max = varlen_bounds if varlen else dense
    forced = "JITMETA_THREADS" in knobs
    threads = knobs.get("JITMETA_THREADS", min(DEFAULT_THREADS,
                                               limits.max_threads_per_block))
    rsv = limits.smem_reserved_bytes
    assert chunked[0][0] == static_max + 1
    with envs.override(**knobs):
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
        # past the static buckets: chunked, never dynamic (on either side of its limit)
        for batch, chunk, t, dense_b, varlen_b, grid in chunked:
            p = _plan(batch, limits, varlen)
            assert (p.variant, p.code.capacity, p.threads, p.grid) \
                == ("chunked", chunk, t, grid), batch
            assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch
            assert p.smem_static_bytes == smem_chunked(chunk, t, varlen, rsv), batch
            assert p.smem_static_bytes <= limits.smem_static_bytes, batch
            assert p.smem_dynamic_bytes == 0, batch
            assert p.grid == expected_grid(batch, chunk, limits.sm_count, t), batch
            assert (chunk, t, p.smem_static_bytes, p.grid) == expected_chunked(
                batch, limits, threads, varlen, forced, knobs.get("JITMETA_CHUNK")), batch
        for batch in (dynamic_max, dynamic_max + 1):
            assert _plan(batch, limits, varlen).variant == "chunked", batch
    # forced, dynamic serves up to its opt-in limit as before
    with envs.override(**knobs, JITMETA_VARIANT="dynamic"):
        first = _plan(static_max + 1, limits, varlen)
        assert (first.variant, first.threads, first.grid) == ("dynamic", threads, 1)
        last = _plan(dynamic_max, limits, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= limits.smem_optin_bytes
        # one more element no longer fits (it may need two words: the spare one)
        assert sum(smem_dynamic(dynamic_max + 1, threads, varlen, rsv)) \
            > limits.smem_optin_bytes
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            _plan(dynamic_max + 1, limits, varlen)


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
    # every bucket, every slab (132 * 1024 = 135168, 132 * 2048 = 270336, 132 * 4096 =
    # 540672) and the default chunk: static_threads(c, 256) = 256 for all
    for batch in (1, 2048, 4096, 8192, 8193, 200000, 400000, 10**6):
        assert _plan(batch, lim).threads == 256, batch
    assert [_plan(b, lim).code.capacity for b in (8193, 200000, 400000, 10**6)] \
        == [1024, 2048, 4096, 8192]
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert _plan(8193, lim).threads == 256
    # a limit that is not a multiple of 32 rounds down to whole warps: 100 -> 96
    odd = DeviceLimits("sm_90", 132, max_threads_per_block=100)
    for batch in (1, 8192, 8193, 200000, 400000, 10**6):
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
    on_slab = dict.fromkeys(SLABS, 0)  # plans on each slab (no JITMETA_CHUNK)
    default_chunks = forced_variant = 0  # plans on the default chunk; with a forced variant
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
            knobs["JITMETA_CHUNK"] = rng.choice([32, 256, 1024, 2048, 4096, 8192, 12000])
        if rng.random() < 0.25:
            knobs["JITMETA_VARIANT"] = rng.choice(["static", "dynamic", "chunked"])
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
                                                   limits.max_threads_per_block // 32 * 32))
        want = expected_plan(batch, eff, threads, varlen, forced,
                             knobs.get("JITMETA_CHUNK"), knobs.get("JITMETA_VARIANT"))
        with envs.override(**knobs):
            try:
                p = plan(batch, next_n, varlen, num_sms, 256,
                         rng.choice(FORMATS), limits)
            except PlanError as exc:
                outcomes["error"] += 1
                assert want is None, f"{note}: PlanError {exc} but {want} fits"
                continue
        outcomes[p.variant] += 1
        got = (p.variant, p.code.capacity, p.threads, p.smem_static_bytes,
               p.smem_dynamic_bytes, p.grid)
        assert got == want, note
        if "JITMETA_VARIANT" in knobs:
            forced_variant += 1
            assert p.variant == knobs["JITMETA_VARIANT"], note
            assert "JITMETA_VARIANT" in p.reason, note
        else:
            assert p.variant != "dynamic", f"{note}: dynamic without JITMETA_VARIANT"
        assert p.threads <= limits.max_threads_per_block and p.threads % 32 == 0, note
        if forced:
            assert p.threads == threads, note
        assert p.code.threads == p.threads, note
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
            assert p.grid == 1 and p.code.capacity == 0 and p.threads == threads, note
            assert (p.smem_static_bytes, p.smem_dynamic_bytes) \
                == smem_dynamic(batch, threads, varlen, rsv), note
        else:
            chunk = p.code.capacity
            slabs = -(-batch // chunk)
            if "JITMETA_CHUNK" in knobs:
                assert chunk == knobs["JITMETA_CHUNK"] and p.threads == threads, note
            elif chunk == default_chunk(eff, threads, varlen):
                # no slab: every slab below the default chunk would leave some SM's
                # block more than one
                assert p.threads == threads, note
                assert all(-(-batch // c) > limits.sm_count for c in SLABS if c < chunk), note
                default_chunks += 1
            else:
                # a slab below the default chunk that gives no SM's block two, the
                # smallest such, at its bucket's threads
                assert chunk in SLABS and chunk < default_chunk(eff, threads, varlen), note
                assert slabs <= limits.sm_count, note
                assert all(-(-batch // c) > limits.sm_count for c in SLABS if c < chunk), note
                assert p.threads == bucket_threads(chunk, threads, forced), note
                on_slab[chunk] += 1
            # at most one block per SM, per thread of a block and 1024; none idle
            assert 1 <= p.grid <= min(slabs, limits.sm_count, p.threads, 1024), note
            per = -(-slabs // p.grid)
            assert (p.grid - 1) * per < slabs <= p.grid * per, note
            assert f"over {slabs} slab(s) of {chunk} elements" in p.reason, note
            assert p.smem_static_bytes == smem_chunked(chunk, p.threads, varlen, rsv), note
            assert p.smem_dynamic_bytes == 0, note
    print(f"{SEED_NOTE}: outcomes {outcomes}, slabs {on_slab}, default chunk "
          f"{default_chunks}, forced {forced_variant}")
    assert min(outcomes.values()) > 0, f"{SEED_NOTE}: sweep missed an outcome {outcomes}"
    assert min(on_slab.values()) > 0, f"{SEED_NOTE}: sweep missed a slab {on_slab}"
    assert default_chunks > 0 and forced_variant > 0, SEED_NOTE


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
        assert _plan(1, sm90, varlen=True).smem_bytes == 1568 + 8  # 544 + 1024 = 1568
    # unforced, the same batches never take dynamic
    assert (_plan(1, sm90).variant, _plan(56067, sm90).variant) == ("static", "chunked")
    with envs.override(JITMETA_VARIANT="chunked"):
        # 1 <= 132 * 1024: slab 1024, 256 threads, one slab: 1057 * 4 + 40 + 1024
        p = _plan(1, sm90)
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 1, 1024, 256)
        assert p.smem_static_bytes == 5292
        assert "JITMETA_VARIANT" in p.reason
        p = _plan(8192, sm90)    # a static batch: 8 slabs of 1024, 8 blocks
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 8, 1024, 256)
        # 132 * 1024 < 200000 <= 132 * 2048: slab 2048; 97 * 2048 = 198656 < 200000: 98
        p = _plan(200000, sm90)
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 98, 2048, 512)
        # 2048 slabs of 8192 on 132 SMs: per 16, grid 128
        p = _plan(2**24, sm90, varlen=True)
        assert (p.grid, p.code.capacity, p.threads, p.smem_static_bytes) \
            == (128, 8192, 1024, 35364)


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
        assert _plan(200000, sm90).threads == 512  # slab 2048 (its default is 512 too)
        assert _plan(100000, sm90).threads == 512  # slab 1024 (default 256)
        assert _plan(10000, sm90).threads == 512   # slab 1024
        assert _plan(400000, sm90).threads == 512  # slab 4096 (default 1024)
        assert _plan(100, sm90).threads == 512     # static bucket 1024 (default 256)
        # slab 1024 at 512 threads: 1057 * 4 + 72 + 1024 = 5324 B; 98 slabs
        p = _plan(100000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 512, 5324, 98)
        # chunk 8192 at 512 threads (default 1024): 8449 * 4 + 72 + 1024 = 34892 B;
        # 122 * 8192 = 999424 < 10**6: 123 slabs, 123 blocks
        p = _plan(10**6, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 8192, 512, 34892, 123)
    with envs.override(JITMETA_THREADS=1024):
        # slab 1024 keeps the forced 1024 threads (default 256): 1057 * 4 + 136 + 1024 =
        # 5388 B; ceil(10000 / 1024) = 10 slabs (9216 < 10000 <= 10240)
        p = _plan(10000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 1024, 5388, 10)
        # slab 2048 likewise (default 512): 2113 * 4 + 136 + 1024 = 9612 B; 98 slabs
        p = _plan(200000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 1024, 9612, 98)
    p = _plan(10000, sm90)
    assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) == (1024, 256, 5292, 10)
    p = _plan(200000, sm90)
    assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) == (2048, 512, 9548, 98)


@pytest.mark.parametrize("threads", [48, 2048, 1056])
def test_bad_threads_override_raises(sm90, threads):
    with envs.override(JITMETA_THREADS=threads):
        with pytest.raises(PlanError, match="JITMETA_THREADS"):
            _plan(10, sm90)


def test_chunk_override(sm90):
    with envs.override(JITMETA_CHUNK="1024"):
        p = _plan(100000, sm90, varlen=True)
        # 97 * 1024 = 99328 < 100000 <= 98 * 1024 = 100352: 98 slabs, 98 <= 132 blocks
        assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 1024, 1024, 98)
        assert p.smem_static_bytes == 1057 * 4 + 544 + 1024 == 5796
        # the chunk does not move the static decisions (nor their threads)
        assert (_plan(8192, sm90).variant, _plan(8192, sm90).threads) == ("static", 1024)
        assert (_plan(100, sm90).variant, _plan(100, sm90).threads) == ("static", 256)
        # 54 * 1024 = 55296 < 56067 <= 55 * 1024: 55 slabs
        p = _plan(56067, sm90)
        assert (p.variant, p.code.capacity, p.grid) == ("chunked", 1024, 55)
    # a set chunk is used as given: no switch to a slab (nor to its threads) below
    # 132 * 4096; 10000 -> 2 slabs of 8192; 400000 -> 49 (48 * 8192 = 393216 < 400000)
    with envs.override(JITMETA_CHUNK=8192):
        p = _plan(10000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == ("chunked", 8192, 1024, 2, 34956)
        p = _plan(400000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 8192, 1024, 49)
    assert (_plan(10000, sm90).code.capacity, _plan(10000, sm90).threads) == (1024, 256)
    assert (_plan(400000, sm90).code.capacity, _plan(400000, sm90).threads) == (4096, 1024)
    # nor to a smaller slab than a set one: 4096 at 10000 -> 3 slabs (8192 < 10000 <= 12288)
    with envs.override(JITMETA_CHUNK=4096):
        p = _plan(10000, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 1024, 3, 18060)
    # 4096: 2**24 -> 4096 slabs, per = ceil(4096 / 132) = 32 (132 * 31 = 4092 < 4096),
    # grid 4096 / 32 = 128; 4225 * 4 + 136 + 1024 = 18060 B
    with envs.override(JITMETA_CHUNK=4096):
        p = _plan(2**24, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 1024, 128, 18060)


def test_oversized_chunk_without_fallback_raises(sm90):
    # chunk 16384 needs 16897 * 4 + 136 + 1024 = 68748 B of static smem (> 49152); past
    # the static buckets nothing else is tried (dynamic only when forced)
    with envs.override(JITMETA_CHUNK=16384):
        assert _plan(8192, sm90).variant == "static"
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384") as info:
            _plan(8193, sm90)
        assert "68748" in str(info.value)
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384"):
            _plan(56068, sm90)
    with envs.override(JITMETA_CHUNK=16384, JITMETA_VARIANT="dynamic"):
        assert _plan(56067, sm90).variant == "dynamic"


def test_smem_budget_override(sm90):
    # budget 40000 B: static bucket 8192 (34956 / 35364 B) still fits, and so does the
    # default chunk (34956 / 35364 B): it stays 8192, with the slabs below it as without
    # a budget (1024 up to 132 * 1024, 2048 up to 132 * 2048, 4096 up to 132 * 4096);
    # forced dense dynamic:  1168 + 4 tile_words(b) <= 40000 -> tile_words(b) <= 9708:
    #                 9413 + 294 + 1 = 9708, 9414 -> 9709
    # forced varlen dynamic: 1568 + 4 tile_words(b) <= 40000 -> tile_words(b) <= 9608:
    #                 9316 + 291 + 1 = 9608, 9317 -> 9609
    with envs.override(JITMETA_SMEM_BUDGET="40000"):
        eff = sm90.with_budget(40000)
        assert largest_dynamic_batch(eff, 1024, False) == 9413
        assert largest_dynamic_batch(eff, 1024, True) == 9316
        assert _plan(8192, sm90).variant == "static"
        assert _plan(8192, sm90, varlen=True).variant == "static"
        # slab 1024 at 256 threads, 5292 B: 8193 -> 9 slabs (8 * 1024 = 8192 < 8193);
        # 9413 and 9414 -> 10 (9 * 1024 = 9216 < b <= 10240)
        for b, grid in ((8193, 9), (9413, 10), (9414, 10)):
            p = _plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
                == ("chunked", 1024, 256, grid, 5292), b
        assert _plan(9317, sm90, varlen=True).variant == "chunked"
        # 270337: slab 4096, 67 slabs at 18060 B; 540673: 67 slabs of 8192 at 34956 B
        p = _plan(270337, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 1024, 67, 18060)
        p = _plan(540673, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (8192, 1024, 67, 34956)
        assert "budget 40000" in _plan(9414, sm90).reason
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert _plan(9413, sm90).smem_bytes == 1168 + 9708 * 4 == 40000
            assert _plan(9316, sm90, varlen=True).smem_bytes == 1568 + 9608 * 4 == 40000
            with pytest.raises(PlanError, match="budget 40000"):
                _plan(9414, sm90)
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                _plan(9317, sm90, varlen=True)
    # budget 20000 B: bucket 4096 (4225 * 4 + 136 + 1024 = 18060 B) is the last static
    # (8192: 34956 B); JITMETA_CHUNK=2048 as given, at 1024 threads: 2113 * 4 + 136 +
    # 1024 = 9612 B; forced dense dynamic: tile_words(b) <= (20000 - 1168) / 4 = 4708:
    # 4565 + 142 + 1 = 4708, 4566 -> 4709
    with envs.override(JITMETA_SMEM_BUDGET=20000, JITMETA_CHUNK=2048):
        p = _plan(4096, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes) \
            == ("static", 4096, 1024, 18060)
        for b in (4097, 4565, 4566):  # ceil(b / 2048) = 3
            p = _plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == ("chunked", 2048, 1024, 9612, 3), b
        assert p.smem_static_bytes == smem_chunked(2048, 1024, False, 1024)
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert _plan(4097, sm90).variant == "dynamic"
            assert _plan(4565, sm90).variant == "dynamic"
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                _plan(4566, sm90)
    # without JITMETA_CHUNK the default tile halves until it fits: 8192 (34956 B) ->
    # 4096 (4225 * 4 + 136 + 1024 = 18060 B <= 20000; varlen 18468 B); the slabs below
    # it are 1024 (256 threads, 5292 B) up to 132 * 1024 = 135168 and 2048 (512
    # threads, 9548 B) up to 270336; above that it stays 4096 (there is no slab 4096 below
    # a default chunk of 4096): 270336 = 66 * 4096 -> 67 slabs
    with envs.override(JITMETA_SMEM_BUDGET=20000):
        p = _plan(4566, sm90)  # 4 * 1024 = 4096 < 4566 <= 5120: 5 slabs
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 256, 5292, 5)
        p = _plan(135168, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 256, 5292, 132)
        p = _plan(135169, sm90)  # 66 * 2048 = 135168 < 135169: 67 slabs
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 512, 9548, 67)
        p = _plan(270336, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 512, 9548, 132)
        p = _plan(270337, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 4096, 1024, 18060, 67)
        # 2**24: 4096 slabs, per = ceil(4096 / 132) = 32 (132 * 31 = 4092), grid 128
        p = _plan(2**24, sm90, varlen=True)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 4096, 1024, 18468, 128)
    # budget 6000 B: the default chunk halves 8192 (34956 B) -> 4096 (18060 B) ->
    # 2048 (9612 B) -> 1024 (1057 * 4 + 136 + 1024 = 5388 B <= 6000), no larger than
    # 2048, so it stays (at 1024 threads) for every batch; static bucket 1024
    # (256 threads: 5292 B) fits, bucket 2048 (9548 B) does not; no slab is smaller than
    # a default chunk of 1024, so none replaces it (not even slab 1024 at its 256
    # threads, 5292 B): 1024 threads for every batch; forced dense dynamic:
    # tile_words(b) <= (6000 - 1168) / 4 = 1208: 1171 + 36 + 1 = 1208, 1172 -> 1209
    with envs.override(JITMETA_SMEM_BUDGET=6000):
        p = _plan(1024, sm90)
        assert (p.variant, p.threads, p.smem_static_bytes) == ("static", 256, 5292)
        for b in (1025, 1171, 1172):  # 2 slabs of 1024
            p = _plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == ("chunked", 1024, 1024, 5388, 2), b
        # 10**6: 977 slabs (976 * 1024 = 999424); per = ceil(977 / 132) = 8, grid
        # ceil(977 / 8) = 123 (8 * 122 = 976 < 977)
        assert _plan(10**6, sm90).grid == 123
        # 135168 (<= 132 * 1024) and 135169 alike: the default chunk at 1024 threads
        for b, grid in ((135168, 132), (135169, 67)):  # 67: 133 slabs, per 2
            p = _plan(b, sm90)
            assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == (1024, 1024, 5388, grid), b
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert _plan(1025, sm90).smem_bytes == 1168 + (1025 + 32 + 1) * 4 == 5400
            assert _plan(1171, sm90).smem_bytes == 1168 + 1208 * 4 == 6000
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                _plan(1172, sm90)
    # budget 5300 B: static bucket 1024 (5292 B, 256 threads) still fits, but the chunk of
    # 1024 at 1024 threads (5388 B) does not: it halves once more, to 512 (the halving
    # counts the default threads; no slab is below 512, so slab 1024 at 256 threads, which
    # would fit in 5292 B, is not taken either):
    # (512 + 16 + 1) * 4 + 136 + 1024 = 3276 B; 1025 -> 3 slabs of 512; forced dynamic:
    # tile_words(b) <= (5300 - 1168) / 4 = 1033 -> b <= 1001 (1001 + 31 + 1)
    with envs.override(JITMETA_SMEM_BUDGET=5300):
        assert _plan(1024, sm90).variant == "static"
        p = _plan(1025, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 512, 1024, 3276, 3)
        p = _plan(100000, sm90)  # 196 slabs of 512 (195 * 512 = 99840): per 2, grid 98
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 512, 1024, 3276, 98)
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert _plan(1001, sm90).smem_bytes == 1168 + 1033 * 4 == 5300
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                _plan(1002, sm90)
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
    # 78 SMs: 8193 <= 78 * 1024 = 79872 -> slab 1024 at 256 threads, 9 slabs
    assert (p.variant, p.num_sms, p.code.arch, p.code.capacity, p.grid) \
        == ("chunked", 78, "sm_90", 1024, 9)
    d = p.to_dict()
    # 1057 * 4 + 40 + 1024 = 5292
    assert d["variant"] == "chunked" and d["smem_bytes"] == 5292
    assert (d["threads"], d["capacity"], d["grid"], d["smem_dynamic_bytes"]) \
        == (256, 1024, 9, 0)
    # 78 * 1024 < 100000 <= 78 * 2048: slab 2048 (100000 / 2048 -> 49 slabs); on the
    # table's 132 SMs, 100000 <= 132 * 1024: slab 1024 (98 slabs)
    assert (jitmeta.plan(100000, arch="sm_90", num_sms=78).code.capacity,
            jitmeta.plan(100000, arch="sm_90", num_sms=78).grid) == (2048, 49)
    assert (jitmeta.plan(100000, arch="sm_90").code.capacity,
            jitmeta.plan(100000, arch="sm_90").grid) == (1024, 98)
    with envs.override(JITMETA_VARIANT="dynamic"):
        dyn = jitmeta.plan(8193, arch="sm_90", num_sms=78).to_dict()
    # 1168 + 4 tile_words(8193) = 1168 + 8450 * 4 = 34968
    assert dyn["variant"] == "dynamic" and dyn["smem_bytes"] == 1168 + 8450 * 4 == 34968
    assert dyn["threads"] == 1024
    # num_sms sets the limits' SM count: 2**24 on 78 SMs -> grid 76 (per 27); on the
    # table's 132 -> 128 (per 16)
    assert jitmeta.plan(2**24, arch="sm_90", num_sms=78).grid == 76
    assert jitmeta.plan(2**24, arch="sm_90").grid == 128
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
    # static buckets 1024 (256 threads), 2048 (512), 4096, 8192 (1024); slab 1024 (256
    # threads) for 8193..132 * 1024 = 135168, slab 2048 (512) up to 270336, slab 4096
    # (1024) up to 540672, chunk 8192 (1024) past it; no dynamic: 4 + 4 = 8 (num_sms is
    # the output's SM count; the limits' 132 SMs set the chunks)
    assert len(codes) == 8 and len(codes) < 10
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("chunked", 2048, 512), ("chunked", 4096, 1024),
        ("chunked", 8192, 1024), ("static", 1024, 256), ("static", 2048, 512),
        ("static", 4096, 1024), ("static", 8192, 1024)]
    for code, example in codes.items():
        assert example.code == code
        assert (code.varlen, code.schedule, code.arch) == (varlen, schedule, "sm_90")
    # each chunked cubin's example is the first batch it serves: one past the static
    # buckets, then one past 132 * 1024, 132 * 2048, 132 * 4096
    assert {c.capacity: p.batch for c, p in codes.items() if c.variant == "chunked"} \
        == {1024: 8193, 2048: 135169, 4096: 270337, 8192: 540673}
    rng = random.Random(f"{SEED}-{varlen}-{schedule}-{next_n}-{num_sms}")
    brute = {_plan(b, sm90, varlen, next_n, num_sms, 256, schedule).code
             for b in _coarse_sweep(rng, 2**24)}
    assert brute == set(codes), SEED_NOTE


# the default threads of each chunk on a 1024-thread device (static_threads: 256, 512,
# 1024; the default chunk at 1024)
CHUNK_THREADS = {1024: 256, 2048: 512, 4096: 1024, 8192: 1024}


@pytest.mark.parametrize("sm_count,chunks", [
    (2, [8192]),              # 2 * 4096 = 8192: every batch past the buckets is over it
    (4, [4096, 8192]),        # 4 * 2048 = 8192 < 8193 <= 4 * 4096 = 16384
    (8, [2048, 4096, 8192]),  # 8 * 1024 = 8192 < 8193 <= 8 * 2048 = 16384
    (9, [1024, 2048, 4096, 8192]),  # 9 * 1024 = 9216 >= 8193
    (4095, [1024, 2048, 4096, 8192]),  # 4095 * 4096 = 16773120 < 2**24
    (4096, [1024, 2048, 4096]),  # 4096 * 4096 = 2**24: slab 4096 serves every batch
    (4097, [1024, 2048, 4096]),  # 4097 * 2048 = 8390656 < 2**24 <= 4097 * 4096
    (8192, [1024, 2048]),     # 8192 * 2048 = 2**24
    (16384, [1024]),          # 16384 * 1024 = 2**24: slab 1024 serves every batch
], ids=lambda v: f"{v}-sms" if isinstance(v, int) else None)
def test_codes_follow_the_slab_boundaries(sm_count, chunks):
    lim = limits_for_arch("sm_90", sm_count)
    codes = codes_for_batches([(1, 2**24)], 1, False, 132, 256, "smxx", lim)
    # the 4 static buckets and one chunked cubin per chunk
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == sorted(
        [("chunked", c, CHUNK_THREADS[c]) for c in chunks]
        + [("static", 1024, 256), ("static", 2048, 512), ("static", 4096, 1024),
           ("static", 8192, 1024)])
    assert len(codes) == 4 + len(chunks)
    edges = [sm_count * c + d for c in (1024, 2048, 4096) for d in (-1, 0, 1)]
    brute = {_plan(b, lim).code for b in range(1, 8194)}
    brute |= {_plan(b, lim).code for b in edges + [2**24] if 1 <= b <= 2**24}
    assert brute == set(codes)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_exhaustive_sweep(sm90, varlen):
    """Every batch 1..60000 (which crosses every static bucket and the forced-dynamic
    limit, 56067 dense / 55970 varlen) and around the slab limits 132 * 1024 = 135168,
    132 * 2048 = 270336 and 132 * 4096 = 540672, plus a stride to 2**24."""
    batches = (list(range(1, 60001)) + list(range(134000, 136001))
               + list(range(269000, 272001)) + list(range(539000, 542001))
               + list(range(60001, 2**24 + 1, 4099)) + [2**24])
    brute = {_plan(b, sm90, varlen).code for b in batches}
    assert brute == set(codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", sm90))


@pytest.mark.parametrize("knobs", [
    {"JITMETA_SMEM_BUDGET": 40000, "JITMETA_CHUNK": 4096},
    {"JITMETA_SMEM_BUDGET": 20000, "JITMETA_CHUNK": 2048},
    {"JITMETA_SMEM_BUDGET": 20000},
    {"JITMETA_SMEM_BUDGET": 5300},
    {"JITMETA_SMEM_BUDGET": 6000},
    {"JITMETA_THREADS": 256},
    {"JITMETA_THREADS": 1024},
    {"JITMETA_VARIANT": "chunked"},
], ids=["budget40k", "budget20k", "budget20k-default-chunk", "budget5300", "budget6000",
        "threads256",
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
    # static 1024 (256 threads), 2048 / 4096 / 8192 (512); slabs 1024 (static_threads(1024,
    # 512) = 256), 2048 (512), 4096 (512) and chunk 8192 (512); no dynamic
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("chunked", 2048, 512), ("chunked", 4096, 512),
        ("chunked", 8192, 512), ("static", 1024, 256), ("static", 2048, 512),
        ("static", 4096, 512), ("static", 8192, 512)]
    rng = random.Random(SEED)
    batches = sorted(set(range(1, 12001)) | set(range(55000, 57001))
                     | set(range(134000, 136001)) | set(range(269000, 272001))
                     | set(range(539000, 542001)) | set(_coarse_sweep(rng, 2**24)))
    assert {_plan(b, lim, varlen).code for b in batches} == set(codes), SEED_NOTE


@pytest.mark.parametrize("varlen,dynamic_max", [(False, 56067), (True, 55970)],
                         ids=["dense", "varlen"])
def test_boundaries_include_every_slab_edge(sm90, varlen, dynamic_max):
    """The batches codes_for_batches plans at: the range's ends, each static bucket and
    one past it, the forced-dynamic limit and one past it, and sm_count * slab and one
    past it for every slab (where the chunked plan changes its slab)."""
    got = _boundaries(1, 2**24, sm90, 1024, varlen)
    buckets = [2**k + d for k in range(10, 25) for d in (0, 1)]
    buckets.remove(2**24 + 1)  # out of the range
    # 132 * 1024 = 135168, 132 * 2048 = 270336, 132 * 4096 = 540672
    slab_edges = [135168, 135169, 270336, 270337, 540672, 540673]
    assert got == sorted({1, 2**24, dynamic_max, dynamic_max + 1, *buckets, *slab_edges})
    # 78 SMs, batches 100000..400000: 78 * 1024 = 79872 is below the range; 78 * 2048 =
    # 159744 and 78 * 4096 = 319488 are in it, with the buckets 2**17 and 2**18
    got = _boundaries(100000, 400000, limits_for_arch("sm_90", 78), 1024, varlen)
    assert got == [100000, 131072, 131073, 159744, 159745, 262144, 262145, 319488, 319489,
                   400000]


def test_codes_for_several_ranges(sm90):
    codes = codes_for_batches([(1, 100), (9000, 9000), (3000, 3001)], 1, False, 132, 256,
                              "smxx", sm90)
    # 1..100: bucket 1024; 9000: slab 1024 (9000 <= 135168); 3000, 3001: bucket 4096
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("static", 1024, 256), ("static", 4096, 1024)]
    brute = {_plan(b, sm90).code for b in list(range(1, 101)) + [9000, 3000, 3001]}
    assert brute == set(codes)
    # ranges inside the chunked batches: 200000..300000 crosses 132 * 2048 = 270336
    # (slabs 2048 and 4096); 540672..540673 crosses 132 * 4096 (4096 and 8192)
    codes = codes_for_batches([(200000, 300000), (540672, 540673)], 1, False, 132, 256,
                              "smxx", sm90)
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 2048, 512), ("chunked", 4096, 1024), ("chunked", 8192, 1024)]
    assert sorted(p.batch for p in codes.values()) == [200000, 270337, 540673]


def test_num_sms_and_next_n_do_not_change_the_code():
    """The plan's num_sms and next_n arguments move nothing (the device's SM count, in
    the limits, does move the chunked plan: test_chunked_plan_follows_the_device_sm_count)."""
    rng = random.Random(SEED)
    for case in range(300):
        batch = int(2 ** rng.uniform(0, 24))
        varlen = rng.random() < 0.5
        sched = rng.choice(FORMATS)
        lim = limits_for_arch("sm_90", rng.randrange(1, 500))
        p1 = plan(batch, 1, varlen, rng.randrange(1, 5000), 256, sched, lim)
        p2 = plan(batch, 1 if varlen else rng.randrange(1, 9), varlen,
                  rng.randrange(1, 5000), 256, sched, lim)
        note = f"{SEED_NOTE} case {case}: batch {batch} sm_count {lim.sm_count}"
        assert p1.code == p2.code, note
        assert p1.grid == p2.grid and p1.smem_bytes == p2.smem_bytes, note


def test_code_depends_on_what_changes_the_source(sm90):
    base = _plan(100, sm90).code
    assert _plan(100, sm90, varlen=True).code != base
    assert _plan(100, sm90, schedule="sm90").code != base
    assert _plan(100, sm90, split_kv=128).code != base
    assert len({base.name, _plan(100, sm90, split_kv=128).code.name,
                _plan(100, sm90, schedule="sm90").code.name}) == 3
