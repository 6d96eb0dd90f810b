"""``jitmeta.envs``: every knob typed and validated, ``override`` scoping, and the
promise that importing jitmeta has no side effects (no env read, no directory, no
CUDA library, no logging configuration). Import-time checks run in fresh
subprocesses, since this test process has long imported jitmeta.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import jitmeta
from jitmeta import envs
from jitmeta.envs import KNOBS, EnvError, Knobs

REPO = Path(__file__).resolve().parents[1]

# A malformed value for every knob, and the words its error must contain.
MALFORMED = {
    "JITMETA_CACHE_DIR": ("   ", "directory"),
    "JITMETA_CACHE_MAX_BYTES": ("10 gigs", "size"),
    "JITMETA_OFFLINE": ("maybe", "0/1"),
    "JITMETA_DISABLE_DISK_CACHE": ("2", "0/1"),
    "JITMETA_VARIANT": ("huge", "static, dynamic, chunked"),
    "JITMETA_THREADS": ("16", "integer >= 32"),
    "JITMETA_CHUNK": ("lots", "integer"),
    "JITMETA_SMEM_BUDGET": ("48K", "integer"),
    "JITMETA_ARCH": ("gfx90a", "sm_90"),
    "JITMETA_NVRTC_FLAGS": ("-DX='unterminated", "quot"),
    "JITMETA_CHECK_INPUTS": ("sure", "0/1"),
    "JITMETA_LOG": ("verbose", "debug"),
    "JITMETA_ALLOW_SHARED_CACHE": ("perhaps", "0/1"),
    "JITMETA_MISS_MANIFEST": ("  ", "path"),
    "JITMETA_LOCK_TIMEOUT": ("soon", "seconds"),
}

# More malformed values: (name, value)
MORE_MALFORMED = [
    ("JITMETA_CACHE_MAX_BYTES", "-1"), ("JITMETA_THREADS", "abc"),
    ("JITMETA_THREADS", "0"), ("JITMETA_THREADS", "33"), ("JITMETA_THREADS", "2048"),
    ("JITMETA_CHUNK", "0"), ("JITMETA_CHUNK", "1.5"),
    ("JITMETA_SMEM_BUDGET", "0"), ("JITMETA_SMEM_BUDGET", "-4096"),
    ("JITMETA_ARCH", "sm_999"), ("JITMETA_ARCH", "sm_90x"), ("JITMETA_ARCH", ""),
    ("JITMETA_VARIANT", ""), ("JITMETA_VARIANT", "static,dynamic"),
    ("JITMETA_OFFLINE", "11"), ("JITMETA_LOG", "trace"),
    # sizes: whole numbers of bytes with an optional binary unit
    ("JITMETA_CACHE_MAX_BYTES", "1.5G"), ("JITMETA_CACHE_MAX_BYTES", "G"),
    ("JITMETA_CACHE_MAX_BYTES", "12P"), ("JITMETA_CACHE_MAX_BYTES", "-1G"),
    # the chunk: a power of two from 32 to 65536
    ("JITMETA_CHUNK", "3000"), ("JITMETA_CHUNK", "16"), ("JITMETA_CHUNK", "131072"),
    ("JITMETA_CHUNK", "12000"),
    # seconds: finite, >= 0
    ("JITMETA_LOCK_TIMEOUT", "-1"), ("JITMETA_LOCK_TIMEOUT", "inf"),
    ("JITMETA_LOCK_TIMEOUT", "nan"), ("JITMETA_LOCK_TIMEOUT", ""),
]

# Well-formed raw values and what they parse to.
GOOD = [
    ("JITMETA_CACHE_DIR", "/tmp/jm", "/tmp/jm"),
    ("JITMETA_CACHE_DIR", "~/jm", os.path.expanduser("~/jm")),
    ("JITMETA_CACHE_MAX_BYTES", "0", 0),
    ("JITMETA_CACHE_MAX_BYTES", "1073741824", 2**30),
    ("JITMETA_CACHE_MAX_BYTES", "1G", 2**30), ("JITMETA_CACHE_MAX_BYTES", "512M", 2**29),
    ("JITMETA_CACHE_MAX_BYTES", "64k", 2**16), ("JITMETA_CACHE_MAX_BYTES", "2GiB", 2**31),
    ("JITMETA_CACHE_MAX_BYTES", "10GB", 10 * 2**30), ("JITMETA_CACHE_MAX_BYTES", "1t", 2**40),
    ("JITMETA_CHUNK", "32", 32), ("JITMETA_CHUNK", "65536", 65536),
    ("JITMETA_LOCK_TIMEOUT", "0", 0.0), ("JITMETA_LOCK_TIMEOUT", "2.5", 2.5),
    ("JITMETA_OFFLINE", "1", True), ("JITMETA_OFFLINE", "0", False),
    ("JITMETA_OFFLINE", "yes", True), ("JITMETA_OFFLINE", "Off", False),
    ("JITMETA_DISABLE_DISK_CACHE", "true", True),
    ("JITMETA_VARIANT", "Chunked", "chunked"), ("JITMETA_VARIANT", " static ", "static"),
    ("JITMETA_THREADS", "256", 256), ("JITMETA_CHUNK", "4096", 4096),
    ("JITMETA_SMEM_BUDGET", "40000", 40000),
    ("JITMETA_ARCH", "sm_90a", "sm_90a"), ("JITMETA_ARCH", "100", "sm_100"),
    ("JITMETA_ARCH", "compute_90", "sm_90"),
    ("JITMETA_NVRTC_FLAGS", "-lineinfo '-DA=b c'", ("-lineinfo", "-DA=b c")),
    ("JITMETA_NVRTC_FLAGS", "", ()),
    ("JITMETA_CHECK_INPUTS", "1", True), ("JITMETA_LOG", "DEBUG", "debug"),
    ("JITMETA_ALLOW_SHARED_CACHE", "0", False),
]

DOCUMENTED_KNOBS = {"JITMETA_CACHE_DIR", "JITMETA_CACHE_MAX_BYTES", "JITMETA_OFFLINE",
              "JITMETA_DISABLE_DISK_CACHE", "JITMETA_VARIANT", "JITMETA_THREADS",
              "JITMETA_CHUNK", "JITMETA_SMEM_BUDGET", "JITMETA_ARCH", "JITMETA_NVRTC_FLAGS",
              "JITMETA_CHECK_INPUTS", "JITMETA_LOG", "JITMETA_ALLOW_SHARED_CACHE",
                    "JITMETA_MISS_MANIFEST", "JITMETA_LOCK_TIMEOUT"}


@pytest.fixture
def clean_env(monkeypatch):
    """No jitmeta variable in the environment for this test."""
    for name in list(os.environ):
        if name.startswith("JITMETA_"):
            monkeypatch.delenv(name)
    return monkeypatch


# --- every knob: malformed -> EnvError naming the variable -------------------------------

def test_documented_variables_are_all_knobs():
    assert DOCUMENTED_KNOBS == set(KNOBS)
    for name, knob in KNOBS.items():
        assert knob.name == name and knob.help.strip(), name
    assert [n for n, _ in envs.describe()] == list(KNOBS)


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_malformed_env_value_raises_naming_variable(name, clean_env):
    assert name in MALFORMED, f"add a malformed example for the new knob {name}"
    value, expected_words = MALFORMED[name]
    clean_env.setenv(name, value)
    with pytest.raises(EnvError) as info:
        envs.get(name)
    msg = str(info.value)
    assert f"{name}={value!r}" in msg, msg
    assert expected_words in msg, msg
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_malformed_override_string_raises_naming_variable(name, clean_env):
    assert name in MALFORMED, f"add a malformed example for the new knob {name}"
    value, _ = MALFORMED[name]
    with envs.override(**{name: value}):
        with pytest.raises(EnvError, match=re.escape(name)):
            envs.get(name)
    assert envs.get(name) == KNOBS[name].default


@pytest.mark.parametrize("name,value", MORE_MALFORMED)
def test_more_malformed_values(name, value, clean_env):
    clean_env.setenv(name, value)
    with pytest.raises(EnvError, match=re.escape(f"{name}={value!r}")):
        envs.get(name)


@pytest.mark.parametrize("name,value,parsed", GOOD)
def test_good_values_parse(name, value, parsed, clean_env):
    clean_env.setenv(name, value)
    assert envs.get(name) == parsed
    assert envs.raw(name) == value
    clean_env.delenv(name)
    with envs.override(**{name: value}):
        assert envs.get(name) == parsed
        assert envs.raw(name) == value


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_unset_gives_default(name, clean_env):
    assert envs.get(name) == KNOBS[name].default
    assert envs.raw(name) is None


def test_environment_is_read_at_each_access(clean_env):
    """No value is cached: changing the environment later is seen at once."""
    assert jitmeta.plan(10, arch="sm_90").variant == "static"
    clean_env.setenv("JITMETA_VARIANT", "chunked")
    assert jitmeta.plan(10, arch="sm_90").variant == "chunked"
    clean_env.setenv("JITMETA_VARIANT", "dynamic")
    assert jitmeta.plan(10, arch="sm_90").variant == "dynamic"
    clean_env.delenv("JITMETA_VARIANT")
    assert jitmeta.plan(10, arch="sm_90").variant == "static"


def test_only_envs_reads_jitmeta_variables():
    """Every JITMETA_* name the library mentions is a knob; only envs.py reads os.environ
    for them."""
    names, readers = set(), []
    for path in list((REPO / "jitmeta").rglob("*.py")) + list((REPO / "cache_tools")
                                                              .rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"\bJITMETA_[A-Z_]+[A-Z]\b", text))
        if path.name != "envs.py":
            for line in text.splitlines():
                if re.search(r"environ|getenv", line) and "JITMETA_" in line:
                    readers.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert names <= set(KNOBS), f"undeclared variables: {sorted(names - set(KNOBS))}"
    assert not readers, readers


# --- override ----------------------------------------------------------------------------

def test_override_scoping(clean_env):
    assert envs.get("JITMETA_CHUNK") is None
    with envs.override(JITMETA_CHUNK="1024"):
        assert envs.get("JITMETA_CHUNK") == 1024
    assert envs.get("JITMETA_CHUNK") is None


def test_override_beats_environment_and_none_means_default(clean_env):
    clean_env.setenv("JITMETA_VARIANT", "chunked")
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert envs.get("JITMETA_VARIANT") == "dynamic"
        assert jitmeta.plan(10, arch="sm_90").variant == "dynamic"
    with envs.override(JITMETA_VARIANT=None):
        assert envs.get("JITMETA_VARIANT") is None
        assert jitmeta.plan(10, arch="sm_90").variant == "static"
    assert envs.get("JITMETA_VARIANT") == "chunked"
    # a malformed environment value is hidden by an override, and back afterwards
    clean_env.setenv("JITMETA_VARIANT", "bogus")
    with envs.override(JITMETA_VARIANT="dynamic"):
        assert envs.get("JITMETA_VARIANT") == "dynamic"
    with pytest.raises(EnvError):
        envs.get("JITMETA_VARIANT")


def test_override_nesting(clean_env):
    with envs.override(JITMETA_THREADS=512, JITMETA_CHUNK="2048"):
        assert (envs.get("JITMETA_THREADS"), envs.get("JITMETA_CHUNK")) == (512, 2048)
        with envs.override(JITMETA_THREADS="128"):
            assert (envs.get("JITMETA_THREADS"), envs.get("JITMETA_CHUNK")) == (128, 2048)
            with envs.override(JITMETA_CHUNK=None):
                assert envs.get("JITMETA_CHUNK") is None
                assert envs.get("JITMETA_THREADS") == 128
            assert envs.get("JITMETA_CHUNK") == 2048
        assert envs.get("JITMETA_THREADS") == 512
    assert envs.get("JITMETA_THREADS") is None and envs.get("JITMETA_CHUNK") is None


def test_override_restored_after_exception(clean_env):
    with pytest.raises(RuntimeError):
        with envs.override(JITMETA_OFFLINE="1"):
            assert envs.get("JITMETA_OFFLINE") is True
            raise RuntimeError("boom")
    assert envs.get("JITMETA_OFFLINE") is False


def test_override_exit_out_of_order(clean_env):
    outer = envs.override(JITMETA_CHUNK=1024)
    inner = envs.override(JITMETA_CHUNK=2048)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert envs.get("JITMETA_CHUNK") == 2048
    inner.__exit__(None, None, None)
    assert envs.get("JITMETA_CHUNK") is None


def test_override_unknown_name(clean_env):
    with pytest.raises(KeyError, match="JITMETA_VARIANTS"):
        with envs.override(JITMETA_VARIANTS="static"):
            pass  # pragma: no cover
    assert envs.get("JITMETA_VARIANT") is None


def test_override_is_process_wide(clean_env):
    seen = []
    with envs.override(JITMETA_ARCH="sm_90a"):
        t = threading.Thread(target=lambda: seen.append(envs.get("JITMETA_ARCH")))
        t.start()
        t.join()
    assert seen == ["sm_90a"]


def test_override_does_not_touch_os_environ(clean_env):
    with envs.override(JITMETA_VARIANT="static", JITMETA_CACHE_DIR="/tmp/x"):
        assert "JITMETA_VARIANT" not in os.environ
        assert "JITMETA_CACHE_DIR" not in os.environ
    assert not [n for n in os.environ if n.startswith("JITMETA_")]


def test_typed_override_values_pass_through(clean_env):
    with envs.override(JITMETA_NVRTC_FLAGS=("-lineinfo",), JITMETA_OFFLINE=True):
        assert envs.get("JITMETA_NVRTC_FLAGS") == ("-lineinfo",)
        assert envs.get("JITMETA_OFFLINE") is True


def test_log_knob_sets_the_jitmeta_logger_level(clean_env, tmp_path, fresh_jit):
    """JITMETA_LOG=debug: a compile is logged with its rendered source, without the
    application configuring the 'jitmeta' logger's level itself."""
    from jitmeta import kernels
    from jitmeta.heuristics.plan import CodeSpec

    jit_build = fresh_jit  # conftest: empty in-process cubin memory around the test
    logger = logging.getLogger("jitmeta")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    old_level = logger.level
    logger.setLevel(logging.NOTSET)  # whatever level is in effect must come from jitmeta
    logger.addHandler(handler)
    # a configuration no other test builds, so the build cannot be a memory hit
    code = CodeSpec("static", False, "smxx", 8, 96, 1024, "sm_90")
    try:
        with envs.override(JITMETA_LOG="debug", JITMETA_DISABLE_DISK_CACHE="1",
                           JITMETA_CACHE_DIR=str(tmp_path / "cache")):
            jit_build.build(kernels.source(code), envs.snapshot())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = "\n".join(r.getMessage() for r in records if r.levelno == logging.DEBUG)
    assert 'extern "C"' in text and code.name in text, \
        "JITMETA_LOG=debug logged no compile event with the rendered source"


