"""NVRTC through cuda-python: CUDA source -> cubin for one exact arch.

Never PTX: a PTX from a newer NVRTC does not JIT on an older driver, a cubin loads.

Works with cuda-bindings 12.x (NVRTC 12, from ``nvidia-cuda-nvrtc-cu12``) and 13.x
(NVRTC 13, from ``nvidia-cuda-nvrtc``): every call used here (``nvrtcVersion``,
``nvrtcCreateProgram``, ``nvrtcCompileProgram``, ``nvrtcGetCUBINSize``,
``nvrtcGetCUBIN``, ``nvrtcGetProgramLog[Size]``, ``nvrtcGetErrorString``,
``nvrtcDestroyProgram``) has the same signature and tuple returns in both. NVRTC is
optional at run time: without it cache hits still load, and a compile raises
:class:`NvrtcUnavailableError`.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field


__all__ = ["CompileOptions", "CompileError", "NvrtcUnavailableError", "CompileResult",
           "compile_cubin", "nvrtc_version", "cuda_bindings_version", "nvrtc_available"]

log = logging.getLogger("jitmeta")

# Lines of source shown around each line the NVRTC log points at.
CONTEXT_LINES = 3
# At most this many error sites are shown in the message (the log has all of them).
MAX_SITES = 5

_LOG_LINE_RE = re.compile(r"^[^\n(]*\((\d+)\): (?:error|warning|catastrophic error)",
                          re.MULTILINE)


def _excerpt(source: str, log_text: str) -> str:
    """The lines the log names (marked ``>``) with CONTEXT_LINES of context each."""
    lines = source.splitlines()
    sites = []
    for m in _LOG_LINE_RE.finditer(log_text):
        n = int(m.group(1))
        if 1 <= n <= len(lines) and n not in sites:
            sites.append(n)
    if not sites:
        # no line numbers in the log (e.g. an option error): the first lines
        sites_shown, ranges = [], [(1, min(len(lines), 2 * CONTEXT_LINES + 1))]
    else:
        sites_shown = sites[:MAX_SITES]
        ranges = []
        for n in sites_shown:
            lo, hi = max(1, n - CONTEXT_LINES), min(len(lines), n + CONTEXT_LINES)
            if ranges and lo <= ranges[-1][1] + 1:
                ranges[-1] = (ranges[-1][0], max(hi, ranges[-1][1]))
            else:
                ranges.append((lo, hi))
    out = []
    for i, (lo, hi) in enumerate(sorted(ranges)):
        if i:
            out.append("  ...")
        for n in range(lo, hi + 1):
            mark = ">" if n in sites_shown else " "
            out.append(f"{mark}{n:5d} | {lines[n - 1]}")
    if len(sites) > len(sites_shown):
        out.append(f"  ({len(sites) - len(sites_shown)} more error sites in the log)")
    return "\n".join(out)


def _save_source(source: str, name: str) -> str | None:
    """Write the full rendered source to a private temp file; its path, or None."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(name)) or "jitmeta.cu"
    try:
        fd, path = tempfile.mkstemp(prefix="jitmeta-failed-", suffix="-" + stem)
        with os.fdopen(fd, "w") as f:
            f.write(source)
        return path
    except OSError as exc:
        log.debug("could not save the failing source: %s", exc)
        return None


class CompileError(RuntimeError):
    """NVRTC rejected the source.

    The message carries the NVRTC log and the source lines it points at (with a few
    lines of context); the full rendered source is written to a file named in the
    message (``source_path``) and logged at debug level. ``log`` and ``source`` hold
    the complete texts.
    """

    def __init__(self, message: str, log_text: str = "", source: str = "",
                 name: str = "jitmeta.cu"):
        self.log = log_text
        self.source = source
        self.source_path = _save_source(source, name) if source else None
        parts = [message]
        if log_text:
            parts.append(f"--- NVRTC log ---\n{log_text.rstrip()}")
        if source:
            parts.append("--- source lines named in the log ---\n"
                         + _excerpt(source, log_text))
            where = (f"full rendered source ({len(source.splitlines())} lines): "
                     f"{self.source_path}" if self.source_path else
                     "full rendered source: not saved (temp dir not writable); set "
                     "JITMETA_LOG=debug to log it")
            parts.append(where)
            log.debug("source that failed to compile (%s):\n%s", name, source)
        super().__init__("\n".join(parts))


class NvrtcUnavailableError(CompileError):
    """No NVRTC library could be loaded (cuda-bindings or the NVRTC wheel missing).

    Cache hits do not need NVRTC; only a compile does. Install the NVRTC that matches
    the driver (``pip install 'jitmeta[cu12]'`` or ``'jitmeta[cu13]'``), or compile
    ahead of time on a build machine with ``jitmeta-cache warm`` and ship the cache.
    """

    def __init__(self, message: str):
        super().__init__(message)


@dataclass(frozen=True)
class CompileOptions:
    """The exact NVRTC option list (hashed into the cache key as bytes)."""

    arch: str  # "sm_90", "sm_90a", "sm_100", ...
    std: str = "c++17"
    extra: tuple[str, ...] = field(default_factory=tuple)

    def as_bytes(self) -> list[bytes]:
        flags = [f"--gpu-architecture={self.arch}", f"--std={self.std}",
                 "-DNDEBUG", *self.extra]
        return [f.encode() for f in flags]


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    log: str
    seconds: float
    nvrtc_version: str


