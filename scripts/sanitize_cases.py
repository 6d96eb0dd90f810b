"""Exercise every kernel variant once (dense and varlen, every format) for
compute-sanitizer: `compute-sanitizer --tool memcheck python scripts/sanitize_cases.py`."""

import sys

import torch

import jitmeta
from jitmeta import envs


# Every variant, the small-bucket block sizes, the default chunked slabs, and blocks
# with many slabs (chunk 1024: 293 slabs over at most 132 blocks; the chunk knob is a
# power of two); slabs of 8 elements per thread (128 threads) are summed in registers
# (dense at next_n 1) when a block has more than one; slabs of 8192 (1024 threads: the
# largest batches' chunked kernels, whose "sm100" blocks skip walks). Between them the
# cases reach every cubin that serves batches 1..2^24 on 132 SMs, dense and varlen
# (tests/test_plan_codes.py checks it through the planner). Fields: variant, batch,
# JITMETA_CHUNK, JITMETA_THREADS, next_n of the dense cases. Static tiles of 2048 to
# 8192 are read into registers (16-byte loads at next_n 1 and varlen; the last thread
# of 7999 has 7 elements).
CASES = [("static", 1000, None, None, 3), ("static", 2000, None, None, 3),
         ("static", 4096, None, None, 3), ("static", 7999, None, None, 1),
         ("dynamic", 20000, None, None, 3),
         ("chunked", 16384, None, None, 3), ("chunked", 70000, None, None, 3),
         ("chunked", 200000, None, None, 3), ("chunked", 300000, None, None, 3),
         ("chunked", 300000, 8192, None, 1), ("chunked", 300000, 1024, None, 3),
         ("chunked", 300000, 1024, 128, 1), ("chunked", 5000, 1024, None, 3),
         ("chunked", 5000, 32, None, 3)]
# (format, num_sms) of every case, dense and varlen
SHAPES = (("smxx", 4096), ("sm90", 1), ("smxx", 132), ("sm100", 132), ("sm100", 4096))


def runs():
    """(variant, batch, varlen, next_n, schedule, num_sms) of every case in every shape,
    each yielded while its JITMETA_VARIANT / JITMETA_CHUNK / JITMETA_THREADS are set."""
    for variant, batch, chunk, threads, dense_next_n in CASES:
        with envs.override(JITMETA_VARIANT=variant, JITMETA_CHUNK=chunk,
                           JITMETA_THREADS=threads):
            for varlen in (False, True):
                for schedule, num_sms in SHAPES:
                    yield (variant, batch, varlen, 1 if varlen else dense_next_n, schedule,
                           num_sms)


def main() -> int:
    import logging, time
    logging.basicConfig(level=logging.DEBUG if "-v" in sys.argv else logging.INFO)
    t0 = time.perf_counter()
    ctx = torch.full((8192, 1), 4096, dtype=torch.int32, device="cuda")
    idx = (torch.arange(8192, device="cuda") // 2).to(torch.int32)
    print(f"cuda ready in {time.perf_counter() - t0:.2f}s", flush=True)
    got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=idx)
    print(f"first call returned in {time.perf_counter() - t0:.2f}s", flush=True)
    torch.cuda.synchronize()
    print(f"seed scenario ran in {time.perf_counter() - t0:.2f}s; equal to reference:",
          torch.equal(got, jitmeta.reference_schedule(ctx, 132, idx)), flush=True)
    gen = torch.Generator().manual_seed(0)
    bad = 0
    for variant, batch, varlen, next_n, schedule, num_sms in runs():
        ctx = torch.randint(0, 5000, (batch, next_n), generator=gen, dtype=torch.int32).cuda()
        idx = (torch.arange(batch) // 3).to(torch.int32).cuda() if varlen else None
        got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, num_sms, idx, schedule=schedule)
        want = jitmeta.reference_schedule(ctx, num_sms, idx, schedule=schedule)
        ok = torch.equal(got, want)
        bad += not ok
        print(f"{variant:8s} batch={batch:6d} varlen={varlen!s:5s} "
              f"{schedule} num_sms={num_sms:5d} {'ok' if ok else 'MISMATCH'}")
    # one request holding most SMs: its rows go through the row queue (chunked slabs
    # of 1024; varlen, every token its own request / atom)
    for schedule in jitmeta.SCHEDULES:
        for varlen in (False, True):
            ctx = torch.randint(0, 300, (5000, 1), generator=gen, dtype=torch.int32)
            ctx[1234, 0] = 2**31 - 1
            ctx = ctx.cuda()
            idx = torch.arange(5000, dtype=torch.int32).cuda() if varlen else None
            with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK=1024):
                got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, idx,
                                                            schedule=schedule)
            ok = torch.equal(got, jitmeta.reference_schedule(ctx, 132, idx, schedule=schedule))
            bad += not ok
            print(f"queue    batch=  5000 varlen={varlen!s:5s} {schedule} num_sms=  132 "
                  f"{'ok' if ok else 'MISMATCH'}")
    # all-zero lengths at a multiple of 32 (an upstream kernel faults there)
    z = torch.zeros(1024, 1, dtype=torch.int32, device="cuda")
    for schedule in jitmeta.SCHEDULES:
        ok = torch.equal(jitmeta.get_paged_mqa_logits_metadata(z, 64, 132, schedule=schedule),
                         jitmeta.reference_schedule(z, 132, schedule=schedule))
        bad += not ok
    torch.cuda.synchronize()
    print("sanitize cases:", "all ok" if not bad else f"{bad} MISMATCHES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
