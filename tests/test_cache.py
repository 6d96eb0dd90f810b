"""The disk cache under real files and real processes (docs/cache.md).

No filesystem mocks: entries are compiled by NVRTC, corrupted byte by byte, raced by
eight processes, killed with SIGKILL, made read-only for a non-root user and
shared with other users. Every random choice comes from the logged-seed ``rng``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from jitmeta import envs, kernels
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.kernels import plan
from jitmeta.jit import build as jit_build
from jitmeta.jit.build import OfflineMissError, stats
from jit_support import build, key_for, warm_command
from jitmeta.jit.cache import (CUBIN, META, SOURCE, STAMP, CacheError, DiskCache,
                               cache_key)

LIM = limits_for_arch("sm_90", 132)
# a small deployment: 1-3000 tokens, smxx only -> static c1024/c2048/c4096, dense+varlen
SMALL_BATCHES = "1-3000"
SMALL_KEYS = 6


def _shape_plan(batch: int, varlen: bool = False):
    return plan(batch, 1, varlen, 132, 256, "smxx", LIM)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mode) of everything under root."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else 0, st.st_mode)
    return out


def _assert_clean(cache: DiskCache, n_keys: int | None = None) -> list[str]:
    """Every visible entry passes the deep check; no temp dirs; nothing stray."""
    keys = list(cache.keys())
    for key in keys:
        problem, _, _ = cache.check(key, deep=True)
        assert problem is None, f"entry {key[:16]}: {problem}"
    for shard in cache.entries_dir.iterdir():
        for d in shard.iterdir():
            assert d.name in keys, f"stray item in entries/: {d}"
    leftovers = list(cache.tmp_dir.iterdir()) if cache.tmp_dir.exists() else []
    assert leftovers == [], f"temp leftovers: {leftovers}"
    if n_keys is not None:
        assert len(keys) == n_keys
    return keys


# --- layout, modes, keys ---------------------------------------------------------------

def test_entry_layout_modes_and_metadata(tmp_path, fresh_jit):
    root = tmp_path / "a" / "b" / "cache"  # three levels we create
    p = _shape_plan(100)
    with envs.override(JITMETA_CACHE_DIR=str(root)):
        built = build(p.code, p)
    assert built.source == "compiled"
    cache = DiskCache(root)
    d = cache.entry_dir(built.key)
    assert sorted(os.listdir(d)) == sorted([CUBIN, SOURCE, META, STAMP])
    for level in (tmp_path / "a", tmp_path / "a" / "b", root, cache.base, cache.entries_dir,
                  d.parent, d, cache.tmp_dir):
        assert stat.S_IMODE(level.stat().st_mode) == 0o700, level
    for f in d.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    meta = json.loads((d / META).read_text())
    for field in ("key", "arch", "variant", "kernel_names", "nvrtc_options", "nvrtc_version",
                  "cuda_bindings_version", "cubin_sha256", "source_sha256", "created",
                  "example_plan", "resources", "compile_seconds", "meta_sha256"):
        assert field in meta, field
    assert meta["arch"] == "sm_90" and meta["example_plan"]["batch"] == 100
    assert cache.check(built.key, deep=True)[0] is None
    # the key is re-derivable from the stored inputs, and holds no path
    source = (d / SOURCE).read_text()
    assert cache_key(source, [o.encode() for o in meta["nvrtc_options"]], meta["arch"],
                     meta["kernel_names"]) == built.key
    assert str(tmp_path) not in source and str(tmp_path) not in json.dumps(
        meta["nvrtc_options"])


def test_key_is_independent_of_root_and_cwd(tmp_path, fresh_jit, monkeypatch):
    p = _shape_plan(100)
    with envs.override(JITMETA_CACHE_DIR=str(tmp_path / "one")):
        k1 = key_for(p.code)[0]
    monkeypatch.chdir(tmp_path)
    with envs.override(JITMETA_CACHE_DIR=str(tmp_path / "two")):
        k2 = key_for(p.code)[0]
    assert k1 == k2
    with envs.override(JITMETA_NVRTC_FLAGS="-lineinfo"):
        assert key_for(p.code)[0] != k1  # extra NVRTC flags are part of the key


def test_disk_hit_then_memory_hit(populated_cache, golden_codes):
    code, p = golden_codes[0]
    assert build(code, p).source == "disk"
    assert build(code, p).source == "memory"
    s = stats()
    assert (s["disk_hits"], s["memory_hits"], s["compiles"]) == (1, 1, 0)


# --- eight processes at once -----------------------------------------------------------

_WORKER = """
import json, os, random, sys, time
go, ready, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
import jitmeta
from jitmeta.warmup import warm
open(ready, "w").close()
deadline = time.time() + 120
while not os.path.exists(go):
    if time.time() > deadline:
        sys.exit("never got the go signal")
    time.sleep(0.002)
