"""Where the local-memory (spill) accesses of each cubin sit: in loops or outside them.

ptxas' report (``bench/benchmark_nvrtc.py`` records it) says how many bytes a kernel
spills, not where the spill loads and stores run. This script compiles every cubin of
the README's ``jitmeta-cache ... warm`` command (or a subset), disassembles it with
``cuobjdump -sass`` and lists its loops: every backward branch of the main code closes
one, from its target to the branch. The main code ends where the first divergence
fallback (the lowest ``BRA.DIV`` target) begins: ptxas places those blocks after it,
and their jumps back into the main code are not loops. Per
loop it counts instructions, local loads and stores (``LDL``/``STL``), global loads,
16-byte global loads and shared loads; per cubin, the local accesses in all and those
inside each innermost loop with 16-byte global loads (the register-slab loops: an
iteration per slab, the streaming of the largest batches). Loops nest, so an access
counts in every loop around it.

Needs ``cuobjdump`` on the PATH or in ``$CUOBJDUMP`` (CUDA toolkit, or
``pip install nvidia-cuda-cuobjdump``); no GPU.

    python bench/sass_loops.py [--out DIR] [--against RECORD] [--format F] [--varlen V]
                               [--batch B] [--next-n N]

Each variant's row also holds ``code_sha256``, a digest of its machine code alone (the
``.text`` sections). ``--against RECORD`` (another tree's record) names the variants
whose machine code differs from that record's: a kernel change meant for some
variants can be checked to leave the others' code as it was.

Writes ``<date>-cpu-sass-loops-<commit>.json`` to ``--out`` (default
``docs/benchmarks/experiments``): an experiment record, not read by the table
generator.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # noqa: E402  (bench/, next to this file)
from benchmark_nvrtc import (README, SUBSET_OPTIONS, readme_warm_command,  # noqa: E402
                             variants, warm_argv)

# "        /*0570*/                   LDL R49, [R1+0x30] ;   /* 0x... */"
_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA((?:\.\w+)*)\s+(?:\w+,\s*)?0x([0-9a-f]+)")
_LOCAL = re.compile(r"\b(?:LDL|STL)\b")
# what a loop's record counts, by the instructions that match
_COUNTED = {"local": _LOCAL, "global_loads": re.compile(r"\bLDG\b"),
            "global_loads_16B": re.compile(r"\bLDG\.E\.(?:128|ENL2)"),
            "shared_loads": re.compile(r"\bLDS\b")}


def parse_sass(text: str) -> list[tuple[int, str]]:
    """[(address, instruction)] of a ``cuobjdump -sass`` listing of one kernel."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def main_code_end(ins: list[tuple[int, str]]) -> int:
    """The address where the divergence fallbacks begin (the lowest ``BRA.DIV``
    target), or past the last instruction when there is none."""
    targets = [int(m.group(2), 16) for _, t in ins
               if (m := _BRANCH.search(t)) and ".DIV" in m.group(1)]
    return min(targets, default=ins[-1][0] + 1 if ins else 0)


def loops(ins: list[tuple[int, str]]) -> list[dict]:
    """The loops of ``ins``: one per backward branch of the main code."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    end = main_code_end(ins)
    found = []
    for i, (addr, text) in enumerate(ins):
        m = _BRANCH.search(text)
        if not m or ".DIV" in m.group(1) or addr >= end:
            continue
        target = int(m.group(2), 16)
        if target > addr or target not in index:
            continue
        body = [t for _, t in ins[index[target]:i + 1]]
        found.append({"start": f"{target:#07x}", "end": f"{addr:#07x}",
                      "instructions": len(body),
                      **{name: sum(1 for t in body if pattern.search(t))
                         for name, pattern in _COUNTED.items()}})
    return sorted(found, key=lambda x: int(x["start"], 16))


def innermost_16b(found: list[dict]) -> list[dict]:
    """The loops with 16-byte global loads that hold no other such loop: the loops
    that stream the register slabs, one iteration per slab."""
    wide = [((int(lp["start"], 16), int(lp["end"], 16)), lp) for lp in found
            if lp["global_loads_16B"]]
    # (a loop is one backward branch: two loops never share both ends)
    return [lp for (a, b), lp in wide
            if not any(a <= c and d <= b and (c, d) != (a, b) for (c, d), _ in wide)]


def census(ins: list[tuple[int, str]]) -> dict:
    """A cubin's instruction and local-access counts, and its loops."""
    found = loops(ins)
    return {"instructions": len(ins),
            "local": sum(1 for _, t in ins if _LOCAL.search(t)),
            "local_in_slab_loops": [lp["local"] for lp in innermost_16b(found)],
            "loops": found}


