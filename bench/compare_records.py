"""The A/B table of two sets of metadata-benchmark records (the ``kernelab`` stage of
scripts/gpu_session.sh writes one record per run and side).

    python bench/compare_records.py --before B1.json B2.json --after A1.json A2.json

Each row (format, mode, batch, variant) gets the mean of its medians over each side's
records, their ratio (after / before) and the medians themselves. The records must be
``gpu-metadata`` records (read as bench/make_tables.py reads them: this schema, no dry
runs) of one device and graph shape, with every row exact (a time whose output did not
match the reference is not one to compare); a row that only one side has is listed as
such, not compared.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tables  # noqa: E402  (bench/, next to this file)

SIDES = ("before", "after")
# meta fields that must agree across every record compared
SAME = ("device", "calls_per_graph", "num_sms", "block_kv", "split_kv")


class CompareError(make_tables.RecordError):
    """Records that cannot be compared (named, with what is wrong)."""


def row_key(row: dict) -> tuple:
    return row["format"], row["mode"], row["batch"], row["variant"]


def load(paths: list[str]) -> list[tuple[str, dict]]:
    out = []
    for p in paths:
        # JSON of this schema, a real run (a partial one too: only rows are compared)
        rec = make_tables.read_record(p, partial_ok=True)
        if rec["kind"] != "gpu-metadata":
            raise CompareError(f"{p}: kind {rec['kind']!r}, not a gpu-metadata record")
        bad = [row_key(r) for r in rec["rows"] if not r.get("exact")]
        if bad:
            raise CompareError(f"{p}: rows not exact, their times do not count: {bad}")
        out.append((p, rec))
    return out


def medians(found: list[tuple[str, dict]]) -> dict[tuple, list[float]]:
    by_row: dict[tuple, list[float]] = {}
    for _, rec in found:
        for r in rec["rows"]:
            by_row.setdefault(row_key(r), []).append(r["us"]["median"])
    return by_row


def compare(before: list[tuple[str, dict]], after: list[tuple[str, dict]]) -> list[dict]:
    """One entry per row key: the medians of each side, their means and the ratio
    (None where a side lacks the row)."""
    if not before or not after:
        raise CompareError("give at least one record for each of --before and --after")
    everything = before + after
    for field in SAME:
        seen = {json.dumps(rec["meta"].get(field)) for _, rec in everything}
        if len(seen) > 1:
            raise CompareError(f"the records disagree on meta {field!r}: "
                               + ", ".join(f"{p}: {rec['meta'].get(field)!r}"
                                           for p, rec in everything))
    sides = {"before": medians(before), "after": medians(after)}
    out = []
    for key in sorted(set(sides["before"]) | set(sides["after"])):
        entry = {"format": key[0], "mode": key[1], "batch": key[2], "variant": key[3]}
        for side in SIDES:
            values = sides[side].get(key, [])
            entry[side] = values
            entry[f"{side}_mean"] = sum(values) / len(values) if values else None
        b, a = entry["before_mean"], entry["after_mean"]
        entry["ratio"] = a / b if a is not None and b else None
        out.append(entry)
    return out


def render(entries: list[dict], before: list[tuple[str, dict]],
           after: list[tuple[str, dict]]) -> str:
    def commits(found):
        return ", ".join(sorted({str(rec["meta"].get("commit")) for _, rec in found}))

    def cells(values):
        return " / ".join(f"{v:.2f}" for v in values) if values else "absent"

    rows = [[e["format"], e["mode"], make_tables.batch_name(e["batch"]), e["variant"],
             make_tables.fnum(e["before_mean"]), make_tables.fnum(e["after_mean"]),
             make_tables.fnum(e["ratio"], 3), cells(e["before"]), cells(e["after"])]
            for e in entries]
    device = before[0][1]["meta"].get("device")
    head = (f"{device}: before {commits(before)} ({len(before)} records), after "
            f"{commits(after)} ({len(after)} records); us per call, means of the "
            "records' medians\n\n")
    return head + make_tables.table(
        ["format", "mode", "batch", "variant", "before", "after", "after / before",
         "before medians", "after medians"], rows, "llllrrrll")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", nargs="+", required=True, metavar="RECORD")
    ap.add_argument("--after", nargs="+", required=True, metavar="RECORD")
    args = ap.parse_args(argv)
    try:
        before, after = load(args.before), load(args.after)
        print(render(compare(before, after), before, after))
    except make_tables.RecordError as e:  # a CompareError too
        print(f"compare_records: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
