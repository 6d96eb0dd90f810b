"""The planner's knobs: JITMETA_VARIANT, JITMETA_THREADS, JITMETA_CHUNK,
JITMETA_SMEM_BUDGET and JITMETA_ARCH, read from the environment or ``envs.override``
through a knob snapshot; bad arguments; the public ``jitmeta.plan`` wrapper.

Pure Python: no GPU and no compiler. Figures are worked out by hand beside the tests'
oracle (``tests/plan_oracle.py``).
"""

from __future__ import annotations

import pytest

import jitmeta
from jitmeta import envs, kernels
from jitmeta.envs import Knobs
from jitmeta.heuristics.plan import PlanError

import plan_oracle as O
from plan_support import run_plan


# --- env overrides -----------------------------------------------------------------------

def test_forced_variants(sm90):
    with envs.override(JITMETA_VARIANT="static"):
        p = run_plan(8192, sm90)
        assert (p.variant, p.code.capacity, p.threads) == ("static", 8192, 1024)
        assert "JITMETA_VARIANT" in p.reason
        # a forced static plan keeps the per-bucket default threads
        p = run_plan(1, sm90)
        assert (p.code.capacity, p.threads, p.smem_static_bytes) == (1024, 256, 5292)
    with envs.override(JITMETA_VARIANT="dynamic"):
        p = run_plan(1, sm90)
        # O.tile_words(1) = 1 + 0 + 1 = 2 words = 8 B; 136 + 1024 = 1160 -> 1168
        assert (p.variant, p.smem_static_bytes, p.smem_dynamic_bytes) == ("dynamic", 1168, 8)
        assert p.threads == 1024
        assert run_plan(56067, sm90).variant == "dynamic"
        assert run_plan(1, sm90, varlen=True).smem_bytes == 1568 + 8  # 544 + 1024 = 1568
    # unforced, the same batches never take dynamic
    assert (run_plan(1, sm90).variant, run_plan(56067, sm90).variant) == ("static", "chunked")
    with envs.override(JITMETA_VARIANT="chunked"):
        # 1 <= 132 * 1024: slab 1024, 256 threads, one slab: 1057 * 4 + 40 + 1024
        p = run_plan(1, sm90)
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 1, 1024, 256)
        assert p.smem_static_bytes == 5292
        assert "JITMETA_VARIANT" in p.reason
        p = run_plan(8192, sm90)    # a static batch: 8 slabs of 1024, 8 blocks
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 8, 1024, 256)
        # 132 * 1024 < 200000 <= 132 * 2048: slab 2048; 97 * 2048 = 198656 < 200000: 98
        p = run_plan(200000, sm90)
        assert (p.variant, p.grid, p.code.capacity, p.threads) == ("chunked", 98, 2048, 512)
        # varlen past 132 * 8192: streaming slabs of 4096 at 512 threads, 4096 of them on
        # 132 SMs: per 32, grid 128; 4225 * 4 + 288 + 1024 = 18212 B
        p = run_plan(2**24, sm90, varlen=True)
        assert (p.grid, p.code.capacity, p.threads, p.smem_static_bytes) \
            == (128, 4096, 512, 18212)
        # dense past 4 * 132 * 8192: 2048 slabs of 8192, per 16, grid 128
        p = run_plan(2**24, sm90)
        assert (p.grid, p.code.capacity, p.threads, p.smem_static_bytes) \
            == (128, 8192, 1024, 34956)


# dense's first batch past the dynamic limit is 56068 (varlen's, 55971, is below it)
@pytest.mark.parametrize("variant,batch", [("static", 8193), ("static", 2**20),
                                           ("dynamic", 56068), ("dynamic", 2**24)])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_impossible_forced_variant_raises(sm90, variant, batch, varlen):
    with envs.override(JITMETA_VARIANT=variant):
        with pytest.raises(PlanError, match="JITMETA_VARIANT") as info:
            run_plan(batch, sm90, varlen)
    assert variant in str(info.value) and str(batch) in str(info.value)


