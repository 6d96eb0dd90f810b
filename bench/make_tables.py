"""Regenerate the benchmark tables of README.md and docs/benchmarks/README.md from
the committed records (docs/benchmarks/*.json), so no figure is typed by hand.

A file's generated parts sit between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->``; everything else in the file is left as it is.

    python bench/make_tables.py           # rewrite the regions
    python bench/make_tables.py --check   # exit 1 if a region differs from the records

The current record of each kind (``gpu-metadata``, ``gpu-host``, ``cpu-nvrtc``,
``cpu-cli``) is
the newest by file name (they start with the date); docs/benchmarks should hold one
of each (history lives in git). Dry-run and partial records are refused.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)

RECORDS_DIR = Path("docs") / "benchmarks"
FILES = (Path("README.md"), Path("docs") / "benchmarks" / "README.md")
KINDS = ("gpu-metadata", "gpu-host", "cpu-nvrtc", "cpu-cli")
REGION = re.compile(r"(<!-- generated:([\w-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)
OPEN = re.compile(r"<!-- (/?)generated:([\w-]+) -->")


class RecordError(ValueError):
    """A record the generator cannot use (named, with what is wrong and the fix)."""


# --- records ------------------------------------------------------------------------------

def read_record(path, partial_ok: bool = False) -> dict:
    """One record file, refused with a RecordError (naming the file) unless it is JSON
    of this schema and a known kind, from a real run of the whole command (with
    ``partial_ok``, also a metadata run stopped after its timed rows)."""
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path.name}: not JSON ({exc})") from None
    if not isinstance(rec, dict) or rec.get("schema") != records.SCHEMA:
        raise RecordError(f"{path.name}: schema {rec.get('schema') if isinstance(rec, dict) else None!r}, "
                          f"expected {records.SCHEMA} (convert old records with "
                          "bench/convert_record.py)")
    if rec.get("kind") not in KINDS:
        raise RecordError(f"{path.name}: kind {rec.get('kind')!r} is not one of {KINDS}")
    if rec.get("meta", {}).get("dry_run"):
        raise RecordError(f"{path.name} is a dry-run record (a dry run has no timings): "
                          "delete it; only records of real runs are kept")
    if rec.get("meta", {}).get("partial") and not partial_ok:
        raise RecordError(f"{path.name} is a partial record ({rec['meta']['partial']}): "
                          "the tables need a whole run; keep it in experiments/ and "
                          "run the benchmark again")
    if rec.get("meta", {}).get("subset"):
        raise RecordError(f"{path.name} measured a subset of the warm command "
                          f"({rec['meta'].get('subset_options')}): delete it; run "
                          "bench/benchmark_nvrtc.py without subset options")
    return rec


def load_records(directory) -> dict[str, list[tuple[str, dict]]]:
    """{kind: [(file name, record), ...] sorted by name} of the records in ``directory``."""
    found: dict[str, list[tuple[str, dict]]] = {k: [] for k in KINDS}
    for path in sorted(Path(directory).glob("*.json")):
        rec = read_record(path)
        found[rec["kind"]].append((path.name, rec))
    return found


def current(found: dict, kind: str) -> tuple[str, dict] | tuple[None, None]:
    return found[kind][-1] if found.get(kind) else (None, None)


# --- formatting ---------------------------------------------------------------------------

def med(t) -> float | None:
    return None if not t else t.get("median")


def fnum(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def fspread(t, digits: int = 2) -> str:
    """``median (min-max)``, or the median alone where the record has no spread."""
    if not t:
        return "-"
    if t.get("min") is None or t.get("max") is None:
        return fnum(t["median"], digits)
    return f"{t['median']:.{digits}f} ({t['min']:.{digits}f}-{t['max']:.{digits}f})"


def frange(values, digits: int = 1) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else \
        f"{lo:.{digits}f}-{hi:.{digits}f}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" * len(header)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def batch_name(b: int) -> str:
    return f"2^{b.bit_length() - 1}" if b >= 2**20 and b & (b - 1) == 0 else str(b)


# --- figures derived from a gpu-metadata record -----------------------------------------

def touch_us(rec: dict, row: dict) -> float | None:
    words = row.get("touch_words")
    for t in rec.get("touch") or []:
        if words is not None and t["words"] == words and t.get("best"):
            return med(t["best"]["us"])
    return None


def ours_at(row: dict, calls: int):
    """Our timing of ``row`` with ``calls`` calls per graph, or None (like with like)."""
    if row.get("calls_per_graph") == calls:
        return row.get("us")
    lat = row.get("latency_1call")
    if lat and lat.get("calls_per_graph") == calls:
        return lat.get("us")
    return None


def ratio(a, b) -> float | None:
    return None if a is None or not b else a / b


def torch_ops_ratio(row: dict) -> tuple[float | None, int | None]:
    ops = row.get("torch_ops")
    if not ops or not ops.get("us"):
        return None, None
    mine = ours_at(row, ops["calls_per_graph"])
    return ratio(med(mine), med(ops["us"])), ops["calls_per_graph"]


def gpu_table(rec: dict) -> str:
    """Every row of a gpu-metadata record."""
    empty = med(rec["floors"]["empty"]["us"])
    rows = []
    for r in rec["rows"]:
        t = med(r["us"])
        x_ops, ops_calls = torch_ops_ratio(r)
        ops = r.get("torch_ops") or {}
        rows.append([r["format"], r["mode"], batch_name(r["batch"]), r["variant"],
                     fspread(r["us"]), fnum(touch_us(rec, r)), fnum(ratio(t, touch_us(rec, r))),
                     fnum(ratio(t, empty)),
                     fspread(ops.get("us")) + (f" [{ops_calls}/graph]" if ops_calls and
                                               ops_calls != r["calls_per_graph"] else ""),
                     fnum(x_ops, 3), {True: "yes", False: "NO", None: "-"}[r["exact"]]])
    return table(["format", "mode", "batch", "variant", "us (min-max)", "touch us",
                  "x touch", "x empty", "PyTorch-ops us", "x PyTorch-ops", "exact"],
                 rows, "lllllrrrrrl")


# --- regions ------------------------------------------------------------------------------

def _source(name: str | None, rec: dict | None) -> str:
    if rec is None:
        return ""
    m = rec["meta"]
    return f"record `docs/benchmarks/{name}`, commit {m.get('commit') or 'unknown'}, {m['date']}"


def region_performance(found: dict) -> str:
    name, rec = current(found, "gpu-metadata")
    lines = []
    if rec is None:
        lines.append("No GPU record yet.")
    else:
        m = rec["meta"]
        empty = med(rec["floors"]["empty"]["us"])
        has_touch = any(touch_us(rec, r) is not None for r in rec["rows"])
        lines += [f"{m['device']} ({m['sms']} SMs; {_source(name, rec)}). GPU microseconds "
                  f"per call (median), CUDA-graph replay with {m['calls_per_graph']} calls "
                  f"per graph, num_sms={m['num_sms']}; {m['inputs']}."
                  + (" In brackets: the ratio to the touch floor (a kernel that only reads "
                     "the same input bytes once and writes the output, at its best launch "
                     "shape, same run)." if has_touch else
                     " This record has no touch floor (it predates it)."), ""]
        cols = []
        for fmt in m["formats"]:
            dense = "next_n=1"
            var = next((x for x in ("varlen/runs=2", *m["modes"]) if x.startswith("varlen")
                        and x in m["modes"]), None)
            cols += [(fmt, dense)] + ([(fmt, var)] if var else [])
        by = {(r["format"], r["mode"], r["batch"]): r for r in rec["rows"]}
        rows = []
        for b in m["batches"]:
            cells = [batch_name(b)]
            for key in cols:
                r = by.get((*key, b))
                if r is None:
                    cells.append("-")
                    continue
                x = ratio(med(r["us"]), touch_us(rec, r))
                cells.append(fnum(med(r["us"])) + (f" ({x:.1f}x)" if x is not None else ""))
            rows.append(cells)
        lines.append(table(["batch"] + [f"{f} {md}" for f, md in cols], rows,
                           "r" * (1 + len(cols))))
        lines += ["", f"* Empty kernel, same graph shape: {fnum(empty)} us per call."]
    host_name, host = current(found, "gpu-host")
    if host is not None:
        lines.append("* " + host_sentence(host_name, host))
    if rec is not None and rec.get("cold") and rec["cold"].get("ms"):
        c = rec["cold"]
        lines.append(f"* First call of a fresh process whose disk cache holds the cubin "
                     f"({c['case']}): {fspread(c['ms'])} ms over {c['ms'].get('n')} runs."
                     + first_call_parts(c.get("parts")))
    nv_name, nv = current(found, "cpu-nvrtc")
    lines.append("* " + nvrtc_sentence(nv_name, nv))
    lines += ["", "Full tables, the method and the targets: `docs/benchmarks/README.md`."]
    return "\n".join(lines)


# the steps of a first call in the metadata record (bench/benchmark_metadata.PART_NAMES)
FIRST_CALL_PARTS = {"plan_and_cubin": "plan and cubin from disk",
                    "module_load": "module load", "prepare": "the call prepared",
                    "call": "the public call until it returns",
                    "sync": "the wait for its kernel", "second_call": "a second call"}


def first_call_parts(parts: dict | None) -> str:
    """The first call's steps, when the record has them (medians, ms)."""
    if not parts or any(not parts.get(n) for n in FIRST_CALL_PARTS):
        return ""
    said = ", ".join(f"{what} {fnum(med(parts[n]))}" for n, what in FIRST_CALL_PARTS.items())
    return f" Its steps in other fresh processes (median ms): {said}."


