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
from jitmeta.envs import KNOBS, EnvError

REPO = Path(__file__).resolve().parents[1]

# A malformed value for every knob, and the words its error must contain.
MALFORMED = {
    "JITMETA_CACHE_DIR": ("   ", "directory"),
    "JITMETA_CACHE_MAX_BYTES": ("10GB", "integer"),
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
    "JITMETA_LOCK_TIMEOUT": ("-1", "seconds"),
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
]

# Well-formed raw values and what they parse to.
GOOD = [
    ("JITMETA_CACHE_DIR", "/tmp/jm", "/tmp/jm"),
    ("JITMETA_CACHE_DIR", "~/jm", os.path.expanduser("~/jm")),
    ("JITMETA_CACHE_MAX_BYTES", "0", 0),
    ("JITMETA_CACHE_MAX_BYTES", "1073741824", 2**30),
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

SPEC_TABLE = {"JITMETA_CACHE_DIR", "JITMETA_CACHE_MAX_BYTES", "JITMETA_OFFLINE",
              "JITMETA_DISABLE_DISK_CACHE", "JITMETA_VARIANT", "JITMETA_THREADS",
              "JITMETA_CHUNK", "JITMETA_SMEM_BUDGET", "JITMETA_ARCH", "JITMETA_NVRTC_FLAGS",
              "JITMETA_CHECK_INPUTS", "JITMETA_LOG", "JITMETA_LOCK_TIMEOUT"}


@pytest.fixture
def clean_env(monkeypatch):
    """No jitmeta variable in the environment for this test."""
    for name in list(os.environ):
        if name.startswith("JITMETA_"):
            monkeypatch.delenv(name)
    return monkeypatch


# --- every knob: malformed -> EnvError naming the variable -------------------------------

def test_spec_variables_are_all_knobs():
    assert SPEC_TABLE <= set(KNOBS)
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
            jit_build.build(code)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = "\n".join(r.getMessage() for r in records if r.levelno == logging.DEBUG)
    assert 'extern "C"' in text and code.name in text, \
        "JITMETA_LOG=debug logged no compile event with the rendered source"


# --- import has no side effects (fresh interpreters) -------------------------------------

def _run_python(code: str, env_updates: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITMETA_")}
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)


def test_import_succeeds_with_every_knob_malformed(tmp_path):
    code = (
        "import jitmeta, jitmeta.api, jitmeta.warm, jitmeta.jit.build, jitmeta.jit.cache\n"
        "import jitmeta.jit.runtime, jitmeta.impls.render, jitmeta.jit.compiler\n"
        "from jitmeta import envs\n"
        "bad = []\n"
        "for name in envs.KNOBS:\n"
        "    try:\n"
        "        envs.get(name)\n"
        "    except envs.EnvError:\n"
        "        bad.append(name)\n"
        "print('BAD', ' '.join(sorted(bad)))\n")
    env = {name: value for name, (value, _) in MALFORMED.items()}
    res = _run_python(code, env, tmp_path)
    assert res.returncode == 0, res.stderr
    bad = res.stdout.split("BAD", 1)[1].split()
    assert sorted(bad) == sorted(n for n in MALFORMED if n in KNOBS), res.stdout


_PROBE = r"""
import json, logging, sys
root_handlers = list(logging.getLogger().handlers)
# jitmeta's dependencies first: torch itself imports cuda.bindings.driver/runtime (as
# Python modules, without loading libcuda) when cuda-bindings is installed, so what
# jitmeta must not add is measured against this baseline.
import torch, jinja2, filelock, platformdirs
before = set(sys.modules)
import jitmeta, jitmeta.api, jitmeta.warm, jitmeta.jit.build, jitmeta.jit.cache
import jitmeta.jit.runtime, jitmeta.jit.compiler, jitmeta.impls.render
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
