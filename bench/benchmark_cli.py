"""Start-up time of the ``jitmeta-cache`` command line (every call is a new process).

Times ``jitmeta-cache --help`` and ``jitmeta-cache --cache-dir D info`` (plus
``plan --arch`` and ``ls``) in fresh processes, several runs each after one warm-up
run (so the OS file cache is warm), and records the median and spread as JSON under
``docs/benchmarks/`` (``<date>-<host>-cli.json``). Also records whether each command
imported torch (it should not: torch alone costs ~1.6 s on a 2-core machine).

    python bench/benchmark_cli.py [--runs 9] [--out docs/benchmarks] [--script PATH]

The target is < 0.3 s per call on a 2-core machine; it is reported, not asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.3

# imported-module probe: run the CLI's main() in-process and report heavy imports
_PROBE = ("import contextlib, io, sys\n"
          "from jitmeta.cache_tools.cli import main\n"
          "with contextlib.redirect_stdout(io.StringIO()):\n"
          "    code = main(sys.argv[1:])\n"
          "print(' '.join(m for m in ('torch', 'numpy', 'cuda.bindings.driver')"
          " if m in sys.modules) or '-')\n")


def _script(path: str | None) -> list[str]:
    """The command prefix: the console script next to this interpreter, else -m."""
    if path:
        return [path]
    found = Path(sys.executable).with_name("jitmeta-cache")
    if found.exists():
        return [str(found)]
    found = shutil.which("jitmeta-cache")
    return [found] if found else [sys.executable, "-m", "jitmeta.cache_tools.cli"]


def _time(cmd: list[str], runs: int, env: dict) -> dict:
    def once() -> float:
        t0 = time.perf_counter()
        res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=env, text=True)
        dt = time.perf_counter() - t0
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {res.returncode}: {res.stderr}")
        return dt

    once()  # warm-up: page cache, .pyc files
    samples = [once() for _ in range(runs)]
    return {"median_s": round(statistics.median(samples), 4),
            "min_s": round(min(samples), 4), "max_s": round(max(samples), 4),
            "stdev_s": round(statistics.stdev(samples), 4) if runs > 1 else 0.0,
            "runs": runs, "samples_s": [round(s, 4) for s in samples]}


def _heavy_imports(argv: list[str], env: dict) -> list[str]:
    res = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                         text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"import probe failed for {argv}: {res.stderr}")
    last = res.stdout.strip().splitlines()[-1]
    return [] if last == "-" else last.split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="timed runs per command (default 9)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" /
                                         "benchmarks"),
                    help="directory for the JSON record (default docs/benchmarks)")
    ap.add_argument("--script", help="the jitmeta-cache executable (default: next to "
                                     "this Python, then PATH, then python -m)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")

    prefix = _script(args.script)
    cache = tempfile.mkdtemp(prefix="jitmeta-bench-cli-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITMETA_")}
    commands = {
        "--help": ["--help"],
        "info": ["--cache-dir", cache, "info"],
        "ls": ["--cache-dir", cache, "ls"],
        "plan --arch": ["plan", "--batch", "8192", "--varlen", "--arch", "sm_90"],
    }
    results = {}
    try:
        for name, cli_args in commands.items():
            r = _time(prefix + cli_args, args.runs, env)
            r["imports"] = _heavy_imports(cli_args, env)
            r["meets_target"] = r["median_s"] < TARGET_S
            results[name] = r
            print(f"jitmeta-cache {name:<12} median {r['median_s'] * 1e3:7.1f} ms  "
                  f"[{r['min_s'] * 1e3:.1f} .. {r['max_s'] * 1e3:.1f}]  heavy imports: "
                  f"{' '.join(r['imports']) or 'none'}")
        baseline = _time([sys.executable, "-c", "pass"], args.runs, env)
        print(f"python -c pass        median {baseline['median_s'] * 1e3:7.1f} ms  "
              "(interpreter floor)")
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    from jitmeta._version import __version__

    record = {
        "date": datetime.date.today().isoformat(), "host": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "jitmeta": __version__, "command": prefix, "target_s": TARGET_S,
        "interpreter_floor": baseline, "commands": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", platform.node()) or "host"
    path = out / f"{record['date']}-{host}-cli.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
