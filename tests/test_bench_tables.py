"""The benchmark records and the tables generated from them (CPU only).

The committed README / docs tables must be exactly what bench/make_tables.py makes of
the committed records; a figure edited by hand fails here. The benchmark scripts'
dry-run modes run everything but the timing, and their records feed the generator.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

import jitmeta
from jitmeta import kernels

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import benchmark_cli  # noqa: E402
import benchmark_host  # noqa: E402
import benchmark_metadata  # noqa: E402
import benchmark_nvrtc  # noqa: E402
import compare_records  # noqa: E402
import launch_cost  # noqa: E402
import launch_modes  # noqa: E402
import make_tables  # noqa: E402
import phase_trace  # noqa: E402
import records  # noqa: E402
import sass_loops  # noqa: E402
import touch  # noqa: E402


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copytree(REPO / "docs" / "benchmarks", root / "docs" / "benchmarks")
    return root


# --- the committed files ------------------------------------------------------------------

def test_committed_regions_equal_what_the_records_give():
    found = make_tables.load_records(REPO / "docs" / "benchmarks")
    assert found["gpu-metadata"], "docs/benchmarks must hold the current GPU record"
    for rel in make_tables.FILES:
        text = (REPO / rel).read_text(encoding="utf-8")
        assert "<!-- generated:" in text, f"{rel} has no generated region"
        assert make_tables.render_file(text, found, str(rel)) == text, (
            f"{rel}: generated regions differ from the records; run "
            "python bench/make_tables.py")
    assert make_tables.main(["--check"]) == 0


def test_a_figure_edited_by_hand_fails_the_check(tmp_path, capsys):
    root = _copy_tree(tmp_path)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    region = make_tables.REGION.search(text)
    body = region.group(3)
    edited = body.replace("| 2^20 | ", "| 2^20 | 1", 1)
    assert edited != body, "the performance table should have a 2^20 row"
    readme.write_text(text.replace(body, edited), encoding="utf-8")
    assert make_tables.main(["--check", "--root", str(root)]) == 1
    assert "README.md" in capsys.readouterr().err
    assert make_tables.main(["--root", str(root)]) == 0  # regenerate
    assert readme.read_text(encoding="utf-8") == text


def test_an_unknown_or_unclosed_region_is_an_error():
    found = make_tables.load_records(REPO / "docs" / "benchmarks")
    with pytest.raises(make_tables.RecordError, match="unknown generated region 'nope'"):
        make_tables.render_file("<!-- generated:nope -->\n<!-- /generated:nope -->\n",
                                found)
    with pytest.raises(make_tables.RecordError, match="needs its own"):
        make_tables.render_file("<!-- generated:host -->\nx\n", found)


def test_committed_files_hold_no_machine_paths():
    paths = [REPO / "README.md",
             *sorted(p for p in (REPO / "docs" / "benchmarks").rglob("*") if p.is_file())]
    for path in paths:
        found = records.machine_paths(path.read_text(encoding="utf-8"))
        assert not found, f"{path.name} holds machine paths: {found}"
    assert records.machine_paths("--out /tmp/x and /home/u") != []
    assert records.machine_paths("docs/benchmarks/x.json <path>") == []


def test_device_logs_are_scrubbed_of_machine_paths():
    root = "/tmp/device-tree"
    log = (f"rootdir: {root}\n"
           f"../tmp/device-tree/tests/test_gpu_kernels.py::test_x PASSED\n"
           f"{root}-other/file and {root}/x\n"
           "WARNING: another process holds the compile lock /tmp/jitmeta-locks-0/5a-4b.lock "
           "for key 4b (cache /tmp/jitmeta-cache); waiting\n"
           "  /opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/graphs.py:126: warn\n")
    got = records.scrub_log(log, root)
    assert records.machine_paths(got) == []
    assert got.splitlines()[:2] == ["rootdir: <repo>",
                                    "<repo>/tests/test_gpu_kernels.py::test_x PASSED"]
    # a sibling whose name only starts like the root is not the repository
    assert "<path> and <repo>/x" in got
    assert "compile lock <path> for key 4b (cache <path>); waiting" in got
    assert "/opt/torch/.venv/lib/python3.12/" in got  # not a machine-specific root


def test_write_record_refuses_machine_paths(tmp_path):
    # machine paths built at run time, so that this file itself names none
    home_out = "/".join(("", "root", "out"))
    tmp_out = "/".join(("", "tmp", "o"))
    with pytest.raises(ValueError, match="absolute machine paths"):
        records.write_record({"meta": {"command": f"python x --out {home_out}"}}, tmp_path,
                             "r.json")
    assert not (tmp_path / "r.json").exists()
    assert records.portable(home_out) == "<path>"
    assert records.portable(str(REPO / "bench" / "x.py")) == "bench/x.py"
    assert records.portable(f"--out={tmp_out}") == "--out=<path>"
    assert records.portable("12") == "12"


# --- the timer's check of what was timed --------------------------------------------------

def test_dry_timer_catches_a_call_that_writes_nothing_or_the_wrong_rows():
    timer = benchmark_metadata.GraphTimer(20, 10, 5, dry_run=True)
    ctx = torch.randint(1, 8193, (64, 1), dtype=torch.int32)
    want = jitmeta.reference_schedule(ctx, 132)
    out = torch.zeros(133, 2, dtype=torch.int32)

    def right():
        out.copy_(want)
        return out

    def stale():  # writes once, then never again: the -1 fill must show it
        if not hasattr(stale, "done"):
            stale.done = out.copy_(want)
        return out

    def wrong():
        out.copy_(want)
        out[5, 1] += 1
        return out
    assert timer.measure(right, want) == (None, True)
    assert timer.measure(stale, want) == (None, False)
    assert timer.measure(wrong, want) == (None, False)


# --- the scripts' dry runs ----------------------------------------------------------------

def _as_timed(rec: dict) -> dict:
    """A dry run's record as if its rows had been timed (2 us each, 1-3 us spread)."""
    rec["meta"]["dry_run"] = False
    for r in rec["rows"]:
        r["us"] = {"min": 1.0, "median": 2.0, "max": 3.0, "n": 5}
    return rec