def host_sentence(name: str, rec: dict) -> str:
    parts = []
    for method, what in (("calls", "timing the calls only"),
                         ("calls+sync", "a loop of calls then one synchronize")):
        loops = [x for x in rec["loops"] if x["method"] == method]
        if not loops:
            continue
        alloc = frange(med(x["us"]) for x in loops if not x["out"])
        out = frange(med(x["us"]) for x in loops if x["out"])
        calls = sorted({x["calls"] for x in loops})
        parts.append(f"{alloc} us with allocation, {out} us with `out=` ({what}, "
                     f"{'/'.join(map(str, calls))} calls per loop)")
    cases = sorted({x["case"] for x in rec["loops"]})
    return (f"Host microseconds per eager call on {rec['meta']['device']} "
            f"({_source(name, rec)}), medians, range over {len(cases)} cases: "
            + "; ".join(parts) + ".")


def nvrtc_sentence(name: str | None, rec: dict | None) -> str:
    if rec is None:
        return ("NVRTC time per variant and the deployment warm: no record yet "
                "(`python bench/benchmark_nvrtc.py` on the CPU build machine writes it).")
    meds = [med(v["ms"]) for v in rec["variants"]]
    return (f"NVRTC on a {rec['meta']['cpus']}-core CPU ({_source(name, rec)}): "
            f"{fnum(_median(meds), 0)} ms median per variant over {len(meds)} variants "
            f"(-j 1, per variant {frange(meds, 0)} ms); the deployment warm command "
            f"{fspread(rec['warm']['s'], 1)} s.")


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def region_records(found: dict) -> str:
    rows = []
    for kind in KINDS:
        for name, rec in found[kind]:
            m = rec["meta"]
            rows.append([f"`{name}`", kind, m.get("device") or "-", m["date"],
                         m.get("commit") or "-", f"`{m['command']}`",
                         m.get("converted_from", "-")])
    return table(["record", "kind", "machine", "date", "commit", "command", "converted"],
                 rows)


