"""Convert a record of the first benchmark schema (no ``"schema"`` key) to schema 2.

Used once, on the 2026-12-02 H200 records (``bench/benchmark_metadata.py`` and
``bench/benchmark_host.py --json`` of that time), so that bench/make_tables.py reads
one schema. Every figure is copied, none is computed or typed; what the old scripts
did not measure stays absent (no touch floor, no spread over repeats, no driver).
The old per-row figures the new layout has no field for are kept under ``"v1"``.

    python bench/convert_record.py OLD.json [--host] [--commit C] [--command CMD]

The file is rewritten in place (its first version stays in git history).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402

V1_MODES = {"next_n=1": "next_n=1", "next_n=2": "next_n=2", "varlen": "varlen/runs=1..8"}


def _one(value, n: int) -> dict | None:
    """A median without spread (the first scripts kept only the median)."""
    return None if value is None else {"median": round(float(value), 3), "n": n}


def convert_gpu(old: dict, commit: str, command: str) -> dict:
    m = old["meta"]
    reps = m.get("repeats", 5)
    meta = {"date": m["date"], "command": command, "commit": commit,
            "jitmeta": m.get("jitmeta"), "python": m.get("python"), "nvrtc": m.get("nvrtc"),
            "cuda_bindings": None, "device": m["device"], "sms": m["sms"], "arch": None,
            "driver": None, "driver_cuda": None, "torch": m["torch"], "cuda": m["cuda"],
            "dry_run": False, "num_sms": m["num_sms"], "block_kv": 64, "split_kv": 256,
            "calls_per_graph": m["calls_per_graph"], "replays": m["replays"],
            "repeats": reps, "formats": ["smxx"], "modes": list(V1_MODES.values()),
            "batches": sorted({r["batch"] for r in old["rows"]}),
            "inputs": "context lengths uniform in [1, 32767] with 10% zeros; "
                      "varlen/runs=1..8: run lengths uniform in [1, 8]",
            "seed": None, "exact_checked": "one eager call (allocating its output), "
            "torch.equal against jitmeta.reference_schedule; the timed replays were not "
            "checked", "torch_ops_format": "smxx", "torch_ops_max_batch": 2**24,
            "converted_from": "schema 1"}
    rows = []
    for r in old["rows"]:
        rows.append({
            "format": "smxx", "mode": V1_MODES[r["mode"]], "batch": r["batch"],
            "next_n": 1 if r["mode"] == "varlen" else int(r["mode"][-1]),
            "varlen": r["mode"] == "varlen", "variant": r["variant"], "code": None,
            "calls_per_graph": m["calls_per_graph"], "us": _one(r["gpu_us"], reps),
            "latency_1call": {"calls_per_graph": 1, "us": _one(r["gpu_us_1call"], reps)},
            "exact": r["exact"], "touch_words": None,
            "torch_ops": {"calls_per_graph": 1, "us": _one(r["torch_ops_us"], reps),
                          "exact": r["exact"]},
            "v1": {"host_us": r["host_us"], "host_out_us": r["host_out_us"]}})
    tuning = []
    for t in old.get("tuning", []):
        configs = {k: {"us": _one(v, reps), "exact": t[k + " exact"]}
                   for k, v in t.items() if k not in ("mode", "batch", "default")
                   and not k.endswith(" exact")}
        tuning.append({"mode": V1_MODES[t["mode"]], "batch": t["batch"],
                       "default": t["default"], "configs": configs})
    cold = old.get("cold") or {}
    return {"schema": records.SCHEMA, "kind": "gpu-metadata", "meta": meta,
            "floors": {"empty": {"calls_per_graph": m["calls_per_graph"],
                                 "us": _one(m["floor_gpu_us"], reps)},
                       "empty_1call": {"calls_per_graph": 1,
                                       "us": _one(m["floor_gpu_us_1call"], reps)}},
            "touch": [], "rows": rows, "tuning": tuning,
            "cold": {"case": "batch 8192 varlen, indices t // 2, smxx, fresh process, warm "
                             "disk cache", "runs": None,
                     "ms": _one(cold.get("first_call_ms_warm_disk_cache"),
                                len(cold.get("first_call_compiles", [])))},
            "v1": {"nvrtc_ms_per_variant_on_gpu_host": cold.get("nvrtc_ms_per_variant"),
                   "floor_host_us": m.get("floor_host_us")}}


def convert_host(old: dict, meta_from: dict, commit: str, command: str) -> dict:
    cases = {"static": ("dense 128", 128, False), "static-varlen": ("varlen 4096", 4096, True),
             "dynamic": ("dense 20000", 20000, False),
             "chunked": ("varlen 100000", 100000, True)}
    loops = []
    for variant, figs in old["gpu"]["calls"].items():
        case, batch, varlen = cases[variant]
        for out, key in ((False, "eager_us"), (True, "out_us")):
            loops.append({"case": case, "batch": batch, "varlen": varlen,
                          "variant": variant.split("-")[0], "out": out, "method": "calls",
                          "calls": 200, "runs": 15, "us": _one(figs[key], 15)})
    meta = {"date": meta_from["date"], "command": command, "commit": commit,
            "python": old["python"], "torch": old["torch"], "device": old["gpu"]["device"],
            "dry_run": False, "converted_from": "schema 1",
            "methods": {"calls": "200 eager calls timed on the host; the GPU is "
                                 "synchronized before and after, outside the timing"}}
    return {"schema": records.SCHEMA, "kind": "gpu-host", "meta": meta, "loops": loops,
            "parts": old["gpu"]["parts"], "cpu": old["cpu"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--host", type=Path, default=None,
                    help="host record: convert it, taking the date from RECORD")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default="python bench/benchmark_metadata.py --out <path>")
    ap.add_argument("--host-command", default="python bench/benchmark_host.py --json <path>")
    args = ap.parse_args(argv)
    old = json.loads(args.record.read_text(encoding="utf-8"))
    if "schema" in old:
        print(f"{args.record}: already schema {old['schema']}", file=sys.stderr)
        return 1
    new = convert_gpu(old, args.commit, args.command)
    records.write_record(new, args.record.parent, args.record.name)
    if args.host is not None:
        h = json.loads(args.host.read_text(encoding="utf-8"))
        records.write_record(convert_host(h, new["meta"], args.commit, args.host_command),
                             args.host.parent, args.host.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
