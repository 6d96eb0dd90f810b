"""Render -> compile -> cache for one :class:`CodeSpec`: memory, then disk, then NVRTC.

This is the only place that decides between a cache hit and a compile, so it holds
the process counters (:func:`stats`) and the offline-mode and read-only policies.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shlex
import threading
import time
from dataclasses import dataclass, replace

from .. import envs
from ..heuristics.plan import CodeSpec, Plan
from ..impls.render import kernel_names, render
from .cache import CacheError, DiskCache, cache_key
from .compiler import (CompileOptions, NvrtcUnavailableError, compile_cubin,
                       cuda_bindings_version)
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
          "offline_misses": 0, "publish_lost": 0, "quarantined": 0, "pruned": 0}
_caches: dict[str, DiskCache] = {}


def stats() -> dict[str, int]:
    """Process-wide counters of this process.

    ``memory_hits``, ``disk_hits``, ``compiles``, ``misses`` (not in memory nor on
    disk), ``offline_misses``, ``publish_lost`` (another process published first),
    ``quarantined`` (bad entries found on load) and ``pruned`` (entries evicted to
    honour JITMETA_CACHE_MAX_BYTES).
    """
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


def warm_command(plan: Plan, cache_dir=None) -> str:
    """The ``jitmeta-cache warm`` command that produces ``plan``'s cubin.

    Planner and compiler knobs in effect are prefixed as environment assignments;
    ``cache_dir`` adds ``--cache-dir`` so that the command fills that exact cache.
    """
    c = plan.code
    env = []
    for name in ("JITMETA_VARIANT", "JITMETA_THREADS", "JITMETA_CHUNK",
                 "JITMETA_SMEM_BUDGET"):
        val = envs.get(name)
        if val is not None:
            env.append(f"{name}={val}")
    flags = envs.get("JITMETA_NVRTC_FLAGS")
    if flags:
        env.append("JITMETA_NVRTC_FLAGS=" + shlex.quote(" ".join(flags)))
    cmd = ["jitmeta-cache"]
    if cache_dir is not None:
        cmd += ["--cache-dir", shlex.quote(str(cache_dir))]
    cmd += ["warm", "--arch", c.arch, "--num-sms", str(plan.num_sms), "--batch",
            str(plan.batch), "--next-n", str(plan.next_n), "--varlen",
            "yes" if c.varlen else "no", "--format", c.schedule, "--split-kv",
            str(c.split_kv)]
    return " ".join(env + cmd)


def _code_command(code: CodeSpec, cache_dir=None) -> str:
    """Best-effort warm command when only the code (no shape) is known."""
    where = f" --cache-dir {shlex.quote(str(cache_dir))}" if cache_dir is not None else ""
    return (f"jitmeta-cache{where} warm --arch {code.arch} --varlen "
            f"{'yes' if code.varlen else 'no'} --format {code.schedule} --split-kv "
            f"{code.split_kv} --batch <the batch sizes you serve>")


def _record_miss(code: CodeSpec, plan: Plan | None, key: str, offline: bool) -> None:
    """Append one JSON line describing a miss to JITMETA_MISS_MANIFEST (if set).

    One ``write`` of one short line to an ``O_APPEND`` file: lines from concurrent
    processes do not interleave. ``jitmeta-cache warm --manifest FILE`` replays it.
    """
    path = envs.get("JITMETA_MISS_MANIFEST")
    if not path:
        return
    record = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "key": key, "code": {k: getattr(code, k) for k in code.__dataclass_fields__},
        "nvrtc_flags": list(envs.get("JITMETA_NVRTC_FLAGS")), "offline": bool(offline),
        "plan": plan.to_dict() if plan is not None else None,
    }
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        with _lock:
            first = path not in _manifest_warned
            _manifest_warned.add(path)
        if first:
            log.warning("jitmeta: cannot record misses to JITMETA_MISS_MANIFEST=%s (%s)",
                        path, exc)


_manifest_warned: set[str] = set()


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
        return replace(hit, source="memory")
    with _lock:
        klock = _key_locks.setdefault(key, threading.Lock())
    with klock:
        hit = _memory.get(key)
        if hit is not None:
            _count("memory_hits")
            return replace(hit, source="memory")
        built = _build_locked(code, plan, key, source, options, names, cache, offline)
        _memory[key] = built
        return built


def _apply_log_level() -> None:
    """JITMETA_LOG, when set, is the level of the 'jitmeta' logger (read at each build,
    never at import; no handler is added: the application decides where logs go)."""
    level = envs.get("JITMETA_LOG")
    if level is not None:
        wanted = getattr(logging, level.upper())
        if log.level != wanted:
            log.setLevel(wanted)


def _build_locked(code, plan, key, source, options, names, cache, offline) -> Built:
    _apply_log_level()
    offline = envs.get("JITMETA_OFFLINE") if offline is None else offline
    use_disk = not envs.get("JITMETA_DISABLE_DISK_CACHE")
    disk = (cache or cache_for_root()) if use_disk else None
    if disk is not None:
        disk.problems.pop(key, None)
        entry = disk.load(key)
        if entry is not None:
            _count("disk_hits")
            log.debug("cache hit %s (%s) in %s", key[:16], code.name, disk.root)
            return Built(key, code, entry.cubin, names, entry.meta, "disk")
        if key in disk.problems:  # a bad entry was found and moved aside
            _count("quarantined")
    _count("misses")
    _record_miss(code, plan, key, bool(offline))
    if offline:
        _count("offline_misses")
        raise OfflineMissError(_offline_message(code, plan, key, disk))
    lock = None
    can_publish = disk is not None and disk.writable()
    if can_publish:
        disk.sweep_tmp()
        try:
            lock = disk.lock(key)
            lock.acquire()
        except Exception as exc:  # noqa: BLE001 - filelock.Timeout, an unusable lock dir
            disk.warn_once("lock", f"jitmeta: no compile lock for {key[:16]} ({exc}); "
                                   "compiling without it (duplicate work is possible, "
                                   "results are not affected)")
            lock = None
        try:
            entry = disk.load(key)  # the lock holder may have published it meanwhile
        except BaseException:
            if lock is not None:
                lock.release()
            raise
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
        try:
            result = compile_cubin(source, options, name=f"{code.name}.cu")
        except NvrtcUnavailableError as exc:
            raise NvrtcUnavailableError(_no_nvrtc_message(code, plan, key, disk, exc)) \
                from exc
        _count("compiles")
        meta = _metadata(code, plan, options, names, result.cubin,
                         time.perf_counter() - t0, result.nvrtc_version)
        if can_publish:
            _publish(disk, key, result.cubin, meta, source)
        return Built(key, code, result.cubin, names, meta, "compiled")
    finally:
        if lock is not None:
            lock.release()


def _publish(disk: DiskCache, key: str, cubin: bytes, meta: dict, source: str) -> None:
    """Publish, then hold the cache to JITMETA_CACHE_MAX_BYTES (LRU, sparing ``key``)."""
    try:
        _, won = disk.publish(key, cubin, meta, source)
    except (OSError, CacheError) as exc:
        disk.warn_once("publish", f"jitmeta: could not write to cache {disk.root} "
                                  f"({exc}); keeping cubins in memory")
        return
    if not won:
        _count("publish_lost")
        return
    cap = envs.get("JITMETA_CACHE_MAX_BYTES")
    if cap is not None:
        removed = disk.prune(max_bytes=cap, protect=(key,))
        if removed:
            with _lock:
                _stats["pruned"] += len(removed)
            log.debug("pruned %d LRU entries of %s to JITMETA_CACHE_MAX_BYTES=%d",
                      len(removed), disk.root, cap)


def _describe(code: CodeSpec, plan: Plan | None) -> str:
    if plan is not None:
        return (f"{code.name} (batch {plan.batch}, next_n {plan.next_n}, "
                f"{'varlen' if code.varlen else 'non-varlen'}, {plan.num_sms} SMs, "
                f"format {code.schedule}, split_kv {code.split_kv}, {code.arch})")
    return code.name


def _no_nvrtc_message(code: CodeSpec, plan: Plan | None, key: str,
                      disk: DiskCache | None, exc: Exception) -> str:
    """A cache miss where NVRTC cannot be loaded: same remedy as an offline miss."""
    where = f"the cache at {disk.root}" if disk is not None else "memory"
    root = disk.root if disk is not None else None
    cmd = warm_command(plan, cache_dir=root) if plan is not None else \
        _code_command(code, cache_dir=root)
    return (f"no cubin for {_describe(code, plan)}, key {key[:16]}, is in {where}, and it "
            f"cannot be compiled here: {exc}\nProduce it ahead of time on a machine with "
            f"NVRTC (no GPU needed) with:\n    {cmd}\nthen ship the cache "
            "(jitmeta-cache export/import).")


def _offline_message(code: CodeSpec, plan: Plan | None, key: str,
                     disk: DiskCache | None) -> str:
    what = _describe(code, plan)
    if disk is None:
        where = "memory (JITMETA_DISABLE_DISK_CACHE=1 leaves no disk cache to read)"
    else:
        where = f"the cache at {disk.root}"
        problem = disk.problems.get(key)
        if problem:
            where += f" (its entry was bad: {problem}; it was quarantined)"
    root = disk.root if disk is not None else None
    cmd = warm_command(plan, cache_dir=root) if plan is not None else \
        _code_command(code, cache_dir=root)
    return (f"JITMETA_OFFLINE=1 and no cubin for {what}, key {key[:16]}, is in {where}. "
            f"Produce it ahead of time (no GPU needed) with:\n    {cmd}\n"
            "then ship the cache (jitmeta-cache export/import), or unset JITMETA_OFFLINE "
            "to compile at run time. Set JITMETA_MISS_MANIFEST=FILE to record every miss "
            "and replay them with 'jitmeta-cache warm --manifest FILE'.")
