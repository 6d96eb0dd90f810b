"""Render -> compile -> cache for one :class:`CodeSpec`: memory, then disk, then NVRTC.

This is the only place that decides between a cache hit and a compile, so it holds
the process counters (:func:`stats`) and the offline-mode and read-only policies.
"""

from __future__ import annotations

import datetime
import logging
import shlex
import threading
import time
from dataclasses import dataclass

from .. import envs
from ..heuristics.plan import CodeSpec, Plan
from ..impls.render import kernel_names, render
from .cache import CacheError, DiskCache, cache_key
from .compiler import CompileOptions, compile_cubin, cuda_bindings_version
from .cubin_info import kernel_resources

__all__ = ["Built", "OfflineMissError", "build", "stats", "reset_stats", "warm_command",
           "key_for", "cache_for_root"]

log = logging.getLogger("jitmeta")


class OfflineMissError(RuntimeError):
    """JITMETA_OFFLINE=1 and the cubin for a configuration is not in the cache."""


@dataclass(frozen=True)
class Built:
    key: str
    code: CodeSpec
    cubin: bytes
    names: tuple[str, ...]
    meta: dict
    source: str  # "memory", "disk" or "compiled"


_lock = threading.Lock()
_memory: dict[str, Built] = {}
_key_locks: dict[str, threading.Lock] = {}
_stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "misses": 0,
          "offline_misses": 0, "publish_lost": 0}
_caches: dict[str, DiskCache] = {}


def stats() -> dict[str, int]:
    """Process-wide counters: memory/disk hits, compiles, misses."""
    with _lock:
        return dict(_stats)


def reset_stats(clear_memory: bool = False) -> None:
    with _lock:
        for k in _stats:
            _stats[k] = 0
        if clear_memory:
            _memory.clear()


def _count(name: str) -> None:
    with _lock:
        _stats[name] += 1


def cache_for_root(root=None) -> DiskCache:
    """One DiskCache object per root (it remembers which warnings it has shown)."""
    c = DiskCache(root)
    with _lock:
        return _caches.setdefault(str(c.root), c)


def key_for(code: CodeSpec) -> tuple[str, str, CompileOptions, tuple[str, ...]]:
    """(key, source, options, kernel names) of ``code``."""
    source = render(code)
    options = CompileOptions.for_arch(code.arch)
    names = kernel_names(code)
    return cache_key(source, options.as_bytes(), code.arch, names), source, options, names


def warm_command(plan: Plan) -> str:
    """The ``jitmeta-cache warm`` command that produces ``plan``'s cubin."""
    c = plan.code
    env = []
    for name, val in (("JITMETA_VARIANT", envs.get("JITMETA_VARIANT")),
                      ("JITMETA_THREADS", envs.get("JITMETA_THREADS")),
                      ("JITMETA_CHUNK", envs.get("JITMETA_CHUNK")),
                      ("JITMETA_SMEM_BUDGET", envs.get("JITMETA_SMEM_BUDGET"))):
        if val is not None:
            env.append(f"{name}={val}")
    flags = envs.get("JITMETA_NVRTC_FLAGS")
    if flags:
        env.append("JITMETA_NVRTC_FLAGS=" + shlex.quote(" ".join(flags)))
    cmd = (f"jitmeta-cache warm --arch {c.arch} --num-sms {plan.num_sms} "
           f"--batch {plan.batch} --next-n {plan.next_n} "
           f"--varlen {'yes' if c.varlen else 'no'} --format {c.schedule} "
           f"--split-kv {c.split_kv}")
    return " ".join(env + [cmd])


