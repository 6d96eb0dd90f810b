"""``jitmeta-cache`` (docs/design.md, README): subcommands, JSON shapes, exit codes.

Most tests call :func:`jitmeta.cache_tools.cli.main` in-process (fast); a few run
the installed console script as a real process.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from jitmeta import envs
from jitmeta.cache_tools.cli import main
from jit_support import key_for
from jitmeta.jit.cache import CUBIN, DiskCache

SUBCOMMANDS = ["warm", "ls", "info", "verify", "prune", "clear", "export", "import", "plan"]
SMALL_WARM = ["warm", "--arch", "sm_90", "--batch", "1-100", "--varlen", "no", "--format",
              "smxx", "-j", "1"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what fixtures printed (the rng seed line)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str, expect: int = 0):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == expect, err
    return json.loads(out)  # all of stdout is one JSON document


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal (for the progress-bar switch)."""

    def isatty(self) -> bool:
        return True


def test_help_lists_every_subcommand_and_knob(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for name in SUBCOMMANDS:
        assert name in out
    for knob in envs.KNOBS:
        assert knob in out
    for name in SUBCOMMANDS:
        code, out, _ = run_cli(capsys, name, "--help")
        assert code == 0 and "--json" in out and "--cache-dir" in out


def test_warm_ls_info_plan_json_shapes(cache_dir, capsys):
    first = run_json(capsys, *SMALL_WARM)
    assert set(first) >= {"compiled", "cached", "failed", "entries"}
    assert (first["compiled"], first["cached"], first["failed"]) == (1, 0, 0)
    assert len(first["entries"]) == 1 and len(first["entries"][0]) == 64
    again = run_json(capsys, *SMALL_WARM)
    assert (again["compiled"], again["cached"]) == (0, 1)
    assert again["entries"] == first["entries"]

    rows = run_json(capsys, "ls")
    assert isinstance(rows, list) and len(rows) == 1
    assert set(rows[0]) >= {"key", "variant", "arch", "bytes", "created", "last_used",
                            "nvrtc_version"}
    assert rows[0]["key"] == first["entries"][0] and rows[0]["arch"] == "sm_90"
    assert rows[0]["variant"] == "static" and rows[0]["bytes"] > 1000

    info = run_json(capsys, "info")
    assert set(info) >= {"root", "entries", "bytes", "quarantined"}
    assert info["root"] == str(cache_dir) and info["entries"] == 1
    assert info["bytes"] == rows[0]["bytes"] and info["quarantined"] == 0

    plan = run_json(capsys, "plan", "--batch", "100", "--num-sms", "132", "--arch", "sm_90")
    assert set(plan) >= {"variant", "threads", "smem_bytes", "reason", "capacity"}
    assert plan["variant"] == "static" and plan["key"] == first["entries"][0]
    big = run_json(capsys, "plan", "--batch", "16777216", "--varlen", "--num-sms", "132",
                   "--arch", "sm_90a", "--format", "sm90")
    assert big["variant"] == "chunked" and big["arch"] == "sm_90a" and big["varlen"]


def test_text_output_and_options_after_the_subcommand(cache_dir, tmp_path, capsys):
    other = tmp_path / "other"
    code, out, err = run_cli(capsys, *SMALL_WARM[:1], "--cache-dir", str(other),
                             *SMALL_WARM[1:])
    assert code == 0, err
    assert "1 compiled, 0 already cached, 0 failed" in out and str(other) in out
    code, out, _ = run_cli(capsys, "ls", "--cache-dir", str(other))
    assert code == 0 and "static" in out and "sm_90" in out and "KEY" in out
    code, out, _ = run_cli(capsys, "--cache-dir", str(other), "info")
    assert code == 0 and "entries      1" in out
    assert run_json(capsys, "info")["entries"] == 0  # --cache-dir did not leak
    code, out, _ = run_cli(capsys, "plan", "--batch", "10000", "--arch", "sm_90")
    assert code == 0 and "dynamic" in out and "reason" in out and "warm with" in out


@pytest.mark.parametrize("argv", [
    ["warm"],                                              # no --arch/--device/--manifest
    ["warm", "--arch", "sm_13"],
    ["warm", "--arch", "sm_90", "--batch", "5-1"],
    ["warm", "--arch", "sm_90", "--next-n", "0"],
    ["warm", "--arch", "sm_90", "--device", "0"],          # mutually exclusive
    ["warm", "--arch", "sm_90", "--varlen", "maybe"],
    ["plan", "--batch", "10"],                             # needs --arch or --device
    ["plan", "--batch", "8", "--arch", "sm_90", "--varlen", "--next-n", "2"],
    ["prune"],
    ["prune", "--max-bytes", "lots"],
    ["bogus"],
    [],
])
def test_usage_errors_exit_2(cache_dir, capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.strip()


def test_read_only_commands_create_nothing(cache_dir, tmp_path, capsys):
    for argv in (["info"], ["ls"], ["verify"], ["prune", "--older-than", "1"],
                 ["clear", "--yes"]):
        assert run_cli(capsys, *argv)[0] == 0, argv
    # exporting nothing is a failure that says so, and writes no bundle
    code, _, err = run_cli(capsys, "export", str(tmp_path / "empty.tgz"))
    assert code == 1 and "no valid entries" in err and "nothing written" in err
    assert not (tmp_path / "empty.tgz").exists()
    assert not cache_dir.exists()
    try:
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        gpus = 0
    code, _, err = run_cli(capsys, "warm", "--device", str(gpus))  # one past the last
    assert code == 1 and "CUDA device" in err and not cache_dir.exists()


def test_failures_exit_1(cache_dir, tmp_path, capsys):
    code, out, err = run_cli(capsys, "import", str(tmp_path / "missing.tgz"))
    assert code == 1 and "not a readable bundle" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run_cli(capsys, "--cache-dir", str(blocker / "cache"), *SMALL_WARM)
    assert code == 1 and "not writable" in err
    obj = run_json(capsys, "import", str(tmp_path / "missing.tgz"), expect=1)
    assert obj["exit_code"] == 1 and "not a readable bundle" in obj["error"]


def test_warm_reports_compile_failures(cache_dir, capsys):
    with envs.override(JITMETA_NVRTC_FLAGS="--no-such-nvrtc-flag"):
        res = run_json(capsys, *SMALL_WARM, expect=1)
    assert res["failed"] == 1 and res["compiled"] == 0
    assert "NVRTC" in res["failures"][0]["error"]


def test_warm_compiles_even_where_runtime_is_offline(cache_dir, capsys):
    with envs.override(JITMETA_OFFLINE="1", JITMETA_DISABLE_DISK_CACHE="1"):
        res = run_json(capsys, *SMALL_WARM)
    assert res["compiled"] == 1
    assert len(list(DiskCache(cache_dir).keys())) == 1


def test_warm_refuses_a_shared_directory(cache_dir, capsys):
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    code, _, err = run_cli(capsys, *SMALL_WARM)
    assert code == 1 and "writable by other users" in err
    with envs.override(JITMETA_ALLOW_SHARED_CACHE="1"):
        assert run_json(capsys, *SMALL_WARM)["compiled"] == 1


def test_progress_bar_only_on_a_terminal(cache_dir, capsys, monkeypatch):
    argv = ["warm", "--arch", "sm_90", "--batch", "1-2000", "--varlen", "no", "--format",
            "smxx", "-j", "2"]
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    assert main(argv) == 0
    assert "cubin" not in plain.getvalue()
    capsys.readouterr()
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(argv + ["--json"]) == 0  # cached now; the bar still shows progress
    assert "warm" in tty.getvalue() and "cubin" in tty.getvalue()
    out = capsys.readouterr().out
    assert json.loads(out)["cached"] == 2  # stdout stays pure JSON


@pytest.mark.parametrize("how", ["bitflip", "truncate", "swap"])
def test_verify_finds_corruption_and_quarantines(populated_cache, golden_codes, capsys,
                                                 how, rng):
    cache = populated_cache
    clean = run_json(capsys, "verify")
    assert clean["checked"] == 3 and clean["bad"] == []
    key = key_for(golden_codes[0][0])[0]
    cubin = cache.entry_dir(key) / CUBIN
    data = bytearray(cubin.read_bytes())
    if how == "bitflip":
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        data = data[:rng.randrange(1, len(data))]
    else:
        data = bytearray((cache.entry_dir(key_for(golden_codes[1][0])[0]) / CUBIN)
                         .read_bytes())
    cubin.write_bytes(bytes(data))
    res = run_json(capsys, "verify", expect=1)
    assert res["checked"] == 3 and res["ok"] == 2
    assert [b["key"] for b in res["bad"]] == [key] and res["bad"][0]["reason"]
    assert res["bad"][0]["quarantined_to"]
    assert cache.quarantined() == 1 and key not in set(cache.keys())
    again = run_json(capsys, "verify")
    assert again["checked"] == 2 and again["bad"] == []
    assert run_json(capsys, "info")["quarantined"] == 1


def test_verify_flags_unexpected_files_and_bad_trust(populated_cache, golden_codes, capsys):
    cache = populated_cache
    key = key_for(golden_codes[2][0])[0]
    (cache.entry_dir(key) / "extra.so").write_bytes(b"x")
    res = run_json(capsys, "verify", expect=1)
    assert "unexpected files" in res["bad"][0]["reason"]
    os.chmod(cache.entries_dir, 0o777)
    res = run_json(capsys, "verify", expect=1)
    assert not res["trusted"] and "writable by other users" in res["trust_problem"]


def test_prune_by_size_and_age(populated_cache, capsys):
    cache = populated_cache
    keys = sorted(cache.keys())
    now = time.time()
    for age, key in zip((3, 2, 1), keys):  # days since last use
        cache.touch(key, now - age * 86400)
    sizes = {k: cache.entry_bytes(k) for k in keys}
    res = run_json(capsys, "prune", "--older-than", "2.5")
    assert res["removed"] == [keys[0]] and res["bytes_freed"] == sizes[keys[0]]
    keep = sizes[keys[2]] + 10
    res = run_json(capsys, "prune", "--max-bytes", str(keep))
    assert res["removed"] == [keys[1]] and res["entries"] == 1
    res = run_json(capsys, "prune", "--max-bytes", "1K")
    assert res["removed"] == [keys[2]] and res["bytes"] == 0


def test_clear_asks_unless_yes(populated_cache, capsys, monkeypatch):
    cache = populated_cache
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal
    code, _, err = run_cli(capsys, "clear")
    assert code == 2 and "--yes" in err and len(list(cache.keys())) == 3
    tty_no = _Terminal("n\n")
    monkeypatch.setattr(sys, "stdin", tty_no)
    code, _, err = run_cli(capsys, "clear")
    assert code == 1 and "Remove 3 entries" in err and len(list(cache.keys())) == 3
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    code, out, _ = run_cli(capsys, "clear")
    assert code == 0 and list(cache.keys()) == []
    assert run_json(capsys, "clear", "--yes")["removed"] == 0


def test_console_script_is_a_real_program(populated_cache, tmp_path):
    exe = shutil.which("jitmeta-cache") or shutil.which(
        "jitmeta-cache", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "jitmeta.cache_tools.cli"]
    env = dict(os.environ, JITMETA_CACHE_DIR=str(populated_cache.root))
    proc = subprocess.run(cmd + ["ls", "--json"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 3
    proc = subprocess.run(cmd + ["clear"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--yes" in proc.stderr and proc.stdout == ""


def test_warm_for_an_arch_does_not_load_torch(tmp_path):
    # a build step on a machine with no GPU: planning and compiling need no PyTorch
    # (loading it is about a second of every warm)
    code = ("import sys; from jitmeta.cache_tools.cli import main; "
            f"rc = main({SMALL_WARM + ['--json']!r}); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); sys.exit(rc)")
    env = dict(os.environ, JITMETA_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report, _, last = proc.stdout.rstrip().rpartition("\n")
    assert json.loads(report)["compiled"] == 1
    assert last == "NO-TORCH", proc.stdout