def region_gpu_table(found: dict) -> str:
    name, rec = current(found, "gpu-metadata")
    if rec is None:
        return "No GPU record yet."
    m = rec["meta"]
    lines = [f"{_source(name, rec)}; {m['device']}, driver {m.get('driver') or 'not recorded'}, "
             f"torch {m['torch']} (CUDA {m['cuda']}), NVRTC {m['nvrtc']}. "
             f"{m['calls_per_graph']} calls per graph, {m['replays']} replays, "
             f"{m['repeats']} repeats (median, min-max of the repeats). {m['inputs']}. "
             f"Exactness: {m['exact_checked']}.",
             f"Empty kernel: {fspread(rec['floors']['empty']['us'])} us per call"
             + "".join(f"; {k.replace('_', ' ')}: {fspread(v['us'])} us "
                       f"({v['calls_per_graph']} call per graph)"
                       for k, v in rec["floors"].items() if k != "empty") + ".",
             "x PyTorch-ops compares timings with the same calls per graph.", "",
             gpu_table(rec)]
    return "\n".join(lines)


def region_touch(found: dict) -> str:
    name, rec = current(found, "gpu-metadata")
    if rec is None or not rec.get("touch"):
        return "The current record has no touch-floor measurement."
    rows = []
    for t in rec["touch"]:
        best = t.get("best") or {}
        rows.append([str(t["words"][0]), str(t["words"][1]), fspread(best.get("us")),
                     f"{best.get('threads', '-')} x {best.get('grid', '-')}",
                     ", ".join(f"{x['threads']}x{x['grid']}: {fnum(med(x['us']))}"
                               for x in t["tried"])])
    return table(["context_lens words", "indices words", "best us", "threads x grid",
                  "tried (us)"], rows, "rrrll")


