"""NVRTC time per variant, and the README's deployment warm, on this (CPU) machine.

1. The variants: every cubin the README's ``jitmeta-cache ... warm`` command needs
   (the same planner call the command makes), compiled one at a time (-j 1) in one
   fresh worker process that first compiled something else (so NVRTC's library load is
   not in the figures), ``--repeats`` times each: ms per variant (min / median / max);
   then once more, untimed, for ptxas' report (registers, stack frame, spill bytes).
2. The first compile of a fresh process (NVRTC library load included): ``--runs``
   fresh processes compiling the first variant once.
3. The warm itself: the README's command as written (its ``--cache-dir`` replaced by
   an empty temporary directory each run), in a fresh process, ``--runs`` times: wall
   seconds.

Writes ``docs/benchmarks/<date>-cpu-nvrtc.json`` (or ``--out DIR``), which
bench/make_tables.py turns into the README's NVRTC line and the targets table. Run
it on a quiet machine (it records the load average before and after).

    python bench/benchmark_nvrtc.py [--repeats 3] [--runs 3] [--out DIR]

``--batch / --format / --varlen / --next-n`` replace those options of the README's
command, for a quick check on a small subset; such a record is marked ``subset`` and
bench/make_tables.py refuses it (do not commit it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)

README = records.REPO / "README.md"
SUBSET_OPTIONS = ("--batch", "--format", "--varlen", "--next-n")


def readme_warm_command(text: str) -> str:
    """The ``jitmeta-cache ... warm ...`` command of the README's deployment block
    (continuation lines joined)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("jitmeta-cache") and re.search(r"\swarm\s", line + " "):
            cmd = line.strip()
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
            return cmd
    raise ValueError("README.md has no 'jitmeta-cache ... warm ...' command line; the "
                     "deployment section must show the warm command this script measures")


def with_options(argv: list[str], replace: dict[str, str]) -> list[str]:
    """``argv`` with the value of each option in ``replace`` swapped (or appended)."""
    out, seen, i = [], set(), 0
    while i < len(argv):
        a = argv[i]
        if a in replace:
            out += [a, replace[a]]
            seen.add(a)
            i += 2
            continue
        out.append(a)
        i += 1
    for opt, value in replace.items():
        if opt not in seen:
            out += [opt, value]
    return out


def warm_argv(command: str, cache_dir: str, subset: dict[str, str]) -> list[str]:
    """The CLI arguments (after ``jitmeta-cache``) of ``command`` with its cache
    directory replaced and the ``subset`` options swapped in."""
    argv = shlex.split(command)
    if not argv or argv[0] != "jitmeta-cache":
        raise ValueError(f"warm command must start with jitmeta-cache; got {command!r}")
    argv = with_options(argv[1:], {"--cache-dir": cache_dir})
    if "warm" not in argv:
        raise ValueError(f"warm command has no 'warm' subcommand: {command!r}")
    cut = argv.index("warm") + 1
    return argv[:cut] + with_options(argv[cut:], subset)


def variants(cli_argv: list[str]):
    """[(name, CodeSpec)] of every cubin the warm command ``cli_argv`` builds: its own
    parser, then the planner call ``warm`` makes."""
    from jitmeta.cache_tools.cli import build_parser
    from jitmeta.heuristics.arch import limits_for_arch
    from jitmeta.warmup import plans_for

    args = build_parser().parse_args(cli_argv)
    if not args.arch:
        raise ValueError("the warm command must name --arch (this script runs without a "
                         "GPU)")
    schedules = records.schedules() if args.format == "all" else (args.format,)
    varlen = {"no": (False,), "yes": (True,), "both": (False, True)}[args.varlen]
    limits = [limits_for_arch(a, args.num_sms) for a in args.arch]
    found = plans_for(limits, args.batch, args.next_n, varlen, schedules, args.split_kv,
                      args.num_sms)
    return sorted(((c.name, c) for c in found), key=lambda x: x[0])


# --- the worker (a fresh process) --------------------------------------------------------

def worker(cli_argv: list[str], repeats: int, first_only: bool) -> dict:
    """Compile the variants; prints nothing else than the JSON it returns."""
    from jitmeta import envs, kernels
    from jitmeta.jit import build as jit_build
    from jitmeta.jit.compiler import compile_cubin

    todo = variants(cli_argv)
    knobs = envs.snapshot()  # the cleaned environment: the record's NVRTC flags only
    if first_only:
        name, code = todo[0]
        _, source, options = jit_build.key_for(kernels.source(code), knobs)
        t0 = time.perf_counter()
        compile_cubin(source, options)
        return {"name": name, "ms": (time.perf_counter() - t0) * 1e3}
    import touch  # a small unrelated kernel loads NVRTC first

    touch.compile_floors("sm_90")
    out = []
    for name, code in todo:
        _, source, options = jit_build.key_for(kernels.source(code), knobs)
        out.append({"name": name, "samples": [compile_cubin(source, options).seconds * 1e3
                                              for _ in range(repeats)]})
        # once more, untimed, with ptxas' report: registers, stack and spills
        verbose = replace(options, extra=(*options.extra, "--ptxas-options=-v"))
        out[-1]["ptxas"] = ptxas_usage(compile_cubin(source, verbose).log)
    return {"variants": out}


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                          r"(\d+) bytes spill loads")


