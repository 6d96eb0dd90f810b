"""Where the host time of one eager call goes: cProfile over many calls, public API only.

    python bench/profile_call.py [--calls N] [--varlen] [--batch B] [--out-arg]
    python bench/profile_call.py --first [--varlen] [--batch B]

``--first`` profiles this process's first call instead (plan, cubin from the disk
cache, module load, launch and the wait for it; cumulative time per function,
milliseconds): run it once before, so that the disk cache holds the cubin.

Prints the functions with the most own time per call (microseconds, profiler overhead
included: compare versions with the same script, not with the loops of
benchmark_host.py). Needs a CUDA GPU. Works with any version of the package (it uses
only ``jitmeta.get_paged_mqa_logits_metadata``), so two versions can be compared.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import torch

import jitmeta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--out-arg", action="store_true", help="pass a preallocated out=")
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--first", action="store_true",
                    help="profile the first call of this process (cumulative ms)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    ctx = torch.randint(1, 8193, (args.batch, 1), dtype=torch.int32, device="cuda")
    idx = (torch.arange(args.batch, device="cuda") // 2).to(torch.int32) \
        if args.varlen else None
    out = torch.empty(133, 2, dtype=torch.int32, device="cuda") if args.out_arg else None
    get = jitmeta.get_paged_mqa_logits_metadata
    if args.first:
        return first_call(get, ctx, idx, out, args.top)

    def calls(n):
        for _ in range(n):
            get(ctx, 64, 132, idx, out=out)

    calls(100)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    calls(args.calls)
    plain = (time.perf_counter() - t0) * 1e6 / args.calls
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    calls(args.calls)
    prof.disable()
    torch.cuda.synchronize()
    print(f"jitmeta {jitmeta.__version__}: {plain:.2f} us per call without the profiler")
    for where, name, nc, tt, ct in top_rows(prof, "own", args.top):
        print(f"{tt * 1e6 / args.calls:8.3f} us own {ct * 1e6 / args.calls:8.3f} us cum "
              f"{nc / args.calls:5.1f}x  {name}  ({where})")
    return 0


def top_rows(prof: cProfile.Profile, by: str, top: int):
    """The ``top`` functions of a profile by "own" or "cum" (cumulative) time: (where,
    name, calls, own seconds, cumulative seconds)."""
    column = {"own": 2, "cum": 3}[by]
    rows = sorted(pstats.Stats(prof).stats.items(), key=lambda kv: -kv[1][column])
    for (file, line, name), (_cc, nc, tt, ct, _) in rows[:top]:
        yield "/".join(file.rsplit("/", 2)[-2:]) + f":{line}", name, nc, tt, ct


def first_call(get, ctx, idx, out, top: int) -> int:
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    get(ctx, 64, 132, idx, out=out)
    torch.cuda.synchronize()
    prof.disable()
    total = (time.perf_counter() - t0) * 1e3
    compiles = jitmeta.stats()["compiles"]
    print(f"jitmeta {jitmeta.__version__}: first call {total:.3f} ms with the profiler "
          f"({compiles} compiles{': run again, the cache was cold' if compiles else ''})")
    for where, name, nc, tt, ct in top_rows(prof, "cum", top):
        print(f"{ct * 1e3:8.3f} ms cum {tt * 1e3:8.3f} ms own {nc:4d}x  {name}  ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
