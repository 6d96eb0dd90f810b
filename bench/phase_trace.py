"""Where a kernel's time goes, phase by phase (an analysis tool, not a benchmark).

Compiles the kernels of a few shapes with timestamps added at phase boundaries (the
rendered source is edited in this process only: thread 0 of each block stores
``clock64()`` and ``%globaltimer`` after a block barrier, into a ``__device__`` array
read back after the call), runs each shape eagerly a number of times and prints, per
shape, the median over calls of: the median and the slowest block's cycles in each
phase, the spread of the blocks' start times, and the span from the first block's
start to the last block's end. The barriers the marks add cost a little; the figures
say where the time goes, not what a call costs (bench/benchmark_metadata.py does).

Marks (chunked): entry (after the dependency wait), each stored slab loaded (the
last one's kept), phase 1 done (before the block publishes its slot), every slot seen
(past 32 blocks: by the block counted in last, and by the others their result), the
exchange done (carry known), end; and, summed per block over phase 2, the resident
slab's rows, the reloads of stored slabs and their rows, and the reloaded parts of
register slabs with their rows. Static: entry, tile loaded, tile scanned, end.

    python bench/phase_trace.py [--out DIR] [--calls N]

Writes ``<date>-<device>-phases.json`` to ``--out`` (default: print only).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import torch

import jitmeta
from jitmeta import envs
from jitmeta.jit import build as jit_build
from jitmeta.jit import runtime

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_metadata as bm  # noqa: E402
import records  # noqa: E402

MARKS = 16  # slots per block
ENTRY, LOADED, PHASE1, EXCHANGED, END, SCANNED, WAITED = 0, 1, 2, 3, 4, 5, 6
# accumulated spans of phase 2 (cycles summed over a call, and how many)
RESIDENT, RELOAD, REEMIT, PARTS = 8, 9, 10, 11
PREFIXED, SEARCHED = 12, 13  # a whole batch in one block: prefix keys written, rows found
SPANS = ((RESIDENT, "resident slab rows"), (RELOAD, "reloads"), (REEMIT, "reloaded rows"),
         (PARTS, "register slab parts"))
CASES = [  # (format, mode, batch)
    ("smxx", "varlen/runs=1..16", 1), ("sm100", "varlen/runs=1..16", 1),
    ("smxx", "next_n=1", 1),
    ("smxx", "varlen/runs=1..16", 1024), ("sm100", "varlen/runs=1..16", 1024),
    ("smxx", "varlen/runs=1..16", 8192), ("sm100", "varlen/runs=1..16", 8192),
    ("smxx", "next_n=1", 8192),
    ("smxx", "varlen/runs=1..16", 16384), ("sm100", "varlen/runs=1..16", 16384),
    ("smxx", "next_n=1", 16384), ("sm100", "next_n=1", 16384),
    ("smxx", "varlen/runs=1..16", 65536), ("sm100", "varlen/runs=1..16", 65536),
    ("smxx", "next_n=1", 65536), ("sm100", "next_n=1", 65536),
    ("smxx", "varlen/runs=1..16", 2**20), ("sm100", "varlen/runs=1..16", 2**20),
    ("smxx", "next_n=1", 2**20), ("sm100", "next_n=1", 2**20),
    ("smxx", "varlen/runs=1..16", 2**24), ("sm100", "varlen/runs=1..16", 2**24),
    ("smxx", "next_n=1", 2**24),
]

PRELUDE = r"""
__device__ unsigned long long jitmeta_trace[1024 * %d * 2];
__device__ __forceinline__ void jitmeta_mark(unsigned k, bool sync) {
    if (sync) __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long g;
        asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g));
        const unsigned i = (blockIdx.x * %d + k) * 2;
        jitmeta_trace[i] = clock64();
        jitmeta_trace[i + 1] = g;
    }
}
__device__ __forceinline__ unsigned long long jitmeta_begin() {
    __syncthreads();
    return clock64();
}
__device__ __forceinline__ unsigned long long jitmeta_add(unsigned k, unsigned long long t) {
    __syncthreads();
    const unsigned long long now = clock64();
    if (threadIdx.x == 0) {
        const unsigned i = (blockIdx.x * %d + k) * 2;
        jitmeta_trace[i] += now - t;
        jitmeta_trace[i + 1] += 1;
    }
    return now;
}
""" % (MARKS, MARKS, MARKS)

# (where: "chunked", "static" or "both"; anchor in the rendered source, found exactly
# once; the text that replaces it, "{a}" standing for the anchor)
EDITS = [
    ("both", "    jitmeta::grid_launch_dependents();\n", "{a}    jitmeta_mark(%d, false);\n" % ENTRY),
    ("chunked", "            __syncthreads();\n            kept = scan_tile(",
     "            __syncthreads();\n            jitmeta_mark(%d, false);\n"
     "            kept = scan_tile(" % LOADED),
    ("chunked", "        if (threadIdx.x == 0) publish(slot_of(ws, g), mine, epoch + 1u);\n",
     "        jitmeta_mark(%d, true);\n{a}" % PHASE1),
    ("chunked", "        if (j0 == j1) return;\n\n        // Phase 2",
     "        jitmeta_mark(%d, true);\n{a}" % EXCHANGED),
    ("chunked", "                                    ws, scratch);\n", "{a}    jitmeta_mark(%d, true);\n" % END),
    # every slot seen (up to 32 blocks; past that, by the block counted in last), or
    # this block's result seen (the other blocks past 32)
    ("chunked", "\n            if (threadIdx.x < grid) slot = wait_slot(slot_of(ws, threadIdx.x), epoch + 1u);\n",
     "{a}            jitmeta_mark(%d, true);\n" % WAITED),
    ("chunked", "\n                if (threadIdx.x < grid) slot = wait_slot(slot_of(ws, threadIdx.x), epoch + 1u);\n",
     "{a}                jitmeta_mark(%d, true);\n" % WAITED),
    ("chunked", "                    sc.warp[0] = wait_slot<kResultStride>(res + kTotalOffset, epoch + 1u);\n",
     "{a}                jitmeta_mark(%d, true);\n" % WAITED),
    ("chunked", "            if (narrow)\n"
     "                emit_scanned<u32>(tile, kept, lo, n, carry_last, total, false, j1 == slabs,\n"
     "                                  batch, mult, num_sms, out, sc);\n"
     "            else\n"
     "                emit_scanned(tile, kept, lo, n, carry_last, total, false, j1 == slabs, batch,\n"
     "                             mult, num_sms, out, sc);\n",
     "            unsigned long long jm_t = jitmeta_begin();\n{a}"
     "            jitmeta_add(%d, jm_t);\n" % RESIDENT),
    ("chunked", "                load_tile(tile, ctx, idx, lo, n, batch, next_n, mult);\n"
     "                __syncthreads();\n",
     "                unsigned long long jm_t = jitmeta_begin();\n"
     "                load_tile(tile, ctx, idx, lo, n, batch, next_n, mult);\n"
     "                jm_t = jitmeta_add(%d, jm_t);\n" % RELOAD),
    ("chunked", "                emit_reloaded(tile, lo, n, cl, total, batch, mult, num_sms, out, sc);\n",
     "{a}                jitmeta_add(%d, jm_t);\n" % REEMIT),
    ("chunked", "                        emit_parts(j, cl);\n",
     "                        unsigned long long jm_t = jitmeta_begin();\n{a}"
     "                        jitmeta_add(%d, jm_t);\n" % PARTS),
    # a slab read into registers (a static tile; a chunked block's last slab): loaded
    # once its words are formed
    ("both", "        reg_words(f, lo, pos, mult, w);  // every lane: it shuffles\n",
     # (the empty asm consumes every word: their loads land before the mark, not after)
     "{a}        asm volatile(\"\" :: " + ", ".join(f'"r"(w[{k}])' for k in range(9))
     + ");\n        jitmeta_mark(%d, true);\n" % LOADED),
    # the whole batch in one block (Engine::whole), tile loaded by the block or in registers
    ("both", "        load_tile(tile, ctx, idx, 0u, batch, batch, next_n, mult);\n"
     "        __syncthreads();\n", "{a}        jitmeta_mark(%d, false);\n" % LOADED),
    ("both", "        emit_scanned(tile, t, 0u, batch, S::identity(), 0u, true, true, batch, mult,\n",
     "        jitmeta_mark(%d, true);\n{a}" % SCANNED),
    ("both", "                if (emit_whole<8u>([&w](u32 k) { return w[k]; }, tile, t, batch, batch, mult,\n",
     "                jitmeta_mark(%d, true);\n{a}" % SCANNED),
    ("both", "        if (!F::template prefix_whole<N>(at, tile, t, mult, &total)) return false;  // uniform: t.block\n",
     "{a}        jitmeta_mark(%d, true);\n" % PREFIXED),
    ("both", "            reinterpret_cast<int2*>(out)[s] = row;\n        }\n",
     "{a}        jitmeta_mark(%d, true);\n" % SEARCHED),
    ("static", "                                  scratch);\n", "{a}    jitmeta_mark(%d, true);\n" % END),
]


def traced(text: str) -> str:
    """The rendered source with the marks; refuses a source whose anchors moved."""
    kind = "chunked" if "Sched::chunked<" in text else "static"
    for where, anchor, repl in EDITS:
        if where not in ("both", kind):
            continue
        if text.count(anchor) != 1:
            raise SystemExit(f"phase_trace: anchor found {text.count(anchor)} times in a "
                             f"{kind} source: {anchor!r}")
        text = text.replace(anchor, repl.replace("{a}", anchor))
    return PRELUDE + text


def trace_buffer(module):
    """The device address of the module's ``jitmeta_trace`` array."""
    err, ptr, _ = runtime._drv.cuModuleGetGlobal(module, b"jitmeta_trace")
    if err:
        raise SystemExit(f"phase_trace: cuModuleGetGlobal: {err}")
    return ptr