def _metadata(code: CodeSpec, plan: Plan | None, options: CompileOptions,
              names: tuple[str, ...], cubin: bytes, seconds: float, nvrtc: str) -> dict:
    resources = {n: kernel_resources(cubin, n) for n in names}
    return {
        "code": {k: getattr(code, k) for k in code.__dataclass_fields__},
        "code_name": code.name,
        "variant": code.variant,
        "arch": code.arch,
        "kernel_names": list(names),
        "nvrtc_options": [o.decode() for o in options.as_bytes()],
        "nvrtc_version": nvrtc,
        "cuda_bindings_version": cuda_bindings_version(),
        "resources": resources,
        "example_plan": plan.to_dict() if plan is not None else None,
        "compile_seconds": round(seconds, 4),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def build(code: CodeSpec, plan: Plan | None = None, *, cache: DiskCache | None = None,
          offline: bool | None = None) -> Built:
    """The cubin for ``code``: from memory, the disk cache, or a fresh NVRTC compile.

    Concurrent callers for one key compile it once: threads through a per-key lock,
    processes through the disk cache's per-key file lock (bounded wait, then compile
    anyway).
    """
    key, source, options, names = key_for(code)
    hit = _memory.get(key)
    if hit is not None:
        _count("memory_hits")
        return hit
    with _lock:
        klock = _key_locks.setdefault(key, threading.Lock())
    with klock:
        hit = _memory.get(key)
        if hit is not None:
            _count("memory_hits")
            return hit
        built = _build_locked(code, plan, key, source, options, names, cache, offline)
        _memory[key] = built
        return built


def _build_locked(code, plan, key, source, options, names, cache, offline) -> Built:
    offline = envs.get("JITMETA_OFFLINE") if offline is None else offline
    use_disk = not envs.get("JITMETA_DISABLE_DISK_CACHE")
    disk = (cache or cache_for_root()) if use_disk else None
    if disk is not None:
        entry = disk.load(key)
        if entry is not None:
            _count("disk_hits")
            log.debug("cache hit %s (%s) in %s", key[:16], code.name, disk.root)
            return Built(key, code, entry.cubin, names, entry.meta, "disk")
    _count("misses")
    if offline:
        _count("offline_misses")
        where = f"the cache at {disk.root}" if disk is not None else "memory (disk cache disabled)"
        example = plan if plan is not None else None
        cmd = warm_command(example) if example is not None else \
            f"jitmeta-cache warm --arch {code.arch} ..."
        raise OfflineMissError(
            f"JITMETA_OFFLINE=1 and no cubin for {code.name} (key {key[:16]}) is in "
            f"{where}. Produce it at build time with:\n    {cmd}\n"
            "(or unset JITMETA_OFFLINE to compile at run time)")
    lock = None
    if disk is not None and disk.writable():
        disk.sweep_tmp()
        lock = disk.lock(key)
        try:
            lock.acquire()
        except Exception:  # noqa: BLE001 - filelock.Timeout or an unusable lock dir
            disk.warn_once("lock", f"jitmeta: could not take the compile lock for "
                                   f"{key[:16]} in time; compiling without it")
            lock = None
        entry = disk.load(key)  # the lock holder may have published it meanwhile
        if entry is not None:
            if lock is not None:
                lock.release()
            _count("disk_hits")
            return Built(key, code, entry.cubin, names, entry.meta, "disk")
    elif disk is not None:
        disk.warn_once("readonly", f"jitmeta cache {disk.root} is not writable: using its "
                                   "entries, compiling misses into memory only")
    try:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("compiling %s (key %s); rendered source:\n%s", code.name, key[:16],
                      source)
        t0 = time.perf_counter()
        result = compile_cubin(source, options, name=f"{code.name}.cu")
        _count("compiles")
        meta = _metadata(code, plan, options, names, result.cubin,
                         time.perf_counter() - t0, result.nvrtc_version)
        if disk is not None and lock is not None:
            try:
                _, won = disk.publish(key, result.cubin, meta)
                if not won:
                    _count("publish_lost")
            except (OSError, CacheError) as exc:
                disk.warn_once("publish", f"jitmeta: could not write to cache {disk.root} "
                                          f"({exc}); keeping cubins in memory")
        return Built(key, code, result.cubin, names, meta, "compiled")
    finally:
        if lock is not None:
            lock.release()
