"""Kernel families, one module each; this registry maps a schedule format to its family.

A family module provides (see ``docs/design.md``, "Adding a kernel family"):
``NAME``, ``SCHEDULES``, ``plan(...)``, ``codes_for_batches(...)``, ``source(code)``,
``workspace_words(plan)``, ``max_dynamic_smem(plan, limits)``, ``ScheduleCall`` and
``warm_command(plan, knobs, cache_dir)``. Adding one is a new module, a template and a
line in ``_FAMILIES``; nothing in ``jitmeta/jit`` changes.
"""

from __future__ import annotations

from types import ModuleType

from ..envs import Knobs, snapshot
from ..heuristics.arch import DeviceLimits
from ..heuristics.plan import CodeSpec, Plan, PlanError
from ..jit.source import KernelSource
from . import paged_mqa

__all__ = ["SCHEDULES", "family", "plan", "codes_for_batches", "source", "families"]

_FAMILIES: tuple[ModuleType, ...] = (paged_mqa,)
_BY_SCHEDULE: dict[str, ModuleType] = {s: f for f in _FAMILIES for s in f.SCHEDULES}
_BY_NAME: dict[str, ModuleType] = {f.NAME: f for f in _FAMILIES}

#: every schedule format, in the order the CLI and the docs list them
SCHEDULES: tuple[str, ...] = tuple(_BY_SCHEDULE)


def families() -> tuple[ModuleType, ...]:
    return _FAMILIES


def family(schedule: str) -> ModuleType:
    """The family module serving ``schedule``; :class:`PlanError` names the known ones."""
    try:
        return _BY_SCHEDULE[schedule]
    except (KeyError, TypeError):
        raise PlanError(f"schedule must be one of {', '.join(SCHEDULES)}; got "
                        f"{schedule!r}") from None


def family_named(name: str) -> ModuleType:
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise PlanError(f"unknown kernel family {name!r}; known: "
                        f"{', '.join(_BY_NAME)}") from None


def plan(batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
         schedule: str, limits: DeviceLimits, knobs: Knobs | None = None) -> Plan:
    """The plan of one shape (``knobs``: a snapshot; default: the knobs now)."""
    return family(schedule).plan(batch, next_n, varlen, num_sms, split_kv, schedule,
                                 limits, snapshot() if knobs is None else knobs)


def codes_for_batches(batches, next_n: int, varlen: bool, num_sms: int, split_kv: int,
                      schedule: str, limits: DeviceLimits, knobs: Knobs | None = None
                      ) -> dict[CodeSpec, Plan]:
    """The distinct cubins (with an example plan each) serving inclusive batch ranges."""
    return family(schedule).codes_for_batches(
        batches, next_n, varlen, num_sms, split_kv, schedule, limits,
        snapshot() if knobs is None else knobs)


def source(code: CodeSpec) -> KernelSource:
    """The :class:`KernelSource` of a planned code."""
    return family(code.schedule).source(code)
