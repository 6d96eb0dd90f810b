"""The planner's boundaries on sm_90 (132 SMs, 48 KiB static, 232448 B opt-in, 1 KiB
reserved per block), and how the chunked plan follows the device's SM count.

Pure Python: no GPU and no compiler. Every boundary is asserted twice: once as the
value the tests' oracle (``tests/plan_oracle.py``) gives, and once as the literal number
worked out by hand in the comment beside it.

The policy under test: static buckets while they fit the static limit, then chunked: the
default chunk of 8192 (halved until it fits the static limit), unless a smaller slab of
1024, 2048 or 4096 elements still gives every SM at most one slab (batch <= sm_count *
slab), in which case the smallest such slab, at static_threads(slab) threads (unless
JITMETA_THREADS is set); a cooperative grid of at most one block per SM. On sm_90 (132
SMs) that is slab 1024 (256 threads) up to 135168, 2048 (512) up to 270336, 4096 (1024)
up to 540672, then 8192 (1024). ``dynamic`` serves a batch only when forced with
JITMETA_VARIANT.
"""

from __future__ import annotations

import pytest

from jitmeta import envs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.heuristics.plan import (DEFAULT_THREADS, WORD, PlanError, largest_tile,
                                     static_threads)

import plan_oracle as O
from plan_support import KIB, SM90_BUCKETS, run_plan


# --- boundaries on sm_90 -----------------------------------------------------------------

@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_static_chunked_boundary(sm90, varlen):
    # bucket 8192 (1024 threads): 8449 * 4 + 136 + 1024 = 34956 B (dense) /
    # 8449 * 4 + 544 + 1024 = 35364 B (varlen) <= 49152; bucket 16384: 68748 B > 49152
    assert O.largest_static_batch(sm90, DEFAULT_THREADS, varlen) == 8192
    last = run_plan(8192, sm90, varlen)
    assert (last.variant, last.code.capacity, last.grid) == ("static", 8192, 1)
    assert last.threads == static_threads(8192, DEFAULT_THREADS) == 1024
    assert last.smem_static_bytes == O.static_bytes(8192, 1024, varlen, 1024)
    assert last.smem_static_bytes == (35364 if varlen else 34956)
    assert last.smem_dynamic_bytes == 0
    assert last.smem_static_bytes <= 48 * KIB
    # 8193 <= 132 * 1024 = 135168: chunked with the smallest slab, 1024, at
    # static_threads(1024, 1024) = 256 threads; 8 * 1024 = 8192 < 8193 <= 9 * 1024: 9 slabs,
    # one block each; 1057 * 4 + 40 (160) + 1024 = 5292 (5412) B
    first = run_plan(8193, sm90, varlen)
    assert (first.variant, first.code.capacity, first.grid) == ("chunked", 1024, 9)
    assert first.threads == first.code.threads == 256
    assert first.smem_static_bytes == O.chunked_bytes(1024, 256, varlen, 1024)
    assert first.smem_static_bytes == (5412 if varlen else 5292)
    assert first.smem_dynamic_bytes == 0
    assert "static" in last.reason
    assert "9 cooperative block(s) over 9 slab(s) of 1024 elements" in first.reason
    assert "dynamic" not in first.reason


# Dense on sm_90, 132 SMs (varlen: the test below): a slab serves while every SM's block
# gets at most one slab of it, so up to 132 * slab; the next batch needs 133 slabs of it
# and takes the next size: 132 * c = 66 * 2c, so 67 slabs of 2c, 67 blocks.
# (last batch of a slab, its slab, threads, bytes, then the next batch's chunk, threads,
# bytes)
SM90_SLAB_EDGES = [
    # 132 * 1024 = 135168; 1057 * 4 + 40 + 1024 = 5292 B at 256 threads;
    # 2113 * 4 + 72 + 1024 = 9548 B at 512 threads
    pytest.param(135168, 1024, 256, 5292, 2048, 512, 9548, id="1024-2048"),
    # 132 * 2048 = 270336; 4225 * 4 + 72 + 1024 = 17996 B at 512 threads
    pytest.param(270336, 2048, 512, 9548, 4096, 512, 17996, id="2048-4096"),
    # 132 * 4096 = 540672; the default chunk: 8449 * 4 + 136 + 1024 = 34956 B
    pytest.param(540672, 4096, 512, 17996, 8192, 1024, 34956, id="4096-8192"),
]


