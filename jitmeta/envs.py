"""Every environment variable jitmeta reads, typed and validated, in one place.

Values are read lazily (never at import), so a test or an application can change
them later; :func:`override` scopes values without touching ``os.environ``::

    with jitmeta.envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=1024):
        ...

A malformed value raises :class:`EnvError` naming the variable, the value and what
is accepted.

The library reads knobs in one place: :func:`snapshot` parses every knob at once into
an immutable :class:`Knobs` value, which is passed explicitly to the planner and the
build (so those stay pure functions of their inputs). Snapshots are cached by the raw
values of the knobs, so taking one on every call costs a dictionary lookup, and equal
raw values give the very same object (its identity is the hot path's cache key).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

__all__ = ["EnvError", "Knob", "KNOBS", "Knobs", "get", "raw", "override", "describe",
           "token_reader", "snapshot"]


class EnvError(ValueError):
    """A jitmeta environment variable holds a value that cannot be used."""


_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_VARIANTS = ("static", "dynamic", "chunked")


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected 0/1 (or true/false, yes/no, on/off)")


def _positive_int(lo: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 0)
        except ValueError:
            raise ValueError(f"expected an integer >= {lo}") from None
        if value < lo:
            raise ValueError(f"expected an integer >= {lo}")
        return value

    return parse


def _block_size(text: str) -> int:
    value = _positive_int(32)(text)
    if value % 32 or value > 1024:
        raise ValueError("expected a multiple of 32 from 32 to 1024")
    return value


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``"1G"``, ``"512M"``, ``"64k"``, ``"1048576"`` -> bytes (binary units; an optional
    trailing ``B``/``iB``). The one size syntax of the knobs and the CLI."""
    low = str(text).strip().lower()
    for suffix in ("ib", "b"):
        if low.endswith(suffix) and low[:-len(suffix)][-1:] in "kmgt":
            low = low[:-len(suffix)]
            break
    unit = low[-1:] if low[-1:] in "kmgt" else ""
    number = low[:-1] if unit else low
    try:
        value = int(number, 10)
    except ValueError:
        raise ValueError("expected a size in bytes, e.g. 1073741824, 512M or 1G") from None
    if value < 0:
        raise ValueError("expected a size >= 0")
    return value * _SIZE_UNITS[unit]


def _chunk(text: str) -> int:
    value = _positive_int(32)(text)
    if value & (value - 1) or value > 65536:
        raise ValueError("expected a power of two from 32 to 65536 (the planner's own "
                         "slabs are 1024 to 8192)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("expected a number of seconds >= 0 (0: do not wait)") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError("expected a finite number of seconds >= 0 (0: do not wait)")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        low = text.strip().lower()
        if low not in options:
            raise ValueError("expected one of " + ", ".join(options))
        return low

    return parse


def _arch(text: str) -> str:
    from .heuristics.arch import normalize_arch  # local import: no cycles at import

    return normalize_arch(text)


def _path(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a directory path")
    return os.path.expanduser(text.strip())


def _flags(text: str) -> tuple[str, ...]:
    import shlex

    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"expected shell-quoted NVRTC flags ({exc})") from None


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("JITMETA_CACHE_DIR", _path, None,
             "cache root (default: platformdirs' user cache dir for 'jitmeta')"),
        Knob("JITMETA_CACHE_MAX_BYTES", parse_size, None,
             "size cap of the disk cache (bytes, or with a K/M/G/T suffix); "
             "least-recently-used entries are pruned"),
        Knob("JITMETA_OFFLINE", _parse_bool, False,
             "1: never compile at run time; a miss raises with the warm command"),
        Knob("JITMETA_DISABLE_DISK_CACHE", _parse_bool, False,
             "1: keep compiled cubins in memory only"),
        Knob("JITMETA_VARIANT", _choice(_VARIANTS), None,
             "force a variant: static, dynamic or chunked"),
        Knob("JITMETA_THREADS", _block_size, None,
             "threads per block (a multiple of 32, at most 1024)"),
        Knob("JITMETA_CHUNK", _chunk, None,
             "slab size in elements of the chunked variant (a power of two, 32 to 65536)"),
        Knob("JITMETA_SMEM_BUDGET", _positive_int(1), None,
             "cap (bytes) on the shared memory the planner may use per block"),
        Knob("JITMETA_ARCH", _arch, None,
             "target arch override, e.g. sm_90a"),
        Knob("JITMETA_NVRTC_FLAGS", _flags, (),
             "extra NVRTC flags (part of the cache key)"),
        Knob("JITMETA_CHECK_INPUTS", _parse_bool, False,
             "1: validate context_lens values (syncs); raise on bad ones"),
        Knob("JITMETA_LOG", _choice(_LOG_LEVELS), None,
             "log level of the 'jitmeta' logger; debug dumps rendered source"),
        Knob("JITMETA_ALLOW_SHARED_CACHE", _parse_bool, False,
             "1: load entries from a cache directory writable by other users"),
        Knob("JITMETA_LOCK_TIMEOUT", _seconds, 60.0,
             "seconds to wait for another process compiling the same key "
             "(0: do not wait)"),
        Knob("JITMETA_MISS_MANIFEST", _path, None,
             "file to append one JSON line per cache miss to (replay it with "
             "'jitmeta-cache warm --manifest FILE')"),
    )
}

_global_overrides: list[dict[str, Any]] = []
_lock = threading.Lock()


def _lookup_override(name: str) -> tuple[bool, Any]:
    for layer in reversed(_global_overrides):
        if name in layer:
            return True, layer[name]
    return False, None


