"""Source -> key -> cubin for one :class:`KernelSource`: memory, then disk, then NVRTC.

This is the only place that decides between a cache hit and a compile, so it holds
the process counters (:func:`stats`) and the offline-mode and read-only policies. It
takes the knob snapshot explicitly and knows no kernel: what a miss message should
say about the configuration comes from the caller (``hint``).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..envs import Knobs
from .cache import CacheError, DiskCache, cache_key
from .compiler import (CompileOptions, NvrtcUnavailableError, compile_cubin,
                       cuda_bindings_version)
from .cubin_info import kernel_resources
from .render import render
from .source import KernelSource

__all__ = ["Built", "OfflineMissError", "build", "stats", "reset_stats", "key_for",
           "cache_for", "cache_for_root", "default_root", "options_for", "bytecode_dir"]

log = logging.getLogger("jitmeta")


class OfflineMissError(RuntimeError):
    """JITMETA_OFFLINE=1 and the cubin for a configuration is not in the cache."""


@dataclass(frozen=True)
class Built:
    key: str
    kernel: KernelSource
    cubin: bytes
    names: tuple[str, ...]
    meta: dict
    source: str  # where it came from: "memory", "disk" or "compiled"
    #: the entry is in the disk cache (published and read back, or loaded from it)
    stored: bool = False
    #: why publishing a compiled cubin failed (None: not attempted, or it worked)
    store_error: str | None = None


_lock = threading.Lock()
_memory: dict[str, Built] = {}
_key_locks: dict[str, threading.Lock] = {}
_stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "misses": 0,
          "offline_misses": 0, "publish_lost": 0, "quarantined": 0, "pruned": 0}
_caches: dict[tuple, DiskCache] = {}


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


def default_root() -> Path:
    """platformdirs' user cache dir for "jitmeta" (the root when JITMETA_CACHE_DIR is
    not set)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("jitmeta", appauthor=False))


def cache_for_root(root=None, knobs: Knobs | None = None) -> DiskCache:
    """One DiskCache object per root and cache settings (it remembers which warnings it
    has shown and which entries it found bad). ``root`` defaults to the knobs' cache
    dir, then :func:`default_root`; the settings (trust, lock timeout, size cap) come
    from ``knobs`` (default: a snapshot now) and are passed to the cache explicitly."""
    if knobs is None:
        from ..envs import snapshot

        knobs = snapshot()
    if root is None:
        root = knobs.cache_dir
    root = Path(root) if root is not None else default_root()
    settings = {"allow_shared": knobs.allow_shared_cache,
                "lock_timeout": knobs.lock_timeout,
                "max_bytes": knobs.cache_max_bytes,
                "runtime_dir": os.environ.get("XDG_RUNTIME_DIR")}
    tag = (str(root), *sorted((k, str(v)) for k, v in settings.items()))
    with _lock:
        c = _caches.get(tag)
        if c is None:
            c = _caches[tag] = DiskCache(root, **settings)
        return c


def cache_for(knobs: Knobs) -> DiskCache | None:
    """The disk cache the knobs select (None with JITMETA_DISABLE_DISK_CACHE=1)."""
    if knobs.disable_disk_cache:
        return None
    return cache_for_root(None, knobs)


def options_for(source: KernelSource, knobs: Knobs) -> CompileOptions:
    """The exact NVRTC options of ``source`` under ``knobs`` (JITMETA_NVRTC_FLAGS)."""
    return CompileOptions(arch=source.arch, extra=tuple(knobs.nvrtc_flags))


_bytecode_dirs: dict[tuple, str | None] = {}


def bytecode_dir(disk: DiskCache | None) -> str | None:
    """Where Jinja's compiled templates may be kept: the disk cache's ``jinja``
    directory when it is private to this user and trusted (loading them runs their
    code, like a cubin's), else None. Decided once per cache."""
    if disk is None:
        return None
    k = (str(disk.root), disk.allow_shared)
    if k in _bytecode_dirs:
        return _bytecode_dirs[k]
    path = disk.private_dir(disk.jinja_dir.name)
    found = _bytecode_dirs[k] = str(path) if path is not None else None
    return found