time.sleep(random.Random(seed).uniform(0, 0.02))
r = warm("sm_90", num_sms=132, batches=sys.argv[4], schedules=("smxx",), jobs=2)
print(json.dumps({"stats": jitmeta.stats(), "result": r.to_dict()}))
"""


def test_eight_processes_warm_the_same_keys_at_once(tmp_path, rng):
    root = tmp_path / "cache"
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    go = tmp_path / "go"
    env = dict(os.environ, JITMETA_CACHE_DIR=str(root))
    procs = []
    for i in range(8):
        ready = tmp_path / f"ready{i}"
        procs.append((ready, subprocess.Popen(
            [sys.executable, str(script), str(go), str(ready), str(rng.randrange(1 << 30)),
             SMALL_BATCHES], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)))
    deadline = time.time() + 120
    while not all(r.exists() for r, _ in procs):
        assert time.time() < deadline, "workers did not start"
        assert all(p.poll() is None for _, p in procs), "a worker died while starting"
        time.sleep(0.01)
    go.touch()  # all eight are imported and spinning: release them together
    reports = []
    for _, p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for i, r in enumerate(reports):
        print(f"worker {i}: compiles {r['stats']['compiles']}, disk hits "
              f"{r['stats']['disk_hits']}")
    entry_sets = {tuple(r["result"]["entries"]) for r in reports}
    assert len(entry_sets) == 1, "processes disagree on the keys"
    assert all(r["result"]["failed"] == 0 for r in reports)
    assert sum(r["stats"]["compiles"] for r in reports) == SMALL_KEYS, reports
    assert sum(r["stats"]["publish_lost"] for r in reports) == 0
    keys = _assert_clean(DiskCache(root), SMALL_KEYS)
    assert sorted(keys) == sorted(entry_sets.pop())
    assert not (root / "v1" / "quarantine").exists()


# --- SIGKILL at random points ----------------------------------------------------------

_VICTIM = """
import sys
import jitmeta
from jitmeta.warmup import warm
print("ready", flush=True)
warm("sm_90", num_sms=132, batches=sys.argv[1], schedules=("smxx",), jobs=2)
print("done", flush=True)
"""


def test_sigkill_never_leaves_a_partial_entry_and_next_run_repairs(tmp_path, rng,
                                                                   fresh_jit):
    script = tmp_path / "victim.py"
    script.write_text(_VICTIM)
    for attempt in range(4):
        root = tmp_path / f"cache{attempt}"
        proc = subprocess.Popen([sys.executable, str(script), SMALL_BATCHES],
                                env=dict(os.environ, JITMETA_CACHE_DIR=str(root)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        delay = rng.uniform(0.0, 0.9)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
        cache = DiskCache(root)
        visible = list(cache.keys())
        temps = list(cache.tmp_dir.iterdir()) if cache.tmp_dir.exists() else []
        print(f"attempt {attempt}: killed after {delay:.3f} s: {len(visible)} entries, "
              f"{len(temps)} temp dirs left")
        for key in visible:  # whatever is visible is whole and valid
            assert cache.check(key, deep=True)[0] is None
        # the next run (its locks free although the victim may have held one) repairs
        jit_build.reset_stats(clear_memory=True)
        t0 = time.perf_counter()
        with envs.override(JITMETA_CACHE_DIR=str(root)):
            from jitmeta.warmup import warm

            result = warm("sm_90", num_sms=132, batches=SMALL_BATCHES, schedules=("smxx",),
                          jobs=2)
        assert time.perf_counter() - t0 < 30, "a dead lock holder delayed the next run"
        assert not result.failed
        assert len(result.compiled) == SMALL_KEYS - len(visible)
        _assert_clean(cache, SMALL_KEYS)


def test_killed_lock_holder_does_not_block(tmp_path, fresh_jit):
    cache = DiskCache(tmp_path / "cache")
    key = "ab" * 32
    lock_path = cache.lock(key).lock_file
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import filelock, time
            lock = filelock.FileLock({lock_path!r})
            lock.acquire()
            print("held", flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = cache.lock(key)
        with pytest.raises(Exception):  # held: a short wait times out
            lock.acquire(timeout=0.2)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        t0 = time.perf_counter()
        lock.acquire(timeout=5)
        lock.release()
        assert time.perf_counter() - t0 < 2
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_dead_builders_temp_dirs_are_swept(populated_cache, golden_codes, fresh_jit):
    cache = populated_cache
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    name = cache._tmp_name("new", "f" * 64).replace(f"-{os.getpid()}-", f"-{dead}-")
    stale = cache.tmp_dir / (name + "x1")
    stale.mkdir(parents=True)
    (stale / CUBIN).write_bytes(b"half")
    live = cache.tmp_dir / (cache._tmp_name("new", "e" * 64) + "x2")  # ours: alive
    live.mkdir()
    assert cache.sweep_tmp() == 1
    assert not stale.exists() and live.exists()


# --- corruption ------------------------------------------------------------------------

def _corrupt(cache: DiskCache, key: str, other: str, how: str, rng) -> str:
    d = cache.entry_dir(key)
    if how == "bitflip":
        data = bytearray((d / CUBIN).read_bytes())
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
        (d / CUBIN).write_bytes(bytes(data))
        return f"flipped a bit at byte {pos}"
    if how == "truncate":
        data = (d / CUBIN).read_bytes()
        cut = rng.randrange(1, len(data))
        (d / CUBIN).write_bytes(data[:cut])
        return f"truncated to {cut} bytes"
    if how == "swap":
        shutil.copyfile(cache.entry_dir(other) / CUBIN, d / CUBIN)
        return "cubin of another key"
    if how == "meta-bitflip":
        data = bytearray((d / META).read_bytes())
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(7)  # stay ASCII: exercise the checksum, not JSON
        (d / META).write_bytes(bytes(data))
        return f"flipped a metadata bit at byte {pos}"
    raise AssertionError(how)


CORRUPTIONS = ["bitflip", "truncate", "swap", "meta-bitflip"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corruption_is_quarantined_and_rebuilt_on_load(populated_cache, golden_codes, how,
                                                       rng, caplog):
    cache = populated_cache
    (code, p), (other_code, _) = golden_codes[0], golden_codes[1]
    key, other = key_for(code)[0], key_for(other_code)[0]
    print(_corrupt(cache, key, other, how, rng))
    with caplog.at_level("WARNING", logger="jitmeta"):
        built = build(code, p)
    assert built.source == "compiled"
    s = stats()
    assert (s["quarantined"], s["compiles"], s["disk_hits"]) == (1, 1, 0)
    assert cache.quarantined() == 1
    qdir = next(cache.quarantine_dir.iterdir())
    assert qdir.name.startswith(key) and (qdir / "REASON").read_text().strip()
    assert sum("is bad" in r.getMessage() for r in caplog.records) == 1
    assert cache.check(key, deep=True)[0] is None  # rebuilt and republished
    assert built.cubin == cache.load(key).cubin


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corruption_offline_is_reported_not_loaded(populated_cache, golden_codes, how, rng):
    cache = populated_cache
    (code, p), (other_code, _) = golden_codes[0], golden_codes[1]
    key, other = key_for(code)[0], key_for(other_code)[0]
    _corrupt(cache, key, other, how, rng)
    with envs.override(JITMETA_OFFLINE="1"):
        with pytest.raises(OfflineMissError) as exc:
            build(code, p)
    msg = str(exc.value)
    assert "quarantined" in msg and "bad" in msg and key[:16] in msg
    assert stats()["compiles"] == 0 and cache.quarantined() == 1


def test_swapped_whole_entry_is_caught(populated_cache, golden_codes):
    """meta.json + cubin of another key moved under this key's name."""
    cache = populated_cache
    key, other = key_for(golden_codes[0][0])[0], key_for(golden_codes[1][0])[0]
    for name in (CUBIN, META, SOURCE):
        shutil.copyfile(cache.entry_dir(other) / name, cache.entry_dir(key) / name)
    problem = cache.check(key)[0]
    assert problem and "key" in problem
    assert cache.load(key) is None and cache.quarantined() == 1


