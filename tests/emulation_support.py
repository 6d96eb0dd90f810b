"""What the emulator tests of every format share: seeded generators, inputs, plans,
the reference comparison and the mutant check.

A module that imports from here shows its seed through ``SEED_NOTE`` (the conftest
prints it); set ``JITMETA_TEST_SEED`` to reproduce a run.
"""

from __future__ import annotations

import os
import random
import re
import zlib

import pytest
import torch

import jitmeta
from jitmeta.envs import Knobs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.kernels import plan as make_plan

from emulator import Case, EmulatorError, emulate_cases

__all__ = ["SEED", "SEED_NOTE", "SPLIT_KV", "INT32_MAX", "INDEX_KINDS", "rngs", "lengths",
           "indices", "plan_case", "reference", "mismatches", "check_all",
           "mutate", "assert_mutant_caught"]

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(4), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

SPLIT_KV = 256
INT32_MAX = 2**31 - 1
INDEX_KINDS = ("runs", "long", "single", "distinct", "pairs")


def rngs(*parts) -> tuple[random.Random, torch.Generator]:
    """Python and torch generators for one test, derived from SEED and the test's name."""
    s = (SEED ^ zlib.crc32(repr(parts).encode())) & 0xFFFFFFFF
    return random.Random(s), torch.Generator().manual_seed(s)


def lengths(kind: str, batch: int, next_n: int, g: torch.Generator,
            large_from: int = 0) -> torch.Tensor:
    """``[batch, next_n]`` context lengths of one kind; "large" draws from
    [large_from, 2^31 - 1)."""
    shape = (batch, next_n)
    if kind == "zeros":
        return torch.zeros(shape, dtype=torch.int32)
    if kind == "ones":
        return torch.ones(shape, dtype=torch.int32)
    if kind == "edges":  # around split_kv multiples, zeros included
        choices = torch.tensor([0, 1, 255, 256, 257, 511, 512, 513], dtype=torch.int32)
        return choices[torch.randint(0, len(choices), shape, generator=g)]
    if kind == "mixed":
        t = torch.randint(0, 20000, shape, generator=g, dtype=torch.int32)
        t[torch.rand(shape, generator=g) < 0.2] = 0
        return t
    if kind == "large":
        return torch.randint(large_from, INT32_MAX, shape, generator=g,
                             dtype=torch.int64).to(torch.int32)
    if kind == "huge_one":
        t = torch.randint(0, 300, shape, generator=g, dtype=torch.int32)
        t[int(torch.randint(0, batch, (1,), generator=g))] = INT32_MAX
        return t
    if kind == "256k":
        choices = torch.tensor([2**18 - 1, 2**18, 2**18 + 1, 0, 7], dtype=torch.int32)
        return choices[torch.randint(0, len(choices), shape, generator=g)]
    raise ValueError(kind)


def indices(kind: str, batch: int, rng: random.Random, g: torch.Generator,
            slab: int = 100) -> torch.Tensor:
    """token -> request ids: the runs of equal neighbours are what the formats follow
    (atom parity for smxx/sm90, requests for sm100)."""
    if kind == "distinct":
        return torch.arange(batch, dtype=torch.int32)
    if kind == "single":  # one run covers the batch
        return torch.full((batch,), 7, dtype=torch.int32)
    if kind == "pairs":
        return (torch.arange(batch) // 2).to(torch.int32)
    if kind == "runs":  # runs of 1..5, ids shuffled and reused (some neighbours merge)
        runs = torch.randint(1, 6, (batch,), generator=g)
        ids = torch.repeat_interleave(torch.arange(batch), runs)[:batch]
        perm = torch.randperm(batch, generator=g)
        return (perm[ids] % max(1, batch // 3 + 1)).to(torch.int32)
    if kind == "long":  # short runs and runs spanning several slabs, at any offset
        out, rid = [], 0
        while len(out) < batch:
            if rng.random() < 0.2:
                n = rng.randint(slab, 4 * slab) + rng.choice((-1, 0, 1))
            else:
                n = rng.randint(1, 5)
            out += [rid] * max(1, n)
            rid += 1
        return torch.tensor(out[:batch], dtype=torch.int32)
    raise ValueError(kind)


def plan_case(variant: str | None, batch: int, next_n: int, varlen: bool, num_sms: int,
              schedule: str, threads: int | None = None, chunk: int | None = None,
              split_kv: int = SPLIT_KV, sm_count: int | None = None):
    """The library's plan for a call (sm_90 limits; ``sm_count`` SMs, which bounds the
    chunked variant's grid). The knob snapshot is built by hand: odd chunks and block
    sizes that the environment would refuse still exercise the kernels' arithmetic."""
    limits = limits_for_arch("sm_90", sm_count) if sm_count else limits_for_arch("sm_90")
    knobs = Knobs(variant=variant, threads=threads, chunk=chunk)
    return make_plan(batch, next_n, varlen, num_sms, split_kv, schedule, limits, knobs)


def reference(case: Case) -> torch.Tensor:
    return jitmeta.reference_schedule(case.context_lens, case.num_sms, case.indices,
                                      split_kv=case.plan.code.split_kv,
                                      schedule=case.plan.schedule)


def mismatches(cases, outs) -> list[str]:
    bad = []
    for case, got in zip(cases, outs):
        want = reference(case)
        if not torch.equal(got, want):
            rows = (got != want).any(dim=1).nonzero().flatten()[:4].tolist()
            detail = [(r, got[r].tolist(), want[r].tolist()) for r in rows]
            bad.append(f"{case.label}: rows (row, kernel, reference) {detail}")
    return bad


def check_all(cases: list[Case], what: str) -> None:
    try:
        outs = emulate_cases(cases)
    except EmulatorError as exc:
        pytest.fail(f"{what}: {exc}\n{SEED_NOTE}")
    bad = mismatches(cases, outs)
    assert not bad, (f"{what}: {len(bad)} of {len(cases)} cases differ from the reference "
                     f"({SEED_NOTE}):\n" + "\n".join(bad[:8]))


def mutate(source: str, edits) -> str | None:
    """``source`` with every (pattern, replacement) of ``edits`` applied; None when one
    of the patterns no longer occurs (a mutant that tests nothing)."""
    for pattern, repl in edits:
        source, n = re.subn(pattern, repl, source)
        if not n:
            return None
    return source


def assert_mutant_caught(name: str, cases: list[Case], **emulate_kw) -> None:
    """The broken ``cases`` must give a wrong schedule in at least one case. Only a
    wrong answer counts: a case where the mutant faults the emulator (e.g. a division
    by zero, which a GPU would not trap) shows nothing either way."""
    wrong, faults = [], 0
    for case in cases:
        try:
            out = emulate_cases([case], **emulate_kw)[0]
        except EmulatorError:
            faults += 1
            continue
        wrong += mismatches([case], [out])
    assert wrong, (f"mutant '{name}' computed the reference schedule in every case that "
                   f"ran ({len(cases) - faults} of {len(cases)}; the others faulted): the "
                   f"checks cannot tell it apart ({SEED_NOTE})")
