"""Benchmark jitmeta's schedule kernels on a GPU (issue 4).

Times, in one run: our call for every batch x mode, an empty kernel launched the same
way (the floor), and a PyTorch-ops implementation of the same schedule (what a user
would write instead). GPU time per call comes from CUDA-graph replay (CUDA events,
warm-up, median of repeats, fresh random inputs); host time per eager call with and
without ``out=``. Prints a table and writes a dated Markdown + JSON record.

    python bench/benchmark_metadata.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import jitmeta
from jitmeta import envs
from jitmeta.heuristics.plan import codes_for_batches
from jitmeta.impls.render import render
from jitmeta.jit import runtime
from jitmeta.jit.compiler import CompileOptions, compile_cubin, nvrtc_version

BATCHES = [1, 32, 128, 1024, 4096, 8192, 16384, 32768, 65536, 262144, 2**20, 2**24]
MODES = ["next_n=1", "next_n=2", "varlen"]
NUM_SMS = 132
CALLS_PER_GRAPH = 20
REPLAYS = 20
REPEATS = 5

EMPTY_SRC = r'''
extern "C" __global__ void jitmeta_empty(const int* a, const int* b, unsigned c,
                                         unsigned d, unsigned e, int* f, const void* g) {}
'''


# --- what a user would write instead: PyTorch ops, no host sync (capturable) ----------

def torch_ops_schedule(ctx: torch.Tensor, num_sms: int, indices=None, split_kv: int = 256
                       ) -> torch.Tensor:
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

def make_inputs(batch: int, mode: str, gen: torch.Generator):
    next_n = 1 if mode == "varlen" else int(mode.split("=")[1])
    ctx = torch.randint(1, 32768, (batch, next_n), generator=gen, dtype=torch.int32)
    ctx[torch.rand(batch, next_n, generator=gen) < 0.1] = 0
    idx = None
    if mode == "varlen":
        runs = torch.randint(1, 9, (batch,), generator=gen)
        idx = torch.repeat_interleave(torch.arange(batch), runs)[:batch].to(torch.int32)
    return ctx.cuda(), (idx.cuda() if idx is not None else None)


# --- timing -----------------------------------------------------------------------------

def graph_time_us(fn, stream: torch.cuda.Stream, calls: int = CALLS_PER_GRAPH,
                  replays: int = REPLAYS) -> float:
    """Median GPU microseconds per call of ``fn`` over CUDA-graph replays.

    ``calls`` back-to-back calls per graph measure throughput (kernel time plus the
    gap between kernels); ``calls=1`` measures the latency of one replayed call, as
    the upstream figures in GPU.md were taken.
    """
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(replays):
            g.replay()
        e1.record()
        e1.synchronize()
        samples.append(e0.elapsed_time(e1) * 1e3 / (replays * calls))
    return statistics.median(samples)


def host_time_us(fn, n: int = 200) -> float:
    """Median host microseconds per eager call (launch cost; the GPU is not awaited)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / n)
        torch.cuda.synchronize()
    return statistics.median(samples)


def empty_kernel():
    res = compile_cubin(EMPTY_SRC, CompileOptions.for_arch(jitmeta.api.device_limits(0).arch))
    mod = runtime.load_module(0, "bench-empty", res.cubin, ("jitmeta_empty",))
    fn = mod.functions["jitmeta_empty"]
    P, U = runtime.POINTER, runtime.UINT32

    def call():
        stream = torch.cuda.current_stream().cuda_stream
        runtime.launch(fn, 1, 1024, 0, stream, (0, 0, 0, 0, 0, 0, 0), (P, P, U, U, U, P, P))
    return call


# --- forced variants and slab sizes (what the planner's choices rest on) ------------------

TUNING_BATCHES = [4096, 8192, 16384, 32768, 55000, 131072, 270336, 2**20]
TUNING_CHUNKS = [1024, 2048, 4096, 8192]


