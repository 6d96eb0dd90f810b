"""The disk cache against a hostile co-tenant, a full disk and absurd sizes.

Each test is named after the finding it covers (test_findingNN_...). The co-tenant is
the unprivileged user ``nobody``: the attacks that need it run as root (the victim)
and prepare the attacker's files in a forked child that dropped to ``nobody``
(``os.setuid``), acting only through directory descriptors the parent opened, so
that no path outside the test's ``tmp_path`` is ever needed. Victim files live in
``tmp_path`` too. Tests that need root or ``nobody`` skip with the reason otherwise;
tests that need a private mount namespace (a full or read-only filesystem) run the
CLI under ``unshare -m`` so the mount vanishes with the process.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from jitmeta import envs
from jitmeta.cache_tools import bundle as bundle_mod
from jitmeta.cache_tools.bundle import TOP, BundleError, read_bundle
from jitmeta.cache_tools.cli import main
from jitmeta.jit import build as jit_build
from jitmeta.jit.build import stats
from jit_support import build, key_for
from jitmeta.jit.cache import (CUBIN, META, MAX_FILE_BYTES, QUARANTINE_KEEP, STAMP,
                               CacheError, DiskCache, meta_checksum)

try:
    NOBODY = pwd.getpwnam("nobody")
except KeyError:
    NOBODY = None

needs_root_and_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or NOBODY is None,
    reason="needs root (the victim) and a user 'nobody' (the co-tenant)")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_nobody(action, *fds: int) -> None:
    """Run ``action(*fds)`` in a forked child that is user ``nobody`` (no groups)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            action(*fds)
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the exit code
            sys.stderr.write(f"nobody's action failed: {exc!r}\n")
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the co-tenant's setup failed"


