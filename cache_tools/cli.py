"""``jitmeta-cache``: the command line of jitmeta's cubin cache.

Subcommands: warm, ls, info, verify, prune, clear, export, import, plan. Every one
takes ``--json`` (then stdout carries one JSON document and nothing else; messages
go to stderr) and the global ``--cache-dir DIR`` (overrides JITMETA_CACHE_DIR).
Exit codes: 0 ok, 1 failure, 2 usage error (including a malformed JITMETA_* value).

Start-up is kept cheap (every call is a fresh process): this module and what it imports
at module level never import torch or the CUDA driver bindings; only ``warm --device``
and ``plan --device`` import torch, inside the command.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import re
import sys
import time
from typing import Callable

from jitmeta import envs
from jitmeta._version import __version__
from jitmeta.envs import EnvError
from jitmeta.heuristics.arch import normalize_arch
from jitmeta.heuristics.plan import PlanError
from jitmeta.kernels import SCHEDULES
from jitmeta.jit.cache import CacheError, DiskCache

__all__ = ["main", "build_parser"]

PROG = "jitmeta-cache"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Arguments that parse but cannot be used together (exit code 2)."""


class _ArgumentError(Exception):
    """argparse rejected the command line; carries the message and the usage line."""

    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are raised to :func:`main`, which reports
    them as text or, with ``--json``, as a JSON object (exit code 2 either way)."""

    def error(self, message: str):
        raise _ArgumentError(message, self.format_usage().strip())


# --- argument types -----------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers >= 1 (e.g. 1,2,4), got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers >= 1 (e.g. 1,2,4), got {text!r}")
    return sorted(set(values))


def _batches(text: str) -> list[tuple[int, int]]:
    from jitmeta.warmup import parse_batches

    try:
        return parse_batches(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. 1-65536,131072)") from None


def _arch(text: str) -> str:
    try:
        return normalize_arch(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def _size(text: str) -> int:
    """``1000``, ``500M``, ``2GiB``, ``64k`` -> bytes (suffixes are powers of 1024)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes (e.g. 500000000, 500M, 2GiB), got {text!r}")
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of days >= 0, got {text!r}")
    return value


def _dir(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory path")
    return text


# --- output -------------------------------------------------------------------------

class Out:
    """Writes either human text or one JSON document to stdout."""

    def __init__(self, as_json: bool):
        self.json = as_json

    def emit(self, obj, text: str | Callable[[], str]) -> None:
        if self.json:
            sys.stdout.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")
        else:
            sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")
        sys.stdout.flush()

    @staticmethod
    def note(message: str) -> None:
        sys.stderr.write(message.rstrip("\n") + "\n")
        sys.stderr.flush()


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _iso(ts: float | None) -> str | None:
    if not ts:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(
        timespec="seconds")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [header] + rows]
    return "\n".join(lines)


def _cache() -> DiskCache:
    from jitmeta.jit.build import cache_for_root

    return cache_for_root(None, envs.snapshot())


# --- subcommands --------------------------------------------------------------------