def test_a_hit_never_makes_the_miss_details(populated_cache, golden_codes):
    """example/hint/what given as callables are called on a miss only."""
    (code, _p), made = golden_codes[0], []

    def detail(name):
        return lambda: made.append(name) or name

    src = kernels.source(code)
    hit = jit_build.build(src, envs.snapshot(), example=detail("example"),
                          hint=detail("hint"), what=detail("what"))
    assert hit.source == "disk" and made == []
    other = plan(4242, 1, True, 132, 256, "smxx", LIM).code  # not in the golden cache
    with envs.override(JITMETA_OFFLINE="1"), pytest.raises(OfflineMissError) as exc:
        jit_build.build(kernels.source(other), envs.snapshot(), example=detail("example"),
                        hint=detail("hint"), what=detail("what"))
    assert sorted(made) == ["example", "hint", "what"]
    assert "no cubin for what" in str(exc.value) and "hint" in str(exc.value)


# --- offline miss ----------------------------------------------------------------------

def test_offline_miss_names_config_and_the_exact_warm_command(cache_dir):
    from jitmeta.cache_tools.cli import main

    p = plan(5000, 2, False, 78, 512, "sm90", LIM)
    with envs.override(JITMETA_OFFLINE="1"):
        with pytest.raises(OfflineMissError) as exc:
            build(p.code, p)
    msg = str(exc.value)
    cmd = warm_command(p, cache_dir=cache_dir)
    assert cmd in msg
    for piece in ("batch 5000", "next_n 2", "78 SMs", "format sm90", "split_kv 512",
                  "sm_90", str(cache_dir), "JITMETA_OFFLINE"):
        assert piece in msg, piece
    assert stats()["offline_misses"] == 1 and stats()["compiles"] == 0
    # running the command from the message makes the same call hit, offline
    argv = shlex.split(cmd)
    assert argv[0] == "jitmeta-cache"
    assert main(argv[1:] + ["--json"]) == 0
    jit_build.reset_stats(clear_memory=True)
    with envs.override(JITMETA_OFFLINE="1"):
        assert build(p.code, p).source == "disk"
    assert stats()["compiles"] == 0


