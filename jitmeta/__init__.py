"""jitmeta: the exact paged-MQA-logits schedule metadata for any batch size.

A drop-in for ``deep_gemm.get_paged_mqa_logits_metadata``: Jinja2 templates -> CUDA
source per configuration -> NVRTC -> cubin -> on-disk cache -> launch on PyTorch's
current stream. Importing jitmeta creates no directory, loads no CUDA library,
configures no logging and imports nothing heavy: the public names below are resolved on
first use (so ``jitmeta-cache`` starts without importing torch). The
``torch.ops.jitmeta.*`` custom ops are registered by ``import jitmeta`` when torch is
already imported (what ``torch.compile`` users rely on), else by the first use of a
torch-facing name.
"""

from __future__ import annotations

import importlib
import sys as _sys
from typing import TYPE_CHECKING, Any

from ._version import __version__

__all__ = ["get_paged_mqa_logits_metadata", "plan", "reference_schedule", "warm", "envs",
           "ops", "stats", "Plan", "PlanError", "DeviceLimits", "limits_for_arch",
           "OfflineMissError", "InputValueError", "CaptureCompileError", "CompileError",
           "NvrtcUnavailableError", "SCHEDULES", "__version__"]

# public name -> (module, attribute or None for the module itself)
_LAZY = {
    "get_paged_mqa_logits_metadata": ("jitmeta.api", "get_paged_mqa_logits_metadata"),
    "plan": ("jitmeta.api", "plan"),
    "reference_schedule": ("jitmeta.api", "reference_schedule"),
    "InputValueError": ("jitmeta.args", "InputValueError"),
    "CaptureCompileError": ("jitmeta.jit.runtime", "CaptureCompileError"),
    "warm": ("jitmeta.warmup", "warm"),
    "envs": ("jitmeta.envs", None),
    "ops": ("jitmeta.ops", None),
    "stats": ("jitmeta.jit.build", "stats"),
    "OfflineMissError": ("jitmeta.jit.build", "OfflineMissError"),
    "CompileError": ("jitmeta.jit.compiler", "CompileError"),
    "NvrtcUnavailableError": ("jitmeta.jit.compiler", "NvrtcUnavailableError"),
    "Plan": ("jitmeta.heuristics.plan", "Plan"),
    "PlanError": ("jitmeta.heuristics.plan", "PlanError"),
    "DeviceLimits": ("jitmeta.heuristics.arch", "DeviceLimits"),
    "limits_for_arch": ("jitmeta.heuristics.arch", "limits_for_arch"),
    "SCHEDULES": ("jitmeta.kernels", "SCHEDULES"),
}
_TORCH_FACING = ("jitmeta.api", "jitmeta.ops", "jitmeta.warmup", "jitmeta.validate",
                 "jitmeta.jit.runtime", "jitmeta.jit.build")


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'jitmeta' has no attribute {name!r}") from None
    if module in _TORCH_FACING:
        importlib.import_module("jitmeta.ops")  # the custom ops exist whenever torch is used
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if "torch" in _sys.modules:
    importlib.import_module("jitmeta.ops")

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from . import envs, ops
    from .api import get_paged_mqa_logits_metadata, plan, reference_schedule
    from .heuristics.arch import DeviceLimits, limits_for_arch
    from .heuristics.plan import Plan, PlanError
    from .jit.build import OfflineMissError, stats
    from .jit.compiler import CompileError, NvrtcUnavailableError
    from .jit.runtime import CaptureCompileError
    from .kernels import SCHEDULES
    from .args import InputValueError
    from .warmup import warm