# --- the knob snapshot ----------------------------------------------------------------------

def test_snapshot_holds_every_knob_parsed(clean_env):
    clean_env.setenv("JITMETA_CHUNK", "2048")
    clean_env.setenv("JITMETA_CACHE_MAX_BYTES", "512M")
    with envs.override(JITMETA_VARIANT="Chunked", JITMETA_LOCK_TIMEOUT="7.5"):
        snap = envs.snapshot()
        for name in KNOBS:
            assert snap.get(name) == envs.get(name), name
    assert (snap.chunk, snap.cache_max_bytes, snap.variant, snap.lock_timeout) \
        == (2048, 2**29, "chunked", 7.5)
    with pytest.raises(KeyError, match="JITMETA_NOPE"):
        snap.get("JITMETA_NOPE")
    with pytest.raises(Exception):  # frozen: passed around, never changed
        snap.chunk = 4096


def test_snapshot_is_one_object_per_set_of_values(clean_env):
    first = envs.snapshot()
    assert envs.snapshot() is first
    clean_env.setenv("JITMETA_THREADS", "256")
    second = envs.snapshot()
    assert second is not first and second.threads == 256
    clean_env.delenv("JITMETA_THREADS")
    assert envs.snapshot() is first  # the same raw values: the same object again
    with envs.override(JITMETA_THREADS="256"):
        assert envs.snapshot().threads == 256
    # compared by identity: equal values from another path are another object
    assert Knobs.from_values() is not first and Knobs.from_values() != first