def region_tuning(found: dict) -> str:
    name, rec = current(found, "gpu-metadata")
    if rec is None or not rec.get("tuning"):
        return "The current record has no forced-variant table."
    names = []
    for r in rec["tuning"]:
        names += [n for n in r["configs"] if n not in names]
    rows = []
    for r in rec["tuning"]:
        cells = [fnum(med(r["configs"][n]["us"])) if n in r["configs"] else "-"
                 for n in names]
        exact = all(c["exact"] for c in r["configs"].values())
        rows.append([r.get("format", "smxx"), r["mode"], batch_name(r["batch"]), r["default"],
                     *cells, "yes" if exact else "NO"])
    return table(["format", "mode", "batch", "default plan", *names, "exact"], rows,
                 "llrl" + "r" * len(names) + "l")


def region_host(found: dict) -> str:
    name, rec = current(found, "gpu-host")
    if rec is None:
        return "No host record yet."
    rows = [[x["case"], x["variant"], "out=" if x["out"] else "allocates", x["method"],
             str(x["calls"]), str(x["runs"]), fspread(x["us"])] for x in rec["loops"]]
    return "\n".join([host_sentence(name, rec), "",
                      table(["case", "variant", "output", "method", "calls per loop",
                             "runs", "us per call (min-max)"], rows, "lllllrr")])


def region_nvrtc(found: dict) -> str:
    name, rec = current(found, "cpu-nvrtc")
    if rec is None:
        return nvrtc_sentence(None, None)
    m = rec["meta"]
    rows = [[f"`{v['name']}`", fspread(v["ms"], 0), *ptxas_cells(v.get("ptxas"))]
            for v in rec["variants"]]
    first = rec.get("first_compile_in_process_ms")
    return "\n".join([
        nvrtc_sentence(name, rec) + spill_sentence(rec),
        f"Warm command (as in README.md, fresh process, empty cache each run): "
        f"`{rec['warm']['command']}`; runs: {', '.join(fnum(s, 2) for s in rec['warm']['runs'])} s."
        + (f" First compile in a fresh process (NVRTC library load included): "
           f"{fspread(first, 0)} ms." if first else ""),
        f"NVRTC {m['nvrtc']}, cuda-bindings {m['cuda_bindings']}, Python {m['python']}.", "",
        table(["variant", "ms (min-max)", "registers", "stack bytes",
               "spill stores / loads (bytes)"], rows, "lrrrr")])


