"""The on-disk cubin cache: content-addressed, atomically published, verified on load.

Layout under the root (the caller decides the root; see docs/cache.md)::

    v1/entries/<key[:2]>/<key>/kernel.cubin   the cubin
                              /kernel.cu      the rendered source (a key input)
                              /meta.json      key inputs, plan, versions, checksums, ...
                              /last_used      LRU stamp (its modification time)
    v1/tmp/        entries being built, entries being deleted, stamps being written
    v1/quarantine/<key>.<time>.<rand>/entry   an entry that failed verification
                                     /REASON  why
    v1/jinja/      compiled templates (kept by jitmeta.jit.render)

Invariants the rest of the package relies on:

* The key hashes only the inputs that change the cubin (rendered source, exact NVRTC
  option bytes, exact arch, kernel names, schema version): never paths, never compiler
  output, so a cache baked on one machine hits on another.
* An entry appears by one ``rename`` of a complete, fsynced temp directory on the
  same filesystem and disappears by one ``rename`` out of ``entries/``; a reader sees
  a whole entry or none. ``last_used`` is the only file not covered by a checksum:
  its modification time is the entry's LRU time, moved in place when the stamp is
  ours, else by renaming a new stamp over it.
* Every operation opens the root once, through a walk that checks the owner and mode
  of every directory on the way (the root's parents included, symbolic links
  resolved by the walk itself), and then works relative to that directory
  descriptor: no path inside the cache is ever followed through a symbolic link,
  files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``
  (regular file, size cap) before a byte is read, new files are created with
  ``O_EXCL``, and deletion never follows links.
* :func:`verify_entry` is the one place that decides whether bytes form a good entry;
  loads, ``jitmeta-cache verify`` and bundle import all call it.
* Locks (``filelock``, i.e. ``flock``) live in a node-local directory and only avoid
  duplicate work: the kernel drops them when a holder dies, waits are bounded.
* This module reads no environment variable: the caller passes the root and every
  policy (shared-cache opt-in, lock timeout, size cap) explicitly.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from .cubin_info import EM_CUDA, elf_header, section_names

__all__ = ["SCHEMA_VERSION", "cache_key", "CacheEntry", "DiskCache", "CacheError",
           "CacheFullError", "CacheReadOnlyError", "default_lock_dir", "meta_checksum",
           "parse_json", "verify_entry", "makedirs_private", "ENTRY_FILES", "CUBIN",
           "SOURCE", "META", "STAMP", "MAX_FILE_BYTES", "MAX_JSON_DEPTH",
           "QUARANTINE_KEEP", "LOCK_TIMEOUT_S"]

log = logging.getLogger("jitmeta")

SCHEMA_VERSION = 1
CUBIN = "kernel.cubin"
SOURCE = "kernel.cu"
META = "meta.json"
STAMP = "last_used"
REASON = "REASON"
#: Files an entry may hold; every one but STAMP is covered by a checksum.
ENTRY_FILES = (CUBIN, SOURCE, META, STAMP)
#: The largest file of each kind that is ever read (checked with fstat before reading).
MAX_FILE_BYTES = {CUBIN: 64 << 20, SOURCE: 8 << 20, META: 1 << 20, STAMP: 64}
#: Deepest nesting accepted in meta.json (and a bundle's manifest).
MAX_JSON_DEPTH = 32
#: Quarantined items kept at most (oldest removed first); they also count against
#: the size cap, and are evicted before any live entry.
QUARANTINE_KEEP = 32
LOCK_TIMEOUT_S = 60.0
STALE_TMP_S = 3600.0
_MAX_SYMLINKS = 40
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_SHARD_RE = re.compile(r"^[0-9a-f]{2}$")
_META_REQUIRED = ("key", "schema", "arch", "variant", "kernel_names", "nvrtc_options",
                  "nvrtc_version", "created", "cubin_sha256", "cubin_bytes")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class CacheError(RuntimeError):
    """The cache cannot be used as asked (untrusted root, unusable directory, ...)."""


class CacheFullError(CacheError):
    """A write to the cache failed for lack of space (ENOSPC) or quota (EDQUOT)."""


class CacheReadOnlyError(CacheError):
    """A write to the cache failed because its filesystem or directory is read-only."""


class _BadFile(ValueError):
    """A file of an entry that is not read: not a regular file, or over its size cap."""


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


def meta_checksum(meta: dict, field: str = "meta_sha256") -> str:
    """sha256 of ``meta``'s canonical JSON, the checksum ``field`` itself left out."""
    body = {k: v for k, v in meta.items() if k != field}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_json(raw: bytes, what: str, max_depth: int = MAX_JSON_DEPTH) -> dict:
    """The JSON object in ``raw``; ValueError naming ``what`` for anything else
    (invalid JSON, not an object, nested deeper than ``max_depth``)."""
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to parse") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object")
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"{what} is nested more than {max_depth} levels deep")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return obj


def default_lock_dir(runtime_dir: str | None = None) -> Path:
    """Node-local lock directory: under ``runtime_dir`` (the caller passes
    ``$XDG_RUNTIME_DIR``) when it is usable, else under the system temp dir."""
    base = runtime_dir
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


# --- verification: the one function that judges an entry -----------------------------

def _cubin_problem(cubin: bytes, arch: str, kernel_names: list[str]) -> str | None:
    """Why ``cubin`` is not a CUDA cubin for ``arch`` defining the kernels, or None
    (through the package's one ELF reader, :mod:`jitmeta.jit.cubin_info`)."""
    try:
        head = elf_header(cubin)
        if head["machine"] != EM_CUDA:
            return f"ELF machine is {head['machine']}, not CUDA ({EM_CUDA})"
        if head["abi_version"] == 8:  # ABI version 8: the SM number is e_flags[15:8]
            sm = (head["flags"] >> 8) & 0xFF
            digits = "".join(ch for ch in arch if ch.isdigit())
            if digits and sm != int(digits):
                return f"cubin targets sm_{sm}, metadata says {arch}"
        sections = section_names(cubin)
    except ValueError as exc:
        return f"cubin is not a sound ELF file ({exc})"
    for name in kernel_names:
        if f".text.{name}" not in sections:
            return f"cubin defines no kernel {name!r}"
    return None