def cmd_warm(args, out: Out) -> int:
    from jitmeta.jit import build as jit_build
    from jitmeta.warmup import WarmResult, warm, warm_manifest

    if not args.arch and args.device is None and not args.manifest:
        raise UsageError("give --arch ARCH (repeatable) or --device N, or --manifest FILE")
    if args.device is not None:
        _require_device(args.device)
    cache = _cache()
    cache.check_trusted()
    if not cache.writable():
        raise CacheError(f"cannot warm {cache.root}: it is not writable (warm fills the "
                         "disk cache; point --cache-dir at a writable directory)")
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="warm", unit="cubin", file=sys.stderr,
                       disable=not sys.stderr.isatty(), leave=False)
        bar.total = total
        bar.n = done
        bar.refresh()

    t0 = time.perf_counter()
    before = jit_build.stats()
    # warm is an explicit request to compile into the disk cache, whatever the
    # run-time policy of this environment says
    with envs.override(JITMETA_OFFLINE=False, JITMETA_DISABLE_DISK_CACHE=False):
        try:
            result = WarmResult()
            if args.manifest:
                part = warm_manifest(args.manifest, jobs=args.jobs, cache=cache,
                                     progress=progress)
                _merge(result, part)
            if args.arch or args.device is not None:
                varlen = {"no": (False,), "yes": (True,), "both": (False, True)}[args.varlen]
                schedules = SCHEDULES if args.format == "all" else (args.format,)
                part = warm(args.arch, device=args.device, num_sms=args.num_sms,
                            batches=args.batch, next_n=args.next_n, varlen=varlen,
                            schedules=schedules, split_kv=args.split_kv, jobs=args.jobs,
                            cache=cache, progress=progress)
                _merge(result, part)
        finally:
            if bar is not None:
                bar.close()
    result.seconds = time.perf_counter() - t0
    pruned = jit_build.stats()["pruned"] - before["pruned"]
    summary = dict(result.to_dict(), root=str(cache.root), pruned=pruned)

    def text() -> str:
        lines = [f"{len(result.compiled)} compiled, {len(result.cached)} already cached, "
                 f"{len(result.failed)} failed in {result.seconds:.2f} s "
                 f"({len(result.entries)} cubins, cache {cache.root})"]
        for key, err in result.failed:
            lines.append(f"  FAILED {key[:16]}: {err.splitlines()[0] if err else ''}")
        return "\n".join(lines)

    out.emit(summary, text)
    if pruned:
        out.note(f"warning: JITMETA_CACHE_MAX_BYTES={envs.get('JITMETA_CACHE_MAX_BYTES')} "
                 f"evicted {pruned} entries while warming; raise the cap or warm less")
    return EXIT_FAIL if result.failed else EXIT_OK


def _merge(into, part) -> None:
    into.compiled += part.compiled
    into.cached += part.cached
    into.failed += part.failed
    into.plans.update(part.plans)


def _require_device(index: int) -> None:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index < 0 or index >= n:
        raise CacheError(f"--device {index}: this machine has {n} CUDA device(s); warm "
                         "without a GPU with --arch (e.g. --arch sm_90 --num-sms 132)")


def _rows(cache: DiskCache) -> list[dict]:
    rows = []
    for key in cache.keys():
        meta = cache.read_meta(key) or {}
        code = meta.get("code") if isinstance(meta.get("code"), dict) else {}
        rows.append({
            "key": key, "variant": meta.get("variant"), "arch": meta.get("arch"),
            "bytes": cache.entry_bytes(key), "created": meta.get("created"),
            "last_used": _iso(cache.last_used(key)),
            "nvrtc_version": meta.get("nvrtc_version"), "code_name": meta.get("code_name"),
            "varlen": code.get("varlen"), "schedule": code.get("schedule"),
            "split_kv": code.get("split_kv"), "threads": code.get("threads"),
            "capacity": code.get("capacity"),
        })
    rows.sort(key=lambda r: (str(r["arch"]), str(r["code_name"]), r["key"]))
    return rows


def cmd_ls(args, out: Out) -> int:
    cache = _cache()
    rows = _rows(cache)

    def text() -> str:
        if not rows:
            return f"no entries in {cache.root}"
        return _table(["KEY", "VARIANT", "ARCH", "BYTES", "CREATED", "LAST USED", "NVRTC",
                       "CODE"],
                      [[r["key"][:16], r["variant"] or "?", r["arch"] or "?", r["bytes"],
                        r["created"] or "?", r["last_used"] or "?",
                        r["nvrtc_version"] or "?", r["code_name"] or "?"] for r in rows])

    out.emit(rows, text)
    return EXIT_OK


