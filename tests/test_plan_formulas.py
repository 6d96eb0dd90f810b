"""The planner's shared-memory and launch formulas (``jitmeta/heuristics/plan.py``).

Pure Python: no GPU and no compiler. Every formula is asserted against the literal
number worked out by hand beside it, and against the tests' independent reading of the
policy (``tests/plan_oracle.py``), which the other ``test_plan_*.py`` files then use as
their oracle. The library's formulas take the kernel family's :class:`TileLayout`
(``LAYOUT[varlen]``: 4-byte dense summaries, 16-byte varlen ones).

Randomness is fresh on every run; the seed is printed and put in every assertion
message. Rerun a failure with ``JITMETA_TEST_SEED=<seed> pytest tests/test_plan_formulas.py``.
"""

from __future__ import annotations

import random

from jitmeta.envs import Knobs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.heuristics.plan import (DEFAULT_CHUNK, SLAB_SIZES, chunked_grid,
                                     largest_tile, smem_chunked, smem_dynamic,
                                     slab_threads, smem_scratch, smem_static,
                                     static_threads, tile_words, workspace_words)

import plan_oracle as O
from plan_support import FORMATS, KIB, LAYOUT, SEED, SEED_NOTE, run_plan


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
    assert smem_scratch(1024, LAYOUT[False]) == 34 * 4 == 136
    assert smem_scratch(1024, LAYOUT[True]) == 34 * 16 == 544
    assert smem_scratch(512, LAYOUT[False]) == 18 * 4 == 72
    assert smem_scratch(512, LAYOUT[True]) == 18 * 16 == 288
    assert smem_scratch(256, LAYOUT[False]) == 10 * 4 == 40
    assert smem_scratch(256, LAYOUT[True]) == 10 * 16 == 160
    # static: tile_words(capacity) words + scratch + reserved
    assert smem_static(8192, 1024, LAYOUT[False], 1024) == 8449 * 4 + 136 + 1024 == 34956
    assert smem_static(8192, 1024, LAYOUT[True], 1024) == 8449 * 4 + 544 + 1024 == 35364
    assert smem_static(16384, 1024, LAYOUT[False], 1024) == 16897 * 4 + 136 + 1024 == 68748
    assert smem_static(1024, 1024, LAYOUT[False], 0) == 1057 * 4 + 136 == 4364
    assert smem_static(1024, 256, LAYOUT[False], 1024) == 1057 * 4 + 40 + 1024 == 5292
    assert smem_static(2048, 512, LAYOUT[True], 1024) == 2113 * 4 + 288 + 1024 == 9764
    # dynamic: static part rounded up to 16 (1160 -> 1168; 1568 stays), tile_words(b) words
    assert smem_dynamic(8193, 1024, LAYOUT[False], 1024) == (1168, 8450 * 4) == (1168, 33800)
    assert smem_dynamic(8193, 1024, LAYOUT[True], 1024) == (1568, 8450 * 4) == (1568, 33800)
    assert smem_dynamic(10, 1024, LAYOUT[False], 0) == (144, 11 * 4) == (144, 44)
    assert smem_dynamic(31, 1024, LAYOUT[False], 0) == (144, 32 * 4) == (144, 128)
    assert smem_dynamic(32, 1024, LAYOUT[False], 0) == (144, 34 * 4) == (144, 136)  # + spare word
    # 256 threads: 40 + 1024 = 1064 -> 1072; 160 + 1024 = 1184 stays
    assert smem_dynamic(1, 256, LAYOUT[False], 1024) == (1072, 2 * 4) == (1072, 8)
    assert smem_dynamic(1, 256, LAYOUT[True], 1024) == (1184, 8)
    # chunked: the same tile as static with the chunk as capacity
    assert smem_chunked(8192, 1024, LAYOUT[False], 1024) == 34956
    assert smem_chunked(1024, 256, LAYOUT[True], 0) == 1057 * 4 + 10 * 16 == 4388
    assert smem_chunked(2048, 1024, LAYOUT[False], 1024) == 2113 * 4 + 136 + 1024 == 9612
    # each slab at the threads of a quarter of it (slab_threads(slab, 1024) up to 2048):
    # the same bytes as the static bucket of its size
    assert smem_chunked(1024, 256, LAYOUT[False], 1024) == 1057 * 4 + 40 + 1024 == 5292
    assert smem_chunked(1024, 256, LAYOUT[True], 1024) == 1057 * 4 + 160 + 1024 == 5412
    assert smem_chunked(2048, 512, LAYOUT[False], 1024) == 2113 * 4 + 72 + 1024 == 9548
    assert smem_chunked(2048, 512, LAYOUT[True], 1024) == 2113 * 4 + 288 + 1024 == 9764
    assert smem_chunked(4096, 1024, LAYOUT[False], 1024) == 4225 * 4 + 136 + 1024 == 18060
    assert smem_chunked(4096, 1024, LAYOUT[True], 1024) == 4225 * 4 + 544 + 1024 == 18468
    assert smem_chunked(8192, 1024, LAYOUT[True], 1024) == 8449 * 4 + 544 + 1024 == 35364
    # every formula, against tile_words, over a range
    for n in (1, 31, 32, 33, 1000, 1024, 4097, 8192, 12000):
        for t in (32, 256, 1024):
            for varlen in (False, True):
                sc = smem_scratch(t, LAYOUT[varlen])
                assert smem_static(n, t, LAYOUT[varlen], 1024) == 4 * tile_words(n) + sc + 1024
                assert smem_chunked(n, t, LAYOUT[varlen], 0) == 4 * tile_words(n) + sc
                st, dyn = smem_dynamic(n, t, LAYOUT[varlen], 1024)
                assert dyn == 4 * tile_words(n)
                assert st % 16 == 0 and 0 <= st - (sc + 1024) < 16