def nobody_dir(path: Path) -> int:
    """Make ``path`` a directory owned by nobody; returns an fd of it (caller closes)."""
    path.mkdir(mode=0o755)
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """relative path -> (mtime_ns, content of files) of everything under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
        out[str(p.relative_to(root))] = (st.st_mtime_ns, data)
    return out


def make_victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("root's data\n")
    old = victim / "old.log"
    old.write_text("an old root file\n")
    t = time.time() - 7200
    os.utime(old, (t, t))
    (victim / "sub").mkdir()
    (victim / "sub" / "file").write_text("deeper\n")
    return victim


def forge(cache_root: Path, key: str, other: str) -> None:
    """Replace ``key``'s cubin by ``other``'s and recompute every checksum: what any
    writer of the cache can do."""
    d = Path(cache_root) / "v1" / "entries" / key[:2] / key
    new = (Path(cache_root) / "v1" / "entries" / other[:2] / other / CUBIN).read_bytes()
    (d / CUBIN).write_bytes(new)
    meta = json.loads((d / META).read_text())
    import hashlib
    meta.update(cubin_sha256=hashlib.sha256(new).hexdigest(), cubin_bytes=len(new))
    meta["meta_sha256"] = meta_checksum(meta)
    (d / META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def copy_golden(golden_cache: Path, dst: Path) -> Path:
    shutil.copytree(golden_cache, dst, symlinks=True)
    return dst


# --- 1. clear / prune refuse an untrusted root and never follow links ----------------

@needs_root_and_nobody
@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune", "--older-than", "0"],
                                     ["prune", "--max-bytes", "0"]])
def test_finding01_clear_and_prune_refuse_a_root_of_another_user_with_symlinked_dirs(
        tmp_path, capsys, fresh_jit, command):
    victim = make_victim(tmp_path)
    before = snapshot(victim)
    evil = tmp_path / "evil"
    fd = nobody_dir(evil)

    def plant(dfd):
        os.mkdir("v1", 0o755, dir_fd=dfd)
        v1 = os.open("v1", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dfd)
        for name in ("tmp", "quarantine", "jinja", "entries"):
            os.symlink(str(victim), name, dir_fd=v1)

    try:
        as_nobody(plant, fd)
    finally:
        os.close(fd)
    code, _, err = run(capsys, "--cache-dir", str(evil), *command)
    assert code == 1, err
    assert "owned by uid 65534" in err and str(evil) in err
    assert snapshot(victim) == before, "the victim directory was changed"


@needs_root_and_nobody
def test_finding01_import_refuses_a_root_of_another_user(populated_cache, tmp_path, capsys):
    bundle = tmp_path / "b.tgz"
    assert run(capsys, "export", str(bundle))[0] == 0
    evil = tmp_path / "evil"
    os.close(nobody_dir(evil))
    code, _, err = run(capsys, "--cache-dir", str(evil), "import", str(bundle))
    assert code == 1 and "owned by uid 65534" in err
    assert list(evil.iterdir()) == []


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune", "--older-than", "0"]])
@pytest.mark.parametrize("link", ["tmp", "quarantine", "jinja"])
def test_finding01_own_root_with_a_symlinked_subdirectory_is_refused_not_followed(
        populated_cache, tmp_path, capsys, command, link):
    victim = make_victim(tmp_path)
    before = snapshot(victim)
    sub = populated_cache.base / link
    shutil.rmtree(sub, ignore_errors=True)
    sub.symlink_to(victim)
    code, _, err = run(capsys, *command)
    assert code == 1 and "symbolic link inside the cache" in err, err
    assert snapshot(victim) == before


# --- 2. quarantine never writes through a link ----------------------------------------

@needs_root_and_nobody
def test_finding02_verify_on_a_root_of_another_user_writes_nothing(golden_cache, tmp_path,
                                                                  capsys, fresh_jit):
    victim = make_victim(tmp_path)
    before = snapshot(victim)
    evil = copy_golden(golden_cache, tmp_path / "evil")
    key = sorted(DiskCache(evil).keys())[0]
    entry = evil / "v1" / "entries" / key[:2] / key
    (entry / CUBIN).write_bytes(b"corrupt")
    (entry / "REASON").symlink_to(victim / "precious.txt")
    for p in [evil, *evil.rglob("*")]:
        os.lchown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    code, out, err = run(capsys, "--cache-dir", str(evil), "verify", "--json")
    res = json.loads(out)
    assert code == 1 and not res["trusted"] and "owned by uid 65534" in res["trust_problem"]
    assert res["bad"] == [] and res["checked"] == 0
    assert snapshot(victim) == before
    assert (entry / CUBIN).read_bytes() == b"corrupt"  # nothing moved either


def test_finding02_reason_symlink_in_own_entry_is_not_written_through(
        populated_cache, golden_codes, tmp_path, capsys):
    victim = make_victim(tmp_path)
    before = snapshot(victim)
    key = key_for(golden_codes[0][0])[0]
    entry = populated_cache.entry_dir(key)
    (entry / CUBIN).write_bytes(b"corrupt")
    (entry / "REASON").symlink_to(victim / "precious.txt")
    code, out, _ = run(capsys, "verify", "--json")
    res = json.loads(out)
    assert code == 1 and [b["key"] for b in res["bad"]] == [key]
    q = Path(res["bad"][0]["quarantined_to"])
    assert (q / "REASON").read_text().strip() and not (q / "REASON").is_symlink()
    assert (q / "entry" / "REASON").is_symlink()  # moved aside as it was, unfollowed
    assert snapshot(victim) == before


def test_finding02_symlinked_entry_directory_is_quarantined_as_a_link(
        populated_cache, golden_codes, tmp_path, capsys):
    """The link is moved aside; its target (a valid entry elsewhere) is untouched and
    receives no REASON file."""
    key = key_for(golden_codes[0][0])[0]
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(populated_cache.entry_dir(key)), elsewhere)
    before = snapshot(elsewhere)
    populated_cache.entry_dir(key).symlink_to(elsewhere)
    code, out, _ = run(capsys, "verify", "--json")
    res = json.loads(out)
    assert code == 1 and res["bad"][0]["reason"] == "entry is a symbolic link"
    q = Path(res["bad"][0]["quarantined_to"])
    assert (q / "entry").is_symlink() and (q / "REASON").is_file()
    assert snapshot(elsewhere) == before and not (elsewhere / "REASON").exists()


# --- 3. no time-of-check/time-of-use gap through another user's symlink --------------

@needs_root_and_nobody
def test_finding03_symlink_flipped_by_another_user_never_loads_a_forged_cubin(
        golden_cache, golden_codes, tmp_path, fresh_jit):
    good = copy_golden(golden_cache, tmp_path / "good")
    forged = copy_golden(golden_cache, tmp_path / "forged")
    key, other = key_for(golden_codes[0][0])[0], key_for(golden_codes[1][0])[0]
    forge(forged, key, other)
    for p in [forged, *forged.rglob("*")]:
        os.lchown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    real = (good / "v1" / "entries" / key[:2] / key / CUBIN).read_bytes()
    evil = tmp_path / "evil"
    fd = nobody_dir(evil)
    os.symlink(str(good), evil / "link")
    os.lchown(evil / "link", NOBODY.pw_uid, NOBODY.pw_gid)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the co-tenant flips the link for a while
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            end = time.time() + 3
            i = 0
            while time.time() < end:
                os.symlink(str(forged if i % 2 == 0 else good), "new", dir_fd=fd)
                os.rename("new", "link", src_dir_fd=fd, dst_dir_fd=fd)
                i += 1
        finally:
            os._exit(0)
    loads = refused = forged_loads = 0
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            cache = DiskCache(evil / "link")
            try:
                entry = cache.load(key, touch=False)
            except CacheError as exc:
                refused += 1
                assert "owned by uid 65534" in str(exc)
                continue
            loads += 1
            if entry is not None and entry.cubin != real:
                forged_loads += 1
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    print(f"{refused} loads refused, {loads} went through, {forged_loads} forged")
    assert forged_loads == 0 and loads == 0 and refused > 0


def test_finding03_symlinked_root_of_a_trusted_owner_still_loads(populated_cache,
                                                                golden_codes, tmp_path):
    link = tmp_path / "link-to-cache"
    link.symlink_to(populated_cache.root)
    key = key_for(golden_codes[0][0])[0]
    assert DiskCache(link).load(key, touch=False) is not None


@needs_root_and_nobody
def test_finding03_parent_of_the_root_owned_by_another_user_is_refused(
        golden_cache, golden_codes, tmp_path):
    evil = tmp_path / "evil"
    os.close(nobody_dir(evil))
    root = copy_golden(golden_cache, evil / "cache")  # root-owned, but in their dir
    key = key_for(golden_codes[0][0])[0]
    with pytest.raises(CacheError, match=f"{evil} is owned by uid 65534"):
        DiskCache(root).load(key)


def test_finding03_parent_writable_by_others_without_sticky_bit_is_refused(
        golden_cache, golden_codes, tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    root = copy_golden(golden_cache, parent / "cache")
    key = key_for(golden_codes[0][0])[0]
    os.chmod(parent, 0o777)
    with pytest.raises(CacheError, match="writable by other users"):
        DiskCache(root).load(key)
    os.chmod(parent, 0o1777)  # sticky, like /tmp: others cannot rename our root
    assert DiskCache(root).load(key, touch=False) is not None


# --- 4. bundle import is bounded while streaming ---------------------------------------

def _tgz(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_finding04_bundle_total_size_is_capped_while_streaming(tmp_path, monkeypatch):
    mib = 1 << 20
    monkeypatch.setattr(bundle_mod, "MAX_MEMBER_BYTES", mib)
    monkeypatch.setattr(bundle_mod, "MAX_BUNDLE_BYTES", 4 * mib)
    members = [(TOP, None), (f"{TOP}/entries", None)]
    for i in range(40):
        key = f"{i:02x}" * 32
        members += [(f"{TOP}/entries/{key}", None),
                    (f"{TOP}/entries/{key}/{CUBIN}", bytes(mib))]
    path = _tgz(tmp_path / "zeros.tgz", members)
    assert path.stat().st_size < mib // 4  # 40 MiB of zeros, compressed
    tracemalloc.start()
    try:
        with pytest.raises(BundleError, match="more than 4194304 bytes"):
            read_bundle(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 * mib, f"held {peak} bytes while reading a capped bundle"


def test_finding04_uncompressed_stream_is_capped_even_inside_headers(tmp_path,
                                                                   monkeypatch):
    """A pax header is read whole by tarfile: the cap sits under tarfile itself."""
    monkeypatch.setattr(bundle_mod, "MAX_BUNDLE_BYTES", 1 << 20)
    path = tmp_path / "pax.tgz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{TOP}/x")
        info.pax_headers = {"comment": "z" * (4 << 20)}
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(BundleError, match="more than 1048576 bytes once uncompressed"):
        read_bundle(path)


def test_finding04_bundle_member_count_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_MEMBERS", 10)
    members = [(TOP, None), (f"{TOP}/entries", None)]
    members += [(f"{TOP}/entries/{i:02x}" + "0" * 62, None) for i in range(20)]
    with pytest.raises(BundleError, match="more than 10 members"):
        read_bundle(_tgz(tmp_path / "many.tgz", members))


# --- 5. a full disk: only entries that landed are counted -----------------------------

_FULL_DISK = r"""
set -e
mount -t tmpfs -o size=1m tmpfs "$DIR"
mkdir -m 0700 "$DIR/cache"
head -c "$FILL" /dev/zero > "$DIR/filler"
set +e
"$PY" -m jitmeta.cache_tools.cli --cache-dir "$DIR/cache" warm --arch sm_90 \
    --batch 1-3000 --format smxx --varlen both -j 1 --json > "$DIR.json"
