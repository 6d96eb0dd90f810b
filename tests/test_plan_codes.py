"""``codes_for_batches``: a handful of cubins serve every batch size, and they are
exactly the codes a brute-force sweep of the planner finds.

Pure Python: no GPU and no compiler. Randomness is fresh on every run; the seed is
printed and put in every assertion message. Rerun a failure with
``JITMETA_TEST_SEED=<seed> pytest tests/test_plan_codes.py``.
"""

from __future__ import annotations

import random

import pytest

from jitmeta import envs, kernels
from jitmeta.envs import Knobs
from jitmeta.heuristics.arch import DeviceLimits, limits_for_arch
from jitmeta.heuristics.plan import _boundaries

from plan_support import FORMATS, LAYOUT, SEED, SEED_NOTE, run_plan


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
    codes = kernels.codes_for_batches([(1, 2**24)], next_n, varlen, num_sms, 256, schedule, sm90)
    # static buckets 1024, 2048 (256 threads), 4096 (512), 8192 (1024); slab 1024 (256
    # threads) for 8193..132 * 1024 = 135168 (varlen: up to 132 * 256 = 33792), slab
    # 2048 (512 threads; varlen 256) up to 270336, slab 4096 (512) up to 540672, chunk
    # 8192 (1024) up to 132 * 8192 = 1081344, then slab 4096 again (varlen: to the end;
    # dense: up to 4 * 1081344 = 4325376, then chunk 8192); no dynamic: 4 + 4 = 8
    # (num_sms is the output's SM count; the limits' 132 SMs set the chunks)
    assert len(codes) == 8 and len(codes) < 10
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("chunked", 2048, 256 if varlen else 512),
        ("chunked", 4096, 512), ("chunked", 8192, 1024), ("static", 1024, 256),
        ("static", 2048, 256), ("static", 4096, 512), ("static", 8192, 1024)]
    for code, example in codes.items():
        assert example.code == code
        assert example.schedule == schedule
        assert (code.varlen, code.schedule, code.arch) == (
            varlen, "smxx" if schedule == "sm90" else schedule, "sm_90")
    # each chunked cubin's example is the first batch it serves: one past the static
    # buckets, then one past 132 * 1024 (varlen: 132 * 256), 132 * 2048, 132 * 4096
    assert {c.capacity: p.batch for c, p in codes.items() if c.variant == "chunked"} \
        == {1024: 8193, 2048: 33793 if varlen else 135169, 4096: 270337, 8192: 540673}
    rng = random.Random(f"{SEED}-{varlen}-{schedule}-{next_n}-{num_sms}")
    brute = {run_plan(b, sm90, varlen, next_n, num_sms, 256, schedule).code
             for b in _coarse_sweep(rng, 2**24)}
    assert brute == set(codes), SEED_NOTE


# the default threads of each chunk on a 1024-thread device (slab_threads: 256, 512,
# 512; the default chunk at 1024)
CHUNK_THREADS = {1024: 256, 2048: 512, 4096: 512, 8192: 1024}


