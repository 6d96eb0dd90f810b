"""The real CUDA kernels, emulated on the CPU, bit-exact against the reference.

No GPU: the rendered source (``render(plan.code)``) is compiled by g++ with the shim in
``tests/emulator`` and every block's threads run as OS threads (``__syncthreads`` and
warp shuffles as on a GPU). Each case is planned exactly as the library plans it
(``plan`` under ``envs.override``, sm_90 limits) and launched as the library's loaded call (``jitmeta.kernels.call``)
launches it. Small blocks (``JITMETA_THREADS``) and small tiles (``JITMETA_CHUNK``)
keep it fast and give the chunked variant many slabs, so sums and varlen parities
cross slab boundaries; a few cases run the library's default configurations.

Random inputs come from a fresh seed, printed and named in every failure; rerun with
``JITMETA_TEST_SEED=<seed> pytest tests/test_kernel_emulation.py``. Skipped (with the
reason shown by ``pytest -ra``) where there is no g++.
"""

from __future__ import annotations

import dataclasses
import random
import re
import sys

import pytest
import torch

import jitmeta
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.reference import varlen_atoms

from emulator import Case, EmulatorError, compiler, emulate, emulate_cases, render
from emulation_support import (INDEX_KINDS, INT32_MAX, SEED_NOTE, SPLIT_KV,
                               assert_mutant_caught, check_all, indices, lengths,
                               mismatches, mutate, plan_case, rngs)

pytestmark = pytest.mark.skipif(
    compiler() is None or not sys.platform.startswith("linux"),
    reason="the kernel emulator needs g++ (or $CXX) on Linux: it compiles the rendered "
           "CUDA source as C++ and runs blocks as pthreads")

LIMITS = limits_for_arch("sm_90")
U32_MAX = 2**32 - 1
LENGTH_KINDS = ("zeros", "ones", "edges", "mixed", "large", "huge_one")


# --- inputs --------------------------------------------------------------------------------

