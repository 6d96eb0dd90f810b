"""The wheel: templates and the CLI are inside, mapped under ``jitmeta``, and work from a
non-editable install.

The repository keeps the user's top-level layout (``templates/``, ``cache_tools/``);
pyproject maps them to ``jitmeta.templates`` and ``jitmeta.cache_tools``. This test
builds the wheel from a copy of the source tree (so it neither races nor litters the
checkout), installs it with ``pip install --target`` and then, in a fresh interpreter
whose working directory is outside the repository, renders and compiles a plan and runs
``jitmeta-cache`` — proving templates are found from the installed wheel.

Runs in a few seconds (no network: ``--no-build-isolation --no-deps``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = ("paged_mqa_metadata.cu.j2", "jitmeta_schedule.cuh")
_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info",
                                 "__pycache__", ".pytest_cache", "*.pyc", ".whl",
                                 ".device-out")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JITMETA_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=_IGNORE)
    dist = root / "dist"
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--no-index", "-w", str(dist), str(src)], env=_clean_env())
    assert res.returncode == 0, f"wheel build failed:\n{res.stdout}\n{res.stderr}"
    wheels = list(dist.glob("jitmeta-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    res = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                "--target", str(target), str(wheel)], env=_clean_env())
    assert res.returncode == 0, f"install failed:\n{res.stdout}\n{res.stderr}"
    return target


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _read(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(name)


def test_wheel_contains_templates(wheel):
    names = _names(wheel)
    for t in TEMPLATES:
        assert f"jitmeta/templates/{t}" in names, names
        assert _read(wheel, f"jitmeta/templates/{t}") == (REPO / "templates" / t).read_bytes()


def test_wheel_contains_cli(wheel):
    names = _names(wheel)
    assert "jitmeta/cache_tools/__init__.py" in names, names
    assert "jitmeta/cache_tools/cli.py" in names, names
    assert b"def main(" in _read(wheel, "jitmeta/cache_tools/cli.py")


def test_wheel_declares_console_script(wheel):
    ep = next(n for n in _names(wheel) if n.endswith(".dist-info/entry_points.txt"))
    text = _read(wheel, ep).decode()
    section = text.split("[console_scripts]", 1)[1].split("\n[", 1)[0]
    scripts = dict(line.replace(" ", "").split("=", 1)
                   for line in section.strip().splitlines() if "=" in line)
    assert scripts.get("jitmeta-cache") == "jitmeta.cache_tools.cli:main", text


def test_wheel_has_only_the_jitmeta_package(wheel):
    names = _names(wheel)
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"jitmeta"}, sorted(tops)
    assert not [n for n in names if n.startswith(("templates/", "cache_tools/", "tests/"))]
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    top_level = next((n for n in names if n.endswith(".dist-info/top_level.txt")), None)
    if top_level is not None:
        assert _read(wheel, top_level).decode().split() == ["jitmeta"]


def test_wheel_metadata_lists_runtime_dependencies(wheel):
    meta = next(n for n in _names(wheel) if n.endswith(".dist-info/METADATA"))
    text = _read(wheel, meta).decode().lower()
    for dep in ("torch", "cuda-bindings", "numpy", "jinja2", "platformdirs", "filelock"):
        assert f"requires-dist: {dep}" in text, dep
    # NVRTC comes with an extra that pins the CUDA major, never unconditionally
    lines = [line for line in text.splitlines() if line.startswith("requires-dist:")]
    nvrtc = [line for line in lines if "nvidia-cuda-nvrtc" in line]
    assert nvrtc and all("extra ==" in line for line in nvrtc), nvrtc
    assert any("nvidia-cuda-nvrtc-cu12" in line and "cu12" in line.split("extra ==")[1]
               for line in nvrtc), nvrtc
    assert any("nvidia-cuda-nvrtc<" in line.replace(" ", "") or
               "nvidia-cuda-nvrtc>=13" in line.replace(" ", "") for line in nvrtc), nvrtc
    cu12 = [line for line in lines if 'extra == "cu12"' in line]
    assert any("cuda-bindings" in line and "<13" in line for line in cu12), cu12
    cu13 = [line for line in lines if 'extra == "cu13"' in line]
    assert any("cuda-bindings" in line and ">=13" in line for line in cu13), cu13
    assert "provides-extra: cu12" in text and "provides-extra: cu13" in text


def test_wheel_version_has_one_source(wheel):
    from jitmeta._version import __version__

    assert wheel.name.startswith(f"jitmeta-{__version__}-"), wheel.name
    meta = next(n for n in _names(wheel) if n.endswith(".dist-info/METADATA"))
    assert f"Version: {__version__}\n" in _read(wheel, meta).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("/LICENSE")
               for n in _names(wheel)), _names(wheel)


_RENDER_COMPILE = r"""
import json, sys
from importlib import resources
from pathlib import Path
import jitmeta
from jitmeta.jit.render import _package_dir, render
from jitmeta.jit.compiler import CompileOptions, compile_cubin
from jitmeta.jit.cubin_info import kernel_resources
from jitmeta.kernels import source
p = jitmeta.plan(100000, varlen=True, arch="sm_90")
src = render(source(p.code))
found = {"package_dir": _package_dir(), "imported": "jitmeta.templates" in sys.modules}
cubin = compile_cubin(src, CompileOptions(arch="sm_90")).cubin
print(json.dumps({
    "jitmeta": jitmeta.__file__,
    "templates": str(resources.files("jitmeta.templates")),
    "cache_tools": __import__("jitmeta.cache_tools.cli").cache_tools.cli.__file__,
    "variant": p.variant,
    "elf": cubin[:4] == b"\x7fELF",
    "smem": kernel_resources(cubin, "jitmeta_emit")["static_smem_bytes"],
    "plan_smem": p.smem_static_bytes,
    "cwd": str(Path.cwd()),
    **found,
}))
"""


def test_installed_wheel_renders_and_compiles(installed, tmp_path):
    env = _clean_env(PYTHONPATH=str(installed), JITMETA_CACHE_DIR=str(tmp_path / "cache"),
                     PYTHONDONTWRITEBYTECODE="1")
    res = _run([sys.executable, "-c", _RENDER_COMPILE], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for key in ("jitmeta", "templates", "cache_tools"):
        assert Path(got[key]).resolve().is_relative_to(installed.resolve()), (key, got)
        assert not Path(got[key]).resolve().is_relative_to(REPO), (key, got)
    assert not Path(got["cwd"]).resolve().is_relative_to(REPO)
    # the templates are read from the wheel's directory, found without an import
    assert Path(got["package_dir"]).resolve() == (installed / "jitmeta" / "templates").resolve()
    assert got["imported"] is False
    assert got["variant"] == "chunked" and got["elf"] is True
    # varlen, 132 * 256 < 100000 <= 132 * 2048: chunk 2048 at 256 threads:
    # 2113 tile words * 4 + (8 + 2) summaries * 16 + 1024 reserved
    assert got["smem"] == got["plan_smem"] == 2113 * 4 + 10 * 16 + 1024


def test_installed_console_script_runs(installed, tmp_path):
    script = installed / "bin" / "jitmeta-cache"
    assert script.exists(), sorted(p.name for p in (installed / "bin").iterdir()) \
        if (installed / "bin").exists() else "no bin/ in the install"
    env = _clean_env(PYTHONPATH=str(installed), JITMETA_CACHE_DIR=str(tmp_path / "cache"),
                     PYTHONDONTWRITEBYTECODE="1")
    res = _run([str(script), "--help"], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for sub in ("warm", "plan", "ls", "info", "verify", "prune", "clear", "export",
                "import"):
        assert sub in res.stdout, (sub, res.stdout)
    res = _run([str(script), "plan", "--batch", "8193", "--num-sms", "132", "--arch",
                "sm_90", "--json"], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["variant"] == "chunked"
    # chunk 1024 at 256 threads: tile_words(1024) * 4 + (8 + 2) * 4 scratch + 1024 reserved
    assert got["smem_bytes"] == (1024 + 1024 // 32 + 1) * 4 + 10 * 4 + 1024
    assert {"threads", "reason"} <= set(got)
    # a usage error exits 2
    res = _run([str(script), "plan", "--no-such-flag"], env=env, cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)


def test_installed_cli_version_json_usage_and_no_torch(installed, tmp_path):
    """--version, a usage error under --json, and the read-only commands run without
    importing torch or numpy (each CLI call is a fresh process: torch costs ~1.6 s)."""
    from jitmeta._version import __version__

    script = installed / "bin" / "jitmeta-cache"
    env = _clean_env(PYTHONPATH=str(installed), JITMETA_CACHE_DIR=str(tmp_path / "cache"),
                     PYTHONDONTWRITEBYTECODE="1")
    res = _run([str(script), "--version"], env=env, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.split()[-1] == __version__, res
    res = _run([str(script), "--json", "plan", "--batch", "0", "--arch", "sm_90"],
               env=env, cwd=tmp_path)
    assert res.returncode == 2, res
    got = json.loads(res.stdout)
    assert "--batch" in got["error"]
    assert got["usage"].startswith("usage: jitmeta-cache plan")
    res = _run([str(script), "plan", "--batch", "0", "--arch", "sm_90"], env=env,
               cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == "" and "--batch" in res.stderr, res

    probe = r"""
