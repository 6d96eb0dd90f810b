"""jitmeta: the exact paged-MQA-logits schedule metadata for any batch size.

A drop-in for ``deep_gemm.get_paged_mqa_logits_metadata``: Jinja2 templates -> CUDA
source per configuration -> NVRTC -> cubin -> on-disk cache -> launch on PyTorch's
current stream. Importing jitmeta creates no directory, loads no CUDA library,
configures no logging and imports torch only when it is needed: the public names
below are resolved on first access (so ``jitmeta-cache --help`` stays fast). When torch
is already imported, ``import jitmeta`` registers the ``torch.ops.jitmeta.*`` custom
ops right away; otherwise the first use of the API (or ``import jitmeta.ops``) does.
"""

from __future__ import annotations

import importlib
import sys as _sys

from ._version import __version__

# public name -> (submodule, attribute); resolved by __getattr__ on first access
_LAZY = {
    "get_paged_mqa_logits_metadata": (".api", "get_paged_mqa_logits_metadata"),
    "CaptureCompileError": (".api", "CaptureCompileError"),
    "InputValueError": (".api", "InputValueError"),
    "DeviceLimits": (".heuristics", "DeviceLimits"),
    "Plan": (".heuristics", "Plan"),
    "PlanError": (".heuristics", "PlanError"),
    "limits_for_arch": (".heuristics", "limits_for_arch"),
    "OfflineMissError": (".jit.build", "OfflineMissError"),
    "stats": (".jit.build", "stats"),
    "CompileError": (".jit.compiler", "CompileError"),
    "NvrtcUnavailableError": (".jit.compiler", "NvrtcUnavailableError"),
    "reference_schedule": (".reference", "reference_schedule"),
    "warm": (".warm", "warm"),
    "plan": ("._plan", "plan"),
}
_SUBMODULES = ("envs", "ops")

__all__ = ["get_paged_mqa_logits_metadata", "plan", "reference_schedule", "warm", "envs",
           "ops", "stats", "Plan", "PlanError", "DeviceLimits", "limits_for_arch",
           "OfflineMissError", "InputValueError", "CaptureCompileError", "CompileError",
           "NvrtcUnavailableError", "__version__"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        module = importlib.import_module(f".{name}", __name__)
    elif name in _LAZY:
        where, attr = _LAZY[name]
        module = getattr(importlib.import_module(where, __name__), attr)
    else:
        raise AttributeError(f"module 'jitmeta' has no attribute {name!r}")
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# An application that has torch loaded gets torch.ops.jitmeta.* registered by
# `import jitmeta` itself (what torch.compile users rely on); without torch (the CLI,
# tools) nothing heavy is imported until a public name is used.
if "torch" in _sys.modules:
    from . import ops  # noqa: E402,F401
