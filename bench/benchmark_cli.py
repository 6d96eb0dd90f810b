"""Start-up time of the ``jitmeta-cache`` command line (every call is a new process).

Times ``jitmeta-cache --help``, ``info``, ``ls`` (on an empty temporary cache) and
``plan --arch`` in fresh processes, ``--runs`` times each after one untimed warm-up
run (so the OS file cache and the .pyc files are warm), and the interpreter floor
(``python -c pass``, same interpreter). Also records which heavy modules each command
imports (torch should never be one: it alone costs ~1.6 s on a 2-core machine).

Writes ``docs/benchmarks/<date>-cpu-cli.json`` (or ``--out DIR``), a record of kind
``cpu-cli`` that bench/make_tables.py turns into the README's start-up sentence, the
CLI table and the targets table. Milliseconds of wall time per call (min / median /
max over the runs). Run it on a quiet machine (it records the load average).

    python bench/benchmark_cli.py [--runs 11] [--out DIR] [--script PATH]

The target is a median under 300 ms per call on a 2-core machine; it is reported (the
targets table), not asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)

TARGET_MS = 300.0
CACHE = "<cache>"  # stands for the temporary cache directory in the recorded argv
# (name shown in the tables, arguments after jitmeta-cache)
COMMANDS = (
    ("--help", ["--help"]),
    ("info", ["--cache-dir", CACHE, "info"]),
    ("ls", ["--cache-dir", CACHE, "ls"]),
    ("plan --arch", ["plan", "--batch", "8192", "--varlen", "--arch", "sm_90"]),
)
HEAVY = ("torch", "numpy", "cuda.bindings.driver")

# imported-module probe: run the CLI's main() in-process and report heavy imports
_PROBE = ("import contextlib, io, sys\n"
          "from jitmeta.cache_tools.cli import main\n"
          "with contextlib.redirect_stdout(io.StringIO()):\n"
          "    code = main(sys.argv[1:])\n"
          f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or '-')\n")


def script_prefix(path: str | None) -> list[str]:
    """The command prefix: ``path``, else the console script next to this interpreter
    (the checkout's own when run with its venv), else PATH, else ``python -m``."""
    if path:
        return [path]
    found = Path(sys.executable).with_name("jitmeta-cache")
    if found.exists():
        return [str(found)]
    found = shutil.which("jitmeta-cache")
    return [found] if found else [sys.executable, "-m", "jitmeta.cache_tools.cli"]


def shown_prefix(prefix: list[str]) -> str:
    """How the record names the launcher, without machine paths."""
    if prefix[1:2] == ["-m"]:
        return "python -m jitmeta.cache_tools.cli"
    return records.portable(prefix[0])


def time_ms(cmd: list[str], runs: int, env: dict) -> list[float]:
    """Wall milliseconds of ``runs`` fresh processes of ``cmd`` (after one warm-up)."""
    def once() -> float:
        t0 = time.perf_counter()
        res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=env, text=True, timeout=600)
        dt = (time.perf_counter() - t0) * 1e3
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}: "
                               f"{res.stderr[-2000:]}")
        return dt

    once()  # warm-up: page cache, .pyc files
    return [once() for _ in range(runs)]


def heavy_imports(argv: list[str], env: dict) -> list[str]:
    res = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                         text=True, env=env, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"import probe failed for {argv}: {res.stderr[-2000:]}")
    last = res.stdout.strip().splitlines()[-1]
    return [] if last == "-" else last.split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11,
                    help="timed runs per command (default 11)")
    ap.add_argument("--out", default=None,
                    help="directory for the record (default docs/benchmarks)")
    ap.add_argument("--script", help="the jitmeta-cache executable (default: next to "
                                     "this Python, then PATH, then python -m)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be >= 1; got {args.runs}")

    prefix = script_prefix(args.script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITMETA_")}
    load_before = os.getloadavg()
    cache = tempfile.mkdtemp(prefix="jitmeta-bench-cli-")
    rows = []
    try:
        for name, shown_args in COMMANDS:
            cli_args = [cache if a == CACHE else a for a in shown_args]
            samples = time_ms(prefix + cli_args, args.runs, env)
            imports = heavy_imports(cli_args, env)
            ms = records.spread(samples)
            rows.append({"name": name, "argv": " ".join(["jitmeta-cache", *shown_args]),
                         "ms": ms, "heavy_imports": imports,
                         "meets_target": ms["median"] < TARGET_MS})
            print(f"jitmeta-cache {name:<12} median {ms['median']:7.1f} ms  "
                  f"[{ms['min']:.1f} .. {ms['max']:.1f}]  heavy imports: "
                  f"{' '.join(imports) or 'none'}", flush=True)
        floor = records.spread(time_ms([sys.executable, "-c", "pass"], args.runs, env))
        print(f"python -c pass        median {floor['median']:7.1f} ms  (interpreter floor)")
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    meta = records.base_meta(argv, "benchmark_cli.py")
    meta.update(records.cpu_meta(load_before))
    meta.update(dry_run=False, launcher=shown_prefix(prefix), runs=args.runs,
                warmup_runs=1, target_ms=TARGET_MS)
    record = {"schema": records.SCHEMA, "kind": "cpu-cli", "meta": meta,
              "floor": {"argv": "python -c pass", "ms": floor},
              "commands": rows}
    out_dir = args.out or records.REPO / "docs" / "benchmarks"
    path = records.write_record(record, out_dir, f"{meta['date']}-cpu-cli.json")
    import make_tables

    print(make_tables.cli_sentence(path.name, record))
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