import json, sys
from jitmeta.cache_tools.cli import main
codes = [main(argv) for argv in (["--help"], ["info"], ["ls"], ["verify"],
         ["plan", "--batch", "70000", "--varlen", "--arch", "sm_90"],
         ["prune", "--older-than", "1"], ["clear", "--yes"])]
print(json.dumps({"codes": codes, "heavy": sorted(m for m in ("torch", "numpy")
                                                  if m in sys.modules)}))
"""
    res = _run([sys.executable, "-c", probe], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got == {"codes": [0] * 7, "heavy": []}, got


_NO_NVRTC = r"""
import json, sys
sys.modules["cuda.bindings.nvrtc"] = None  # what an install without NVRTC looks like
import jitmeta
from jitmeta import dispatch
from jitmeta.jit.compiler import nvrtc_available, nvrtc_version
p = jitmeta.plan(int(sys.argv[1]), varlen=True, arch="sm_90")
out = {"available": nvrtc_available(), "version": nvrtc_version()}
try:
    built = dispatch.build_plan(p)
    out["source"] = built.source
except jitmeta.NvrtcUnavailableError as exc:
    out["error"] = str(exc)
    out["is_compile_error"] = isinstance(exc, jitmeta.CompileError)
print(json.dumps(out))
"""


def test_without_nvrtc_hits_load_and_a_miss_names_the_warm_command(tmp_path):
    """cuda.bindings.nvrtc unimportable: a cached cubin still loads; a miss raises
    NvrtcUnavailableError (a CompileError) saying how to install NVRTC and giving the
    exact warm command."""
    cache = tmp_path / "cache"
    env = _clean_env(JITMETA_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    warm = _run([sys.executable, "-m", "jitmeta.cache_tools.cli", "warm", "--arch",
                 "sm_90", "--batch", "3000", "--varlen", "yes", "--format", "smxx",
                 "-j", "1"], env=env, cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    hit = _run([sys.executable, "-c", _NO_NVRTC, "3000"], env=env, cwd=tmp_path)
    assert hit.returncode == 0, hit.stderr
    got = json.loads(hit.stdout.strip().splitlines()[-1])
    assert got == {"available": False, "version": "unavailable", "source": "disk"}, got
    miss = _run([sys.executable, "-c", _NO_NVRTC, "100000"], env=env, cwd=tmp_path)
    assert miss.returncode == 0, miss.stderr
    got = json.loads(miss.stdout.strip().splitlines()[-1])
    assert got["is_compile_error"] is True
    msg = got["error"]
    assert "NVRTC is unavailable" in msg
    assert "jitmeta[cu12]" in msg and "jitmeta[cu13]" in msg
    assert f"jitmeta-cache --cache-dir {cache} warm --arch sm_90" in msg
    assert "--batch 100000" in msg and "--varlen yes" in msg, msg


def test_sdist_carries_its_tests_and_they_run(tmp_path):
    """The sdist holds conftest.py, spec_oracle.py and tests/emulator/; a wheel built
    from the unpacked sdist, installed, passes tests run from the unpacked tree."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=_IGNORE)
    dist = tmp_path / "dist"
    res = _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(dist),
                str(src)], env=_clean_env())
    assert res.returncode == 0, f"sdist build failed:\n{res.stdout}\n{res.stderr}"
    (sdist,) = dist.glob("jitmeta-*.tar.gz")
    import tarfile

    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        tf.extractall(tmp_path / "unpacked", filter="data")
    top = sdist.name[:-len(".tar.gz")]
    for need in ("tests/conftest.py", "tests/spec_oracle.py", "tests/emulator/core.py",
                 "tests/emulator/harness.cpp", "tests/emulator/cuda_shim.h",
                 "tests/test_envs.py", "LICENSE", "CHANGELOG.md",
                 "templates/paged_mqa_metadata.cu.j2"):
        assert f"{top}/{need}" in names, need
    tree = tmp_path / "unpacked" / top
    site = tmp_path / "site"
    res = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                "--no-build-isolation", "--target", str(site), str(tree)], env=_clean_env())
    assert res.returncode == 0, f"sdist install failed:\n{res.stdout}\n{res.stderr}"
    # -P: the unpacked tree's own jitmeta/ (without the mapped templates/ and
    # cache_tools/) must not shadow the installed package
    env = _clean_env(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    res = _run([sys.executable, "-P", "-c", "import jitmeta.cache_tools.cli as c; "
                "print(c.__file__)"], env=env, cwd=tree)
    assert res.returncode == 0 and Path(res.stdout.strip()).is_relative_to(site), res
    res = _run([sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                "tests/test_envs.py",
                "tests/test_cli.py::test_help_lists_every_subcommand_and_knob",
                "tests/test_cli.py::test_usage_errors_exit_2"], env=env, cwd=tree)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-2000:]}"
    summary = res.stdout.strip().splitlines()[-1]
    assert re.search(r"\b([3-9]\d|\d{3,}) passed", summary), summary