def read_trace(ptr, grid: int) -> list[list[tuple[int, int]]]:
    """(clock64, globaltimer) of every mark of every block."""
    drv = runtime._drv
    words = grid * MARKS * 2
    host = (ctypes.c_uint64 * words)()
    err, = drv.cuMemcpyDtoH(ctypes.addressof(host), ptr, words * 8)
    if err:
        raise SystemExit(f"phase_trace: cuMemcpyDtoH: {err}")
    return [[(host[(b * MARKS + k) * 2], host[(b * MARKS + k) * 2 + 1]) for k in range(MARKS)]
            for b in range(grid)]


def clear_trace(ptr, grid: int) -> None:
    drv = runtime._drv
    drv.cuMemsetD8(ptr, 0, grid * MARKS * 16)
    drv.cuCtxSynchronize()


def phases_of(variant: str) -> list[tuple[str, int, int]]:
    if variant == "chunked":
        return [("load", ENTRY, LOADED), ("phase 1 rest", LOADED, PHASE1),
                ("publish and wait", PHASE1, WAITED), ("slot scan", WAITED, EXCHANGED),
                ("phase 2", EXCHANGED, END), ("total", ENTRY, END)]
    return [("load", ENTRY, LOADED), ("scan", LOADED, SCANNED), ("rows", SCANNED, END),
            ("rows: prefix keys", SCANNED, PREFIXED), ("rows: search", PREFIXED, SEARCHED),
            ("total", ENTRY, END)]