def ptxas_cells(usage: dict | None) -> list[str]:
    """A variant's ptxas figures (registers per thread, stack frame, spill bytes)."""
    if not usage:
        return ["-", "-", "-"]
    return [str(usage["registers"]), str(usage["stack_bytes"]),
            f"{usage['spill_store_bytes']} / {usage['spill_load_bytes']}"]


def spill_sentence(rec: dict) -> str:
    """Which variants spill registers to local memory, by ptxas' report in the record."""
    usages = [(v["name"], v.get("ptxas")) for v in rec["variants"]]
    if any(u is None for _, u in usages):
        return ""
    spills = [f"`{n}` ({u['registers']} registers, {u['spill_store_bytes']} / "
              f"{u['spill_load_bytes']} bytes spill stores / loads)"
              for n, u in usages if u["spill_store_bytes"] or u["spill_load_bytes"]]
    if not spills:
        return " ptxas reports no register spills in any variant."
    return f" ptxas reports register spills in {len(spills)} variant(s): {', '.join(spills)}."


def cli_sentence(name: str | None, rec: dict | None) -> str:
    """One line: the median start-up of each ``jitmeta-cache`` command of the record."""
    if rec is None:
        return ("Start-up of `jitmeta-cache` in a fresh process: no record yet "
                "(`python bench/benchmark_cli.py` writes it).")
    cmds = ", ".join(f"`{c['name']}` {fnum(med(c['ms']), 0)} ms" for c in rec["commands"])
    return (f"Start-up of a `jitmeta-cache` call in a fresh process on a "
            f"{rec['meta']['cpus']}-core CPU, medians ({_source(name, rec)}): {cmds}; "
            f"the Python interpreter alone takes {fnum(med(rec['floor']['ms']), 0)} ms.")


def region_cli_startup(found: dict) -> str:
    return cli_sentence(*current(found, "cpu-cli"))


def region_cli(found: dict) -> str:
    name, rec = current(found, "cpu-cli")
    if rec is None:
        return cli_sentence(None, None)
    m = rec["meta"]
    rows = [[f"`{c['argv']}`", fspread(c["ms"], 1), ", ".join(c["heavy_imports"]) or "none",
             "yes" if c["meets_target"] else "NO"] for c in rec["commands"]]
    rows.append([f"`{rec['floor']['argv']}` (interpreter floor)",
                 fspread(rec["floor"]["ms"], 1), "-", "-"])
    return "\n".join([
        cli_sentence(name, rec),
        f"{m['device']}, Python {m['python']}, jitmeta {m['jitmeta']}; launcher "
        f"`{m['launcher']}`; {m['runs']} timed runs per command after "
        f"{m['warmup_runs']} warm-up run; `<cache>` is an empty temporary cache directory. "
        f"Load average before / after: {m['load_average_before'][0]} / "
        f"{m['load_average_after'][0]}.", "",
        table(["command", "ms (min-max)", "heavy modules imported",
               f"median < {fnum(m['target_ms'], 0)} ms"], rows, "lrll")])


# target label, figure, limit, unit
def _rows_where(rec, pred):
    return [r for r in rec["rows"] if pred(r)] if rec else []


def _worst(rows, value):
    vals = [(value(r), r) for r in rows]
    vals = [(v, r) for v, r in vals if v is not None]
    return max(vals, key=lambda x: x[0]) if vals else (None, None)


def touch_ratio(rec: dict, row: dict) -> float | None:
    return ratio(med(row["us"]), touch_us(rec, row))


