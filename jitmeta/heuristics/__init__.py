"""Planning: device limits and the variant decision (pure Python, no GPU)."""

from .arch import DeviceLimits, limits_for_arch, limits_from_device, normalize_arch
from .plan import CodeSpec, Plan, PlanError, codes_for_batches, plan

__all__ = ["DeviceLimits", "limits_for_arch", "limits_from_device", "normalize_arch",
           "CodeSpec", "Plan", "PlanError", "codes_for_batches", "plan"]
