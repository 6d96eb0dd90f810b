"""Portable cache bundles: a gzip'd tar of verified entries with a manifest.

Layout (every member a plain file or directory, mode 0600/0700, owner 0, mtime 0,
sorted: the same entries give byte-identical bundles)::

    jitmeta-bundle/MANIFEST.json
    jitmeta-bundle/entries/<key>/kernel.cubin
    jitmeta-bundle/entries/<key>/kernel.cu
    jitmeta-bundle/entries/<key>/meta.json

``MANIFEST.json`` lists, per key, the sha256 and size of every file, and carries a
sha256 of itself (``manifest_sha256``, over its canonical JSON without that field):
a manifest without it, or with a wrong one, is rejected. Import streams the archive
(never ``extractall``) under hard bounds: at most :data:`MAX_MEMBERS` members, each
at most :data:`MAX_MEMBER_BYTES`, and at most :data:`MAX_BUNDLE_BYTES` of
uncompressed archive in all (headers included), counted while reading, so a small
compressed file cannot make it hold gigabytes. It rejects the whole bundle on the
first unsafe or unexpected member (absolute path, ``..``, symlink, hardlink, device,
FIFO, duplicate name, unknown file, size over the limit) or checksum mismatch,
judges every entry with :func:`jitmeta.jit.cache.verify_entry` (deep), then
publishes each entry atomically through :meth:`DiskCache.publish`. Bundles carry no
``last_used`` stamps: an imported entry counts as used at import time.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from jitmeta.jit.cache import (CUBIN, META, SCHEMA_VERSION, SOURCE, CacheError, DiskCache,
                               meta_checksum, parse_json, verify_entry)

__all__ = ["BundleError", "export_bundle", "import_bundle", "read_bundle", "TOP",
           "FORMAT", "MAX_MEMBER_BYTES", "MAX_MEMBERS", "MAX_BUNDLE_BYTES"]

FORMAT = "jitmeta-bundle"
BUNDLE_VERSION = 1
TOP = "jitmeta-bundle"
MANIFEST = "MANIFEST.json"
BUNDLE_FILES = (CUBIN, SOURCE, META)
MAX_MEMBER_BYTES = 64 << 20
MAX_MEMBERS = 100_000
#: uncompressed bytes of the whole archive (headers, padding and members)
MAX_BUNDLE_BYTES = 1 << 30
MANIFEST_CHECKSUM = "manifest_sha256"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


class BundleError(ValueError):
    """The bundle is malformed, unsafe or fails its checksums; nothing was imported."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- export ----------------------------------------------------------------------------

def export_bundle(cache: DiskCache, path: str | os.PathLike, archs=None) -> dict:
    """Write every valid entry of ``cache`` (optionally only ``archs``) to ``path``.

    Each entry is deep-checked first; a bad one is quarantined and left out.
    Returns ``{"file", "entries", "bytes", "skipped": [{"key", "reason"}]}``.
    The file appears by one rename (no partial bundle under its name). Raises
    :class:`BundleError` (and writes nothing) when no entry is there to export.
    """
    path = Path(path)
    wanted = set(archs) if archs else None
    chosen: dict[str, dict[str, bytes]] = {}
    skipped = []
    cache.check_trusted()
    for key in cache.keys():
        try:  # the very bytes verified are the ones exported
            problem, files, meta = cache.read_entry(key, deep=True)
        except FileNotFoundError:
            continue  # removed meanwhile
        if problem:
            cache.quarantine(key, problem)
            skipped.append({"key": key, "reason": problem})
            continue
        if wanted is not None and meta.get("arch") not in wanted:
            continue
        chosen[key] = {name: data for name, data in files.items() if name != "last_used"}
    manifest = {
        "format": FORMAT, "version": BUNDLE_VERSION, "schema": SCHEMA_VERSION,
        "entries": {key: {name: {"sha256": _sha256(data), "bytes": len(data)}
                          for name, data in sorted(files.items())}
                    for key, files in sorted(chosen.items())},
    }
    manifest[MANIFEST_CHECKSUM] = meta_checksum(manifest, MANIFEST_CHECKSUM)
    if not chosen:
        what = f" for {', '.join(sorted(wanted))}" if wanted else ""
        raise BundleError(f"no valid entries{what} in {cache.root} to export; nothing "
                          f"written to {path} (warm the cache first)")
    members: list[tuple[str, bytes | None]] = [
        (TOP, None),
        (f"{TOP}/{MANIFEST}", json.dumps(manifest, indent=1, sort_keys=True).encode()),
        (f"{TOP}/entries", None)]
    for key, files in sorted(chosen.items()):
        members.append((f"{TOP}/entries/{key}", None))
        for name, data in sorted(files.items()):
            members.append((f"{TOP}/entries/{key}/{name}", data))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for name, data in members:
                        _add(tar, name, data)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return {"file": str(path), "entries": sorted(chosen), "bytes": path.stat().st_size,
            "skipped": skipped}