def test_offline_command_carries_planner_knobs(cache_dir):
    from jitmeta.cache_tools.cli import main

    with envs.override(JITMETA_VARIANT="chunked", JITMETA_CHUNK="2048"):
        p = _shape_plan(300)
        assert p.variant == "chunked"
        with envs.override(JITMETA_OFFLINE="1"), pytest.raises(OfflineMissError) as exc:
            build(p.code, p)
    line = next(ln.strip() for ln in str(exc.value).splitlines() if "jitmeta-cache" in ln
                and "warm" in ln and "--arch" in ln)
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words if "=" in w and w.startswith("JITMETA_"))
    assert env == {"JITMETA_VARIANT": "chunked", "JITMETA_CHUNK": "2048"}
    with envs.override(**env):
        assert main(words[len(env) + 1:]) == 0
    jit_build.reset_stats(clear_memory=True)
    with envs.override(JITMETA_OFFLINE="1"):
        assert build(p.code, p).source == "disk"


def test_miss_manifest_records_and_warm_replays(cache_dir, tmp_path):
    from jitmeta.cache_tools.cli import main

    manifest = tmp_path / "misses.jsonl"
    plans = [_shape_plan(100), _shape_plan(3000, varlen=True)]
    with envs.override(JITMETA_OFFLINE="1", JITMETA_MISS_MANIFEST=str(manifest),
                       JITMETA_NVRTC_FLAGS="-lineinfo"):
        keys = []
        for p in plans:
            keys.append(key_for(p.code)[0])
            with pytest.raises(OfflineMissError):
                build(p.code, p)
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    assert [x["key"] for x in lines] == keys
    assert all(x["offline"] and x["nvrtc_flags"] == ["-lineinfo"] for x in lines)
    # replay in an environment without the flag: the recorded flags make the same keys
    assert main(["warm", "--manifest", str(manifest), "--json"]) == 0
    assert sorted(DiskCache(cache_dir).keys()) == sorted(keys)
    jit_build.reset_stats(clear_memory=True)
    with envs.override(JITMETA_OFFLINE="1", JITMETA_NVRTC_FLAGS="-lineinfo"):
        for p in plans:
            assert build(p.code, p).source == "disk"


