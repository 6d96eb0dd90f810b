"""Ahead-of-time compilation: map deployment shapes to the few cubins serving them.

``jitmeta-cache warm`` is a thin wrapper over :func:`warm`; engines may call it at
start-up (before CUDA-graph capture) too, as ``jitmeta.warm``. (The module is not named
``warm``: importing a submodule sets the package attribute of its name, so
``import jitmeta.warm`` would have replaced the function ``jitmeta.warm`` by a module.)
"""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from . import envs, kernels
from .heuristics.arch import DeviceLimits, limits_for_arch, normalize_arch
from .heuristics.plan import CodeSpec, Plan
from .jit import build as jit_build

__all__ = ["warm", "warm_manifest", "read_manifest", "WarmResult", "parse_batches",
           "plans_for"]


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
              schedules: Sequence[str] | None = None, split_kv: int = 256,
              num_sms: int | None = None, knobs: envs.Knobs | None = None
              ) -> dict[CodeSpec, Plan]:
    """Every distinct cubin (with an example plan) for the cross product asked for."""
    knobs = envs.snapshot() if knobs is None else knobs
    batches = list(batches)
    out: dict[CodeSpec, Plan] = {}
    for lim in limits:
        for v in varlen:
            for n in ((1,) if v else next_n):  # varlen implies next_n == 1
                for sch in (kernels.SCHEDULES if schedules is None else schedules):
                    found = kernels.codes_for_batches(batches, n, v, num_sms or lim.sm_count,
                                                      split_kv, sch, lim, knobs)
                    for code, p in found.items():
                        out.setdefault(code, p)
    return out


def _check_warm_args(num_sms, next_n, varlen, schedules, split_kv, jobs):
    from .args import MAX_NUM_SMS, MAX_SPLIT_KV, bool_arg, int_arg

    if num_sms is not None:
        int_arg("num_sms", num_sms, 1, MAX_NUM_SMS)
    int_arg("split_kv", split_kv, 1, MAX_SPLIT_KV)
    int_arg("jobs", jobs, 1)
    for name, values in (("next_n", next_n), ("varlen", varlen), ("schedules", schedules)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"{name} must be a sequence; got {values!r}")
    for n in next_n:
        int_arg("next_n", n, 1)
    for v in varlen:
        bool_arg("varlen", v)
    for s in schedules:
        if s not in kernels.SCHEDULES:
            raise ValueError(f"schedules must hold formats among "
                             f"{', '.join(kernels.SCHEDULES)}; got {s!r}")


def warm(arch: str | Sequence[str] | None = None, *, device: int | None = None,
         num_sms: int | None = None, batches: str | Iterable[tuple[int, int]] = "1-65536",
         next_n: Sequence[int] = (1,), varlen: Sequence[bool] = (False, True),
         schedules: Sequence[str] | None = None, split_kv: int = 256, jobs: int = 1,
         cache=None, progress: Callable[[int, int], None] | None = None,
         load: bool = False) -> WarmResult:
    """Compile (or find cached) every cubin a deployment needs.

    Parameters mirror ``jitmeta-cache warm`` (``schedules``: default every format).
    With ``device`` the arch and SM count are read off that GPU, and with ``load=True``
    the modules are also loaded there, so later calls (including inside CUDA-graph
    capture) need no compile or load.
    """
    t0 = time.perf_counter()
    schedules = kernels.SCHEDULES if schedules is None else schedules
    _check_warm_args(num_sms, next_n, varlen, schedules, split_kv, jobs)
    schedules = tuple(schedules)
    if isinstance(batches, str):
        batches = parse_batches(batches)
    knobs = envs.snapshot()
    if device is not None:
        from .api import require_cuda_device
        from .dispatch import device_limits

        device = require_cuda_device(device)
        limits = [device_limits(device)]
    else:
        if load:
            raise ValueError("load=True needs device=N (the GPU to load the modules on)")
        archs = [arch] if isinstance(arch, str) or arch is None else list(arch)
        limits = [limits_for_arch(normalize_arch(a or "sm_90"), num_sms) for a in archs]
    wanted = plans_for(limits, batches, next_n, varlen, schedules, split_kv, num_sms, knobs)

    def after(code: CodeSpec, p: Plan) -> None:
        if load and device is not None:
            from .dispatch import prepare

            prepare(device, p.batch, p.next_n, code.varlen, p.num_sms, code.split_kv,
                    p.schedule, knobs)

    result = _build_all(list(wanted.items()), jobs, cache, knobs, progress, after)
    result.seconds = time.perf_counter() - t0
    return result


