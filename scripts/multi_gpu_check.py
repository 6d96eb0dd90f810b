"""Multi-GPU check, all in one call on a machine with at least two GPUs:

    python scripts/multi_gpu_check.py          # prints a report; exit 0 when all hold

1. One process, tensors on cuda:0 and cuda:1 alternately, different num_sms per device:
   bit-exact, and each device has its own loaded module.
2. Two processes, one per GPU (like tensor-parallel ranks), started at the same moment
   on one cold cache directory: each key compiled once in total, both correct,
   ``jitmeta-cache verify`` clean afterwards.
3. The same two processes with JITMETA_OFFLINE=1 on the now-warm cache: zero compiles.

With fewer than two GPUs it says so and exits 2 (nothing is faked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

# Shapes every rank runs: (batch, next_n, varlen, schedule); all three variants.
SHAPES = [(1000, 1, False, "smxx"), (3000, 2, False, "sm90"), (5000, 1, True, "smxx"),
          (20000, 1, False, "smxx"), (30000, 1, True, "sm90"), (100000, 1, True, "smxx")]
NUM_SMS = {0: 132, 1: 78}


def inputs(batch, next_n, varlen, seed, device):
    import torch

    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(0, 40000, (batch, next_n), generator=g, dtype=torch.int32)
    idx = None
    if varlen:
        runs = torch.randint(1, 5, (batch,), generator=g)
        idx = torch.repeat_interleave(torch.arange(batch), runs)[:batch].to(torch.int32)
        idx = idx.to(device)
    return ctx.to(device), idx


def worker(device: int, start_at: float) -> None:
    """One rank: wait for the common start time, run every shape, report as JSON."""
    import torch

    import jitmeta

    torch.cuda.set_device(device)
    torch.zeros(1, device=f"cuda:{device}")  # CUDA ready before the race starts
    while time.time() < start_at:
        time.sleep(0.001)
    ok = []
    for i, (batch, next_n, varlen, schedule) in enumerate(SHAPES):
        ctx, idx = inputs(batch, next_n, varlen, 1000 + i, f"cuda:{device}")
        got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS[device], idx,
                                                    schedule=schedule)
        want = jitmeta.reference_schedule(ctx.cpu(), NUM_SMS[device],
                                          None if idx is None else idx.cpu(),
                                          schedule=schedule)
        ok.append(bool(torch.equal(got.cpu(), want)))
    print(json.dumps({"device": device, "equal": ok, "stats": jitmeta.stats()}))


def run_ranks(cache: str, offline: bool) -> list[dict]:
    env = dict(os.environ, JITMETA_CACHE_DIR=cache, NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    if offline:
        env["JITMETA_OFFLINE"] = "1"
    start_at = time.time() + 15.0  # both ranks import torch first, then start together
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(d), str(start_at)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for d in (0, 1)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"rank failed (exit {p.returncode}):\n{err}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def main() -> int:
    import torch

    import jitmeta
    from jitmeta import envs, kernels
    from jitmeta.jit import build as jit_build
    from jitmeta.jit import runtime

    n = torch.cuda.device_count()
    if n < 2:
        print(f"needs two GPUs, found {n}: nothing was run (the multi-GPU check stays "
              "blocked)")
        return 2
    failures = []

    # 1. one process, devices alternately
    with tempfile.TemporaryDirectory() as cache:
        with jitmeta.envs.override(JITMETA_CACHE_DIR=cache):
            for rep in range(3):
                for i, (batch, next_n, varlen, schedule) in enumerate(SHAPES):
                    for dev in (0, 1):
                        ctx, idx = inputs(batch, next_n, varlen, 10 * rep + i, f"cuda:{dev}")
                        got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS[dev], idx,
                                                                    schedule=schedule)
                        want = jitmeta.reference_schedule(ctx.cpu(), NUM_SMS[dev],
                                                          None if idx is None else idx.cpu(),
                                                          schedule=schedule)
                        if not torch.equal(got.cpu(), want):
                            failures.append(f"1: {batch} {next_n} {varlen} {schedule} cuda:{dev}")
            knobs = envs.snapshot()
            keys = {jit_build.key_for(kernels.source(jitmeta.plan(b, nn, v, NUM_SMS[0],
                                                                  schedule=s, device=0).code),
                                      knobs)[0]
                    for b, nn, v, s in SHAPES}
            loaded = set(runtime.loaded_modules())
            for key in keys:
                for dev in (0, 1):
                    if (dev, key) not in loaded:
                        failures.append(f"1: module {key[:12]} not loaded on cuda:{dev}")
    print(f"1. one process, cuda:0/cuda:1 alternately: {'ok' if not failures else failures}")

    # 2. two ranks, one cold cache
    with tempfile.TemporaryDirectory() as cache:
        reports = run_ranks(cache, offline=False)
        compiles = sum(r["stats"]["compiles"] for r in reports)
        equal = all(all(r["equal"]) for r in reports)
        verify = subprocess.run([sys.executable, "-m", "jitmeta.cache_tools.cli",
                                 "--cache-dir", cache, "verify", "--json"],
                                capture_output=True, text=True)
        print(f"2. two ranks, cold cache: equal={equal}, compiles={compiles} for "
              f"{len(keys)} keys, verify exit {verify.returncode}")
        if not equal or compiles != len(keys) or verify.returncode != 0:
            failures.append(f"2: equal={equal} compiles={compiles} verify={verify.stdout}")
        # 3. the same, offline, on the warm cache
        reports = run_ranks(cache, offline=True)
        compiles = sum(r["stats"]["compiles"] for r in reports)
        equal = all(all(r["equal"]) for r in reports)
        print(f"3. two ranks, JITMETA_OFFLINE=1, warm cache: equal={equal}, "
              f"compiles={compiles}")
        if not equal or compiles:
            failures.append(f"3: equal={equal} compiles={compiles}")
    print("ALL OK" if not failures else f"FAILURES: {failures}")
    return 0 if not failures else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), float(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