_INSTALL_HINT = ("install the NVRTC that matches your CUDA stack: pip install "
                 "'jitmeta[cu13]' (CUDA 13: cuda-bindings 13 + nvidia-cuda-nvrtc, driver "
                 ">= 580) or 'jitmeta[cu12]' (CUDA 12: cuda-bindings 12 + "
                 "nvidia-cuda-nvrtc-cu12, driver >= 525); or compile ahead of time on a "
                 "build machine with 'jitmeta-cache warm' and ship the cache "
                 "(cache hits need no NVRTC)")

_probe_lock = threading.Lock()
_nvrtc_module = None


def _nvrtc():
    """The ``cuda.bindings.nvrtc`` module, with its library loaded and answering.

    Raises :class:`NvrtcUnavailableError` when cuda-bindings is not installed or no
    NVRTC shared library can be found or loaded. A success is remembered; a failure
    is re-checked on the next call (a library may be installed meanwhile).
    """
    global _nvrtc_module
    if _nvrtc_module is not None:
        return _nvrtc_module
    with _probe_lock:
        if _nvrtc_module is not None:
            return _nvrtc_module
        try:
            from cuda.bindings import nvrtc
        except ImportError as exc:
            raise NvrtcUnavailableError(
                f"NVRTC is unavailable: cuda.bindings.nvrtc cannot be imported ({exc}); "
                + _INSTALL_HINT) from exc
        try:
            err, major, minor = nvrtc.nvrtcVersion()
        except Exception as exc:  # noqa: BLE001 - DynamicLibNotFoundError, OSError, ...
            raise NvrtcUnavailableError(
                f"NVRTC is unavailable: cuda-bindings {cuda_bindings_version()} found no "
                f"loadable NVRTC library ({type(exc).__name__}: {exc}); "
                + _INSTALL_HINT) from exc
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcUnavailableError(
                f"NVRTC is unavailable: nvrtcVersion() returned {err!r}; " + _INSTALL_HINT)
        _nvrtc_module = nvrtc
        return nvrtc


def nvrtc_available() -> bool:
    """Whether an NVRTC library can be loaded here (loads it on first call)."""
    try:
        _nvrtc()
        return True
    except NvrtcUnavailableError:
        return False


def _check(result, what: str, prog=None, source: str = "", name: str = "jitmeta.cu"
           ) -> None:
    nvrtc = _nvrtc()
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(result)
        log_text = _program_log(prog) if prog is not None else ""
        raise CompileError(f"NVRTC {what} failed: {text.decode()}", log_text, source, name)


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def nvrtc_version() -> str:
    """``"13.5"`` / ``"12.6"``, or ``"unavailable"`` when no NVRTC can be loaded."""
    try:
        nvrtc = _nvrtc()
    except NvrtcUnavailableError:
        return "unavailable"
    err, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}" if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else "unavailable"


def cuda_bindings_version() -> str:
    """The installed cuda-bindings distribution's version, or ``"unknown"``."""
    try:
        from importlib.metadata import version

        return version("cuda-bindings")
    except Exception:  # noqa: BLE001 - not installed / no metadata
        return "unknown"


def _check_arch_supported(nvrtc, arch: str) -> None:
    """Raise a CompileError naming the NVRTC version when it cannot target ``arch``
    (e.g. NVRTC 12.6 and sm_100: Blackwell targets need NVRTC >= 12.8)."""
    m = re.match(r"^sm_(\d+)", arch)
    err, supported = nvrtc.nvrtcGetSupportedArchs()
    if m is None or err != nvrtc.nvrtcResult.NVRTC_SUCCESS or not supported:
        return  # let NVRTC itself judge the option
    if int(m.group(1)) not in supported:
        have = nvrtc_version()
        raise CompileError(
            f"NVRTC {have} cannot compile for {arch}: it supports sm_{min(supported)}.."
            f"sm_{max(supported)}. Blackwell targets (sm_100, sm_120) need NVRTC >= 12.8 "
            "(pip install 'nvidia-cuda-nvrtc-cu12>=12.8' on CUDA 12, or 'jitmeta[cu13]'); "
            f"or warm the cache for {arch} on a machine whose NVRTC supports it")


def compile_cubin(source: str, options: CompileOptions, name: str = "jitmeta.cu"
                  ) -> CompileResult:
    """Compile ``source`` to a cubin.

    Raises :class:`NvrtcUnavailableError` when no NVRTC can be loaded and
    :class:`CompileError` (log, offending lines, path of the full source) when NVRTC
    rejects the source or the options.
    """
    nvrtc = _nvrtc()
    _check_arch_supported(nvrtc, options.arch)
    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "program creation", source=source, name=name)
    try:
        flags = options.as_bytes()
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        _check(err, f"compilation for {options.arch}", prog, source, name)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "cubin size query", prog, source, name)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "cubin retrieval", prog, source, name)
        text = _program_log(prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    if not cubin.startswith(b"\x7fELF"):
        raise CompileError(f"NVRTC returned no cubin for {options.arch}", text, source,
                           name)
    log.debug("compiled %s for %s in %.1f ms", name, options.arch, seconds * 1e3)
    return CompileResult(cubin=bytes(cubin), log=text, seconds=seconds,
                         nvrtc_version=nvrtc_version())