def test_metadata_dry_run_writes_a_full_record(tmp_path, capsys):
    rc = benchmark_metadata.main(["--dry-run", "--out", str(tmp_path), "--batches", "1,1024"])
    assert rc == 0
    (path,) = tmp_path.glob("*-dry-run.json")
    rec = json.loads(path.read_text(encoding="utf-8"))
    meta = rec["meta"]
    assert rec["schema"] == records.SCHEMA and rec["kind"] == "gpu-metadata"
    assert meta["dry_run"] is True and "partial" not in meta  # the checkpoint replaced
    assert tuple(meta["formats"]) == records.schedules()
    assert meta["calls_per_graph"] == benchmark_metadata.CALLS_PER_GRAPH
    for key in ("date", "device", "driver", "torch", "nvrtc", "command", "commit"):
        assert key in meta
    assert meta["command"].startswith("python bench/benchmark_metadata.py --dry-run")
    assert "<path>" in meta["command"] and not records.machine_paths(path.read_text())
    modes = benchmark_metadata.MODES
    assert len(rec["rows"]) == len(modes) * 2 * len(meta["formats"])
    assert {r["mode"] for r in rec["rows"]} == set(modes)
    assert all(r["exact"] is True and r["us"] is None for r in rec["rows"])
    ops = [r["torch_ops"] for r in rec["rows"] if r["format"] == "smxx"]
    assert ops and all(o["exact"] is True and o["calls_per_graph"] ==
                       benchmark_metadata.CALLS_PER_GRAPH for o in ops)
    layouts = {tuple(t["words"]) for t in rec["touch"]}
    assert {tuple(r["touch_words"]) for r in rec["rows"]} == layouts
    assert (1024, 0) in layouts and (2048, 0) in layouts and (1024, 1024) in layouts
    assert all(t["tried"] and t["best"] is None for t in rec["touch"])
    assert rec["tuning"] and all(c["exact"] for r in rec["tuning"]
                                 for c in r["configs"].values())
    assert ({(r["format"], r["mode"]) for r in rec["tuning"]}
            == set(benchmark_metadata.TUNING_MODES))
    out = capsys.readouterr().out
    assert "| smxx | varlen/runs=1..16 | 1024 |" in out  # the printed table
    # the generator refuses it in the records directory ...
    with pytest.raises(make_tables.RecordError, match="dry-run"):
        make_tables.load_records(tmp_path)
    # ... and renders every region from a record of this shape
    real = _as_timed(copy.deepcopy(rec))
    for r in real["rows"]:
        if r["torch_ops"]:
            r["torch_ops"]["us"] = {"min": 40.0, "median": 50.0, "max": 60.0, "n": 5}
    for t in real["touch"]:
        t["best"] = dict(t["tried"][0], us={"min": 0.5, "median": 1.0, "max": 1.5, "n": 5})
    real["floors"]["empty"]["us"] = {"min": 0.4, "median": 0.5, "max": 0.6, "n": 5}
    found = {"gpu-metadata": [("x.json", real)], "gpu-host": [], "cpu-nvrtc": []}
    perf = make_tables.region_performance(found)
    assert "(2.0x)" in perf and "no record yet" in perf
    table = make_tables.gpu_table(real)
    assert "| smxx | next_n=1 | 1 | static | 2.00 (1.00-3.00) | 1.00 | 2.00 | 4.00 | " \
           "50.00 (40.00-60.00) | 0.040 | yes |" in table
    targets = make_tables.region_targets(found)
    assert "| batch <= 4096: <= 1.5x the empty-kernel floor | 4.00x" in targets
    assert "missed" in targets and "no record" in targets