def _build_all(todo: list, jobs: int, cache, knobs: envs.Knobs, progress, after=None,
               result: WarmResult | None = None) -> WarmResult:
    """Build (code, plan-or-None) items on ``jobs`` threads (NVRTC releases the GIL)."""
    result = result if result is not None else WarmResult()

    def one(item):
        code, p = item
        fam = kernels.family(code.schedule)
        built = jit_build.build(fam.source(code), knobs, cache=cache,
                                example=p.to_dict if p is not None else None)
        if after is not None and p is not None:
            after(code, p)
        return built

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, item): item for item in todo}
        for fut in as_completed(futures):
            code, p = futures[fut]
            try:
                built = fut.result()
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                try:
                    key = jit_build.key_for(kernels.source(code), knobs)[0]
                except Exception:  # noqa: BLE001 - the render itself failed
                    key = code.name
                result.failed.append((key, f"{type(exc).__name__}: {exc}"))
            else:
                if built.store_error is not None:
                    # compiled, but the entry did not land in the disk cache
                    result.failed.append((built.key, "compiled but not stored in the "
                                                     f"cache: {built.store_error}"))
                else:
                    result.plans[built.key] = p
                    (result.compiled if built.source == "compiled" else
                     result.cached).append(built.key)
            done += 1
            if progress is not None:
                progress(done, len(todo))
    return result


def read_manifest(path) -> tuple[list[tuple[CodeSpec, Plan | None, tuple[str, ...]]],
                                 list[str]]:
    """Parse a miss manifest (``JITMETA_MISS_MANIFEST``): one JSON object per line.

    Returns (items, errors): each item is (code, example plan or None, NVRTC flags)
    with duplicates (same code and flags) dropped; ``errors`` name bad lines.
    """
    items, errors, seen = [], [], set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                code = CodeSpec(**rec["code"])
                asked = code.schedule
                # a format this version knows; its code as this version generates it
                code = kernels.family(asked).kernel_code(code)
                flags = tuple(rec.get("nvrtc_flags") or ())
                if not all(isinstance(x, str) for x in flags):
                    raise TypeError("nvrtc_flags must be strings")
                plan = None
                pd = rec.get("plan")
                if pd:
                    plan = Plan(code, *(pd[k] for k in (
                        "batch", "next_n", "num_sms", "grid", "smem_static_bytes",
                        "smem_dynamic_bytes", "reason")), pd.get("schedule", asked))
            except (ValueError, TypeError, KeyError) as exc:
                errors.append(f"{path}:{lineno}: not a miss record ({exc})")
                continue
            if (code, flags) in seen:
                continue
            seen.add((code, flags))
            items.append((code, plan, flags))
    return items, errors


def warm_manifest(path, *, jobs: int = 1, cache=None,
                  progress: Callable[[int, int], None] | None = None) -> WarmResult:
    """Build every configuration recorded in a miss manifest (``warm --manifest``).

    Each record names the exact code and NVRTC flags that missed, so the replay
    produces the very keys that were looked up, whatever the planner knobs now.
    """
    t0 = time.perf_counter()
    items, errors = read_manifest(path)
    result = WarmResult()
    result.failed.extend(("-", e) for e in errors)
    groups: dict[tuple[str, ...], list] = {}
    for code, plan, flags in items:
        groups.setdefault(flags, []).append((code, plan))
    total = len(items)
    base = 0

    def step(done: int, _n: int) -> None:
        if progress is not None:
            progress(base + done, total)

    knobs = envs.snapshot()
    for flags, todo in groups.items():
        group_knobs = dataclasses.replace(knobs, nvrtc_flags=flags)
        _build_all(todo, jobs, cache, group_knobs, step, result=result)
        base += len(todo)
    result.seconds = time.perf_counter() - t0
    return result