def key_for(source: KernelSource, knobs: Knobs, disk: DiskCache | None = None
            ) -> tuple[str, str, CompileOptions]:
    """(key, rendered CUDA, options) of ``source`` under ``knobs``."""
    options = options_for(source, knobs)
    return (*_keyed(source, options, bytecode_dir(disk)), options)


@functools.lru_cache(maxsize=512)
def _keyed(source: KernelSource, options: CompileOptions, bytecode_dir: str | None
           ) -> tuple[str, str]:
    """(key, rendered CUDA): the rendering is memoized as well, so the key is hashed
    once per source and options (a plan's first call asks for it twice)."""
    text = render(source, bytecode_dir)
    return cache_key(text, options.as_bytes(), source.arch, source.kernels), text


def _record_miss(path: str | None, source: KernelSource, knobs: Knobs, key: str,
                 example: dict | None, offline: bool) -> None:
    """Append one JSON line describing a miss to JITMETA_MISS_MANIFEST (if set).

    One ``write`` of one short line to an ``O_APPEND`` file: lines from concurrent
    processes do not interleave. ``jitmeta-cache warm --manifest FILE`` replays it.
    """
    if not path:
        return
    record = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "key": key, "family": source.family, "code": dict(source.describe),
        "nvrtc_flags": list(knobs.nvrtc_flags), "offline": bool(offline),
        "plan": example,
    }
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
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