def cmd_info(args, out: Out) -> int:
    from jitmeta.jit.compiler import nvrtc_version

    cache = _cache()
    info = cache.info()
    info["nvrtc_version"] = nvrtc_version()
    info["offline"] = envs.get("JITMETA_OFFLINE")
    info["disk_cache_disabled"] = envs.get("JITMETA_DISABLE_DISK_CACHE")
    try:
        cache.check_trusted()
        info["trusted"], info["trust_problem"] = True, None
    except CacheError as exc:
        info["trusted"], info["trust_problem"] = False, str(exc)

    def text() -> str:
        cap = info["max_bytes"]
        rows = [["root", info["root"] + ("" if info["exists"] else " (not created yet)")],
                ["schema", f"v{info['schema']}"],
                ["entries", str(info["entries"])],
                ["bytes", f"{info['bytes']} ({_human_bytes(info['bytes'])})"],
                ["quarantined", f"{info['quarantined']} "
                                f"({_human_bytes(info['quarantine_bytes'])})"],
                ["temp dirs", str(info["tmp"])],
                ["writable", "yes" if info["writable"] else "no (read-only: misses "
                                                            "compile into memory)"],
                ["size cap", f"{cap} ({_human_bytes(cap)})" if cap is not None else
                 "none (JITMETA_CACHE_MAX_BYTES)"],
                ["offline", "yes (JITMETA_OFFLINE=1)" if info["offline"] else "no"],
                ["lock dir", info["lock_dir"]],
                ["nvrtc here", info["nvrtc_version"]],
                ["trusted", "yes" if info["trusted"] else "NO: " + info["trust_problem"]]]
        return "\n".join(f"{k:<12} {v}" for k, v in rows) + \
            "\n(hit/miss counters of a process: jitmeta.stats())"

    out.emit(info, text)
    return EXIT_OK


def cmd_verify(args, out: Out) -> int:
    cache = _cache()
    trust = None
    try:
        cache.check_trusted()
    except CacheError as exc:
        trust = str(exc)
    checked, bad, stray = 0, [], []
    if trust is None:  # an untrusted root is neither read nor changed
        for key in list(cache.keys()):
            try:
                problem, _, _ = cache.check(key, deep=True)
            except FileNotFoundError:
                continue  # removed meanwhile
            except CacheError as exc:  # this entry's own directory is not trusted
                problem = str(exc)
            checked += 1
            if problem:
                moved = cache.quarantine(key, problem)
                bad.append({"key": key, "reason": problem,
                            "quarantined_to": str(moved) if moved else None})
        for item in cache.stray():
            moved = cache.quarantine_stray(item, "not a cache entry")
            stray.append({"item": f"entries/{item}",
                          "quarantined_to": str(moved) if moved else None})
    result = {"root": str(cache.root), "checked": checked, "ok": checked - len(bad),
              "bad": bad, "stray": stray, "trusted": trust is None,
              "trust_problem": trust}

    def text() -> str:
        lines = [f"BAD {b['key'][:16]}: {b['reason']}"
                 + (f" -> {b['quarantined_to']}" if b["quarantined_to"] else
                    " (could not move it aside)") for b in bad]
        lines += [f"STRAY {s['item']}: not a cache entry"
                  + (f" -> {s['quarantined_to']}" if s["quarantined_to"] else
                     " (could not move it aside; remove it)") for s in stray]
        if trust:
            lines.append(trust + "; nothing was checked")
        lines.append(f"{checked} entries checked, {checked - len(bad)} ok, {len(bad)} bad"
                     + (f", {len(stray)} stray items" if stray else "")
                     + f" ({cache.root})")
        return "\n".join(lines)

    out.emit(result, text)
    return EXIT_FAIL if bad or stray or trust else EXIT_OK


def _failures(out: Out, what: str, errors: list) -> None:
    for item, message in errors[:5]:
        out.note(f"{PROG}: {what}: could not remove {item}: {message}")
    if len(errors) > 5:
        out.note(f"{PROG}: {what}: ... and {len(errors) - 5} more")


