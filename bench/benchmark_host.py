"""Host microseconds per eager call of jitmeta, over repeated runs, and broken down.

On a GPU: eager calls, dense and varlen, a static and a chunked plan, with and without
``out=``, timed two ways (:func:`loop_us`): the calls alone, and a plain loop of 200
calls followed by one synchronize; ``LOOP_RUNS`` runs each, min / median / max. The
output is checked against the reference before and after. Then what the parts of a
call cost there: stream lookup, context check, output allocation, the launch with
packed ``kernelParams`` and with a ``(values, types)`` tuple.

The breakdown also has, on any machine, everything of the CUDA path except the driver
and the CUDA allocator, measured on the real code with a stand-in driver whose calls
cost one Python call each. ``--no-breakdown`` runs the loops alone, through the public
API only (so the same script also measures an older version of the package).
Without a GPU (and without ``--dry-run``) only that part runs and is printed.

    python bench/benchmark_host.py [--out DIR | --json FILE] [--dry-run]

The record (``<date>-<device>-host.json``) feeds bench/make_tables.py. ``--dry-run``
needs no GPU: the same calls run on CPU tensors, untimed, and no record is written
unless ``--out`` / ``--json`` is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch

import jitmeta
from jitmeta import envs
from jitmeta.jit import runtime

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)

I32 = torch.int32
NUM_SMS = 132


def per_call_us(fn, n: int = 20000, repeat: int = 7, sync=None) -> float:
    """Median microseconds per call over ``repeat`` loops of ``n`` calls.

    With ``sync`` (GPU), it runs before each loop and outside the timing, and ``n``
    stays small: the launch queue must not fill up, or the host would wait for the GPU.
    """
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeat):
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / n)
    if sync is not None:
        sync()
    return statistics.median(samples)


# (case, batch, varlen): a static and a chunked plan, dense and varlen (runs of 2)
HOST_CASES = [("dense 1024", 1024, False), ("varlen 1024", 1024, True),
              ("dense 65536", 65536, False), ("varlen 65536", 65536, True)]
LOOP_CALLS = 200
LOOP_RUNS = 5


def loop_us(fn, calls: int, runs: int, sync, with_sync: bool) -> list[float]:
    """Microseconds per call of ``runs`` loops of ``calls`` eager calls.

    ``with_sync=False``: only the calls are timed (the GPU is synchronized before and
    after each loop, outside the timing). ``with_sync=True``: the plain loop, then one
    synchronize, all timed (what a caller waiting for the result sees).
    """
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if with_sync:
            sync()
        samples.append((time.perf_counter() - t0) * 1e6 / calls)
        sync()
    return samples


def host_loops(dry_run: bool, calls: int = LOOP_CALLS, runs: int = LOOP_RUNS) -> list[dict]:
    """Eager calls with allocation and with ``out=``, both loop methods, every case.

    A dry run (no GPU) makes the same calls on CPU tensors (jitmeta's reference path)
    and records no timing.
    """
    device = "cpu" if dry_run else "cuda"
    sync = (lambda: None) if dry_run else torch.cuda.synchronize
    out = torch.empty(NUM_SMS + 1, 2, dtype=I32, device=device)
    loops = []
    for case, batch, varlen in HOST_CASES:
        gen = torch.Generator().manual_seed(batch)
        ctx = torch.randint(1, 8193, (batch, 1), generator=gen, dtype=I32).to(device)
        idx = (torch.arange(batch) // 2).to(I32).to(device) if varlen else None
        want = jitmeta.reference_schedule(ctx, NUM_SMS, idx)
        if not torch.equal(jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx),
                           want):
            raise RuntimeError(f"host case {case}: the eager call is not exact")
        variant = jitmeta.plan(batch, 1, varlen, NUM_SMS,
                               arch="sm_90" if dry_run else None).variant

        def eager():
            return jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx)

        def with_out():
            return jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx, out=out)

        for use_out, fn in ((False, eager), (True, with_out)):
            for method in ("calls", "calls+sync"):
                samples = loop_us(fn, 2 if dry_run else calls, 2 if dry_run else runs,
                                  sync, method == "calls+sync")
                loops.append({"case": case, "batch": batch, "varlen": varlen,
                              "variant": variant, "out": use_out, "method": method,
                              "calls": calls, "runs": runs,
                              "us": None if dry_run else records.spread(samples)})
                print(f"host {case:13s} {variant:8s} {'out=' if use_out else 'alloc':5s} "
                      f"{method:10s} {fmt_spread(loops[-1]['us'])}", flush=True)
        sync()
        out.fill_(-1)
        with_out()
        sync()
        if not torch.equal(out, want):
            raise RuntimeError(f"host case {case}: the out= call after the loops is not "
                               "exact")
    return loops


def fmt_spread(t) -> str:
    return "-" if t is None else f"{t['median']:.2f} us ({t['min']:.2f}-{t['max']:.2f})"


def _without_c_launcher(measure):
    """``measure()`` with launches going through cuda.bindings (the fallback path)."""
    saved = runtime._c_launch
    runtime._c_launch = None
    try:
        return measure()
    finally:
        runtime._c_launch = saved


def gpu_parts() -> dict:
    """What the parts of the eager call cost on the GPU machine (a static plan)."""
    from jitmeta import dispatch, kernels

    dev = torch.cuda.current_device()
    gpu_sync = torch.cuda.synchronize
    out = torch.empty(NUM_SMS + 1, 2, dtype=I32, device="cuda")
    ctx = torch.randint(0, 5000, (128, 1), dtype=I32, device="cuda")
    call = dispatch.prepare(dev, 128, 1, False, NUM_SMS, 256, "smxx")
    stream = dispatch._raw_stream(dev)
    args = (ctx.data_ptr(), 0, 128, 1, NUM_SMS, 0, out.data_ptr(), 0)
    threads, types = call.launch.threads, call.launch.types
    # the loaded call holds the function as the C launcher takes it (its address);
    # cuda.bindings takes the handle object
    fn = call.launch.function
    fn_obj = runtime._drv.CUfunction(int(fn))
    parts = {
        "knob values + state": per_call_us(
            lambda: dispatch._states.get(dispatch._token())),
        "torch.cuda.current_stream(d).cuda_stream":
            per_call_us(lambda: torch.cuda.current_stream(dev).cuda_stream),
        "raw current stream (used)": per_call_us(lambda: dispatch._raw_stream(dev)),
        "runtime.make_current (already current)": per_call_us(
            lambda: runtime.make_current(dev)),
        "ctx.new_empty (CUDA caching allocator)": per_call_us(
            lambda: ctx.new_empty((NUM_SMS + 1, 2)), 2000),
        f"runtime.launch (used: {'C launcher' if runtime.c_launcher() else 'cuda.bindings'})":
            per_call_us(lambda: runtime.launch(fn, 1, threads, 0, stream, args, types), 200,
                        15, gpu_sync),
        "cuda.bindings cuLaunchKernel, packed kernelParams": _without_c_launcher(
            lambda: per_call_us(lambda: runtime.launch(fn_obj, 1, threads, 0, stream, args,
                                                       types), 200, 15, gpu_sync)),
        "cuLaunchKernel, (values, types) tuple": per_call_us(
            lambda: runtime._drv.cuLaunchKernel(fn_obj, 1, 1, 1, threads, 1, 1, 0, stream,
                                                (args, types), 0), 200, 15, gpu_sync),
    }
    assert kernels.workspace_words(call.plan) == 0
    torch.cuda.synchronize()
    return parts


class _NullDriver:
    """Answers the calls of the launch path at the cost of one Python call each."""

    def __init__(self):
        from cuda.bindings import driver as real

        self.ctx = real.CUcontext(0x1000)
        self.result = (0, self.ctx)

    def cuCtxGetCurrent(self):
        return self.result

    def cuLaunchKernel(self, *args):
        return (0,)


def _chunked_run_us(dispatch, state, out) -> float:
    """``_run`` of a chunked call with ``out=`` (its workspace found, its cooperative
    launch made): the C launcher stood in for by a Python function returning 0, a
    workspace of the stream and a spare stood in for by fake addresses (nothing is
    allocated or launched). Called with the stand-in driver in place."""
    from jitmeta import kernels
    from jitmeta.jit import workspace

    p = jitmeta.plan(70000, 1, True, NUM_SMS, arch="sm_90")
    assert p.variant == "chunked", p
    ctx = torch.randint(0, 5000, (70000, 1), dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    with mock.patch.object(runtime, "_c_launch", lambda *args: 0):
        call = kernels.call(0, p, 0x1000)  # (the C launcher takes a function's address)
        ws = workspace.Workspace()
        ws.use((0x10000, call.ws_words))
        with mock.patch.dict(workspace._workspaces, {workspace.workspace_key(0, 0): ws}), \
                mock.patch.dict(workspace._spares, {0: [(0x20000, call.ws_words)]}):
            return per_call_us(lambda: dispatch._run(call, state, ctx, idx, out, False))


def cpu_figures() -> dict:
    """The CUDA path's Python work on CPU tensors, driver and CUDA allocator excluded:
    the eager call's own steps, measured on the real code with a stand-in driver."""
    from jitmeta import dispatch, kernels

    ctx = torch.randint(0, 5000, (128, 1), dtype=I32)
    out = torch.empty(NUM_SMS + 1, 2, dtype=I32)
    p = jitmeta.plan(128, 1, False, NUM_SMS, arch="sm_90")
    state = dispatch._CallState(envs.snapshot())  # private: never seen by real calls
    # (the stand-in driver answers the cuda.bindings path: no C launcher)
    with mock.patch.object(runtime, "_drv", _NullDriver()), \
            mock.patch.object(runtime, "_c_launch", None), \
            mock.patch.dict(runtime._context_ids, {0: 0x1000}), \
            mock.patch.object(dispatch, "_raw_stream", lambda device: 0):
        call = kernels.call(0, p, "jitmeta_emit")
        run_eager = per_call_us(lambda: dispatch._run(call, state, ctx, None, None, False))
        run_out = per_call_us(lambda: dispatch._run(call, state, ctx, None, out, False))
        run_chunked = _chunked_run_us(dispatch, state, out)
    key = (0, ctx.shape, None, NUM_SMS, 64, 256, "smxx")
    state.calls[key] = call
    is_cpu, int32, tensor = "is_cpu", I32, torch.Tensor

    def fast_checks(out=None):  # eager()'s checks, with is_cpu standing in for is_cuda
        c = ctx
        if (type(c) is tensor and getattr(c, is_cpu) and c.dtype is int32
                and c.is_contiguous() and type(NUM_SMS) is int and type(64) is int
                and type(256) is int and type("smxx") is str and type(False) is bool):
            dev = c.get_device()
            found = state.calls.get((0 if dev < 0 else dev, c.shape, None, NUM_SMS, 64,
                                     256, "smxx"))
            return found is not None and (
                out is None or (type(out) is tensor and getattr(out, is_cpu)
                                and out.dtype is int32 and out.shape == found.out_shape
                                and out.get_device() == dev and out.is_contiguous()
                                and not out.data_ptr() & 7))
        return False

    def entry():
        token = dispatch._token()
        return dispatch._states.get(token) or dispatch._state(token)

    steps = {
        "is_compiling()": per_call_us(torch.compiler.is_compiling),
        "knob values + state lookup": per_call_us(entry),
        "fast-path checks + key lookup": per_call_us(fast_checks),
        "fast-path checks + key lookup (out=)": per_call_us(lambda: fast_checks(out)),
        "_run incl. new_empty (CPU) + packing, null driver": run_eager,
        "_run with out=, null driver": run_out,
        "chunked _run with out= (workspace, cooperative), null C launcher": run_chunked,
    }
    totals = {
        "eager": steps["is_compiling()"] + steps["knob values + state lookup"]
        + steps["fast-path checks + key lookup"] + run_eager,
        "out=": steps["is_compiling()"] + steps["knob values + state lookup"]
        + steps["fast-path checks + key lookup (out=)"] + run_out,
    }
    return {"steps": steps, "totals": totals}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="directory for the record <date>-<device>-host.json (a GPU run "
                         "without --out or --json writes docs/benchmarks)")
    ap.add_argument("--json", help="write the record to this file instead")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: make every call of the GPU loops on CPU tensors, untimed")
    ap.add_argument("--no-breakdown", action="store_true",
                    help="skip the per-part figures (CPU stand-in driver and GPU parts)")
    args = ap.parse_args(argv)
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("no CUDA GPU: only the stand-in-driver breakdown (--dry-run makes the GPU "
              "loops' calls on the CPU)", file=sys.stderr)
        cpu = cpu_figures()
        for section in ("steps", "totals"):
            print(f"\nCPU, {section}")
            for name, us in cpu[section].items():
                print(f"  {name:55s} {us:8.3f} us")
        return 0
    meta = records.base_meta(argv, "benchmark_host.py")
    if dry:
        meta.update(device="cpu (dry run)", torch=torch.__version__, cuda=torch.version.cuda)
    else:
        meta.update(records.gpu_meta())
    meta.update(dry_run=dry, num_sms=NUM_SMS, methods={
        "calls": f"{LOOP_CALLS} eager calls timed on the host; the GPU is synchronized "
                 "before and after, outside the timing",
        "calls+sync": f"a plain loop of {LOOP_CALLS} eager calls followed by one "
                      "torch.cuda.synchronize(), all timed"},
        inputs="context lengths uniform in [1, 8192]; varlen: runs of 2 tokens")
    record = {"schema": records.SCHEMA, "kind": "gpu-host", "meta": meta,
              "loops": host_loops(dry)}
    if not args.no_breakdown and not dry:
        record["parts"] = gpu_parts()
        record["cpu"] = cpu_figures()
        for section, tab in [("CPU, steps", record["cpu"]["steps"]),
                             ("CPU, totals", record["cpu"]["totals"]),
                             ("GPU, parts", record["parts"])]:
            print(f"\n{section}")
            for name, us in tab.items():
                print(f"  {name:55s} {us:8.3f} us")
    if args.json:
        path = records.write_record(record, Path(args.json).parent, Path(args.json).name)
    elif args.out or not dry:
        out_dir = args.out or records.REPO / "docs" / "benchmarks"
        name = "dry-run" if dry else records.slug(meta["device"])
        path = records.write_record(record, out_dir, f"{meta['date']}-{name}-host.json")
    else:
        return 0
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
