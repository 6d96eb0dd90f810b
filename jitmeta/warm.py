"""Ahead-of-time compilation: map deployment shapes to the few cubins serving them.

``jitmeta-cache warm`` is a thin wrapper over :func:`warm`; engines may call it at
start-up (before CUDA-graph capture) too.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .heuristics.arch import DeviceLimits, limits_for_arch
from .heuristics.plan import SCHEDULES, CodeSpec, Plan, codes_for_batches
from .jit import build as jit_build

__all__ = ["warm", "WarmResult", "parse_batches", "plans_for"]


def parse_batches(text: str) -> list[tuple[int, int]]:
    """``"1-65536,131072"`` -> ``[(1, 65536), (131072, 131072)]``."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"batch list {text!r}: {part!r} is not N or LO-HI") from None
        if a < 1 or b < a:
            raise ValueError(f"batch list {text!r}: range {part!r} must satisfy 1 <= LO <= HI")
        out.append((a, b))
    if not out:
        raise ValueError(f"batch list {text!r} is empty")
    return out


@dataclass
class WarmResult:
    compiled: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    plans: dict[str, Plan] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def entries(self) -> list[str]:
        return sorted(self.plans)

    def to_dict(self) -> dict:
        return {"compiled": len(self.compiled), "cached": len(self.cached),
                "failed": len(self.failed), "entries": self.entries,
                "failures": [{"key": k, "error": e} for k, e in self.failed],
                "seconds": round(self.seconds, 3)}


def plans_for(limits: Sequence[DeviceLimits], batches: Iterable[tuple[int, int]],
              next_n: Sequence[int] = (1,), varlen: Sequence[bool] = (False, True),
              schedules: Sequence[str] = SCHEDULES, split_kv: int = 256,
              num_sms: int | None = None) -> dict[CodeSpec, Plan]:
    """Every distinct cubin (with an example plan) for the cross product asked for."""
    batches = list(batches)
    out: dict[CodeSpec, Plan] = {}
    for lim in limits:
        for v in varlen:
            for n in ((1,) if v else next_n):  # varlen implies next_n == 1
                for sch in schedules:
                    found = codes_for_batches(batches, n, v, num_sms or lim.sm_count,
                                              split_kv, sch, lim)
                    for code, p in found.items():
                        out.setdefault(code, p)
    return out


def warm(arch: str | Sequence[str] | None = None, *, device: int | None = None,
         num_sms: int | None = None, batches: str | Iterable[tuple[int, int]] = "1-65536",
         next_n: Sequence[int] = (1,), varlen: Sequence[bool] = (False, True),
         schedules: Sequence[str] = SCHEDULES, split_kv: int = 256, jobs: int = 1,
         cache=None, progress: Callable[[int, int], None] | None = None,
         load: bool = False) -> WarmResult:
    """Compile (or find cached) every cubin a deployment needs.

    Parameters mirror ``jitmeta-cache warm``. With ``device`` the arch and SM count
    are read off that GPU, and with ``load=True`` the modules are also loaded there,
    so later calls (including inside CUDA-graph capture) need no compile or load.
    """
    t0 = time.perf_counter()
    if isinstance(batches, str):
        batches = parse_batches(batches)
    if device is not None:
        from .api import device_limits

        limits = [device_limits(device)]
    else:
        archs = [arch] if isinstance(arch, str) or arch is None else list(arch)
        limits = [limits_for_arch(a or "sm_90", num_sms) for a in archs]
    wanted = plans_for(limits, batches, next_n, varlen, schedules, split_kv, num_sms)
    result = WarmResult()
    todo = list(wanted.items())

    def one(item):
        code, p = item
        built = jit_build.build(code, p, cache=cache)
        if load and device is not None:
            from .api import prepare

            prepare(device, p.batch, p.next_n, code.varlen, p.num_sms, code.split_kv,
                    code.schedule)
        return built

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, item): item for item in todo}
        for fut in as_completed(futures):
            code, p = futures[fut]
            try:
                built = fut.result()
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                key = jit_build.key_for(code)[0]
                result.failed.append((key, f"{type(exc).__name__}: {exc}"))
            else:
                result.plans[built.key] = p
                (result.compiled if built.source == "compiled" else result.cached).append(
                    built.key)
            done += 1
            if progress is not None:
                progress(done, len(todo))
    result.seconds = time.perf_counter() - t0
    return result
