"""Kernel families, one module each; this registry maps a schedule format to its family.

A family (the ``FAMILY`` value of its module) provides (see ``docs/design.md``,
"Adding a kernel family"): ``name``, ``schedules``, ``layout(schedule, varlen)``,
``plan(...)``, ``codes_for_batches(...)``, ``source(code)``, ``workspace_words(plan)``,
``max_dynamic_smem(plan, limits)``, ``call(device, plan, function)`` and
``warm_command(plan, knobs, cache_dir)``. Adding one is a new module, its template or
header and a line in ``_FAMILIES``; nothing in ``jitmeta/jit`` changes.
"""

from __future__ import annotations


from ..envs import Knobs, snapshot
from ..heuristics.arch import DeviceLimits
from ..heuristics.plan import CodeSpec, Plan, PlanError
from ..jit.source import KernelSource
from . import paged_mqa, paged_mqa_sm100

__all__ = ["SCHEDULES", "family", "family_named", "families", "plan", "codes_for_batches",
           "source", "layout", "workspace_words", "call"]

_FAMILIES = (paged_mqa.FAMILY, paged_mqa_sm100.FAMILY)
_BY_SCHEDULE = {s: f for f in _FAMILIES for s in f.schedules}
_BY_NAME = {f.name: f for f in _FAMILIES}

#: every schedule format, in the order the CLI and the docs list them
SCHEDULES: tuple[str, ...] = tuple(_BY_SCHEDULE)


def families() -> tuple:
    return _FAMILIES


def family(schedule: str):
    """The family module serving ``schedule``; :class:`PlanError` names the known ones."""
    try:
        return _BY_SCHEDULE[schedule]
    except (KeyError, TypeError):
        raise PlanError(f"schedule must be one of {', '.join(SCHEDULES)}; got "
                        f"{schedule!r}") from None


def family_named(name: str):
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


def layout(schedule: str, varlen: bool):
    """The planner's :class:`TileLayout` of a format and mode."""
    return family(schedule).layout(schedule, varlen)


def workspace_words(p: Plan) -> int:
    """Workspace words a call of ``p`` needs (0 unless its kernel uses one)."""
    return family(p.code.schedule).workspace_words(p)


def call(device: int, p: Plan, function: object):
    """The loaded call of plan ``p`` on ``device`` (its family's ``ScheduleCall``)."""
    return family(p.code.schedule).call(device, p, function)
