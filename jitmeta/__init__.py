"""jitmeta: the exact paged-MQA-logits schedule metadata for any batch size.

A drop-in for ``deep_gemm.get_paged_mqa_logits_metadata``: Jinja2 templates -> CUDA
source per configuration -> NVRTC -> cubin -> on-disk cache -> launch on PyTorch's
current stream. Importing jitmeta creates no directory, loads no CUDA library and
configures no logging.
"""

from . import envs
from . import ops  # registers torch.ops.jitmeta.* (no other import-time effect)
from .api import CaptureCompileError, InputValueError, get_paged_mqa_logits_metadata
from .heuristics import DeviceLimits, Plan, PlanError, limits_for_arch
from .heuristics import plan as _plan_fn
from .jit.build import OfflineMissError, stats
from .reference import reference_schedule
from .warm import warm

__version__ = "0.1.0"

__all__ = ["get_paged_mqa_logits_metadata", "plan", "reference_schedule", "warm", "envs",
           "ops", "stats", "Plan", "PlanError", "DeviceLimits", "limits_for_arch",
           "OfflineMissError", "InputValueError", "CaptureCompileError", "__version__"]


def plan(batch: int, next_n: int = 1, varlen: bool = False, num_sms: int | None = None,
         split_kv: int = 256, schedule: str = "smxx", *, arch: str | None = None,
         device: int | None = None) -> Plan:
    """The variant decision for a shape, with the numbers behind it.

    Limits come from ``arch`` (a named arch table, no GPU needed) or CUDA ``device``
    (default: the current device when one is present, else ``sm_90``).
    """
    if arch is not None:
        limits = limits_for_arch(arch, num_sms)
    else:
        import torch

        if device is None and not torch.cuda.is_available():
            limits = limits_for_arch("sm_90", num_sms)
        else:
            from .api import device_limits

            limits = device_limits(torch.cuda.current_device() if device is None else device)
    return _plan_fn(batch, next_n, varlen, num_sms or limits.sm_count, split_kv, schedule,
                    limits)
