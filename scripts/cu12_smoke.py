"""CUDA 12 smoke test: jitmeta with cuda-bindings 12.x and NVRTC 12.x, bit for bit.

Meant to run on a GPU machine whose torch is a CUDA 13 (or 12) build, with the CUDA 12
wheels (``cuda-bindings`` 12.9, ``nvidia-cuda-nvrtc-cu12``, ``cuda-pathfinder``)
installed into a separate ``pip install --target`` directory that comes first on
``PYTHONPATH`` (``scripts/cu12_smoke.sh`` has the exact commands). It

1. loads NVRTC 12 from that directory before cuda.bindings looks for one (otherwise
   cuda-pathfinder may pick an NVRTC 13 from site-packages), and prints the versions
   and files actually imported: cuda.bindings, NVRTC, the driver, torch;
2. checks that every cuda.bindings name jitmeta calls exists in the imported version;
3. compiles with NVRTC 12 into a fresh temporary cache and checks every entry's NVRTC
   version;
4. on a GPU: runs the seed case (batch 8192 varlen, context 4096, indices
   ``arange // 2``, 132 SMs) and random cases in every schedule format and both modes
   against ``jitmeta.reference_schedule`` with ``torch.equal``.

One line per case, then ``N passed, M failed``; exit 1 on any failure. ``--cpu``
runs steps 1-3 only (no GPU needed; step 3 then compiles the same kernels for sm_90).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import random
import shutil
import sys
import tempfile
import time

NVRTC12_GLOB = "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"

# Every cuda.bindings name jitmeta uses (jit/compiler.py, jit/runtime.py).
NVRTC_NAMES = ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram",
               "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetProgramLogSize",
               "nvrtcGetProgramLog", "nvrtcGetErrorString", "nvrtcDestroyProgram",
               "nvrtcGetSupportedArchs", "nvrtcResult.NVRTC_SUCCESS")
DRIVER_NAMES = ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
                "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxSynchronize",
                "cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute",
                "cuFuncGetAttribute", "cuMemAlloc", "cuMemsetD8", "cuLaunchKernel",
                "cuLaunchKernelEx", "cuGetErrorName", "cuGetErrorString",
                "cuDriverGetVersion", "CUstream", "CUlaunchConfig", "CUlaunchAttribute",
                "CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE",
                "CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
                "CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS",
                "CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def case(self, name: str, ok: bool, detail: str = "") -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""),
              flush=True)


def preload_nvrtc12() -> str:
    """dlopen NVRTC 12 from the first sys.path entry that has the cu12 wheel's copy,
    so cuda-pathfinder finds it already loaded. Returns its path."""
    for entry in sys.path:
        hits = glob.glob(os.path.join(entry or ".", NVRTC12_GLOB))
        if hits:
            ctypes.CDLL(hits[0], mode=os.RTLD_GLOBAL | os.RTLD_NOW)
            return os.path.realpath(hits[0])
    sys.exit(f"no {NVRTC12_GLOB} on sys.path ({os.pathsep.join(sys.path)}): install "
             "nvidia-cuda-nvrtc-cu12 into a --target dir and put it first on PYTHONPATH "
             "(see scripts/cu12_smoke.sh)")


def loaded_library(stem: str) -> str:
    """The file of a loaded shared library whose name starts with ``stem``."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem):
                return path
    return "not loaded"


