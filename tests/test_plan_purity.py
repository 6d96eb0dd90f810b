"""The layering the planner and the JIT layer promise.

* The pure planner (``jitmeta.heuristics.plan.plan``) is a function of its arguments: it
  reads no environment; knobs reach it only as a :class:`~jitmeta.envs.Knobs` value.
* Nothing under ``jitmeta/heuristics`` reads ``os.environ`` or a ``jitmeta.envs``
  getter (it may import the ``Knobs`` type).
* ``jitmeta/jit`` is kernel-agnostic: it imports nothing from ``jitmeta.heuristics``,
  ``jitmeta.kernels``, ``jitmeta.api`` or ``jitmeta.dispatch``.

The source scans are checked on small hand-written sources too, so that a scanner that
sees nothing cannot pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jitmeta import envs, kernels
from jitmeta.envs import Knobs
from jitmeta.heuristics.plan import codes_for_batches as pure_codes

from plan_support import LAYOUT, pure_plan, run_plan

PACKAGE = Path(__file__).resolve().parents[1] / "jitmeta"

# --- the pure planner reads no environment -------------------------------------------------


@pytest.fixture
def no_jitmeta_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("JITMETA_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_pure_planner_ignores_the_environment(sm90, no_jitmeta_env):
    base = pure_plan(10, sm90, Knobs())
    assert (base.variant, base.code.capacity, base.threads) == ("static", 1024, 256)
    no_jitmeta_env.setenv("JITMETA_VARIANT", "chunked")
    no_jitmeta_env.setenv("JITMETA_THREADS", "512")
    no_jitmeta_env.setenv("JITMETA_ARCH", "sm_90a")
    # the snapshot path sees them ...
    seen = run_plan(10, sm90)
    assert (seen.variant, seen.threads, seen.code.arch) == ("chunked", 512, "sm_90a")
    # ... the pure planner, given the defaults, does not
    assert pure_plan(10, sm90, Knobs()) == base
    with envs.override(JITMETA_VARIANT="dynamic", JITMETA_SMEM_BUDGET=100):
        assert pure_plan(10, sm90, Knobs()) == base
        assert run_plan(10, sm90, knobs=Knobs()) == base  # an explicit snapshot wins too
    # a malformed value: the snapshot raises, the pure planner never reads it
    no_jitmeta_env.setenv("JITMETA_THREADS", "lots")
    with pytest.raises(envs.EnvError, match="JITMETA_THREADS"):
        run_plan(10, sm90)
    assert pure_plan(10, sm90, Knobs()) == base
    want = pure_codes([(1, 2**24)], 1, False, 132, 256, "smxx", sm90, Knobs(), LAYOUT[False])
    no_jitmeta_env.delenv("JITMETA_THREADS")
    no_jitmeta_env.delenv("JITMETA_VARIANT")
    no_jitmeta_env.delenv("JITMETA_ARCH")
    assert kernels.codes_for_batches([(1, 2**24)], 1, False, 132, 256, "smxx", sm90) == want


def test_explicit_knobs_equal_the_same_values_from_the_environment(sm90, no_jitmeta_env):
    values = {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": "2048", "JITMETA_THREADS": "256"}
    explicit = pure_plan(70000, sm90, Knobs.from_values(**values), varlen=True)
    for name, value in values.items():
        no_jitmeta_env.setenv(name, value)
    assert run_plan(70000, sm90, varlen=True) == explicit
    assert (explicit.code.capacity, explicit.threads, explicit.grid) == (2048, 256, 35)
    # one snapshot object per set of raw values: the hot path's cache key
    assert envs.snapshot() is envs.snapshot()
    assert envs.snapshot().get("JITMETA_CHUNK") == 2048


# --- source scans ---------------------------------------------------------------------------

def _module_of(node: ast.ImportFrom, package: str) -> str:
    """The absolute module an ``ImportFrom`` in ``package`` names."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` (a module of ``package``) imports, absolute; for
    ``from X import a`` both ``X`` and ``X.a`` (``a`` may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = _module_of(node, package)
            found.add(mod)
            found.update(f"{mod}.{alias.name}" for alias in node.names)
    return found


FORBIDDEN_IN_JIT = ("jitmeta.heuristics", "jitmeta.kernels", "jitmeta.api",
                    "jitmeta.dispatch")


def jit_violations(source: str) -> list[str]:
    return sorted(m for m in imported_modules(source, "jitmeta.jit")
                  if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_JIT))