def test_a_metadata_run_stopped_in_its_tuning_table_leaves_its_rows(tmp_path, monkeypatch):
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # the run stops here (a time limit would kill it)

    monkeypatch.setattr(benchmark_metadata, "tuning_rows", stopped)
    with pytest.raises(KeyboardInterrupt):
        benchmark_metadata.main(["--dry-run", "--out", str(tmp_path), "--batches", "1,1024"])
    (path,) = tmp_path.glob("*-dry-run.json")
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert rec["meta"]["partial"] == benchmark_metadata.PARTIAL
    assert rec["tuning"] == [] and rec["cold"] is None
    modes = benchmark_metadata.MODES
    assert len(rec["rows"]) == len(modes) * 2 * len(rec["meta"]["formats"])
    # as if timed: the generator refuses it, the A/B table reads its rows
    path.write_text(json.dumps(_as_timed(rec)), encoding="utf-8")
    with pytest.raises(make_tables.RecordError, match="partial record"):
        make_tables.load_records(tmp_path)
    (entry, *_) = compare_records.compare(compare_records.load([str(path)]),
                                          compare_records.load([str(path)]))
    assert entry["ratio"] == 1.0 and entry["before"] == [2.0]


def test_absolute_targets_name_the_touch_floor_and_a_limit_below_it():
    """Each absolute target shows the worst row's touch floor; a limit that some row's
    floor exceeds (no kernel reading that input can meet it) is called out."""
    big, small = [2**24, 0], [8192, 8192]
    rows = [{"format": "smxx", "mode": "next_n=2", "batch": 2**24, "varlen": False,
             "us": records.spread([41.0]), "touch_words": big},
            {"format": "smxx", "mode": "varlen/runs=2", "batch": 8192, "varlen": True,
             "us": records.spread([2.5]), "touch_words": small}]
    rec = {"rows": rows, "floors": {"empty": {"us": records.spread([0.5])}},
           "touch": [{"words": big, "best": {"us": records.spread([33.0])}},
                     {"words": small, "best": {"us": records.spread([1.5])}}]}
    targets = make_tables.region_targets({"gpu-metadata": [("x.json", rec)]})
    line = next(x for x in targets.splitlines() if x.startswith("| batch 2^24 dense <= 30 us"))
    assert "41.00 us (smxx next_n=2 2^24; touch floor 33.00 us)" in line
    assert "below the touch floor of next_n=2 2^24 (33.00 us)" in line
    assert line.endswith("| missed |")
    line = next(x for x in targets.splitlines() if x.startswith("| batch 8192 varlen <= 3 us"))
    assert "2.50 us (smxx varlen/runs=2 8192; touch floor 1.50 us) | met |" in line
    assert "below the touch floor" not in line


def test_first_call_sentence_gives_its_steps_only_when_all_were_recorded():
    parts = {n: records.spread([float(k + 1)]) for k, n in
             enumerate(make_tables.FIRST_CALL_PARTS)}
    said = make_tables.first_call_parts(parts)
    assert said == (" Its steps in other fresh processes (median ms): plan and cubin from "
                    "disk 1.00, module load 2.00, the call prepared 3.00, the public call "
                    "until it returns 4.00, the wait for its kernel 5.00, a second call "
                    "6.00.")
    assert make_tables.first_call_parts(None) == ""
    parts["module_load"] = None  # every run compiled: no spread, so no sentence
    assert make_tables.first_call_parts(parts) == ""
    assert set(make_tables.FIRST_CALL_PARTS) == set(benchmark_metadata.PART_NAMES)


