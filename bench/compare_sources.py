"""A/B-time kernel sources on a GPU: the same plan rendered with other schedule headers.

For a kernel change whose effect the main benchmark cannot pin down: each HEADER file
replaces ``templates/jitmeta_schedule.cuh`` in the rendered source of every case below;
each is compiled, checked bit-exact against the reference and timed by CUDA-graph
replay (20 back-to-back calls per graph, median of 5). A clock kernel spinning a known
number of cycles gives the SM clock of the run, so runs can be compared.

    python bench/compare_sources.py [--once] [--cases SUBSTR] HEADER [HEADER ...]

``--once`` launches each kernel once, untimed (for ``ncu -k jitmeta_emit``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

import jitmeta
from jitmeta import api, envs
from jitmeta.heuristics.plan import plan
from jitmeta.impls import render as render_mod
from jitmeta.jit import runtime
from jitmeta.jit.compiler import CompileOptions, compile_cubin

from benchmark_metadata import graph_time_us, make_inputs  # bench/, next to this file

NUM_SMS = 132
# (label, batch, next_n, varlen, forced variant, forced threads)
CASES = [("static dense 1", 1, 1, False, None, None),
         ("static dense 1024", 1024, 1, False, None, None),
         ("static varlen 1024", 1024, 1, True, None, None),
         ("static dense 4096", 4096, 1, False, None, None),
         ("static varlen 4096", 4096, 1, True, None, None),
         ("static dense 8192", 8192, 1, False, None, None),
         ("static dense 8192 t512", 8192, 1, False, None, 512),
         ("static varlen 8192", 8192, 1, True, None, None),
         ("static varlen 8192 t512", 8192, 1, True, None, 512),
         ("static varlen 8192 t256", 8192, 1, True, None, 256),
         ("dynamic dense 16384", 16384, 1, False, "dynamic", None),
         ("dynamic varlen 16384", 16384, 1, True, "dynamic", None),
         ("chunked dense 16384", 16384, 1, False, None, None),
         ("chunked varlen 16384", 16384, 1, True, None, None),
         ("chunked dense 65536", 65536, 1, False, None, None),
         ("chunked varlen 65536", 65536, 1, True, None, None),
         ("chunked dense 2^20", 2**20, 1, False, None, None),
         ("chunked varlen 2^20", 2**20, 1, True, None, None),
         ("chunked varlen 2^24", 2**24, 1, True, None, None)]
CLOCK_SRC = r'''
extern "C" __global__ void jitmeta_clock(unsigned cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
'''


def sm_clock_mhz(arch: str) -> float:
    res = compile_cubin(CLOCK_SRC, CompileOptions.for_arch(arch))
    fn = runtime.load_module(0, "ab-clock", res.cubin, ("jitmeta_clock",)).functions[
        "jitmeta_clock"]
    cycles = 200000

    def call():
        runtime.launch(fn, 1, 32, 0, torch.cuda.current_stream().cuda_stream, (cycles,),
                       (runtime.UINT32,))
    return cycles / graph_time_us(call, calls=5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("headers", nargs="+", type=Path)
    ap.add_argument("--once", action="store_true", help="one untimed launch per kernel")
    ap.add_argument("--cases", default="", help="only cases whose label contains this")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 1
    lim = api.device_limits(0)
    if not args.once:
        print(f"SM clock ~{sm_clock_mhz(lim.arch):.0f} MHz")
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    env = render_mod._environment()
    bad = 0
    print(f"{'case':22s} " + " ".join(f"{h.stem:>14s}" for h in args.headers))
    for label, batch, next_n, varlen, variant, threads in CASES:
        if args.cases not in label:
            continue
        ctx, idx = make_inputs(batch, "varlen" if varlen else f"next_n={next_n}", gen)
        want = jitmeta.reference_schedule(ctx, NUM_SMS, idx)
        with envs.override(JITMETA_VARIANT=variant, JITMETA_THREADS=threads):
            p = plan(batch, next_n, varlen, NUM_SMS, 256, "smxx", lim)
        c = p.code
        cells = []
        for h in args.headers:
            src = env.get_template(render_mod.TEMPLATE).render(
                schedule_header=h.read_text(), code_name=c.name, variant=c.variant,
                varlen=c.varlen, schedule=c.schedule, split_kv=c.split_kv,
                threads=c.threads, capacity=c.capacity)
            cubin = compile_cubin(src, CompileOptions.for_arch(c.arch)).cubin
            dyn = p.smem_dynamic_bytes
            mod = runtime.load_module(0, f"ab-{h}-{c.name}", cubin, ("jitmeta_emit",),
                                      lim.smem_optin_bytes - p.smem_static_bytes
                                      if dyn else 0)
            # launched the way api.prepare / api._run launch it
            launcher = api.Launcher(device=0, plan=p, emit=mod.functions["jitmeta_emit"],
                                    cooperative=p.variant == "chunked", threads=c.threads,
                                    grid=p.grid, dyn_smem=dyn,
                                    ws_words=api.launcher_ws_words(p))
            ws = runtime.allocate(0, 4 * launcher.ws_words) if launcher.ws_words else 0
            out = torch.full((NUM_SMS + 1, 2), -1, dtype=torch.int32, device="cuda")

            def call():
                launcher(ctx.data_ptr(), 0 if idx is None else idx.data_ptr(), batch, next_n,
                         NUM_SMS, out.data_ptr(), torch.cuda.current_stream().cuda_stream,
                         ws, False)
            call()
            torch.cuda.synchronize()
            exact = torch.equal(out, want)
            bad += not exact
            mark = "" if exact else " !!"
            us = None if args.once else graph_time_us(call)
            cells.append(f"{'once' if us is None else f'{us:.2f}':>11s}{mark}")
        print(f"{label:22s} " + " ".join(f"{x:>14s}" for x in cells), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
