"""GPU: every kernel variant bit-exact against the reference (the variant matrix).

Runs only where a CUDA GPU is present (marker ``gpu``); elsewhere each test is
skipped with the reason shown by ``pytest -ra``.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

import jitmeta
from jitmeta import envs
from jitmeta.jit import launcher as jit_launcher

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (none visible to torch here)"),
]

BATCHES = [1, 31, 32, 33, 1023, 1024, 4064, 4096, 8192, 65536, 270337, 2**20]
NUM_SMS = [1, 8, 132, 1024, 4096]
LENGTHS = ["zeros", "ones", "split_edges", "mixed", "huge_one"]
SEED = int(os.environ.get("JITMETA_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
print(f"[test_gpu_kernels] seed={SEED} (set JITMETA_TEST_SEED={SEED} to reproduce)")

# The largest batch each forced variant can take on an H200-class part (dynamic: the
# planner's varlen limit with the padded tile; the dense one is 56067).
VARIANT_MAX = {"static": 8192, "dynamic": 55970, "chunked": 2**24}


def make_lengths(kind: str, batch: int, next_n: int, gen: torch.Generator) -> torch.Tensor:
    shape = (batch, next_n)
    if kind == "zeros":
        return torch.zeros(shape, dtype=torch.int32)
    if kind == "ones":
        return torch.ones(shape, dtype=torch.int32)
    if kind == "split_edges":
        choices = torch.tensor([255, 256, 257, 511, 512, 513, 1], dtype=torch.int32)
        return choices[torch.randint(0, len(choices), shape, generator=gen)]
    if kind == "mixed":
        t = torch.randint(0, 20000, shape, generator=gen, dtype=torch.int32)
        t[torch.rand(shape, generator=gen) < 0.2] = 0
        return t
    if kind == "huge_one":
        t = torch.randint(0, 300, shape, generator=gen, dtype=torch.int32)
        t[torch.randint(0, batch, (1,), generator=gen)] = 131072
        return t
    raise ValueError(kind)


def make_indices(batch: int, gen: torch.Generator) -> torch.Tensor:
    """Runs of length 1..4 of request ids, ids shuffled (unsorted, some reused)."""
    runs = torch.randint(1, 5, (batch,), generator=gen)
    ids = torch.repeat_interleave(torch.arange(batch), runs)[:batch]
    perm = torch.randperm(batch, generator=gen)
    ids = perm[ids] % max(1, batch // 3 + 1)  # unsorted, non-adjacent repeats
    return ids.to(torch.int32)


def check(ctx: torch.Tensor, num_sms: int, idx, schedule: str, what: str) -> None:
    got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, num_sms, idx, schedule=schedule)
    want = jitmeta.reference_schedule(ctx, num_sms, idx, schedule=schedule)
    if not torch.equal(got, want):
        diff = (got != want).any(dim=1).nonzero().flatten()[:5].tolist()
        rows = [(r, got[r].tolist(), want[r].tolist()) for r in diff]
        pytest.fail(f"{what}: mismatch at rows (row, got, want) {rows}; seed={SEED}")


@pytest.mark.parametrize("schedule", ["smxx", "sm90", "sm100"])
@pytest.mark.parametrize("mode", ["next_n=1", "next_n=2", "next_n=3", "next_n=4",
                                  "next_n=5", "next_n=6", "varlen"])
@pytest.mark.parametrize("variant", ["static", "dynamic", "chunked"])
def test_variant_matrix(variant, mode, schedule):
    gen = torch.Generator().manual_seed(SEED)
    rng = random.Random(SEED)
    varlen = mode == "varlen"
    next_n = 1 if varlen else int(mode.split("=")[1])
    dev = torch.device("cuda")
    n_cases = 0
    with envs.override(JITMETA_VARIANT=variant):
        for batch in BATCHES:
            if batch > VARIANT_MAX[variant]:
                continue
            for kind in LENGTHS:
                ctx = make_lengths(kind, batch, next_n, gen).to(dev)
                idx = make_indices(batch, gen).to(dev) if varlen else None
                # all num_sms for small batches; a random subset for the big ones
                sms = NUM_SMS if batch <= 8192 else rng.sample(NUM_SMS, 2)
                for num_sms in sms:
                    check(ctx, num_sms, idx, schedule,
                          f"{variant} {mode} {schedule} batch={batch} lengths={kind} "
                          f"num_sms={num_sms}")
                    n_cases += 1
    assert n_cases > 0


@pytest.mark.parametrize("chunk", [32, 512, 4096])
def test_chunked_small_tiles(chunk):
    """Many slabs: carries (sums and varlen parities) cross slab boundaries often
    (JITMETA_CHUNK is a power of two from 32 to 65536)."""
    gen = torch.Generator().manual_seed(SEED + chunk)
    with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=chunk):
        for batch in (chunk - 1, chunk, chunk + 1, 3 * chunk + 7, 20000):
            for varlen in (False, True):
                ctx = make_lengths("mixed", batch, 1, gen).cuda()
                idx = make_indices(batch, gen).cuda() if varlen else None
                if varlen and batch > 100:  # one run spanning several slabs
                    idx[10:batch - 10] = 7
                for schedule in jitmeta.SCHEDULES:
                    check(ctx, 132, idx, schedule,
                          f"chunk={chunk} batch={batch} varlen={varlen} {schedule}")


def test_seed_scenario():
    """The seed scenario's prefill: batch 8192, all lengths 4096, two tokens per request."""
    ctx = torch.full((8192, 1), 4096, dtype=torch.int32, device="cuda")
    idx = (torch.arange(8192, device="cuda") // 2).to(torch.int32)
    for schedule in jitmeta.SCHEDULES:
        got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=idx,
                                                    schedule=schedule)
        assert torch.equal(got, jitmeta.reference_schedule(ctx, 132, idx,
                                                           schedule=schedule)), schedule


