"""Cache bundles: export on one machine, import and use offline on another.

Hostile bundles are built member by member with ``tarfile`` and must be rejected
whole, before anything is published or written outside the cache.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from jitmeta import envs
from jitmeta.cache_tools.bundle import TOP, BundleError, read_bundle
from jitmeta.cache_tools.cli import main
from jitmeta.jit import build as jit_build
from jitmeta.jit.build import stats
from jit_support import build, key_for
from jitmeta.jit.cache import CUBIN, META, DiskCache, meta_checksum


def _export(capsys, cache: DiskCache, path: Path) -> dict:
    capsys.readouterr()
    assert main(["--cache-dir", str(cache.root), "export", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path, "r:*") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar]


def _write(path: Path, members) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    return info, data


def _special(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info, None


@pytest.fixture
def bundle(populated_cache, tmp_path, capsys):
    path = tmp_path / "warm.tgz"
    result = _export(capsys, populated_cache, path)
    assert len(result["entries"]) == 3 and result["skipped"] == []
    return path


def test_export_import_roundtrip_then_offline_with_zero_compiles(bundle, golden_codes,
                                                                 tmp_path, capsys):
    target = tmp_path / "elsewhere"
    capsys.readouterr()
    assert main(["--cache-dir", str(target), "import", str(bundle), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["imported"]) == 3 and res["present"] == []
    assert main(["--cache-dir", str(target), "verify"]) == 0
    capsys.readouterr()
    assert main(["--cache-dir", str(target), "import", str(bundle), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["present"]) == 3  # idempotent
    jit_build.reset_stats(clear_memory=True)
    with envs.override(JITMETA_CACHE_DIR=str(target), JITMETA_OFFLINE="1"):
        for code, p in golden_codes:
            assert build(code, p).source == "disk"
    s = stats()
    assert s["compiles"] == 0 and s["disk_hits"] == 3 and s["offline_misses"] == 0
    imported = DiskCache(target)
    for key in imported.keys():
        assert imported.check(key, deep=True)[0] is None


def test_export_is_deterministic_and_skips_bad_entries(populated_cache, golden_codes,
                                                       tmp_path, capsys):
    a = _export(capsys, populated_cache, tmp_path / "a.tgz")
    b = _export(capsys, populated_cache, tmp_path / "b.tgz")
    assert (tmp_path / "a.tgz").read_bytes() == (tmp_path / "b.tgz").read_bytes()
    assert a["entries"] == b["entries"]
    bad = key_for(golden_codes[1][0])[0]
    cubin = populated_cache.entry_dir(bad) / CUBIN
    cubin.write_bytes(cubin.read_bytes()[:-1])
    capsys.readouterr()
    assert main(["export", str(tmp_path / "c.tgz"), "--json"]) == 0
    out, err = capsys.readouterr()
    res = json.loads(out)
    assert bad not in res["entries"] and len(res["entries"]) == 2
    assert res["skipped"][0]["key"] == bad and "left out bad entry" in err
    assert populated_cache.quarantined() == 1
    assert set(read_bundle(tmp_path / "c.tgz")) == set(res["entries"])


def test_import_replaces_a_bad_local_copy(bundle, populated_cache, golden_codes, capsys):
    key = key_for(golden_codes[0][0])[0]
    meta = populated_cache.entry_dir(key) / META
    meta.write_text(meta.read_text().replace('"static"', '"chunked"', 1))
    capsys.readouterr()
    assert main(["import", str(bundle), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["imported"] == [key] and len(res["present"]) == 2
    assert populated_cache.check(key, deep=True)[0] is None
    assert populated_cache.quarantined() == 1


# --- hostile bundles -----------------------------------------------------------------

def _first_key(members) -> str:
    return next(m.name.split("/")[2] for m, _ in members if m.name.count("/") == 3)


def _tamper(kind: str, members, outside: Path):
    key = _first_key(members)
    cubin = f"{TOP}/entries/{key}/{CUBIN}"
    if kind == "dotdot":
        return members + [_file(f"{TOP}/entries/../../x", b"owned")]
    if kind == "dotdot-top":
        return members + [_file("../x", b"owned")]
    if kind == "absolute":
        return members + [_file(str(outside / "x"), b"owned")]
    if kind in ("symlink", "hardlink"):
        kept = [(m, d) for m, d in members if m.name != cubin]
        t = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        return kept + [_special(cubin, t, str(outside / "x"))]
    if kind == "device":
        return members + [_special(f"{TOP}/entries/{key}/dev", tarfile.CHRTYPE)]
    if kind == "fifo":
        return members + [_special(f"{TOP}/entries/{key}/pipe", tarfile.FIFOTYPE)]
    if kind == "duplicate":
        data = dict((m.name, d) for m, d in members)[cubin]
        return members + [_file(cubin, data[:-1] + b"\x00")]
    if kind == "unknown-file":
        return members + [_file(f"{TOP}/entries/{key}/payload.so", b"\x7fELF")]
    if kind == "checksum":
        out = []
        for m, d in members:
            if m.name == cubin:
                flipped = bytearray(d)
                flipped[len(d) // 2] ^= 0x10
                m, d = _file(cubin, bytes(flipped))
            out.append((m, d))
        return out
    if kind == "consistent-swap":  # cubin replaced *and* the manifest updated to match
        other = next(m.name for m, _ in members if m.name.endswith(CUBIN)
                     and m.name != cubin)
        data = dict((m.name, d) for m, d in members)
        new = data[other]
        manifest = json.loads(data[f"{TOP}/MANIFEST.json"])
        manifest["entries"][key][CUBIN] = {"sha256": hashlib.sha256(new).hexdigest(),
                                           "bytes": len(new)}
        # and the manifest's own checksum recomputed: only the entry check is left
        manifest["manifest_sha256"] = meta_checksum(manifest, "manifest_sha256")
        out = []
        for m, d in members:
            if m.name == cubin:
                m, d = _file(cubin, new)
            elif m.name.endswith("MANIFEST.json"):
                m, d = _file(m.name, json.dumps(manifest).encode())
            out.append((m, d))
        return out
    if kind == "no-manifest":
        return [(m, d) for m, d in members if not m.name.endswith("MANIFEST.json")]
    raise AssertionError(kind)


HOSTILE = {
    "dotdot": "'..'", "dotdot-top": "'..'", "absolute": "absolute path",
    "symlink": "symbolic link", "hardlink": "hard link", "device": "device file",
    "fifo": "FIFO", "duplicate": "appears twice", "unknown-file": "not part of the bundle",
    "checksum": "checksum mismatch", "consistent-swap": "is bad: cubin",
    "no-manifest": "no jitmeta-bundle/MANIFEST.json",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_bundle_is_rejected_whole(bundle, kind, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    bad = _write(tmp_path / f"{kind}.tgz", _tamper(kind, _members(bundle), outside))
    target = tmp_path / "target"
    capsys.readouterr()
    code = main(["--cache-dir", str(target), "import", str(bad)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert HOSTILE[kind] in err
    assert not (target / "v1" / "entries").exists() or \
        list(DiskCache(target).keys()) == [], "a rejected bundle published something"
    assert list(outside.iterdir()) == [] and not (tmp_path / "x").exists()
    with pytest.raises(BundleError):
        read_bundle(bad)


def test_garbage_and_truncated_files_are_not_bundles(bundle, tmp_path, capsys):
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"this is not a tar file" * 100)
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    for path in (junk, cut):
        capsys.readouterr()
        assert main(["--cache-dir", str(tmp_path / "t"), "import", str(path)]) == 1
        err = capsys.readouterr().err
        assert "not a readable bundle" in err or "is damaged" in err, err
    assert not (tmp_path / "t" / "v1" / "entries").exists()
    plain = tmp_path / "plain.tar"  # an uncompressed tar of the same members also works
    with gzip.open(bundle) as src:
        plain.write_bytes(src.read())
    assert len(read_bundle(plain)) == 3


# --- GPU: a bundle from the CPU machine, used offline on the device --------------------

_GPU_CHECK = """
import json, os, sys, torch
import jitmeta
from jitmeta.reference import reference_schedule
g = torch.Generator().manual_seed(int(sys.argv[1]))
results = []
for batch, next_n, varlen, num_sms, schedule in json.loads(sys.argv[2]):
    ctx = torch.randint(0, 70000, (batch, next_n), generator=g, dtype=torch.int32)
    idx = None
    if varlen:
        idx = torch.sort(torch.randint(0, max(1, batch // 3), (batch,), generator=g,
                                       dtype=torch.int32)).values
    want = reference_schedule(ctx, num_sms, idx, split_kv=256, schedule=schedule)
    got = jitmeta.get_paged_mqa_logits_metadata(
        ctx.cuda(), 64, num_sms, idx.cuda() if idx is not None else None,
        schedule=schedule).cpu()
    results.append(bool(torch.equal(got, want)))
print(json.dumps({"equal": results, "stats": jitmeta.stats()}))
"""


@pytest.mark.gpu
def test_cpu_made_bundle_runs_offline_on_the_gpu_bit_exact(tmp_path, capsys, rng,
                                                           fresh_jit):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    shapes = [(100, 1, False, 132, "smxx"), (100, 1, True, 132, "sm90"),
              (70000, 1, False, 132, "smxx"), (3000, 2, False, 78, "sm90")]
    bundle = os.environ.get("JITMETA_TEST_BUNDLE")  # e.g. exported on the CPU machine
    if not bundle:
        src = tmp_path / "made-here"
        from jitmeta.heuristics.arch import limits_from_device
        from jitmeta.kernels import plan

        lim = limits_from_device(torch.cuda.current_device())
        codes = set()
        # fresh_jit emptied the in-memory cubins: every build below compiles into src
        with envs.override(JITMETA_CACHE_DIR=str(src), JITMETA_OFFLINE=False,
                           JITMETA_DISABLE_DISK_CACHE=False):
            for b, n, v, s, sch in shapes:
                p = plan(b, n, v, s, 256, sch, lim)
                want = "memory" if p.code in codes else "compiled"
                assert build(p.code, p).source == want, p.code.name
                codes.add(p.code)
        bundle = str(tmp_path / "made-here.tgz")
        capsys.readouterr()
        assert main(["--cache-dir", str(src), "--json", "export", bundle]) == 0
        exported = json.loads(capsys.readouterr().out)
        assert len(exported["entries"]) == len(codes) > 0, exported
    target = tmp_path / "serving"
    assert main(["--cache-dir", str(target), "import", bundle]) == 0
    env = dict(os.environ, JITMETA_CACHE_DIR=str(target), JITMETA_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_GPU_CHECK),
                           str(rng.randrange(1 << 30)), json.dumps(shapes)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(rep["equal"]), rep
    assert rep["stats"]["compiles"] == 0 and rep["stats"]["offline_misses"] == 0