def run_case(fmt: str, mode: str, batch: int, calls: int, gen) -> dict:
    next_n, runs = bm.mode_shape(mode)
    ctx, idx = bm.make_inputs(batch, mode, gen, "cuda")
    want = jitmeta.reference_schedule(ctx, bm.NUM_SMS, idx, schedule=fmt)
    p = jitmeta.plan(batch, next_n, runs is not None, bm.NUM_SMS, schedule=fmt)
    out = torch.empty(bm.NUM_SMS + 1, 2, dtype=torch.int32, device="cuda")
    before = set(runtime.loaded_modules())
    jitmeta.get_paged_mqa_logits_metadata(ctx, bm.BLOCK_KV, bm.NUM_SMS, idx, out=out,
                                          schedule=fmt)
    torch.cuda.synchronize()
    new = [k for k in runtime.loaded_modules() if k not in before]
    key = new[0] if new else None
    if key is None:  # loaded by an earlier case of the same code
        key = CODE_KEYS[p.code.name]
    CODE_KEYS[p.code.name] = key
    runtime.make_current(key[0])
    ptr = trace_buffer(runtime.get_module(*key).module)
    exact = torch.equal(out, want)
    per_call = []
    for _ in range(calls):
        clear_trace(ptr, p.grid)
        jitmeta.get_paged_mqa_logits_metadata(ctx, bm.BLOCK_KV, bm.NUM_SMS, idx, out=out,
                                              schedule=fmt)
        torch.cuda.synchronize()
        per_call.append(read_trace(ptr, p.grid))
    exact = exact and torch.equal(out, want)
    def cycles(of_block) -> dict:  # median over calls of the median / slowest block
        per_block = [[of_block(blk) for blk in tr] for tr in per_call]
        return {"median_block_cycles": statistics.median(map(statistics.median, per_block)),
                "slowest_block_cycles": statistics.median(map(max, per_block))}

    phases = {name: cycles(lambda blk, a=a, b=b: blk[b][0] - blk[a][0])
              for name, a, b in phases_of(p.variant)
              # (a mark the kernel's path does not pass stays 0: no such phase)
              if all(blk[a][0] and blk[b][0] for tr in per_call for blk in tr)}
    if p.variant == "chunked":
        for k, name in SPANS:  # summed per block: cycles, and how many
            phases[name] = {**cycles(lambda blk, k=k: blk[k][0]),
                            "count_per_block": statistics.median(
                                statistics.mean(blk[k][1] for blk in tr) for tr in per_call)}
        # globaltimer: how long a block waits for the last block to finish phase 1, and
        # how long after that it has every slot
        phases["waiting for the last block (ns)"] = {
            "median_block_ns": statistics.median(statistics.median(
                max(b[PHASE1][1] for b in tr) - blk[PHASE1][1] for blk in tr) for tr in per_call)}
        phases["slots seen after the last publish (ns)"] = {
            "median_block_ns": statistics.median(statistics.median(
                blk[WAITED][1] - max(b[PHASE1][1] for b in tr) for blk in tr) for tr in per_call)}
    skew = statistics.median(max(blk[ENTRY][1] for blk in tr) - min(blk[ENTRY][1] for blk in tr)
                             for tr in per_call)
    span = statistics.median(max(blk[END][1] for blk in tr) - min(blk[ENTRY][1] for blk in tr)
                             for tr in per_call)
    return {"format": fmt, "mode": mode, "batch": batch, "code": p.code.name,
            "variant": p.variant, "grid": p.grid, "threads": p.threads, "calls": calls,
            "exact": exact, "phases": phases, "start_skew_ns": skew, "span_ns": span}


