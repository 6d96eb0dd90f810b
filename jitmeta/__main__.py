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

from jitmeta._version import __version__


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m jitmeta",
        description="Plan, compile (NVRTC, disk cache) and run the seed scenario -- a "
                    "varlen prefill step, two tokens per request -- and check the "
                    "schedule against the reference (on the GPU when there is one).",
        epilog="Exit code 0 when the result matches the reference, 1 when it does not.")
    ap.add_argument("--batch", type=_positive, default=8192, metavar="B",
                    help="tokens in the prefill step, two per request (default 8192)")
    ap.add_argument("--num-sms", type=_positive, default=132, metavar="S",
                    help="SMs the consumer kernel runs on (default 132, an H200)")
    ap.add_argument("--context-len", type=_positive, default=4096, metavar="L",
                    help="context length of every request (default 4096)")
    ap.add_argument("--version", action="version", version=f"jitmeta {__version__}")
    args = ap.parse_args(argv)

    import torch

    import jitmeta
    from jitmeta import dispatch

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    ctx = torch.full((args.batch, 1), args.context_len, dtype=torch.int32, device=device)
    idx = (torch.arange(args.batch, device=device) // 2).to(torch.int32)
    p = jitmeta.plan(args.batch, 1, True, args.num_sms, arch=None if gpu else "sm_90")
    print(f"plan: {p.variant} ({p.code.name}), {p.threads} threads, {p.smem_bytes} B smem"
          f" -- {p.reason}")
    t0 = time.perf_counter()
    built = dispatch.build_plan(p)
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