def region_targets(found: dict) -> str:
    _, gpu = current(found, "gpu-metadata")
    _, host = current(found, "gpu-host")
    _, nv = current(found, "cpu-nvrtc")
    _, cli = current(found, "cpu-cli")
    out = []

    def case(r):
        return f"{r['mode']} {batch_name(r['batch'])}"

    def where(r, extra=""):
        return "" if r is None else f" ({r['format']} {case(r)}{extra})"

    def verdict(v, limit):
        return "no record" if v is None else ("met" if v <= limit else "missed")

    empty = med(gpu["floors"]["empty"]["us"]) if gpu else None
    v, r = _worst(_rows_where(gpu, lambda r: r["batch"] <= 4096),
                  lambda r: ratio(med(r["us"]), empty))
    out.append(["batch <= 4096: <= 1.5x the empty-kernel floor", f"{fnum(v)}x{where(r)}",
                verdict(v, 1.5)])
    per_batch = [("batch 8192 varlen <= 4 us", lambda r: r["batch"] == 8192 and r["varlen"], 4),
                 ("batch 16384 / 32768 dense <= 4 us",
                  lambda r: r["batch"] in (16384, 32768) and not r["varlen"], 4)]
    for b, limit in ((65536, 6), (2**20, 10), (2**24, 100)):
        for varlen in (False, True):
            per_batch.append((f"batch {batch_name(b)} {'varlen' if varlen else 'dense'} "
                              f"<= {limit} us",
                              lambda r, b=b, v=varlen: r["batch"] == b and r["varlen"] == v,
                              limit))
    per_batch += [
        ("batch 8192 varlen <= 3 us", lambda r: r["batch"] == 8192 and r["varlen"], 3),
        ("batch 16384 to 65536, any mode <= 3.5 us",
         lambda r: 16384 <= r["batch"] <= 65536, 3.5),
        ("batch 2^20 varlen <= 7 us", lambda r: r["batch"] == 2**20 and r["varlen"], 7),
        ("batch 2^24 varlen <= 55 us", lambda r: r["batch"] == 2**24 and r["varlen"], 55),
        ("batch 2^24 dense <= 30 us", lambda r: r["batch"] == 2**24 and not r["varlen"], 30)]
    for label, pred, limit in per_batch:
        rows = _rows_where(gpu, pred)
        v, r = _worst(rows, lambda r: med(r["us"]))
        t = touch_us(gpu, r) if r is not None else None  # reading its input alone
        text = f"{fnum(v)} us{where(r, '' if t is None else f'; touch floor {fnum(t)} us')}"
        ft, fr = _worst(rows, lambda r: touch_us(gpu, r))
        if ft is not None and ft > limit:  # no kernel reading the input can meet it
            text += f"; the limit is below the touch floor of {case(fr)} ({fnum(ft)} us)"
        out.append([label, text, verdict(v, limit)])
    # every row within 1.5x of the touch floor (same input bytes, same graph shape)
    v, r = _worst(_rows_where(gpu, lambda r: True), lambda r: touch_ratio(gpu, r))
    out.append(["every batch: <= 1.5x the touch floor", f"{fnum(v)}x{where(r)}",
                verdict(v, 1.5)])
    # "sm100" against "smxx" of the same mode and batch
    by_key = {(r["format"], r["mode"], r["batch"]): r for r in (gpu or {}).get("rows", [])}
    pairs = [(r, by_key.get(("smxx", r["mode"], r["batch"]))) for r in by_key.values()
             if r["format"] == "sm100"]
    v, r = _worst([(a, b) for a, b in pairs if b is not None],
                  lambda ab: ratio(med(ab[0]["us"]), med(ab[1]["us"])))
    out.append(['"sm100" <= 1.2x "smxx" (same mode and batch)',
                f"{fnum(v)}x{where(r[0] if r else None)}", verdict(v, 1.2)])
    for label, with_out, limit in [("host <= 15 us per eager call incl. output", False, 15),
                                   ("host <= 10 us per eager call with `out=`", True, 10),
                                   ("host <= 12 us per eager call incl. output", False, 12),
                                   ("host <= 8 us per eager call with `out=`", True, 8)]:
        loops = [x for x in (host or {}).get("loops", []) if x["out"] == with_out]
        v, x = _worst(loops, lambda x: med(x["us"]))
        out.append([label, "-" if v is None else
                    f"{fnum(v)} us (worst median: {x['case']}, {x['method']})",
                    verdict(v, limit)])
    if nv is not None:
        m = _median([med(x["ms"]) for x in nv["variants"]])
        w = med(nv["warm"]["s"])
    else:
        m = w = None
    out.append([f"NVRTC <= 300 ms median per variant, -j 1, "
                f"{nv['meta']['cpus'] if nv else 2}-core CPU", f"{fnum(m, 0)} ms",
                verdict(m, 300)])
    out.append(["README's deployment warm command <= 10 s", f"{fnum(w, 1)} s", verdict(w, 10)])
    c = gpu.get("cold") if gpu else None
    v = med(c["ms"]) if c and c.get("ms") else None
    out.append(["first call, fresh process, warm disk cache <= 5 ms", f"{fnum(v)} ms",
                verdict(v, 5)])
    v, c = _worst((cli or {}).get("commands", []), lambda c: med(c["ms"]))
    limit = cli["meta"]["target_ms"] if cli else 300
    out.append([f"`jitmeta-cache` call, fresh process, < {fnum(limit, 0)} ms median, "
                f"{cli['meta']['cpus'] if cli else 2}-core CPU",
                "- ms" if v is None else f"{fnum(v, 0)} ms (`{c['name']}`)",
                "no record" if v is None else ("met" if v < limit else "missed")])
    return table(["target", "measured (worst case)", "verdict"], out)