def test_batch_2p20_varlen_default_plan():
    gen = torch.Generator().manual_seed(SEED)
    ctx = make_lengths("mixed", 2**20, 1, gen).cuda()
    idx = make_indices(2**20, gen).cuda()
    for schedule in jitmeta.SCHEDULES:
        check(ctx, 132, idx, schedule, f"2^20 varlen {schedule}")


def test_batch_2p24_blocks_with_many_slabs():
    """2^24 tokens: 2048 slabs of 8192 over 128 cooperative blocks (16 each), so phase 2
    reloads the slabs that hold an SM start."""
    gen = torch.Generator().manual_seed(SEED)
    for next_n, varlen in ((2, False), (1, True)):
        ctx = make_lengths("mixed", 2**24, next_n, gen).cuda()
        idx = make_indices(2**24, gen).cuda() if varlen else None
        assert jitmeta.plan(2**24, next_n, varlen, 132).grid == 128
        for num_sms in (132, 4096):
            for schedule in ("smxx", "sm100"):
                check(ctx, num_sms, idx, schedule, f"2^24 next_n={next_n} "
                      f"varlen={varlen} num_sms={num_sms} {schedule}")


@pytest.mark.parametrize("variant", ["static", "dynamic", "chunked"])
def test_sm100_runs_and_64bit_work(variant):
    """sm100 edges on every variant: one run covering the whole batch, every token its
    own run, runs crossing slabs, and work sums past 2^32 (no uint32 wrap)."""
    gen = torch.Generator().manual_seed(SEED + 100)
    with envs.override(JITMETA_VARIANT=variant):
        for batch in (1, 32, 1000, 8192):
            if variant == "chunked":
                batch *= 9
            long = torch.full((batch, 1), 2**31 - 1, dtype=torch.int32)
            cases = {
                "one run": (make_lengths("mixed", batch, 1, gen),
                            torch.zeros(batch, dtype=torch.int32)),
                "every token alone": (make_lengths("split_edges", batch, 1, gen),
                                      torch.arange(batch, dtype=torch.int32)),
                "past 2^32": (long, (torch.arange(batch) // 7).to(torch.int32)),
            }
            for what, (ctx, idx) in cases.items():
                for num_sms in (1, 132, 4100):
                    check(ctx.cuda(), num_sms, idx.cuda(), "sm100",
                          f"sm100 {variant} {what} batch={batch} num_sms={num_sms}")
            dense = torch.full((batch, 3), 2**31 - 1, dtype=torch.int32).cuda()
            check(dense, 132, None, "sm100", f"sm100 {variant} dense past 2^32 b={batch}")


def test_chunked_calls_queued_back_to_back():
    """Chunked calls of different grids queued on one stream with no sync in between
    share the stream's workspace: each launch must tell its own slots by the epoch."""
    gen = torch.Generator().manual_seed(SEED)
    shapes = [(70000, False), (300000, True), (9000, False), (2**20, True), (270336, False)]
    inputs = []
    for batch, varlen in shapes:
        ctx = make_lengths("mixed", batch, 1, gen).cuda()
        idx = make_indices(batch, gen).cuda() if varlen else None
        inputs.append((ctx, idx, jitmeta.reference_schedule(ctx, 132, idx)))
    torch.cuda.synchronize()
    outs = [jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, idx)
            for _ in range(20) for ctx, idx, _ in inputs]
    # sm100 (a larger workspace slot) queued on the same stream between them
    mixed = [jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, idx, schedule="sm100")
             for ctx, idx, _ in inputs]
    torch.cuda.synchronize()
    for i, got in enumerate(outs):
        ctx, idx, want = inputs[i % len(inputs)]
        assert torch.equal(got, want), f"call {i} ({shapes[i % len(shapes)]}); seed={SEED}"
    for (ctx, idx, _), got in zip(inputs, mixed):
        assert torch.equal(got, jitmeta.reference_schedule(ctx, 132, idx, schedule="sm100"))