echo $? > "$DIR.rc"
"$PY" - "$DIR/cache" > "$DIR.keys" <<'EOF'
import json, sys
from jitmeta.jit.cache import DiskCache
c = DiskCache(sys.argv[1])
print(json.dumps({k: c.check(k, deep=True)[0] for k in c.keys()}))
EOF
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) to mount a small private tmpfs")
def test_finding05_full_disk_warm_counts_only_entries_that_landed(tmp_path, golden_cache):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # the compiled templates must fit first; leave room for about two entries more
    env = dict(os.environ, DIR=str(mnt), PY=sys.executable, FILL=str(1024 * 1024 - 240_000))
    env.pop("JITMETA_CACHE_DIR", None)
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           _FULL_DISK], env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert list(mnt.iterdir()) == [], "the tmpfs leaked out of its namespace"
    res = json.loads((tmp_path / "mnt.json").read_text())
    rc = int((tmp_path / "mnt.rc").read_text())
    on_disk = json.loads((tmp_path / "mnt.keys").read_text())
    print(res, on_disk)
    assert all(problem is None for problem in on_disk.values()), on_disk
    assert set(res["entries"]) == set(on_disk), "warm listed entries that did not land"
    assert res["compiled"] + res["cached"] == len(on_disk)
    assert res["failed"] >= 1 and rc == 1
    assert all("no space left" in f["error"] or "No space left" in f["error"]
               for f in res["failures"]), res["failures"]
    assert any(str(mnt / "cache") in f["error"] for f in res["failures"])