def test_snapshot_raises_for_any_malformed_knob(clean_env):
    """Whichever knob the caller needs: a typo is reported at the first call."""
    for name, (value, words) in MALFORMED.items():
        clean_env.setenv(name, value)
        with pytest.raises(EnvError, match=re.escape(f"{name}={value!r}")):
            envs.snapshot()
        with pytest.raises(EnvError, match=name):  # never cached
            envs.snapshot()
        clean_env.delenv(name)
    envs.snapshot()


def test_knobs_from_values(clean_env):
    k = Knobs.from_values(JITMETA_CHUNK="1024", JITMETA_THREADS=512,
                          JITMETA_NVRTC_FLAGS="-lineinfo")
    assert (k.chunk, k.threads, k.nvrtc_flags, k.variant) == (1024, 512, ("-lineinfo",), None)
    assert Knobs.from_values().variant is None and Knobs().variant is None
    clean_env.setenv("JITMETA_VARIANT", "dynamic")
    assert Knobs().lock_timeout == Knobs.from_values().lock_timeout == 60.0
    with pytest.raises(EnvError, match="JITMETA_CHUNK"):
        Knobs.from_values(JITMETA_CHUNK="3000")
    with pytest.raises(KeyError, match="JITMETA_CHUNKS"):
        Knobs.from_values(JITMETA_CHUNKS=1024)
    assert envs.get("JITMETA_VARIANT") == "dynamic"  # no override left behind