def compare_code(rows: list[dict], other: list[dict]) -> dict[str, list[str]]:
    """Variant names by whether their ``code_sha256`` matches ``other``'s rows: "same",
    "differs", "only_here", "only_there" (a row without a digest differs)."""
    theirs = {r["name"]: r.get("code_sha256") for r in other}
    mine = {r["name"]: r.get("code_sha256") for r in rows}
    out = {"same": [], "differs": [], "only_here": [],
           "only_there": sorted(set(theirs) - set(mine))}
    for name in sorted(mine):
        if name not in theirs:
            out["only_here"].append(name)
        elif mine[name] is not None and mine[name] == theirs[name]:
            out["same"].append(name)
        else:
            out["differs"].append(name)
    return out


def cuobjdump() -> str:
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        raise SystemExit("sass_loops.py needs cuobjdump: put it on the PATH or name it in "
                         "$CUOBJDUMP (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)")
    return tool


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for the record (default "
                    "docs/benchmarks/experiments)")
    ap.add_argument("--against", default=None, metavar="RECORD",
                    help="another tree's record: name the variants whose code differs")
    for opt in SUBSET_OPTIONS:
        ap.add_argument(opt, dest=opt[2:].replace("-", "_"), default=None,
                        help=f"replace the README command's {opt}")
    args = ap.parse_args(argv)
    tool = cuobjdump()
    from jitmeta import kernels
    from jitmeta.envs import Knobs
    from jitmeta.jit import build as jit_build
    from jitmeta.jit.compiler import compile_cubin
    from jitmeta.jit.cubin_info import code_digest

    subset = {opt: getattr(args, opt[2:].replace("-", "_")) for opt in SUBSET_OPTIONS}
    subset = {k: v for k, v in subset.items() if v is not None}
    command = readme_warm_command(README.read_text(encoding="utf-8"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in variants(warm_argv(command, "<cache>", subset)):
            key, source, options = jit_build.key_for(kernels.source(code), Knobs())
            cubin = Path(tmp) / f"{name}.cubin"
            cubin.write_bytes(compile_cubin(source, options).cubin)
            sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True,
                                  text=True, timeout=120, check=True).stdout
            # key: the cache key of the source and options, which names the kernel
            # version whatever the commit says (an editable install of another checkout
            # serves that checkout's templates)
            row = {"name": name, "key": key, "code_sha256": code_digest(cubin.read_bytes()),
                   **census(parse_sass(sass))}
            rows.append(row)
            print(f"{name:50s} {row['instructions']:6d} instructions, {row['local']:4d} "
                  f"local ({row['local_in_slab_loops'] or '-'} in the slab loops), "
                  f"{len(row['loops'])} loops", flush=True)
    meta = records.base_meta(argv, "sass_loops.py")
    version = subprocess.run([tool, "--version"], capture_output=True, text=True,
                             timeout=60).stdout.strip().splitlines()
    meta.update(cuobjdump=version[-1] if version else "unknown", subset=bool(subset),
                subset_options=subset or None)
    if args.against:
        other = json.loads(Path(args.against).read_text(encoding="utf-8"))
        meta["against"] = {"record": Path(args.against).name,
                           "commit": other.get("meta", {}).get("commit"),
                           **compare_code(rows, other.get("variants", []))}
        a = meta["against"]
        print(f"against {a['record']}: {len(a['same'])} variants with the same machine "
              f"code; differs: {', '.join(a['differs']) or 'none'}; only here: "
              f"{', '.join(a['only_here']) or 'none'}; only there: "
              f"{', '.join(a['only_there']) or 'none'}")
    record = {"schema": records.SCHEMA, "kind": "cpu-sass-loops", "meta": meta,
              "command": command, "variants": rows}
    out_dir = args.out or records.REPO / "docs" / "benchmarks" / "experiments"
    path = records.write_record(record, out_dir,
                                f"{meta['date']}-cpu-sass-loops-{meta['commit']}.json")
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