def test_chunked_grid_by_hand():
    assert (DEFAULT_CHUNK, SLAB_SIZES) == (8192, O.SLABS) == (8192, (1024, 2048, 4096))
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
                # the kernel splits the slabs itself, ceil(slabs / grid) per block: on
                # the planner's grid every block has one (a launcher that halves a
                # refused grid can leave blocks without: Engine::chunked serves them)
                assert (grid - 1) * -(-slabs // grid) < slabs, (slabs, sms, t)


def test_workspace_words_by_hand():
    # 4 words (epoch, count) + 3 slots of 8 words for each of 1024 blocks (24576) + one
    # summary per slab: 1 word (dense) or 4 words (varlen, 16 B)
    assert workspace_words(1, 8192, LAYOUT[False]) == 4 + 24576 + 1 == 24581
    assert workspace_words(1, 8192, LAYOUT[True]) == 4 + 24576 + 4 == 24584
    assert workspace_words(8193, 2048, LAYOUT[False]) == 4 + 24576 + 5 == 24585
    assert workspace_words(8193, 2048, LAYOUT[True]) == 4 + 24576 + 5 * 4 == 24600
    assert workspace_words(8193, 1024, LAYOUT[False]) == 4 + 24576 + 9 == 24589
    assert workspace_words(135168, 1024, LAYOUT[True]) == 4 + 24576 + 132 * 4 == 25108
    assert workspace_words(2**24, 8192, LAYOUT[False]) == 4 + 24576 + 2048 == 26628
    assert workspace_words(2**24, 8192, LAYOUT[True]) == 4 + 24576 + 2048 * 4 == 32772
    assert workspace_words(2**24 + 1, 8192, LAYOUT[False]) == 4 + 24576 + 2049 == 26629
    assert workspace_words(2**24 + 1, 8192, LAYOUT[True]) == 4 + 24576 + 2049 * 4 == 32776
    # 2**26 varlen tokens: 8192 slabs -> 4 + 24576 + 32768 = 57348 words, under 1 << 16
    assert workspace_words(2**26, 8192, LAYOUT[True]) == 57348 < 1 << 16
    # slabs summed in registers (8 elements per thread) add a summary per warp and slab
    # from an even word: 24581 is odd, so one word of padding
    assert workspace_words(1, 8192, LAYOUT[False], 1024) == 24581 + 1 + 32 == 24614
    assert workspace_words(1, 8192, LAYOUT[False], 512) == 24581  # 16 per thread
    assert workspace_words(2**24, 8192, LAYOUT[True], 1024) == 32772 + 2048 * 32 * 4


def test_static_threads_by_hand():
    for cap in (1024, 2048, 4096, 8192, 16384):
        for t in (32, 64, 96, 128, 256, 512, 1024):
            assert static_threads(cap, t) == O.bucket_threads(cap, t, False), (cap, t)
            assert static_threads(cap, t) <= t
    # max(min(256, threads), min(threads, capacity // 8))
    assert static_threads(1024, 1024) == max(256, min(1024, 128)) == 256
    assert static_threads(2048, 1024) == max(256, min(1024, 256)) == 256
    assert static_threads(4096, 1024) == max(256, min(1024, 512)) == 512
    assert static_threads(8192, 1024) == max(256, min(1024, 1024)) == 1024
    assert static_threads(16384, 1024) == 1024                   # never above threads
    # a block limit of 512: the 8192 bucket stops at 512
    assert static_threads(1024, 512) == max(256, min(512, 128)) == 256
    assert static_threads(2048, 512) == max(256, min(512, 256)) == 256
    assert static_threads(8192, 512) == max(256, min(512, 1024)) == 512
    # at or below 256 threads every bucket takes all of them
    for cap in (1024, 2048, 4096, 8192):
        assert static_threads(cap, 256) == 256
        assert static_threads(cap, 128) == max(128, min(128, cap // 8)) == 128
    # chunked slabs: a quarter of the slab, an eighth from 4096 up (register slabs)
    assert [slab_threads(c, 1024) for c in (1024, 2048, 4096, 8192)] == [256, 512, 512, 1024]
    assert [slab_threads(c, 512) for c in (1024, 2048, 4096, 8192)] == [256, 512, 512, 512]
    for cap in (1024, 2048, 4096, 8192):
        for t in (64, 256, 512, 1024):
            assert slab_threads(cap, t) == O.slab_threads(cap, t, False), (cap, t)
        assert static_threads(cap, 32) == 32


def test_sm90_limits_table():
    lim = limits_for_arch("sm_90")
    assert (lim.arch, lim.sm_count, lim.max_threads_per_block) == ("sm_90", 132, 1024)
    assert (lim.smem_static_bytes, lim.smem_optin_bytes, lim.smem_reserved_bytes) \
        == (48 * KIB, 232448, 1024)
    assert limits_for_arch("90a").arch == "sm_90a"
    assert limits_for_arch("sm_80").smem_reserved_bytes == 0
    assert limits_for_arch("sm_90", 78).sm_count == 78


# --- the library's formulas agree with the oracle's ---------------------------------------

def test_family_layouts():
    """What the paged-MQA family tells the planner: 4-byte dense summaries, 16-byte varlen
    ones, 8-word block slots (the same in both formats)."""
    from jitmeta import kernels

    for schedule in FORMATS:
        assert kernels.layout(schedule, False) == LAYOUT[False]
        assert kernels.layout(schedule, True) == LAYOUT[True]
    assert LAYOUT[False].tile_align == LAYOUT[True].tile_align == 1  # words, unpadded
    assert (LAYOUT[False].summary_bytes, LAYOUT[False].slot_words) == (4, 8)
    assert (LAYOUT[True].summary_bytes, LAYOUT[True].slot_words) == (16, 8)
    for varlen in (False, True):
        assert LAYOUT[varlen].summary_bytes == O.summary_bytes(varlen)
        assert LAYOUT[varlen].slot_words == O.SLOT


def test_formulas_equal_the_oracle():
    rng = random.Random(SEED)
    sizes = [0, 1, 31, 32, 33, 1023, 1024, 4097, 8192, 55970, 56067, 2**20]
    sizes += [rng.randrange(0, 2**24) for _ in range(200)]
    for n in sizes:
        assert tile_words(n) == O.tile_words(n), f"{SEED_NOTE}: n {n}"
        for t in (32, 96, 256, 512, 1024):
            for varlen in (False, True):
                lay = LAYOUT[varlen]
                note = f"{SEED_NOTE}: n {n} threads {t} varlen {varlen}"
                assert smem_scratch(t, lay) == O.scratch(t, varlen), note
                for rsv in (0, 1024):
                    assert smem_static(n, t, lay, rsv) == O.static_bytes(n, t, varlen, rsv), note
                    assert smem_chunked(n, t, lay, rsv) == O.chunked_bytes(n, t, varlen, rsv), note
                    assert smem_dynamic(n, t, lay, rsv) == O.dynamic_bytes(n, t, varlen, rsv), note
        for chunk in (32, 1024, 2048, 4096, 8192):
            for varlen in (False, True):
                if n:
                    for t in (0, 128, 256, 1024):
                        assert workspace_words(n, chunk, LAYOUT[varlen], t) \
                            == O.workspace(n, chunk, varlen, t), \
                            f"{SEED_NOTE}: n {n} chunk {chunk} threads {t}"
                for sms in (1, 78, 132, 2000):
                    for t in (32, 256, 1024):
                        if n:
                            assert chunked_grid(n, chunk, sms, t) == O.grid(n, chunk, sms, t)


def test_family_workspace_words_of_a_plan():
    """kernels.workspace_words(plan): the formula for a chunked plan, 0 otherwise."""
    from jitmeta import kernels

    lim = limits_for_arch("sm_90")
    for batch, varlen in ((100, False), (70000, False), (70000, True), (2**24, True)):
        p = run_plan(batch, lim, varlen, knobs=Knobs())
        want = (O.workspace(batch, p.code.capacity, varlen, p.code.threads)
                if p.variant == "chunked" else 0)
        assert kernels.workspace_words(p) == want, (batch, varlen)
    # 2^24 varlen: 4096 slabs of 4096 at 512 threads (8 per thread: summed in
    # registers) -> 4 + 24576 + 4096 * 4 = 40964 words, then 4096 * 16 warps * 4
    assert kernels.workspace_words(run_plan(2**24, lim, True, knobs=Knobs())) \
        == 40964 + 4096 * 16 * 4 == 303108
    # 2^24 dense: 2048 slabs of 8192 at 1024 threads -> 4 + 24576 + 2048 = 26628 words,
    # then 2048 * 32 warps
    assert kernels.workspace_words(run_plan(2**24, lim, False, knobs=Knobs())) \
        == 26628 + 2048 * 32 == 92164
    # 70000 varlen: 35 slabs of 2048 at 256 threads (more than 132 * 256 tokens: 8
    # tokens per thread) -> 4 + 24576 + 35 * 4 = 24720 words, then 35 * 8 warps * 4
    assert kernels.workspace_words(run_plan(70000, lim, True, knobs=Knobs())) \
        == 24720 + 35 * 8 * 4 == 25840
    # 30000 varlen (below 132 * 256): 30 slabs of 1024 -> 4 + 24576 + 30 * 4 = 24700 words
    assert kernels.workspace_words(run_plan(30000, lim, True, knobs=Knobs())) == 24700
    dyn = run_plan(9000, lim, knobs=Knobs.from_values(JITMETA_VARIANT="dynamic"))
    assert dyn.variant == "dynamic" and kernels.workspace_words(dyn) == 0
    # a forced-dynamic plan may use the opt-in limit less its static part
    fam = kernels.family("smxx")
    assert fam.max_dynamic_smem(dyn, lim) == 232448 - 1168
    assert fam.max_dynamic_smem(run_plan(100, lim, knobs=Knobs()), lim) == 0