def _field_problem(meta: dict) -> str | None:
    """Required metadata fields and their types."""
    missing = [f for f in _META_REQUIRED if f not in meta]
    if missing:
        return f"metadata lacks {', '.join(missing)}"
    for name in ("kernel_names", "nvrtc_options"):
        value = meta[name]
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            return f"metadata field {name} is {value!r}, not a list of strings"
    for name in ("arch", "variant", "nvrtc_version", "created"):
        if not isinstance(meta[name], str):
            return f"metadata field {name} is {meta[name]!r}, not a string"
    return None


def _meta_problem(key: str, raw: bytes) -> tuple[str | None, dict]:
    """The metadata's own checks: bounded JSON object, own checksum, key, schema."""
    try:
        meta = parse_json(raw, "metadata")
    except ValueError as exc:
        return str(exc), {}
    if meta.get("meta_sha256") != meta_checksum(meta):
        return "metadata checksum mismatch", meta
    if meta.get("key") != key:
        return f"metadata is for key {str(meta.get('key'))[:16]}", meta
    if meta.get("schema") != SCHEMA_VERSION:
        return f"schema {meta.get('schema')!r} is not {SCHEMA_VERSION}", meta
    return None, meta


def verify_entry(key: str, files: Mapping[str, bytes], *, deep: bool = False,
                 names: Iterable[str] | None = None) -> tuple[str | None, dict]:
    """(problem or None, meta) of an entry given as ``{file name: bytes}``.

    Always: ``meta.json`` is a JSON object of bounded depth whose own checksum
    (``meta_sha256``) matches, of this key and schema; the cubin has the recorded
    size and sha256 and is an ELF file. ``deep`` (``verify``, bundle import) adds the
    required fields and their types, no files but :data:`ENTRY_FILES` (``names``: the
    entry's listing, default the keys of ``files``), the source's sha256, the key
    re-derived from the recorded inputs, and the cubin's ELF header and kernel
    symbols.
    """
    if META not in files:
        return "metadata file missing", {}
    problem, meta = _meta_problem(key, files[META])
    if problem:
        return problem, meta
    cubin = files.get(CUBIN)
    if cubin is None:
        return "cubin file missing", meta
    if meta.get("cubin_bytes") != len(cubin):
        return (f"cubin has {len(cubin)} bytes, metadata says {meta.get('cubin_bytes')}",
                meta)
    if meta.get("cubin_sha256") != _sha256(cubin):
        return "cubin checksum mismatch", meta
    if not cubin.startswith(b"\x7fELF"):
        return "cubin is not an ELF file", meta
    if not deep:
        return None, meta
    problem = _field_problem(meta)
    if problem:
        return problem, meta
    extra = sorted(set(files if names is None else names) - set(ENTRY_FILES))
    if extra:
        return f"unexpected files in the entry: {', '.join(extra)}", meta
    source = files.get(SOURCE)
    if "source_sha256" in meta:
        if source is None:
            return "source file missing", meta
        if _sha256(source) != meta["source_sha256"]:
            return "source checksum mismatch", meta
        try:
            text = source.decode()
        except UnicodeDecodeError as exc:
            return f"source is not UTF-8 ({exc})", meta
        derived = cache_key(text, [o.encode() for o in meta["nvrtc_options"]],
                            meta["arch"], meta["kernel_names"])
        if derived != key:
            return "key does not match the recorded source and options", meta
    elif source is not None:
        return "source file present but not recorded in the metadata", meta
    return _cubin_problem(cubin, meta["arch"], meta["kernel_names"]), meta


# --- the safe filesystem layer: everything relative to checked directory fds ----------