@pytest.mark.parametrize("last_batch,slab,threads,nbytes,next_chunk,next_threads,next_bytes",
                         SM90_SLAB_EDGES)
def test_sm90_slab_boundaries(sm90, last_batch, slab, threads, nbytes, next_chunk,
                              next_threads, next_bytes):
    assert last_batch == 132 * slab
    # the last batch of the slab: 132 slabs, 132 blocks (min(132, 132 SMs, threads, 1024))
    last = run_plan(last_batch, sm90, False)
    assert (last.variant, last.code.capacity, last.threads, last.code.threads, last.grid) \
        == ("chunked", slab, threads, threads, 132)
    assert last.smem_static_bytes == nbytes == O.chunked_bytes(slab, threads, False, 1024)
    assert last.smem_dynamic_bytes == 0
    assert f"132 cooperative block(s) over 132 slab(s) of {slab} elements" in last.reason
    # one more: 133 slabs of the slab would leave a block two; the next size (67 slabs)
    first = run_plan(last_batch + 1, sm90, False)
    assert (first.variant, first.code.capacity, first.threads, first.code.threads,
            first.grid) == ("chunked", next_chunk, next_threads, next_threads, 67)
    assert first.smem_static_bytes == next_bytes \
        == O.chunked_bytes(next_chunk, next_threads, False, 1024)
    assert first.smem_dynamic_bytes == 0
    assert f"67 cooperative block(s) over 67 slab(s) of {next_chunk} elements" in first.reason
    # both sides against the documented policy (the grid too)
    for p in (last, first):
        assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == O.chunked(p.batch, sm90, 1024, False), p.batch
    # the half-way point of the next size is still on it: 132 * 1.5 slab
    mid = run_plan(last_batch + last_batch // 2, sm90, False)
    assert (mid.code.capacity, mid.threads) == (next_chunk, next_threads)


# varlen on sm_90, 132 SMs: slab 1024 (256 threads) up to 132 * 256 = 33792 tokens,
# then slab 2048 at 256 threads (8 tokens each: 2113 * 4 + 160 + 1024 = 9636 B) up to
# 132 * 2048 = 270336, then as dense: (batch, slab, threads, slabs = grid, bytes)
SM90_VARLEN_EDGES = [
    (33792, 1024, 256, 33, 5412),     # 33 * 1024
    (33793, 2048, 256, 17, 9636),     # 16 * 2048 = 32768 < 33793 <= 34816
    (135168, 2048, 256, 66, 9636),    # 66 * 2048
    (135169, 2048, 256, 67, 9636),
    (270336, 2048, 256, 132, 9636),   # 132 * 2048: one slab per SM
    (270337, 4096, 512, 67, 18212),   # 66 * 4096 = 270336 < 270337
    (540672, 4096, 512, 132, 18212),
    (540673, 8192, 1024, 67, 35364),
]


def test_sm90_varlen_slab_boundaries(sm90):
    for batch, slab, threads, grid, varlen_b in SM90_VARLEN_EDGES:
        p = run_plan(batch, sm90, True)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == ("chunked", slab, threads, grid), batch
        assert p.smem_static_bytes == varlen_b == O.chunked_bytes(slab, threads, True, 1024)
        assert f"{grid} cooperative block(s) over {grid} slab(s) of {slab} elements" \
            in p.reason, batch
        assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == O.chunked(batch, sm90, 1024, True), batch


@pytest.mark.parametrize("varlen,largest", [(False, 56067), (True, 55970)],
                         ids=["dense", "varlen"])
def test_sm90_forced_dynamic_limit(sm90, varlen, largest):
    # dense:  1168 + 4 O.tile_words(b) <= 232448 -> O.tile_words(b) <= 231280 / 4 = 57820
    #         56067 + 56067 // 32 + 1 = 56067 + 1752 + 1 = 57820;  56068 -> 57821
    # varlen: 1568 + 4 O.tile_words(b) <= 232448 -> O.tile_words(b) <= 230880 / 4 = 57720
    #         55970 + 55970 // 32 + 1 = 55970 + 1749 + 1 = 57720;  55971 -> 57721
    assert O.largest_dynamic_batch(sm90, DEFAULT_THREADS, varlen) == largest
    assert largest_tile((sm90.smem_optin_bytes - (1568 if varlen else 1168)) // WORD) \
        == largest
    # unforced, neither side of the dynamic limit is dynamic: b <= 132 * 1024, so slab
    # 1024 at 256 threads; 54 * 1024 = 55296 < b <= 55 * 1024 = 56320: 55 slabs, one
    # block each (varlen, past 132 * 256: slab 2048 at 256 threads, 27 * 2048 = 55296
    # < b <= 57344: 28 slabs)
    for batch in (largest, largest + 1):
        p = run_plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == (("chunked", 2048, 256, 28) if varlen else ("chunked", 1024, 256, 55))
    with envs.override(JITMETA_VARIANT="dynamic"):
        first = run_plan(8193, sm90, varlen)
        assert (first.variant, first.code.capacity, first.grid) == ("dynamic", 0, 1)
        assert first.threads == DEFAULT_THREADS == 1024
        # 136 (544) + 1024 = 1160 (1568) -> rounded up to 16: 1168 (1568)
        assert first.smem_static_bytes == (1568 if varlen else 1168)
        assert first.smem_dynamic_bytes == O.tile_words(8193) * 4 == 8450 * 4 == 33800
        assert "JITMETA_VARIANT" in first.reason and "dynamic" in first.reason
        last = run_plan(largest, sm90, varlen)
        assert last.variant == "dynamic"
        assert last.smem_bytes <= sm90.smem_optin_bytes
        # 1168 + 57820 * 4 == 1568 + 57720 * 4 == 232448: the opt-in limit exactly
        assert last.smem_dynamic_bytes == (57720 if varlen else 57820) * 4
        assert last.smem_bytes == 232448
        with pytest.raises(PlanError, match="JITMETA_VARIANT"):
            run_plan(largest + 1, sm90, varlen)




@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_sm90_static_buckets(sm90, varlen):
    for batch, cap, threads, dense_b, varlen_b in SM90_BUCKETS:
        p = run_plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity) == ("static", cap), batch
        assert p.threads == p.code.threads == static_threads(cap, 1024) == threads, batch
        assert p.smem_static_bytes == O.static_bytes(cap, threads, varlen, 1024), batch
        assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch


@pytest.mark.parametrize("forced", [128, 512, 1024])
def test_threads_override_applies_to_every_static_bucket(sm90, forced):
    """JITMETA_THREADS replaces static_threads in every bucket (and every slab and the
    default chunk)."""
    with envs.override(JITMETA_THREADS=forced):
        for batch, cap, *_ in SM90_BUCKETS:
            for varlen in (False, True):
                p = run_plan(batch, sm90, varlen)
                assert (p.variant, p.code.capacity, p.threads) == ("static", cap, forced)
                assert p.smem_static_bytes == O.static_bytes(cap, forced, varlen, 1024)
        # the slabs (static_threads: 256 / 512 / 1024 unless set) keep their ranges:
        # 8193 and 135168 <= 132 * 1024; 135169 and 270336 <= 132 * 2048; 270337 and
        # 540672 <= 132 * 4096; 540673 and 10**6 on the default chunk
        for batch, chunk in ((8193, 1024), (135168, 1024), (135169, 2048), (270336, 2048),
                             (270337, 4096), (540672, 4096), (540673, 8192),
                             (10**6, 8192)):
            p = run_plan(batch, sm90)
            assert (p.variant, p.code.capacity, p.threads) == ("chunked", chunk, forced), \
                batch
            assert p.smem_static_bytes == O.chunked_bytes(chunk, forced, False, 1024), batch
    # 1024 on the 1024 bucket: 1057 * 4 + 136 + 1024 = 5388 B (the default there is 5292 B)
    with envs.override(JITMETA_THREADS=1024):
        assert run_plan(100, sm90).smem_static_bytes == 5388
    assert run_plan(100, sm90).smem_static_bytes == 5292


# (batch, chunk, threads, slabs, grid, dense bytes, varlen bytes) on sm_90 (132 SMs):
# slab 1024 (256 threads: 1057 * 4 + 40 (160) + 1024 B) up to 132 * 1024 = 135168,
# slab 2048 (512 threads: 2113 * 4 + 72 (288) + 1024 B) up to 132 * 2048 = 270336,
# slab 4096 (512 threads: 4225 * 4 + 72 (288) + 1024 B) up to 132 * 4096 = 540672,
# then the default 8192 (1024 threads: 8449 * 4 + 136 (544) + 1024 B) up to 132 * 8192 =
# 1081344; past it slab 4096 again (streaming), varlen always, dense up to 4 * 1081344;
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
    (270337, 4096, 512, 67, 67, 17996, 18212),      # 66 * 4096 = 270336 < 270337
    (400000, 4096, 512, 98, 98, 17996, 18212),      # 97 * 4096 = 397312 < 400000 <= 401408
    (540672, 4096, 512, 132, 132, 17996, 18212),    # 132 * 4096: one slab per SM
    (540673, 8192, 1024, 67, 67, 34956, 35364),     # 66 * 8192 = 540672 < 540673
    (2**20, 8192, 1024, 128, 128, 34956, 35364),    # 2**20 / 8192 = 128 <= 132
    (1081344, 8192, 1024, 132, 132, 34956, 35364),  # 132 * 8192: one slab per SM
    # streaming: 1081345 / 4096 -> 264 + 1 = 265 slabs, per = ceil(265 / 132) = 3, grid
    # ceil(265 / 3) = 89; 4 * 1081344 = 4325376: 1056 slabs, per 8, grid 132
    (1081345, 4096, 512, 265, 89, 17996, 18212),
    (4325376, 4096, 512, 1056, 132, 17996, 18212),
    # dense past 4 * 1081344: the default chunk again (varlen: SM90_VARLEN below)
    (4325377, 8192, 1024, 529, 106, 34956, 35364),  # 529 slabs, per 5, grid 106
    (2**24, 8192, 1024, 2048, 128, 34956, 35364),   # per 16 (1980 < 2048 <= 2112); 2048 / 16
    (2**24 + 1, 8192, 1024, 2049, 129, 34956, 35364),  # per 16; 16 * 128 = 2048 < 2049
]
# varlen: slab 2048 at 256 threads (2113 * 4 + 40 (160) + 1024 B) from 132 * 256 up
# to 132 * 2048; streams past 132 * 8192 at any batch: slab 4096 (512 threads)
SM90_VARLEN = {
    56068: (2048, 256, 28, 28, 9516, 9636),     # 27 * 2048 = 55296 < 56068 <= 57344
    57820: (2048, 256, 29, 29, 9516, 9636),     # 57344 < 57820 <= 29 * 2048 = 59392
    65536: (2048, 256, 32, 32, 9516, 9636),     # 65536 / 2048
    135168: (2048, 256, 66, 66, 9516, 9636),    # 66 * 2048
    135169: (2048, 256, 67, 67, 9516, 9636),
    200000: (2048, 256, 98, 98, 9516, 9636),
    270336: (2048, 256, 132, 132, 9516, 9636),
    4325377: (4096, 512, 1057, 118, 17996, 18212),  # per 9 (132 * 8 = 1056 < 1057)
    2**24: (4096, 512, 4096, 128, 17996, 18212),        # per 32 (132 * 31 = 4092 < 4096)
    2**24 + 1: (4096, 512, 4097, 129, 17996, 18212),    # per 32; 32 * 128 = 4096 < 4097
}


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_chunked_grid_for_huge_batches(sm90, varlen):
    for row in SM90_CHUNKED:
        batch = row[0]
        chunk, threads, slabs, grid, dense_b, varlen_b = (
            SM90_VARLEN[batch] if varlen and batch in SM90_VARLEN else row[1:])
        p = run_plan(batch, sm90, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == ("chunked", chunk, threads, grid), batch
        assert p.grid == O.grid(batch, chunk, 132, threads), batch
        assert p.smem_static_bytes == (varlen_b if varlen else dense_b), batch
        assert p.smem_dynamic_bytes == 0, batch
        assert (f"{grid} cooperative block(s) over {slabs} slab(s) of {chunk} elements"
                in p.reason), (batch, p.reason)
    assert run_plan(2**24, sm90, varlen).grid == 128


def test_chunked_plan_follows_the_device_sm_count():
    # 78 SMs: slab 2048 up to 78 * 2048 = 159744 (78 slabs, 78 blocks); 159745 takes
    # slab 4096 (512 threads, up to 78 * 4096 = 319488): 39 * 4096 = 159744 < 159745 ->
    # 40 slabs, 40 blocks (before the slabs, the default chunk: 19 * 8192 = 155648 <
    # 159745, 20 slabs)
    lim = limits_for_arch("sm_90", 78)
    assert (run_plan(159744, lim).code.capacity, run_plan(159744, lim).grid) == (2048, 78)
    p = run_plan(159745, lim)
    assert (p.code.capacity, p.threads, p.grid) == (4096, 512, 40)
    # 2**24: per = ceil(2048 / 78) = 27, grid = ceil(2048 / 27) = 76 (27 * 75 = 2025 < 2048)
    assert run_plan(2**24, lim).grid == 76
    # 4 SMs: 4 * 1024 = 4096 and 4 * 2048 = 8192, so no batch past the static buckets
    # takes slab 1024 or 2048; 8193 <= 4 * 4096 = 16384 takes slab 4096: 2 * 4096 = 8192
    # < 8193 -> 3 slabs, 3 blocks; 16385 takes the default chunk: 3 slabs of 8192
    lim = limits_for_arch("sm_90", 4)
    p = run_plan(8193, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 4096, 512, 3)
    p = run_plan(16384, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 4096, 512, 4)
    p = run_plan(16385, lim)
    assert (p.variant, p.code.capacity, p.threads, p.grid) == ("chunked", 8192, 1024, 3)
    assert run_plan(2**24, lim).grid == 4                  # per = 2048 / 4 = 512
    # one SM: 1 * 4096 < 8193, so no slab of one per block; past 1 * 8192 the streaming
    # slab 4096 (dense up to 4 * 8192 = 32768); one block however large the batch
    lim = limits_for_arch("sm_90", 1)
    assert (run_plan(8193, lim).code.capacity, run_plan(8193, lim).grid) == (4096, 1)
    assert (run_plan(32769, lim).code.capacity, run_plan(32769, lim).grid) == (8192, 1)
    assert (run_plan(32769, lim, True).code.capacity, run_plan(32769, lim, True).grid) \
        == (4096, 1)
    assert run_plan(2**24, lim).grid == 1
    # 2000 SMs: slab 1024 up to 2000 * 1024 = 2048000: 2000 slabs, at most 256 blocks (its
    # 256 threads): per = ceil(2000 / 256) = 8 (256 * 7 = 1792 < 2000), grid 2000 / 8 = 250
    lim = limits_for_arch("sm_90", 2000)
    p = run_plan(2048000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (1024, 256, 250)
    # slab 2048 up to 2000 * 2048 = 4096000: 2000 slabs, at most 512 blocks (its 512
    # threads): per = ceil(2000 / 512) = 4, grid = 2000 / 4 = 500
    p = run_plan(4096000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (2048, 512, 500)
    # slab 4096 up to 2000 * 4096 = 8192000: 2000 slabs, at most 512 blocks (its 512
    # threads): per 4, grid 500
    p = run_plan(8192000, lim)
    assert (p.code.capacity, p.threads, p.grid) == (4096, 512, 500)
    # 2**24 on 2000 SMs: 2048 slabs of 8192 > 2000, within 4 per SM: streaming slabs,
    # 4096 of them, at most 512 blocks -> per 8, grid 512
    p = run_plan(2**24, lim)
    assert (p.code.capacity, p.threads, p.grid) == (4096, 512, 512)
    # the plan's num_sms argument (the output's SM count) moves none of it
    for num_sms in (1, 78, 132, 4096):
        p = run_plan(2**24, limits_for_arch("sm_90", 78), num_sms=num_sms)
        assert (p.code.capacity, p.grid, p.num_sms) == (8192, 76, num_sms)


# (sm_count, [(batch, chunk, threads, slabs, grid)]) on hand-built sm_90 devices (1 KiB
# reserved, 48 KiB static: the bytes of each (chunk, threads) are those of sm_90:
# 1024 / 256 -> 5292 (5412), 2048 / 512 -> 9548 (9764), 4096 / 512 -> 17996 (18212),
# 8192 / 1024 -> 34956 (35364) B); a slab serves up to sm_count * slab;
# grid = ceil(slabs / per), per = ceil(slabs / min(slabs, sm_count, threads, 1024))
SLAB_BYTES = {(1024, 256): (5292, 5412), (2048, 256): (9516, 9636), (2048, 512): (9548, 9764),
              (4096, 512): (17996, 18212), (8192, 1024): (34956, 35364)}
DEVICE_SLAB_EDGES = [
    pytest.param(78, [
        (8193, 1024, 256, 9, 9),            # 8 * 1024 = 8192 < 8193
        # (varlen past 78 * 256 = 19968: slab 2048 at 256 threads)
        (79872, 1024, 256, 78, 78, (2048, 256, 39, 39)),  # 78 * 1024: one slab per SM
        (79873, 2048, 512, 40, 40, (2048, 256, 40, 40)),  # 39 * 2048 = 79872 < 79873
        (159744, 2048, 512, 78, 78, (2048, 256, 78, 78)),  # 78 * 2048
        (159745, 4096, 512, 40, 40),        # 39 * 4096 = 159744 < 159745
        (319488, 4096, 512, 78, 78),        # 78 * 4096
        (319489, 8192, 1024, 40, 40),       # 39 * 8192 = 319488 < 319489
        # 2048 slabs: per = ceil(2048 / 78) = 27 (78 * 26 = 2028 < 2048), 2048 / 27 -> 76
        (2**24, 8192, 1024, 2048, 76,
         # varlen streams: 4096 slabs, per = ceil(4096 / 78) = 53, 4096 / 53 -> 78
         (4096, 512, 4096, 78)),
    ], id="78-sms"),
    pytest.param(300, [
        (8193, 1024, 256, 9, 9),
        # 257 slabs of 1024 need 257 blocks but its 256 threads allow 256: per 2, grid
        # ceil(257 / 2) = 129
        # (varlen past 300 * 256 = 76800: slab 2048 at 256 threads, at most 256 blocks)
        (263168, 1024, 256, 257, 129, (2048, 256, 129, 129)),  # 257 * 1024 = 128.5 * 2048
        # 300 * 1024 = 307200: 300 slabs, per = ceil(300 / 256) = 2, grid 150
        (307200, 1024, 256, 300, 150, (2048, 256, 150, 150)),
        (307201, 2048, 512, 151, 151, (2048, 256, 151, 151)),  # 150 * 2048 < 307201
        # 300 * 2048: 300 <= 512 blocks (varlen: 256 at most, per 2, grid 150)
        (614400, 2048, 512, 300, 300, (2048, 256, 300, 150)),
        (614401, 4096, 512, 151, 151),      # 150 * 4096 = 614400 < 614401
        (1228800, 4096, 512, 300, 300),     # 300 * 4096
        (1228801, 8192, 1024, 151, 151),    # 150 * 8192 = 1228800 < 1228801
        # 2048 slabs: per = ceil(2048 / 300) = 7 (300 * 6 = 1800 < 2048), grid
        # ceil(2048 / 7) = 293 (7 * 292 = 2044 < 2048)
        (2**24, 8192, 1024, 2048, 293,
         # varlen streams: 4096 slabs, per = ceil(4096 / 300) = 14, 4096 / 14 -> 293
         (4096, 512, 4096, 293)),
    ], id="300-sms"),
    pytest.param(5, [
        # 5 * 1024 = 5120 and 5 * 2048 = 10240: 8193 takes slab 2048 (slab 1024 would
        # need 9 > 5 slabs): 4 * 2048 = 8192 < 8193 -> 5 slabs
        # (varlen: at 256 threads, past 5 * 256 = 1280)
        (8193, 2048, 512, 5, 5, (2048, 256, 5, 5)),
        (10240, 2048, 512, 5, 5, (2048, 256, 5, 5)),  # 5 * 2048
        (10241, 4096, 512, 3, 3),           # 2 * 4096 = 8192 < 10241 <= 12288
        (20480, 4096, 512, 5, 5),           # 5 * 4096
        (20481, 8192, 1024, 3, 3),          # 2 * 8192 = 16384 < 20481 <= 24576
        (2**24, 8192, 1024, 2048, 5,        # per = ceil(2048 / 5) = 410, 2048 / 410 -> 5
         (4096, 512, 4096, 5)),             # varlen: per 820, 4096 / 820 -> 5
    ], id="5-sms"),
]


@pytest.mark.parametrize("sm_count,rows", DEVICE_SLAB_EDGES)
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_slab_boundaries_follow_the_device_sm_count(sm_count, rows, varlen):
    lim = limits_for_arch("sm_90", sm_count)
    assert lim.sm_count == sm_count
    for batch, chunk, threads, slabs, grid, *own in rows:
        if varlen and own:  # varlen's plan differs there (register or streaming slabs)
            chunk, threads, slabs, grid = own[0]
        p = run_plan(batch, lim, varlen)
        assert (p.variant, p.code.capacity, p.threads, p.grid) \
            == ("chunked", chunk, threads, grid), batch
        assert p.smem_static_bytes == SLAB_BYTES[chunk, threads][varlen], batch
        assert p.smem_dynamic_bytes == 0, batch
        assert (f"{grid} cooperative block(s) over {slabs} slab(s) of {chunk} elements"
                in p.reason), (batch, p.reason)
        assert (p.code.capacity, p.threads, p.smem_static_bytes, p.grid) \
            == O.chunked(batch, lim, 1024, varlen), batch
        # the plan's own SM count moves nothing
        q = run_plan(batch, lim, varlen, num_sms=7)
        assert (q.code, q.grid) == (p.code, p.grid), batch


def test_next_n_and_num_sms_do_not_change_boundaries(sm90):
    for next_n in (1, 2, 3, 6):
        for num_sms in (1, 132, 4096):
            got = [(p.variant, p.code.capacity) for p in
                   (run_plan(b, sm90, False, next_n, num_sms)
                    for b in (8192, 8193, 56067, 56068, 135168, 135169, 270336, 270337,
                              540672, 540673))]
            assert got == [("static", 8192), ("chunked", 1024), ("chunked", 1024),
                           ("chunked", 1024), ("chunked", 1024), ("chunked", 2048),
                           ("chunked", 2048), ("chunked", 4096), ("chunked", 4096),
                           ("chunked", 8192)], (next_n, num_sms)