def test_knobs_from_values_ignores_the_environment(clean_env):
    clean_env.setenv("JITMETA_VARIANT", "dynamic")
    assert Knobs.from_values(JITMETA_CHUNK=1024).variant is None


@pytest.mark.parametrize("text,value", [
    ("0", 0), ("1048576", 2**20), ("1k", 1024), ("1K", 1024), ("64kb", 2**16),
    ("512M", 2**29), ("512MiB", 2**29), ("1G", 2**30), (" 2g ", 2**31), ("1T", 2**40),
])
def test_parse_size(text, value):
    assert envs.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "1.5G", "-1", "1 G B", "ten", "1P", "0x10"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="size"):
        envs.parse_size(text)


# --- import has no side effects (fresh interpreters) -------------------------------------

def _run_python(code: str, env_updates: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITMETA_")}
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)


def test_import_succeeds_with_every_knob_malformed(tmp_path):
    code = (
        "import jitmeta, jitmeta.api, jitmeta.warmup, jitmeta.jit.build, jitmeta.jit.cache\n"
        "import jitmeta.jit.runtime, jitmeta.jit.render, jitmeta.jit.compiler\n"
        "import jitmeta.kernels, jitmeta.dispatch, jitmeta.validate, jitmeta.ops\n"
        "from jitmeta import envs\n"
        "bad = []\n"
        "for name in envs.KNOBS:\n"
        "    try:\n"
        "        envs.get(name)\n"
        "    except envs.EnvError:\n"
        "        bad.append(name)\n"
        "try:\n"
        "    envs.snapshot()\n"
        "except envs.EnvError as exc:\n"
        "    print('SNAPSHOT', str(exc).split('=')[0].split()[-1])\n"
        "print('BAD', ' '.join(sorted(bad)))\n")
    env = {name: value for name, (value, _) in MALFORMED.items()}
    res = _run_python(code, env, tmp_path)
    assert res.returncode == 0, res.stderr
    bad = res.stdout.split("BAD", 1)[1].split()
    assert sorted(bad) == sorted(n for n in MALFORMED if n in KNOBS), res.stdout
    # the first call's snapshot parses them all and names a malformed one
    assert res.stdout.split("SNAPSHOT", 1)[1].split()[0] in MALFORMED, res.stdout


