"""What the chunked variant's cooperative launch costs on the GPU, against the other
ways to launch the same cubin.

Each case plans a chunked call (the planner's own plan, or a forced slab size that
gives a grid of at most 16 blocks), builds and loads it the way jitmeta does, and
times the same kernel, arguments and workspace launched

* ``cooperative``: what jitmeta does (every block resident at once, or the launch
  fails);
* ``cluster``: the whole grid as one thread-block cluster (at most 16 blocks, more than
  8 with the non-portable size allowed): its blocks are co-scheduled by the hardware, so
  the in-kernel exchange through the workspace is as safe as under a cooperative
  launch, as long as the cluster can be placed at all;
* ``plain``: no attribute. Nothing guarantees that the blocks are resident together;
  on an otherwise idle GPU they are. Measured for reference only;

and the empty kernel launched the same three ways with the same grid and block size.
Same graph shape as bench/benchmark_metadata.py (calls per graph, replays, repeats;
no PDL, as there); each timed output is compared with jitmeta.reference_schedule
after the replays. Each mode is also launched eagerly, in bench/benchmark_host.py's
loops (200 launches, the launches alone and the loop with its synchronize): what an
eager call's launch costs the host, and the GPU, in each mode. An experiment record
(not read by bench/make_tables.py): ``<date>-<device>-launch-modes.json``.

    python bench/launch_modes.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import jitmeta
from jitmeta import dispatch, envs
from jitmeta.jit import runtime
from jitmeta.kernels.paged_mqa import ARG_TYPES

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_host as host  # noqa: E402
import benchmark_metadata as bm  # noqa: E402
import records  # noqa: E402
import touch as floors_mod  # noqa: E402

MODES = ("cooperative", "cluster", "plain")
MAX_CLUSTER = 16  # the largest cluster Hopper places (non-portable beyond 8)
# (format, mode, batch, forced knobs or None for the planner's plan)
_SMALL = {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": 1024, "JITMETA_THREADS": 256}
CASES = [
    ("smxx", "varlen/runs=1..16", 8192, _SMALL),
    ("sm100", "varlen/runs=1..16", 8192, _SMALL),
    ("smxx", "next_n=1", 8192, _SMALL),
    ("smxx", "varlen/runs=1..16", 16384, None),
    ("sm100", "varlen/runs=1..16", 16384, None),
    ("smxx", "next_n=1", 16384, None),
    ("smxx", "varlen/runs=1..16", 65536, None),
    ("smxx", "varlen/runs=2", 65536, None),  # the chunked case of bench/benchmark_host.py
    ("smxx", "varlen/runs=1..16", 65536, {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": 4096,
                                          "JITMETA_THREADS": 512}),
    ("sm100", "varlen/runs=1..16", 65536, {"JITMETA_VARIANT": "chunked",
                                           "JITMETA_CHUNK": 4096, "JITMETA_THREADS": 512}),
    ("smxx", "next_n=1", 65536, None),
    ("smxx", "next_n=1", 65536, {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": 4096,
                                 "JITMETA_THREADS": 512}),
    ("smxx", "varlen/runs=1..16", 2**20, None),
]


def _cluster_config(grid: int, threads: int, smem: int, stream: int):
    """A CUlaunchConfig running the whole grid as one thread-block cluster."""
    from cuda.bindings import driver

    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = driver.CUstream(stream)
    a = driver.CUlaunchAttribute()
    a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = grid, 1, 1
    cfg.attrs = [a]
    cfg.numAttrs = 1
    return cfg


def _function(fn):
    from cuda.bindings import driver

    return fn if isinstance(fn, driver.CUfunction) else driver.CUfunction(int(fn))


def cluster_fits(fn, grid: int, threads: int, smem: int) -> tuple[bool, str]:
    """Whether ``grid`` blocks can run as one cluster (allowing the non-portable size),
    and why not."""
    from cuda.bindings import driver

    if grid > MAX_CLUSTER:
        return False, f"grid {grid} > {MAX_CLUSTER}"
    fn = _function(fn)
    err, = driver.cuFuncSetAttribute(
        fn, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    if err:
        return False, f"cuFuncSetAttribute(non-portable cluster size): {err}"
    cfg = _cluster_config(grid, threads, smem, torch.cuda.current_stream().cuda_stream)
    err, n = driver.cuOccupancyMaxActiveClusters(fn, cfg)
    if err:
        return False, f"cuOccupancyMaxActiveClusters: {err}"
    return n >= 1, f"{n} cluster(s) of {grid} at once"


def launcher(fn, grid: int, threads: int, smem: int, args: tuple, mode: str):
    """A closure launching ``fn`` ``mode``'s way on the current stream: cooperatively or
    plainly through jitmeta's own launch, as one cluster through cuLaunchKernelEx."""
    from cuda.bindings import driver

    if mode != "cluster":
        def call():
            runtime.launch(fn, grid, threads, smem, torch.cuda.current_stream().cuda_stream,
                           args, ARG_TYPES, cooperative=mode == "cooperative")
        return call
    fn = _function(fn)
    params = runtime.KernelParams(ARG_TYPES)  # the empty kernel's too (bench/touch.py)
    params.pack(*args)

    def call():
        cfg = _cluster_config(grid, threads, smem, torch.cuda.current_stream().cuda_stream)
        err, = driver.cuLaunchKernelEx(cfg, fn, params.address, 0)
        if err:
            raise RuntimeError(f"cuLaunchKernelEx (cluster of {grid}): {err}")
    return call


