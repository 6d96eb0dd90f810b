"""What a kernel launch costs the host: from C (the driver API's floor) and through
jitmeta's launch paths (``jitmeta.jit.runtime.launch``).

The same empty kernel with jitmeta_emit's eight arguments, the same loops as
bench/benchmark_host.py (LOOP_CALLS launches per loop, the GPU synchronized outside the
timing, several loops: median, min, max):

* C: bench/launch_cost.c, built here with nvcc (``cuLaunchKernel``,
  ``cuLaunchKernelEx``, ``cuLaunchKernelEx`` with the PDL attribute);
* Python: ``runtime.launch`` through the C launcher (``jitmeta._launch``, when built)
  and through cuda.bindings with packed ``kernelParams`` (each without and with PDL),
  and cuda.bindings' ``cuLaunchKernel`` with a ``(values, types)`` tuple.

Against the C figures: what each Python path adds per launch. Writes
``<date>-<device>-launch-cost.json`` (or ``--json FILE``); an experiment record (not
read by bench/make_tables.py).

    python bench/launch_cost.py [--out DIR | --json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from jitmeta.jit import runtime
from cuda.bindings import driver

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)

HERE = Path(__file__).resolve().parent
LOOP_CALLS = 200
RUNS = 15
# the kernel of launch_cost.c, read from its source (one definition)
PTX_START, PTX_END = "static const char kPtx[] =", ";\n"


def kernel_ptx() -> bytes:
    text = (HERE / "launch_cost.c").read_text()
    body = text.split(PTX_START, 1)[1].split(PTX_END, 1)[0]
    lines = [ln.strip() for ln in body.strip().splitlines()]
    return "".join(json.loads(ln) for ln in lines).encode() + b"\0"


def run_c() -> dict:
    """Builds and runs launch_cost.c: {mode: {median, min, max}} (us)."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "launch_cost"
        libdirs = [f"-L{d}" for d in ("/usr/local/nvidia/lib64", "/usr/local/cuda/lib64/stubs",
                                      "/usr/lib/x86_64-linux-gnu") if os.path.isdir(d)]
        subprocess.run(["nvcc", "-O2", "-o", str(exe), str(HERE / "launch_cost.c"), *libdirs,
                        "-lcuda"], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        name, med, lo, hi = line.split()
        result["C " + name] = {"min": float(lo), "median": float(med), "max": float(hi),
                               "n": RUNS}
    return result


def loop(fn, sync) -> dict:
    for _ in range(3 * LOOP_CALLS):
        fn()
    us = []
    for _ in range(RUNS):
        sync()
        t0 = time.perf_counter()
        for _ in range(LOOP_CALLS):
            fn()
        us.append((time.perf_counter() - t0) * 1e6 / LOOP_CALLS)
    sync()
    return records.spread(us)


def run_python() -> dict:
    torch.cuda.init()
    device = torch.cuda.current_device()
    mod = runtime.load_module(device, "launch-cost", kernel_ptx(), ("k",))
    fn = mod.functions["k"]
    s = torch.cuda.Stream()
    stream = s.cuda_stream
    types = (runtime.POINTER, runtime.POINTER, runtime.UINT32, runtime.UINT32, runtime.UINT32,
             runtime.UINT32, runtime.POINTER, runtime.POINTER)
    args = (0, 0, 1024, 1, 132, 0, 0, 0)
    runtime.make_current(device)
    handle = int(fn)
    modes = {}
    if runtime.c_launcher():
        modes["Python runtime.launch, C launcher"] = loop(
            lambda: runtime.launch(handle, 1, 256, 0, stream, args, types), s.synchronize)
        modes["Python runtime.launch, C launcher + PDL"] = loop(
            lambda: runtime.launch(handle, 1, 256, 0, stream, args, types, True),
            s.synchronize)
    saved, runtime._c_launch = runtime._c_launch, None  # the cuda.bindings path
    try:
        modes["Python runtime.launch, cuda.bindings (packed kernelParams)"] = loop(
            lambda: runtime.launch(fn, 1, 256, 0, stream, args, types), s.synchronize)
        modes["Python runtime.launch, cuda.bindings (packed kernelParams) + PDL"] = loop(
            lambda: runtime.launch(fn, 1, 256, 0, stream, args, types, True), s.synchronize)
    finally:
        runtime._c_launch = saved
    modes["Python cuLaunchKernel ((values, types) tuple)"] = loop(
        lambda: driver.cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, (args, types), 0),
        s.synchronize)
    return modes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dest = ap.add_mutually_exclusive_group()
    dest.add_argument("--out", type=Path, help="directory for the record")
    dest.add_argument("--json", type=Path, help="record file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_cost: no GPU")
        return 1
    modes = run_c()
    print(modes, flush=True)
    modes.update(run_python())
    width = max(map(len, modes))
    print(f"{'launch':<{width}}  us per launch (min-max), {RUNS} loops of {LOOP_CALLS}")
    for name, v in modes.items():
        print(f"{name:<{width}}  {v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})")
    meta = records.base_meta(argv, "launch_cost.py")
    meta.update(records.gpu_meta())
    record = {"schema": records.SCHEMA, "kind": "gpu-launch-cost", "meta": meta,
              "loop_calls": LOOP_CALLS, "runs": RUNS,
              "modes": modes}
    if args.json:
        path = records.write_record(record, args.json.parent, args.json.name)
    else:
        path = records.write_record(
            record, args.out or records.REPO / "docs" / "benchmarks" / "experiments",
            f"{meta['date']}-{records.slug(meta['device'])}-launch-cost.json")
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