_PROBE = r"""
import json, logging, sys
root_handlers = list(logging.getLogger().handlers)
# jitmeta's dependencies first: torch itself imports cuda.bindings.driver/runtime (as
# Python modules, without loading libcuda) when cuda-bindings is installed, so what
# jitmeta must not add is measured against this baseline.
import torch, jinja2, filelock, platformdirs
before = set(sys.modules)
import jitmeta, jitmeta.api, jitmeta.warmup, jitmeta.jit.build, jitmeta.jit.cache
import jitmeta.jit.runtime, jitmeta.jit.compiler, jitmeta.jit.render, jitmeta.dispatch
maps = ""
try:
    with open("/proc/self/maps") as f:
        maps = f.read()
except OSError:
    pass
lg = logging.getLogger("jitmeta")
print(json.dumps({
    "cuda_modules_added": sorted(m for m in set(sys.modules) - before
                                 if m == "cuda" or m.startswith("cuda.")),
    "nvrtc_modules": sorted(m for m in sys.modules if "nvrtc" in m),
    "libs": sorted({l.split("/")[-1] for l in maps.splitlines()
                    if "libnvrtc" in l or "libcuda.so" in l or "libcudart" in l}),
    "jitmeta_handlers": len(lg.handlers),
    "jitmeta_level": lg.level,
    "root_handlers_changed": logging.getLogger().handlers != root_handlers,
}))
"""