def test_forced_variant_varlen_dynamic_boundary(sm90):
    # 1568 + 4 O.tile_words(55970) = 1568 + 4 * 57720 = 232448; 55971 -> 232452
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert run_plan(55970, sm90, varlen=True).variant == "dynamic"
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            run_plan(55971, sm90, varlen=True)


def test_forced_chunked_with_oversized_chunk_names_the_chunk(sm90):
    # chunk 16384: 16897 * 4 + 136 + 1024 = 68748 B > 49152: chunked cannot fit at any
    # batch. The culprit is JITMETA_CHUNK; the message must say so (not advise "use chunked").
    with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=16384):
        with pytest.raises(PlanError) as info:
            run_plan(100000, sm90)
    assert "JITMETA_CHUNK" in str(info.value), str(info.value)


def test_threads_override(sm90):
    with envs.override(JITMETA_THREADS="256"):
        p = run_plan(5000, sm90)
        assert (p.variant, p.threads, p.code.threads) == ("static", 256, 256)
        assert p.smem_static_bytes == 8449 * 4 + 40 + 1024 == 34860
    # without it the 8192 bucket takes 1024 threads: 8449 * 4 + 136 + 1024 = 34956
    p = run_plan(5000, sm90)
    assert (p.threads, p.smem_static_bytes) == (1024, 34956)
    with envs.override(JITMETA_THREADS=512):
        assert run_plan(200000, sm90).threads == 512  # slab 2048 (its default is 512 too)
        assert run_plan(100000, sm90).threads == 512  # slab 1024 (default 256)
        assert run_plan(10000, sm90).threads == 512   # slab 1024
        assert run_plan(400000, sm90).threads == 512  # slab 4096 (default 1024)
        assert run_plan(100, sm90).threads == 512     # static bucket 1024 (default 256)
        # slab 1024 at 512 threads: 1057 * 4 + 72 + 1024 = 5324 B; 98 slabs
        p = run_plan(100000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 512, 5324, 98)
        # chunk 8192 at 512 threads (default 1024): 8449 * 4 + 72 + 1024 = 34892 B;
        # 122 * 8192 = 999424 < 10**6: 123 slabs, 123 blocks
        p = run_plan(10**6, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 8192, 512, 34892, 123)
    with envs.override(JITMETA_THREADS=1024):
        # slab 1024 keeps the forced 1024 threads (default 256): 1057 * 4 + 136 + 1024 =
        # 5388 B; ceil(10000 / 1024) = 10 slabs (9216 < 10000 <= 10240)
        p = run_plan(10000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 1024, 5388, 10)
        # slab 2048 likewise (default 512): 2113 * 4 + 136 + 1024 = 9612 B; 98 slabs
        p = run_plan(200000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 1024, 9612, 98)
    p = run_plan(10000, sm90)
    assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) == (1024, 256, 5292, 10)
    p = run_plan(200000, sm90)
    assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) == (2048, 512, 9548, 98)


@pytest.mark.parametrize("threads", [48, 2048, 1056])
def test_bad_threads_override_raises(sm90, threads):
    # the environment refuses these values (EnvError); the planner refuses them too when
    # a snapshot built by hand carries them
    with pytest.raises(envs.EnvError, match="JITMETA_THREADS"):
        with envs.override(JITMETA_THREADS=threads):
            run_plan(10, sm90)
    with pytest.raises(PlanError, match="JITMETA_THREADS"):
        run_plan(10, sm90, knobs=Knobs(threads=threads))


