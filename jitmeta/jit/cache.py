"""The on-disk cubin cache: content-addressed, atomically published, verified on load.

Layout under the root (``JITMETA_CACHE_DIR`` or platformdirs' user cache dir)::

    v1/entries/<key[:2]>/<key>/kernel.cubin   the cubin
                              /kernel.cu      the rendered source (a key input)
                              /meta.json      key inputs, plan, versions, checksums, ...
                              /last_used      LRU stamp (its content: a unix time)
    v1/tmp/        entries being built, and entries being deleted
    v1/quarantine/ entries that failed verification, moved aside with a REASON file

Invariants the rest of the package relies on:

* The key hashes only the inputs that change the cubin (rendered source, exact NVRTC
  option bytes, exact arch, kernel names, schema version): never paths, never compiler
  output, so a cache baked on one machine hits on another. The NVRTC version is
  recorded in the metadata, not keyed: an entry must stay loadable where no NVRTC is
  installed.
* An entry appears by one ``rename`` of a complete, fsynced temp directory on the
  same filesystem and disappears by one ``rename`` out of ``entries/``; a reader sees
  a whole entry or none. ``last_used`` is the only file that changes afterwards and
  is not covered by a checksum.
* ``meta.json`` carries the sha256 of the cubin and of the source and a sha256 of
  itself (``meta_sha256``, over its canonical JSON without that field), so a bit flip
  anywhere in an entry is caught on load; :meth:`DiskCache.check` additionally
  re-derives the key from the recorded inputs (``verify``).
* Locks (``filelock``, i.e. ``flock``) live in a node-local directory and only avoid
  duplicate work: the kernel drops them when a holder dies, waits are bounded.
* Temp directories are named ``<kind>-<key16>-<host>-<pid>-<random>`` so that a sweep
  can tell a dead local builder's leftovers from a live one's work in progress.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .. import envs

__all__ = ["SCHEMA_VERSION", "cache_key", "CacheEntry", "DiskCache", "default_root",
           "CacheError", "lock_dir", "meta_checksum", "parse_meta", "cubin_mismatch",
           "deep_problem", "cubin_problem", "makedirs_private", "ENTRY_FILES", "CUBIN",
           "SOURCE", "META", "STAMP"]

log = logging.getLogger("jitmeta")

SCHEMA_VERSION = 1
CUBIN = "kernel.cubin"
SOURCE = "kernel.cu"
META = "meta.json"
STAMP = "last_used"
#: Files an entry may hold; every one but STAMP is covered by a checksum.
ENTRY_FILES = (CUBIN, SOURCE, META, STAMP)
LOCK_TIMEOUT_S = 60.0
STALE_TMP_S = 3600.0
_EM_CUDA = 190
_META_REQUIRED = ("key", "schema", "arch", "variant", "kernel_names", "nvrtc_options",
                  "nvrtc_version", "created", "cubin_sha256", "cubin_bytes")


class CacheError(RuntimeError):
    """The cache cannot be used as asked (untrusted root, unusable directory, ...)."""


def cache_key(source: str, option_bytes: list[bytes], arch: str,
              kernel_names: Iterable[str]) -> str:
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


def meta_checksum(meta: dict) -> str:
    """sha256 of ``meta``'s canonical JSON, ``meta_sha256`` itself left out."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


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


def makedirs_private(path: Path) -> None:
    """``mkdir -p`` where every directory *we* create is 0700 (not only the last)."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: Path) -> tuple[bytes, os.stat_result]:
    """Contents and stat of a regular file, never following a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.lru_cache(maxsize=1)
def _filelock_kwargs() -> dict:
    """Refuse filelock's soft (marker-file) fallback: a SIGKILLed holder of a soft lock
    would block others until the timeout. Only newer filelock releases have the knob."""
    import inspect

    import filelock

    params = inspect.signature(filelock.FileLock.__init__).parameters
    return {"fallback_to_soft": False} if "fallback_to_soft" in params else {}