def total_units(ctx: torch.Tensor, idx: torch.Tensor | None, split_kv: int = SPLIT_KV
                ) -> int:
    """The kernel's grand total (kv splits x atoms), as the reference counts it."""
    if idx is None:
        next_n = ctx.shape[1]
        atoms = (next_n + 1) // 2 if next_n >= 2 else 1
        segs = (ctx[:, -1].to(torch.int64) + split_kv - 1) // split_kv
        return int(segs.sum()) * atoms
    lens = varlen_atoms(ctx[:, 0], idx)[1]
    return int(((lens + split_kv - 1) // split_kv).sum())


def fit_u32(ctx: torch.Tensor, idx: torch.Tensor | None, split_kv: int = SPLIT_KV
            ) -> torch.Tensor:
    """Halve the lengths until the total fits the kernel's uint32 (the API contract)."""
    while total_units(ctx, idx, split_kv) > U32_MAX:
        ctx = ctx // 2
    return ctx


def make_case(rng: random.Random, g: torch.Generator, variant: str | None, varlen: bool,
              schedule: str, batch: int, *, next_n: int = 1, threads: int | None = None,
              chunk: int | None = None, length_kind: str | None = None,
              index_kind: str | None = None, num_sms: int | None = None,
              misalign: int | None = None, split_kv: int = SPLIT_KV,
              sm_count: int | None = None) -> Case:
    length_kind = length_kind or rng.choice(LENGTH_KINDS)
    if sm_count is None and variant == "chunked":
        # few SMs: several slabs per block (phase 2 reloads some); 132: one each
        sm_count = rng.choice((1, 2, 3, 5, 132))
    idx = None
    if varlen:
        index_kind = index_kind or rng.choice(INDEX_KINDS)
        idx = indices(index_kind, batch, rng, g, slab=chunk or 100)
    ctx = fit_u32(lengths(length_kind, batch, next_n, g), idx, split_kv)
    if num_sms is None:  # 1, 3, an H100's 132, or more SMs than work items
        atoms = (next_n + 1) // 2 if next_n >= 2 else 1
        num_sms = rng.choice((1, 3, 132, batch * atoms + rng.randint(1, 40)))
    if misalign is None:  # a sliced input tensor is only 4-byte aligned
        misalign = rng.choice((0, 0, 0, 4, 8, 12))
    p = plan_case(variant, batch, next_n, varlen, num_sms, schedule, threads, chunk,
                  split_kv, sm_count)
    label = (f"{p.code.name} batch={batch} next_n={next_n} num_sms={num_sms} "
             f"lengths={length_kind}" + (f" indices={index_kind}" if varlen else "") +
             f" misalign={misalign} grid={p.grid}")
    return Case(p, ctx, idx, num_sms, misalign=misalign, seed=rng.getrandbits(32),
                label=label)


# --- the variant matrix ----------------------------------------------------------------------

STATIC_THREADS = (32, 64, 128, 256)
CHUNKED = ((32, 32), (64, 32), (32, 64), (64, 100), (128, 100), (256, 256))
# Thread-slabs per chunked test (cost ~ 100 us each on one CPU); keeps the file fast.
CHUNKED_BUDGET = 40_000


def batch_choices(rng: random.Random, threads: int, top: int) -> list[int]:
    edges = [1, 2, 3, 31, 32, 33, threads - 1, threads, threads + 1, 255, 256, 257, top - 1,
             top]
    return [b for b in edges if 1 <= b <= top] + [rng.randint(1, top) for _ in range(6)]


def matrix_cases(variant: str, mode: str, schedule: str) -> list[Case]:
    rng, g = rngs("matrix", variant, mode, schedule)
    varlen = mode == "varlen"
    cases = []

    def add(batch, **kw):
        next_n = 1 if varlen else 1 + len(cases) % 4  # 1..4 in turn
        cases.append(make_case(rng, g, variant, varlen, schedule, batch, next_n=next_n,
                               length_kind=LENGTH_KINDS[len(cases) % len(LENGTH_KINDS)],
                               **kw))

    if variant in ("static", "dynamic"):
        for threads in STATIC_THREADS:
            for b in batch_choices(rng, threads, 1024):
                add(b, threads=threads)
        # bigger static buckets (2048, 4096) and dynamic tiles up to a few thousand
        for b in (1025, rng.randint(1026, 2048), 2049, rng.randint(2050, 4096), 4096):
            add(b, threads=rng.choice(STATIC_THREADS))
    else:
        spent = 0
        configs = list(CHUNKED)
        rng.shuffle(configs)
        for threads, chunk in configs:
            edges = [1, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 7]
            rand = [rng.randint(1, 40 * chunk) for _ in range(4)]
            for b in edges + rand:
                cost = -(-b // chunk) * threads
                if spent + cost > CHUNKED_BUDGET and b not in edges:
                    continue
                spent += cost
                add(b, threads=threads, chunk=chunk)
    return cases


@pytest.mark.parametrize("schedule", ["smxx", "sm90"])
@pytest.mark.parametrize("mode", ["dense", "varlen"])
@pytest.mark.parametrize("variant", ["static", "dynamic", "chunked"])
def test_kernels_match_reference(variant, mode, schedule):
    cases = matrix_cases(variant, mode, schedule)
    assert all(c.plan.variant == variant for c in cases)
    check_all(cases, f"{variant} {mode} {schedule}")


def test_whole_batch_search_lengths():
    """The whole-batch search takes eight-way steps while its range holds 8 keys or
    more, then halves: batches around those lengths (7..9, 15..17, 63..65, 511..513),
    with an SM start at most keys (more SMs than work units) or a few, every format,
    dense and varlen, static and dynamic."""
    rng, g = rngs("search lengths")
    cases = []
    for batch in (7, 8, 9, 15, 16, 17, 63, 64, 65, 511, 512, 513):
        for variant in ("static", "dynamic"):
            varlen = rng.random() < 0.5
            schedule = rng.choice(("smxx", "sm90", "sm100"))
            case = make_case(rng, g, variant, varlen, schedule, batch, threads=64,
                             length_kind=rng.choice(("edges", "mixed", "zeros")))
            cases.append(case)
            # as many SMs as work units and more: a start in (nearly) every element
            many = dataclasses.replace(case, num_sms=min(4000, 3 * batch + 7),
                                       seed=rng.getrandbits(32),
                                       label=f"{case.label}, {min(4000, 3 * batch + 7)} SMs")
            cases.append(dataclasses.replace(
                many, plan=plan_case(variant, batch, 1, varlen, many.num_sms, schedule, 64,
                                     None, SPLIT_KV, None)))
    check_all(cases, "whole-batch search lengths")


def test_chunked_carries_across_many_slabs():
    """Runs of equal indices spanning several slabs, starting at every offset parity."""
    rng, g = rngs("carries")
    cases = []
    for threads, chunk in ((32, 32), (64, 64), (32, 100)):
        for schedule in ("smxx", "sm90"):
            for start in (0, 1, chunk - 2, chunk - 1, chunk, chunk + 1):
                batch = 6 * chunk + rng.randint(0, chunk)
                idx = torch.arange(batch, dtype=torch.int32)
                length = 3 * chunk + rng.randint(0, 3)  # one long run from `start`
                idx[start:start + length] = -1
                ctx = fit_u32(lengths(rng.choice(("mixed", "edges")), batch, 1, g), idx)
                num_sms = rng.choice((1, 3, 132, batch + 5))
                p = plan_case("chunked", batch, 1, True, num_sms, schedule, threads, chunk)
                cases.append(Case(p, ctx, idx, num_sms, seed=rng.getrandbits(32),
                                  label=f"{p.code.name} batch={batch} run=[{start}, "
                                        f"{start + length}) num_sms={num_sms}"))
            for _ in range(2):  # dense sums over many slabs
                batch = rng.randint(10 * chunk, 30 * chunk)
                cases.append(make_case(rng, g, "chunked", False, schedule, batch,
                                       next_n=rng.randint(1, 4), threads=threads,
                                       chunk=chunk))
    check_all(cases, "chunked carries")


def with_grid(case: Case, grid: int, rng: random.Random, **changes) -> Case:
    """``case`` run with ``grid`` blocks instead of its plan's (the launcher halves a
    refused cooperative grid), a fresh seed, and ``changes``."""
    changes.setdefault("label", f"{case.label} run with grid {grid}")
    return dataclasses.replace(case, plan=dataclasses.replace(case.plan, grid=grid),
                               seed=rng.getrandbits(32), **changes)


def test_chunked_any_grid_is_exact():
    """The launcher may run a chunked plan with fewer blocks than planned (a process
    that sees fewer SMs: jit.launcher halves a refused cooperative grid). Every grid from
    one block up must give the same rows: blocks then take several slabs each."""
    rng, g = rngs("grids")
    cases = []
    for varlen in (False, True):
        for schedule in ("smxx", "sm90"):
            batch = rng.randint(300, 700)
            base = make_case(rng, g, "chunked", varlen, schedule, batch,
                             next_n=1 if varlen else rng.randint(1, 4), threads=64,
                             chunk=32, sm_count=132)
            assert base.plan.grid >= 10, base.label
            for grid in sorted({1, 2, 3, base.plan.grid // 2, base.plan.grid - 1}):
                cases.append(with_grid(base, grid, rng))
    # such grids leave blocks without a slab (ceil(slabs / grid) each): they only take
    # part in the exchange
    slabs = [-(-c.plan.batch // 32) for c in cases]
    assert any((c.plan.grid - 1) * -(-n // c.plan.grid) >= n for c, n in zip(cases, slabs))
    check_all(cases, "chunked plans run with smaller grids")


def test_chunked_exchange_past_one_warp_of_blocks():
    """The exchange scans one slot per block, in warp 0 of every block for grids of up
    to 32 blocks and with a block scan past that; varlen summaries (4 fields or more)
    past 32 blocks take the counted exchange instead, where the block counted in last
    scans the slots and hands each block its carry and the total: grids on either side
    of 32 blocks, every format, dense and varlen."""
    rng, g = rngs("exchange grids")
    cases = []
    for varlen in (False, True):
        for schedule in ("smxx", "sm90", "sm100"):
            batch = rng.randint(40 * 32, 64 * 32)
            # a few SMs or an H100's, and work spread over the batch: SM starts inside
            # the slabs, so that the mutants below show (with one SM, more SMs than
            # work, no work at all or all of it in one token, a wrong carry or total
            # moves no row)
            base = make_case(rng, g, "chunked", varlen, schedule, batch,
                             next_n=1 if varlen else rng.randint(1, 3), threads=64,
                             chunk=32, sm_count=132, num_sms=rng.choice((3, 132)),
                             length_kind=rng.choice(("ones", "edges", "mixed", "large")))
            assert base.plan.grid > 33, base.label
            for grid in (31, 32, 33, base.plan.grid):
                cases.append(with_grid(base, grid, rng))
    check_all(cases, "chunked exchange of up to 32 blocks and more")
    own = (r"if \(threadIdx\.x == g\) sc\.broadcast\[0\] = before;",
           "if (threadIdx.x == g) sc.broadcast[0] = S::compose(before, slot);")
    for name, edits, varlen, past in (
            ("block carry includes its own blocks (grids past 32, block scan)", [own], False,
             True),
            ("the carry handed back includes the block's own (counted)",
             [(r"publish<kResultStride>\(res, before, ",
               "publish<kResultStride>(res, S::compose(before, slot), ")], True, True),
            ("the last block's carry includes its own (counted)", [own], True, True),
            # (a total too small would do as well, but one below num_sms makes the even
            # split's share 0, and the emulator faults on the division the GPU would not)
            ("the total handed back adds the block's carry (counted)",
             [(r"publish<kResultStride>\(res \+ kTotalOffset, all, ",
               "publish<kResultStride>(res + kTotalOffset, S::compose(before, all), ")],
             True, True),
            ("block carry includes its own blocks (grids up to 32)",
             [(r"if \(lane == g\) sc\.broadcast\[0\] = exc;", "if (lane == g) sc.broadcast[0] = inc;")],
             None, False),
            ("the grand total stops at block 15 (grids up to 32)",
             [(r"const S tot = inc\.shfl\(31\);", "const S tot = inc.shfl(15);")], None, False)):
        broken = [dataclasses.replace(c, source=mutate(render(c.plan.code), edits))
                  for c in cases if (c.plan.grid > 32) == past
                  and varlen in (None, c.plan.code.varlen)]
        assert broken, name
        assert_mutant_caught(name, broken)


def test_chunked_calls_reuse_the_workspace():
    """Calls made one after another on one workspace (as on a stream) tell their own
    slots by the epoch, and in the counted exchange (varlen past 32 blocks) find the
    arrival count back at 0: three
    calls of grids on either side of 32 blocks, every format, dense and varlen. Without
    the count's reset the second call never sees its last block arrive (the kernel's
    spin limit traps)."""
    rng, g = rngs("repeated calls")
    fast = [(r"kSpinLimit = 1u << 24;", "kSpinLimit = 1u << 16;")]  # trap sooner
    cases = []
    for varlen in (False, True):
        for schedule in ("smxx", "sm100"):
            base = make_case(rng, g, "chunked", varlen, schedule, rng.randint(40 * 32, 64 * 32),
                             threads=64, chunk=32, sm_count=132)
            for grid in (rng.randint(2, 32), base.plan.grid):
                cases.append(with_grid(base, grid, rng, calls=3,
                                       source=mutate(render(base.plan.code), fast)))
    check_all(cases, "three calls on one workspace")
    for case in cases:
        if case.plan.grid <= 32 or not case.plan.code.varlen:  # not counted
            continue
        broken = mutate(case.source, [(r"static_cast<volatile u32\*>\(ws\)\[kCountWord\] = 0u;\n", "")])
        with pytest.raises(EmulatorError, match="__trap"):
            emulate_cases([dataclasses.replace(case, source=broken)])


def test_block_without_slab_reads_the_epoch_before_it_publishes(monkeypatch):
    """A grid halved after a refused cooperative launch can leave blocks without a slab.
    On a GPU such a block's thread 0 may run far ahead of its other warps; the
    emulator's lagging blocks (JITMETA_EMU_LAG=1) hold every thread but thread 0 of a
    block whose thread 0 polls first, until the lower blocks have returned. A block that
    published its slot before all its threads had read the epoch would then wait for a
    tag that never comes (the kernel's spin limit traps); its barrier prevents that."""
    monkeypatch.setenv("JITMETA_EMU_LAG", "1")
    rng, g = rngs("lagging blocks")
    fast = [(r"kSpinLimit = 1u << 24;", "kSpinLimit = 1u << 16;")]  # trap sooner
    cases = []
    for varlen in (False, True):
        for schedule in ("smxx", "sm100"):
            base = make_case(rng, g, "chunked", varlen, schedule, 9 * 32 - rng.randint(0, 31),
                             threads=64, chunk=32, sm_count=132)
            # 9 slabs on 4 blocks, ceil(9 / 4) = 3 each: block 3 has none
            cases.append(with_grid(base, 4, rng, source=mutate(render(base.plan.code), fast)))
    check_all(cases, "a block without a slab, lagging")
    for case in cases:
        broken = mutate(case.source, [(r"if \(j0 == j1\) __syncthreads\(\);\n", "")])
        with pytest.raises(EmulatorError, match="__trap"):
            emulate_cases([dataclasses.replace(case, source=broken)])


def test_chunked_blocks_with_one_to_five_slabs():
    """Each block taking 1..5 slabs (one block: the grid of a chunked plan run with
    fewer blocks, or two), with a short last slab or a full one, next_n 1..3 and varlen,
    every format, lengths 16-byte aligned or not, slabs of half, 4 and 8 elements
    per thread: the cases a change to how phase 1 loads and sums its slabs must get right."""
    rng, g = rngs("slabs per block")
    cases = []
    for threads, chunk in ((64, 32), (32, 128), (32, 256)):
        for varlen, next_n in ((False, 1), (False, 2), (False, 3), (True, 1)):
            for slabs in range(1, 6):
                short = rng.randint(1, chunk - 1) if slabs % 2 == 0 else 0
                misalign = 12 if (slabs + next_n) % 3 == 0 else 0
                batch = slabs * chunk - short
                base = make_case(rng, g, "chunked", varlen,
                                 rng.choice(("smxx", "sm90", "sm100")), batch, next_n=next_n,
                                 threads=threads, chunk=chunk, sm_count=132,
                                 misalign=misalign)
                for grid in (1, 2):
                    cases.append(with_grid(base, grid, rng))
    check_all(cases, "chunked blocks of 1..5 slabs")


def test_chunked_register_slabs():
    """Slabs of 8 elements per thread that are not their block's last are summed in
    registers (16-byte loads; varlen: neighbouring tokens by shuffles) when the inputs
    are 16-byte aligned and, dense, next_n is 1, else stored and scanned: varlen runs
    ending and starting at thread, warp and slab edges, dense next_n 1..3, every
    format, 1..7 slabs per block, aligned or not, and one block of 40..70 slabs (groups
    of slabs composed in turn, and their summaries taken 32 at a time in phase 2)."""
    rng, g = rngs("register slabs")
    cases = []
    for threads in (32, 64):
        chunk = 8 * threads
        for schedule in ("smxx", "sm90", "sm100"):
            for run in (1, 2, 7, 8, 9, 31, 32, 33, 2 * threads + 1, chunk, 0):
                slabs = rng.randint(2, 7)
                batch = slabs * chunk - rng.choice((0, 0, rng.randint(1, chunk - 1)))
                offset = rng.randint(0, max(1, run) - 1)
                kind = rng.choice(INDEX_KINDS)
                idx = (indices(kind, batch, rng, g, slab=chunk) if run == 0 else
                       ((torch.arange(batch) + offset) // run).to(torch.int32))
                ctx = fit_u32(lengths(rng.choice(("mixed", "edges", "zeros")), batch, 1, g),
                              idx)
                num_sms = rng.choice((1, 3, 132, batch + 5))
                p = plan_case("chunked", batch, 1, True, num_sms, schedule, threads, chunk,
                              sm_count=132)
                for grid in (1, 2, 3):
                    misalign = rng.choice((0, 0, 4, 12))
                    cases.append(Case(dataclasses.replace(p, grid=grid), ctx, idx, num_sms,
                                      misalign=misalign, seed=rng.getrandbits(32),
                                      label=f"{p.code.name} batch={batch} runs of "
                                            f"{run or kind} from {offset} grid={grid} "
                                            f"num_sms={num_sms} misalign={misalign}"))
        for schedule in ("smxx", "sm90", "sm100"):  # dense: next_n 1 and 2 (3: stored)
            for next_n in (1, 2, 3):
                slabs = rng.randint(2, 7)
                batch = slabs * chunk - rng.choice((0, rng.randint(1, chunk - 1)))
                base = make_case(rng, g, "chunked", False, schedule, batch, next_n=next_n,
                                 threads=threads, chunk=chunk, sm_count=132)
                for grid in (1, 2, 3):
                    misalign = rng.choice((0, 0, 4, 12))
                    cases.append(with_grid(base, grid, rng, misalign=misalign,
                                           label=f"{base.label} grid={grid} misalign={misalign}"))
    # one block of several groups of slabs (phase 2 takes their summaries 32 at a time):
    # in registers, and stored (misaligned; dense next_n 2)
    for schedule in ("smxx", "sm90", "sm100"):
        for varlen, next_n, misalign in ((False, 1, 0), (True, 1, 0), (False, 2, 0),
                                         (True, 1, 4)):
            batch = rng.randint(40, 70) * 256 - rng.randint(0, 255)
            base = make_case(rng, g, "chunked", varlen, schedule, batch, next_n=next_n,
                             threads=32, chunk=256, sm_count=132, misalign=misalign,
                             index_kind="runs")
            cases.append(dataclasses.replace(
                base, plan=dataclasses.replace(base.plan, grid=1),
                label=f"{base.label} grid=1 ({-(-batch // 256)} slabs)"))
    check_all(cases, "register slabs")


def static_register_cases(rng: random.Random, g: torch.Generator, threads: int,
                          schedule: str) -> list[Case]:
    """Static tiles of 8 elements per thread (read into registers): batches that fill
    the tile, end a thread's 8 exactly or inside them; varlen runs ending and starting
    at thread and warp edges; dense next_n 1..3; aligned or not."""
    cap = 8 * threads
    batches = (cap, cap - 1, cap - 8, cap - 9, cap // 2 + 1, rng.randint(cap // 2 + 2, cap))
    cases = []
    for k, batch in enumerate(batches):
        misalign = (0, 4, 0, 12, 0, 8)[k]
        for run in (1, 2, 7, 8, 9, 33, 0):
            offset = rng.randint(0, max(1, run) - 1)
            kind = rng.choice(INDEX_KINDS)
            idx = (indices(kind, batch, rng, g) if run == 0 else
                   ((torch.arange(batch) + offset) // run).to(torch.int32))
            ctx = fit_u32(lengths(rng.choice(("mixed", "edges", "zeros")), batch, 1, g), idx)
            num_sms = rng.choice((1, 3, 132, batch + 5))
            p = plan_case("static", batch, 1, True, num_sms, schedule, threads)
            cases.append(Case(p, ctx, idx, num_sms, misalign=misalign,
                              seed=rng.getrandbits(32),
                              label=f"{p.code.name} batch={batch} runs of {run or kind} "
                                    f"from {offset} num_sms={num_sms} misalign={misalign}"))
        for next_n in (1, 2, 3):
            cases.append(make_case(rng, g, "static", False, schedule, batch, next_n=next_n,
                                   threads=threads, misalign=misalign))
    if schedule == "sm100":  # a total of 2^31 or more: the rows are walked, not searched
        batch = rng.choice(batches)
        idx = indices(rng.choice(INDEX_KINDS), batch, rng, g)
        ctx = torch.full((batch, 1), INT32_MAX, dtype=torch.int32)
        num_sms = rng.choice((132, batch + 5))
        p = plan_case("static", batch, 1, True, num_sms, schedule, threads)
        cases.append(Case(p, ctx, idx, num_sms, seed=rng.getrandbits(32),
                          label=f"{p.code.name} batch={batch} num_sms={num_sms} total past "
                                "2^31"))
    assert all(c.plan.code.capacity == cap for c in cases), [c.label for c in cases]
    return cases


def test_static_register_tiles():
    """One block holding the whole batch, 8 elements per thread: read into registers
    when the inputs are 16-byte aligned and next_n is 1 (16-byte loads; one load per
    element in the thread holding the batch's end), else loaded by the block into the
    tile and scanned there; every format."""
    rng, g = rngs("static register tiles")
    cases = []
    for threads in (128, 256):  # tiles of 1024 and 2048 elements (the smallest buckets)
        for schedule in ("smxx", "sm90", "sm100"):
            cases += static_register_cases(rng, g, threads, schedule)
    check_all(cases, "static register tiles")


STATIC_REGISTER_MUTANTS = [
    ("words past the batch count as elements",
     [(r"if \(e0 \+ k >= batch\) w\[k\] = VARLEN \? kBoundary : 0u;", "")]),
    ("a slice's last token never sees the next slice",
     [(r"t\.after = VARLEN \? w\[8\] : 0u;", "t.after = VARLEN ? kBoundary : 0u;")]),
    ("the keys of a register slice take each word from the next element",
     [(r"\[&w\]\(u32 k\) \{ return w\[k\]; \}", "[&w](u32 k) { return w[k + 1u]; }")]),
    ("the thread holding the batch end reads its first length 8 times",
     [(r"const u32 e = min\(e0 \+ k, top\);", "const u32 e = min(e0, top);")]),
    ("the halo of a full tile is not written",
     [(r"if \(i0 \+ 8u == n && threadIdx\.x \+ 1u == THREADS\) tile\[pad\(n\)\] = w\[8\];", "")]),
]


@pytest.mark.parametrize("name,edits", STATIC_REGISTER_MUTANTS,
                         ids=[m[0] for m in STATIC_REGISTER_MUTANTS])
def test_broken_static_register_tile_is_caught(name, edits):
    """Static register tiles of 128 and 256 threads, every format; plus "sm100" tiles
    whose total reaches 2^31 (their rows are walked over the tile's words and halo)."""
    rng, g = rngs("static register mutant", name)
    cases = []
    for threads, schedule in ((128, "smxx"), (256, "sm90"), (128, "sm100")):
        cap = 8 * threads
        # the random batch ends 2-7 elements into its last thread, so the thread holding
        # the batch end loads element by element (a partial thread of one element would not)
        ragged = rng.randint(cap // 16 + 1, cap // 8 - 1) * 8 + rng.randint(2, 7)
        for batch, misalign in ((cap, 0), (cap - 9, 4), (ragged, 0)):
            for run in (2, 9, 0):  # runs crossing slices at every parity; random runs
                idx = (indices("runs", batch, rng, g) if run == 0 else
                       (torch.arange(batch) // run).to(torch.int32))
                ctx = fit_u32(lengths("mixed", batch, 1, g), idx)
                num_sms = rng.choice((132, batch + 5))
                p = plan_case("static", batch, 1, True, num_sms, schedule, threads)
                cases.append(Case(p, ctx, idx, num_sms, misalign=misalign,
                                  seed=rng.getrandbits(32),
                                  label=f"{p.code.name} batch={batch} runs of {run or 'any'}"
                                        f" num_sms={num_sms} misalign={misalign}"))
            for next_n in (1, 2):
                cases.append(make_case(rng, g, "static", False, schedule, batch, next_n=next_n,
                                       threads=threads, misalign=misalign,
                                       length_kind="mixed"))
    # full tiles of one-token runs of 2^23 kv splits each: the last run ends at the halo,
    # which the mutant leaves as garbage (a boundary bit by chance: 8 garbage seeds)
    for threads in (128, 256) * 4:
        batch = 8 * threads
        idx = torch.arange(batch, dtype=torch.int32)
        ctx = torch.full((batch, 1), INT32_MAX, dtype=torch.int32)
        num_sms = batch + rng.randint(0, 9)  # an SM starts in every run, the last too
        p = plan_case("static", batch, 1, True, num_sms, "sm100", threads)
        cases.append(Case(p, ctx, idx, num_sms, misalign=0, seed=rng.getrandbits(32),
                          label=f"{p.code.name} batch={batch} num_sms={num_sms} total past "
                                "2^31"))
    broken = [dataclasses.replace(c, source=mutate(render(c.plan.code), edits)) for c in cases]
    if any(c.source is None for c in broken):
        pytest.fail(f"the kernel source no longer contains the code mutant '{name}' edits "
                    f"({edits[0][0]!r}): update STATIC_REGISTER_MUTANTS")
    check_all(cases, f"unbroken ({name})")
    assert_mutant_caught(name, broken)


def test_library_default_configurations():
    """The block sizes and tiles the planner picks by itself (no JITMETA_THREADS/CHUNK)."""
    rng, g = rngs("defaults")
    cases = []
    for varlen in (False, True):
        schedule = rng.choice(("smxx", "sm90"))
        for variant, batch in (("static", rng.randint(1, 1024)), ("static", 3000),
                               ("dynamic", rng.randint(1, 5000)),
                               ("chunked", rng.randint(8193, 20000))):
            cases.append(make_case(rng, g, variant, varlen, schedule, batch,
                                   next_n=1 if varlen else rng.randint(1, 4)))
    # what an unforced plan picks for a mid-size batch
    cases.append(make_case(rng, g, None, True, "smxx", 1000))
    assert {c.plan.threads for c in cases} >= {256, 1024}, [c.plan.threads for c in cases]
    check_all(cases, "default configurations")


def test_1024_threads():
    rng, g = rngs("1024")
    cases = []
    for varlen in (False, True):
        for variant, batch, chunk in (("static", rng.randint(900, 1024), None),
                                      ("static", rng.randint(2049, 4096), None),
                                      ("dynamic", rng.randint(1025, 3000), None),
                                      ("chunked", rng.randint(2500, 3000), 1024)):
            cases.append(make_case(rng, g, variant, varlen, rng.choice(("smxx", "sm90")),
                                   batch, next_n=1 if varlen else rng.randint(1, 4),
                                   threads=1024, chunk=chunk))
    check_all(cases, "1024 threads")


def test_other_split_kv():
    """split_kv is baked into the kernel: a few other values."""
    rng, g = rngs("split_kv")
    cases = []
    for split_kv in (64, 128, 512, 1024):
        for variant in ("static", "dynamic", "chunked"):
            for varlen in (False, True):
                cases.append(make_case(rng, g, variant, varlen, rng.choice(("smxx", "sm90")),
                                       rng.randint(1, 700), threads=rng.choice((32, 64)),
                                       next_n=1 if varlen else rng.randint(1, 4),
                                       chunk=rng.choice((32, 64)), split_kv=split_kv))
    check_all(cases, "other split_kv")


def test_uint32_total_edge():
    """Totals just below 2^32 kv splits (the contract's limit): uint32 arithmetic."""
    rng, g = rngs("u32")
    cases = []
    for variant in ("static", "dynamic", "chunked"):
        for next_n, batch in ((1, 511), (3, 255), (4, 255)):
            ctx = torch.full((batch, next_n), INT32_MAX, dtype=torch.int32)
            assert 2**32 - 2**25 < total_units(ctx, None) <= U32_MAX
            num_sms = rng.choice((1, 3, 132, 1000))
            p = plan_case(variant, batch, next_n, False, num_sms, rng.choice(("smxx", "sm90")),
                          64, 32 if variant == "chunked" else None)
            cases.append(Case(p, ctx, None, num_sms, label=f"{p.code.name} u32 edge "
                              f"batch={batch} next_n={next_n} num_sms={num_sms}"))
        idx = (torch.arange(1022) // 2).to(torch.int32)  # 511 atoms of INT32_MAX
        ctx = torch.full((1022, 1), INT32_MAX, dtype=torch.int32)
        p = plan_case(variant, 1022, 1, True, 132, "smxx", 64,
                      32 if variant == "chunked" else None)
        cases.append(Case(p, ctx, idx, 132, label=f"{p.code.name} u32 edge varlen"))
    check_all(cases, "uint32 edge")


# --- the emulator can fail: broken kernels ------------------------------------------------

# (name, [(pattern, replacement), ...] tried in order, variants, modes). Each is a real
# bug. (Flipping `s < r ? s : r` to `s <= r` would not be: at s == r both give r.)
MUTANTS = [
    ("a unit also takes the SM starting at its end",
     [(r"return x < hi;", "return x <= hi;")],
     ("chunked",), ("dense", "varlen")),
    ("closed-form SM search skips an SM among the wide ones",
     [(r"return a \+ \(x - narrow - 1u\) / \(q \+ 1u\) \+ 1u;",
       "return a + (x - narrow - 1u) / (q + 1u) + 2u;")],
     ("static", "chunked"), ("dense", "varlen")),
    ("closed-form SM search skips an SM before the wide ones (sm90)",
     [(r"if \(x <= narrow\) return \(x - 1u\) / q \+ 1u;",
       "if (x <= narrow) return (x - 1u) / q + 2u;")],
     ("static", "chunked"), ("dense", "varlen")),
    ("closed-form SM search skips an SM after the wide ones (smxx)",
     [(r"return a \+ r \+ \(x - wide - 1u\) / q \+ 1u;",
       "return a + r + (x - wide - 1u) / q + 2u;")],
     ("static", "chunked"), ("dense", "varlen")),
    ("sm90 gives the remainder to the first SMs",
     [(r"return sms\.wide_last \? sms\.n - r : 0u;", "return 0u;")],
     ("static", "chunked"), ("dense", "varlen")),
    ("an SM start counts the wide SMs from SM 0",
     [(r"const u32 d = s > a \? s - a : 0u;", "const u32 d = s;")],
     ("static", "chunked"), ("dense", "varlen")),
    ("whole-batch search picks the item ending at the start",
     [(r"if \(\((tile\[pad\(mid\)\] & F::kKeyMask)\) > x\)", r"if ((\1) >= x)")],
     ("static", "dynamic"), ("dense", "varlen")),
    ("whole-batch eight-way search keeps the eighth ending at the start",
     [(r"& F::kKeyMask\) <= x \? 1u : 0u;", "& F::kKeyMask) < x ? 1u : 0u;")],
     ("static", "dynamic"), ("dense", "varlen")),
    # (it keeps the range ordered: a mutant that crosses its ends reads past the tile
    # and faults, which the check counts as neither caught nor passed)
    ("whole-batch eight-way search skips its first probe",
     [(r"for \(u32 j = 1; j < 8u; \+\+j\)\n", "for (u32 j = 2; j < 8u; ++j)\n")],
     ("static", "dynamic"), ("dense", "varlen")),
    ("block carry includes its own blocks",
     [(r"sc\.broadcast\[0\] = before;", "sc.broadcast[0] = S::compose(before, slot);"),
      (r"if \(lane == g\) sc\.broadcast\[0\] = exc;", "if (lane == g) sc.broadcast[0] = inc;")],
     ("chunked",), ("dense", "varlen")),
    ("slice summary assumes parity 0 coming in",
     [(r"identity\(\) \{ return \{0u, 0u, 0u, 1u\}; \}", "identity() { return {0u, 0u, 0u, 0u}; }")],
     ("static", "chunked"), ("varlen",)),
    ("varlen halo word never loaded",
     [(r"tile\[pad\(n\)\] = e < batch \?", "if (false) tile[pad(n)] = e < batch ?")],
     ("static", "dynamic", "chunked"), ("varlen",)),
    ("atoms rounded down", [(r"\(next_n \+ 1\) / 2", "next_n / 2")],
     ("static", "chunked"), ("dense",)),
    # (caught on every run: a block that does not wait reads every lower block's slot
    # unpublished, see test_reads_that_do_not_wait_are_deterministic)
    ("blocks do not wait for each other", [(r"if \(ready\) return v;", "return v;")],
     ("chunked",), ("dense", "varlen")),

    ("a slab that is not resident is not reloaded",
     [(r"__syncthreads\(\);  // every thread is done with the slab in the tile\n(\s*)"
       r"load_tile\(tile, ctx, idx, lo, n, batch, next_n, mult\);", "__syncthreads();")],
     ("chunked",), ("dense", "varlen")),
    ("phase 2 drops the slabs before a reloaded one in its group",
     [(r"const S pre = S::compose\(c, warp_exclusive\(inc\)\);", "const S pre = c;")],
     ("chunked",), ("dense", "varlen")),
]


@pytest.mark.parametrize("name,edits,variants,modes", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_broken_kernel_is_caught(name, edits, variants, modes):
    rng, g = rngs("mutant", name)
    cases = []
    for variant in variants:
        for mode in modes:
            varlen = mode == "varlen"
            for i in range(7):
                schedule = ("smxx", "sm90")[i % 2]
                batch = rng.choice((rng.randint(1, 300), rng.randint(100, 700)))
                kind = ("edges", "mixed", "zeros", "huge_one")[i % 4]
                if i == 6:  # always one plain case: many SM starts, each in its own
                    batch, kind = rng.randint(150, 300), "mixed"  # request, 132 SMs
                case = make_case(rng, g, variant, varlen, schedule, batch,
                                 next_n=1 if varlen else 1 + i % 4, threads=64,
                                 chunk=32 if variant == "chunked" else None,
                                 length_kind=kind, index_kind=("runs", "long")[i % 2],
                                 # one request holding most of 132 SMs: the row queue
                                 num_sms=132 if kind == "huge_one" or i == 6 else None)
                broken = mutate(render(case.plan.code), edits)
                if broken is None:  # a mutant that no longer applies tests nothing
                    pytest.fail(f"the kernel source no longer contains the code mutant "
                                f"'{name}' edits ({edits[0][0]!r}): update MUTANTS")
                cases.append(dataclasses.replace(case, source=broken))
            if variant == "chunked":
                # one block holding every slab, SM starts in most of them: phase 2
                # reloads slabs that are not resident (random grids often give each
                # block one slab, and then no reload happens)
                case = make_case(rng, g, variant, varlen, rng.choice(("smxx", "sm90")),
                                 rng.randint(150, 300), threads=64, chunk=32,
                                 length_kind="mixed", index_kind="runs", num_sms=132,
                                 sm_count=1)
                cases.append(dataclasses.replace(
                    case, source=mutate(render(case.plan.code), edits)))
    # the same cases pass unbroken
    check_all([dataclasses.replace(c, source=None) for c in cases], f"unbroken ({name})")
    assert_mutant_caught(name, cases)


# Register slabs (8 elements per thread, aligned inputs): phase 2 reloads only the warp
# parts of a slab that hold an SM start.
PART_RELOAD_MUTANTS = [
    ("a part's rows start from its slab's carry",
     [(r"S::compose\(ppre\.shfl\(\(int\)pt\),", "S::compose(pre,")]),
    ("a part's lanes all start from the part's carry",
     [(r"S::compose\(ppre\.shfl\(\(int\)pt\),\s*warp_exclusive\(warp_inclusive_scan\(sw\)\)\);",
       "ppre.shfl((int)pt);")]),
    ("the parts of a slab are not stored",
     [(r"if \(lane < kWarps\) parts\[\(first \+ m\) \* kWarps \+ lane\] = part;", "")]),
    ("only the first part holding a start is reloaded",
     [(r"const u32 count = __popc\(todo\);", "const u32 count = todo != 0u;")]),
]


@pytest.mark.parametrize("name,edits", PART_RELOAD_MUTANTS,
                         ids=[m[0] for m in PART_RELOAD_MUTANTS])
def test_broken_part_reload_is_caught(name, edits):
    rng, g = rngs("part reload mutant", name)
    cases = []
    for i in range(8):
        varlen = i % 4 >= 2
        schedule = ("smxx", "sm90", "sm100")[i % 3]
        threads = (64, 128)[i % 2]  # slabs of 2 or 4 warp parts
        chunk = 8 * threads
        batch = rng.randint(2, 5) * chunk - rng.choice((0, rng.randint(1, chunk - 1)))
        base = make_case(rng, g, "chunked", varlen, schedule, batch, threads=threads,
                         chunk=chunk, sm_count=132, misalign=0, length_kind="mixed",
                         num_sms=rng.choice((132, batch + 7, batch + 7)))
        if varlen:  # runs of 3: some run starts at a part's last token and goes on
            idx = (torch.arange(batch) // 3).to(torch.int32)  # into the next part
            base = dataclasses.replace(base, indices=idx,
                                       context_lens=fit_u32(base.context_lens, idx))
        p = dataclasses.replace(base.plan, grid=rng.choice((1, 2)))
        broken = mutate(render(p.code), edits)
        if broken is None:
            pytest.fail(f"the kernel source no longer contains the code mutant '{name}' "
                        f"edits ({edits[0][0]!r}): update PART_RELOAD_MUTANTS")
        cases.append(dataclasses.replace(base, plan=p, source=broken))
    check_all([dataclasses.replace(c, source=None) for c in cases], f"unbroken ({name})")
    assert_mutant_caught(name, cases)


QUEUE_MUTANTS = [
    ("queued rows stop one SM short",
     [(r"n_rows = e\[3\] - e\[2\];", "n_rows = e[3] - e[2] - 1u;")]),
    ("a queued unit loses its first row", [(r"e\[2\] = s;", "e[2] = s + 1u;")]),
]


@pytest.mark.parametrize("name,edits", QUEUE_MUTANTS, ids=[m[0] for m in QUEUE_MUTANTS])
def test_broken_row_queue_is_caught(name, edits):
    """The row queue (a unit holding more than 8 SM starts, written by the whole block)
    runs where one request holds most SMs: chunked slabs, 256 threads (the scratch holds
    a queue entry in both modes), every varlen token its own atom."""
    rng, g = rngs("queue mutant", name)
    cases = []
    for varlen in (False, True):
        for schedule in ("smxx", "sm90"):
            batch = rng.randint(50, 400)
            ctx = lengths("huge_one", batch, 1, g)
            idx = indices("distinct", batch, rng, g) if varlen else None
            p = plan_case("chunked", batch, 1, varlen, 132, schedule, threads=256, chunk=64,
                          sm_count=rng.choice((1, 3, 132)))
            broken = mutate(render(p.code), edits)
            assert broken is not None, f"the kernel source no longer contains {edits[0][0]!r}"
            cases.append(Case(p, ctx, idx, 132, seed=rng.getrandbits(32), source=broken,
                              label=f"{p.code.name} batch={batch} huge_one"))
    check_all([dataclasses.replace(c, source=None) for c in cases], f"unbroken ({name})")
    assert_mutant_caught(name, cases)


REGISTER_MUTANTS = [
    ("a register slab ignores the index before its tokens",
     [(r"if \(lane == 0u\) pid = f\.pid;", "")]),
    ("a register slab's last lane reads the wrong next token",
     [(r"__ldg\(idx \+ e1\)", "__ldg(idx + e1 - 1u)")]),
    ("register slabs keep only a group's first slab",
     [(r"mine = S::compose\(mine, v\.shfl\(31\)\);", "mine = S::compose(mine, v.shfl(0));")]),
    ("a warp composes its lanes in the wrong order",
     [(r"v = S::compose\(v, v\.shfl\(lane \+ d\)\);", "v = S::compose(v.shfl(lane + d), v);")]),
    ("the slabs of a group share their warp slots",
     [(r"put\(slots \+ \(k \* kWarps \+ warp\) \* kFields, part\)",
       "put(slots + warp * kFields, part)")]),
    ("the last slab does not see the register slabs before it",
     [(r"mine = sc\.broadcast\[1\];", "")]),
]


@pytest.mark.parametrize("name,edits", REGISTER_MUTANTS, ids=[m[0] for m in REGISTER_MUTANTS])
def test_broken_register_slabs_are_caught(name, edits):
    """Register slabs (8 elements per thread, 16-byte aligned inputs, blocks of two warps
    and several slabs) in every format: dense next_n 1, varlen runs of a few tokens."""
    rng, g = rngs("register mutant", name)
    cases = []
    for schedule in ("smxx", "sm90", "sm100"):
        for _ in range(2):  # dense (next_n 1: wider rows are stored and scanned)
            batch = rng.randint(3, 6) * 512 - rng.randint(0, 100)
            ctx = lengths("mixed", batch, 1, g)
            num_sms = rng.choice((3, 132, 1000))
            p = dataclasses.replace(plan_case("chunked", batch, 1, False, num_sms,
                                              schedule, 64, 512, sm_count=132), grid=1)
            broken = mutate(render(p.code), edits)
            assert broken is not None, f"the kernel source no longer contains {edits[0][0]!r}"
            cases.append(Case(p, ctx, None, num_sms, misalign=0, seed=rng.getrandbits(32),
                              source=broken, label=f"{p.code.name} batch={batch} dense"))
        # (runs of 3: a run crosses the tokens of every lane 0 but one in three, so a
        # lane that misreads the token before its own always changes some work)
        for kind in ("runs", "pairs", "distinct", "threes"):
            batch = rng.randint(3, 6) * 512 - rng.randint(0, 100)
            idx = ((torch.arange(batch) // 3).to(torch.int32) if kind == "threes"
                   else indices(kind, batch, rng, g))
            ctx = fit_u32(lengths("mixed", batch, 1, g), idx)
            num_sms = 1000 if kind == "threes" else rng.choice((3, 132, 1000))
            p = dataclasses.replace(plan_case("chunked", batch, 1, True, num_sms, schedule,
                                              64, 512, sm_count=132), grid=rng.choice((1, 2)))
            broken = mutate(render(p.code), edits)
            assert broken is not None, f"the kernel source no longer contains {edits[0][0]!r}"
            cases.append(Case(p, ctx, idx, num_sms, misalign=0, seed=rng.getrandbits(32),
                              source=broken, label=f"{p.code.name} batch={batch} {kind}"))
    check_all([dataclasses.replace(c, source=None) for c in cases], f"unbroken ({name})")
    assert_mutant_caught(name, cases)


# --- sanitizers ----------------------------------------------------------------------------

def _sanitizer_works(flag: str) -> bool:
    """Whether a -fsanitize=flag build compiles and runs here (TSan, for one, needs a
    kernel whose address-space layout it knows)."""
    source = ("typedef unsigned u32;\nextern \"C\" __global__ void jitmeta_emit(const int* "
              "c, const int* i, u32 b, u32 n, u32 s, u32 wl, int* out, const void* w) {\n"
              "    if (threadIdx.x == 0) { out[0] = 1; out[1] = 2; out[2] = 3; out[3] = 4; }\n}\n")
    case = Case(_plan_for_source(32), torch.zeros(10, 1, dtype=torch.int32), None, 1,
                source=source)
    try:
        return emulate_cases([case], sanitize=flag)[0].flatten().tolist() == [1, 2, 3, 4]
    except EmulatorError:
        return False


def small_cases(rng, g, n=2, one_block=False):
    """``one_block``: chunked grids of one block (TSan cannot follow the forked
    processes that run a cooperative grid's blocks; one block runs in-process and
    still takes every path of the chunked kernel, reloads included)."""
    cases = []
    for variant in ("static", "dynamic", "chunked"):
        for varlen in (False, True):
            for _ in range(n):
                cases.append(make_case(rng, g, variant, varlen, rng.choice(("smxx", "sm90")),
                                       rng.randint(1, 200), next_n=1 if varlen else
                                       rng.randint(1, 4), threads=64,
                                       chunk=32 if variant == "chunked" else None,
                                       sm_count=1 if one_block else None))
    return cases


@pytest.mark.parametrize("sanitize", ["address,undefined", "thread"])
def test_sanitized_kernels(sanitize):
    """ASan+UBSan (out-of-bounds shared/global memory, UB) and TSan (races between the
    block's threads: a missing __syncthreads) find nothing in the kernels."""
    if not _sanitizer_works(sanitize):
        pytest.skip(f"g++ -fsanitize={sanitize} does not build here")
    rng, g = rngs("sanitize", sanitize)
    cases = small_cases(rng, g, one_block=sanitize == "thread")
    try:
        outs = emulate_cases(cases, sanitize=sanitize)
    except EmulatorError as exc:
        pytest.fail(f"-fsanitize={sanitize}: {exc}\n{SEED_NOTE}")
    bad = mismatches(cases, outs)
    assert not bad, f"{SEED_NOTE}\n" + "\n".join(bad)


def test_missing_barrier_is_reported_as_a_race():
    if not _sanitizer_works("thread"):
        pytest.skip("g++ -fsanitize=thread does not build here")
    rng, g = rngs("race")
    case = make_case(rng, g, "static", True, "smxx", 300, threads=64)
    # (the whole batch loaded by the block: 64 threads hold 1024 elements, 16 each)
    broken, n = re.subn(r"(load_tile\(tile, ctx, idx, 0u, batch[^;]*;\s*)__syncthreads\(\);",
                        r"\1", render(case.plan.code))
    if not n:  # the mutant no longer applies: it would test nothing
        pytest.fail("no `load_tile(tile, ctx, idx, 0u, batch, ...); __syncthreads();` in "
                    "the kernel source any more: update this test")
    with pytest.raises(EmulatorError, match="data race"):
        emulate_cases([dataclasses.replace(case, source=broken)], sanitize="thread")


# --- the emulator itself: CUDA semantics and fault reports -----------------------------------

PRIMITIVES = r"""
typedef unsigned u32;
extern "C" __global__ void __launch_bounds__(96)
jitmeta_emit(const int* ctx, const int* idx, u32 batch, u32 next_n, u32 num_sms,
             u32 wide_last, int* out, const void* ws) {
    __shared__ u32 ring[96];
    __shared__ u32 never_written;
    const u32 t = threadIdx.x, lane = t & 31, v = t * 7u + 3u;
    int* o = out + 10 * t;
    o[0] = (int)__shfl_up_sync(0xffffffffu, v, 3);
    o[1] = (int)__shfl_down_sync(0xffffffffu, v, 5);
    o[2] = (int)__shfl_xor_sync(0xffffffffu, v, 6);
    o[3] = (int)__shfl_sync(0xffffffffu, v, 31 - lane);
    o[4] = (int)__shfl_sync(0xffffffffu, v, lane + 4, 8);
    o[5] = (int)__ballot_sync(0xffffffffu, (v & 3u) == 1u);
    o[6] = __syncthreads_count(t % 3u == 0u);
    o[7] = __syncthreads_or(t == blockDim.x - 1) + 2 * __syncthreads_and(t < 1000u);
    ring[t] = v;
    __syncthreads();
    o[8] = (int)ring[(t + 1) % blockDim.x];
    o[9] = (int)min(t, 40) + 1000 * (int)max(-1, (int)t - 50);
    if (t == 0) out[10 * blockDim.x] = (int)never_written;
}
"""


def _plan_for_source(threads: int, batch: int = 10, num_sms: int = 1):
    return plan_case("static", batch, 1, False, num_sms, "smxx", threads)


def test_shim_follows_cuda_semantics():
    """Shuffles (up/down/xor/idx/width), ballot, __syncthreads_count/or/and, shared
    arrays, CUDA's min/max, and fresh shared memory holding garbage."""
    T = 96
    p = _plan_for_source(T, num_sms=5 * T)
    ctx = torch.zeros(10, 1, dtype=torch.int32)
    outs = emulate_cases([Case(p, ctx, None, 5 * T, seed=s, source=PRIMITIVES)
                          for s in (1, 2)])
    got = outs[0].flatten().tolist()
    v = [t * 7 + 3 for t in range(T)]
    for t in range(T):
        lane, base = t % 32, t - t % 32
        w8 = lane & ~7
        ballot = sum(1 << (u - base) for u in range(base, base + 32) if v[u] & 3 == 1)
        want = [v[base + (lane - 3 if lane >= 3 else lane)],
                v[base + (lane + 5 if lane + 5 < 32 else lane)],
                v[base + (lane ^ 6)],
                v[base + 31 - lane],
                v[base + w8 + ((lane + 4) & 7)],
                ballot - (1 << 32) if ballot >= 1 << 31 else ballot,
                len(range(0, T, 3)),
                3,
                v[(t + 1) % T],
                min(t, 40) + 1000 * max(-1, t - 50)]
        assert got[10 * t:10 * t + 10] == want, f"thread {t}: {got[10 * t:10 * t + 10]}"
    # a __shared__ variable nobody wrote holds the garbage of that launch's seed
    assert outs[0][5 * T, 0] != outs[1][5 * T, 0]


# Block b publishes a word; threads t < grid read block t's word, waiting for it or not.
CROSS_BLOCK_READS = r"""
typedef unsigned u32;
extern "C" __global__ void jitmeta_emit(const int* ctx, const int* idx, u32 batch, u32 next_n,
                                        u32 num_sms, u32 wide_last, int* out, u32* ws) {
    volatile u32* word = ws + 4;  // one per block, zero before the launch
    const u32 b = blockIdx.x, t = threadIdx.x, grid = gridDim.x;
    if (t == 0) word[b] = b + 1u;
    if (t < grid) {
        u32 v = word[t];
        while (WAIT && v == 0u) {
            __nanosleep(32);
            v = word[t];
        }
        out[b * grid + t] = (int)v;
    }
}
"""


def test_reads_that_do_not_wait_are_deterministic():
    """A read that does not wait for another block's (or thread's) write gets the same
    answer on every run, whatever the load: the blocks of a cooperative launch start one
    at a time from the highest, and a block's threads set out in index order
    (harness.cpp, "determinism"). Block b reads the higher blocks' words and its own
    (its thread 0 wrote it before thread b set out) and never a lower block's, so a
    kernel that does not wait is caught on every run. Waiting (polling with __nanosleep)
    lets the next block start: every block then reads every word."""
    grid = 8
    p = dataclasses.replace(plan_case("chunked", 32 * grid, 1, False, 40, "smxx", 64, 32),
                            grid=grid)
    ctx = torch.zeros(32 * grid, 1, dtype=torch.int32)
    for wait in (0, 1):
        source = f"#define WAIT {wait}\n" + CROSS_BLOCK_READS
        outs = emulate_cases([Case(p, ctx, None, 40, seed=s, source=source) for s in (1, 2)])
        want = [t + 1 if wait or t >= b else 0 for b in range(grid) for t in range(grid)]
        for out in outs:
            assert out.flatten()[:grid * grid].tolist() == want, f"wait={wait}"


FAULTS = {
    "stray write": (r"if (threadIdx.x == 0) out[(num_sms + 1) * 2] = 1;",
                    "stray write next to out"),
    "read past the end": (r"if (threadIdx.x == 0) out[0] = ctx[(batch * next_n + 63) / 64 * 64];",
                          "fatal signal 11"),
    "write to an input": (r"if (threadIdx.x == 0) ((int*)ctx)[0] = 1;", "fatal signal 11"),
    "partial shuffle mask": (r"out[0] = __shfl_sync(0x0000ffffu, 1, 0);",
                             "only masks naming every lane"),
    "divergent barrier": (r"if (threadIdx.x == 0) { __syncthreads(); } "
                          r"else { out[0] = __shfl_sync(0xffffffffu, 1, 0); }", "deadlock"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_are_reported(fault):
    body, message = FAULTS[fault]
    source = ("typedef unsigned u32;\nextern \"C\" __global__ void jitmeta_emit(const int* "
              "ctx, const int* idx, u32 batch, u32 next_n, u32 num_sms, u32 wide_last, "
              "int* out, const void* ws) {\n    " + body + "\n}\n")
    p = _plan_for_source(64)
    case = Case(p, torch.zeros(10, 1, dtype=torch.int32), None, 1, label=fault,
                source=source)
    with pytest.raises(EmulatorError, match=message) as info:
        emulate_cases([case], deadlock_s=2)
    assert info.value.case_index == 0


def test_emulate_single_call_api():
    """The one-call API (for scripts): plan, emulate, compare."""
    rng, g = rngs("api")
    ctx = lengths("mixed", 300, 2, g)
    p = plan_case("dynamic", 300, 2, False, 132, "sm90", 128)
    out = emulate(p.code, p, ctx, None, 132)
    want = jitmeta.reference_schedule(ctx, 132, schedule="sm90")
    assert out.dtype == torch.int32 and out.shape == (133, 2)
    assert torch.equal(out, want), SEED_NOTE
