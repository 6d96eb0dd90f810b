"""Run jitmeta's rendered CUDA kernels on the CPU (no GPU, no NVRTC).

The rendered source (:func:`render`: ``jitmeta.jit.render.render`` of the family's
``KernelSource``) is compiled as ordinary C++20 by g++ after ``cuda_shim.h`` (the CUDA built-ins the kernels use) and linked with
``harness.cpp`` (threads, barriers, warp exchange, device-like buffers). Every block's
threads run as real OS threads, so ``__syncthreads()`` and warp shuffles behave as on
a GPU for code whose control flow around them is uniform.

Launches follow the library's own loaded call (``jitmeta.kernels.call``, as
``dispatch.prepare`` makes it): it runs with ``runtime.launch`` recording instead of
launching, and the harness replays the
recorded kernels, grids, block sizes, dynamic shared memory and arguments.

    import sys; sys.path.insert(0, "tests")      # pytest does this for the tests
    from emulator import emulate
    out = emulate(plan.code, plan, context_lens, indices, num_sms)

One binary per source (and sanitizer), cached by content hash in a temporary directory
for the life of the process. :func:`emulate_cases` runs many cases (of any sources) in
a few processes, one per CPU.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import hashlib
import os
import queue
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Sequence
from unittest import mock

import numpy as np
import torch

from jitmeta import kernels as jm_kernels
from jitmeta.heuristics.plan import CodeSpec, Plan
from jitmeta.jit import render as jm_render
from jitmeta.jit import runtime

__all__ = ["render", "Case", "Emulator", "EmulatorError", "Launch", "compiler", "emulate",
           "emulate_cases", "emulate_many", "get_emulator", "kernel_names_in", "prebuild",
           "prepare_source", "recorded_launches"]

def render(code: CodeSpec) -> str:
    """The CUDA source the library renders for ``code``."""
    return jm_render.render(jm_kernels.source(code))


HERE = Path(__file__).resolve().parent
SHIM = HERE / "cuda_shim.h"
HARNESS = HERE / "harness.cpp"
LINK_SCRIPT = HERE / "smem.ld"

BASE_FLAGS = ("-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing")
SANITIZE_FLAGS = ("-g", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")

MAGIC, VERSION = 0x554D454A, 1
ARG_VALUE, ARG_CTX, ARG_IDX, ARG_OUT, ARG_WS, ARG_NULL = range(6)
# Stand-in device pointers handed to Launcher.__call__ (recognized when recorded).
_CTX, _IDX, _OUT, _WS = 0x7E5700001000, 0x7E5700002000, 0x7E5700003000, 0x7E5700004000
_POINTERS = {_CTX: ARG_CTX, _IDX: ARG_IDX, _OUT: ARG_OUT, _WS: ARG_WS}


class EmulatorError(RuntimeError):
    """The emulated kernel failed: compile error, crash, deadlock, stray write, ..."""

    def __init__(self, message: str, case_index: int | None = None):
        super().__init__(message)
        self.case_index = case_index


def compiler() -> str | None:
    """The C++ compiler to use ($CXX or g++), or None when there is none."""
    return shutil.which(os.environ.get("CXX") or "g++")


# --- source preparation ------------------------------------------------------------------

_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\s+([^;]*?)\b(\w+)\s*\[\s*\]\s*;")
_ALIGN = re.compile(r"\b(?:__align__|alignas)\s*\([^)]*\)")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")


def kernel_names_in(source: str) -> list[str]:
    """The ``__global__`` functions a source defines, in order."""
    names: list[str] = []
    for name in _KERNEL.findall(_LAUNCH_BOUNDS.sub("", source)):
        if name not in names:
            names.append(name)
    return names


def _dynamic_smem(match: re.Match) -> str:
    decl, name = match.group(1).strip(), match.group(2)
    cast = _ALIGN.sub("", decl).strip()
    return (f"{decl}* const {name} = reinterpret_cast<{cast}*>(jitmeta_emu_dynamic_smem);"
            " /* jitmeta-emu: dynamic shared memory */")


def prepare_source(source: str) -> str:
    """The C++ translation unit for ``source``: shim, the source, a kernel table.

    Two textual rewrites (C++ cannot express them with macros): ``extern __shared__ T
    x[];`` becomes a pointer to the harness's dynamic shared-memory buffer, and
    ``static __shared__`` drops the ``static`` that ``__shared__`` already implies.
    """
    names = kernel_names_in(source)
    if not names:
        raise EmulatorError("the source defines no __global__ void kernel")
    body = _EXTERN_SHARED.sub(_dynamic_smem, source)
    body = re.sub(r"\bstatic\s+__shared__\b", "__shared__", body)
    if re.search(r"\bextern\s+__shared__\b", body):
        raise EmulatorError("an `extern __shared__` declaration the emulator cannot rewrite "
                            "(expected `extern __shared__ T name[];`)")
    table = ",\n    ".join(f"JITMETA_EMU_KERNEL({n})" for n in names)
    return (f'#include "cuda_shim.h"\n#line 1 "rendered-kernel.cu"\n{body}\n'
            f'#line 1 "jitmeta-emu-kernel-table"\n'
            f"static const jitmeta_emu::KernelEntry jitmeta_emu_kernel_table[] = {{\n"
            f"    {table}}};\n"
            f'extern "C" const jitmeta_emu::KernelEntry* jitmeta_emu_kernels(int* count) {{\n'
            f"    *count = {len(names)};\n    return jitmeta_emu_kernel_table;\n}}\n")


# --- building --------------------------------------------------------------------------

_cache_dir: Path | None = None
_cache_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}
_emulators: dict[str, "Emulator"] = {}


def _dir() -> Path:
    global _cache_dir
    with _cache_lock:
        if _cache_dir is None:
            _cache_dir = Path(tempfile.mkdtemp(prefix="jitmeta-emu-"))
            atexit.register(shutil.rmtree, _cache_dir, True)
        return _cache_dir


def _flags(sanitize: str | None) -> tuple[str, ...]:
    if not sanitize:
        return BASE_FLAGS
    return BASE_FLAGS + SANITIZE_FLAGS + (f"-fsanitize={sanitize}",)


def _lock_for(key: str) -> threading.Lock:
    with _cache_lock:
        return _key_locks.setdefault(key, threading.Lock())


def _clip(text: str, head: int = 5000, tail: int = 1500) -> str:
    """The start (the first report) and the end of a long error output."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def _run_compiler(args: list[str], what: str) -> None:
    cxx = compiler()
    if cxx is None:
        raise EmulatorError("no C++ compiler (g++ or $CXX) on PATH")
    proc = subprocess.run([cxx, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmulatorError(f"{what} failed ({cxx} {' '.join(args)}):\n{_clip(proc.stderr)}")


def _harness_object(flags: tuple[str, ...]) -> Path:
    h = hashlib.sha256()
    for part in (SHIM.read_bytes(), HARNESS.read_bytes(), "\0".join(flags).encode()):
        h.update(part + b"\0")
    key = "harness-" + h.hexdigest()[:20]
    obj = _dir() / f"{key}.o"
    with _lock_for(key):
        if not obj.exists():
            tmp = obj.with_suffix(".tmp.o")
            _run_compiler([*flags, f"-I{HERE}", "-c", str(HARNESS), "-o", str(tmp)],
                          "compiling harness.cpp")
            tmp.rename(obj)
    return obj


class Emulator:
    """One compiled kernel source (``sanitize``: a ``-fsanitize=`` value or None)."""

    def __init__(self, source: str, sanitize: str | None = None):
        self.source = source
        self.sanitize = sanitize
        self.kernels = kernel_names_in(source)
        self.last_stdout = ""  # the kernels' printf output of the last run
        flags = _flags(sanitize)
        tu = prepare_source(source)
        h = hashlib.sha256()
        for part in (tu.encode(), SHIM.read_bytes(), HARNESS.read_bytes(),
                     LINK_SCRIPT.read_bytes(), "\0".join(flags).encode()):
            h.update(part + b"\0")
        self.key = h.hexdigest()[:24]
        work = _dir() / self.key
        self.binary = work / "jitmeta-emu"
        with _lock_for(self.key):
            if not self.binary.exists():
                harness = _harness_object(flags)
                work.mkdir(parents=True, exist_ok=True)
                src = work / "jitmeta_emu_kernel.cpp"
                obj = work / "jitmeta_emu_kernel.o"  # smem.ld names this file
                src.write_text(tu)
                _run_compiler([*flags, "-fdata-sections", f"-I{HERE}", "-c", str(src),
                               "-o", str(obj)], "compiling the kernel source")
                tmp = work / "jitmeta-emu.tmp"
                _run_compiler([*flags, str(obj), str(harness), f"-Wl,-T,{LINK_SCRIPT}",
                               "-o", str(tmp)], "linking the emulator")
                tmp.rename(self.binary)

    def info(self) -> dict:
        """Kernels (name -> parameter kinds, 'p'/'u') and static shared memory bytes
        (all kernels' ``__shared__`` variables together)."""
        proc = subprocess.run([str(self.binary), "--list"], capture_output=True, text=True,
                              check=True)
        kernels, smem = {}, 0
        for line in proc.stdout.splitlines():
            word = line.split()
            if word[0] == "kernel":
                kernels[word[1]] = word[2] if len(word) > 2 else ""
            elif word[0] == "smem":
                smem = int(word[1])
        return {"kernels": kernels, "smem_bytes": smem}

    def run(self, cases: Sequence["Case"], **kw) -> list[torch.Tensor]:
        """Every case's ``out`` ([num_sms + 1, 2] int32), in order (see
        :func:`emulate_cases` for the keywords); ``Case.source`` is ignored."""
        return _schedule([(self, c) for c in cases], **kw)

    def _process(self, cases: list["Case"], blobs: list[bytes], words: list[int],
                 cpu: int | None, timeout: float | None, deadlock_s: float
                 ) -> list[torch.Tensor]:
        """Runs ``cases`` (encoded) in one process; raises EmulatorError."""
        with tempfile.TemporaryDirectory(dir=_dir()) as tmp:
            inp, outp = Path(tmp) / "cases.bin", Path(tmp) / "out.bin"
            with open(inp, "wb") as f:
                f.write(struct.pack("<3I", MAGIC, VERSION, len(cases)))
                for blob in blobs:
                    f.write(blob)
            cmd = [str(self.binary)] + (["--cpu", str(cpu)] if cpu is not None else [])
            env = dict(os.environ, JITMETA_EMU_TIMEOUT=str(deadlock_s))
            # host-side leaks do not matter; stop at the first race
            env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
            env.setdefault("TSAN_OPTIONS", "halt_on_error=1")
            try:
                proc = subprocess.run([*cmd, str(inp), str(outp)], capture_output=True,
                                      text=True, timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                raise EmulatorError(f"the emulator ran longer than {timeout} s "
                                    f"({len(cases)} cases)") from None
            self.last_stdout = proc.stdout
            if proc.returncode != 0:
                m = re.search(r"\bcase (\d+)", proc.stderr)
                i = int(m.group(1)) if m and int(m.group(1)) < len(cases) else None
                what = f" in case: {cases[i].describe()}" if i is not None else ""
                raise EmulatorError(f"emulator exited with status {proc.returncode}{what}\n"
                                    f"{_clip(proc.stderr)}", i)
            data = np.fromfile(outp, dtype="<i4")
        if data.size != sum(words):
            raise EmulatorError(f"emulator wrote {data.size} words, expected {sum(words)}")
        outs, pos = [], 0
        for n in words:
            outs.append(torch.from_numpy(data[pos:pos + n].copy()).view(-1, 2))
            pos += n
        return outs


def get_emulator(code: CodeSpec | None = None, *, source: str | None = None,
                 sanitize: str | None = None) -> Emulator:
    """The (cached) emulator of ``source``, by default ``render(code)``."""
    if source is None:
        if code is None:
            raise ValueError("get_emulator needs a CodeSpec or a source")
        source = render(code)
    key = hashlib.sha256(source.encode() + b"\0" + (sanitize or "").encode()).hexdigest()
    emu = _emulators.get(key)
    if emu is None:
        emu = _emulators.setdefault(key, Emulator(source, sanitize))
    return emu


def prebuild(codes_or_sources: Iterable[CodeSpec | str], *, sanitize: str | None = None,
             workers: int | None = None) -> list[Emulator]:
    """Compile several sources in parallel (one g++ per CPU)."""
    todo = list(dict.fromkeys(codes_or_sources))
    if not todo:
        return []
    workers = workers or max(1, min(len(todo), len(_cpus()) or 1))

    def one(item):
        if isinstance(item, str):
            return get_emulator(source=item, sanitize=sanitize)
        return get_emulator(item, sanitize=sanitize)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, todo))


# --- launches, as the library's loaded call makes them ----------------------------------

@dataclasses.dataclass(frozen=True)
class Launch:
    kernel: str
    grid: int
    threads: int
    dyn_smem: int
    cooperative: bool  # all blocks run at once (forked processes) instead of in turn
    args: tuple[tuple[int, int], ...]  # (kind, value)


_record_lock = threading.Lock()


def recorded_launches(plan: Plan, kernels: Sequence[str], batch: int, next_n: int,
                      num_sms: int, varlen: bool) -> tuple[list[Launch], int]:
    """The launches the library's loaded call makes for ``plan`` (with this shape),
    and its workspace words.

    The call is built the way ``dispatch.prepare`` builds it (``kernels.call`` with the
    module's kernel by name: geometry, cooperative launch and workspace words of the
    family) and called with ``runtime.launch`` recording. The emulator's workspace has
    exactly that many words (the library's may be larger) and starts zeroed, as
    ``runtime.allocate`` leaves it.
    """
    shaped = dataclasses.replace(plan, batch=batch, next_n=next_n, num_sms=num_sms)
    launcher = jm_kernels.call(0, shaped, "jitmeta_emit" if "jitmeta_emit" in kernels
                               else None)
    calls: list[Launch] = []

    def record(fn, grid, threads, smem, stream, args, types, pdl=False, cooperative=False):
        if fn is None:
            raise EmulatorError(f"the launcher launches a kernel the source does not define "
                                f"(it defines {', '.join(kernels)})")
        out = []
        for value, kind in zip(args, types, strict=True):
            if kind is runtime.POINTER:
                out.append((ARG_NULL, 0) if value == 0 else (_POINTERS[value], 0))
            elif kind is runtime.UINT32:
                if not 0 <= value < 2**32:
                    raise EmulatorError(f"u32 argument {value} of {fn} out of range")
                out.append((ARG_VALUE, int(value)))
            else:
                raise EmulatorError(f"unknown argument type {kind!r} in a launch of {fn}")
        calls.append(Launch(fn, int(grid), int(threads), int(smem), bool(cooperative),
                            tuple(out)))

    ws = _WS if launcher.ws_words else 0
    with _record_lock, mock.patch.object(runtime, "launch", record):
        launcher(_CTX, _IDX if varlen else 0, _OUT, 0, ws, False)
    return calls, launcher.ws_words


# --- cases -------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    """One call: inputs, the plan that serves them, and how to lay out the buffers.

    ``source`` replaces ``render(plan.code)`` (e.g. a deliberately broken kernel);
    ``misalign`` offsets the input arrays by that many bytes (a multiple of 4) from
    the 256-byte alignment of a fresh allocation, as a sliced tensor would be;
    ``seed`` picks the garbage that fresh shared memory, ``out`` and the workspace
    hold; ``label`` names the case in error messages; ``calls``: how many times the call
    is made, one after another on the same buffers (the workspace left by one launch
    is the next one's, as on a stream).
    """

    plan: Plan
    context_lens: torch.Tensor
    indices: torch.Tensor | None
    num_sms: int
    misalign: int = 0
    seed: int = 0
    label: str = ""
    source: str | None = None
    calls: int = 1

    @property
    def cost(self) -> int:
        """Rough emulation cost: threads x blocks of every launch."""
        p = self.plan
        return (p.grid * p.threads + 64) * self.calls

    def describe(self) -> str:
        if self.label:
            return self.label
        ctx = self.context_lens
        return (f"{self.plan.code.name} batch={ctx.shape[0]} "
                f"next_n={ctx.shape[1] if ctx.dim() == 2 else 1} num_sms={self.num_sms} "
                f"misalign={self.misalign} seed={self.seed}")

    def encode(self, kernels: Sequence[str]) -> tuple[bytes, int]:
        """(the case's record in the case file, its out words)."""
        ctx = self.context_lens.cpu()
        if ctx.dim() == 1:
            ctx = ctx.view(-1, 1)
        if ctx.dtype != torch.int32 or ctx.dim() != 2:
            raise ValueError(f"{self.describe()}: context_lens must be int32 [batch, next_n]")
        batch, next_n = ctx.shape
        varlen = self.indices is not None
        p = self.plan
        if (p.batch, p.next_n, p.code.varlen) != (batch, next_n, varlen):
            raise ValueError(f"{self.describe()}: the plan is for batch {p.batch}, next_n "
                             f"{p.next_n}, varlen {p.code.varlen}; the inputs are batch "
                             f"{batch}, next_n {next_n}, varlen {varlen}")
        if self.misalign % 4 or not 0 <= self.misalign < 256:
            raise ValueError(f"{self.describe()}: misalign must be a multiple of 4 below 256")
        launches, ws_words = recorded_launches(p, kernels, batch, next_n, self.num_sms,
                                               varlen)
        if self.calls < 1:
            raise ValueError(f"{self.describe()}: calls must be at least 1")
        launches = launches * self.calls
        out_words = (self.num_sms + 1) * 2
        blob = bytearray(struct.pack(
            "<9I", batch, next_n, self.num_sms, int(varlen), ws_words, out_words,
            self.misalign, self.seed & 0xFFFFFFFF, len(launches)))
        blob += ctx.contiguous().numpy().astype("<i4", copy=False).tobytes()
        if varlen:
            idx = self.indices.cpu().reshape(-1)
            if idx.dtype != torch.int32 or idx.numel() != batch:
                raise ValueError(f"{self.describe()}: indices must be int32 [batch]")
            blob += idx.contiguous().numpy().astype("<i4", copy=False).tobytes()
        for launch in launches:
            name = launch.kernel.encode()
            blob += struct.pack("<I", len(name)) + name + b"\0" * (-len(name) % 4)
            blob += struct.pack("<5I", launch.grid, launch.threads, launch.dyn_smem,
                                int(launch.cooperative), len(launch.args))
            for kind, value in launch.args:
                blob += struct.pack("<2I", kind, value)
        return bytes(blob), out_words


# --- running -----------------------------------------------------------------------------

def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def _schedule(work: list[tuple[Emulator, Case]], *, jobs: int | None = None,
              timeout: float | None = 900, deadlock_s: float = 60) -> list[torch.Tensor]:
    """Runs (emulator, case) pairs on ``jobs`` workers, each pinned to one CPU.

    Cases of one emulator are packed into a few processes (largest first); every worker
    runs one process at a time on its own CPU.
    """
    if not work:
        return []
    encoded = [case.encode(emu.kernels) for emu, case in work]
    cpus = _cpus()
    jobs = max(1, min(jobs or len(cpus) or 1, len(work)))
    # Pieces: per emulator, its cases split into about `jobs` cost-balanced parts.
    by_emu: dict[int, list[int]] = {}
    for i, (emu, _) in enumerate(work):
        by_emu.setdefault(id(emu), []).append(i)
    pieces: list[tuple[int, list[int]]] = []  # (cost, indices)
    for members in by_emu.values():
        parts = min(jobs, len(members))
        bins: list[list[int]] = [[] for _ in range(parts)]
        load = [0] * parts
        for i in sorted(members, key=lambda i: -work[i][1].cost):
            j = load.index(min(load))
            bins[j].append(i)
            load[j] += work[i][1].cost
        pieces += [(load[j], sorted(bins[j])) for j in range(parts)]
    pieces.sort(key=lambda p: -p[0])
    todo: "queue.Queue[list[int]]" = queue.Queue()
    for _, members in pieces:
        todo.put(members)
    results: dict[int, torch.Tensor] = {}
    errors: list[EmulatorError] = []

    def worker(cpu: int | None) -> None:
        while not errors:
            try:
                members = todo.get_nowait()
            except queue.Empty:
                return
            emu = work[members[0]][0]
            try:
                outs = emu._process([work[i][1] for i in members],
                                    [encoded[i][0] for i in members],
                                    [encoded[i][1] for i in members], cpu, timeout,
                                    deadlock_s)
            except EmulatorError as exc:
                if exc.case_index is not None:
                    exc.case_index = members[exc.case_index]
                errors.append(exc)
                return
            for i, out in zip(members, outs):
                results[i] = out

    threads = [threading.Thread(target=worker, args=(cpus[j % len(cpus)] if cpus else None,))
               for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(work))]


def emulate_cases(cases: Sequence[Case], *, sanitize: str | None = None,
                  jobs: int | None = None, timeout: float | None = 900,
                  deadlock_s: float = 60) -> list[torch.Tensor]:
    """Every case's ``out``, in order; cases may use different codes or sources.

    Builds what is missing (in parallel), then runs on ``jobs`` workers (default one
    per usable CPU), each process pinned to one CPU. ``timeout`` bounds one process,
    ``deadlock_s`` any one barrier wait inside it. The first failure raises
    :class:`EmulatorError`; its ``case_index`` is the index into ``cases``.
    """
    keys = [c.source if c.source is not None else c.plan.code for c in cases]
    emus = dict(zip(dict.fromkeys(keys), prebuild(dict.fromkeys(keys), sanitize=sanitize)))
    return _schedule([(emus[k], c) for k, c in zip(keys, cases)], jobs=jobs,
                     timeout=timeout, deadlock_s=deadlock_s)


def emulate_many(code: CodeSpec | None, cases: Sequence[Case], *, source: str | None = None,
                 sanitize: str | None = None, **kw) -> list[torch.Tensor]:
    """Runs many cases of one source (default ``render(code)``)."""
    return get_emulator(code, source=source, sanitize=sanitize).run(cases, **kw)


def emulate(code: CodeSpec | None, plan: Plan, context_lens: torch.Tensor,
            indices: torch.Tensor | None, num_sms: int, *, source: str | None = None,
            sanitize: str | None = None, misalign: int = 0, seed: int = 0
            ) -> torch.Tensor:
    """The kernel's int32 ``[num_sms + 1, 2]`` output for one call, on the CPU.

    ``code`` is normally ``plan.code`` (None means that); ``source`` replaces
    ``render(code)`` (e.g. a deliberately broken kernel); ``sanitize`` builds with
    ``-fsanitize=...`` (``"address,undefined"`` or ``"thread"``).
    """
    case = Case(plan, context_lens, indices, num_sms, misalign=misalign, seed=seed)
    return emulate_many(code if code is not None else plan.code, [case], source=source,
                        sanitize=sanitize)[0]