@pytest.mark.parametrize("sm_count,chunks", [
    # 2 * 4096 = 8192: every batch past the buckets is over it; slab 4096 streams from
    # 2 * 8192 = 16384 to 4 * 16384 = 65536 (dense)
    (2, [4096, 8192]),
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
    codes = kernels.codes_for_batches([(1, 2**24)], 1, False, 132, 256, "smxx", lim)
    # the 4 static buckets and one chunked cubin per chunk
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == sorted(
        [("chunked", c, CHUNK_THREADS[c]) for c in chunks]
        + [("static", 1024, 256), ("static", 2048, 256), ("static", 4096, 512),
           ("static", 8192, 1024)])
    assert len(codes) == 4 + len(chunks)
    edges = [sm_count * c + d for c in (1024, 2048, 4096, 8192, 4 * 8192) for d in (-1, 0, 1)]
    brute = {run_plan(b, lim).code for b in range(1, 8194)}
    brute |= {run_plan(b, lim).code for b in edges + [2**24] if 1 <= b <= 2**24}
    assert brute == set(codes)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_exhaustive_sweep(sm90, varlen):
    """Every batch 1..60000 (which crosses every static bucket and the forced-dynamic
    limit, 56067 dense / 55970 varlen) and around the slab limits 132 * 1024 = 135168,
    132 * 2048 = 270336 and 132 * 4096 = 540672, and the streaming slabs' edges 132 *
    8192 = 1081344 and 4 * 1081344, plus a stride to 2**24."""
    batches = (list(range(1, 60001)) + list(range(134000, 136001))
               + list(range(269000, 272001)) + list(range(539000, 542001))
               + list(range(1081000, 1082001)) + list(range(4325000, 4326001))
               + list(range(60001, 2**24 + 1, 4099)) + [2**24])
    brute = {run_plan(b, sm90, varlen).code for b in batches}
    assert brute == set(kernels.codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", sm90))


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
        codes = kernels.codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "sm90", sm90)
        batches = sorted(set(range(1, 12001)) | set(_coarse_sweep(rng, 2**24)))
        brute = {run_plan(b, sm90, varlen, schedule="sm90").code for b in batches}
    assert brute == set(codes), f"{SEED_NOTE} {knobs}"
    assert 1 <= len(codes) < 10


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_codes_match_brute_force_on_a_512_thread_device(varlen):
    lim = DeviceLimits("sm_90", 132, max_threads_per_block=512)
    codes = kernels.codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, "smxx", lim)
    # static 1024 / 2048 (256 threads), 4096 / 8192 (512); slabs 1024 (slab_threads(1024,
    # 512) = 256), 2048 (512; varlen 256), 4096 (512) and chunk 8192 (512); no dynamic
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("chunked", 2048, 256 if varlen else 512),
        ("chunked", 4096, 512),
        ("chunked", 8192, 512), ("static", 1024, 256), ("static", 2048, 256),
        ("static", 4096, 512), ("static", 8192, 512)]
    rng = random.Random(SEED)
    batches = sorted(set(range(1, 12001)) | set(range(33000, 34001))
                     | set(range(55000, 57001))
                     | set(range(134000, 136001)) | set(range(269000, 272001))
                     | set(range(539000, 542001)) | set(_coarse_sweep(rng, 2**24)))
    assert {run_plan(b, lim, varlen).code for b in batches} == set(codes), SEED_NOTE


@pytest.mark.parametrize("varlen,dynamic_max", [(False, 56067), (True, 55970)],
                         ids=["dense", "varlen"])
def test_boundaries_include_every_slab_edge(sm90, varlen, dynamic_max):
    """The batches codes_for_batches plans at: the range's ends, each static bucket and
    one past it, the forced-dynamic limit and one past it, and sm_count * slab and one
    past it for every slab (where the chunked plan changes its slab), where varlen's
    register slabs of 2048 start, and where the streaming slabs start and (dense) end."""
    got = _boundaries(1, 2**24, sm90, 1024, Knobs(), LAYOUT[varlen])
    buckets = [2**k + d for k in range(10, 25) for d in (0, 1)]
    buckets.remove(2**24 + 1)  # out of the range
    # 132 * 256 = 33792, 132 * 1024 = 135168, 132 * 2048 = 270336, 132 * 4096 = 540672;
    # streaming from 132 * 8192 = 1081344, dense up to 4 * 1081344 = 4325376
    slab_edges = [33792, 33793, 135168, 135169, 270336, 270337, 540672, 540673, 1081344,
                  1081345, 4325376, 4325377]
    assert got == sorted({1, 2**24, dynamic_max, dynamic_max + 1, *buckets, *slab_edges})
    # 78 SMs, batches 100000..400000: 78 * 1024 = 79872 is below the range; 78 * 2048 =
    # 159744 and 78 * 4096 = 319488 are in it, with the buckets 2**17 and 2**18
    got = _boundaries(100000, 400000, limits_for_arch("sm_90", 78), 1024, Knobs(),
                      LAYOUT[varlen])
    assert got == [100000, 131072, 131073, 159744, 159745, 262144, 262145, 319488, 319489,
                   400000]