def cubin_problem(cubin: bytes, arch: str | None = None,
                  kernel_names: Iterable[str] = ()) -> str | None:
    """Why ``cubin`` is not a plausible CUDA cubin for ``arch`` defining the kernels,
    or None. Reads the ELF header only (no binary tools)."""
    if len(cubin) < 64 or not cubin.startswith(b"\x7fELF"):
        return "cubin is not an ELF file"
    if cubin[4] != 2 or cubin[5] != 1:
        return "cubin is not a 64-bit little-endian ELF file"
    machine = int.from_bytes(cubin[0x12:0x14], "little")
    if machine != _EM_CUDA:
        return f"ELF machine is {machine}, not CUDA ({_EM_CUDA})"
    if arch is not None and cubin[8] == 8:  # ABI version 8: SM number in e_flags[15:8]
        flags = int.from_bytes(cubin[0x30:0x34], "little")
        sm = (flags >> 8) & 0xFF
        digits = "".join(ch for ch in arch if ch.isdigit())
        if digits and sm != int(digits):
            return f"cubin targets sm_{sm}, metadata says {arch}"
    for name in kernel_names:
        if b".text." + name.encode() + b"\x00" not in cubin:
            return f"cubin defines no kernel {name!r}"
    return None


def parse_meta(key: str, raw: bytes) -> tuple[str | None, dict]:
    """(problem or None, meta) of an entry's ``meta.json`` bytes: valid JSON object,
    its own checksum, the expected key and this schema."""
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        return f"metadata is not valid JSON ({exc})", {}
    if meta.get("meta_sha256") != meta_checksum(meta):
        return "metadata checksum mismatch", meta
    if meta.get("key") != key:
        return f"metadata is for key {str(meta.get('key'))[:16]}", meta
    if meta.get("schema") != SCHEMA_VERSION:
        return f"schema {meta.get('schema')!r} is not {SCHEMA_VERSION}", meta
    return None, meta


def cubin_mismatch(meta: dict, cubin: bytes) -> str | None:
    """Why ``cubin`` is not the one ``meta`` describes (size, sha256, ELF magic)."""
    if meta.get("cubin_bytes") != len(cubin):
        return f"cubin has {len(cubin)} bytes, metadata says {meta.get('cubin_bytes')}"
    if meta.get("cubin_sha256") != _sha256(cubin):
        return "cubin checksum mismatch"
    if not cubin.startswith(b"\x7fELF"):
        return "cubin is not an ELF file"
    return None


def deep_problem(key: str, meta: dict, cubin: bytes, source: bytes | None,
                 files: Iterable[str]) -> str | None:
    """The checks of ``verify`` beyond :func:`parse_meta` and :func:`cubin_mismatch`.

    Required metadata fields; no files but :data:`ENTRY_FILES`; the source's sha256;
    the key re-derived from the recorded inputs (source, option bytes, arch, kernel
    names); and the cubin's ELF header (CUDA machine, SM number, kernel symbols).
    """
    missing = [f for f in _META_REQUIRED if f not in meta]
    if missing:
        return f"metadata lacks {', '.join(missing)}"
    extra = sorted(set(files) - set(ENTRY_FILES))
    if extra:
        return f"unexpected files in the entry: {', '.join(extra)}"
    if "source_sha256" in meta:
        if source is None:
            return "source file missing"
        if _sha256(source) != meta["source_sha256"]:
            return "source checksum mismatch"
        try:
            derived = cache_key(source.decode(), [o.encode() for o in meta["nvrtc_options"]],
                                meta["arch"], meta["kernel_names"])
        except (AttributeError, TypeError, UnicodeDecodeError) as exc:
            return f"metadata key inputs malformed ({exc})"
        if derived != key:
            return "key does not match the recorded source and options"
    elif source is not None:
        return "source file present but not recorded in the metadata"
    try:
        return cubin_problem(cubin, str(meta["arch"]), list(meta["kernel_names"]))
    except TypeError as exc:
        return f"metadata malformed ({exc})"


