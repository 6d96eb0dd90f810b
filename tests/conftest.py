"""Shared fixtures.

Cache fixtures (used by test_cache.py, test_cli.py, test_bundle.py):

* ``fresh_jit``   — empties jitmeta's in-process cubin memory and counters around a test.
* ``cache_dir``   — a fresh cache root under ``tmp_path``, made the active
  ``JITMETA_CACHE_DIR`` (through ``envs.override``) for the test.
* ``golden_codes`` / ``golden_cache`` — three small configurations compiled once per
  session; ``populated_cache`` copies them into the test's ``cache_dir`` (no compile).
* ``two_devices`` — limits of sm_90 (132 SMs) and sm_80 (108 SMs) as CUDA devices 0 and
  1 in ``jitmeta.dispatch``'s per-device table: a mixed host, without a GPU.
* ``sm90``        — the planner's limits of the sm_90 arch table (132 SMs), no GPU.
* ``rng``         — a ``random.Random`` whose seed is printed (shown on failure) and can
  be fixed with ``JITMETA_TEST_SEED``.
* ``run_python``  — runs a Python snippet in a real child process of this interpreter.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap
import time

import pytest


@pytest.fixture(scope="module", autouse=True)
def _log_module_seed(request):
    """A module that defines SEED_NOTE has its seed shown on the terminal every run
    (and in the captured output of a failure), so any random failure reproduces."""
    note = getattr(request.module, "SEED_NOTE", None)
    if note is None:
        return
    line = f"{request.module.__name__} random seed: {note}"
    print(line)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)


@pytest.fixture
def fresh_jit():
    from jitmeta.jit import build as jit_build

    jit_build.reset_stats(clear_memory=True)
    yield jit_build
    jit_build.reset_stats(clear_memory=True)


@pytest.fixture
def cache_dir(tmp_path, fresh_jit):
    from jitmeta import envs

    root = tmp_path / "cache"
    with envs.override(JITMETA_CACHE_DIR=str(root)):
        yield root


def _golden_plans():
    from jitmeta.envs import Knobs
    from jitmeta.heuristics.arch import limits_for_arch
    from jitmeta.kernels import plan

    lim, knobs = limits_for_arch("sm_90", 132), Knobs()  # the defaults, whatever the env
    return [plan(100, 1, False, 132, 256, "smxx", lim, knobs),      # static, dense
            plan(100, 1, True, 132, 256, "smxx", lim, knobs),       # static, varlen
            plan(70000, 1, False, 132, 256, "smxx", lim, knobs)]    # chunked: cooperative


@pytest.fixture(scope="session")
def golden_codes():
    """[(code, plan)] of the three golden configurations."""
    return [(p.code, p) for p in _golden_plans()]


@pytest.fixture(scope="session")
def golden_cache(tmp_path_factory, golden_codes):
    """A cache root holding the golden entries (compiled once per session)."""
    from jitmeta import envs, kernels
    from jitmeta.jit import build as jit_build
    from jitmeta.jit.cache import DiskCache

    root = tmp_path_factory.mktemp("golden") / "cache"
    cache = DiskCache(root)
    jit_build.reset_stats(clear_memory=True)
    with envs.override(JITMETA_CACHE_DIR=str(root)):
        knobs = envs.snapshot()
        for code, p in golden_codes:
            jit_build.build(kernels.source(code), knobs, cache=cache, example=p.to_dict())
    jit_build.reset_stats(clear_memory=True)
    return root


@pytest.fixture
def populated_cache(cache_dir, golden_cache):
    """``cache_dir`` filled with a copy of the golden entries; returns its DiskCache."""
    from jitmeta.jit.build import cache_for_root

    shutil.copytree(golden_cache, cache_dir, symlinks=True)
    return cache_for_root(cache_dir)


@pytest.fixture
def two_devices(monkeypatch):
    from jitmeta import dispatch
    from jitmeta.heuristics.arch import limits_for_arch

    monkeypatch.setitem(dispatch._limits, 0, limits_for_arch("sm_90", 132))
    monkeypatch.setitem(dispatch._limits, 1, limits_for_arch("sm_80", 108))
    return dispatch._limits


@pytest.fixture
def sm90():
    from jitmeta.heuristics.arch import limits_for_arch

    return limits_for_arch("sm_90")


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("JITMETA_TEST_SEED") or time.time_ns() % (1 << 32))
    print(f"[{request.node.name}] random seed {seed} (rerun with JITMETA_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture
def run_python():
    """run_python(code, env=None, timeout=120, **popen) -> CompletedProcess (text)."""

    def run(code: str, env: dict | None = None, timeout: float = 120, prefix=(), **kw):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)],
                              env=full_env, capture_output=True, text=True,
                              timeout=timeout, **kw)

    return run

