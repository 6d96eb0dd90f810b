"""Host microseconds per call of jitmeta's eager path, broken down (issue 4/5).

On a GPU: the whole eager call (with and without ``out=``) per variant, and what its
parts cost there: stream lookup, context check, output allocation, the launch with
packed ``kernelParams`` and with a ``(values, types)`` tuple.

Without a GPU (CPU-only CI): everything of the CUDA path except the driver and the CUDA
allocator, measured on the real code with a stand-in driver whose calls cost one
Python call each, next to the same figures for the code before issue 5 (its knob
reads, validation, cache key and tuple conversion of kernel arguments).

    python bench/benchmark_host.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import jitmeta
from jitmeta import api, envs
from jitmeta.jit import runtime

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


def gpu_figures() -> dict:
    dev = torch.cuda.current_device()
    gpu_sync = torch.cuda.synchronize
    out = torch.empty(NUM_SMS + 1, 2, dtype=I32, device="cuda")
    rows = {}
    for name, batch, varlen in [("static", 128, False), ("static-varlen", 4096, True),
                                ("dynamic", 20000, False), ("chunked", 100000, True)]:
        ctx = torch.randint(0, 5000, (batch, 1), dtype=I32, device="cuda")
        idx = (torch.arange(batch, device="cuda") // 2).to(I32) if varlen else None
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx)
        torch.cuda.synchronize()

        def eager():
            jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx)

        def with_out():
            jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, idx, out=out)

        rows[name] = {"eager_us": per_call_us(eager, 200, 15, gpu_sync),
                      "out_us": per_call_us(with_out, 200, 15, gpu_sync)}
        torch.cuda.synchronize()
    # the parts, on the static launcher
    ctx = torch.randint(0, 5000, (128, 1), dtype=I32, device="cuda")
    launcher = api.prepare(dev, 128, 1, False, NUM_SMS, 256, "smxx")
    stream = api._raw_stream(dev)
    args = (ctx.data_ptr(), 0, 128, 1, NUM_SMS, out.data_ptr(), 0)
    driver = runtime._driver()
    parts = {
        "knob snapshot + state": per_call_us(lambda: api._states.get(api._call_token())),
        "torch.cuda.current_stream(d).cuda_stream":
            per_call_us(lambda: torch.cuda.current_stream(dev).cuda_stream),
        "raw current stream (used)": per_call_us(lambda: api._raw_stream(dev)),
        "runtime.make_current (already current)": per_call_us(
            lambda: runtime.make_current(dev)),
        "ctx.new_empty (CUDA caching allocator)": per_call_us(
            lambda: ctx.new_empty((NUM_SMS + 1, 2)), 2000),
        "runtime.launch, packed kernelParams (used)": per_call_us(
            lambda: runtime.launch(launcher.emit, 1, launcher.threads, 0, stream, args,
                                   api._EMIT_TYPES), 200, 15, gpu_sync),
        "cuLaunchKernel, (values, types) tuple (before)": per_call_us(
            lambda: driver.cuLaunchKernel(launcher.emit, 1, 1, 1, launcher.threads, 1, 1, 0,
                                          stream, (args, api._EMIT_TYPES), 0), 200, 15,
            gpu_sync),
    }
    torch.cuda.synchronize()
    return {"device": torch.cuda.get_device_name(dev), "calls": rows, "parts": parts}


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


def cpu_figures() -> dict:
    """The CUDA path's Python work on CPU tensors, driver and CUDA allocator excluded."""
    from cuda.bindings import driver as real

    ctx = torch.randint(0, 5000, (128, 1), dtype=I32)
    out = torch.empty(NUM_SMS + 1, 2, dtype=I32)
    p = jitmeta.plan(128, 1, False, NUM_SMS, arch="sm_90")
    launcher = api.Launcher(device=0, plan=p, emit="jitmeta_emit", cooperative=False,
                            threads=p.threads, grid=p.grid, dyn_smem=0, ws_words=0)
    state = api._CallState(False)  # private: never seen by real calls
    saved = (runtime._drv, dict(runtime._context_ids), api._raw_stream)
    runtime._drv = _NullDriver()
    runtime._context_ids[0] = 0x1000
    api._raw_stream = lambda device: 0
    try:
        run_eager = per_call_us(lambda: api._run(launcher, state, ctx, None, None, False))
        run_out = per_call_us(lambda: api._run(launcher, state, ctx, None, out, False))
    finally:
        runtime._drv, api._raw_stream = saved[0], saved[2]
        runtime._context_ids.clear()
        runtime._context_ids.update(saved[1])
    key = (0, ctx.shape, None, NUM_SMS, 64, 256, "smxx")
    state.calls[key] = launcher
    is_cpu, int32, tensor = "is_cpu", I32, torch.Tensor

    def fast_checks(out=None):  # _eager's checks, with is_cpu standing in for is_cuda
        c = ctx
        if (type(c) is tensor and getattr(c, is_cpu) and c.dtype is int32
                and c.is_contiguous() and type(NUM_SMS) is int and type(64) is int
                and type(256) is int and type("smxx") is str and type(False) is bool):
            dev = c.get_device()
            launcher = state.calls.get((0 if dev < 0 else dev, c.shape, None, NUM_SMS, 64,
                                        256, "smxx"))
            return launcher is not None and (
                out is None or (type(out) is tensor and getattr(out, is_cpu)
                                and out.dtype is int32 and out.shape == launcher.out_shape
                                and out.get_device() == dev and out.is_contiguous()
                                and not out.data_ptr() & 7))
        return False

    def entry():
        token = api._call_token()
        return api._states.get(token) or api._new_state(token)

    plan_knobs = api._PLAN_KNOBS
    old_launchers = {(0, 128, 1, False, NUM_SMS, 256, "smxx",
                      tuple(envs.raw(n) for n in plan_knobs)): launcher}
    args = (ctx.data_ptr(), 0, 128, 1, NUM_SMS, out.data_ptr(), 0)
    helper = real._HelperKernelParams
    after = {
        "is_compiling()": per_call_us(torch.compiler.is_compiling),
        "knob snapshot + state lookup": per_call_us(entry),
        "fast-path checks + key lookup": per_call_us(fast_checks),
        "fast-path checks + key lookup (out=)": per_call_us(lambda: fast_checks(out)),
        "_run incl. new_empty (CPU) + packing, null driver": run_eager,
        "_run with out=, null driver": run_out,
    }
    before = {
        "knob token (envs.raw x 9)": per_call_us(
            lambda: tuple(envs.raw(n) for n in plan_knobs)),
        "envs.get(JITMETA_CHECK_INPUTS)": per_call_us(
            lambda: envs.get("JITMETA_CHECK_INPUTS")),
        "validate()": per_call_us(
            lambda: api.validate(ctx, 64, NUM_SMS, None, None, 256, "smxx")),
        "validate() with out=": per_call_us(
            lambda: api.validate(ctx, 64, NUM_SMS, None, out, 256, "smxx")),
        "prepare() cache key + lookup": per_call_us(
            lambda: old_launchers.get((0, 128, 1, False, NUM_SMS, 256, "smxx",
                                       tuple(envs.raw(n) for n in plan_knobs)))),
        "torch.empty(..., device=) (CPU)": per_call_us(
            lambda: torch.empty((NUM_SMS + 1, 2), dtype=I32, device=ctx.device)),
        "(values, types) -> kernelParams in cuda.bindings": per_call_us(
            lambda: helper((args, api._EMIT_TYPES))),
    }
    totals = {
        "after: eager": after["is_compiling()"] + after["knob snapshot + state lookup"]
        + after["fast-path checks + key lookup"] + run_eager,
        "after: out=": after["is_compiling()"] + after["knob snapshot + state lookup"]
        + after["fast-path checks + key lookup (out=)"] + run_out,
        # the old call: validate, envs.get, prepare's key (9 knob reads), allocation,
        # tuple conversion (its stream, context and driver calls are not counted)
        "before: eager": before["validate()"] + before["envs.get(JITMETA_CHECK_INPUTS)"]
        + before["prepare() cache key + lookup"] + before["torch.empty(..., device=) (CPU)"]
        + before["(values, types) -> kernelParams in cuda.bindings"],
        "before: out=": before["validate() with out="]
        + before["envs.get(JITMETA_CHECK_INPUTS)"] + before["prepare() cache key + lookup"]
        + before["(values, types) -> kernelParams in cuda.bindings"],
    }
    return {"after": after, "before": before, "totals": totals}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    figures = {"python": sys.version.split()[0], "torch": torch.__version__,
               "cpu": cpu_figures()}
    if torch.cuda.is_available():
        figures["gpu"] = gpu_figures()
    for section, table in [("CPU, after", figures["cpu"]["after"]),
                           ("CPU, before", figures["cpu"]["before"]),
                           ("CPU, totals", figures["cpu"]["totals"])] + (
            [("GPU, calls", {f"{k} {m}": v[m] for k, v in figures["gpu"]["calls"].items()
                             for m in v}), ("GPU, parts", figures["gpu"]["parts"])]
            if "gpu" in figures else []):
        print(f"\n{section}")
        for name, us in table.items():
            print(f"  {name:55s} {us:8.3f} us")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