class DiskCache:
    """One cache root. Thread- and process-safe; readers never see partial entries."""

    def __init__(self, root: Path | str | None = None, *, allow_shared: bool | None = None,
                 lock_timeout: float = LOCK_TIMEOUT_S):
        self.root = Path(root) if root is not None else default_root()
        self.allow_shared = allow_shared
        self.lock_timeout = lock_timeout
        self.base = self.root / f"v{SCHEMA_VERSION}"
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        #: key -> why the last load of it failed (for offline error messages)
        self.problems: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"DiskCache({str(self.root)!r})"

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
    def check_trusted(self, key: str | None = None) -> None:
        """Raise :class:`CacheError` when another user could have planted an entry.

        Loading a cubin runs its code in this process, so every directory on the way
        to an entry (root, ``v1``, ``entries``, the shard and the entry) must be
        owned by us or root and not writable by group or others. The root alone may
        be a sticky shared directory (like /tmp). ``JITMETA_ALLOW_SHARED_CACHE=1``
        turns the check off for a cache every writer of which is trusted.
        """
        allow = self.allow_shared
        if allow is None:
            allow = envs.get("JITMETA_ALLOW_SHARED_CACHE")
        if allow:
            return
        dirs = [self.root, self.base, self.entries_dir]
        if key is not None:
            dirs += [self.entries_dir / key[:2], self.entry_dir(key)]
        me = os.getuid()
        for i, d in enumerate(dirs):
            try:
                st = d.lstat()
            except FileNotFoundError:
                continue
            except OSError:
                continue  # unreadable: the load itself will fail as a miss
            if stat.S_ISLNK(st.st_mode) and i > 0:
                self._refuse(d, "is a symbolic link inside the cache")
            if stat.S_ISLNK(st.st_mode):
                st = d.stat()
            if st.st_uid not in (me, 0):
                self._refuse(d, f"is owned by uid {st.st_uid}, not by this user "
                                f"(uid {me}) or root")
            shared = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if shared and not (i == 0 and st.st_mode & stat.S_ISVTX):
                self._refuse(d, f"is writable by other users (mode "
                                f"{stat.filemode(st.st_mode)})")

    def _refuse(self, d: Path, why: str) -> None:
        raise CacheError(
            f"jitmeta refuses to load cubins from the cache at {self.root}: {d} {why}, "
            "so another user could plant code that runs in this process. Fix the "
            "permissions (chown to this user, chmod go-w), point JITMETA_CACHE_DIR (or "
            "--cache-dir) elsewhere, or set JITMETA_ALLOW_SHARED_CACHE=1 if every writer "
            "of this directory is trusted")

    def writable(self) -> bool:
        """Whether entries can be published here (creating the directories if needed)."""
        try:
            makedirs_private(self.tmp_dir)
            makedirs_private(self.entries_dir)
        except OSError:
            return False
        return os.access(self.tmp_dir, os.W_OK | os.X_OK) and os.access(
            self.entries_dir, os.W_OK | os.X_OK)

    # --- read ------------------------------------------------------------------------
    def check(self, key: str, deep: bool = False) -> tuple[str | None, bytes, dict]:
        """(problem or None, cubin, meta) of the entry for ``key``.

        The quick check (every load) covers the metadata's own checksum, its key and
        schema, the cubin's size and sha256 and its ELF magic. ``deep`` (``verify``,
        import) adds :func:`deep_problem`. Raises FileNotFoundError when no entry
        exists.
        """
        d = self.entry_dir(key)
        try:
            raw_meta, _ = _read_file(d / META)
        except FileNotFoundError:
            if not d.is_dir():
                raise
            return "metadata file missing", b"", {}
        except OSError as exc:
            return f"metadata unreadable ({exc.strerror or exc})", b"", {}
        problem, meta = parse_meta(key, raw_meta)
        if problem:
            return problem, b"", meta
        try:
            cubin, _ = _read_file(d / CUBIN)
        except OSError as exc:
            return f"cubin unreadable ({exc.strerror or exc})", b"", meta
        problem = cubin_mismatch(meta, cubin)
        if problem or not deep:
            return problem, cubin, meta
        try:
            files = set(os.listdir(d))
        except OSError as exc:
            return f"entry unreadable ({exc.strerror or exc})", cubin, meta
        source = None
        if SOURCE in files:
            try:
                source, _ = _read_file(d / SOURCE)
            except OSError as exc:
                return f"source unreadable ({exc.strerror or exc})", cubin, meta
        return deep_problem(key, meta, cubin, source, files), cubin, meta

    def load(self, key: str, touch: bool = True) -> CacheEntry | None:
        """The verified entry for ``key``, or None (a bad entry is quarantined).

        Raises :class:`CacheError` when the cache directories are not trusted.
        """
        self.check_trusted(key)
        d = self.entry_dir(key)
        try:
            problem, cubin, meta = self.check(key)
        except FileNotFoundError:
            return None
        if problem is not None:
            # Entries change only by whole-directory renames: re-read once, in case
            # another process replaced or removed this one while we were reading it.
            try:
                problem, cubin, meta = self.check(key)
            except FileNotFoundError:
                return None
        if problem is not None:
            self.quarantine(key, problem)
            return None
        self.problems.pop(key, None)
        if touch:
            self.touch(key)
        return CacheEntry(key, d, cubin, meta)

    def quarantine(self, key: str, reason: str) -> Path | None:
        """Move a bad entry aside (never loaded again); warn once per key."""
        self.problems[key] = reason
        src = self.entry_dir(key)
        dst = self.quarantine_dir / f"{key}.{int(time.time())}.{uuid.uuid4().hex[:8]}"
        moved = None
        try:
            makedirs_private(self.quarantine_dir)
            os.rename(src, dst)
            moved = dst
            (dst / "REASON").write_text(reason + "\n")
        except OSError:
            pass  # read-only root, or a racing process moved it first
        self.warn_once(f"quarantine:{key}",
                       f"jitmeta cache entry {key[:16]} in {self.root} is bad ({reason}); "
                       + (f"moved it to {dst}" if moved else "could not move it aside")
                       + "; it will not be loaded")
        return moved

    def touch(self, key: str, when: float | None = None) -> None:
        """Write the LRU stamp (best effort: a read-only root keeps its stamps)."""
        stamp = self.entry_dir(key) / STAMP
        try:
            fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o600)
        except OSError:
            return
        try:
            os.write(fd, f"{time.time() if when is None else when:.3f}\n".encode())
        except OSError:
            pass
        finally:
            os.close(fd)

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
    def _tmp_name(self, kind: str, key: str) -> str:
        return f"{kind}-{key[:16]}-{_host_tag()}-{os.getpid()}-"

    def publish(self, key: str, cubin: bytes, meta: dict, source: str | None = None
                ) -> tuple[CacheEntry, bool]:
        """Build the entry in a temp dir and rename it into place.

        Returns (entry, won): when another process published ``key`` first, its entry
        is kept, ours is discarded, and ``won`` is False (the caller may keep using
        its own fresh cubin either way).
        """
        makedirs_private(self.tmp_dir)
        final = self.entry_dir(key)
        makedirs_private(final.parent)
        meta = {k: v for k, v in meta.items() if k not in ("meta_sha256", "source_sha256",
                                                          "source_bytes")}
        meta.update(key=key, cubin_sha256=_sha256(cubin), cubin_bytes=len(cubin),
                    schema=SCHEMA_VERSION)
        files = [(CUBIN, cubin)]
        if source is not None:
            src = source.encode()
            meta.update(source_sha256=_sha256(src), source_bytes=len(src))
            files.append((SOURCE, src))
        meta["meta_sha256"] = meta_checksum(meta)
        files += [(META, json.dumps(meta, indent=1, sort_keys=True).encode() + b"\n"),
                  (STAMP, f"{time.time():.3f}\n".encode())]
        tmp = Path(tempfile.mkdtemp(prefix=self._tmp_name("new", key), dir=self.tmp_dir))
        try:
            for name, data in files:
                _write_file(tmp / name, data)
            _fsync_dir(tmp)
            try:
                os.rename(tmp, final)
                won = True
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not final.is_dir():
                    raise
                won = False  # lost the race: a complete entry is already there
            else:
                _fsync_dir(final.parent)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(key, final, cubin, meta), won

    def sweep_tmp(self, older_than_s: float = STALE_TMP_S) -> int:
        """Remove temp dirs left by killed processes: at once when their creator was a
        process of this host that is gone, else once older than ``older_than_s``."""
        n = 0
        now = time.time()
        try:
            items = list(self.tmp_dir.iterdir())
        except OSError:
            return 0
        host = _host_tag()
        for p in items:
            parts = p.name.split("-")
            dead = False
            if len(parts) == 5 and parts[2] == host and parts[3].isdigit():
                pid = int(parts[3])
                if pid == os.getpid():
                    continue  # our own work in progress (another thread)
                dead = not _pid_alive(pid)
            try:
                if dead or now - p.lstat().st_mtime > older_than_s:
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()
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
                    if d.is_dir() and len(d.name) == 64 and d.name[:2] == shard.name:
                        yield d.name
            except OSError:
                continue

    def read_meta(self, key: str) -> dict | None:
        try:
            meta = json.loads((self.entry_dir(key) / META).read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def entry_bytes(self, key: str) -> int:
        return _tree_bytes(self.entry_dir(key))

    def total_bytes(self) -> int:
        return sum(self.entry_bytes(k) for k in self.keys())

    def quarantined(self) -> int:
        try:
            return sum(1 for _ in self.quarantine_dir.iterdir())
        except OSError:
            return 0

    def info(self) -> dict:
        """Root, entry count, bytes, quarantined count, temp dirs; creates nothing."""
        keys = list(self.keys())
        try:
            tmp = sum(1 for _ in self.tmp_dir.iterdir())
        except OSError:
            tmp = 0
        return {"root": str(self.root), "exists": self.root.is_dir(),
                "writable": _probe_writable(self.root), "schema": SCHEMA_VERSION,
                "entries": len(keys), "bytes": sum(self.entry_bytes(k) for k in keys),
                "quarantined": self.quarantined(),
                "quarantine_bytes": _tree_bytes(self.quarantine_dir), "tmp": tmp,
                "max_bytes": envs.get("JITMETA_CACHE_MAX_BYTES"),
                "lock_dir": str(lock_dir())}

    def remove(self, key: str) -> bool:
        """Delete an entry: rename it out of ``entries/`` first, so that readers see
        all of it or none. False when it was not there (or could not be moved)."""
        d = self.entry_dir(key)
        try:
            makedirs_private(self.tmp_dir)
            doomed = Path(tempfile.mkdtemp(prefix=self._tmp_name("rm", key),
                                           dir=self.tmp_dir))
        except OSError:
            return False
        try:
            os.rename(d, doomed / key)
        except OSError:
            os.rmdir(doomed)
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def prune(self, max_bytes: int | None = None, older_than_s: float | None = None,
              protect: Iterable[str] = ()) -> list[str]:
        """Evict least-recently-used entries (by our own ``last_used`` stamp, never
        atime) until at most ``max_bytes`` remain, and entries unused for
        ``older_than_s`` seconds. Keys in ``protect`` stay. Returns the removed keys,
        least recently used first."""
        keep = set(protect)
        rows = sorted((self.last_used(k), k, self.entry_bytes(k)) for k in self.keys())
        removed = []
        now = time.time()
        total = sum(r[2] for r in rows)
        for used, key, size in rows:
            if key in keep:
                continue
            too_old = older_than_s is not None and now - used > older_than_s
            too_big = max_bytes is not None and total > max_bytes
            if not (too_old or too_big):
                continue
            if self.remove(key):
                removed.append(key)
                total -= size
            elif not self.entry_dir(key).exists():  # another pruner got it first
                total -= size
        self.sweep_tmp()
        return removed

    @property
    def jinja_dir(self) -> Path:
        """Jinja's compiled templates (jitmeta.impls.render keeps them here)."""
        return self.base / "jinja"

    def clear(self) -> int:
        """Remove every entry, the quarantine, the compiled templates and stale temp
        dirs; returns entries removed. Builders running meanwhile keep working (they
        publish afresh)."""
        n = sum(1 for k in list(self.keys()) if self.remove(k))
        for d in (self.quarantine_dir, self.jinja_dir):
            try:
                for p in list(d.iterdir()):
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
            except OSError:
                pass
        self.sweep_tmp(older_than_s=0.0)
        return n

    def lock(self, key: str):
        """A per-key inter-process lock (``flock``) in the node-local lock directory.

        Raises :class:`CacheError` when the lock directory is not ours (another user
        could hold our locks forever; callers then compile without the lock).
        """
        import filelock

        d = lock_dir()
        makedirs_private(d)
        st = d.lstat()
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise CacheError(f"lock directory {d} is not a private directory of this user")
        root_tag = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
        return filelock.FileLock(str(d / f"{root_tag}-{key[:32]}.lock"),
                                 timeout=self.lock_timeout, **_filelock_kwargs())


def _tree_bytes(path: Path) -> int:
    total = 0
    try:
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass
    except OSError:
        pass
    return total


def _probe_writable(root: Path) -> bool:
    """Whether ``root`` (or its nearest existing ancestor) accepts new files."""
    p = root
    while not p.exists() and p.parent != p:
        p = p.parent
    return os.access(p, os.W_OK | os.X_OK)
