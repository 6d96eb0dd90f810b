"""The seed scenario: ``python -m jitmeta``.

A prefill step of batch 8192 tokens (all context lengths 4096, two tokens per
request, ``indices = arange(8192) // 2``) on 132 SMs — the call that fails upstream
with "uses too much shared data". The kernel is planned and compiled through the JIT
(NVRTC, disk cache). With a GPU it runs there and is checked against the reference;
without one the cubin is still compiled for sm_90 and the reference path answers.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import jitmeta
from jitmeta import envs, kernels
from jitmeta.jit import build as jit_build


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jitmeta", description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--num-sms", type=int, default=132)
    ap.add_argument("--context-len", type=int, default=4096)
    args = ap.parse_args(argv)

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    ctx = torch.full((args.batch, 1), args.context_len, dtype=torch.int32, device=device)
    idx = (torch.arange(args.batch, device=device) // 2).to(torch.int32)
    p = jitmeta.plan(args.batch, 1, True, args.num_sms, arch=None if gpu else "sm_90")
    print(f"plan: {p.variant} ({p.code.name}), {p.threads} threads, {p.smem_bytes} B smem"
          f" -- {p.reason}")
    t0 = time.perf_counter()
    built = jit_build.build(kernels.source(p.code), envs.snapshot(), example=p.to_dict())
    print(f"cubin: {len(built.cubin)} bytes for {p.code.arch}, from {built.source} in "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms; key {built.key[:16]}")
    got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, args.num_sms, indices=idx)
    if gpu:
        torch.cuda.synchronize()
    want = jitmeta.reference_schedule(ctx.cpu(), args.num_sms, idx.cpu())
    ok = torch.equal(got.cpu(), want)
    path = "GPU kernel" if gpu else "CPU reference path (no GPU here)"
    print(f"schedule [{args.num_sms + 1}, 2] via {path}: first rows {got[:3].tolist()}, "
          f"end {got[-1].tolist()}")
    print("matches the reference: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