def test_chunked_with_a_capped_grid(monkeypatch):
    """What a process with fewer SMs gets after a refused cooperative launch (the launcher
    halves the grid): blocks take several slabs each, results unchanged."""
    gen = torch.Generator().manual_seed(SEED)
    for cap in (1, 5, 33):
        monkeypatch.setitem(jit_launcher._grid_caps, torch.cuda.current_device(), cap)
        assert jit_launcher.grid_cap(torch.cuda.current_device()) == cap
        for batch, varlen in ((70000, True), (300000, False)):
            ctx = make_lengths("mixed", batch, 1, gen).cuda()
            idx = make_indices(batch, gen).cuda() if varlen else None
            for schedule in jitmeta.SCHEDULES:
                check(ctx, 132, idx, schedule,
                      f"grid cap {cap} batch={batch} varlen={varlen} {schedule}")


def test_out_and_current_stream():
    gen = torch.Generator().manual_seed(SEED)
    ctx = make_lengths("mixed", 5000, 2, gen).cuda()
    out = torch.full((133, 2), -1, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        res = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, out=out)
    torch.cuda.current_stream().wait_stream(side)
    assert res is out
    assert torch.equal(out, jitmeta.reference_schedule(ctx, 132))


def test_bad_input_on_gpu_raises_not_faults():
    ctx = torch.ones(10, 1, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="indices"):
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, torch.zeros(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="out"):
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132,
                                              out=torch.empty(133, 2, dtype=torch.int32))
    torch.cuda.synchronize()


def test_value_checks_on_gpu_follow_the_knob():
    """On CUDA the values are checked (with a synchronization) only with
    JITMETA_CHECK_INPUTS=1; bad values then raise instead of launching."""
    big = 2**31 - 1
    neg = torch.tensor([[3], [-5], [7]], dtype=torch.int32, device="cuda")
    over = torch.tensor([[big], [big], [big]], dtype=torch.int32, device="cuda")
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        with pytest.raises(jitmeta.InputValueError, match="-5"):
            jitmeta.get_paged_mqa_logits_metadata(neg, 64, 132)
        with pytest.raises(jitmeta.InputValueError, match="4294967295"):
            jitmeta.get_paged_mqa_logits_metadata(over, 1, 132, split_kv=1)
        good = torch.tensor([[big], [big], [1]], dtype=torch.int32, device="cuda")
        got = jitmeta.get_paged_mqa_logits_metadata(good, 1, 132, split_kv=1)
        assert torch.equal(got, jitmeta.reference_schedule(good, 132, split_kv=1))
    with envs.override(JITMETA_CHECK_INPUTS="0"):
        jitmeta.get_paged_mqa_logits_metadata(neg, 64, 132)  # the caller's contract
    torch.cuda.synchronize()