def eager_loops(go) -> dict:
    """Microseconds per eager launch of ``go``, both of bench/benchmark_host.py's loop
    methods ("calls": the launches alone; "calls+sync": with the final synchronize)."""
    return {method: records.spread(host.loop_us(go, host.LOOP_CALLS, host.LOOP_RUNS,
                                                torch.cuda.synchronize,
                                                method == "calls+sync"))
            for method in ("calls", "calls+sync")}


def run(out_dir: Path | None) -> int:
    timer = bm.GraphTimer(bm.CALLS_PER_GRAPH, bm.REPLAYS, bm.REPEATS, False)
    meta_dev = records.gpu_meta()
    dev = torch.cuda.current_device()
    floors = floors_mod.Floors(dev, meta_dev["arch"])
    empty_fn = floors.fns[floors_mod.EMPTY_NAME]
    gen = torch.Generator().manual_seed(bm.SEED)
    rows = []
    for fmt, mode, batch, forced in CASES:
        next_n, runs = bm.mode_shape(mode)
        ctx, idx = bm.make_inputs(batch, mode, gen, "cuda")
        want = jitmeta.reference_schedule(ctx, bm.NUM_SMS, idx, schedule=fmt)
        with envs.override(**(forced or {})):
            call = dispatch.prepare(dev, batch, next_n, runs is not None, bm.NUM_SMS, 256,
                                    fmt)
        p, lc = call.plan, call.launch
        if p.variant != "chunked":
            raise SystemExit(f"launch_modes: {fmt} {mode} {batch} {forced}: planned "
                             f"{p.variant}, not chunked")
        fits, why = cluster_fits(lc.function, lc.grid, lc.threads, lc.smem)
        row = {"format": fmt, "mode": mode, "batch": batch, "forced": forced,
               "code": p.code.name, "grid": lc.grid, "threads": lc.threads,
               "cluster": why, "kernel": {}, "empty": {}, "eager": {}, "eager_empty": {}}
        for how in MODES:
            if how == "cluster" and not fits:
                continue
            out = torch.empty(bm.NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
            ws = torch.zeros(max(call.ws_words, 1), dtype=torch.int32, device="cuda")
            args = (ctx.data_ptr(), 0 if idx is None else idx.data_ptr(), batch, next_n,
                    bm.NUM_SMS, call.wide_last, out.data_ptr(), ws.data_ptr())
            go = launcher(lc.function, lc.grid, lc.threads, lc.smem, args, how)

            def kernel(go=go, out=out):
                go()
                return out
            timing, exact = timer.measure(kernel, want)
            row["kernel"][how] = {"us": timing, "exact": exact}
            row["eager"][how] = eager_loops(go)
            out.fill_(-1)
            go()
            torch.cuda.synchronize()
            row["eager"][how]["exact"] = torch.equal(out, want)
            e_fits = how != "cluster" or cluster_fits(empty_fn, lc.grid, lc.threads, 0)[0]
            if e_fits:
                e_go = launcher(empty_fn, lc.grid, lc.threads, 0, (0,) * 8, how)
                e_timing, _ = timer.measure(e_go)
                row["empty"][how] = {"us": e_timing}
                row["eager_empty"][how] = eager_loops(e_go)
        rows.append(row)
        cells = "  ".join(
            f"{how} {bm._fmt(row['kernel'][how]['us'])}"
            f"{'' if row['kernel'][how]['exact'] else ' WRONG'}"
            f" (empty {bm._fmt(row['empty'].get(how, {}).get('us'))})"
            for how in MODES if how in row["kernel"])
        print(f"{fmt:5s} {mode:18s} {batch:8d} grid {lc.grid:3d}x{lc.threads:4d} "
              f"{'forced ' if forced else ''}{cells}  [{why}]", flush=True)
        for how in row["eager"]:
            e, z = row["eager"][how], row["eager_empty"].get(how, {})
            print(f"    eager {how:11s} launches {bm._fmt(e['calls'])}, with the sync "
                  f"{bm._fmt(e['calls+sync'])}{'' if e['exact'] else ' WRONG'} (empty "
                  f"{bm._fmt(z.get('calls'))}, {bm._fmt(z.get('calls+sync'))})", flush=True)
        del ctx, idx
    meta = dict(records.base_meta(sys.argv[1:], "launch_modes.py"), **meta_dev)
    meta.update({"num_sms": bm.NUM_SMS, "calls_per_graph": bm.CALLS_PER_GRAPH,
                 "replays": bm.REPLAYS, "repeats": bm.REPEATS, "pdl": False,
                 "exact_checked": "the output of the timed graph replays, torch.equal "
                                  "against jitmeta.reference_schedule"})
    record = {"schema": records.SCHEMA, "kind": "gpu-launch-modes", "meta": meta,
              "rows": rows}
    if out_dir is not None:
        path = records.write_record(
            record, out_dir, f"{meta['date']}-{records.slug(meta['device'])}-launch-modes.json")
        print(f"record: {path}")
    bad = [r for r in rows for part in ("kernel", "eager") for v in r[part].values()
           if not v["exact"]]
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="directory for the record")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_modes: no GPU")
        return 1
    return run(args.out)


if __name__ == "__main__":
    sys.exit(main())
