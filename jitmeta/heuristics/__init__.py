"""Planning: device limits (``arch``) and the variant decision (``plan``); pure Python,
no GPU, no environment."""

from .arch import DeviceLimits, limits_for_arch, limits_from_device, normalize_arch
from .plan import CodeSpec, Plan, PlanError, TileLayout

__all__ = ["DeviceLimits", "limits_for_arch", "limits_from_device", "normalize_arch",
           "CodeSpec", "Plan", "PlanError", "TileLayout"]
