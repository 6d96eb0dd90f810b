"""``jitmeta.plan``: the planner's decision for a shape, limits from an arch or a GPU."""

from __future__ import annotations

from .heuristics import Plan, limits_for_arch
from .heuristics import plan as _plan_fn

__all__ = ["plan"]


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
