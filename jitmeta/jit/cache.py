"""The on-disk cubin cache: content-addressed, atomically published, verified on load.

Layout under the root (``JITMETA_CACHE_DIR`` or platformdirs' user cache dir)::

    v1/entries/<key[:2]>/<key>/kernel.cubin   the cubin
                              /meta.json      key inputs, plan, versions, sha256, ...
                              /last_used      LRU stamp (its content: a unix time)
    v1/tmp/        entries being built (same filesystem, published by one rename)
    v1/quarantine/ entries that failed verification, moved aside

The key hashes only the inputs that change the cubin (rendered source, exact NVRTC
option bytes, exact arch, kernel names, schema version): never paths, never compiler
output, so a cache baked on one machine hits on another. The NVRTC version is
recorded in the metadata, not keyed: an entry must stay loadable where no NVRTC is
installed. Locks (``filelock``, i.e. ``flock``) live in a node-local directory and only
avoid duplicate work: the kernel releases them when a holder dies, waits are bounded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .. import envs

__all__ = ["SCHEMA_VERSION", "cache_key", "CacheEntry", "DiskCache", "default_root",
           "CacheError", "lock_dir"]

log = logging.getLogger("jitmeta")

SCHEMA_VERSION = 1
CUBIN = "kernel.cubin"
META = "meta.json"
STAMP = "last_used"
LOCK_TIMEOUT_S = 60.0
STALE_TMP_S = 3600.0


class CacheError(RuntimeError):
    """The cache cannot be used as asked (bad root, refused permissions, ...)."""


def cache_key(source: str, option_bytes: list[bytes], arch: str,
              kernel_names: tuple[str, ...]) -> str:
    """sha256 of everything that changes the cubin, length-prefixed field by field."""
    h = hashlib.sha256()

    def field(tag: str, data: bytes) -> None:
        h.update(tag.encode() + b"\x00" + len(data).to_bytes(8, "little") + data)

    field("schema", str(SCHEMA_VERSION).encode())
    field("arch", arch.encode())
    field("names", "\x00".join(kernel_names).encode())
    for opt in option_bytes:
        field("opt", opt)
    field("source", source.encode())
    return h.hexdigest()


def default_root() -> Path:
    root = envs.get("JITMETA_CACHE_DIR")
    if root:
        return Path(root)
    import platformdirs

    return Path(platformdirs.user_cache_dir("jitmeta", appauthor=False))


def lock_dir() -> Path:
    """Node-local lock directory (never on a network filesystem)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.access(base, os.W_OK):
        base = tempfile.gettempdir()
    return Path(base) / f"jitmeta-locks-{os.getuid()}"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    cubin: bytes
    meta: dict


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mkdir_private(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


class DiskCache:
    """One cache root. Thread- and process-safe; readers never see partial entries."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.base = self.root / f"v{SCHEMA_VERSION}"
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        self.read_only = False

    # --- paths ---------------------------------------------------------------------
    @property
    def entries_dir(self) -> Path:
        return self.base / "entries"

    @property
    def tmp_dir(self) -> Path:
        return self.base / "tmp"

    @property
    def quarantine_dir(self) -> Path:
        return self.base / "quarantine"

    def entry_dir(self, key: str) -> Path:
        return self.entries_dir / key[:2] / key

    # --- warnings shown once per cache and kind --------------------------------------
    def warn_once(self, kind: str, message: str) -> None:
        with self._warn_lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning(message)

    # --- safety ----------------------------------------------------------------------
    def _check_trusted(self) -> None:
        """Refuse a root writable by other users unless JITMETA_ALLOW_SHARED_CACHE=1."""
        if envs.get("JITMETA_ALLOW_SHARED_CACHE"):
            return
        for d in (self.root, self.base, self.entries_dir):
            try:
                st = d.stat()
            except FileNotFoundError:
                continue
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (st.st_mode & stat.S_ISVTX
                                                                     and st.st_uid == os.getuid()):
                raise CacheError(
                    f"refusing to load cubins from {d}: it is writable by other users "
                    f"(mode {stat.filemode(st.st_mode)}), so anyone could plant code that "
                    "runs in this process. Fix its permissions (chmod go-w), point "
                    "JITMETA_CACHE_DIR elsewhere, or set JITMETA_ALLOW_SHARED_CACHE=1 if "
                    "every writer is trusted")

    def writable(self) -> bool:
        """Whether entries can be published here (creating the root if needed)."""
        try:
            _mkdir_private(self.tmp_dir)
            _mkdir_private(self.entries_dir)
        except OSError:
            return False
        return os.access(self.tmp_dir, os.W_OK | os.X_OK) and os.access(
            self.entries_dir, os.W_OK | os.X_OK)

    # --- read ------------------------------------------------------------------------
    def load(self, key: str, touch: bool = True) -> CacheEntry | None:
        """The verified entry for ``key``, or None (a bad entry is quarantined)."""
        d = self.entry_dir(key)
        if not d.is_dir():
            return None
        self._check_trusted()
        problem = None
        try:
            meta = json.loads((d / META).read_text())
            cubin = (d / CUBIN).read_bytes()
            if meta.get("key") != key:
                problem = f"metadata key {meta.get('key')!r} does not match"
            elif meta.get("cubin_sha256") != _sha256(cubin):
                problem = "cubin checksum mismatch"
            elif meta.get("cubin_bytes") != len(cubin) or not cubin.startswith(b"\x7fELF"):
                problem = "cubin truncated or not an ELF file"
        except (OSError, ValueError) as exc:
            if not d.is_dir():  # removed under us (prune/clear): a plain miss
                return None
            problem = f"unreadable ({exc})"
        if problem is not None:
            self.quarantine(key, problem)
            return None
        if touch:
            self.touch(key)
        return CacheEntry(key, d, cubin, meta)

    def quarantine(self, key: str, reason: str) -> Path | None:
        """Move a bad entry aside (never loaded again); warn once per key."""
        src = self.entry_dir(key)
        dst = self.quarantine_dir / f"{key}.{int(time.time())}.{uuid.uuid4().hex[:8]}"
        moved = None
        try:
            _mkdir_private(self.quarantine_dir)
            os.rename(src, dst)
            (dst / "REASON").write_text(reason + "\n")
            moved = dst
        except OSError:
            pass  # read-only root or a racing process moved it first
        self.warn_once(f"quarantine:{key}",
                       f"jitmeta cache entry {key[:16]} in {self.root} is bad ({reason}); "
                       + ("moved to " + str(dst) if moved else "could not move it aside")
                       + "; it will not be loaded")
        return moved

    def touch(self, key: str) -> None:
        try:
            (self.entry_dir(key) / STAMP).write_text(f"{time.time():.3f}\n")
        except OSError:
            pass  # read-only root: LRU stamps are best effort

    def last_used(self, key: str) -> float:
        d = self.entry_dir(key)
        try:
            return float((d / STAMP).read_text())
        except (OSError, ValueError):
            try:
                return (d / META).stat().st_mtime
            except OSError:
                return 0.0

    # --- write -----------------------------------------------------------------------
    def publish(self, key: str, cubin: bytes, meta: dict) -> tuple[CacheEntry, bool]:
        """Build the entry in a temp dir and rename it into place.

        Returns (entry, won): when another process published ``key`` first, its entry
        is kept, ours is discarded, and ``won`` is False (the caller may keep using
        its own fresh cubin either way).
        """
        _mkdir_private(self.tmp_dir)
        final = self.entry_dir(key)
        _mkdir_private(final.parent)
        meta = dict(meta, key=key, cubin_sha256=_sha256(cubin), cubin_bytes=len(cubin),
                    schema=SCHEMA_VERSION)
        tmp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.", dir=self.tmp_dir))
        try:
            for name, data in ((CUBIN, cubin),
                               (META, json.dumps(meta, indent=1, sort_keys=True).encode()),
                               (STAMP, f"{time.time():.3f}\n".encode())):
                with open(tmp / name, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            os.chmod(tmp, 0o700)
            try:
                os.rename(tmp, final)
                won = True
            except OSError:
                if not final.is_dir():
                    raise
                won = False  # lost the race: a complete entry is already there
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(key, final, cubin, meta), won

    def sweep_tmp(self, older_than_s: float = STALE_TMP_S) -> int:
        """Remove temp build dirs left by killed processes."""
        n = 0
        now = time.time()
        try:
            items = list(self.tmp_dir.iterdir())
        except OSError:
            return 0
        for p in items:
            try:
                if now - p.stat().st_mtime > older_than_s:
                    shutil.rmtree(p, ignore_errors=True)
                    n += 1
            except OSError:
                continue
        return n

    # --- enumerate / maintain --------------------------------------------------------
    def keys(self) -> Iterator[str]:
        try:
            shards = sorted(self.entries_dir.iterdir())
        except OSError:
            return
        for shard in shards:
            try:
                for d in sorted(shard.iterdir()):
                    if d.is_dir() and len(d.name) == 64:
                        yield d.name
            except OSError:
                continue

    def read_meta(self, key: str) -> dict | None:
        try:
            return json.loads((self.entry_dir(key) / META).read_text())
        except (OSError, ValueError):
            return None

    def entry_bytes(self, key: str) -> int:
        d = self.entry_dir(key)
        total = 0
        try:
            for p in d.iterdir():
                total += p.stat().st_size
        except OSError:
            pass
        return total

    def quarantined(self) -> int:
        try:
            return sum(1 for _ in self.quarantine_dir.iterdir())
        except OSError:
            return 0

    def remove(self, key: str) -> bool:
        """Delete an entry: rename it out of the way first so readers never see half."""
        d = self.entry_dir(key)
        doomed = self.tmp_dir / f"rm.{key[:16]}.{uuid.uuid4().hex[:8]}"
        try:
            _mkdir_private(self.tmp_dir)
            os.rename(d, doomed)
        except OSError:
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def prune(self, max_bytes: int | None = None, older_than_s: float | None = None
              ) -> list[str]:
        """Evict least-recently-used entries until under ``max_bytes``, and entries not
        used for ``older_than_s`` seconds. Returns the removed keys, oldest first."""
        rows = sorted(((self.last_used(k), k, self.entry_bytes(k)) for k in self.keys()))
        removed = []
        now = time.time()
        total = sum(r[2] for r in rows)
        for used, key, size in rows:
            too_old = older_than_s is not None and now - used > older_than_s
            too_big = max_bytes is not None and total > max_bytes
            if (too_old or too_big) and self.remove(key):
                removed.append(key)
                total -= size
        return removed

    def lock(self, key: str):
        """A per-key inter-process lock in the node-local lock directory."""
        import filelock

        d = lock_dir()
        _mkdir_private(d)
        root_tag = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
        return filelock.FileLock(str(d / f"{root_tag}-{key[:32]}.lock"),
                                 timeout=LOCK_TIMEOUT_S)