def test_torch_ops_ratio_compares_like_with_like():
    row = {"calls_per_graph": 20, "us": {"median": 4.0},
           "latency_1call": {"calls_per_graph": 1, "us": {"median": 6.0}},
           "torch_ops": {"calls_per_graph": 1, "us": {"median": 60.0}}}
    assert make_tables.torch_ops_ratio(row) == (0.1, 1)
    del row["latency_1call"]
    assert make_tables.torch_ops_ratio(row) == (None, 1)  # no 1-call figure: no ratio


def test_host_dry_run_makes_every_call(tmp_path):
    assert benchmark_host.main(["--dry-run", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*-dry-run-host.json")
    rec = json.loads(path.read_text(encoding="utf-8"))
    loops = rec["loops"]
    assert len(loops) == len(benchmark_host.HOST_CASES) * 2 * 2
    assert {(x["varlen"], x["out"], x["method"]) for x in loops} == {
        (v, o, m) for v in (False, True) for o in (False, True)
        for m in ("calls", "calls+sync")}
    assert {x["variant"] for x in loops} == {"static", "chunked"}
    assert all(x["us"] is None and x["calls"] == 200 and x["runs"] == 5 for x in loops)


# --- floors -------------------------------------------------------------------------------

def test_touch_candidates_cover_one_load_per_thread_and_no_more():
    shapes = touch.candidates((2**24, 0), 132)
    for threads in touch.THREADS:
        need = -(-(2**24 // 4) // threads)
        grids = [g for t, g in shapes if t == threads]
        assert grids == sorted(grids) and grids[0] == 1 and grids[-1] == need
        assert 132 in grids
    assert touch.candidates((1, 0), 132) == [(t, 1) for t in touch.THREADS]
    assert max(g for _, g in touch.candidates((1024, 1024), 132)) == 1
    with pytest.raises(ValueError, match="words must be two counts"):
        touch.candidates((-1, 0), 132)


def test_floor_kernels_compile_to_cubins():
    cubins = touch.compile_floors("sm_90")
    assert set(cubins) == {touch.EMPTY_NAME, touch.TOUCH_NAME}
    for name, cubin in cubins.items():
        assert cubin.startswith(b"\x7fELF") and name.encode() in cubin


# --- NVRTC script -------------------------------------------------------------------------

def test_nvrtc_script_reads_the_readme_warm_command():
    command = benchmark_nvrtc.readme_warm_command((REPO / "README.md").read_text())
    assert command.startswith("jitmeta-cache ") and " warm " in command
    argv = benchmark_nvrtc.warm_argv(command, "CACHE", {"--format": "smxx"})
    assert argv[argv.index("--cache-dir") + 1] == "CACHE"
    assert argv[argv.index("--format") + 1] == "smxx" and argv.count("--format") == 1
    full = benchmark_nvrtc.variants(benchmark_nvrtc.warm_argv(command, "C", {}))
    names = [n for n, _ in full]
    assert len(names) == len(set(names))
    for fmt in records.schedules():  # ("sm90" runs the "smxx" cubins)
        code_fmt = kernels.family(fmt).code_schedule(fmt)
        assert any(f"_{code_fmt}_" in n for n in names), f"no {fmt} variant in {names}"
    assert not any("_sm90_" in n for n in names)
    assert any("_varlen_" in n for n in names) and any("_dense_" in n for n in names)
    with pytest.raises(ValueError, match="no 'jitmeta-cache ... warm ...'"):
        benchmark_nvrtc.readme_warm_command("no command here")


def test_nvrtc_script_compiles_with_the_flags_its_record_names(monkeypatch):
    """The record's meta names JITMETA_NVRTC_FLAGS; the measured processes and the
    compiles in them must use those flags (and no other knob of the shell)."""
    from jitmeta.jit import compiler

    monkeypatch.setenv("JITMETA_NVRTC_FLAGS", "--Ofast-compile=min")
    monkeypatch.setenv("JITMETA_VARIANT", "static")
    env = benchmark_nvrtc._clean_env()
    assert env["JITMETA_NVRTC_FLAGS"] == "--Ofast-compile=min"
    assert "JITMETA_VARIANT" not in env
    monkeypatch.delenv("JITMETA_VARIANT")  # the worker runs in the cleaned environment
    seen = []

    def fake_compile(source, options):
        seen.append(options)
        raise StopIteration  # stop before the timing: the options are what is tested

    monkeypatch.setattr(compiler, "compile_cubin", fake_compile)
    command = benchmark_nvrtc.readme_warm_command((REPO / "README.md").read_text())
    argv = benchmark_nvrtc.warm_argv(command, "C", {"--format": "smxx"})
    with pytest.raises(StopIteration):
        benchmark_nvrtc.worker(argv, 1, first_only=True)
    assert seen and seen[0].extra == ("--Ofast-compile=min",)
    assert records.base_meta([], "benchmark_nvrtc.py")["nvrtc_extra_flags"] == [
        "--Ofast-compile=min"]


def test_ptxas_report_is_read_and_spilling_variants_are_named():
    log = ("ptxas info    : Compiling entry function 'jitmeta_emit' for 'sm_90'\n"
           "ptxas         .     120 bytes stack frame, 232 bytes spill stores, 204 bytes "
           "spill loads\nptxas info    : Used 64 registers, used 1 barriers, 34340 bytes smem\n")
    usage = benchmark_nvrtc.ptxas_usage(log)
    assert usage == {"registers": 64, "stack_bytes": 120, "spill_store_bytes": 232,
                     "spill_load_bytes": 204}
    with pytest.raises(ValueError, match="one kernel's ptxas report"):
        benchmark_nvrtc.ptxas_usage(log + log)  # two kernels: which one?
    with pytest.raises(ValueError, match="one kernel's ptxas report"):
        benchmark_nvrtc.ptxas_usage("ptxas info    : Used 40 registers")
    clean = dict(usage, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0)
    rec = {"variants": [{"name": "a", "ptxas": usage}, {"name": "b", "ptxas": clean}]}
    assert make_tables.spill_sentence(rec) == (
        " ptxas reports register spills in 1 variant(s): `a` (64 registers, 232 / 204 "
        "bytes spill stores / loads).")
    rec["variants"][0]["ptxas"] = clean
    assert make_tables.spill_sentence(rec) == " ptxas reports no register spills in any variant."
    rec["variants"][0]["ptxas"] = None  # a record without the report says nothing
    assert make_tables.spill_sentence(rec) == ""
    assert make_tables.ptxas_cells(None) == ["-", "-", "-"]
    assert make_tables.ptxas_cells(usage) == ["64", "120", "232 / 204"]


def test_nvrtc_script_on_a_subset_writes_a_record_the_generator_refuses(tmp_path):
    rc = benchmark_nvrtc.main(["--batch", "1-64", "--format", "smxx", "--varlen", "no",
                               "--next-n", "1", "--repeats", "1", "--runs", "1",
                               "--out", str(tmp_path)])
    assert rc == 0
    (path,) = tmp_path.glob("*-cpu-nvrtc-subset.json")
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert rec["meta"]["subset"] is True and rec["meta"]["cpus"] >= 1
    (variant,) = rec["variants"]
    assert variant["name"].startswith("static_dense_smxx") and variant["ms"]["median"] > 0
    usage = variant["ptxas"]
    assert 16 <= usage["registers"] <= 255 and usage["stack_bytes"] >= 0
    assert usage["spill_store_bytes"] >= 0 and usage["spill_load_bytes"] >= 0
    assert rec["warm"]["s"]["median"] > 0 and len(rec["warm"]["runs"]) == 1
    assert rec["first_compile_in_process_ms"]["n"] == 1
    with pytest.raises(make_tables.RecordError, match="subset"):
        make_tables.load_records(tmp_path)
    rec["meta"]["subset"] = False
    found = {"gpu-metadata": [], "gpu-host": [], "cpu-nvrtc": [("n.json", rec)]}
    assert "1 variants" in make_tables.region_nvrtc(found)


# --- CLI start-up script ------------------------------------------------------------------

def test_cli_script_writes_a_cpu_cli_record_the_generator_renders(tmp_path, capsys):
    assert benchmark_cli.main(["--runs", "1", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*-cpu-cli.json")
    text = path.read_text(encoding="utf-8")
    assert not records.machine_paths(text), "the temporary cache path leaked"
    rec = json.loads(text)
    assert rec["schema"] == records.SCHEMA and rec["kind"] == "cpu-cli"
    meta = rec["meta"]
    for key in ("date", "command", "commit", "python", "jitmeta", "cpus", "device"):
        assert key in meta
    assert meta["command"] == "python bench/benchmark_cli.py --runs 1 --out <path>"
    assert [c["name"] for c in rec["commands"]] == [n for n, _ in benchmark_cli.COMMANDS]
    info = next(c for c in rec["commands"] if c["name"] == "info")
    assert info["argv"] == "jitmeta-cache --cache-dir <cache> info"
    for c in rec["commands"]:
        assert c["ms"]["n"] == 1 and c["ms"]["median"] > rec["floor"]["ms"]["median"] > 0
        assert c["meets_target"] == (c["ms"]["median"] < meta["target_ms"])
        assert "torch" not in c["heavy_imports"], f"{c['argv']} imports torch"
    found = make_tables.load_records(tmp_path)
    assert [n for n, _ in found["cpu-cli"]] == [path.name]
    assert "--help" in capsys.readouterr().out
    # a slow command shows as missed, with its name, in the targets table
    slow = copy.deepcopy(rec)
    slow["commands"][1]["ms"] = {"min": 400.0, "median": 450.0, "max": 500.0, "n": 1}
    found = {"gpu-metadata": [], "gpu-host": [], "cpu-nvrtc": [], "cpu-cli": [("c.json", slow)]}
    targets = make_tables.region_targets(found)
    assert "| 450 ms (`info`) | missed |" in targets
    assert "`info` 450 ms" in make_tables.region_cli_startup(found)
    assert "| `jitmeta-cache --cache-dir <cache> info` | 450.0 (400.0-500.0) |" in \
        make_tables.region_cli(found)
    found["cpu-cli"] = []
    assert "no record yet" in make_tables.region_cli_startup(found)
    assert "| - ms | no record |" in make_tables.region_targets(found)


# --- the phase-trace tool's edits still fit the kernels ---------------------------------------

def test_phase_trace_marks_every_traced_kernel():
    """bench/phase_trace.py edits the rendered source at fixed anchors: every shape it
    traces must still take all of its marks (and compile), so that a kernel change
    that moves an anchor fails here, not on the GPU machine."""
    from jitmeta.envs import snapshot
    from jitmeta.heuristics.arch import limits_for_arch
    from jitmeta.jit.compiler import CompileOptions, compile_cubin
    from jitmeta.jit.render import render
    from jitmeta.kernels import plan as make_plan
    from jitmeta.kernels import source as make_source

    lim = limits_for_arch("sm_90")
    seen = set()
    for fmt, mode, batch in phase_trace.CASES:
        next_n, runs = benchmark_metadata.mode_shape(mode)
        p = make_plan(batch, next_n, runs is not None, 132, 256, fmt, lim, snapshot())
        if p.code in seen:
            continue
        seen.add(p.code)
        text = phase_trace.traced(render(make_source(p.code)))
        # call sites, besides the definitions; the engine's marks of a slab read into
        # registers and of the whole-batch path are in every source (the loads of a
        # tile and of registers, and the scans before either's rows, are alternatives:
        # one of each pair runs; the chunked exchange marks "every slot seen" in each of
        # its three paths)
        marks, spans = {"chunked": (14, 4), "static": (8, 0)}[p.variant]
        assert text.count("jitmeta_mark(") - 1 == marks, p.code.name
        assert text.count("jitmeta_add(") - 1 == spans, p.code.name
        if runs is None:  # the dense kernels of both formats compile once traced
            assert compile_cubin(text, CompileOptions("sm_90")).cubin
    assert {c.variant for c in seen} == {"static", "chunked"}


def test_launch_modes_cases_are_chunked_and_some_fit_a_cluster():
    """bench/launch_modes.py stops on a case the planner does not serve with the chunked
    variant; the forced slab sizes exist to give grids one cluster can hold."""
    from jitmeta import envs

    grids = []
    for fmt, mode, batch, forced in launch_modes.CASES:
        next_n, runs = benchmark_metadata.mode_shape(mode)
        with envs.override(**(forced or {})):
            p = jitmeta.plan(batch, next_n, runs is not None, benchmark_metadata.NUM_SMS,
                             schedule=fmt, arch="sm_90")
        assert p.variant == "chunked", (fmt, mode, batch, forced)
        grids.append((p.grid, forced is not None))
    assert all(g <= launch_modes.MAX_CLUSTER for g, forced in grids if forced)
    assert any(g > launch_modes.MAX_CLUSTER for g, _ in grids)  # the cooperative-only kind


def test_launch_cost_kernel_matches_the_emit_signature():
    """bench/launch_cost.py reads the PTX of bench/launch_cost.c's empty kernel (one
    definition for both launches): eight parameters, jitmeta_emit's kinds in order."""
    import re

    ptx = launch_cost.kernel_ptx()
    assert ptx.endswith(b"\0")
    params = re.findall(r"\.param \.(u64|u32) p(\d)", ptx.decode())
    assert [k for k, _ in params] == ["u64", "u64", "u32", "u32", "u32", "u32", "u64", "u64"]
    assert [int(i) for _, i in params] == list(range(8))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_launch_cost_c_builds():
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(["nvcc", "-c", "-o", f"{tmp}/launch_cost.o",
                              str(REPO / "bench" / "launch_cost.c")],
                             capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# --- the A/B comparison of kernelab records ------------------------------------------------

KERNELAB = REPO / "docs" / "benchmarks" / "experiments"


def _kernelab_record(commit: str, scale: float) -> dict:
    """A committed kernelab record with its medians scaled (synthetic: known answers)."""
    rec = json.loads((KERNELAB / "2026-12-07-NVIDIA_H100_80GB_HBM3-kernelab-after-1-"
                                 "2eee60a.json").read_text(encoding="utf-8"))
    rec["meta"]["commit"] = commit
    for r in rec["rows"]:
        r["us"]["median"] = round(r["us"]["median"] * scale, 3)
    return rec


def _write(tmp_path: Path, name: str, rec: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(rec), encoding="utf-8")
    return str(path)


def test_compare_records_means_and_ratios(tmp_path, capsys):
    base = _kernelab_record("aaa", 1.0)
    before = [_write(tmp_path, "b1.json", base),
              _write(tmp_path, "b2.json", _kernelab_record("aaa", 1.2))]
    after = [_write(tmp_path, "a1.json", _kernelab_record("bbb", 0.9))]
    entries = compare_records.compare(compare_records.load(before),
                                      compare_records.load(after))
    assert len(entries) == len(base["rows"])
    for e, r in zip(entries, sorted(base["rows"], key=compare_records.row_key)):
        m = r["us"]["median"]
        assert e["before"] == [m, round(m * 1.2, 3)]
        assert e["after"] == [round(m * 0.9, 3)]
        assert e["before_mean"] == pytest.approx((m + round(m * 1.2, 3)) / 2)
        assert e["ratio"] == pytest.approx(round(m * 0.9, 3) / e["before_mean"])
    assert compare_records.main(["--before", *before, "--after", *after]) == 0
    out = capsys.readouterr().out
    assert "before aaa (2 records), after bbb (1 records)" in out
    assert out.count("\n| ") == len(base["rows"]) + 1  # header and one line per row


def test_compare_records_lists_a_row_one_side_lacks(tmp_path):
    short = _kernelab_record("bbb", 1.0)
    gone = short["rows"].pop()
    entries = compare_records.compare(
        compare_records.load([_write(tmp_path, "b.json", _kernelab_record("aaa", 1.0))]),
        compare_records.load([_write(tmp_path, "a.json", short)]))
    (lacking,) = [e for e in entries if not e["after"]]
    assert compare_records.row_key(gone) == (lacking["format"], lacking["mode"],
                                             lacking["batch"], lacking["variant"])
    assert lacking["ratio"] is None and lacking["after_mean"] is None


@pytest.mark.parametrize("spoil, says", [
    (lambda rec: rec["rows"][3].update(exact=False), "not exact"),
    (lambda rec: rec.update(kind="gpu-host"), "not a gpu-metadata record"),
    (lambda rec: rec["meta"].update(dry_run=True), "dry run"),
    (lambda rec: rec["meta"].update(device="NVIDIA H200"), "'device'"),
    (lambda rec: rec["meta"].update(calls_per_graph=1), "'calls_per_graph'"),
])
def test_compare_records_refuses_what_cannot_be_compared(tmp_path, capsys, spoil, says):
    bad = _kernelab_record("bbb", 1.0)
    spoil(bad)
    args = ["--before", _write(tmp_path, "b.json", _kernelab_record("aaa", 1.0)),
            "--after", _write(tmp_path, "a.json", bad)]
    assert compare_records.main(args) == 2
    assert says in capsys.readouterr().err


# --- bench/sass_loops.py: loops and local accesses of a SASS listing -----------------------

def _sass(lines: list[str]) -> str:
    """A cuobjdump-style listing: one instruction per 16 bytes from address 0."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {t} ;   /* 0x0 */"
                     for i, t in enumerate(lines))


def test_sass_loops_compares_machine_code_by_variant():
    mine = [{"name": "a", "code_sha256": "1"}, {"name": "b", "code_sha256": "2"},
            {"name": "c", "code_sha256": "3"}, {"name": "e"}]
    theirs = [{"name": "a", "code_sha256": "1"}, {"name": "b", "code_sha256": "9"},
              {"name": "d", "code_sha256": "4"}, {"name": "e"}]
    got = sass_loops.compare_code(mine, theirs)
    # a row without a digest (an older record) is never called the same
    assert got == {"same": ["a"], "differs": ["b", "e"], "only_here": ["c"],
                   "only_there": ["d"]}


def test_sass_loops_compiles_with_the_flags_its_record_names(monkeypatch):
    """The census record's meta names JITMETA_NVRTC_FLAGS: its compiles use them."""
    from jitmeta.jit import compiler

    monkeypatch.setenv("JITMETA_NVRTC_FLAGS", "--Ofast-compile=min")
    monkeypatch.setattr(sass_loops, "cuobjdump", lambda: "cuobjdump-not-needed")
    seen = []

    def fake_compile(source, options):
        seen.append(options)
        raise StopIteration  # stop before the disassembly: the options are what is tested

    monkeypatch.setattr(compiler, "compile_cubin", fake_compile)
    with pytest.raises(StopIteration):
        sass_loops.main(["--format", "smxx"])
    assert seen and seen[0].extra == ("--Ofast-compile=min",)


def test_sass_loops_finds_nested_loops_and_skips_divergence_fallbacks():
    listing = _sass([
        "MOV R0, RZ",                        # 0x00
        "BRA.DIV UR4, 0x00e0",               # 0x10 to the fallback at 0xe0
        "LDG.E.128 R4, desc[UR4][R2.64]",    # 0x20 outer loop (a slab per iteration)
        "STL [R1], R4",                      # 0x30
        "LDS R5, [R6]",                      # 0x40 inner loop
        "LDL R7, [R1+0x4]",                  # 0x50
        "@P0 BRA 0x0040",                    # 0x60 closes the inner loop
        "LDG.E.128 R8, desc[UR4][R2.64]",    # 0x70
        "@P1 BRA 0x0020",                    # 0x80 closes the outer loop
        "LDG.E R9, desc[UR4][R2.64]",        # 0x90 a loop without 16-byte loads
        "@P2 BRA 0x0090",                    # 0xa0
        "EXIT",                              # 0xb0
        "BRA 0x00c0",                        # 0xc0 the end-of-kernel self loop
        "NOP",                               # 0xd0
        "SHFL.IDX PT, R0, R0, RZ, 0x1f",     # 0xe0 fallback block
        "BRA 0x0020",                        # 0xf0 its jump back: not a loop
    ])
    ins = sass_loops.parse_sass(listing)
    assert len(ins) == 16 and ins[1] == (0x10, "BRA.DIV UR4, 0x00e0")
    assert sass_loops.main_code_end(ins) == 0xE0
    got = {(lp["start"], lp["end"]): lp for lp in sass_loops.loops(ins)}
    assert set(got) == {("0x00020", "0x00080"), ("0x00040", "0x00060"),
                        ("0x00090", "0x000a0"), ("0x000c0", "0x000c0")}
    outer, inner = got[("0x00020", "0x00080")], got[("0x00040", "0x00060")]
    assert (outer["instructions"], outer["local"], outer["global_loads"],
            outer["global_loads_16B"], outer["shared_loads"]) == (7, 2, 2, 2, 1)
    assert (inner["instructions"], inner["local"], inner["global_loads_16B"]) == (3, 1, 0)
    c = sass_loops.census(ins)
    assert c["instructions"] == 16 and c["local"] == 2
    # the outer loop is the innermost one with 16-byte loads: its 2 local accesses
    assert c["local_in_slab_loops"] == [2]


def test_sass_loops_innermost_slab_loop_excludes_enclosing_ones():
    listing = _sass([
        "STL [R1], R4",                      # 0x00 outer loop: a local store, and
        "LDG.E.128 R4, desc[UR4][R2.64]",    # 0x10 inner loop with 16-byte loads
        "@P0 BRA 0x0010",                    # 0x20
        "LDG.E.128 R8, desc[UR4][R2.64]",    # 0x30
        "@P1 BRA 0x0000",                    # 0x40
        "EXIT",                              # 0x50
    ])
    c = sass_loops.census(sass_loops.parse_sass(listing))
    assert [(lp["start"], lp["local"]) for lp in c["loops"]] == [("0x00000", 1),
                                                                ("0x00010", 0)]
    assert c["local_in_slab_loops"] == [0]