def test_import_creates_nothing_and_loads_no_cuda(tmp_path):
    home = tmp_path / "home"
    xdg = tmp_path / "xdg-cache"
    cwd = tmp_path / "cwd"
    for d in (home, xdg, cwd):
        d.mkdir()
    cache_dir = tmp_path / "jitmeta-cache"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(xdg),
           "XDG_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JITMETA_CACHE_DIR": str(cache_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    res = _run_python(_PROBE, env, cwd)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", f"import wrote to stderr: {res.stderr}"
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(res.stdout.strip().splitlines()) == 1, f"import printed: {res.stdout}"
    for d in (home, xdg, cwd):
        assert list(d.iterdir()) == [], f"import created {list(d.rglob('*'))}"
    assert not cache_dir.exists() and not (tmp_path / "runtime").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "home", "xdg-cache"]
    assert report["cuda_modules_added"] == [], report
    assert report["nvrtc_modules"] == [], report
    assert report["libs"] == [], report
    assert report["jitmeta_handlers"] == 0 and report["jitmeta_level"] == logging.NOTSET
    assert report["root_handlers_changed"] is False


def test_import_without_cache_dir_creates_nothing(tmp_path):
    """Default cache root (platformdirs under XDG_CACHE_HOME): still nothing at import."""
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    xdg.mkdir()
    res = _run_python(
        "import jitmeta; from jitmeta import envs; print(envs.get('JITMETA_CACHE_DIR'))",
        {"HOME": str(home), "XDG_CACHE_HOME": str(xdg), "PYTHONDONTWRITEBYTECODE": "1"},
        home)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "None"
    assert list(home.iterdir()) == [] and list(xdg.iterdir()) == []
