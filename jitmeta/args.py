"""Scalar argument checks shared by the public API and the warm-up, and the bounds they
enforce. Imports no torch: ``jitmeta-cache warm`` for an arch (a build step, often on
a machine with no GPU) plans and compiles without loading PyTorch. A value can only be
a PyTorch tensor when torch is already imported, so the checks look it up in
``sys.modules`` instead of importing it.

Bounds (documented in the README): ``num_sms`` 1 to :data:`MAX_NUM_SMS`; ``split_kv``
1 to :data:`MAX_SPLIT_KV`.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

__all__ = ["InputValueError", "describe", "int_arg", "bool_arg", "MAX_NUM_SMS",
           "MAX_SPLIT_KV", "INT32_MAX", "UINT32_MAX"]

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
MAX_NUM_SMS = 1 << 20   # rows of the result; no GPU comes near it
MAX_SPLIT_KV = 1 << 30  # keeps ceil(ctx / split_kv) exact in the kernels' uint32 math


class InputValueError(ValueError):
    """A value the kernel cannot schedule (negative length, uint32 overflow): found on
    the CPU path, or on the CUDA path with JITMETA_CHECK_INPUTS=1."""


_TORCH = None  # (torch.Tensor, torch.SymInt) once torch is imported


def _torch_types():
    """``(torch.Tensor, torch.SymInt)`` when torch is imported, else None (then no value
    is either)."""
    global _TORCH
    if _TORCH is None:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "SymInt"):  # absent, or half imported
            return None
        _TORCH = (torch.Tensor, torch.SymInt)
    return _TORCH


def describe(value: object) -> str:
    """A short description of an argument: tensors and arrays by shape, never by content."""
    types = _torch_types()
    if types is not None and isinstance(value, types[0]):
        return (f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, "
                f"device={value.device}, contiguous={value.is_contiguous()})")
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (int, float)):
        return (f"{type(value).__module__}.{type(value).__name__}(shape={tuple(shape)}, "
                f"dtype={getattr(value, 'dtype', '?')})")
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def int_arg(name: str, value: Any, lo: int = 1, hi: int | None = None,
            symbolic: bool = False) -> int:
    """``value`` as an int in [lo, hi]: Python and NumPy integers (anything with
    ``__index__``) pass; bools, floats, strings and tensors do not. ``symbolic``: a
    ``torch.SymInt`` (the custom op's fake implementation) passes unchecked."""
    types = _torch_types()
    if symbolic and types is not None and isinstance(value, types[1]):
        return value
    array = (types is not None and isinstance(value, types[0])) or \
        type(value).__name__ == "ndarray"
    if isinstance(value, bool) or array or not hasattr(type(value), "__index__"):
        bounds = f">= {lo}" if hi is None else f"from {lo} to {hi}"
        raise TypeError(f"{name} must be an int {bounds}; got {describe(value)}")
    v = operator.index(value)
    if v < lo or (hi is not None and v > hi):
        bounds = f">= {lo}" if hi is None else f"from {lo} to {hi}"
        raise ValueError(f"{name} must be {bounds}; got {v}")
    return v


def bool_arg(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False); got {describe(value)}")
    return value
