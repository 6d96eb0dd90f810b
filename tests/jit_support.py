"""Short ways for the cache, CLI and bundle tests to build a planned code.

They go through the same calls as ``jitmeta.dispatch.prepare``: the family's
``KernelSource``, a knob snapshot taken now (so ``envs.override`` around a call steers
it), the plan as the entry's example and the family's warm command as the miss hint.
"""

from __future__ import annotations

from jitmeta import envs, kernels
from jitmeta.jit import build as jit_build
from jitmeta.kernels.paged_mqa import describe_plan

__all__ = ["build", "key_for", "warm_command", "plan"]

plan = kernels.plan


def warm_command(p, cache_dir=None) -> str:
    """The ``jitmeta-cache warm`` command that produces ``p``'s cubin."""
    return kernels.family(p.code.schedule).warm_command(p, envs.snapshot(), cache_dir)


def build(code, p=None, *, cache=None, offline=None):
    """``jit.build`` of ``code`` under the knobs in effect now."""
    knobs = envs.snapshot()
    disk = cache if cache is not None else jit_build.cache_for(knobs)
    hint = what = None
    if p is not None:
        hint = warm_command(p, cache_dir=disk.root if disk is not None else None)
        what = describe_plan(p)
    return jit_build.build(kernels.source(code), knobs, cache=cache, offline=offline,
                           example=p.to_dict() if p is not None else None, hint=hint,
                           what=what)


def key_for(code) -> tuple:
    """(key, rendered source, options) of ``code`` under the knobs in effect now."""
    knobs = envs.snapshot()
    return jit_build.key_for(kernels.source(code), knobs, jit_build.cache_for(knobs))