def tuning_rows(stream, gen) -> list[dict]:
    """GPU us per call (amortized) of each variant / chunked slab size that can serve a
    batch, bit-exactness checked: dense next_n=1 and varlen."""
    rows = []
    for mode in ("next_n=1", "varlen"):
        for batch in TUNING_BATCHES:
            ctx, idx = make_inputs(batch, mode, gen)
            want = jitmeta.reference_schedule(ctx, NUM_SMS, idx)
            out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
            configs = [("static", {"JITMETA_VARIANT": "static"})] if batch <= 8192 else []
            if batch <= 55970:
                configs.append(("dynamic", {"JITMETA_VARIANT": "dynamic"}))
            configs += [(f"chunked/{c}", {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": c,
                                          "JITMETA_THREADS": max(256, min(1024, c // 4))})
                        for c in TUNING_CHUNKS]
            row = {"mode": mode, "batch": batch,
                   "default": jitmeta.plan(batch, 1, mode == "varlen", NUM_SMS).code.name}
            for name, knobs in configs:
                with envs.override(**knobs):
                    call = (lambda: jitmeta.get_paged_mqa_logits_metadata(
                        ctx, 64, NUM_SMS, idx, out=out))
                    got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx)
                    row[name] = round(graph_time_us(call, stream), 2)
                    row[name + " exact"] = bool(torch.equal(got, want))
            rows.append(row)
            print("tuning", row, flush=True)
            del ctx, idx
    return rows


# --- cold start -------------------------------------------------------------------------

def cold_figures(arch: str) -> dict:
    lim = jitmeta.limits_for_arch(arch, NUM_SMS)
    per_variant = {}
    counts = {}
    for varlen in (False, True):
        codes = codes_for_batches([(1, 2**24)], 1, varlen, NUM_SMS, 256, "smxx", lim)
        counts["varlen" if varlen else "dense"] = len(codes)
        for code in codes:
            res = compile_cubin(render(code), CompileOptions.for_arch(arch))
            per_variant[code.name] = round(res.seconds * 1e3, 1)
    # first call of a fresh process whose disk cache already holds the cubin
    snippet = ("import time, torch; t0 = time.perf_counter(); import jitmeta; "
               "c = torch.full((8192, 1), 4096, dtype=torch.int32, device='cuda'); "
               "i = (torch.arange(8192, device='cuda') // 2).int(); torch.cuda.synchronize(); "
               "t1 = time.perf_counter(); jitmeta.get_paged_mqa_logits_metadata(c, 64, 132, i); "
               "torch.cuda.synchronize(); t2 = time.perf_counter(); "
               "print(round((t2 - t1) * 1e3, 2), jitmeta.stats()['compiles'])")
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                             env=os.environ.copy(), check=True).stdout.split()
        runs.append((float(out[0]), int(out[1])))
    warm_runs = runs[1:]  # the first one may compile (cold disk cache)
    # where a first call's time goes (printed to the log, not part of the record)
    profiled = snippet.replace("jitmeta.get_paged_mqa_logits_metadata(c, 64, 132, i); ",
                               "import cProfile, pstats; pr = cProfile.Profile(); "
                               "pr.enable(); jitmeta.get_paged_mqa_logits_metadata(c, 64, "
                               "132, i); pr.disable(); ")
    profiled += "; pstats.Stats(pr).sort_stats('cumulative').print_stats(30)"
    print(subprocess.run([sys.executable, "-c", profiled], capture_output=True, text=True,
                         env=os.environ.copy()).stdout[-6000:], flush=True)
    return {"nvrtc_ms_per_variant": per_variant,
            "nvrtc_ms_median": statistics.median(per_variant.values()),
            "distinct_cubins_1_to_2p24": counts,
            "first_call_ms_warm_disk_cache": statistics.median(r[0] for r in warm_runs),
            "first_call_compiles": [r[1] for r in warm_runs]}


# --- main -------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/benchmarks", help="directory for the record")
    ap.add_argument("--quick", action="store_true", help="fewer batches (smoke run)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark", file=sys.stderr)
        return 1
    batches = BATCHES[:6] if args.quick else BATCHES
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    stream = torch.cuda.Stream()
    empty = empty_kernel()
    floor = graph_time_us(empty, stream)
    floor1 = graph_time_us(empty, stream, calls=1, replays=200)
    floor_host = host_time_us(empty)
    rows = []
    for mode in MODES:
        for batch in batches:
            ctx, idx = make_inputs(batch, mode, gen)
            want = jitmeta.reference_schedule(ctx, NUM_SMS, idx)
            out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
            got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx)
            exact = bool(torch.equal(got, want)) and bool(
                torch.equal(torch_ops_schedule(ctx, NUM_SMS, idx), want))
            ours = graph_time_us(
                lambda: jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx, out=out),
                stream)
            ours1 = graph_time_us(
                lambda: jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx, out=out),
                stream, calls=1, replays=200)
            ops = graph_time_us(lambda: torch_ops_schedule(ctx, NUM_SMS, idx), stream,
                                calls=1, replays=20 if batch <= 2**20 else 3)
            host = host_time_us(lambda: jitmeta.get_paged_mqa_logits_metadata(
                ctx, 64, NUM_SMS, idx))
            host_out = host_time_us(lambda: jitmeta.get_paged_mqa_logits_metadata(
                ctx, 64, NUM_SMS, idx, out=out))
            variant = jitmeta.plan(batch, 1 if mode == "varlen" else int(mode[-1]),
                                   mode == "varlen", NUM_SMS).variant
            rows.append({"mode": mode, "batch": batch, "variant": variant, "gpu_us": ours,
                         "x_floor": ours / floor, "gpu_us_1call": ours1,
                         "x_floor_1call": ours1 / floor1, "torch_ops_us": ops,
                         "x_torch_ops": ours / ops, "host_us": host,
                         "host_out_us": host_out, "exact": exact})
            print(f"{mode:9s} {batch:9d} {variant:8s} gpu {ours:8.2f} us  "
                  f"x{ours / floor:5.2f} floor  1-call {ours1:7.2f} us x{ours1 / floor1:5.2f}  "
                  f"torch-ops {ops:8.2f} us  host {host:6.2f} / "
                  f"{host_out:6.2f} us  exact={exact}", flush=True)
            del ctx, idx
    tuning = tuning_rows(stream, gen) if not args.quick else []
    cold = cold_figures(jitmeta.api.device_limits(0).arch)
    props = torch.cuda.get_device_properties(0)
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": props.name, "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda, "nvrtc": nvrtc_version(),
        "jitmeta": jitmeta.__version__, "python": platform.python_version(),
        "command": "python " + " ".join([sys.argv[0]] + (argv or sys.argv[1:])),
        "floor_gpu_us": floor, "floor_gpu_us_1call": floor1, "floor_host_us": floor_host,
        "num_sms": NUM_SMS,
        "calls_per_graph": CALLS_PER_GRAPH, "replays": REPLAYS, "repeats": REPEATS,
    }
    lines = [f"# jitmeta benchmark — {meta['date']}, {meta['device']} ({meta['sms']} SMs)",
             "",
             f"torch {meta['torch']} (CUDA {meta['cuda']}), NVRTC {meta['nvrtc']}, "
             f"Python {meta['python']}. Command: `{meta['command']}`.",
             f"GPU time: CUDA-graph replay, {CALLS_PER_GRAPH} calls per graph, "
             f"{REPLAYS} replays, median of {REPEATS}; num_sms={NUM_SMS}; random lengths "
             "1..32767 with 10% zeros; varlen runs of 1..8 tokens.",
             "The 1-call columns replay a graph holding one call (latency, as GPU.md's "
             "upstream figures); the others amortize 20 back-to-back calls per graph.",
             f"Floor (empty kernel, same launch path): {floor:.2f} us GPU per call "
             f"(20/graph), {floor1:.2f} us (1/graph), {floor_host:.2f} us host.",
             "",
             "| mode | batch | variant | GPU us | x floor | GPU us 1-call | x floor 1-call "
             "| PyTorch-ops us | x PyTorch-ops | host us | host us (out=) | exact |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['batch']} | {r['variant']} | {r['gpu_us']:.2f} | "
                     f"{r['x_floor']:.2f} | {r['gpu_us_1call']:.2f} | {r['x_floor_1call']:.2f} "
                     f"| {r['torch_ops_us']:.2f} | {r['x_torch_ops']:.3f} "
                     f"| {r['host_us']:.2f} | {r['host_out_us']:.2f} | {r['exact']} |")
    if tuning:
        names = ["static", "dynamic"] + [f"chunked/{c}" for c in TUNING_CHUNKS]
        lines += ["", "Forced variants and chunked slab sizes (GPU us per call, amortized; "
                  "chunked/C = slabs of C elements at max(256, min(1024, C/4)) threads; "
                  "`-` = cannot serve the batch):", "",
                  "| mode | batch | default plan | " + " | ".join(names) + " | exact |",
                  "|---|---:|---|" + "---:|" * len(names) + "---|"]
        for r in tuning:
            cells = [f"{r[n]:.2f}" if n in r else "-" for n in names]
            exact = all(v for k, v in r.items() if k.endswith(" exact"))
            lines.append(f"| {r['mode']} | {r['batch']} | {r['default']} | "
                         + " | ".join(cells) + f" | {exact} |")
    lines += ["", "Cold start:", "", "```", json.dumps(cold, indent=1), "```", ""]
    text = "\n".join(lines)
    print()
    print(text)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{meta['date']}-{props.name.replace(' ', '_')}"
    (out_dir / f"{stem}.md").write_text(text)
    (out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows,
                                                     "tuning": tuning, "cold": cold},
                                                    indent=1))
    exact = all(r["exact"] for r in rows) and all(
        v for r in tuning for k, v in r.items() if k.endswith(" exact"))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