# --- read-only roots -------------------------------------------------------------------

_READ_ONLY = """
import json, logging, os, sys
root = sys.argv[1]
os.environ["JITMETA_CACHE_DIR"] = root
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta import envs, kernels
from jitmeta.kernels import plan
from jitmeta.jit import build as jb
lim = limits_for_arch("sm_90", 132)
def build(code):
    return jb.build(kernels.source(code), envs.snapshot())
cached = [plan(b, 1, False, 132, 256, "smxx", lim).code for b in (100, 2000)]
missing = [plan(b, 1, True, 132, 256, "smxx", lim).code for b in (100, 2000)]
for c in cached:
    build(c)
# make the whole tree read-only; as its (non-root) owner that stops our writes
for d, dirs, files in os.walk(root):
    for f in files:
        os.chmod(os.path.join(d, f), 0o444)
for d, dirs, files in os.walk(root, topdown=False):
    os.chmod(d, 0o555)
before = sorted((p, os.stat(os.path.join(d, p)).st_mtime_ns)
                for d, _, fs in os.walk(root) for p in fs)
jb.reset_stats(clear_memory=True)
warnings = []
class H(logging.Handler):
    def emit(self, r): warnings.append(r.getMessage())
logging.getLogger("jitmeta").addHandler(H())
sources = [build(c).source for c in cached + missing + missing]
after = sorted((p, os.stat(os.path.join(d, p)).st_mtime_ns)
               for d, _, fs in os.walk(root) for p in fs)
print(json.dumps({"uid": os.getuid(), "stats": jb.stats(), "sources": sources,
                  "warnings": warnings, "unchanged": before == after}))
"""