def cmd_prune(args, out: Out) -> int:
    if args.max_bytes is None and args.older_than is None:
        raise UsageError("give --max-bytes N and/or --older-than DAYS")
    cache = _cache()
    cache.check_trusted()
    sizes = {k: cache.entry_bytes(k) for k in cache.keys()}
    errors: list = []
    removed = cache.prune(max_bytes=args.max_bytes,
                          older_than_s=None if args.older_than is None
                          else args.older_than * 86400.0, errors=errors)
    freed = sum(sizes.get(k, 0) for k in removed)
    info = cache.info()
    result = {"root": str(cache.root), "removed": removed, "bytes_freed": freed,
              "entries": info["entries"], "bytes": info["bytes"],
              "errors": [{"item": i, "error": e} for i, e in errors]}
    _failures(out, "prune", errors)

    def text() -> str:
        if not sizes and not errors:
            return f"nothing to prune: no entries in {cache.root}"
        return (f"removed {len(removed)} entries ({_human_bytes(freed)}); "
                f"{info['entries']} entries, {_human_bytes(info['bytes'])} left in "
                f"{cache.root}" + (f"; {len(errors)} could not be removed (read-only?)"
                                   if errors else ""))

    out.emit(result, text)
    return EXIT_FAIL if errors else EXIT_OK