def _named_error(exc: OSError, what: str, root: Path) -> Exception:
    """ENOSPC / EDQUOT / EROFS as named cache errors carrying the path; else ``exc``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return CacheFullError(
            f"no space left on the device of the jitmeta cache {root} while writing "
            f"{what} ({exc.strerror}); free space, lower JITMETA_CACHE_MAX_BYTES or run "
            "'jitmeta-cache prune', or point JITMETA_CACHE_DIR (--cache-dir) elsewhere")
    if exc.errno == errno.EROFS:
        return CacheReadOnlyError(
            f"the jitmeta cache {root} is on a read-only filesystem (writing {what}); "
            "point JITMETA_CACHE_DIR (--cache-dir) at a writable directory")
    return exc


def _read_at(dir_fd: int, name: str, cap: int, expect_size: int | None = None) -> bytes:
    """The bytes of regular file ``name`` in ``dir_fd``: never through a symbolic link,
    never blocking on a FIFO, and never more than ``cap`` bytes (checked by fstat
    before reading, and again while reading). _BadFile for what must not be read."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _BadFile(f"{name} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _BadFile(f"{name} is not a regular file (mode "
                           f"{stat.filemode(st.st_mode)})")
        if st.st_size > cap:
            raise _BadFile(f"{name} has {st.st_size} bytes, more than the {cap} allowed")
        if expect_size is not None and st.st_size != expect_size:
            raise _BadFile(f"{name} has {st.st_size} bytes, metadata says {expect_size}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise _BadFile(f"{name} grew past the {cap} bytes allowed while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_new(dir_fd: int, name: str, data: bytes, sync: bool = True) -> None:
    """Create ``name`` (it must not exist: O_EXCL, no link followed), write, and fsync
    unless ``sync`` is false."""
    fd = os.open(name, _NEW_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _restamp_at(efd: int, when: float | None) -> bool:
    """Set the modification time of the stamp in the entry open as ``efd`` to ``when``
    (None: now), through an fd opened here without following a link, and only when it
    is a regular file of this user with one link (nothing else can be reached through
    it) that its owner may write (a tree made read-only with chmod keeps its stamps,
    as one on a read-only filesystem does). False otherwise, or when the time cannot
    be set."""
    try:
        fd = os.open(STAMP, _READ_FLAGS, dir_fd=efd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
                or st.st_uid != os.getuid() or not st.st_mode & stat.S_IWUSR):
            return False
        os.utime(fd, None if when is None else (when, when))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass


def _remove_at(dir_fd: int, name: str) -> None:
    """Delete ``name`` in ``dir_fd`` and everything below it without following a link
    (a symbolic link is removed itself; the fd-based rmtree never leaves the tree)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux has it
            raise CacheError("this platform's shutil.rmtree can be redirected through "
                             "symbolic links; refusing to delete cache directories")
        errors = []
        shutil.rmtree(name, dir_fd=dir_fd, onerror=lambda *a: errors.append(a[2][1]))
        if errors:
            raise errors[0]
    else:
        os.unlink(name, dir_fd=dir_fd)


def _tree_bytes_at(dir_fd: int, name: str) -> int:
    """Bytes of the regular files under ``name`` (links not followed)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    total = 0
    try:
        for _root, _dirs, files, rfd in os.fwalk(name, dir_fd=dir_fd):
            for f in files:
                try:
                    total += os.stat(f, dir_fd=rfd, follow_symlinks=False).st_size
                except OSError:
                    pass
    except OSError:
        pass
    return total


def _listdir(fd: int) -> list[str]:
    """Sorted names in the directory open as ``fd`` (listdir reads a duplicate of the
    descriptor; ``fd`` stays open and usable)."""
    return sorted(os.listdir(fd))


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


class _KeyLock:
    """A per-key ``flock`` whose wait is bounded by the cache's lock timeout and
    announced (once per lock file and process) with the holder's lock file."""

    def __init__(self, cache: "DiskCache", key: str, path: str):
        import filelock

        self._cache = cache
        self._key = key
        self.lock_file = path
        self._lock = filelock.FileLock(path, timeout=cache.lock_timeout,
                                       **_filelock_kwargs())

    @property
    def is_locked(self) -> bool:
        return self._lock.is_locked

    def acquire(self, timeout: float | None = None):
        """Take the lock; ``filelock.Timeout`` when the wait is over (``timeout``
        defaults to the cache's lock timeout; 0 means one attempt, no wait)."""
        import filelock

        wait = self._cache.lock_timeout if timeout is None else timeout
        try:
            return self._lock.acquire(timeout=0)
        except filelock.Timeout:
            if timeout is not None and wait <= 0:
                raise
        who = (f"another process holds the compile lock {self.lock_file} for key "
               f"{self._key[:16]} (cache {self._cache.root})")
        if wait <= 0:
            self._cache.warn_once(f"lockwait:{self.lock_file}", f"jitmeta: {who}; not "
                                  "waiting (lock timeout 0, JITMETA_LOCK_TIMEOUT), "
                                  "compiling without it")
            raise filelock.Timeout(self.lock_file)
        self._cache.warn_once(f"lockwait:{self.lock_file}",
                              f"jitmeta: {who}; waiting up to {wait:g} s for it "
                              "(JITMETA_LOCK_TIMEOUT), then compiling without it")
        return self._lock.acquire(timeout=wait)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class DiskCache:
    """One cache root. Thread- and process-safe; readers never see partial entries.

    Parameters
    ----------
    root
        The cache directory (created 0700 on first write, with any missing parent).
    allow_shared
        Skip the owner and mode checks (every writer of the directory is trusted).
        Symbolic links inside the cache are still never followed.
    lock_timeout
        Seconds to wait for another process compiling the same key (0: do not wait).
    max_bytes
        Size cap: the quarantine is held inside it (oldest first) when it grows.
    lock_dir
        Node-local directory of the lock files (default: :func:`default_lock_dir` of
        ``runtime_dir``, decided when first needed: only a compile takes a lock).
    runtime_dir
        The caller's ``$XDG_RUNTIME_DIR``, for that default.
    """

    def __init__(self, root: Path | str, *, allow_shared: bool = False,
                 lock_timeout: float = LOCK_TIMEOUT_S, max_bytes: int | None = None,
                 lock_dir: Path | str | None = None, runtime_dir: str | None = None):
        if root is None:
            raise TypeError("DiskCache(root): root is None; pass the cache directory "
                            "(jitmeta.jit.build.cache_for_root() picks the default)")
        if not lock_timeout >= 0:
            raise ValueError(f"DiskCache(lock_timeout={lock_timeout!r}): expected a "
                             "number of seconds >= 0")
        self.root = Path(root)
        self.base = self.root / f"v{SCHEMA_VERSION}"
        self.allow_shared = bool(allow_shared)
        self.lock_timeout = float(lock_timeout)
        self.max_bytes = max_bytes
        self._lock_dir = Path(lock_dir) if lock_dir is not None else None
        self._runtime_dir = runtime_dir
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        #: key -> why the last load of it failed (for offline error messages)
        self.problems: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"DiskCache({str(self.root)!r})"

    # --- paths (for messages and tests; operations never resolve them) ---------------
    @property
    def entries_dir(self) -> Path:
        return self.base / "entries"

    @property
    def tmp_dir(self) -> Path:
        return self.base / "tmp"

    @property
    def quarantine_dir(self) -> Path:
        return self.base / "quarantine"

    @property
    def jinja_dir(self) -> Path:
        """Jinja's compiled templates (jitmeta.jit.render keeps them here)."""
        return self.base / "jinja"

    def entry_dir(self, key: str) -> Path:
        return self.entries_dir / key[:2] / key

    @property
    def lock_dir(self) -> Path:
        """The node-local directory of the lock files."""
        if self._lock_dir is None:  # racing threads compute the same path
            self._lock_dir = default_lock_dir(self._runtime_dir)
        return self._lock_dir

    def private_dir(self, name: str) -> Path | None:
        """``v1/<name>`` (made, 0700, with any missing parent) when what is found
        there may be trusted like an entry: every directory from ``/`` to it passes
        the trust checks (unless shared caches are allowed) and it is a directory of
        this user that nobody else may write and this process may; else None."""
        try:
            with self._dirs(create=True) as (base,):
                fd = self._open_sub(base, name, self.base / name, True, True)
                try:
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                ok = (st.st_uid == os.getuid()
                      and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                      and os.access(name, os.W_OK | os.X_OK, dir_fd=base))
        except (OSError, CacheError):
            return None
        return self.base / name if ok else None

    # --- warnings shown once per cache and kind --------------------------------------
    def warn_once(self, kind: str, message: str) -> None:
        with self._warn_lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning(message)

    # --- trust: the walk to the root, and every directory below it ------------------
    def _refuse(self, d, why: str) -> None:
        raise CacheError(
            f"jitmeta refuses to use the cache at {self.root}: {d} {why}, so another "
            "user could plant code that runs in this process or redirect its writes. "
            "Fix the permissions (chown to this user, chmod go-w), point "
            "JITMETA_CACHE_DIR (or --cache-dir) elsewhere, or set "
            "JITMETA_ALLOW_SHARED_CACHE=1 if every writer of this directory is trusted")

    def _check_dir(self, fd: int, shown, trust: bool, sticky_ok: bool) -> None:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(shown))
        if not trust or self.allow_shared:
            return
        me = os.getuid()
        if st.st_uid not in (me, 0):
            self._refuse(shown, f"is owned by uid {st.st_uid}, not by this user "
                                f"(uid {me}) or root")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (
                sticky_ok and st.st_mode & stat.S_ISVTX):
            self._refuse(shown, f"is writable by other users (mode "
                                f"{stat.filemode(st.st_mode)})")

    def _open_root(self, create: bool, trust: bool) -> int:
        """An fd of the root, reached component by component from ``/``.

        Every directory on the way is checked like OpenSSH's StrictModes: owned by
        this user or root, and not writable by group or others unless sticky (like
        /tmp). A symbolic link on the way is followed by this walk itself, and only
        when the link is owned by this user or root (its directory was checked just
        before), so nobody else can redirect the walk between the check and the use.
        """
        path = os.path.abspath(os.fspath(self.root))
        todo = [p for p in reversed(path.split("/")) if p]
        fd = os.open("/", _DIR_FLAGS)
        shown, hops = "/", 0
        try:
            self._check_dir(fd, "/", trust, sticky_ok=True)
            while todo:
                name = todo.pop()
                if name == ".":
                    continue
                here = os.path.dirname(shown) if name == ".." else os.path.join(shown, name)
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(errno.ENOENT, "no such directory",
                                                here) from None
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    hops += 1
                    if hops > _MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "too many symbolic links", path)
                    mine = st.st_uid in (os.getuid(), 0)
                    if trust and not self.allow_shared and not mine:
                        self._refuse(here, f"is a symbolic link owned by uid {st.st_uid}")
                    target = os.readlink(name, dir_fd=fd)
                    todo.extend(p for p in reversed(target.split("/")) if p)
                    if target.startswith("/"):
                        nfd = os.open("/", _DIR_FLAGS)
                        os.close(fd)
                        fd, shown = nfd, "/"
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", here)
                nfd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd, shown = nfd, here
                self._check_dir(fd, shown, trust, sticky_ok=True)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_sub(self, parent: int, name: str, shown, create: bool, trust: bool) -> int:
        """An fd of directory ``name`` inside the cache: never a symbolic link; below
        the root the sticky exception does not apply."""
        try:
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such directory",
                                        str(shown)) from None
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    if trust:
                        self._refuse(shown, "is a symbolic link inside the cache")
                    raise OSError(errno.ELOOP, "a symbolic link inside the cache",
                                  str(shown)) from None
                raise NotADirectoryError(errno.ENOTDIR, "not a directory",
                                         str(shown)) from None
            raise
        try:
            self._check_dir(fd, shown, trust, sticky_ok=False)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _dirs(self, *names: str, create: bool = False, trust: bool = True
              ) -> Iterator[list[int]]:
        """fds of ``v1`` and of ``v1/names[0]/names[1]/...``, each checked."""
        fds = [self._open_root(create, trust)]
        try:
            shown = self.root
            for name in (f"v{SCHEMA_VERSION}", *names):
                shown = shown / name
                fds.append(self._open_sub(fds[-1], name, shown, create, trust))
            yield fds[1:]
        finally:
            for fd in fds:
                os.close(fd)

    def check_trusted(self, key: str | None = None) -> None:
        """Raise :class:`CacheError` when another user could have planted an entry or
        could redirect this process's writes.

        Every directory from ``/`` to the root (owned by this user or root, not
        writable by others unless sticky), and below it ``v1``, ``tmp``,
        ``quarantine``, ``jinja``, ``entries``, the shard and the entry (owned by this
        user or root, not writable by others, no symbolic link). Missing directories
        pass (nothing is there to load).
        """
        try:
            fds = [self._open_root(False, True)]
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing there to load; writes will fail with the path
        try:
            try:
                fds.append(self._open_sub(fds[0], f"v{SCHEMA_VERSION}", self.base, False,
                                          True))
            except (FileNotFoundError, NotADirectoryError):
                return
            for sub in ("tmp", "quarantine", "jinja"):
                try:
                    os.close(self._open_sub(fds[1], sub, self.base / sub, False, True))
                except (FileNotFoundError, NotADirectoryError):
                    pass
            shown = self.base
            for name in ["entries"] + ([key[:2], key] if key is not None else []):
                shown = shown / name
                try:
                    fds.append(self._open_sub(fds[-1], name, shown, False, True))
                except (FileNotFoundError, NotADirectoryError):
                    return
        finally:
            for fd in fds:
                os.close(fd)

    def writable(self) -> bool:
        """Whether entries can be published here (creating the directories if needed)."""
        try:
            with self._dirs(create=True) as (base,):
                for name in ("tmp", "entries"):
                    os.close(self._open_sub(base, name, self.base / name, True, True))
                    if not os.access(name, os.W_OK | os.X_OK, dir_fd=base):
                        return False
                return os.access(".", os.W_OK, dir_fd=base)
        except (OSError, CacheError):
            return False

    # --- read ------------------------------------------------------------------------
    def _read_entry(self, efd: int, key: str, deep: bool
                    ) -> tuple[str | None, dict[str, bytes], dict]:
        """(problem, files read, meta) of the entry open as ``efd``."""
        files: dict[str, bytes] = {}
        try:
            files[META] = _read_at(efd, META, MAX_FILE_BYTES[META])
        except FileNotFoundError:
            return "metadata file missing", files, {}
        except _BadFile as exc:
            return str(exc), files, {}
        except OSError as exc:
            return f"metadata unreadable ({exc.strerror or exc})", files, {}
        problem, meta = _meta_problem(key, files[META])
        if problem:
            return problem, files, meta
        size = meta.get("cubin_bytes")
        try:
            files[CUBIN] = _read_at(efd, CUBIN, MAX_FILE_BYTES[CUBIN],
                                    size if isinstance(size, int) else None)
        except FileNotFoundError:
            pass  # verify_entry names it
        except _BadFile as exc:
            return f"cubin not read: {exc}", files, meta
        except OSError as exc:
            return f"cubin unreadable ({exc.strerror or exc})", files, meta
        names = None
        if deep:
            try:
                names = _listdir(efd)
            except OSError as exc:
                return f"entry unreadable ({exc.strerror or exc})", files, meta
            if SOURCE in names:
                try:
                    files[SOURCE] = _read_at(efd, SOURCE, MAX_FILE_BYTES[SOURCE])
                except _BadFile as exc:
                    return f"source not read: {exc}", files, meta
                except OSError as exc:
                    return f"source unreadable ({exc.strerror or exc})", files, meta
        problem, meta = verify_entry(key, files, deep=deep, names=names)
        return problem, files, meta

    def read_entry(self, key: str, deep: bool = False, trust: bool = True
                   ) -> tuple[str | None, dict[str, bytes], dict]:
        """(problem or None, ``{file: bytes}``, meta) of the entry for ``key``: the
        exact bytes that :func:`verify_entry` judged. FileNotFoundError when no entry
        exists; CacheError (``trust``) when the directories are not trusted."""
        return self._read(key, deep, trust, False)[:3]

    def _read(self, key: str, deep: bool, trust: bool, restamp: bool
              ) -> tuple[str | None, dict[str, bytes], dict, bool]:
        """:meth:`read_entry`, and whether a good entry's stamp was moved to now in
        place (``restamp``: :func:`_restamp_at`, through the entry's open fd)."""
        if not _KEY_RE.match(key):
            raise ValueError(f"cache key {key!r} is not 64 lowercase hex digits")
        with self._dirs("entries", key[:2], trust=trust) as (_b, _e, shard):
            st = os.stat(key, dir_fd=shard, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):  # a bad entry (quarantined as a link), not a
                return "entry is a symbolic link", {}, {}, False  # reason to stop loading
            if not stat.S_ISDIR(st.st_mode):
                return "entry is not a directory", {}, {}, False
            efd = self._open_sub(shard, key, self.entry_dir(key), False, trust)
            try:
                problem, files, meta = self._read_entry(efd, key, deep)
                return (problem, files, meta,
                        restamp and problem is None and _restamp_at(efd, None))
            finally:
                os.close(efd)

    def check(self, key: str, deep: bool = False) -> tuple[str | None, bytes, dict]:
        """(problem or None, cubin, meta) of the entry for ``key`` (see
        :func:`verify_entry` for what ``deep`` adds). FileNotFoundError when no entry
        exists."""
        problem, files, meta = self.read_entry(key, deep)
        return problem, files.get(CUBIN, b"") if problem is None else b"", meta

    def load(self, key: str, touch: bool = True) -> CacheEntry | None:
        """The verified entry for ``key``, or None (a bad entry is quarantined).

        ``touch``: move the entry's LRU stamp to now (in place when the stamp is ours,
        else by :meth:`touch`). Raises :class:`CacheError` when the cache directories
        are not trusted.
        """
        for _attempt in range(2):
            # Entries change only by whole-directory renames: re-read once, in case
            # another process replaced or removed this one while we were reading it.
            try:
                problem, files, meta, stamped = self._read(key, False, True, touch)
            except FileNotFoundError:
                return None
            if problem is None:
                break
        else:
            self.quarantine(key, problem)
            return None
        self.problems.pop(key, None)
        if touch and not stamped:
            self._replace_stamp(key, time.time())
        return CacheEntry(key, self.entry_dir(key), files.get(CUBIN, b""), meta)

    # --- quarantine ------------------------------------------------------------------
    def _quarantine_at(self, parent: int, name: str, label: str, reason: str) -> Path:
        """Move ``name`` (in ``parent``) to a fresh ``quarantine/<label>.<t>.<r>/entry``
        and write REASON beside it: only into the directory just made by us."""
        with self._dirs("quarantine", create=True) as (_b, qfd):
            qname = f"{label}.{int(time.time())}.{uuid.uuid4().hex[:8]}"
            os.mkdir(qname, 0o700, dir_fd=qfd)
            qd = self._open_sub(qfd, qname, self.quarantine_dir / qname, False, True)
            try:
                try:
                    os.rename(name, "entry", src_dir_fd=parent, dst_dir_fd=qd)
                except OSError:
                    os.rmdir(qname, dir_fd=qfd)
                    raise
                _write_new(qd, REASON, (reason + "\n").encode())
            finally:
                os.close(qd)
            budget = None
            if self.max_bytes is not None:
                budget = max(0, self.max_bytes - self.total_bytes())
            self._trim_quarantine(qfd, budget)
        return self.quarantine_dir / qname

    def quarantine(self, key: str, reason: str) -> Path | None:
        """Move a bad entry aside (never loaded again); warn once per key."""
        self.problems[key] = reason
        moved = None
        try:
            with self._dirs("entries", key[:2]) as (_b, _e, shard):
                moved = self._quarantine_at(shard, key, key, reason)
        except (OSError, CacheError):
            pass  # read-only or untrusted root, or a racing process moved it first
        self.warn_once(f"quarantine:{key}",
                       f"jitmeta cache entry {key[:16]} in {self.root} is bad ({reason}); "
                       + (f"moved it to {moved}" if moved else "could not move it aside")
                       + "; it will not be loaded")
        return moved

    def _quarantine_items(self, qfd: int) -> list[tuple[float, str, int]]:
        """(time, name, bytes) of the quarantined items, oldest first."""
        rows = []
        for name in _listdir(qfd):
            try:
                when = float(name.split(".")[1])
            except (IndexError, ValueError):
                try:
                    when = os.stat(name, dir_fd=qfd, follow_symlinks=False).st_mtime
                except OSError:
                    continue
            rows.append((when, name, _tree_bytes_at(qfd, name)))
        return sorted(rows)

    def _trim_quarantine(self, qfd: int, budget: int | None = None) -> int:
        """Keep at most QUARANTINE_KEEP items (and at most ``budget`` bytes), removing
        the oldest first; returns the bytes removed."""
        rows = self._quarantine_items(qfd)
        total, freed = sum(r[2] for r in rows), 0
        for i, (_t, name, size) in enumerate(rows):
            over_count = len(rows) - i > QUARANTINE_KEEP
            over_bytes = budget is not None and total > budget
            if not (over_count or over_bytes):
                break
            try:
                _remove_at(qfd, name)
            except FileNotFoundError:
                pass
            total -= size
            freed += size
        return freed

    # --- stamps ----------------------------------------------------------------------
    def touch(self, key: str, when: float | None = None) -> None:
        """Move the LRU stamp to ``when`` (default: now): in place when the stamp is a
        file of ours (:func:`_restamp_at`), else replaced by a rename of a new file
        written in ``tmp/`` (best effort: a read-only root keeps its stamps). Not
        synced: a stamp lost in a crash only makes its entry look older to the
        pruner."""
        when = time.time() if when is None else when
        try:
            with self._dirs("entries", key[:2], key) as (_b, _e, _s, efd):
                if _restamp_at(efd, when):
                    return
        except (OSError, CacheError):
            return
        self._replace_stamp(key, when)

    def _replace_stamp(self, key: str, when: float) -> None:
        """A new stamp file in ``tmp/``, renamed over the entry's (best effort)."""
        data = f"{when:.3f}\n".encode()
        try:
            with self._dirs("tmp", create=True) as (_b, tmp), \
                    self._dirs("entries", key[:2], key) as (_b2, _e, _s, efd):
                name = self._tmp_name("stamp", key) + uuid.uuid4().hex[:8]
                _write_new(tmp, name, data, sync=False)
                try:
                    os.utime(name, (when, when), dir_fd=tmp, follow_symlinks=False)
                    os.rename(name, STAMP, src_dir_fd=tmp, dst_dir_fd=efd)
                except OSError:
                    os.unlink(name, dir_fd=tmp)
        except (OSError, CacheError):
            return

    def last_used(self, key: str) -> float:
        """When the entry was last loaded: its stamp's modification time (the
        metadata file's when there is no stamp; 0.0 when neither can be read)."""
        try:
            with self._dirs("entries", key[:2], key, trust=False) as (*_, efd):
                for name in (STAMP, META):
                    try:
                        st = os.stat(name, dir_fd=efd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        return st.st_mtime
                return 0.0
        except (OSError, CacheError):
            return 0.0

    # --- write -----------------------------------------------------------------------
    def _tmp_name(self, kind: str, key: str) -> str:
        return f"{kind}-{key[:16]}-{_host_tag()}-{os.getpid()}-"

    def publish(self, key: str, cubin: bytes, meta: dict, source: str | None = None
                ) -> tuple[CacheEntry, bool]:
        """Build the entry in a temp dir, rename it into place, and read it back.

        Returns (entry, won): when another process published ``key`` first, its entry
        is kept, ours is discarded, and ``won`` is False. Either way the entry under
        ``key`` was read back and verified before this returns: a caller may count
        it as stored. Raises :class:`CacheFullError` / :class:`CacheReadOnlyError`
        (with the path) for ENOSPC / EROFS, CacheError when the entry does not read
        back, OSError otherwise.
        """
        if not _KEY_RE.match(key):
            raise ValueError(f"cache key {key!r} is not 64 lowercase hex digits")
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
        where: Path = self.root
        won = False
        try:
            with self._dirs(create=True) as (base,):
                where = self.tmp_dir
                tmp = self._open_sub(base, "tmp", where, True, True)
                try:
                    where = self.entry_dir(key).parent
                    with self._dirs("entries", key[:2], create=True) as (_b, _e, shard):
                        name = self._tmp_name("new", key) + uuid.uuid4().hex[:8]
                        where = self.tmp_dir / name
                        os.mkdir(name, 0o700, dir_fd=tmp)
                        try:
                            nfd = self._open_sub(tmp, name, where, False, True)
                            try:
                                for fname, data in files:
                                    where = self.tmp_dir / name / fname
                                    _write_new(nfd, fname, data)
                                os.fsync(nfd)
                            finally:
                                os.close(nfd)
                            where = self.entry_dir(key)
                            try:
                                os.rename(name, key, src_dir_fd=tmp, dst_dir_fd=shard)
                                won = True
                            except OSError as exc:
                                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                                    raise
                            _fsync_fd(shard)
                        finally:
                            if not won:
                                with contextlib.suppress(OSError):
                                    _remove_at(tmp, name)
                finally:
                    os.close(tmp)
        except OSError as exc:
            raise _named_error(exc, str(where), self.root) from None
        try:
            problem, got, back = self.read_entry(key)
        except FileNotFoundError:
            problem, got, back = "it vanished right after the rename", {}, {}
        if problem is not None:
            raise CacheError(f"the entry {key[:16]} just published to {self.root} does not "
                             f"read back: {problem}")
        return CacheEntry(key, self.entry_dir(key), got[CUBIN], back), won

    def sweep_tmp(self, older_than_s: float = STALE_TMP_S) -> int:
        """Remove temp items left by killed processes: at once when their creator was a
        process of this host that is gone, else once older than ``older_than_s``.
        Nothing below ``tmp/`` is followed through a link."""
        n = 0
        now = time.time()
        host = _host_tag()
        try:
            with self._dirs("tmp") as (_b, tmp):
                for name in _listdir(tmp):
                    parts = name.split("-")
                    dead = False
                    if len(parts) == 5 and parts[2] == host and parts[3].isdigit():
                        pid = int(parts[3])
                        if pid == os.getpid():
                            continue  # our own work in progress (another thread)
                        dead = not _pid_alive(pid)
                    try:
                        st = os.stat(name, dir_fd=tmp, follow_symlinks=False)
                        if dead or now - st.st_mtime > older_than_s:
                            _remove_at(tmp, name)
                            n += 1
                    except OSError:
                        continue
        except FileNotFoundError:
            return 0
        return n

    # --- enumerate / maintain --------------------------------------------------------
    def _scan(self, trust: bool = False) -> tuple[list[str], list[str]]:
        """(keys, stray items) under ``entries/``; stray: anything that is neither a
        shard directory nor an entry name of its shard."""
        keys, stray = [], []
        try:
            with self._dirs("entries", trust=trust) as (_b, efd):
                for shard in _listdir(efd):
                    if not _SHARD_RE.match(shard):
                        stray.append(shard)
                        continue
                    try:
                        sfd = self._open_sub(efd, shard, self.entries_dir / shard, False,
                                             trust)
                    except NotADirectoryError:
                        stray.append(shard)
                        continue
                    except OSError as exc:
                        if exc.errno == errno.ELOOP:
                            stray.append(shard)
                        continue
                    try:
                        for name in _listdir(sfd):
                            if _KEY_RE.match(name) and name[:2] == shard:
                                keys.append(name)
                            else:
                                stray.append(f"{shard}/{name}")
                    finally:
                        os.close(sfd)
        except (OSError, CacheError):
            pass
        return keys, stray

    def keys(self) -> Iterator[str]:
        return iter(self._scan()[0])

    def stray(self) -> list[str]:
        """Items under ``entries/`` that are not entries (paths relative to it)."""
        return self._scan()[1]

    def quarantine_stray(self, item: str, reason: str) -> Path | None:
        """Move a stray item of ``entries/`` (see :meth:`stray`) into the quarantine."""
        parts = item.split("/")
        try:
            with self._dirs("entries", *parts[:-1]) as fds:
                return self._quarantine_at(fds[-1], parts[-1], "stray-" + parts[-1][:16],
                                           reason)
        except (OSError, CacheError):
            return None

    def read_meta(self, key: str) -> dict | None:
        """The metadata of an entry for display (unverified), or None."""
        try:
            with self._dirs("entries", key[:2], key, trust=False) as (*_, efd):
                return parse_json(_read_at(efd, META, MAX_FILE_BYTES[META]), "metadata")
        except (OSError, ValueError, CacheError):
            return None

    def entry_bytes(self, key: str) -> int:
        try:
            with self._dirs("entries", key[:2], trust=False) as (*_, sfd):
                return _tree_bytes_at(sfd, key)
        except (OSError, CacheError):
            return 0

    def total_bytes(self) -> int:
        return sum(self.entry_bytes(k) for k in self.keys())

    def _sub_bytes(self, name: str) -> int:
        try:
            with self._dirs(trust=False) as (base,):
                return _tree_bytes_at(base, name)
        except (OSError, CacheError):
            return 0

    def quarantined(self) -> int:
        try:
            with self._dirs("quarantine", trust=False) as (_b, qfd):
                return len(_listdir(qfd))
        except (OSError, CacheError):
            return 0

    def info(self) -> dict:
        """Root, entry count, bytes, quarantined count, temp items; creates nothing."""
        keys = list(self.keys())
        try:
            with self._dirs("tmp", trust=False) as (_b, tfd):
                tmp = len(_listdir(tfd))
        except (OSError, CacheError):
            tmp = 0
        return {"root": str(self.root), "exists": self.root.is_dir(),
                "writable": _probe_writable(self.root), "schema": SCHEMA_VERSION,
                "entries": len(keys), "bytes": sum(self.entry_bytes(k) for k in keys),
                "quarantined": self.quarantined(),
                "quarantine_bytes": self._sub_bytes("quarantine"), "tmp": tmp,
                "max_bytes": self.max_bytes, "lock_dir": str(self.lock_dir),
                "lock_timeout": self.lock_timeout}

    def _remove_in(self, key: str) -> bool:
        """Rename entry ``key`` out of ``entries/`` into a fresh temp dir, then delete
        it there. False when it was not there; OSError when it could not be moved."""
        with self._dirs("entries", key[:2]) as (_b, _e, shard), \
                self._dirs("tmp", create=True) as (_b2, tmp):
            name = self._tmp_name("rm", key) + uuid.uuid4().hex[:8]
            os.mkdir(name, 0o700, dir_fd=tmp)
            dfd = self._open_sub(tmp, name, self.tmp_dir / name, False, True)
            try:
                try:
                    os.rename(key, key, src_dir_fd=shard, dst_dir_fd=dfd)
                except FileNotFoundError:
                    os.rmdir(name, dir_fd=tmp)
                    return False
                except OSError:
                    os.rmdir(name, dir_fd=tmp)
                    raise
            finally:
                os.close(dfd)
            _remove_at(tmp, name)
            return True

    def remove(self, key: str) -> bool:
        """Delete an entry: rename it out of ``entries/`` first, so that readers see
        all of it or none. False when it was not there; raises OSError (EROFS and
        ENOSPC as named cache errors) when it could not be removed."""
        try:
            return self._remove_in(key)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _named_error(exc, str(self.entry_dir(key)), self.root) from None

    def prune(self, max_bytes: int | None = None, older_than_s: float | None = None,
              protect: Iterable[str] = (), errors: list | None = None) -> list[str]:
        """Evict least-recently-used entries (by our own ``last_used`` stamp, never
        atime) until at most ``max_bytes`` remain, and entries unused for
        ``older_than_s`` seconds. Quarantined items count against ``max_bytes`` and go
        first, oldest first. Keys in ``protect`` stay. Returns the removed keys, least
        recently used first; removals that failed are appended to ``errors`` as
        (key, message) when a list is given. Raises CacheError on an untrusted root."""
        self.check_trusted()
        keep = set(protect)
        rows = sorted((self.last_used(k), k, self.entry_bytes(k)) for k in self.keys())
        removed = []
        now = time.time()
        total = sum(r[2] for r in rows)
        if max_bytes is not None:
            try:
                with self._dirs("quarantine") as (_b, qfd):
                    q = sum(r[2] for r in self._quarantine_items(qfd))
                    q -= self._trim_quarantine(qfd, budget=max(0, max_bytes - total))
                    total += q
            except FileNotFoundError:
                pass
            except OSError as exc:
                if errors is not None:
                    errors.append(("quarantine", str(_named_error(
                        exc, str(self.quarantine_dir), self.root))))
        for used, key, size in rows:
            if key in keep:
                continue
            too_old = older_than_s is not None and now - used > older_than_s
            too_big = max_bytes is not None and total > max_bytes
            if not (too_old or too_big):
                continue
            try:
                if self.remove(key):
                    removed.append(key)
                total -= size  # removed by us, or by another pruner first
            except (OSError, CacheError) as exc:
                if errors is not None:
                    errors.append((key, str(exc)))
        self.sweep_tmp()
        return removed

    def clear(self, errors: list | None = None) -> int:
        """Remove every entry, stray item, the quarantine, the compiled templates and
        stale temp items; returns entries removed. Failures go to ``errors`` as
        (item, message). Builders running meanwhile keep working (they publish
        afresh). Raises CacheError on an untrusted root."""
        self.check_trusted()
        n = 0
        for key in self.keys():
            try:
                n += self.remove(key)
            except (OSError, CacheError) as exc:
                if errors is not None:
                    errors.append((key, str(exc)))
        for sub, items in (("entries", self.stray()), ("quarantine", None),
                           ("jinja", None)):
            try:
                with self._dirs(sub) as (_b, dfd):
                    for item in (items if items is not None else _listdir(dfd)):
                        parts = item.split("/")
                        try:
                            if len(parts) == 1:
                                _remove_at(dfd, item)
                            else:
                                sfd = self._open_sub(dfd, parts[0], self.base / sub /
                                                     parts[0], False, True)
                                try:
                                    _remove_at(sfd, parts[1])
                                finally:
                                    os.close(sfd)
                        except FileNotFoundError:
                            pass
                        except OSError as exc:
                            if errors is not None:
                                errors.append((f"{sub}/{item}", str(_named_error(
                                    exc, str(self.base / sub / item), self.root))))
            except FileNotFoundError:
                pass
        try:
            self.sweep_tmp(older_than_s=0.0)
        except OSError as exc:
            if errors is not None:
                errors.append(("tmp", str(exc)))
        return n

    def lock(self, key: str) -> _KeyLock:
        """A per-key inter-process lock (``flock``) in the node-local lock directory;
        its ``acquire()`` waits at most ``lock_timeout`` seconds and says whose lock
        file it waits for.

        Raises :class:`CacheError` when the lock directory is not ours (another user
        could hold our locks forever; callers then compile without the lock).
        """
        d = self.lock_dir
        makedirs_private(d)
        st = d.lstat()
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise CacheError(f"lock directory {d} is not a private directory of this user")
        root_tag = hashlib.sha256(os.path.abspath(self.root).encode()).hexdigest()[:12]
        return _KeyLock(self, key, str(d / f"{root_tag}-{key[:32]}.lock"))


def _probe_writable(root: Path) -> bool:
    """Whether ``root`` (or its nearest existing ancestor) accepts new files."""
    p = root
    while not p.exists() and p.parent != p:
        p = p.parent
    return os.access(p, os.W_OK | os.X_OK)