REGIONS = {"performance": region_performance, "records": region_records,
           "gpu-table": region_gpu_table, "touch": region_touch, "tuning": region_tuning,
           "host": region_host, "nvrtc": region_nvrtc, "targets": region_targets,
           "cli": region_cli, "cli-startup": region_cli_startup}


# --- files --------------------------------------------------------------------------------

def render_file(text: str, found: dict, name: str = "file") -> str:
    """``text`` with every generated region replaced by its content from ``found``."""
    opened = OPEN.findall(text)
    names = [n for close, n in opened if not close]
    for n in names:
        if n not in REGIONS:
            raise RecordError(f"{name}: unknown generated region {n!r}; known: "
                              f"{', '.join(REGIONS)}")
    if len(REGION.findall(text)) != len(names) or len(opened) != 2 * len(names):
        raise RecordError(f"{name}: every <!-- generated:NAME --> needs its own "
                          "<!-- /generated:NAME --> (regions cannot nest)")

    def sub(m):
        body = REGIONS[m.group(2)](found).rstrip("\n") + "\n"
        bad = records.machine_paths(body)
        if bad:
            raise RecordError(f"region {m.group(2)} of {name} would hold machine paths "
                              f"{bad[:3]}; scrub the record")
        return m.group(1) + body + m.group(4)
    return REGION.sub(sub, text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if a region differs from the records")
    ap.add_argument("--root", default=str(records.REPO),
                    help="repository root holding README.md and docs/benchmarks")
    args = ap.parse_args(argv)
    root = Path(args.root)
    found = load_records(root / RECORDS_DIR)
    stale = []
    for rel in FILES:
        path = root / rel
        old = path.read_text(encoding="utf-8")
        new = render_file(old, found, str(rel))
        if new == old:
            continue
        if args.check:
            stale.append(str(rel))
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), str(rel), f"{rel} (generated)"))
        else:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {rel}")
    if stale:
        print(f"generated regions differ from the records in {', '.join(stale)}: run "
              "python bench/make_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