def ptxas_usage(log: str) -> dict:
    """Registers per thread, stack frame and spill bytes from ptxas' ``-v`` report of a
    one-kernel program (the variants have one kernel each)."""
    regs, stack = _PTXAS_REGS.findall(log), _PTXAS_STACK.findall(log)
    if len(regs) != 1 or len(stack) != 1:
        raise ValueError(f"expected one kernel's ptxas report, found {len(regs)} register "
                         f"and {len(stack)} stack lines in:\n{log}")
    frame, stores, loads = map(int, stack[0])
    return {"registers": int(regs[0]), "stack_bytes": frame, "spill_store_bytes": stores,
            "spill_load_bytes": loads}


#: the one knob the measured processes keep: the record states it (meta
#: ``nvrtc_extra_flags``), so the compiles must use it
_KEPT_KNOBS = ("JITMETA_NVRTC_FLAGS",)


def _clean_env() -> dict:
    """The environment of the measured processes: no JITMETA_* knob of this shell but
    the NVRTC flags that the record names."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("JITMETA_") or k in _KEPT_KNOBS}


def _run_worker(cli_argv, repeats: int, first_only: bool) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(cli_argv),
           "--repeats", str(repeats)] + (["--first-only"] if first_only else [])
    with tempfile.TemporaryDirectory(prefix="jitmeta-nvrtc-") as tmp:
        env = dict(_clean_env(), JITMETA_CACHE_DIR=str(Path(tmp) / "cache"))
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"NVRTC worker failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _warm_once(cli_argv_for, jobs_note: str) -> float:
    with tempfile.TemporaryDirectory(prefix="jitmeta-warm-") as tmp:
        argv = cli_argv_for(str(Path(tmp) / "cache"))
        env = _clean_env()
        cmd = [sys.executable, "-c", "import sys; from jitmeta.cache_tools.cli import main; "
               "sys.exit(main(sys.argv[1:]))", *argv]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        seconds = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"warm ({jobs_note}) failed (exit {res.returncode}):\n"
                               f"{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="compiles per variant")
    ap.add_argument("--runs", type=int, default=3,
                    help="fresh processes for the first compile and for the warm")
    ap.add_argument("--out", default=None, help="directory for the record "
                    "(default docs/benchmarks)")
    for opt in SUBSET_OPTIONS:
        ap.add_argument(opt, dest=opt[2:].replace("-", "_"), default=None,
                        help=f"replace the README command's {opt} (a subset: not for "
                             "committing)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("repeats", "runs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1; got {getattr(args, name)}")
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.repeats, args.first_only)))
        return 0
    subset = {opt: getattr(args, opt[2:].replace("-", "_")) for opt in SUBSET_OPTIONS}
    subset = {k: v for k, v in subset.items() if v is not None}
    command = readme_warm_command(README.read_text(encoding="utf-8"))
    load_before = os.getloadavg()

    def cli_argv_for(cache_dir: str) -> list[str]:
        return warm_argv(command, cache_dir, subset)

    probe = cli_argv_for("<cache>")
    names = [n for n, _ in variants(probe)]
    print(f"{len(names)} variants; compiling each {args.repeats} times at -j 1", flush=True)
    compiled = _run_worker(probe, args.repeats, False)["variants"]
    for v in compiled:
        print(f"  {v['name']:50s} " + " ".join(f"{s:7.1f}" for s in v["samples"]) + " ms",
              flush=True)
    first = []
    for i in range(args.runs):
        first.append(_run_worker(probe, 1, True)["ms"])
        print(f"first compile in a fresh process, run {i + 1}: {first[-1]:.1f} ms", flush=True)
    warm_runs = []
    for i in range(args.runs):
        warm_runs.append(_warm_once(cli_argv_for, "README command"))
        print(f"warm, run {i + 1}: {warm_runs[-1]:.2f} s", flush=True)
    shown = "jitmeta-cache " + " ".join(shlex.quote(a) for a in probe)
    meta = records.base_meta(argv, "benchmark_nvrtc.py")
    meta.update(records.cpu_meta(load_before))
    meta.update(dry_run=False, subset=bool(subset), subset_options=subset or None,
                jobs_per_variant=1, repeats=args.repeats, runs=args.runs)
    record = {"schema": records.SCHEMA, "kind": "cpu-nvrtc", "meta": meta,
              "variants": [{"name": v["name"], "ms": records.spread(v["samples"]),
                            "ptxas": v["ptxas"]} for v in compiled],
              "first_compile_in_process_ms": records.spread(first),
              "warm": {"command": command if not subset else shown,
                       "runs": [round(s, 3) for s in warm_runs],
                       "s": records.spread(warm_runs)}}
    out_dir = args.out or records.REPO / "docs" / "benchmarks"
    path = records.write_record(record, out_dir, f"{meta['date']}-cpu-nvrtc"
                                + ("-subset" if subset else "") + ".json")
    import make_tables

    print(make_tables.nvrtc_sentence(path.name, record))
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
