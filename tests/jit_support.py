"""Short ways for the cache, CLI and bundle tests to build a planned code.

They go through the same calls as ``jitmeta.dispatch.prepare`` (``build_plan``: the
family's ``KernelSource``, the plan as the entry's example and the family's warm command
as the miss hint), under a knob snapshot taken now (so ``envs.override`` around a call
steers it).
"""

from __future__ import annotations

from jitmeta import dispatch, envs, kernels
from jitmeta.jit import build as jit_build

__all__ = ["build", "key_for", "warm_command", "plan"]

plan = kernels.plan


def warm_command(p, cache_dir=None) -> str:
    """The ``jitmeta-cache warm`` command that produces ``p``'s cubin."""
    return kernels.family(p.code.schedule).warm_command(p, envs.snapshot(), cache_dir)


def build(code, p=None, *, cache=None, offline=None):
    """The cubin of ``code`` under the knobs in effect now: through
    ``dispatch.build_plan`` when a plan is given (what a call would do), else straight
    through ``jit.build``."""
    if p is not None:
        assert p.code == code
        return dispatch.build_plan(p, cache=cache, offline=offline)
    return jit_build.build(kernels.source(code), envs.snapshot(), cache=cache,
                           offline=offline)


def key_for(code) -> tuple:
    """(key, rendered source, options) of ``code`` under the knobs in effect now."""
    knobs = envs.snapshot()
    return jit_build.key_for(kernels.source(code), knobs, jit_build.cache_for(knobs))