CODE_KEYS: dict[str, tuple] = {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for the JSON record")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args(argv)
    plain = jit_build.render
    jit_build.render = lambda source, *a, **k: traced(plain(source, *a, **k))
    gen = torch.Generator().manual_seed(bm.SEED)
    sm_clock_khz = torch.cuda.get_device_properties(0).clock_rate if hasattr(
        torch.cuda.get_device_properties(0), "clock_rate") else None
    rows = []
    t0 = time.time()
    with envs.override(JITMETA_DISABLE_DISK_CACHE=True):
        for fmt, mode, batch in CASES:
            r = run_case(fmt, mode, batch, args.calls, gen)
            rows.append(r)
            cells = "  ".join(
                f"{k} " + "/".join(f"{x:.0f}" if isinstance(x, (int, float)) else "?"
                                   for x in v.values()) for k, v in r["phases"].items())
            print(f"{fmt:5s} {mode:18s} {batch:9d} {r['variant']:7s} grid {r['grid']:4d}x"
                  f"{r['threads']:4d}  {cells}  skew {r['start_skew_ns']:.0f} ns  span "
                  f"{r['span_ns']:.0f} ns  exact={r['exact']}", flush=True)
    meta = {**records.base_meta(argv, "phase_trace.py"), **records.gpu_meta()}
    rec = {"schema": records.SCHEMA, "kind": "gpu-phases",
           "meta": {**meta, "sm_clock_khz": sm_clock_khz,
                    "seconds": round(time.time() - t0, 1),
                    "cycles": "median over calls of the median block / the slowest block"},
           "rows": rows}
    if args.out:
        path = records.write_record(
            rec, args.out, f"{meta['date']}-{records.slug(meta['device'])}-phases.json")
        print("wrote", path)
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
