"""NVRTC through cuda-python: CUDA source -> cubin for one exact arch.

Never PTX: a PTX from a newer NVRTC does not JIT on an older driver, a cubin loads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

__all__ = ["CompileOptions", "CompileError", "CompileResult", "compile_cubin",
           "nvrtc_version", "cuda_bindings_version"]

log = logging.getLogger("jitmeta")


class CompileError(RuntimeError):
    """NVRTC rejected the source; the message carries the log and numbered source."""

    def __init__(self, message: str, log_text: str = "", source: str = ""):
        self.log = log_text
        self.source = source
        numbered = "\n".join(f"{i + 1:5d} | {line}" for i, line in
                             enumerate(source.splitlines()))
        super().__init__(f"{message}\n--- NVRTC log ---\n{log_text}\n"
                         f"--- rendered source ---\n{numbered}")


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


def _check(result, what: str, prog=None, source: str = "") -> None:
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        err, name = nvrtc.nvrtcGetErrorString(result)
        text = _program_log(prog) if prog is not None else ""
        raise CompileError(f"NVRTC {what} failed: {name.decode()}", text, source)


def _program_log(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def nvrtc_version() -> str:
    """``"13.5"``, or ``"unavailable"`` when no NVRTC can be loaded."""
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}" if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else "unavailable"
    except Exception:  # noqa: BLE001 - no NVRTC library is a valid state
        return "unavailable"


def cuda_bindings_version() -> str:
    try:
        from importlib.metadata import version

        return version("cuda-bindings")
    except Exception:  # noqa: BLE001
        return "unknown"


def compile_cubin(source: str, options: CompileOptions, name: str = "jitmeta.cu"
                  ) -> CompileResult:
    """Compile ``source`` to a cubin; raises :class:`CompileError` with the log."""
    from cuda.bindings import nvrtc

    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "program creation", source=source)
    try:
        flags = options.as_bytes()
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        _check(err, f"compilation for {options.arch}", prog, source)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "cubin size query", prog, source)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "cubin retrieval", prog, source)
        text = _program_log(prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    if not cubin.startswith(b"\x7fELF"):
        raise CompileError(f"NVRTC returned no cubin for {options.arch}", text, source)
    log.debug("compiled %s for %s in %.1f ms", name, options.arch, seconds * 1e3)
    return CompileResult(cubin=bytes(cubin), log=text, seconds=seconds,
                         nvrtc_version=nvrtc_version())
