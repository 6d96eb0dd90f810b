"""A few metadata calls for Nsight Compute to profile (``gpu_session.sh ncu``).

Each shape is called once to build and load its kernel, then once more; profile only
the ``jitmeta_emit`` launches, e.g.::

    ncu -k regex:jitmeta_emit --launch-skip-before-match 0 python bench/ncu_cases.py

Prints which call is which, in launch order (public API only, so an earlier version of
the package runs it too). ``--streaming`` profiles instead a few chunked calls large
enough that every block streams many slabs (where phase 1's loads and scans set the
time).
"""

from __future__ import annotations

import sys

import torch

import jitmeta

NUM_SMS, BLOCK_KV = 132, 64
# (batch, next_n, varlen, schedule)
SHAPES = [(1, 1, False, "smxx"), (1024, 1, False, "smxx"), (8192, 1, False, "smxx"),
          (8192, 1, True, "smxx"), (65536, 1, False, "smxx"), (8192, 1, True, "sm100")]
STREAMING = [(1 << 22, 1, False, "smxx"), (1 << 22, 1, True, "smxx"),
             (1 << 22, 1, True, "sm100")]
FORMATS = [(batch, 1, varlen, schedule) for batch, varlen in
           ((1024, True), (16384, False), (65536, True)) for schedule in ("smxx", "sm100")]


def main() -> None:
    g = torch.Generator().manual_seed(1234)
    args = sys.argv[1:]
    shapes = STREAMING if "--streaming" in args else FORMATS if "--formats" in args else SHAPES
    for batch, next_n, varlen, schedule in shapes:
        ctx = torch.randint(1, 8193, (batch, next_n), generator=g, dtype=torch.int32).cuda()
        idx = (torch.arange(batch, dtype=torch.int32) // 2).cuda() if varlen else None
        out = torch.empty(NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
        for call in range(2):
            jitmeta.get_paged_mqa_logits_metadata(ctx, BLOCK_KV, NUM_SMS, idx, out=out,
                                                  schedule=schedule)
        torch.cuda.synchronize()
        want = jitmeta.reference_schedule(ctx.cpu(), NUM_SMS,
                                          idx.cpu() if varlen else None,
                                          schedule=schedule)
        ok = torch.equal(out.cpu(), want)
        print(f"batch {batch} next_n {next_n} varlen {varlen} {schedule}: 2 launches, "
              f"exact {ok}", flush=True)


if __name__ == "__main__":
    main()