ENV_GETTERS = {"get", "raw", "snapshot", "token_reader", "override", "describe"}


def env_reads(source: str, package: str) -> list[str]:
    """Places ``source`` reads the environment: ``os.environ``/``os.getenv``/``putenv``,
    a bare ``environ``/``getenv`` imported from os, or a getter of ``jitmeta.envs``
    (called through the module or imported by name)."""
    tree = ast.parse(source)
    hits, envs_aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _module_of(node, package)
            for alias in node.names:
                if mod == "os" and alias.name in ("environ", "getenv", "environb"):
                    hits.append(f"line {node.lineno}: from os import {alias.name}")
                if mod == "jitmeta.envs" and alias.name in ENV_GETTERS:
                    hits.append(f"line {node.lineno}: from envs import {alias.name}")
                if mod == "jitmeta" and alias.name == "envs":
                    envs_aliases.add(alias.asname or "envs")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "jitmeta.envs":
                    envs_aliases.add(alias.asname or "jitmeta")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in ("environ", "getenv", "environb",
                                                       "putenv"):
                hits.append(f"line {node.lineno}: os.{node.attr}")
            if node.value.id in envs_aliases and node.attr in ENV_GETTERS:
                hits.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr in ENV_GETTERS and \
                isinstance(node.value, ast.Attribute) and node.value.attr == "envs":
            hits.append(f"line {node.lineno}: ...envs.{node.attr}")
    return hits


def _sources(sub: str) -> list[Path]:
    files = sorted((PACKAGE / sub).glob("*.py"))
    assert files, f"no modules under {PACKAGE / sub}"
    return files


def test_scanners_catch_what_they_look_for():
    assert jit_violations("from ..heuristics.plan import Plan\n") == [
        "jitmeta.heuristics.plan", "jitmeta.heuristics.plan.Plan"]
    assert jit_violations("from .. import kernels\n") == ["jitmeta.kernels"]
    assert jit_violations("import jitmeta.dispatch\n") == ["jitmeta.dispatch"]
    assert jit_violations("from jitmeta.api import plan\n") != []
    assert jit_violations("from . import runtime\nfrom ..envs import Knobs\n") == []
    pkg = "jitmeta.heuristics"
    assert env_reads("import os\nx = os.environ.get('A')\n", pkg)
    assert env_reads("import os\nx = os.getenv('A')\n", pkg)
    assert env_reads("from os import environ\n", pkg)
    assert env_reads("from .. import envs\nx = envs.get('JITMETA_CHUNK')\n", pkg)
    assert env_reads("from .. import envs as e\nx = e.snapshot()\n", pkg)
    assert env_reads("from ..envs import snapshot\n", pkg)
    assert env_reads("import jitmeta\nx = jitmeta.envs.raw('A')\n", pkg)
    assert env_reads("from ..envs import Knobs\nimport os\nx = os.path.join('a')\n",
                     pkg) == []


@pytest.mark.parametrize("path", _sources("jit"), ids=lambda p: p.name)
def test_jit_imports_nothing_kernel_specific(path):
    assert jit_violations(path.read_text(encoding="utf-8")) == [], path


@pytest.mark.parametrize("path", _sources("heuristics"), ids=lambda p: p.name)
def test_heuristics_read_no_environment(path):
    assert env_reads(path.read_text(encoding="utf-8"), "jitmeta.heuristics") == [], path
