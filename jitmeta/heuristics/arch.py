"""Device limits the planner needs: read off a GPU, or from a named-arch table.

The table lets ``jitmeta-cache warm --arch sm_90`` and the CPU tests plan without a
GPU. Numbers are the CUDA programming guide's per-compute-capability limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["DeviceLimits", "ARCH_TABLE", "normalize_arch", "limits_for_arch",
           "limits_from_device"]

STATIC_SMEM_LIMIT = 48 * 1024  # bytes of static __shared__ any block may declare

_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)$")


@dataclass(frozen=True)
class DeviceLimits:
    """What a plan must fit in.

    ``smem_optin_bytes`` is the largest static + dynamic shared memory one block may
    use after opting in (cudaDevAttrMaxSharedMemoryPerBlockOptin); the 1 KiB the
    hardware reserves per block is already outside it.
    """

    arch: str  # exact NVRTC target, e.g. "sm_90" or "sm_90a"
    sm_count: int
    max_threads_per_block: int = 1024
    smem_static_bytes: int = STATIC_SMEM_LIMIT
    smem_optin_bytes: int = 232448
    smem_reserved_bytes: int = 1024  # per-block system smem counted in the cubin

    def __post_init__(self):
        if self.sm_count < 1:
            raise ValueError(f"sm_count must be >= 1, got {self.sm_count}")

    def with_budget(self, budget: int | None) -> "DeviceLimits":
        """Limits capped by a shared-memory budget (``JITMETA_SMEM_BUDGET``)."""
        if budget is None:
            return self
        return replace(self, smem_static_bytes=min(self.smem_static_bytes, budget),
                       smem_optin_bytes=min(self.smem_optin_bytes, budget))


# compute capability -> (SM count of the common part, opt-in smem per block)
ARCH_TABLE: dict[int, tuple[int, int]] = {
    80: (108, 166912),   # A100
    86: (84, 101376),
    89: (128, 101376),   # L40S / RTX 4090-class
    90: (132, 232448),   # H100 / H200 SXM
    100: (148, 232448),  # B200
    103: (148, 232448),
    120: (84, 101376),
}


def normalize_arch(arch: str) -> str:
    """``"90a"``, ``"sm_90a"``, ``"compute_90a"`` -> ``"sm_90a"``; raises on junk."""
    m = _ARCH_RE.match(str(arch).strip().lower())
    if not m or int(m.group(1)) not in ARCH_TABLE:
        known = ", ".join(f"sm_{cc}" for cc in ARCH_TABLE)
        raise ValueError(f"arch {arch!r} is not a known target; expected one of {known} "
                         "(optionally with an 'a' or 'f' suffix, e.g. sm_90a)")
    return f"sm_{m.group(1)}{m.group(2)}"


def arch_cc(arch: str) -> int:
    return int(_ARCH_RE.match(normalize_arch(arch)).group(1))


def limits_for_arch(arch: str, sm_count: int | None = None) -> DeviceLimits:
    """Limits of a named arch (no GPU needed)."""
    arch = normalize_arch(arch)
    sms, optin = ARCH_TABLE[arch_cc(arch)]
    return DeviceLimits(arch=arch, sm_count=sm_count or sms, smem_optin_bytes=optin,
                        smem_reserved_bytes=reserved_smem(arch))


def reserved_smem(arch: str) -> int:
    """System shared memory the compiler adds to every block (sm_90 and later)."""
    return 1024 if arch_cc(arch) >= 90 else 0


def limits_from_device(index: int) -> DeviceLimits:
    """Limits read off CUDA device ``index`` through PyTorch."""
    import torch

    props = torch.cuda.get_device_properties(index)
    arch = f"sm_{props.major}{props.minor}"
    optin = getattr(props, "shared_memory_per_block_optin", None)
    if optin is None:
        optin = ARCH_TABLE.get(props.major * 10 + props.minor, (0, 101376))[1]
    return DeviceLimits(
        arch=arch,
        sm_count=props.multi_processor_count,
        max_threads_per_block=getattr(props, "max_threads_per_block", 1024),
        smem_static_bytes=STATIC_SMEM_LIMIT,
        smem_optin_bytes=int(optin),
        smem_reserved_bytes=reserved_smem(arch),
    )
