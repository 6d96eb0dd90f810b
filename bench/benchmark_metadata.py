"""Benchmark jitmeta's schedule kernels on a GPU and write a record.

For every schedule format the installed jitmeta accepts, dense ``next_n`` 1 and 2 and
varlen (runs of 2 tokens, and random run lengths), at each batch of :data:`BATCHES`:
GPU microseconds per call from CUDA-graph replay (``CALLS_PER_GRAPH`` back-to-back
calls per graph, CUDA events, min / median / max over ``REPEATS``), and the output
the timed replays wrote compared with the reference (``torch.equal``). In the same
run and graph shape: an empty kernel and the touch kernel (bench/touch.py: reads the
same input bytes once, writes the same output, at its fastest of a few launch
shapes), and, for the "smxx" format, PyTorch ops computing the same schedule.
Also: forced variants / chunked slab sizes side by side (the planner's thresholds),
and the first call of a fresh process whose disk cache holds the cubin.

    python bench/benchmark_metadata.py [--out DIR] [--quick] [--dry-run]

``--dry-run`` needs no GPU: inputs, reference, the call with ``out=`` and its check,
the PyTorch-ops schedule, the floor kernels' NVRTC compile, the record and its tables
all run on the CPU; nothing is timed (timings are null). The record goes to
``docs/benchmarks/<date>-<device>.json``; ``python bench/make_tables.py`` then
regenerates the tables of README.md and docs/benchmarks/README.md from it. Once the
timed rows are done the record is written with those alone (``meta.partial`` set), and
replaced by the whole one at the end: a run stopped by a time limit during its tuning
table or first-call runs still leaves its rows (bench/compare_records.py reads such a
record; the table generator refuses it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import jitmeta
from jitmeta import envs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)
import touch as floors_mod  # noqa: E402

BATCHES = [1, 1024, 4096, 8192, 16384, 65536, 2**20, 2**24]
MODES = ("next_n=1", "next_n=2", "varlen/runs=2", "varlen/runs=1..16")
LENGTHS = (1, 8192)  # context lengths uniform in [lo, hi]
NUM_SMS = 132
BLOCK_KV = 64
CALLS_PER_GRAPH = 20
REPLAYS = 10
REPEATS = 5
TORCH_OPS_MAX_BATCH = 2**20  # beyond, 20 calls of the PyTorch ops cost seconds a replay
TORCH_OPS_FORMAT = "smxx"
TUNING_BATCHES = [1024, 4096, 6144, 8192, 16384, 65536, 270336, 2**20]
# (format, mode) pairs of the forced-variant table
TUNING_MODES = [("smxx", "next_n=1"), ("smxx", "varlen/runs=2"), ("sm100", "varlen/runs=1..16")]
TUNING_STATIC_THREADS = [128, 256, 512, 1024]  # block sizes tried for the static variant
TUNING_CHUNKS = [1024, 2048, 4096, 8192]
DYNAMIC_MAX = 55970  # the dynamic variant serves up to here on an H200 (both modes)
SEED = 20261202
PARTIAL = ("timed rows only: written before the tuning table and the first-call runs, "
           "which this run did not finish")


# --- what a user would write instead: PyTorch ops, no host sync (capturable) ----------

def torch_ops_schedule(ctx: torch.Tensor, num_sms: int, indices=None, split_kv: int = 256
                       ) -> torch.Tensor:
    """The "smxx" schedule with PyTorch ops only (cumsum + searchsorted), capturable."""
    dev = ctx.device
    s = torch.arange(num_sms + 1, device=dev, dtype=torch.int64)
    if indices is None:
        b, n = ctx.shape
        a = (n + 1) // 2 if n >= 2 else 1
        segs = (ctx[:, -1].to(torch.int64) + split_kv - 1) // split_kv
        prefix = torch.cumsum(segs, 0) * a
    else:
        b = ctx.shape[0]
        c = ctx.reshape(-1).to(torch.int64)
        t = torch.arange(b, device=dev, dtype=torch.int64)
        bnd = torch.ones(b, dtype=torch.bool, device=dev)
        bnd[1:] = indices[1:] != indices[:-1]
        run_start = torch.cummax(torch.where(bnd, t, 0), 0).values
        start_tok = (t - run_start) % 2 == 0
        nxt = torch.ones(b, dtype=torch.bool, device=dev)
        nxt[:-1] = bnd[1:]
        nc = torch.roll(c, -1)
        w = torch.where(start_tok, (torch.where(nxt, c, nc) + split_kv - 1) // split_kv, 0)
        prefix = torch.cumsum(w, 0)
    total = prefix[-1]
    q, r = total // num_sms, total % num_sms
    start = s * q + torch.minimum(s, r)
    pos = torch.searchsorted(prefix, start, right=True)
    prev = torch.where(pos > 0, prefix[(pos - 1).clamp(min=0)], 0)
    off = start - prev
    if indices is None:
        n_seg = torch.where(pos < b, prefix[pos.clamp(max=b - 1)] - prev, 0) // a
        safe = n_seg.clamp(min=1)
        col0 = torch.where(n_seg > 0, pos * a + off // safe, pos * a)
        col1 = torch.where(n_seg > 0, off % safe, 0)
    else:
        col0, col1 = pos, off
    return torch.stack((col0, col1), 1).to(torch.int32)


# --- inputs -----------------------------------------------------------------------------

def mode_shape(mode: str) -> tuple[int, tuple[int, int] | None]:
    """``(next_n, runs)`` of a mode name; ``runs`` = (lo, hi) run lengths for varlen.

    ``next_n=N`` (dense), ``varlen/runs=K`` (every request K tokens),
    ``varlen/runs=LO..HI`` (uniform random run lengths); ``varlen`` = ``varlen/runs=2``.
    """
    if mode == "varlen":
        mode = "varlen/runs=2"
    try:
        if mode.startswith("next_n="):
            n = int(mode[len("next_n="):])
            if n >= 1:
                return n, None
        elif mode.startswith("varlen/runs="):
            lo, _, hi = mode[len("varlen/runs="):].partition("..")
            lo, hi = int(lo), int(hi or lo)
            if 1 <= lo <= hi:
                return 1, (lo, hi)
    except ValueError:
        pass
    raise ValueError(f"mode {mode!r}: expected next_n=N (N >= 1), varlen/runs=K or "
                     "varlen/runs=LO..HI (1 <= LO <= HI)")


def make_inputs(batch: int, mode: str, gen: torch.Generator, device="cuda"):
    """(context_lens [batch, next_n], indices [batch] or None): lengths uniform in
    LENGTHS; varlen requests are runs of equal consecutive indices."""
    next_n, runs = mode_shape(mode)
    ctx = torch.randint(LENGTHS[0], LENGTHS[1] + 1, (batch, next_n), generator=gen,
                        dtype=torch.int32)
    idx = None
    if runs is not None:
        lo, hi = runs
        if lo == hi:
            idx = torch.arange(batch, dtype=torch.int64) // lo
        else:
            lens = torch.randint(lo, hi + 1, (batch // lo + 1,), generator=gen)
            idx = torch.repeat_interleave(torch.arange(lens.numel()), lens)[:batch]
        idx = idx.to(torch.int32)
    return ctx.to(device), (idx.to(device) if idx is not None else None)


# --- timing -----------------------------------------------------------------------------

class GraphTimer:
    """GPU microseconds per call from CUDA-graph replay, and a check of what the
    replays wrote.

    :meth:`measure` captures ``calls`` back-to-back calls of ``fn`` in one graph (after
    two eager warm-up calls), replays it twice, fills the tensor the last captured call
    returns with -1, then times ``repeats`` x ``replays`` replays (CUDA events) and
    compares that tensor with ``want``. In a dry run (no GPU) ``fn`` runs eagerly
    twice (the output filled with -1 between) and the check runs; nothing is timed.
    """

    def __init__(self, calls: int, replays: int, repeats: int, dry_run: bool):
        self.calls, self.replays, self.repeats, self.dry_run = calls, replays, repeats, dry_run
        self.stream = None if dry_run else torch.cuda.Stream()

    def measure(self, fn, want: torch.Tensor | None = None, replays: int | None = None):
        """(timing spread or None, exact or None)."""
        if self.dry_run:
            first = fn()
            if want is None:
                return None, None
            first.fill_(-1)
            return None, bool(torch.equal(fn(), want))
        replays = replays or self.replays
        stream = self.stream
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(self.calls):
                result = fn()
        graph.replay()
        graph.replay()
        torch.cuda.synchronize()
        if want is not None:
            result.fill_(-1)
            torch.cuda.synchronize()
        samples = []
        for _ in range(self.repeats):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(replays):
                graph.replay()
            e1.record()
            e1.synchronize()
            samples.append(e0.elapsed_time(e1) * 1e3 / (replays * self.calls))
        exact = None if want is None else bool(torch.equal(result, want))
        del graph
        return records.spread(samples), exact


# --- the parts of a run -------------------------------------------------------------------

def touch_floor(floors, timer: GraphTimer, ctx, idx, out, num_sms: int) -> dict:
    """The touch kernel at each candidate launch shape; the fastest is ``best``."""
    words = (ctx.numel(), 0 if idx is None else idx.numel())
    tried = []
    for threads, grid in floors_mod.candidates(words, num_sms):
        if floors is None:
            timing = None
        else:
            timing, _ = timer.measure(floors.touch(ctx, idx, out, threads, grid))
        tried.append({"threads": threads, "grid": grid, "us": timing})
    timed = [t for t in tried if t["us"] is not None]
    best = min(timed, key=lambda t: t["us"]["median"]) if timed else None
    return {"words": list(words), "best": best, "tried": tried}


# Every first-call process: the inputs of the seed scenario (batch 8192 varlen, runs of
# 2), made and synchronized before anything is timed. Each snippet after it prints its
# milliseconds, then how many kernels the process compiled.
_COLD_SETUP = ("import time, torch; import jitmeta; T = time.perf_counter; "
               "c = torch.full((8192, 1), 4096, dtype=torch.int32, device='cuda'); "
               "i = (torch.arange(8192, device='cuda') // 2).int(); torch.cuda.synchronize(); ")
_CALL = ("jitmeta.get_paged_mqa_logits_metadata(c, 64, 132, i); torch.cuda.synchronize(); ")
_FIRST = ("t0 = T(); " + _CALL + "t1 = T(); "
          "print(round((t1 - t0) * 1e3, 3), jitmeta.stats()['compiles'])")
# The first call's steps one by one: the plan and its cubin from the disk cache (CPU),
# loading the module into the context, preparing the loaded call (which finds the plan,
# the source and the module made; the first launch's own setup), the public call (which
# finds the call prepared) up to its return, the wait for its kernel, and a second call
# for comparison.
_PARTS = ("from jitmeta import dispatch, envs, kernels; from jitmeta.jit import runtime; "
          "t0 = T(); k = envs.snapshot(); "
          "p = dispatch.plan_for(8192, 1, True, 132, 256, 'smxx', 0, k); "
          "b = dispatch.build_plan(p, k); t1 = T(); "
          "runtime.load_module(0, b.key, b.cubin, b.names, kernels.family('smxx')"
          ".max_dynamic_smem(p, dispatch.device_limits(0))); t2 = T(); "
          "dispatch.prepare(0, 8192, 1, True, 132, 256, 'smxx', k); t3 = T(); "
          "jitmeta.get_paged_mqa_logits_metadata(c, 64, 132, i); t4 = T(); "
          "torch.cuda.synchronize(); t5 = T(); " + _CALL + "t6 = T(); "
          "print(*(round((end - start) * 1e3, 3) for start, end in "
          "zip((t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6))), "
          "jitmeta.stats()['compiles'])")
PART_NAMES = ("plan_and_cubin", "module_load", "prepare", "call", "sync", "second_call")


# fresh processes for the first call and for its steps: a fresh process's time moves by
# a millisecond or more from one to the next
FIRST_CALL_RUNS, PART_RUNS = 9, 5


def _fresh_runs(snippet: str, names: tuple[str, ...], what: str, n: int) -> list[dict]:
    """``snippet`` (after :data:`_COLD_SETUP`) in ``n`` fresh processes: each run's
    printed milliseconds under ``names``, and ``compiles``."""
    runs = []
    for _ in range(n):
        res = subprocess.run([sys.executable, "-c", _COLD_SETUP + snippet],
                             capture_output=True, text=True, env=os.environ.copy(),
                             timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"{what} subprocess failed (exit {res.returncode}):\n"
                               f"{res.stderr[-2000:]}")
        *ms, compiles = res.stdout.split()[-(len(names) + 1):]
        runs.append(dict(zip(names, map(float, ms)), compiles=int(compiles)))
    return runs


def cold_first_call(dry_run: bool) -> dict | None:
    """First call of a fresh process whose disk cache holds the cubin (batch 8192
    varlen, "smxx"), and its steps, each in its own fresh processes; a run that
    compiled is reported, not counted."""
    if dry_run:
        return None
    runs = _fresh_runs(_FIRST, ("ms",), "first-call", FIRST_CALL_RUNS)
    parts = _fresh_runs(_PARTS, PART_NAMES, "first-call parts", PART_RUNS)
    kept = [r for r in parts if r["compiles"] == 0]
    return {"case": "batch 8192 varlen runs=2, smxx, fresh process, warm disk cache",
            "runs": runs,
            "ms": records.spread(r["ms"] for r in runs if r["compiles"] == 0),
            "parts": {"runs": parts,
                      **{n: records.spread(r[n] for r in kept) for n in PART_NAMES}}}


def tuning_rows(timer: GraphTimer, gen, batches, device, progress) -> list[dict]:
    """Each variant / chunked slab size (and static block size) that can serve a batch,
    timed side by side (the format and mode pairs of TUNING_MODES), output checked
    after the replays."""
    rows = []
    for fmt, mode in TUNING_MODES:
        next_n, runs = mode_shape(mode)
        for batch in batches:
            ctx, idx = make_inputs(batch, mode, gen, device)
            want = jitmeta.reference_schedule(ctx, NUM_SMS, idx, schedule=fmt)
            out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device=device)
            configs = [(f"static/t{t}", {"JITMETA_VARIANT": "static", "JITMETA_THREADS": t})
                       for t in TUNING_STATIC_THREADS] if batch <= 8192 else []
            if batch <= DYNAMIC_MAX:
                configs.append(("dynamic", {"JITMETA_VARIANT": "dynamic"}))
            configs += [(f"chunked/{c}", {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": c,
                                          "JITMETA_THREADS": max(256, min(1024, c // 4))})
                        for c in TUNING_CHUNKS]
            row = {"format": fmt, "mode": mode, "batch": batch,
                   "default": jitmeta.plan(batch, next_n, runs is not None, NUM_SMS,
                                           schedule=fmt,
                                           arch="sm_90" if device == "cpu" else None
                                           ).code.name, "configs": {}}
            for name, knobs in configs:
                with envs.override(**knobs):
                    call = (lambda: jitmeta.get_paged_mqa_logits_metadata(
                        ctx, BLOCK_KV, NUM_SMS, idx, out=out, schedule=fmt))
                    timing, exact = timer.measure(call, want)
                row["configs"][name] = {"us": timing, "exact": exact}
            rows.append(row)
            progress(f"tuning {fmt:5s} {mode:18s} {batch:9d} " + "  ".join(
                f"{k} {_fmt(v['us'])}{'' if v['exact'] else ' WRONG'}"
                for k, v in row["configs"].items()))
            del ctx, idx
    return rows


def _fmt(timing) -> str:
    return "-" if timing is None else f"{timing['median']:.2f}"


# --- main -------------------------------------------------------------------------------

def run(args, argv, checkpoint=None) -> dict:
    """The whole record. ``checkpoint(record)``, when given, is called once the timed
    rows are done with a record of those alone (``meta.partial`` says so), so that a
    run stopped in its tuning table or first-call runs still leaves its rows."""
    dry = args.dry_run
    device = "cpu" if dry else "cuda"
    t_start = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {line}", flush=True)

    formats = tuple(args.formats.split(",")) if args.formats else records.schedules()
    modes = tuple(args.modes.split(",")) if args.modes else MODES
    for m in modes:
        mode_shape(m)
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    elif args.quick:
        batches = [1, 1024, 65536]
    else:
        batches = BATCHES if not dry else [b for b in BATCHES if b <= 65536]
    if dry:
        meta_dev = {"device": "cpu (dry run)", "sms": None, "arch": "sm_90", "driver": None,
                    "driver_cuda": None, "torch": torch.__version__,
                    "cuda": torch.version.cuda}
    else:
        meta_dev = records.gpu_meta()
    arch = meta_dev["arch"]
    timer = GraphTimer(CALLS_PER_GRAPH, REPLAYS, REPEATS, dry)
    if dry:
        floors_mod.compile_floors(arch)  # the sources must compile; nothing to launch
        floors = None
    else:
        floors = floors_mod.Floors(torch.cuda.current_device(), arch)
    gen = torch.Generator().manual_seed(args.seed)
    empty, _ = (None, None) if dry else timer.measure(floors.empty())
    progress(f"empty kernel {_fmt(empty)} us per call; formats {', '.join(formats)}")
    touch: dict[tuple[int, int], dict] = {}
    rows = []
    for mode in modes:
        next_n, runs = mode_shape(mode)
        varlen = runs is not None
        for batch in batches:
            ctx, idx = make_inputs(batch, mode, gen, device)
            out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device=device)
            layout = (ctx.numel(), 0 if idx is None else idx.numel())
            if layout not in touch:
                touch[layout] = touch_floor(floors, timer, ctx, idx, out, NUM_SMS)
                progress(f"touch {layout} best {touch[layout]['best']}")
            for fmt in formats:
                want = jitmeta.reference_schedule(ctx, NUM_SMS, idx, schedule=fmt)
                p = jitmeta.plan(batch, next_n, varlen, NUM_SMS, schedule=fmt,
                                 arch=arch if dry else None)

                def ours():
                    return jitmeta.get_paged_mqa_logits_metadata(
                        ctx, BLOCK_KV, NUM_SMS, idx, out=out, schedule=fmt)
                timing, exact = timer.measure(ours, want)
                ops = None
                if fmt == TORCH_OPS_FORMAT and batch <= TORCH_OPS_MAX_BATCH:
                    ops_timing, ops_exact = timer.measure(
                        lambda: torch_ops_schedule(ctx, NUM_SMS, idx), want,
                        replays=2 if batch >= 2**18 else None)
                    ops = {"calls_per_graph": CALLS_PER_GRAPH, "us": ops_timing,
                           "exact": ops_exact}
                row = {"format": fmt, "mode": mode, "batch": batch, "next_n": next_n,
                       "varlen": varlen, "variant": p.variant, "code": p.code.name,
                       "calls_per_graph": CALLS_PER_GRAPH, "us": timing, "exact": exact,
                       "touch_words": list(layout), "torch_ops": ops}
                rows.append(row)
                progress(f"{fmt:5s} {mode:18s} {batch:9d} {p.variant:8s} "
                         f"{_fmt(timing):>8s} us  touch {_fmt((touch[layout]['best'] or {}).get('us')):>7s}"
                         f"  torch-ops {_fmt(ops and ops['us']):>9s}  exact={exact}"
                         + ("" if ops is None else f"/{ops['exact']}"))
            del ctx, idx

    def record(tuning, cold, partial=None) -> dict:
        meta = dict(records.base_meta(argv, "benchmark_metadata.py"), **meta_dev)
        meta.update({"dry_run": dry, "num_sms": NUM_SMS, "block_kv": BLOCK_KV,
                     "split_kv": 256, "calls_per_graph": CALLS_PER_GRAPH,
                     "replays": REPLAYS, "repeats": REPEATS, "formats": list(formats),
                     "modes": list(modes), "batches": batches,
                     "inputs": f"context lengths uniform in [{LENGTHS[0]}, {LENGTHS[1]}]; "
                               "varlen/runs=K: requests of K tokens; varlen/runs=LO..HI: "
                               "run lengths uniform in [LO, HI]",
                     "seed": args.seed, "exact_checked": "the output of the timed graph "
                     "replays (out=), torch.equal against jitmeta.reference_schedule",
                     "torch_ops_format": TORCH_OPS_FORMAT,
                     "torch_ops_max_batch": TORCH_OPS_MAX_BATCH,
                     "seconds": round(time.perf_counter() - t_start, 1)})
        if partial is not None:
            meta["partial"] = partial
        return {"schema": records.SCHEMA, "kind": "gpu-metadata", "meta": meta,
                "floors": {"empty": {"calls_per_graph": CALLS_PER_GRAPH, "us": empty}},
                "touch": list(touch.values()), "rows": rows, "tuning": tuning, "cold": cold}

    if checkpoint is not None:
        checkpoint(record([], None, PARTIAL))
    tuning = [] if (args.quick or args.no_tuning) else tuning_rows(
        timer, gen, [b for b in TUNING_BATCHES if not dry or b <= 8192], device, progress)
    cold = None if args.quick else cold_first_call(dry)
    if cold is not None:
        progress(f"first call {cold}")
    return record(tuning, cold)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="directory for the record (default docs/benchmarks; a dry run "
                         "writes none unless given)")
    ap.add_argument("--quick", action="store_true",
                    help="batches 1, 1024, 65536; no tuning table, no first-call runs")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: run everything but the timing on the CPU")
    ap.add_argument("--batches", help="comma list of batch sizes instead of the default")
    ap.add_argument("--formats", help="comma list of formats (default: all jitmeta accepts)")
    ap.add_argument("--modes", help=f"comma list of modes (default: {','.join(MODES)})")
    ap.add_argument("--no-tuning", action="store_true", help="skip the forced-variant table")
    ap.add_argument("--seed", type=int, default=SEED, help="input generator seed")
    args = ap.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time (--dry-run runs everything else on the CPU)",
              file=sys.stderr)
        return 1
    out_dir = args.out or (None if args.dry_run else records.REPO / "docs" / "benchmarks")
    name = None  # the file's, from the first record written (the checkpoint)

    def save(record: dict) -> Path:
        nonlocal name
        if name is None:
            who = "dry-run" if args.dry_run else records.slug(record["meta"]["device"])
            name = f"{record['meta']['date']}-{who}.json"
        return records.write_record(record, out_dir, name)

    def checkpoint(record: dict) -> None:
        print(f"partial record (timed rows only, replaced at the end): {save(record)}",
              flush=True)

    record = run(args, argv, None if out_dir is None else checkpoint)
    import make_tables  # bench/, next to this file

    print()
    print(make_tables.gpu_table(record))
    if out_dir is not None:
        print(f"record: {save(record)}")
    bad = [r for r in record["rows"] if r["exact"] is not True
           or (r["torch_ops"] and r["torch_ops"]["exact"] is not True)]
    bad += [r for r in record["tuning"] for c in r["configs"].values() if c["exact"] is not True]
    for r in bad:
        print(f"NOT EXACT: {r.get('format', 'smxx')} {r['mode']} {r['batch']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