def test_read_only_root_hits_load_misses_compile_in_memory_one_warning(tmp_path):
    """A chmod'ed read-only tree as its owner. Root ignores permission bits, so as root
    the check runs as 'nobody' (setpriv); only that part is skipped without setpriv."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root (permission bits do not stop root's writes) and "
                        "no setpriv to drop to an unprivileged user")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    # tmp_path's parents are private to root: work in a fresh directory under /tmp
    base = Path(tempfile.mkdtemp(prefix="jitmeta-ro-", dir="/tmp"))
    try:
        # reachable by the unprivileged user (the root is below it); sticky like /tmp,
        # or the cache would refuse a parent anyone may rename things in
        os.chmod(base, 0o1777)
        script = base / "ro.py"
        script.write_text(_READ_ONLY)
        os.chmod(script, 0o644)
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        env.update(HOME=str(base), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([*prefix, sys.executable, str(script), str(base / "cache")],
                              env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        rep = json.loads(proc.stdout.strip().splitlines()[-1])
        assert rep["uid"] != 0
        assert rep["sources"] == ["disk", "disk", "compiled", "compiled", "memory", "memory"]
        assert rep["stats"]["disk_hits"] == 2 and rep["stats"]["compiles"] == 2
        ro = [w for w in rep["warnings"] if "not writable" in w]
        assert len(ro) == 1, rep["warnings"]
        assert rep["unchanged"], "a read-only root was modified"
    finally:
        for d, dirs, files in os.walk(base):
            os.chmod(d, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_unwritable_root_falls_back_to_memory(populated_cache, golden_codes, caplog):
    """The same policy, reached as any user: the temp area cannot be created."""
    cache = populated_cache
    shutil.rmtree(cache.tmp_dir, ignore_errors=True)
    cache.tmp_dir.write_bytes(b"")  # mkdir(tmp) now fails: nothing can be published
    code, p = golden_codes[0]
    new = _shape_plan(2000, varlen=True)
    with caplog.at_level("WARNING", logger="jitmeta"):
        assert build(code, p).source == "disk"
        assert build(new.code, new).source == "compiled"
        assert build(_shape_plan(3000).code).source == "compiled"
    assert sum("not writable" in r.getMessage() for r in caplog.records) == 1
    assert key_for(new.code)[0] not in set(cache.keys())


# --- directories other users can write -------------------------------------------------

@pytest.mark.parametrize("where", ["root", "entries", "entry"])
def test_directory_writable_by_others_is_refused(populated_cache, golden_codes, where):
    cache = populated_cache
    code, p = golden_codes[0]
    key = key_for(code)[0]
    target = {"root": cache.root, "entries": cache.entries_dir,
              "entry": cache.entry_dir(key)}[where]
    os.chmod(target, 0o777 if where != "entry" else 0o720)
    with pytest.raises(CacheError) as exc:
        build(code, p)
    msg = str(exc.value)
    assert str(target) in msg and "writable by other users" in msg
    assert "JITMETA_ALLOW_SHARED_CACHE=1" in msg and "chmod go-w" in msg
    assert stats()["compiles"] == 0
    with envs.override(JITMETA_ALLOW_SHARED_CACHE="1"):
        assert build(code, p).source == "disk"


def test_directory_owned_by_another_user_is_refused(populated_cache, golden_codes):
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    cache = populated_cache
    code, p = golden_codes[0]
    os.chown(cache.entries_dir, 65534, 65534)
    with pytest.raises(CacheError, match="owned by uid 65534"):
        build(code, p)


def test_sticky_shared_parent_root_is_accepted(tmp_path, fresh_jit):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o1777)  # like /tmp: others cannot replace what we create inside
    p = _shape_plan(100)
    with envs.override(JITMETA_CACHE_DIR=str(root)):
        assert build(p.code, p).source == "compiled"
    jit_build.reset_stats(clear_memory=True)
    os.chmod(DiskCache(root).base, 0o1777)  # but not below the root
    with envs.override(JITMETA_CACHE_DIR=str(root)), pytest.raises(CacheError):
        build(p.code, p)


# --- size cap --------------------------------------------------------------------------

def _fake_entry(cache: DiskCache, i: int, size: int) -> str:
    key = f"{i:02x}" * 32
    cache.publish(key, b"\x7fELF" + bytes(size - 4), {"arch": "sm_90", "variant": "x"})
    return key


def test_prune_evicts_least_recently_used_by_our_stamp(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    keys = [_fake_entry(cache, i, 10_000) for i in range(5)]
    now = time.time()
    # our stamps say 3 < 0 < 4 < 1 < 2 (oldest first); mtimes/atimes say the opposite
    for key, age in zip(keys, (400, 100, 50, 500, 300)):
        cache.touch(key, now - age)
        meta = cache.entry_dir(key) / META
        os.utime(meta, (now + age, now + age))
    per = cache.entry_bytes(keys[0])
    removed = cache.prune(max_bytes=3 * per)
    assert removed == [keys[3], keys[0]]
    assert sorted(cache.keys()) == sorted([keys[1], keys[2], keys[4]])
    assert cache.prune(older_than_s=200) == [keys[4]]
    assert cache.prune(max_bytes=0, protect=[keys[2]]) == [keys[1]]
    assert list(cache.keys()) == [keys[2]]


def test_max_bytes_is_enforced_after_each_publish(cache_dir, fresh_jit):
    plans = [_shape_plan(100), _shape_plan(2000), _shape_plan(3000), _shape_plan(100, True)]
    build(plans[0].code, plans[0])
    cache = DiskCache(cache_dir)
    k0 = key_for(plans[0].code)[0]
    per = cache.entry_bytes(k0)
    with envs.override(JITMETA_CACHE_MAX_BYTES=str(int(2.5 * per))):
        build(plans[1].code, plans[1])
        k1 = key_for(plans[1].code)[0]
        time.sleep(0.01)
        jit_build.reset_stats(clear_memory=True)
        assert build(plans[0].code, plans[0]).source == "disk"  # refreshes k0's stamp
        build(plans[2].code, plans[2])  # over the cap: the LRU one (k1) goes
        assert k1 not in set(cache.keys()) and k0 in set(cache.keys())
        assert stats()["pruned"] == 1
        build(plans[3].code, plans[3])
    assert cache.total_bytes() <= int(2.5 * per) + per // 10
    assert key_for(plans[3].code)[0] in set(cache.keys())  # the new entry is kept


# --- environment variables -------------------------------------------------------------

BAD_VALUES = {
    "JITMETA_CACHE_DIR": "   ",
    "JITMETA_CACHE_MAX_BYTES": "lots",
    "JITMETA_OFFLINE": "maybe",
    "JITMETA_DISABLE_DISK_CACHE": "2",
    "JITMETA_VARIANT": "fastest",
    "JITMETA_THREADS": "many",
    "JITMETA_CHUNK": "-5",
    "JITMETA_SMEM_BUDGET": "0",
    "JITMETA_ARCH": "sm_13",
    "JITMETA_NVRTC_FLAGS": '"-lineinfo',
    "JITMETA_CHECK_INPUTS": "sometimes",
    "JITMETA_LOG": "loud",
    "JITMETA_ALLOW_SHARED_CACHE": "please",
    "JITMETA_MISS_MANIFEST": "  ",
    "JITMETA_LOCK_TIMEOUT": "-1",
}


def test_every_knob_has_a_malformed_example():
    assert set(BAD_VALUES) == set(envs.KNOBS), "add a malformed value for new knobs"


@pytest.mark.parametrize("name", sorted(envs.KNOBS))
def test_malformed_env_value_names_the_variable(name, monkeypatch, capsys):
    from jitmeta.cache_tools.cli import main

    monkeypatch.setenv(name, BAD_VALUES[name])
    with pytest.raises(envs.EnvError) as exc:
        envs.get(name)
    assert name in str(exc.value) and "expected" in str(exc.value)
    assert main(["info"]) == 2
    err = capsys.readouterr().err
    assert name in err and "expected" in err
