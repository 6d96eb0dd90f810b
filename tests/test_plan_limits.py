"""The planner on hand-built device limits, and the property that no plan ever exceeds
its limits (``jitmeta/heuristics/plan.py``).

Pure Python: no GPU and no compiler. The hand-built cases work every boundary out by
hand beside the oracle's (``tests/plan_oracle.py``) value; the property sweep draws
random limits and knobs and compares every plan with the oracle's whole decision,
calling the pure planner with an explicit :class:`~jitmeta.envs.Knobs`.

Randomness is fresh on every run; the seed is printed and put in every assertion
message. Rerun a failure with ``JITMETA_TEST_SEED=<seed> pytest tests/test_plan_limits.py``.
"""

from __future__ import annotations

import random

import pytest

from jitmeta import envs
from jitmeta.heuristics.arch import ARCH_TABLE, DeviceLimits
from jitmeta.heuristics.plan import (DEFAULT_THREADS, MIN_STATIC_CAPACITY, PlanError,
                                     static_threads)

import plan_oracle as O
from plan_support import (FORMATS, KIB, SEED, SEED_NOTE, SM90_BUCKETS, knobs_of, pure_plan,
                          run_plan)


# --- boundaries for hand-built limits ----------------------------------------------------

# (limits, extra overrides, dense (largest static, largest forced dynamic), varlen (same),
#  chunked plans [(batch, chunk, threads, dense bytes, varlen bytes, grid[, varlen's
#  (chunk, threads, dense bytes, varlen bytes, grid) where it differs])], the first at
#  the largest static batch + 1)
# varlen past 256 tokens per SM takes slabs of 2048 at 256 threads (8 per thread) where
# the default would be a slab of 1024 or 2048 at 512 threads
# largest dynamic b: the largest with O.tile_words(b) = b + b // 32 + 1 <= W words
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
        # (8740) B up to 108 * 2048 = 221184; slab 4096 (512 threads): 4225 * 4 + 72
        # (288) = 16972 (17188) B up to 108 * 4096 = 442368; then 8192 (1024 threads):
        # 33932 (34340) B; one past each edge: 54 slabs of the slab + 1 -> 55 of the next;
        # 2**24: 2048 slabs, per = ceil(2048 / 108) = 19 (1944 < 2048 <= 2052),
        # grid = ceil(2048 / 19) = 108 (19 * 107 = 2033 < 2048); varlen streams there:
        # 4096 slabs of 4096, per = ceil(4096 / 108) = 38, grid = ceil(4096 / 38) = 108.
        # varlen past 108 * 256 = 27648: slab 2048 at 256 threads, 2113 * 4 + 40 (160) =
        # 8492 (8612) B; 27649 -> 14 slabs, 110592 -> 54, 110593 -> 55
        [(8193, 1024, 256, 4268, 4388, 9), (27648, 1024, 256, 4268, 4388, 27),
         (27649, 1024, 256, 4268, 4388, 28, (2048, 256, 8492, 8612, 14)),
         (110592, 1024, 256, 4268, 4388, 108, (2048, 256, 8492, 8612, 54)),
         (110593, 2048, 512, 8524, 8740, 55, (2048, 256, 8492, 8612, 55)),
         (221184, 2048, 512, 8524, 8740, 108, (2048, 256, 8492, 8612, 108)),
         (221185, 4096, 512, 16972, 17188, 55), (442368, 4096, 512, 16972, 17188, 108),
         (442369, 8192, 1024, 33932, 34340, 55),
         (2**24, 8192, 1024, 33932, 34340, 108, (4096, 512, 16972, 17188, 108))],
        id="a100"),
    pytest.param(
        DeviceLimits("sm_89", 128, smem_optin_bytes=101376, smem_reserved_bytes=0), {},
        # dense: W = (101376 - 144) / 4 = 25308; 24541 + 766 + 1 = 25308, 24542 -> 25309
        # varlen: W = (101376 - 544) / 4 = 25208; 24444 + 763 + 1 = 25208, 24445 -> 25209
        (8192, 24541), (8192, 24444),
        # bytes as a100; slab 1024 up to 128 * 1024 = 131072, 2048 up to 262144, 4096 up
        # to 524288; one past each edge: 64 slabs of the slab + 1 -> 65 of the next;
        # 2**24: 2048 slabs, per 16, grid 128 (varlen streams: 4096 slabs, per 32);
        # varlen slab 2048 at 256 threads past 128 * 256 = 32768, bytes as a100
        [(8193, 1024, 256, 4268, 4388, 9), (32768, 1024, 256, 4268, 4388, 32),
         (32769, 1024, 256, 4268, 4388, 33, (2048, 256, 8492, 8612, 17)),
         (131072, 1024, 256, 4268, 4388, 128, (2048, 256, 8492, 8612, 64)),
         (131073, 2048, 512, 8524, 8740, 65, (2048, 256, 8492, 8612, 65)),
         (262144, 2048, 512, 8524, 8740, 128, (2048, 256, 8492, 8612, 128)),
         (262145, 4096, 512, 16972, 17188, 65), (524288, 4096, 512, 16972, 17188, 128),
         (524289, 8192, 1024, 33932, 34340, 65),
         (2**24, 8192, 1024, 33932, 34340, 128, (4096, 512, 16972, 17188, 128))],
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
        # then 8192: 34860 (34980) B; 67 slabs past each edge; 2**24: grid 128; varlen
        # past 132 * 256 = 33792 takes slab 2048 (17 slabs at 33793, 66 at 135168)
        [(8193, 1024, 256, 5292, 5412, 9), (33792, 1024, 256, 5292, 5412, 33),
         (33793, 1024, 256, 5292, 5412, 34, (2048, 256, 9516, 9636, 17)),
         (135168, 1024, 256, 5292, 5412, 132, (2048, 256, 9516, 9636, 66)),
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
        # 2**24: 2048 slabs, per 8, grid 256; varlen past 600 * 256 = 153600: slab 2048
        # (153601 -> 76 slabs; 614400 -> 300, per 2, grid 150)
        [(8193, 1024, 256, 5292, 5412, 9), (153600, 1024, 256, 5292, 5412, 150),
         (153601, 1024, 256, 5292, 5412, 151, (2048, 256, 9516, 9636, 76)),
         (614400, 1024, 256, 5292, 5412, 200, (2048, 256, 9516, 9636, 150)),
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
        # chunk 8192 at 512 threads: 34892 (35108) B; edges as on sm_90 (132 SMs); varlen
        # 2**24 streams (slab 4096 at 512 threads is a register slab); varlen past
        # 132 * 256 = 33792: slab 2048 at slab_threads(2048, 512, varlen) = 256, 9516
        # (9636) B
        [(8193, 1024, 256, 5292, 5412, 9), (33792, 1024, 256, 5292, 5412, 33),
         (33793, 1024, 256, 5292, 5412, 34, (2048, 256, 9516, 9636, 17)),
         (135168, 1024, 256, 5292, 5412, 132, (2048, 256, 9516, 9636, 66)),
         (135169, 2048, 512, 9548, 9764, 67, (2048, 256, 9516, 9636, 67)),
         (270336, 2048, 512, 9548, 9764, 132, (2048, 256, 9516, 9636, 132)),
         (270337, 4096, 512, 17996, 18212, 67), (540672, 4096, 512, 17996, 18212, 132),
         (540673, 8192, 512, 34892, 35108, 67),
         (2**24, 8192, 512, 34892, 35108, 128, (4096, 512, 17996, 18212, 128))],
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
        assert O.largest_static_batch(limits, threads, varlen, forced) == static_max
        assert O.largest_dynamic_batch(limits, threads, varlen) == dynamic_max
        top = run_plan(static_max, limits, varlen)
        assert top.variant == "static"
        assert top.code.capacity == static_max
        assert top.threads == O.bucket_threads(static_max, threads, forced)
        assert top.smem_static_bytes <= limits.smem_static_bytes
        for batch, cap, *_ in SM90_BUCKETS:  # every smaller bucket is static too
            if cap <= static_max:
                p = run_plan(batch, limits, varlen)
                assert (p.variant, p.code.capacity) == ("static", cap)
                assert p.threads == O.bucket_threads(cap, threads, forced)
        # past the static buckets: chunked, never dynamic (on either side of its limit)
        for batch, chunk, t, dense_b, varlen_b, grid, *own in chunked:
            if varlen and own:  # varlen's plan differs there (register or streaming slabs)
                chunk, t, dense_b, varlen_b, grid = own[0]
            p = run_plan(batch, limits, varlen)
            assert (p.variant, p.code.capacity, p.threads, p.grid) \
                == ("chunked", chunk, t, grid), batch
            assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch
            assert p.smem_static_bytes == O.chunked_bytes(chunk, t, varlen, rsv), batch
            assert p.smem_static_bytes <= limits.smem_static_bytes, batch
            assert p.smem_dynamic_bytes == 0, batch
            assert p.grid == O.grid(batch, chunk, limits.sm_count, t), batch
            assert (chunk, t, p.smem_static_bytes, p.grid) == O.chunked(
                batch, limits, threads, varlen, forced, knobs.get("JITMETA_CHUNK")), batch
        for batch in (dynamic_max, dynamic_max + 1):
            assert run_plan(batch, limits, varlen).variant == "chunked", batch
    # forced, dynamic serves up to its opt-in limit as before
    with envs.override(**knobs, JITMETA_VARIANT="dynamic"):
        first = run_plan(static_max + 1, limits, varlen)
        assert (first.variant, first.threads, first.grid) == ("dynamic", threads, 1)
        last = run_plan(dynamic_max, limits, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= limits.smem_optin_bytes
        # one more element no longer fits (it may need two words: the spare one)
        assert sum(O.dynamic_bytes(dynamic_max + 1, threads, varlen, rsv)) \
            > limits.smem_optin_bytes
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            run_plan(dynamic_max + 1, limits, varlen)


def test_planner_respects_max_threads_per_block():
    """A device limited to 256 threads per block must get a plan that launches there.

    No JITMETA_THREADS is set, so the planner has to pick threads within the limit
    rather than blame a variable the user never set.
    """
    lim = DeviceLimits("sm_90", 132, max_threads_per_block=256)
    p = run_plan(100, lim)
    assert p.threads <= 256
    assert p.threads == static_threads(1024, 256) == 256
    assert p.smem_static_bytes <= lim.smem_static_bytes
    # every bucket, every slab (132 * 1024 = 135168, 132 * 2048 = 270336, 132 * 4096 =
    # 540672) and the default chunk: static_threads(c, 256) = 256 for all
    for batch in (1, 2048, 4096, 8192, 8193, 200000, 400000, 10**6):
        assert run_plan(batch, lim).threads == 256, batch
    assert [run_plan(b, lim).code.capacity for b in (8193, 200000, 400000, 10**6)] \
        == [1024, 2048, 4096, 8192]
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert run_plan(8193, lim).threads == 256
    # a limit that is not a multiple of 32 rounds down to whole warps: 100 -> 96
    odd = DeviceLimits("sm_90", 132, max_threads_per_block=100)
    for batch in (1, 8192, 8193, 200000, 400000, 10**6):
        assert run_plan(batch, odd).threads == 96, batch


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
    on_slab = dict.fromkeys(O.SLABS, 0)  # plans on each slab (no JITMETA_CHUNK)
    streamed = 0  # plans on the streaming slab
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
            knobs["JITMETA_CHUNK"] = rng.choice([32, 256, 1024, 2048, 4096, 8192, 16384])
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
        want = O.decide(batch, eff, threads, varlen, forced,
                        knobs.get("JITMETA_CHUNK"), knobs.get("JITMETA_VARIANT"))
        snap = knobs_of(**knobs)  # the pure planner: the knobs passed explicitly
        try:
            p = pure_plan(batch, limits, snap, varlen, next_n, num_sms, 256,
                          rng.choice(FORMATS))
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
            assert p.smem_static_bytes == O.static_bytes(cap, p.threads, varlen, rsv), note
        elif p.variant == "dynamic":
            assert p.grid == 1 and p.code.capacity == 0 and p.threads == threads, note
            assert (p.smem_static_bytes, p.smem_dynamic_bytes) \
                == O.dynamic_bytes(batch, threads, varlen, rsv), note
        else:
            chunk = p.code.capacity
            slabs = -(-batch // chunk)
            if "JITMETA_CHUNK" in knobs:
                assert chunk == knobs["JITMETA_CHUNK"] and p.threads == threads, note
            elif chunk == O.default_chunk(eff, threads, varlen):
                # no slab: every slab below the default chunk would leave some SM's
                # block more than one
                assert p.threads == threads, note
                assert all(-(-batch // c) > limits.sm_count for c in O.SLABS if c < chunk), note
                default_chunks += 1
            elif slabs > limits.sm_count:
                # streaming: the default chunk would give some SM's block two slabs or
                # more, and a 4096 slab gets 512 threads (a register slab); dense only
                # up to 4 default slabs per SM
                dflt = O.default_chunk(eff, threads, varlen)
                assert chunk == 4096 < dflt and p.threads == 512, note
                assert -(-batch // dflt) > limits.sm_count, note
                assert varlen or -(-batch // dflt) <= 4 * limits.sm_count, note
                assert p.threads == O.slab_threads(chunk, threads, forced, varlen), note
                streamed += 1
            elif (varlen and chunk == 2048 and batch <= 1024 * limits.sm_count):
                # varlen past 256 tokens per SM: 2048 where 1024 would do, at 256
                # threads (8 tokens each), below a larger default chunk
                assert batch > 256 * limits.sm_count, note
                assert 2048 < O.default_chunk(eff, threads, varlen), note
                assert p.threads == O.slab_threads(2048, threads, forced, True) == 256, note
                on_slab[chunk] += 1
            else:
                # a slab below the default chunk that gives no SM's block two, the
                # smallest such, at its bucket's threads
                assert chunk in O.SLABS and chunk < O.default_chunk(eff, threads, varlen), note
                assert slabs <= limits.sm_count, note
                assert all(-(-batch // c) > limits.sm_count for c in O.SLABS if c < chunk), note
                assert p.threads == O.slab_threads(chunk, threads, forced, varlen), note
                on_slab[chunk] += 1
            # at most one block per SM, per thread of a block and 1024; none idle
            assert 1 <= p.grid <= min(slabs, limits.sm_count, p.threads, 1024), note
            per = -(-slabs // p.grid)
            assert (p.grid - 1) * per < slabs <= p.grid * per, note
            assert f"over {slabs} slab(s) of {chunk} elements" in p.reason, note
            assert p.smem_static_bytes == O.chunked_bytes(chunk, p.threads, varlen, rsv), note
            assert p.smem_dynamic_bytes == 0, note
    print(f"{SEED_NOTE}: outcomes {outcomes}, slabs {on_slab}, streaming {streamed}, "
          f"default chunk {default_chunks}, forced {forced_variant}")
    assert min(outcomes.values()) > 0, f"{SEED_NOTE}: sweep missed an outcome {outcomes}"
    assert min(on_slab.values()) > 0, f"{SEED_NOTE}: sweep missed a slab {on_slab}"
    assert default_chunks > 0 and forced_variant > 0, SEED_NOTE


