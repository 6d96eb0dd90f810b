"""A/B-time launch configurations of the schedule kernels on a GPU and write a record.

For a planner change the main benchmark does not try (the block size and slab size of
the chunked variant, and its blocks per SM; or a single-block variant): each
configuration of :data:`CONFIGS` is planned under its knobs, timed by CUDA-graph replay
in the main benchmark's graph shape (``benchmark_metadata.GraphTimer``: 20 back-to-back
calls with ``out=``, median of 5 repeats) on the same inputs as the others, and the
output of the timed replays is compared with the reference (``torch.equal``). "Blocks
per SM" above one lets the chunked grid exceed one block per SM (the planner's rule is
at most one); a cooperative launch the device refuses is retried with fewer blocks by
the launcher, and the record says which grid ran.

    python bench/compare_configs.py [--out DIR] [--cases SUBSTR] [--configs A,B,...]
                                    [--modes M,...] [--batches B,...]

The record (``--out``: ``<dir>/<date>-<device>-configs.json``) is an experiment
record: the tables are not generated from it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

import jitmeta
from jitmeta import dispatch, envs
from jitmeta.heuristics import plan as plan_mod
from jitmeta.jit import launcher

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)
from benchmark_metadata import (BLOCK_KV, CALLS_PER_GRAPH, NUM_SMS, REPEATS,  # noqa: E402
                                REPLAYS, GraphTimer, make_inputs)

FORMATS = ("smxx", "sm100")
MODES = ("next_n=1", "next_n=2", "varlen/runs=1..16")
BATCHES = (2**20, 2**22, 2**24)
# name -> (knobs, blocks per SM); "default" is the planner's own choice
CONFIGS = {
    "default": ({}, 1),
    "t1024/c8192": ({"JITMETA_THREADS": 1024, "JITMETA_CHUNK": 8192}, 1),
    "t512/c8192": ({"JITMETA_THREADS": 512, "JITMETA_CHUNK": 8192}, 1),
    "t512/c4096": ({"JITMETA_THREADS": 512, "JITMETA_CHUNK": 4096}, 1),
    "t512/c4096/x2": ({"JITMETA_THREADS": 512, "JITMETA_CHUNK": 4096}, 2),
    "t1024/c4096": ({"JITMETA_THREADS": 1024, "JITMETA_CHUNK": 4096}, 1),
    "t256/c2048": ({"JITMETA_THREADS": 256, "JITMETA_CHUNK": 2048}, 1),
    "t512/c2048": ({"JITMETA_THREADS": 512, "JITMETA_CHUNK": 2048}, 1),
    "t256/c8192/x2": ({"JITMETA_THREADS": 256, "JITMETA_CHUNK": 8192}, 2),
    "t512/c8192/x2": ({"JITMETA_THREADS": 512, "JITMETA_CHUNK": 8192}, 2),
    "t256/c1024": ({"JITMETA_THREADS": 256, "JITMETA_CHUNK": 1024}, 1),
    "t128/c1024": ({"JITMETA_THREADS": 128, "JITMETA_CHUNK": 1024}, 1),
    "t64/c512": ({"JITMETA_THREADS": 64, "JITMETA_CHUNK": 512}, 1),
    # the single-block variants, for the batches where the planner picks one
    "static": ({"JITMETA_VARIANT": "static"}, 1),
    # the smallest static tile (1024) at 128 threads: 8 elements a thread, read into
    # registers with 16-byte loads where the inputs allow (the planner's 256 threads
    # load 4 each into the tile)
    "static/t128": ({"JITMETA_VARIANT": "static", "JITMETA_THREADS": 128}, 1),
    "dynamic": ({"JITMETA_VARIANT": "dynamic"}, 1),
}
_planner_grid = plan_mod.chunked_grid


def per_sm(k: int):
    """A chunked-grid rule allowing ``k`` blocks per SM (the planner's, scaled)."""
    def grid(batch: int, chunk: int, sm_count: int, threads: int) -> int:
        return _planner_grid(batch, chunk, sm_count * k, threads)
    return grid


def measure(timer, fmt, ctx, idx, out, want, knobs, k) -> dict:
    dispatch.reset()  # prepared calls are keyed by knobs, not by the grid rule
    launcher.reset_grid_caps()
    plan_mod.chunked_grid = per_sm(k)
    try:
        with envs.override(**{"JITMETA_VARIANT": "chunked", **knobs}):
            p = jitmeta.plan(ctx.shape[0], ctx.shape[1], idx is not None, NUM_SMS,
                             schedule=fmt)
            timing, exact = timer.measure(lambda: jitmeta.get_paged_mqa_logits_metadata(
                ctx, BLOCK_KV, NUM_SMS, idx, out=out, schedule=fmt), want)
    finally:
        plan_mod.chunked_grid = _planner_grid
        dispatch.reset()
    cap = launcher.grid_cap(0)
    return {"code": p.code.name, "planned_grid": p.grid,
            "grid": p.grid if cap is None else min(p.grid, cap), "us": timing,
            "exact": exact}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the record into this directory")
    ap.add_argument("--cases", default="", help="only cases whose label contains this")
    ap.add_argument("--configs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)),
                    help="comma-separated batch sizes")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 1
    names = args.configs.split(",") if args.configs else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator().manual_seed(seed)
    print(f"seed {seed}")
    timer = GraphTimer(CALLS_PER_GRAPH, REPLAYS, REPEATS, dry_run=False)
    t0 = time.perf_counter()
    rows, bad = [], 0
    print(f"{'case':34s} " + " ".join(f"{n:>14s}" for n in names))
    for mode in args.modes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            ctx = idx = None
            for fmt in FORMATS:
                label = f"{fmt} {mode} {batch}"
                if args.cases not in label:
                    continue
                if ctx is None:
                    ctx, idx = make_inputs(batch, mode, gen)
                want = jitmeta.reference_schedule(ctx, NUM_SMS, idx, schedule=fmt)
                out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
                row = {"format": fmt, "mode": mode, "batch": batch, "configs": {}}
                cells = []
                for name in names:
                    knobs, k = CONFIGS[name]
                    try:
                        r = measure(timer, fmt, ctx, idx, out, want, knobs, k)
                    except jitmeta.PlanError as exc:  # e.g. a single block too small
                        row["configs"][name] = {"plan_error": str(exc)}
                        cells.append("n/a")
                        continue
                    row["configs"][name] = r
                    bad += r["exact"] is not True
                    cells.append(f"{r['us']['median']:8.2f}/g{r['grid']}"
                                 + ("" if r["exact"] else " WRONG"))
                rows.append(row)
                print(f"{label:34s} " + " ".join(f"{c:>14s}" for c in cells), flush=True)
            del ctx, idx
    record = {"schema": records.SCHEMA, "kind": "gpu-configs",
              "meta": {**records.base_meta(argv, "compare_configs.py"), **records.gpu_meta(),
                       "seed": seed, "calls_per_graph": CALLS_PER_GRAPH,
                       "replays": REPLAYS, "repeats": REPEATS, "num_sms": NUM_SMS,
                       "configs": {n: {"knobs": CONFIGS[n][0], "blocks_per_sm": CONFIGS[n][1]}
                                   for n in names},
                       "seconds": round(time.perf_counter() - t0, 1)},
              "rows": rows}
    if args.out:
        dev = records.slug(record["meta"]["device"])
        path = records.write_record(record, args.out,
                                    f"{record['meta']['date']}-{dev}-configs.json")
        print(f"record: {path}")
    if bad:
        print(f"{bad} configurations gave a wrong schedule", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
