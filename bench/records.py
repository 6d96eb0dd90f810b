"""What every benchmark record carries, and how it is written.

A record is one JSON file in ``docs/benchmarks/`` written by a script of ``bench/``;
the tables of ``README.md`` and ``docs/benchmarks/README.md`` are generated from
the records by ``bench/make_tables.py``. A record never holds an absolute path of the
machine that wrote it (:func:`portable` scrubs them, :func:`write_record` refuses one
that still has any).

Record layout (``"schema": 2``)::

    {"schema": 2, "kind": "gpu-metadata" | "gpu-host" | "cpu-nvrtc",
     "meta": {"date", "command", "commit", "python", ... per kind ...},
     ... the kind's figures ...}

A timing is ``{"min": us, "median": us, "max": us, "n": repeats}`` (:func:`spread`);
``None`` where a dry run did not time.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

SCHEMA = 2
REPO = Path(__file__).resolve().parent.parent
# absolute machine paths a committed file must not hold
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|root|home|work|Users)/")
# ... and the whole path such a root starts (up to a space, quote, bracket or colon)
MACHINE_PATH_RUN = re.compile(MACHINE_PATH.pattern + r"[^\s'\"()\[\]:;,]*")


def spread(samples) -> dict | None:
    """min / median / max of ``samples`` (rounded to 1e-3), or None for no samples."""
    samples = [float(s) for s in samples if s is not None]
    if not samples:
        return None
    return {"min": round(min(samples), 3), "median": round(statistics.median(samples), 3),
            "max": round(max(samples), 3), "n": len(samples)}


def portable(arg: str) -> str:
    """``arg`` with an absolute path (alone or as ``--opt=/path``) replaced: one under
    the repository becomes relative to it, any other becomes ``<path>``."""
    def one(path: str) -> str:
        p = Path(path)
        try:
            return str(p.resolve().relative_to(REPO)) or "."
        except (ValueError, OSError):
            return "<path>"

    if arg.startswith("/"):
        return one(arg)
    key, eq, value = arg.partition("=")
    if eq and value.startswith("/"):
        return f"{key}={one(value)}"
    return arg


def command_line(argv: list[str] | None, script: str) -> str:
    """The command that produced a record, without machine paths: ``python
    bench/<script> ARGS`` (the script named relative to the repository)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", f"bench/{script}", *(portable(a) for a in args)])


def git_commit() -> str:
    """``JITMETA_BENCH_COMMIT`` if set (a copy of the tree without ``.git``), else the
    checkout's short commit with ``-dirty`` when tracked files differ; ``unknown``."""
    given = os.environ.get("JITMETA_BENCH_COMMIT", "").strip()
    if given:
        return given
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=20)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=20)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def base_meta(argv, script: str) -> dict:
    """Fields every record's ``meta`` has."""
    from importlib.metadata import PackageNotFoundError, version

    import jitmeta
    from jitmeta import envs
    from jitmeta.jit.compiler import nvrtc_version

    try:
        bindings = version("cuda-bindings")
    except PackageNotFoundError:
        bindings = "not installed"
    return {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "command": command_line(argv, script), "commit": git_commit(),
            "jitmeta": jitmeta.__version__, "python": platform.python_version(),
            "nvrtc": nvrtc_version(), "cuda_bindings": bindings,
            "nvrtc_extra_flags": list(envs.get("JITMETA_NVRTC_FLAGS"))}


def gpu_meta() -> dict:
    """Device, driver, torch and CUDA of the current GPU (CUDA must be available)."""
    import torch
    from cuda.bindings import driver

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    err, ver = driver.cuDriverGetVersion()
    smi = "unknown"
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader", f"--id={torch.cuda.current_device()}"],
                             capture_output=True, text=True, timeout=30)
        if res.returncode == 0 and res.stdout.strip():
            smi = res.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return {"device": props.name, "sms": props.multi_processor_count,
            "arch": f"sm_{props.major}{props.minor}",
            "driver": smi, "driver_cuda": f"{ver // 1000}.{ver % 1000 // 10}" if not err
            else "unknown", "torch": torch.__version__, "cuda": torch.version.cuda}


def cpu_meta(load_before) -> dict:
    """The build machine of a CPU record: CPU model, cores, and the load average before
    (``load_before``, from ``os.getloadavg()``) and now."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"device": f"CPU: {model}", "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "unknown"


def machine_paths(text: str) -> list[str]:
    """Absolute machine paths found in ``text`` (an empty list when it is clean)."""
    return [text[max(0, m.start() - 20):m.end() + 20] for m in MACHINE_PATH.finditer(text)]


def scrub_log(text: str, root: str) -> str:
    """A device log's ``text`` fit to commit: the tree the run used (``root``, also
    where pytest writes it as ``../`` steps from its own directory) becomes ``<repo>``,
    and any other absolute machine path (the kernel cache, a lock file) ``<path>``."""
    root = str(root).rstrip("/")
    if root:
        text = re.sub(r"(?:\.\./)*/?" + re.escape(root.lstrip("/")) + r"(?![\w.-])",
                      "<repo>", text)
    return MACHINE_PATH_RUN.sub("<path>", text)


def write_record(record: dict, out_dir, name: str) -> Path:
    """Write ``record`` as ``out_dir/name`` (JSON); refuses one that holds a machine
    path (the committed records must stand on any machine)."""
    text = json.dumps(record, indent=1, sort_keys=False) + "\n"
    found = machine_paths(text)
    if found:
        raise ValueError(f"record {name} holds absolute machine paths {found[:3]}: pass "
                         "repository-relative paths, or scrub them with records.portable()")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(text, encoding="utf-8")
    return path


def schedules() -> tuple[str, ...]:
    """Every schedule format the installed jitmeta accepts, read at run time (so a
    format added to the package is benchmarked without editing the scripts)."""
    import importlib

    import jitmeta

    found = getattr(jitmeta, "SCHEDULES", None)
    if found is None:  # the planner module (its package re-exports a function "plan")
        found = importlib.import_module("jitmeta.heuristics.plan").SCHEDULES
    found = tuple(found)
    if not found or not all(isinstance(s, str) for s in found):
        raise RuntimeError(f"jitmeta's SCHEDULES must be a non-empty tuple of names; "
                           f"got {found!r}")
    return found


if __name__ == "__main__":
    # python3 bench/records.py scrub ROOT < LOG > PORTABLE_LOG (scripts/gpu_session.sh)
    if len(sys.argv) != 3 or sys.argv[1] != "scrub":
        sys.exit("usage: python3 bench/records.py scrub ROOT < LOG > PORTABLE_LOG")
    sys.stdout.write(scrub_log(sys.stdin.read(), sys.argv[2]))