def test_chunk_override(sm90):
    with envs.override(JITMETA_CHUNK="1024"):
        p = run_plan(100000, sm90, varlen=True)
        # 97 * 1024 = 99328 < 100000 <= 98 * 1024 = 100352: 98 slabs, 98 <= 132 blocks
        assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 1024, 1024, 98)
        assert p.smem_static_bytes == 1057 * 4 + 544 + 1024 == 5796
        # the chunk does not move the static decisions (nor their threads)
        assert (run_plan(8192, sm90).variant, run_plan(8192, sm90).threads) == ("static", 1024)
        assert (run_plan(100, sm90).variant, run_plan(100, sm90).threads) == ("static", 256)
        # 54 * 1024 = 55296 < 56067 <= 55 * 1024: 55 slabs
        p = run_plan(56067, sm90)
        assert (p.variant, p.code.capacity, p.grid) == ("chunked", 1024, 55)
    # a set chunk is used as given: no switch to a slab (nor to its threads) below
    # 132 * 4096; 10000 -> 2 slabs of 8192; 400000 -> 49 (48 * 8192 = 393216 < 400000)
    with envs.override(JITMETA_CHUNK=8192):
        p = run_plan(10000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == ("chunked", 8192, 1024, 2, 34956)
        p = run_plan(400000, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 8192, 1024, 49)
    assert (run_plan(10000, sm90).code.capacity, run_plan(10000, sm90).threads) == (1024, 256)
    assert (run_plan(400000, sm90).code.capacity, run_plan(400000, sm90).threads) == (4096, 512)
    # nor to a smaller slab than a set one: 4096 at 10000 -> 3 slabs (8192 < 10000 <= 12288)
    with envs.override(JITMETA_CHUNK=4096):
        p = run_plan(10000, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 1024, 3, 18060)
    # 4096: 2**24 -> 4096 slabs, per = ceil(4096 / 132) = 32 (132 * 31 = 4092 < 4096),
    # grid 4096 / 32 = 128; 4225 * 4 + 136 + 1024 = 18060 B
    with envs.override(JITMETA_CHUNK=4096):
        p = run_plan(2**24, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 1024, 128, 18060)


def test_oversized_chunk_without_fallback_raises(sm90):
    # chunk 16384 needs 16897 * 4 + 136 + 1024 = 68748 B of static smem (> 49152); past
    # the static buckets nothing else is tried (dynamic only when forced)
    with envs.override(JITMETA_CHUNK=16384):
        assert run_plan(8192, sm90).variant == "static"
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384") as info:
            run_plan(8193, sm90)
        assert "68748" in str(info.value)
        with pytest.raises(PlanError, match="JITMETA_CHUNK=16384"):
            run_plan(56068, sm90)
    with envs.override(JITMETA_CHUNK=16384, JITMETA_VARIANT="dynamic"):
        assert run_plan(56067, sm90).variant == "dynamic"


def test_smem_budget_override(sm90):
    # budget 40000 B: static bucket 8192 (34956 / 35364 B) still fits, and so does the
    # default chunk (34956 / 35364 B): it stays 8192, with the slabs below it as without
    # a budget (1024 up to 132 * 1024, 2048 up to 132 * 2048, 4096 up to 132 * 4096);
    # forced dense dynamic:  1168 + 4 O.tile_words(b) <= 40000 -> O.tile_words(b) <= 9708:
    #                 9413 + 294 + 1 = 9708, 9414 -> 9709
    # forced varlen dynamic: 1568 + 4 O.tile_words(b) <= 40000 -> O.tile_words(b) <= 9608:
    #                 9316 + 291 + 1 = 9608, 9317 -> 9609
    with envs.override(JITMETA_SMEM_BUDGET="40000"):
        eff = sm90.with_budget(40000)
        assert O.largest_dynamic_batch(eff, 1024, False) == 9413
        assert O.largest_dynamic_batch(eff, 1024, True) == 9316
        assert run_plan(8192, sm90).variant == "static"
        assert run_plan(8192, sm90, varlen=True).variant == "static"
        # slab 1024 at 256 threads, 5292 B: 8193 -> 9 slabs (8 * 1024 = 8192 < 8193);
        # 9413 and 9414 -> 10 (9 * 1024 = 9216 < b <= 10240)
        for b, grid in ((8193, 9), (9413, 10), (9414, 10)):
            p = run_plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
                == ("chunked", 1024, 256, grid, 5292), b
        assert run_plan(9317, sm90, varlen=True).variant == "chunked"
        # 270337: slab 4096 (512 threads), 67 slabs at 4225 * 4 + 72 + 1024 = 17996 B;
        # 540673: 67 slabs of 8192 at 34956 B
        p = run_plan(270337, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (4096, 512, 67, 17996)
        p = run_plan(540673, sm90)
        assert (p.code.capacity, p.threads, p.grid, p.smem_static_bytes) \
            == (8192, 1024, 67, 34956)
        assert "budget 40000" in run_plan(9414, sm90).reason
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert run_plan(9413, sm90).smem_bytes == 1168 + 9708 * 4 == 40000
            assert run_plan(9316, sm90, varlen=True).smem_bytes == 1568 + 9608 * 4 == 40000
            with pytest.raises(PlanError, match="budget 40000"):
                run_plan(9414, sm90)
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                run_plan(9317, sm90, varlen=True)
    # budget 20000 B: bucket 4096 (512 threads: 4225 * 4 + 72 + 1024 = 17996 B) is the
    # last static (8192: 34956 B); JITMETA_CHUNK=2048 as given, at 1024 threads: 2113 * 4 + 136 +
    # 1024 = 9612 B; forced dense dynamic: O.tile_words(b) <= (20000 - 1168) / 4 = 4708:
    # 4565 + 142 + 1 = 4708, 4566 -> 4709
    with envs.override(JITMETA_SMEM_BUDGET=20000, JITMETA_CHUNK=2048):
        p = run_plan(4096, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes) \
            == ("static", 4096, 512, 17996)
        for b in (4097, 4565, 4566):  # ceil(b / 2048) = 3
            p = run_plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == ("chunked", 2048, 1024, 9612, 3), b
        assert p.smem_static_bytes == O.chunked_bytes(2048, 1024, False, 1024)
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert run_plan(4097, sm90).variant == "dynamic"
            assert run_plan(4565, sm90).variant == "dynamic"
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                run_plan(4566, sm90)
    # without JITMETA_CHUNK the default tile halves until it fits: 8192 (34956 B) ->
    # 4096 (4225 * 4 + 136 + 1024 = 18060 B <= 20000; varlen 18468 B); the slabs below
    # it are 1024 (256 threads, 5292 B) up to 132 * 1024 = 135168 and 2048 (512
    # threads, 9548 B) up to 270336; above that it stays 4096 (there is no slab 4096 below
    # a default chunk of 4096): 270336 = 66 * 4096 -> 67 slabs
    with envs.override(JITMETA_SMEM_BUDGET=20000):
        p = run_plan(4566, sm90)  # 4 * 1024 = 4096 < 4566 <= 5120: 5 slabs
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 256, 5292, 5)
        p = run_plan(135168, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 1024, 256, 5292, 132)
        p = run_plan(135169, sm90)  # 66 * 2048 = 135168 < 135169: 67 slabs
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 512, 9548, 67)
        p = run_plan(270336, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 2048, 512, 9548, 132)
        p = run_plan(270337, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 4096, 1024, 18060, 67)
        # 2**24: 4096 slabs, per = ceil(4096 / 132) = 32 (132 * 31 = 4092), grid 128
        p = run_plan(2**24, sm90, varlen=True)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 4096, 1024, 18468, 128)
    # budget 6000 B: the default chunk halves 8192 (34956 B) -> 4096 (18060 B) ->
    # 2048 (9612 B) -> 1024 (1057 * 4 + 136 + 1024 = 5388 B <= 6000), no larger than
    # 2048, so it stays (at 1024 threads) for every batch; static bucket 1024
    # (256 threads: 5292 B) fits, bucket 2048 (9548 B) does not; no slab is smaller than
    # a default chunk of 1024, so none replaces it (not even slab 1024 at its 256
    # threads, 5292 B): 1024 threads for every batch; forced dense dynamic:
    # O.tile_words(b) <= (6000 - 1168) / 4 = 1208: 1171 + 36 + 1 = 1208, 1172 -> 1209
    with envs.override(JITMETA_SMEM_BUDGET=6000):
        p = run_plan(1024, sm90)
        assert (p.variant, p.threads, p.smem_static_bytes) == ("static", 256, 5292)
        for b in (1025, 1171, 1172):  # 2 slabs of 1024
            p = run_plan(b, sm90)
            assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == ("chunked", 1024, 1024, 5388, 2), b
        # 10**6: 977 slabs (976 * 1024 = 999424); per = ceil(977 / 132) = 8, grid
        # ceil(977 / 8) = 123 (8 * 122 = 976 < 977)
        assert run_plan(10**6, sm90).grid == 123
        # 135168 (<= 132 * 1024) and 135169 alike: the default chunk at 1024 threads
        for b, grid in ((135168, 132), (135169, 67)):  # 67: 133 slabs, per 2
            p = run_plan(b, sm90)
            assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
                == (1024, 1024, 5388, grid), b
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert run_plan(1025, sm90).smem_bytes == 1168 + (1025 + 32 + 1) * 4 == 5400
            assert run_plan(1171, sm90).smem_bytes == 1168 + 1208 * 4 == 6000
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                run_plan(1172, sm90)
    # budget 5300 B: static bucket 1024 (5292 B, 256 threads) still fits, but the chunk of
    # 1024 at 1024 threads (5388 B) does not: it halves once more, to 512 (the halving
    # counts the default threads; no slab is below 512, so slab 1024 at 256 threads, which
    # would fit in 5292 B, is not taken either):
    # (512 + 16 + 1) * 4 + 136 + 1024 = 3276 B; 1025 -> 3 slabs of 512; forced dynamic:
    # O.tile_words(b) <= (5300 - 1168) / 4 = 1033 -> b <= 1001 (1001 + 31 + 1)
    with envs.override(JITMETA_SMEM_BUDGET=5300):
        assert run_plan(1024, sm90).variant == "static"
        p = run_plan(1025, sm90)
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 512, 1024, 3276, 3)
        p = run_plan(100000, sm90)  # 196 slabs of 512 (195 * 512 = 99840): per 2, grid 98
        assert (p.variant, p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == ("chunked", 512, 1024, 3276, 98)
        with envs.override(JITMETA_VARIANT="dynamic"):
            assert run_plan(1001, sm90).smem_bytes == 1168 + 1033 * 4 == 5300
            with pytest.raises(PlanError, match="JITMETA_VARIANT"):
                run_plan(1002, sm90)
    with envs.override(JITMETA_SMEM_BUDGET=100):
        with pytest.raises(PlanError):
            run_plan(1, sm90)


def test_arch_override(sm90):
    base = run_plan(5000, sm90)
    for value, want in [("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("SM_100", "sm_100")]:
        with envs.override(JITMETA_ARCH=value):
            p = run_plan(5000, sm90)
        assert p.code.arch == want, value
        assert p.code.name.endswith(want)
        assert (p.variant, p.code.capacity, p.smem_bytes) \
            == (base.variant, base.code.capacity, base.smem_bytes)


def test_overrides_read_from_environment(sm90, monkeypatch):
    """The planner reads the real environment lazily (no override needed)."""
    monkeypatch.setenv("JITMETA_VARIANT", "chunked")
    monkeypatch.setenv("JITMETA_CHUNK", "4096")
    p = run_plan(10, sm90)
    assert (p.variant, p.code.capacity) == ("chunked", 4096)
    monkeypatch.setenv("JITMETA_VARIANT", "bogus")
    with pytest.raises(envs.EnvError, match="JITMETA_VARIANT"):
        run_plan(10, sm90)


def test_bad_plan_arguments(sm90):
    with pytest.raises(PlanError, match="schedule"):
        run_plan(10, sm90, schedule="sm120")
    for kwargs in ({"batch": 0}, {"next_n": 0}, {"num_sms": 0}, {"split_kv": 0}):
        args = {"batch": 10, "next_n": 1, "num_sms": 4, "split_kv": 256} | kwargs
        with pytest.raises(PlanError, match=">= 1"):
            kernels.plan(args["batch"], args["next_n"], False, args["num_sms"], args["split_kv"],
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
    # 1168 + 4 O.tile_words(8193) = 1168 + 8450 * 4 = 34968
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