def raw(name: str) -> Any:
    """The unparsed value of ``name`` (override or environment), for cache tokens."""
    found, value = _lookup_override(name)
    return value if found else os.environ.get(name)


def get(name: str) -> Any:
    """Return the parsed value of ``name`` (an override, else the environment)."""
    knob = KNOBS[name]
    found, raw = _lookup_override(name)
    if found:
        if raw is None:
            return knob.default
        if isinstance(raw, (bool, int, float)):  # typed scalars are validated too
            raw = str(raw)
        elif not isinstance(raw, str):  # an already-typed value (e.g. a flag tuple)
            return raw
    else:
        raw = os.environ.get(name)
        if raw is None:
            return knob.default
    try:
        return knob.parse(raw)
    except ValueError as exc:
        raise EnvError(f"Unable to use {name}={raw!r}: {exc}. ({knob.help})") from None


def _token_value(value: Any) -> Any:
    """A hashable stand-in for an override value; never equal to a str or None."""
    try:
        hash(value)
        return value
    except TypeError:
        return ("unhashable", type(value).__name__, repr(value))


def token_reader(*names: str) -> Callable[[], tuple]:
    """A function returning a cheap, hashable snapshot of the raw values of ``names``.

    For hot-path caches that must notice any change of these knobs (an override or
    the environment) without parsing them on every call: equal snapshots mean equal
    values. With no override active it reads ``os.environ``'s underlying mapping
    directly, once per name (a fraction of a microsecond for ten names, against
    several for ``os.environ.get``); the environment itself is still read at each
    call, never cached.
    """
    for name in names:
        if name not in KNOBS:
            raise KeyError(f"unknown jitmeta knob {name!r}; known: {', '.join(KNOBS)}")
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode = getattr(environ, "encodekey", None)
    keys = tuple(encode(n) for n in names) if data is not None and encode else None

    def read() -> tuple:
        if _global_overrides:
            return tuple(_token_value(raw(n)) for n in names)
        if keys is None or os.environ is not environ:
            return tuple(os.environ.get(n) for n in names)
        return tuple(map(data.get, keys))

    return read


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Temporarily set knobs, process-wide, for the duration of the block.

    Strings are parsed and validated like the environment; ``None`` means the
    default; any other value is taken as already typed.
    """
    for name in values:
        if name not in KNOBS:
            raise KeyError(f"unknown jitmeta knob {name!r}; known: {', '.join(KNOBS)}")
    layer = dict(values)
    with _lock:
        _global_overrides.append(layer)
    try:
        yield
    finally:
        with _lock:
            for i in range(len(_global_overrides) - 1, -1, -1):
                if _global_overrides[i] is layer:
                    del _global_overrides[i]
                    break


@dataclass(frozen=True, eq=False)
class Knobs:
    """Every knob's parsed value at one moment: what the planner and the build read.

    Immutable; compared and hashed by identity (:func:`snapshot` hands out one object
    per set of raw values). Build one by hand in tests with :meth:`from_values`.
    """

    cache_dir: str | None = None
    cache_max_bytes: int | None = None
    offline: bool = False
    disable_disk_cache: bool = False
    variant: str | None = None
    threads: int | None = None
    chunk: int | None = None
    smem_budget: int | None = None
    arch: str | None = None
    nvrtc_flags: tuple[str, ...] = ()
    check_inputs: bool = False
    log: str | None = None
    allow_shared_cache: bool = False
    miss_manifest: str | None = None
    lock_timeout: float = 60.0
    #: the raw values this snapshot was parsed from (KNOBS order)
    token: tuple = field(default=(), repr=False)

    @classmethod
    def from_values(cls, **values: Any) -> "Knobs":
        """A snapshot of the defaults with ``values`` (knob names, parsed like
        :func:`override`: strings are validated, other values taken as typed)."""
        for name in values:
            if name not in KNOBS:
                raise KeyError(f"unknown jitmeta knob {name!r}; known: {', '.join(KNOBS)}")
        with override(**(dict.fromkeys(KNOBS) | values)):
            return _parse_all(tuple(_token_value(raw(n)) for n in KNOBS))

    def get(self, name: str) -> Any:
        """The value of knob ``name`` (e.g. ``"JITMETA_VARIANT"``)."""
        if name not in KNOBS:
            raise KeyError(f"unknown jitmeta knob {name!r}; known: {', '.join(KNOBS)}")
        return getattr(self, _FIELD[name])


_FIELD = {name: name[len("JITMETA_"):].lower() for name in KNOBS}
_read_all = None
_snapshots: dict[tuple, Knobs] = {}
_MAX_SNAPSHOTS = 64


def _parse_all(token: tuple) -> Knobs:
    values = {_FIELD[name]: get(name) for name in KNOBS}  # raises EnvError on a bad one
    return Knobs(**values, token=token)


def snapshot() -> Knobs:
    """Every knob parsed now (an override, else the environment), as one :class:`Knobs`.

    Raises :class:`EnvError` if any jitmeta variable holds a malformed value, whichever
    one the caller needs: a typo is reported on the first call, not when some later
    path first reads it.
    """
    global _read_all
    if _read_all is None:
        _read_all = token_reader(*KNOBS)
    token = _read_all()
    snap = _snapshots.get(token)
    if snap is None:
        snap = _parse_all(token)
        with _lock:
            if len(_snapshots) >= _MAX_SNAPSHOTS:
                del _snapshots[next(iter(_snapshots))]
            snap = _snapshots.setdefault(token, snap)
    return snap


def describe() -> list[tuple[str, str]]:
    """(name, help) for every knob, for documentation and ``--help``."""
    return [(k.name, k.help) for k in KNOBS.values()]
