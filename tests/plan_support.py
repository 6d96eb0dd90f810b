"""Shared plumbing of the planner tests (test_plan_*.py): the seed, the sm_90 limits,
the two tile layouts of the paged-MQA family and a short way to plan one shape.

``run_plan`` goes through ``jitmeta.kernels.plan``, which takes a knob snapshot when
none is given, so ``envs.override(...)`` around it steers the planner as an
application's environment would; ``pure_plan`` calls the pure planner with an explicit
:class:`~jitmeta.envs.Knobs`.
"""

from __future__ import annotations

import os

from jitmeta import kernels
from jitmeta.envs import KNOBS, Knobs
from jitmeta.heuristics.plan import plan as pure_planner

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

FORMATS = ("smxx", "sm90")
KIB = 1024

#: varlen -> the family's TileLayout (dense: 4-byte summaries; varlen: 16-byte ones)
LAYOUT = {False: kernels.layout("smxx", False), True: kernels.layout("smxx", True)}


def knobs_of(**values) -> Knobs:
    """A snapshot of the defaults with ``values``, whatever the environment holds (every
    other knob is overridden with None, i.e. its default)."""
    return Knobs.from_values(**(dict.fromkeys(KNOBS) | values))


def run_plan(batch, limits, varlen=False, next_n=1, num_sms=132, split_kv=256,
             schedule="smxx", knobs=None):
    """The plan of one shape under the knobs in effect (or ``knobs``)."""
    return kernels.plan(batch, next_n, varlen, num_sms, split_kv, schedule, limits, knobs)


def pure_plan(batch, limits, knobs: Knobs, varlen=False, next_n=1, num_sms=132,
              split_kv=256, schedule="smxx"):
    """The pure planner itself, with an explicit snapshot and the family's layout."""
    return pure_planner(batch, next_n, varlen, num_sms, split_kv, schedule, limits, knobs,
                        kernels.layout(schedule, varlen))

# (batch, bucket, threads, dense bytes, varlen bytes) with the default 1024 threads:
# threads = max(min(256, 1024), min(1024, bucket // 8)); bytes = 4 tile_words + scratch + 1024
SM90_BUCKETS = [
    (1, 1024, 256, 5292, 5412),          # 1057 * 4 + 40 (160) + 1024
    (1024, 1024, 256, 5292, 5412),
    (1025, 2048, 256, 9516, 9636),       # 2113 * 4 + 40 (160) + 1024
    (2048, 2048, 256, 9516, 9636),
    (2049, 4096, 512, 17996, 18212),     # 4225 * 4 + 72 (288) + 1024
    (4096, 4096, 512, 17996, 18212),
    (4097, 8192, 1024, 34956, 35364),    # 8449 * 4 + 136 (544) + 1024
    (8192, 8192, 1024, 34956, 35364),
]