def resolve(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def check_versions(report: Report, gpu: bool, allow_13: bool) -> None:
    import cuda.bindings
    import torch
    from cuda.bindings import driver, nvrtc

    import jitmeta
    from jitmeta.jit.compiler import cuda_bindings_version, nvrtc_version

    print(f"python       {sys.version.split()[0]}")
    print(f"jitmeta      {jitmeta.__version__} ({os.path.dirname(jitmeta.__file__)})")
    print(f"torch        {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"cuda.bindings {cuda.bindings.__version__} "
          f"({os.path.dirname(cuda.bindings.__file__)}); distribution "
          f"{cuda_bindings_version()}")
    print(f"NVRTC        {nvrtc_version()} ({loaded_library('libnvrtc.so')})")
    if gpu:
        driver.cuInit(0)
        err, v = driver.cuDriverGetVersion()
        print(f"driver       CUDA {v // 1000}.{v % 1000 // 10} "
              f"({loaded_library('libcuda.so')}); {torch.cuda.get_device_name()}")
    want = ("12.", "13.") if allow_13 else ("12.",)
    label = " or ".join(w + "x" for w in want)
    report.case(f"cuda.bindings is {label}", cuda.bindings.__version__.startswith(want),
                cuda.bindings.__version__)
    report.case(f"NVRTC is {label}", nvrtc_version().startswith(want), nvrtc_version())
    missing = [n for n in NVRTC_NAMES if not _has(nvrtc, n)] + \
        [n for n in DRIVER_NAMES if not _has(driver, n)]
    report.case("every cuda.bindings name jitmeta uses exists", not missing,
                "missing: " + ", ".join(missing) if missing else
                f"{len(NVRTC_NAMES)} nvrtc + {len(DRIVER_NAMES)} driver names")
    # the launch-config structs jitmeta fills (no GPU needed to build them)
    cfg = driver.CUlaunchConfig()
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    attr.value.cooperative = 1
    pdl = driver.CUlaunchAttribute()
    pdl.id = (driver.CUlaunchAttributeID
              .CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    pdl.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs = [attr, pdl]
    cfg.numAttrs = 2
    cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes = 4, 256, 0
    cfg.hStream = driver.CUstream(0)
    report.case("CUlaunchConfig with cooperative + PDL attributes", cfg.numAttrs == 2
                and int(cfg.attrs[0].value.cooperative) == 1)


def _has(module, dotted: str) -> bool:
    try:
        resolve(module, dotted)
        return True
    except AttributeError:
        return False


def compile_only(report: Report) -> None:
    """Without a GPU: build (NVRTC 12, fresh cache) one cubin per variant and format."""
    import jitmeta
    from jitmeta import dispatch
    from jitmeta.kernels import SCHEDULES

    for schedule in SCHEDULES:
        for varlen in (False, True):
            for batch in (1000, 8192, 100000):
                p = jitmeta.plan(batch, 1, varlen, 132, schedule=schedule, arch="sm_90")
                t0 = time.perf_counter()
                built = dispatch.build_plan(p)
                ok = built.cubin.startswith(b"\x7fELF") and \
                    built.meta["nvrtc_version"] == _nvrtc()
                report.case(f"compile {p.code.name}", ok,
                            f"{len(built.cubin)} B, {built.source}, NVRTC "
                            f"{built.meta['nvrtc_version']}, "
                            f"{(time.perf_counter() - t0) * 1e3:.0f} ms")


def _nvrtc() -> str:
    from jitmeta.jit.compiler import nvrtc_version

    return nvrtc_version()


def random_case(rng: random.Random, varlen: bool, batch: int):
    import torch

    hi = rng.choice((300, 5000, 70000))
    if varlen:
        ctx = torch.tensor([rng.randint(0, hi) for _ in range(batch)],
                           dtype=torch.int32).view(-1, 1)
        runs, req = [], 0
        while len(runs) < batch:
            runs += [req] * rng.randint(1, 6)
            req += 1
        idx = torch.tensor(runs[:batch], dtype=torch.int32)
        return ctx, idx
    next_n = rng.choice((1, 2))
    ctx = torch.tensor([rng.randint(0, hi) for _ in range(batch * next_n)],
                       dtype=torch.int32).view(batch, next_n)
    return ctx, None


def run_gpu_cases(report: Report, seed: int) -> None:
    import torch

    import jitmeta
    from jitmeta.kernels import SCHEDULES

    def check(name, ctx, idx, num_sms, schedule):
        try:
            got = jitmeta.get_paged_mqa_logits_metadata(
                ctx.cuda(), 64, num_sms, indices=None if idx is None else idx.cuda(),
                schedule=schedule)
            torch.cuda.synchronize()
            want = jitmeta.reference_schedule(ctx, num_sms, idx, schedule=schedule)
            ok = torch.equal(got.cpu(), want)
            detail = "" if ok else f"first differing row {_first_diff(got.cpu(), want)}"
        except Exception as exc:  # noqa: BLE001 - a failing case is reported, not fatal
            ok, detail = False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        report.case(name, ok, detail)

    # the seed case
    ctx = torch.full((8192, 1), 4096, dtype=torch.int32)
    idx = (torch.arange(8192) // 2).to(torch.int32)
    for schedule in SCHEDULES:
        check(f"seed: batch 8192 varlen ctx 4096 idx arange//2, 132 SMs, {schedule}",
              ctx, idx, 132, schedule)
    rng = random.Random(seed)
    print(f"random cases: seed {seed}")
    for schedule in SCHEDULES:
        for varlen in (False, True):
            for batch in (1, 37, 1024, 4063, 8192, 20000, 100000):
                num_sms = rng.choice((1, 78, 132, 264))
                ctx, idx = random_case(rng, varlen, batch)
                mode = "varlen" if varlen else f"next_n {ctx.shape[1]}"
                check(f"random: batch {batch} {mode}, {num_sms} SMs, {schedule}", ctx,
                      idx, num_sms, schedule)


def _first_diff(a, b) -> str:
    rows = (a != b).any(dim=1).nonzero().flatten().tolist()
    return f"{rows[0]}: got {a[rows[0]].tolist()} want {b[rows[0]].tolist()}" if rows \
        else "none"


def check_cache(report: Report, root: str) -> None:
    from jitmeta.jit.cache import DiskCache

    cache = DiskCache(root)
    versions = {}
    for key in cache.keys():
        meta = cache.read_meta(key) or {}
        versions[key] = meta.get("nvrtc_version")
    bad = {k[:16]: v for k, v in versions.items() if v != _nvrtc()}
    report.case(f"fresh cache {root}: {len(versions)} entries, all from NVRTC {_nvrtc()}",
                bool(versions) and not bad, f"other versions: {bad}" if bad else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true",
                    help="no GPU: versions, API names and NVRTC 12 compiles only")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the random cases (default: from the clock, printed)")
    ap.add_argument("--keep-cache", action="store_true",
                    help="keep the temporary cache directory (default: remove it)")
    ap.add_argument("--allow-13", action="store_true",
                    help="accept cuda-bindings / NVRTC 13 too (to try the script itself)")
    args = ap.parse_args(argv)

    nvrtc_path = preload_nvrtc12() if not args.allow_13 else None
    if nvrtc_path:
        print(f"preloaded    {nvrtc_path}")
    root = tempfile.mkdtemp(prefix="jitmeta-cu12-cache-")
    os.environ["JITMETA_CACHE_DIR"] = root  # before jitmeta reads its knobs
    os.environ.pop("JITMETA_OFFLINE", None)

    import torch

    gpu = not args.cpu
    if gpu and not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible to torch: run with --cpu for the CPU-only checks")
    report = Report()
    check_versions(report, gpu, args.allow_13)
    if gpu:
        run_gpu_cases(report, args.seed if args.seed is not None else
                      int(time.time()) % 100000)
    else:
        compile_only(report)
    check_cache(report, root)
    if args.keep_cache:
        print(f"cache kept at {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