def _add(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o700
        tar.addfile(info)
    else:
        info.type = tarfile.REGTYPE
        info.mode = 0o600
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


# --- import ----------------------------------------------------------------------------

def _member_problem(m: tarfile.TarInfo) -> str | None:
    """Why member ``m`` may not appear in a bundle, or None."""
    name = m.name
    if name.startswith("/") or name.startswith("\\") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if ".." in parts:
        return "'..' in the path"
    if m.issym():
        return f"symbolic link (to {m.linkname!r})"
    if m.islnk():
        return f"hard link (to {m.linkname!r})"
    if m.ischr() or m.isblk():
        return "device file"
    if m.isfifo():
        return "FIFO"
    if m.isdir():
        return None
    if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return f"unsupported member type {m.type!r}"
    if m.size > MAX_MEMBER_BYTES:
        return f"{m.size} bytes, more than the {MAX_MEMBER_BYTES} allowed"
    return None


def _layout_problem(name: str, is_dir: bool) -> str | None:
    parts = name.rstrip("/").split("/")
    if parts[0] != TOP:
        return f"outside {TOP}/"
    rest = parts[1:]
    if is_dir:
        ok = (not rest or rest == ["entries"]
              or (len(rest) == 2 and rest[0] == "entries" and _KEY_RE.match(rest[1])))
    else:
        ok = rest == [MANIFEST] or (len(rest) == 3 and rest[0] == "entries"
                                    and _KEY_RE.match(rest[1]) and rest[2] in BUNDLE_FILES)
    return None if ok else "not part of the bundle layout"


class _Capped(io.RawIOBase):
    """A read-only stream that fails once more than ``cap`` bytes were read from
    ``inner`` (the uncompressed archive), and never asks ``inner`` for more."""

    def __init__(self, inner, cap: int, path: Path):
        self._inner, self._left, self._path = inner, cap, path

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._left < 0:
            raise BundleError(f"{self._path}: more than {MAX_BUNDLE_BYTES} bytes once "
                              "uncompressed; not importing it")
        want = min(len(buf), self._left + 1)
        data = self._inner.read(want)
        self._left -= len(data)
        if self._left < 0:
            raise BundleError(f"{self._path}: more than {MAX_BUNDLE_BYTES} bytes once "
                              "uncompressed; not importing it")
        buf[:len(data)] = data
        return len(data)


def _open_stream(path: Path, raw):
    """The uncompressed archive stream of an open bundle file (gzip or plain tar)."""
    magic = raw.read(2)
    raw.seek(0)
    inner = gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
    return io.BufferedReader(_Capped(inner, MAX_BUNDLE_BYTES, path), 1 << 16)


def read_bundle(path: str | os.PathLike) -> dict[str, dict[str, bytes]]:
    """Read and fully validate a bundle; returns ``{key: {file name: bytes}}``.

    Raises :class:`BundleError` naming the first offending member or entry.
    """
    path = Path(path)
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise BundleError(f"{path} is not a readable bundle ({exc})") from None
    files: dict[str, bytes] = {}
    seen: set[str] = set()
    count = total = 0
    with raw:
        try:
            tar = tarfile.open(fileobj=_open_stream(path, raw), mode="r|")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"{path} is not a readable bundle ({exc})") from None
        try:
            with tar:
                for m in tar:
                    count += 1
                    if count > MAX_MEMBERS:
                        raise BundleError(f"{path}: more than {MAX_MEMBERS} members")
                    why = _member_problem(m) or _layout_problem(m.name, m.isdir())
                    if why:
                        raise BundleError(f"{path}: member {m.name!r} rejected: {why}")
                    name = m.name.rstrip("/")
                    if name in seen:
                        raise BundleError(f"{path}: member {m.name!r} appears twice")
                    seen.add(name)
                    if m.isdir():
                        continue
                    total += m.size
                    if total > MAX_BUNDLE_BYTES:
                        raise BundleError(f"{path}: members hold more than "
                                          f"{MAX_BUNDLE_BYTES} bytes; not importing it")
                    f = tar.extractfile(m)
                    data = f.read(MAX_MEMBER_BYTES + 1) if f is not None else b""
                    if len(data) != m.size:
                        raise BundleError(f"{path}: member {m.name!r} is truncated")
                    files[name] = data
        except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise BundleError(f"{path} is damaged ({exc})") from None
    raw_manifest = files.pop(f"{TOP}/{MANIFEST}", None)
    if raw_manifest is None:
        raise BundleError(f"{path}: no {TOP}/{MANIFEST}; not a jitmeta bundle")
    try:
        manifest = parse_json(raw_manifest, "the manifest")
    except ValueError as exc:
        raise BundleError(f"{path}: malformed manifest ({exc})") from None
    if MANIFEST_CHECKSUM not in manifest:
        raise BundleError(f"{path}: the manifest lacks its own checksum "
                          f"({MANIFEST_CHECKSUM}); not a complete jitmeta bundle")
    if manifest[MANIFEST_CHECKSUM] != meta_checksum(manifest, MANIFEST_CHECKSUM):
        raise BundleError(f"{path}: manifest checksum mismatch (the manifest was "
                          "altered or damaged)")
    entries = manifest.get("entries")
    if not isinstance(entries, dict):
        raise BundleError(f"{path}: malformed manifest (entries is not an object)")
    if manifest.get("format") != FORMAT or manifest.get("version") != BUNDLE_VERSION:
        raise BundleError(f"{path}: manifest format {manifest.get('format')!r} version "
                          f"{manifest.get('version')!r}; this jitmeta reads {FORMAT} "
                          f"version {BUNDLE_VERSION}")
    if manifest.get("schema") != SCHEMA_VERSION:
        raise BundleError(f"{path}: entries of cache schema {manifest.get('schema')!r}; "
                          f"this jitmeta uses schema {SCHEMA_VERSION}")
    out: dict[str, dict[str, bytes]] = {}
    listed = set()
    for key, table in entries.items():
        if not _KEY_RE.match(str(key)) or not isinstance(table, dict):
            raise BundleError(f"{path}: manifest entry {key!r} is malformed")
        got = {}
        for name, want in table.items():
            if name not in BUNDLE_FILES:
                raise BundleError(f"{path}: manifest entry {key[:16]} lists {name!r}, "
                                  "not a file of an entry")
            member = f"{TOP}/entries/{key}/{name}"
            listed.add(member)
            data = files.get(member)
            if data is None:
                raise BundleError(f"{path}: {member} is listed in the manifest but missing")
            if not isinstance(want, dict) or want.get("bytes") != len(data) or \
                    want.get("sha256") != _sha256(data):
                raise BundleError(f"{path}: checksum mismatch for {member}")
            got[name] = data
        if META not in got or CUBIN not in got:
            raise BundleError(f"{path}: entry {key[:16]} is bad: it lacks meta.json or "
                              "kernel.cubin")
        problem, _ = verify_entry(key, got, deep=True)
        if problem:
            raise BundleError(f"{path}: entry {key[:16]} is bad: {problem}")
        out[key] = got
    unlisted = sorted(set(files) - listed)
    if unlisted:
        raise BundleError(f"{path}: member {unlisted[0]!r} is not in the manifest")
    return out


def import_bundle(cache: DiskCache, path: str | os.PathLike) -> dict:
    """Validate the whole bundle, then publish each entry atomically.

    Entries already present and valid are left alone. Returns
    ``{"file", "imported": [keys], "present": [keys]}``. Raises :class:`BundleError`
    (nothing imported) or :class:`CacheError` (cache unusable).
    """
    entries = read_bundle(path)
    cache.check_trusted()
    if not cache.writable():
        raise CacheError(f"cannot import into {cache.root}: it is not writable")
    imported, present = [], []
    for key, files in sorted(entries.items()):
        if cache.load(key, touch=False) is not None:
            present.append(key)
            continue
        meta = parse_json(files[META], "metadata")  # verified by read_bundle
        source = files[SOURCE].decode() if SOURCE in files else None
        _, won = cache.publish(key, files[CUBIN], meta, source)
        (imported if won else present).append(key)
    return {"file": str(path), "imported": imported, "present": present}