def test_finding05_publish_that_cannot_write_is_a_named_error(populated_cache, fresh_jit,
                                                              golden_codes):
    """EROFS/ENOSPC name the path; Built reports what did not land."""
    from jitmeta.jit.cache import CacheFullError, _named_error

    err = _named_error(OSError(28, "No space left on device"), "/x/y", Path("/x"))
    assert isinstance(err, CacheFullError) and "/x/y" in str(err) and "/x" in str(err)
    code, p = golden_codes[0]
    key = key_for(code)[0]
    populated_cache.remove(key)
    tmp = populated_cache.tmp_dir
    shutil.rmtree(tmp)
    tmp.write_text("")  # publishing is impossible now, but writable() was True before
    jit_build.reset_stats(clear_memory=True)
    built = jit_build._publish(populated_cache, envs.snapshot(), key, b"\x7fELF" + bytes(100), {}, "x")
    assert built is not None and "tmp" in built


# --- 7. FIFOs and absurd sizes never hang nor exhaust memory --------------------------

_HANG = """
import json, sys
from jitmeta.cache_tools.cli import main
sys.exit(main(["--cache-dir", sys.argv[1], *sys.argv[2:]]))
"""


@pytest.mark.parametrize("name", [CUBIN, META])
def test_finding07_fifo_in_an_entry_never_blocks_warm_or_verify(populated_cache,
                                                                golden_codes, name):
    key = key_for(golden_codes[0][0])[0]  # batch 100, dense, smxx
    target = populated_cache.entry_dir(key) / name
    root = str(populated_cache.root)
    target.unlink()
    os.mkfifo(target, 0o600)
    proc = subprocess.run([sys.executable, "-c", _HANG, root, "warm", "--arch", "sm_90",
                           "--batch", "100", "--varlen", "no", "--format", "smxx",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["compiled"] == 1 and "not a regular file" in proc.stderr
    target.unlink()  # the rebuilt entry gets a FIFO again
    os.mkfifo(target, 0o600)
    proc = subprocess.run([sys.executable, "-c", _HANG, root, "verify", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    bad = json.loads(proc.stdout)["bad"]
    assert [b["key"] for b in bad] == [key] and "not a regular file" in bad[0]["reason"]


def test_finding07_huge_sparse_cubin_is_rejected_by_size_before_reading(populated_cache,
                                                                        golden_codes):
    key = key_for(golden_codes[0][0])[0]
    cubin = populated_cache.entry_dir(key) / CUBIN
    with open(cubin, "r+b") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse
    t0 = time.perf_counter()
    problem, _, _ = populated_cache.check(key, deep=True)
    assert time.perf_counter() - t0 < 5
    assert "8589934592 bytes" in problem and "cubin not read" in problem
    assert populated_cache.load(key) is None and populated_cache.quarantined() == 1


def test_finding07_every_file_kind_has_a_cap():
    assert MAX_FILE_BYTES[CUBIN] == bundle_mod.MAX_MEMBER_BYTES
    assert all(0 < cap <= bundle_mod.MAX_MEMBER_BYTES for cap in MAX_FILE_BYTES.values())


# --- 8. malformed JSON and types are problems, not tracebacks -------------------------

def _rewrite_meta(cache: DiskCache, key: str, edit) -> None:
    path = cache.entry_dir(key) / META
    meta = json.loads(path.read_text())
    edit(meta)
    meta["meta_sha256"] = meta_checksum(meta)
    path.write_text(json.dumps(meta))


def test_finding08_deeply_nested_meta_is_quarantined_and_rebuilt(populated_cache,
                                                                 golden_codes):
    code, p = golden_codes[0]
    key = key_for(code)[0]
    (populated_cache.entry_dir(key) / META).write_text("[" * 100_000 + "]" * 100_000)
    problem = populated_cache.check(key)[0]
    assert "nested too deeply" in problem
    assert build(code, p).source == "compiled"
    assert stats()["quarantined"] == 1 and populated_cache.check(key, deep=True)[0] is None


def test_finding08_meta_nested_past_the_depth_limit_is_refused(populated_cache,
                                                               golden_codes):
    key = key_for(golden_codes[0][0])[0]
    deep: list = []
    for _ in range(40):
        deep = [deep]
    _rewrite_meta(populated_cache, key, lambda m: m.update(extra=deep))
    assert "nested more than 32 levels" in populated_cache.check(key)[0]


def test_finding08_wrong_types_in_meta_are_reported_by_verify(populated_cache,
                                                              golden_codes, capsys):
    key = key_for(golden_codes[0][0])[0]
    _rewrite_meta(populated_cache, key, lambda m: m.update(kernel_names=[1]))
    code, out, _ = run(capsys, "verify", "--json")
    res = json.loads(out)
    assert code == 1
    assert "kernel_names is [1], not a list of strings" in res["bad"][0]["reason"]


def _bundle_with(tmp_path: Path, populated_cache, capsys, edit_manifest=None,
                 edit_meta=None) -> Path:
    path = tmp_path / "b.tgz"
    assert run(capsys, "export", str(path))[0] == 0
    with tarfile.open(path, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar]
    out = []
    for m, data in members:
        if edit_meta and m.name.endswith(META) and edit_meta.get("done") is None:
            meta = json.loads(data)
            edit_meta["fn"](meta)
            meta["meta_sha256"] = meta_checksum(meta)
            data = json.dumps(meta).encode()
            edit_meta["done"] = (m.name, data)
        out.append((m, data))
    manifest = None
    for i, (m, data) in enumerate(out):
        if m.name.endswith("MANIFEST.json"):
            manifest = json.loads(data)
            if edit_meta:
                name, new = edit_meta["done"]
                _, _, key, fname = name.split("/")
                import hashlib
                manifest["entries"][key][fname] = {
                    "sha256": hashlib.sha256(new).hexdigest(), "bytes": len(new)}
                manifest["manifest_sha256"] = meta_checksum(manifest, "manifest_sha256")
            if edit_manifest:
                manifest = edit_manifest(manifest)
            raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
            out[i] = (m, raw)
    bad = tmp_path / "bad.tgz"
    with tarfile.open(bad, "w:gz") as tar:
        for m, data in out:
            if data is not None:
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    return bad


def test_finding08_deeply_nested_bundle_manifest_is_rejected(populated_cache, tmp_path,
                                                            capsys):
    bad = _bundle_with(tmp_path, populated_cache, capsys,
                       edit_manifest=lambda m: b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply"):
        read_bundle(bad)


def test_finding08_kernel_names_of_wrong_type_in_a_bundle_are_rejected(populated_cache,
                                                                      tmp_path, capsys):
    edit = {"fn": lambda m: m.update(kernel_names=[1])}
    bad = _bundle_with(tmp_path, populated_cache, capsys, edit_meta=edit)
    code, _, err = run(capsys, "--cache-dir", str(tmp_path / "target"), "import", str(bad))
    assert code == 1 and "kernel_names is [1], not a list of strings" in err


@pytest.mark.parametrize("how", ["missing", "wrong"])
def test_finding08_manifest_self_checksum_is_required(populated_cache, tmp_path, capsys,
                                                     how):
    def edit(m):
        if how == "missing":
            m.pop("manifest_sha256")
        else:
            m["entries"] = dict(list(m["entries"].items())[:1])  # drop entries silently
        return m

    bad = _bundle_with(tmp_path, populated_cache, capsys, edit_manifest=edit)
    want = "lacks its own checksum" if how == "missing" else "manifest checksum mismatch"
    with pytest.raises(BundleError, match=want):
        read_bundle(bad)


# --- 9. the lock wait is configurable and says whose lock it waits for ----------------

_HOLD = """
import sys, time, filelock
locks = [filelock.FileLock(p) for p in sys.argv[1:]]
for lock in locks:
    lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("timeout", ["1", "0"])
def test_finding09_lock_timeout_knob_bounds_each_wait_and_warns_per_lock_file(
        cache_dir, golden_codes, capsys, timeout):
    argv = ["warm", "--arch", "sm_90", "--batch", "100", "--varlen", "both", "--format",
            "smxx", "-j", "1", "--json"]
    keys = [key_for(code)[0] for code, _ in golden_codes[:2]]  # dense and varlen, 100
    with envs.override(JITMETA_LOCK_TIMEOUT=timeout):
        cache = jit_build.cache_for_root(cache_dir)
        files = [cache.lock(k).lock_file for k in keys]
        holder = subprocess.Popen([sys.executable, "-c", _HOLD, *files],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            jit_build.reset_stats(clear_memory=True)
            t0 = time.perf_counter()
            code, out, err = run(capsys, *argv)
            took = time.perf_counter() - t0
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()
    assert code == 0 and json.loads(out)["compiled"] == 2, err
    for f in files:  # one warning per held lock file, naming it
        assert sum(f in line for line in err.splitlines()) >= 1, err
    assert ("waiting up to 1 s" in err) if timeout == "1" else ("not waiting" in err)
    assert took < 30, f"warm took {took:.1f} s with JITMETA_LOCK_TIMEOUT={timeout}"


def test_finding09_lock_timeout_is_a_validated_knob():
    with envs.override(JITMETA_LOCK_TIMEOUT="2.5"):
        assert envs.get("JITMETA_LOCK_TIMEOUT") == 2.5
    for bad in ("-1", "soon", "inf", "nan"):
        with envs.override(JITMETA_LOCK_TIMEOUT=bad), pytest.raises(envs.EnvError):
            envs.get("JITMETA_LOCK_TIMEOUT")
    assert envs.get("JITMETA_LOCK_TIMEOUT") == 60.0
    with pytest.raises(ValueError, match="lock_timeout"):
        DiskCache("/nonexistent", lock_timeout=-1)


def test_finding09_cache_module_reads_no_environment_variable():
    import ast
    import inspect

    from jitmeta.jit import cache as cache_mod

    tree = ast.parse(inspect.getsource(cache_mod))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "envs" not in names and "environ" not in attrs and "getenv" not in attrs


# --- 10. the quarantine is bounded ----------------------------------------------------

def _fake(cache: DiskCache, i: int, size: int) -> str:
    key = f"{i:02x}" * 32
    cache.publish(key, b"\x7fELF" + bytes(size - 4), {"arch": "sm_90", "variant": "x"})
    return key


def test_finding10_quarantine_keeps_at_most_a_fixed_number_oldest_first(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    for i in range(QUARANTINE_KEEP + 5):
        key = _fake(cache, i, 1000)
        assert cache.quarantine(key, f"test {i}") is not None
    names = sorted(p.name for p in cache.quarantine_dir.iterdir())
    assert len(names) == QUARANTINE_KEEP
    reasons = {(cache.quarantine_dir / n / "REASON").read_text().strip() for n in names}
    assert "test 0" not in reasons and f"test {QUARANTINE_KEEP + 4}" in reasons


def test_finding10_quarantine_counts_against_the_size_cap_and_goes_first(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    live = [_fake(cache, i, 20_000) for i in range(3)]
    per = cache.entry_bytes(live[0])
    for i in range(10, 14):
        cache.quarantine(_fake(cache, i, 20_000), "bad")
    assert cache.info()["quarantine_bytes"] >= 4 * per
    removed = cache.prune(max_bytes=4 * per)
    assert removed == []  # the quarantine made the room; every live entry stays
    assert sorted(cache.keys()) == sorted(live)
    assert cache.info()["quarantine_bytes"] + cache.total_bytes() <= 4 * per + 4096
    capped = DiskCache(tmp_path / "cache", max_bytes=3 * per)
    capped.quarantine(live[0], "bad")  # over the cap: older quarantined items go
    assert capped.info()["quarantine_bytes"] <= 3 * per


# --- 11. the trust model: a writer of the cache can forge an entry --------------------

def test_finding11_forgery_by_a_writer_of_the_cache_loads_as_documented(
        populated_cache, golden_codes, tmp_path):
    key, other = key_for(golden_codes[0][0])[0], key_for(golden_codes[1][0])[0]
    forge(populated_cache.root, key, other)
    entry = populated_cache.load(key, touch=False)
    other_cubin = (populated_cache.entry_dir(other) / CUBIN).read_bytes()
    assert entry is not None and entry.cubin == other_cubin  # undetectable by design
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cache.md").read_text()
    assert "can forge an entry" in docs and "recomputed checksums" in docs


@needs_root_and_nobody
def test_finding11_the_same_forgery_by_another_user_is_refused(populated_cache,
                                                               golden_codes):
    key, other = key_for(golden_codes[0][0])[0], key_for(golden_codes[1][0])[0]
    forge(populated_cache.root, key, other)
    os.chown(populated_cache.entry_dir(key), NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(CacheError, match="owned by uid 65534"):
        populated_cache.load(key)


# --- 12. honest exit codes; stray items are reported ----------------------------------

_READ_ONLY = r"""
set -e
mount --bind "$ROOT" "$ROOT"
mount -o remount,bind,ro "$ROOT"
set +e
"$PY" -m jitmeta.cache_tools.cli --cache-dir "$ROOT" prune --max-bytes 0 --json \
    > "$OUT.prune" 2> "$OUT.prune.err"
echo $? >> "$OUT.rc"
"$PY" -m jitmeta.cache_tools.cli --cache-dir "$ROOT" clear --yes --json \
    > "$OUT.clear" 2> "$OUT.clear.err"
echo $? >> "$OUT.rc"
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a private read-only bind mount")
def test_finding12_clear_and_prune_on_a_read_only_root_fail_and_say_so(populated_cache,
                                                                      tmp_path):
    root = populated_cache.root
    before = snapshot(root)
    out = tmp_path / "ro"
    env = dict(os.environ, ROOT=str(root), OUT=str(out), PY=sys.executable)
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           _READ_ONLY], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot bind-mount read-only here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ro.rc").read_text().split() == ["1", "1"]
    for cmd in ("prune", "clear"):
        err = (tmp_path / f"ro.{cmd}.err").read_text()
        res = json.loads((tmp_path / f"ro.{cmd}").read_text())
        assert res["errors"] and "read-only" in err, err
    assert snapshot(root) == before


def test_finding12_stray_items_in_the_entries_tree_are_reported_by_verify(
        populated_cache, capsys):
    shard = next(p for p in populated_cache.entries_dir.iterdir())
    (shard / "stray.txt").write_text("not an entry")
    (populated_cache.entries_dir / "zz").mkdir()
    code, out, _ = run(capsys, "verify", "--json")
    res = json.loads(out)
    assert code == 1 and res["bad"] == []
    assert sorted(s["item"] for s in res["stray"]) == sorted(
        [f"entries/{shard.name}/stray.txt", "entries/zz"])
    assert all(s["quarantined_to"] for s in res["stray"])
    assert run(capsys, "verify")[0] == 0  # moved aside: the next verify is clean


def test_finding12_clear_and_prune_on_an_empty_root_say_so(cache_dir, capsys):
    code, out, _ = run(capsys, "clear", "--yes")
    assert code == 0 and "nothing to clear" in out
    code, out, _ = run(capsys, "prune", "--older-than", "1")
    assert code == 0 and "nothing to prune" in out
    assert not cache_dir.exists()


# --- 13. the LRU stamp: moved in place only when it is a plain file of ours -------------

def _stamp(cache: DiskCache, key: str) -> Path:
    return cache.entry_dir(key) / STAMP


def test_a_load_moves_our_stamp_in_place(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    key = _fake(cache, 1, 1000)
    cache.touch(key, time.time() - 86400)
    before = _stamp(cache, key).lstat()
    assert abs(cache.last_used(key) - before.st_mtime) < 1e-3
    assert cache.load(key) is not None
    after = _stamp(cache, key).lstat()
    assert after.st_ino == before.st_ino  # the same file, no new one renamed over it
    assert time.time() - cache.last_used(key) < 60
    assert not list(cache.tmp_dir.iterdir())  # and nothing was written in tmp/


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_stamp_that_is_a_link_is_replaced_never_written_through(tmp_path, kind):
    cache = DiskCache(tmp_path / "cache")
    key = _fake(cache, 2, 1000)
    outside = tmp_path / "precious.txt"
    outside.write_text("not the cache's\n")
    old = time.time() - 7200
    os.utime(outside, (old, old))
    stamp = _stamp(cache, key)

    def plant():
        stamp.unlink()
        if kind == "symlink":
            stamp.symlink_to(outside)
        else:
            os.link(outside, stamp)

    for way in (lambda: cache.load(key), lambda: cache.touch(key)):
        plant()
        way()
        assert outside.stat().st_mtime == old and outside.read_text() == "not the cache's\n"
        assert stamp.is_file() and not stamp.is_symlink() and stamp.lstat().st_nlink == 1
        assert time.time() - cache.last_used(key) < 60


@needs_root_and_nobody
def test_a_stamp_of_another_user_is_replaced_not_modified(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    key = _fake(cache, 3, 1000)
    stamp = _stamp(cache, key)
    keep = tmp_path / "their-stamp"
    os.link(stamp, keep)  # to look at the old file afterwards
    os.chown(stamp, NOBODY.pw_uid, NOBODY.pw_gid)
    old = time.time() - 7200
    os.utime(stamp, (old, old))
    assert cache.load(key) is not None
    assert keep.stat().st_mtime == old and keep.stat().st_uid == NOBODY.pw_uid
    assert stamp.lstat().st_uid == os.getuid() and stamp.lstat().st_ino != keep.stat().st_ino
    assert time.time() - cache.last_used(key) < 60