def _metadata(source: KernelSource, example: dict | None, options: CompileOptions,
              cubin: bytes, seconds: float, nvrtc: str) -> dict:
    describe = dict(source.describe)
    return {
        "family": source.family,
        "code": describe,
        "code_name": source.name,
        "variant": describe.get("variant", source.family),
        "arch": source.arch,
        "kernel_names": list(source.kernels),
        "nvrtc_options": [o.decode() for o in options.as_bytes()],
        "nvrtc_version": nvrtc,
        "cuda_bindings_version": cuda_bindings_version(),
        "resources": {n: kernel_resources(cubin, n) for n in source.kernels},
        "example_plan": example,
        "compile_seconds": round(seconds, 4),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _apply_log_level(knobs: Knobs) -> None:
    """JITMETA_LOG, when set, is the level of the 'jitmeta' logger (applied at each
    build, never at import; no handler is added: the application decides where logs
    go)."""
    if knobs.log is not None:
        wanted = getattr(logging, knobs.log.upper())
        if log.level != wanted:
            log.setLevel(wanted)


def build(source: KernelSource, knobs: Knobs, *, cache: DiskCache | None = None,
          offline: bool | None = None, example: dict | Callable[[], dict] | None = None,
          hint: str | Callable[[], str] | None = None,
          what: str | Callable[[], str] | None = None) -> Built:
    """The cubin for ``source``: from memory, the disk cache, or a fresh NVRTC compile.

    Parameters
    ----------
    source : KernelSource
        What to build.
    knobs : jitmeta.envs.Knobs
        The knob snapshot (cache root, offline mode, NVRTC flags, lock timeout, ...).
    cache : DiskCache, optional
        Use this cache instead of the one the knobs select.
    offline : bool, optional
        Override ``knobs.offline``.
    example : dict, optional
        A plan the cubin serves (recorded in the entry's metadata and in misses).
    hint : str, optional
        How to produce this cubin ahead of time (the ``jitmeta-cache warm`` command);
        quoted by the offline-miss error.
    what : str, optional
        The configuration in words, for that error (default: the source's name).

    ``example``, ``hint`` and ``what`` may be zero-argument callables: only a miss
    needs them, and a cache hit (a serving process's first call) then never makes them.

    Concurrent callers for one key compile it once: threads through a per-key lock,
    processes through the disk cache's per-key file lock (bounded wait, then compile
    anyway).
    """
    disk = cache if cache is not None else cache_for(knobs)
    key, text, options = key_for(source, knobs, disk)
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
        built = _build_locked(source, knobs, key, text, options, disk,
                              knobs.offline if offline is None else offline, example,
                              hint, what)
        _memory[key] = built
        return built


def _build_locked(source, knobs, key, text, options, disk, offline, example, hint,
                  what) -> Built:
    _apply_log_level(knobs)
    names = source.kernels
    if disk is not None:
        disk.problems.pop(key, None)
        entry = disk.load(key)
        if entry is not None:
            _count("disk_hits")
            log.debug("cache hit %s (%s) in %s", key[:16], source.name, disk.root)
            return Built(key, source, entry.cubin, names, entry.meta, "disk", stored=True)
        if key in disk.problems:  # a bad entry was found and moved aside
            _count("quarantined")
    _count("misses")
    example, hint, what = (v() if callable(v) else v for v in (example, hint, what))
    _record_miss(knobs.miss_manifest, source, knobs, key, example, offline)
    if offline:
        _count("offline_misses")
        raise OfflineMissError(_offline_message(source, key, disk, hint, what))
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
            return Built(key, source, entry.cubin, names, entry.meta, "disk", stored=True)
    elif disk is not None:
        disk.warn_once("readonly", f"jitmeta cache {disk.root} is not writable: using its "
                                   "entries, compiling misses into memory only")
    try:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("compiling %s (key %s); rendered source:\n%s", source.name,
                      key[:16], text)
        t0 = time.perf_counter()
        try:
            result = compile_cubin(text, options, name=f"{source.name}.cu")
        except NvrtcUnavailableError as exc:
            raise NvrtcUnavailableError(_no_nvrtc_message(source, key, disk, hint, what,
                                                          exc)) from exc
        _count("compiles")
        meta = _metadata(source, example, options, result.cubin,
                         time.perf_counter() - t0, result.nvrtc_version)
        error = _publish(disk, knobs, key, result.cubin, meta, text) if can_publish else None
        return Built(key, source, result.cubin, names, meta, "compiled",
                     stored=can_publish and error is None, store_error=error)
    finally:
        if lock is not None:
            lock.release()


def _publish(disk: DiskCache, knobs: Knobs, key: str, cubin: bytes, meta: dict,
             text: str) -> str | None:
    """Publish (the entry is read back before it counts as stored), then hold the cache
    to JITMETA_CACHE_MAX_BYTES (LRU, sparing ``key``). Returns None when the entry is
    in the cache, else why not."""
    try:
        _, won = disk.publish(key, cubin, meta, text)
    except (OSError, CacheError) as exc:
        disk.warn_once("publish", f"jitmeta: could not write to cache {disk.root} "
                                  f"({exc}); keeping cubins in memory")
        return f"{type(exc).__name__}: {exc}"
    if not won:
        _count("publish_lost")
        return None
    cap = knobs.cache_max_bytes
    if cap is not None:
        removed = disk.prune(max_bytes=cap, protect=(key,))
        if removed:
            with _lock:
                _stats["pruned"] += len(removed)
            log.debug("pruned %d LRU entries of %s to JITMETA_CACHE_MAX_BYTES=%d",
                      len(removed), disk.root, cap)
    return None


def _no_nvrtc_message(source: KernelSource, key: str, disk: DiskCache | None,
                      hint: str | None, what: str | None, exc: Exception) -> str:
    """A cache miss where NVRTC cannot be loaded: the remedy of an offline miss."""
    where = f"the cache at {disk.root}" if disk is not None else "memory"
    cmd = hint or f"jitmeta-cache warm ... (the configuration {source.name})"
    return (f"no cubin for {what or source.name}, key {key[:16]}, is in {where}, and it "
            f"cannot be compiled here: {exc}\nProduce it ahead of time on a machine with "
            f"NVRTC (no GPU needed) with:\n    {cmd}\nthen ship the cache "
            "(jitmeta-cache export/import).")


def _offline_message(source: KernelSource, key: str, disk: DiskCache | None,
                     hint: str | None, what: str | None) -> str:
    if disk is None:
        where = "memory (JITMETA_DISABLE_DISK_CACHE=1 leaves no disk cache to read)"
    else:
        where = f"the cache at {disk.root}"
        problem = disk.problems.get(key)
        if problem:
            where += f" (its entry was bad: {problem}; it was quarantined)"
    cmd = hint or f"jitmeta-cache warm ... (the configuration {source.name})"
    return (f"JITMETA_OFFLINE=1 and no cubin for {what or source.name}, key {key[:16]}, is in "
            f"{where}. Produce it ahead of time (no GPU needed) with:\n    {cmd}\n"
            "then ship the cache (jitmeta-cache export/import), or unset JITMETA_OFFLINE "
            "to compile at run time. Set JITMETA_MISS_MANIFEST=FILE to record every miss "
            "and replay them with 'jitmeta-cache warm --manifest FILE'.")