def test_codes_for_several_ranges(sm90):
    codes = kernels.codes_for_batches([(1, 100), (9000, 9000), (3000, 3001)], 1, False, 132, 256,
                              "smxx", sm90)
    # 1..100: bucket 1024; 9000: slab 1024 (9000 <= 135168); 3000, 3001: bucket 4096
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 1024, 256), ("static", 1024, 256), ("static", 4096, 512)]
    brute = {run_plan(b, sm90).code for b in list(range(1, 101)) + [9000, 3000, 3001]}
    assert brute == set(codes)
    # ranges inside the chunked batches: 200000..300000 crosses 132 * 2048 = 270336
    # (slabs 2048 and 4096); 540672..540673 crosses 132 * 4096 (4096 and 8192)
    codes = kernels.codes_for_batches([(200000, 300000), (540672, 540673)], 1, False, 132, 256,
                              "smxx", sm90)
    assert sorted((c.variant, c.capacity, c.threads) for c in codes) == [
        ("chunked", 2048, 512), ("chunked", 4096, 512), ("chunked", 8192, 1024)]
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
        p1 = kernels.plan(batch, 1, varlen, rng.randrange(1, 5000), 256, sched, lim)
        p2 = kernels.plan(batch, 1 if varlen else rng.randrange(1, 9), varlen,
                  rng.randrange(1, 5000), 256, sched, lim)
        note = f"{SEED_NOTE} case {case}: batch {batch} sm_count {lim.sm_count}"
        assert p1.code == p2.code, note
        assert p1.grid == p2.grid and p1.smem_bytes == p2.smem_bytes, note


def test_code_depends_on_what_changes_the_source(sm90):
    base = run_plan(100, sm90).code
    assert run_plan(100, sm90, varlen=True).code != base
    assert run_plan(100, sm90, schedule="sm100").code != base
    assert run_plan(100, sm90, split_kv=128).code != base
    assert len({base.name, run_plan(100, sm90, split_kv=128).code.name,
                run_plan(100, sm90, schedule="sm100").code.name}) == 3


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_is_served_by_the_smxx_cubins(sm90, varlen):
    """"sm90" differs from "smxx" only in a kernel argument: every sm90 plan has the
    code of the smxx plan of the same shape (so the same cubin and cache key) and
    records the format it computes; its call passes wide_last = 1, smxx's 0."""
    rng = random.Random(SEED)
    for batch in [1, 8192, 8193, 65536, 2**24] + [rng.randrange(1, 2**24) for _ in range(20)]:
        p90 = run_plan(batch, sm90, varlen, schedule="sm90")
        pxx = run_plan(batch, sm90, varlen, schedule="smxx")
        assert p90.code == pxx.code and p90.code.schedule == "smxx", f"{SEED_NOTE} {batch}"
        assert (p90.schedule, pxx.schedule) == ("sm90", "smxx")
        assert (p90.grid, p90.smem_bytes) == (pxx.grid, pxx.smem_bytes)
        d = p90.to_dict()
        assert (d["schedule"], d["code_schedule"], d["code_name"]) == (
            "sm90", "smxx", pxx.code.name)
        assert kernels.call(0, p90, None).wide_last == 1
        assert kernels.call(0, pxx, None).wide_last == 0
        assert kernels.call(0, run_plan(batch, sm90, varlen, schedule="sm100"),
                            None).wide_last == 0
    codes = {sch: kernels.codes_for_batches([(1, 2**24)], 1, varlen, 132, 256, sch, sm90)
             for sch in ("smxx", "sm90")}
    assert set(codes["sm90"]) == set(codes["smxx"])
    assert {p.schedule for p in codes["sm90"].values()} == {"sm90"}


def test_sanitizer_cases_reach_every_cubin_a_batch_uses(sm90):
    """scripts/sanitize_cases.py runs under compute-sanitizer every cubin that serves
    batches 1..2^24 on 132 SMs (dense next_n 1 and 2, varlen; every format): a block
    size or slab the planner starts to use needs a case there."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    try:
        import sanitize_cases
    finally:
        sys.path.pop(0)
    reached = {run_plan(batch, sm90, varlen, next_n, num_sms, schedule=schedule).code
               for _, batch, varlen, next_n, schedule, num_sms in sanitize_cases.runs()}
    needed = set()
    for schedule in ("smxx", "sm90", "sm100"):
        for varlen, next_n in ((False, 1), (False, 2), (True, 1)):
            needed |= set(kernels.codes_for_batches([(1, 2**24)], next_n, varlen, 132, 256,
                                                    schedule, sm90))
    missing = sorted(c.name for c in needed - reached)
    assert not missing, f"cubins no sanitizer case runs: {missing}"