def cmd_clear(args, out: Out) -> int:
    cache = _cache()
    cache.check_trusted()
    info = cache.info()
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to clear {cache.root} without confirmation: stdin "
                             "is not a terminal; pass --yes")
        sys.stderr.write(f"Remove {info['entries']} entries ({_human_bytes(info['bytes'])})"
                         f" and {info['quarantined']} quarantined from {cache.root}? [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            out.note("aborted; nothing removed")
            return EXIT_FAIL
    errors: list = []
    n = cache.clear(errors=errors)
    _failures(out, "clear", errors)
    left = cache.info()
    result = {"root": str(cache.root), "removed": n, "entries": left["entries"],
              "errors": [{"item": i, "error": e} for i, e in errors]}
    if errors:
        text = (f"removed {n} entries from {cache.root}, but {len(errors)} items could not "
                f"be removed ({left['entries']} entries left; is it read-only?)")
    elif not info["entries"] and not info["quarantined"] and not info["tmp"]:
        text = f"nothing to clear: {cache.root} holds no entries"
    else:
        text = f"removed {n} entries and the quarantine from {cache.root}"
    out.emit(result, text)
    return EXIT_FAIL if errors else EXIT_OK


def cmd_export(args, out: Out) -> int:
    from .bundle import BundleError, export_bundle

    cache = _cache()
    try:
        result = export_bundle(cache, args.file, archs=args.arch)
    except BundleError as exc:  # nothing to export: say so, write nothing, exit 1
        raise CacheError(str(exc)) from None
    for s in result["skipped"]:
        out.note(f"warning: left out bad entry {s['key'][:16]} ({s['reason']})")
    out.emit(result, lambda: f"exported {len(result['entries'])} entries "
                             f"({_human_bytes(result['bytes'])}) from {cache.root} to "
                             f"{result['file']}")
    return EXIT_OK


def cmd_import(args, out: Out) -> int:
    from .bundle import import_bundle

    cache = _cache()
    result = import_bundle(cache, args.file)
    result["root"] = str(cache.root)
    out.emit(result, lambda: f"imported {len(result['imported'])} entries into "
                             f"{cache.root} ({len(result['present'])} already present)")
    return EXIT_OK


def cmd_plan(args, out: Out) -> int:
    from jitmeta import kernels
    from jitmeta.heuristics.arch import limits_for_arch
    from jitmeta.jit.build import key_for

    if args.device is not None:
        _require_device(args.device)
        from jitmeta.dispatch import device_limits

        limits = device_limits(args.device)
    else:
        limits = limits_for_arch(args.arch, args.num_sms)
    if args.varlen and args.next_n != 1:
        raise UsageError("--varlen needs --next-n 1 (varlen atoms are single tokens)")
    knobs = envs.snapshot()
    fam = kernels.family(args.format)
    p = fam.plan(args.batch, args.next_n, args.varlen, args.num_sms or limits.sm_count,
                 args.split_kv, args.format, limits, knobs)
    d = p.to_dict()
    d["key"] = key_for(fam.source(p.code), knobs)[0]
    d["warm_command"] = fam.warm_command(p, knobs)

    def text() -> str:
        rows = [["variant", d["variant"]], ["threads", d["threads"]],
                ["smem bytes", f"{d['smem_bytes']} (static {d['smem_static_bytes']} + "
                               f"dynamic {d['smem_dynamic_bytes']})"],
                ["capacity", d["capacity"]], ["grid", d["grid"]],
                ["shape", f"batch {p.batch}, next_n {p.next_n}, "
                          f"{'varlen' if p.code.varlen else 'non-varlen'}, "
                          f"{p.num_sms} SMs, format {p.schedule}, "
                          f"split_kv {p.code.split_kv}, {p.code.arch}"],
                ["code", d["code_name"]], ["key", d["key"]], ["reason", d["reason"]],
                ["warm with", d["warm_command"]]]
        return "\n".join(f"{k:<11} {v}" for k, v in rows)

    out.emit(d, text)
    return EXIT_OK


# --- parser -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    # --json and --cache-dir work before or after the subcommand
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document on stdout (messages on stderr)")
    common.add_argument("--cache-dir", metavar="DIR", type=_dir, default=argparse.SUPPRESS,
                        help="cache root (overrides JITMETA_CACHE_DIR)")
    knobs = "\n".join(f"  {name:<28} {text}" for name, text in envs.describe())
    parser = _Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Warm, inspect, verify, prune and ship jitmeta's cubin cache.",
        epilog="exit codes: 0 ok, 1 failure, 2 usage error\n\nenvironment:\n" + knobs)
    parser.add_argument("--version", action="version",
                        version=f"{PROG} (jitmeta) {__version__}")
    parser.add_argument("--json", action="store_true", default=False,
                        help="print one JSON document on stdout (messages on stderr)")
    parser.add_argument("--cache-dir", metavar="DIR", type=_dir, default=None,
                        help="cache root (overrides JITMETA_CACHE_DIR)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, func, help_: str, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_, **kw)
        p.set_defaults(func=func, subparser=p)
        return p

    p = add("warm", cmd_warm, "precompile the cubins a deployment needs (no GPU needed)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--arch", action="append", type=_arch,
                       help="target arch, e.g. sm_90 or sm_90a (repeatable)")
    where.add_argument("--device", type=int, metavar="N",
                       help="read arch and SM count off CUDA device N")
    p.add_argument("--num-sms", type=_positive_int, metavar="S",
                   help="SMs of the consumer kernel (default: the arch's or device's)")
    p.add_argument("--batch", type=_batches, default="1-65536", metavar="LIST",
                   help="batch sizes: comma list of N and LO-HI (default 1-65536)")
    p.add_argument("--next-n", type=_int_list, default=[1], metavar="LIST",
                   help="next_n values, comma list (default 1)")
    p.add_argument("--varlen", choices=("no", "yes", "both"), default="both",
                   help="non-varlen, varlen or both (default both)")
    p.add_argument("--format", choices=(*SCHEDULES, "all"), default="all",
                   help="row format(s) (default all)")
    p.add_argument("--split-kv", type=_positive_int, default=256, metavar="N",
                   help="KV tokens per split (default 256)")
    p.add_argument("-j", "--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   metavar="N", help="parallel NVRTC compiles (default: CPU count)")
    p.add_argument("--manifest", metavar="FILE",
                   help="also build every miss recorded in FILE (JITMETA_MISS_MANIFEST)")

    add("ls", cmd_ls, "list cache entries")
    add("info", cmd_info, "cache root, entry count, bytes, quarantined")
    add("verify", cmd_verify, "re-check every entry; quarantine bad ones (exit 1 if any)")

    p = add("prune", cmd_prune, "evict least-recently-used or old entries")
    p.add_argument("--max-bytes", type=_size, metavar="N",
                   help="keep at most N bytes (suffixes K, M, G: powers of 1024)")
    p.add_argument("--older-than", type=_days, metavar="DAYS",
                   help="remove entries not used for DAYS days")

    p = add("clear", cmd_clear, "remove every entry (asks unless --yes)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")

    p = add("export", cmd_export, "write valid entries to a portable bundle (tar.gz)")
    p.add_argument("file", metavar="FILE",
                   help="bundle to write (a .tgz; replaced atomically if it exists)")
    p.add_argument("--arch", action="append", type=_arch,
                   help="only entries for this arch (repeatable)")

    p = add("import", cmd_import, "add the entries of a bundle, after checking all of it")
    p.add_argument("file", metavar="FILE",
                   help="bundle made by 'jitmeta-cache export' (nothing is added unless "
                        "every entry in it checks out)")

    p = add("plan", cmd_plan, "show the plan (variant, threads, smem, reason) for a shape")
    p.add_argument("--batch", type=_positive_int, required=True, metavar="B",
                   help="batch size: requests (non-varlen) or tokens (varlen)")
    p.add_argument("--next-n", type=_positive_int, default=1, metavar="N",
                   help="query tokens per request (default 1; must be 1 with --varlen)")
    p.add_argument("--varlen", action="store_true",
                   help="varlen (prefill) mode: one row per token, with indices")
    p.add_argument("--num-sms", type=_positive_int, metavar="S",
                   help="SMs of the consumer kernel (default: the arch's or device's)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--arch", type=_arch,
                       help="plan for this arch's limits, no GPU needed (e.g. sm_90)")
    where.add_argument("--device", type=int, metavar="N",
                       help="plan for CUDA device N's limits (imports torch)")
    p.add_argument("--split-kv", type=_positive_int, default=256, metavar="N",
                   help="KV tokens per split (default 256)")
    p.add_argument("--format", choices=SCHEDULES, default="smxx",
                   help="row format the consumer reads (default smxx)")
    return parser


# --- entry point --------------------------------------------------------------------

class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


@contextlib.contextmanager
def _logging():
    """The CLI is an application: show jitmeta's warnings (JITMETA_LOG sets the level)."""
    logger = logging.getLogger("jitmeta")
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    level = envs.get("JITMETA_LOG")
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper()) if level else logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


def _check_environment() -> None:
    """Parse every JITMETA_* knob now, so a malformed one fails loudly and early."""
    for name in envs.KNOBS:
        envs.get(name)


def main(argv: list[str] | None = None) -> int:
    """Run ``jitmeta-cache``; returns the exit code (0 ok, 1 failure, 2 usage)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as exc:
        # --json is honoured even when the rest of the line does not parse
        wants_json = "--json" in argv[:argv.index("--")] if "--" in argv else \
            "--json" in argv
        sys.stderr.write(f"{exc.usage}\n{PROG}: error: {exc}\n")
        if wants_json:
            sys.stdout.write(json.dumps({"error": str(exc), "usage": exc.usage,
                                         "exit_code": EXIT_USAGE}) + "\n")
        return EXIT_USAGE
    except SystemExit as exc:  # argparse: --help / --version (0)
        return exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None \
            else EXIT_USAGE
    out = Out(args.json)

    def fail(code: int, message: str) -> int:
        out.note(f"{PROG}: error: {message}")
        if out.json:
            record = {"error": message, "exit_code": code}
            if code == EXIT_USAGE:
                record["usage"] = getattr(args, "subparser", parser).format_usage().strip()
            sys.stdout.write(json.dumps(record) + "\n")
        return code

    try:
        _check_environment()
        with _logging():
            scope = envs.override(JITMETA_CACHE_DIR=args.cache_dir) if args.cache_dir \
                else contextlib.nullcontext()
            with scope:
                return args.func(args, out)
    except EnvError as exc:
        return fail(EXIT_USAGE, str(exc))
    except UsageError as exc:
        return fail(EXIT_USAGE, f"{args.command}: {exc}")
    except (CacheError, PlanError, ValueError, OSError) as exc:
        return fail(EXIT_FAIL, str(exc))
    except KeyboardInterrupt:
        out.note(f"{PROG}: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
