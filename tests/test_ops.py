"""The custom ops and the serving-facing plumbing that runs without a GPU.

* ``torch.library.opcheck`` on ``jitmeta::paged_mqa_logits_metadata`` and its ``_out``
  variant; the fake implementation (shape, dtype, device, and validation at trace time,
  also for fake CUDA tensors);
* ``torch.compile(fullgraph=True)`` on the CPU path (inductor and dynamic shapes), and
  ``torch.export`` of the CUDA path from fake CUDA tensors (one op, no graph break);
* eager calls skip the dispatcher;
* thread safety of the CPU path, and of plan + build with real NVRTC (each cache key
  compiled once, per-device limits and arch);
* the pieces of the lean launch path that need no driver: knob snapshots, per-thread
  kernel-argument buffers, workspace keys.

GPU behaviour (launch, CUDA graphs, streams, PDL, devices) is in test_gpu_serving.py.
"""

from __future__ import annotations

import ctypes
import os
import random
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import jitmeta
from jitmeta import api, envs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.jit import runtime

I32 = torch.int32
OP = torch.ops.jitmeta.paged_mqa_logits_metadata.default
OP_OUT = torch.ops.jitmeta.paged_mqa_logits_metadata_out.default
SEED = int(os.environ.get("JITMETA_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
print(f"[test_ops] seed={SEED} (set JITMETA_TEST_SEED={SEED} to reproduce)")


def _lengths(gen: torch.Generator, batch: int, next_n: int = 1) -> torch.Tensor:
    t = torch.randint(0, 9000, (batch, next_n), generator=gen, dtype=I32)
    t[torch.rand(batch, next_n, generator=gen) < 0.2] = 0
    return t


def _indices(gen: torch.Generator, batch: int) -> torch.Tensor:
    runs = torch.randint(1, 4, (batch,), generator=gen)
    return torch.repeat_interleave(torch.arange(batch), runs)[:batch].to(I32)


def _case(name: str):
    """(args, kwargs) of the functional op for a named case."""
    gen = torch.Generator().manual_seed(SEED)
    if name == "dense":
        return (_lengths(gen, 50), 64, 8), {}
    if name == "flat":
        return (_lengths(gen, 50).view(-1), 64, 132), {}
    if name == "next_n=3-sm90":
        return (_lengths(gen, 33, 3), 64, 8), {"schedule": "sm90"}
    if name == "varlen":
        return (_lengths(gen, 70), 64, 16, _indices(gen, 70)), {}
    if name == "split128-one-sm":
        return (_lengths(gen, 5, 2), 32, 1), {"split_kv": 128}
    if name == "zeros-more-sms-than-batch":
        return (torch.zeros(32, 1, dtype=I32), 64, 100), {"schedule": "sm90"}
    raise KeyError(name)


CASES = ["dense", "flat", "next_n=3-sm90", "varlen", "split128-one-sm",
         "zeros-more-sms-than-batch"]


def _reference(args, kwargs):
    ctx, _, num_sms, *rest = args
    return jitmeta.reference_schedule(ctx, num_sms, rest[0] if rest else None,
                                      split_kv=kwargs.get("split_kv", 256),
                                      schedule=kwargs.get("schedule", "smxx"))


# --- registration -------------------------------------------------------------------------

def test_schemas():
    assert str(OP._schema) == (
        "jitmeta::paged_mqa_logits_metadata(Tensor context_lens, SymInt block_kv, "
        "SymInt num_sms, Tensor? indices=None, SymInt split_kv=256, str schedule=\"smxx\", "
        "bool pdl=False) -> Tensor")
    schema = OP_OUT._schema
    assert [a.name for a in schema.arguments] == [
        "context_lens", "block_kv", "num_sms", "out", "indices", "split_kv", "schedule",
        "pdl"]
    mutated = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    assert mutated == ["out"] and not schema.returns
    assert not any(a.alias_info for a in OP._schema.arguments)


def test_import_registers_the_ops_and_nothing_else(run_python, tmp_path):
    res = run_python("""
        import os, sys, torch
        import jitmeta
        ops = torch.ops.jitmeta
        print(hasattr(ops, "paged_mqa_logits_metadata"),
              hasattr(ops, "paged_mqa_logits_metadata_out"),
              torch.cuda.is_initialized(), "cuda.bindings.driver" in sys.modules and
              "libcuda" in open("/proc/self/maps").read(), sorted(os.listdir(".")))
        """, cwd=tmp_path, env={"JITMETA_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True", "False", "False", "[]"], res.stdout


# --- opcheck and the fake implementation --------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_opcheck_functional(name):
    args, kwargs = _case(name)
    torch.library.opcheck(OP, args, kwargs)
    assert torch.equal(OP(*args, **kwargs), _reference(args, kwargs))


@pytest.mark.parametrize("name", CASES)
def test_opcheck_out_variant(name):
    args, kwargs = _case(name)
    out = torch.full((args[2] + 1, 2), -1, dtype=I32)
    torch.library.opcheck(OP_OUT, (*args[:3], out, *args[3:]), kwargs)
    OP_OUT(*args[:3], out, *args[3:], **kwargs)
    assert torch.equal(out, _reference(args, kwargs))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fake_result_on_the_input_device(device):
    """Fake tensors need no GPU even when they claim to be CUDA tensors."""
    with FakeTensorMode():
        ctx = torch.empty(100, 2, dtype=I32, device=device)
        res = OP(ctx, 64, 132)
        out = torch.empty(133, 2, dtype=I32, device=device)
        OP_OUT(ctx, 64, 132, out)
    assert res.shape == (133, 2) and res.dtype == I32 and res.device.type == device


@pytest.mark.parametrize("bad,exc,name", [
    (dict(ctx=torch.int64), TypeError, "context_lens"),
    (dict(num_sms=0), ValueError, "num_sms"),
    (dict(block_kv=96), ValueError, "block_kv"),
    (dict(next_n=2, varlen=True), ValueError, "next_n"),
    (dict(schedule="sm100"), ValueError, "schedule"),
    (dict(out_rows=5), ValueError, "out"),
])
def test_fake_implementation_validates(bad, exc, name):
    """Bad arguments fail while tracing, with the eager message."""
    with FakeTensorMode():
        ctx = torch.empty(10, bad.get("next_n", 1), dtype=bad.get("ctx", I32), device="cuda")
        idx = torch.empty(10, dtype=I32, device="cuda") if bad.get("varlen") else None
        num_sms = bad.get("num_sms", 4)
        kw = dict(schedule=bad.get("schedule", "smxx"))
        with pytest.raises(exc, match=name):
            if "out_rows" in bad:
                OP_OUT(ctx, 64, num_sms, torch.empty(bad["out_rows"] + 7, 2, dtype=I32,
                                                     device="cuda"), idx, **kw)
            else:
                OP(ctx, bad.get("block_kv", 64), num_sms, idx, **kw)


# --- torch.compile / torch.export ---------------------------------------------------------

def _ops_in(gm: torch.fx.GraphModule) -> list:
    """Called ops, as overloads (dynamo records packets, export overloads)."""
    return [n.target.default if isinstance(n.target, torch._ops.OpOverloadPacket)
            else n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_compile_fullgraph_cpu_inductor():
    gen = torch.Generator().manual_seed(SEED)
    ctx, idx = _lengths(gen, 64), _indices(gen, 64)

    def step(ctx, idx, out):
        fresh = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 16, idx)
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 16, out=out, schedule="sm90")
        return fresh + 1, out

    compiled = torch.compile(step, fullgraph=True)
    out = torch.full((17, 2), -1, dtype=I32)
    fresh, res = compiled(ctx, idx, out)
    assert res is out
    assert torch.equal(fresh, jitmeta.reference_schedule(ctx, 16, idx) + 1)
    assert torch.equal(out, jitmeta.reference_schedule(ctx, 16, schedule="sm90"))


def test_compile_fullgraph_records_one_op_per_call():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(ctx, out):
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 8, out=out)
        return jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 8)

    ctx = _lengths(torch.Generator().manual_seed(SEED), 40, 2)
    out = torch.empty(9, 2, dtype=I32)
    res = torch.compile(step, fullgraph=True, backend=backend)(ctx, out)
    assert len(graphs) == 1
    targets = _ops_in(graphs[0])
    assert targets.count(OP_OUT) == 1 and targets.count(OP) == 1, targets
    assert torch.equal(res, out) and torch.equal(out, jitmeta.reference_schedule(ctx, 8))


def test_compile_dynamic_shapes_and_num_sms():
    """Batch and num_sms vary between calls: one dynamic graph serves them (SymInts
    reach the fake implementation)."""
    gen = torch.Generator().manual_seed(SEED)
    compiled = torch.compile(
        lambda ctx, idx, n: jitmeta.get_paged_mqa_logits_metadata(ctx, 64, n, idx),
        fullgraph=True, dynamic=True, backend="aot_eager")
    for batch, num_sms in [(10, 8), (33, 16), (70, 5), (129, 300)]:
        ctx, idx = _lengths(gen, batch), _indices(gen, batch)
        assert torch.equal(compiled(ctx, idx, num_sms),
                           jitmeta.reference_schedule(ctx, num_sms, idx)), (batch, num_sms)


def test_compile_reports_bad_input_by_name():
    compiled = torch.compile(lambda c: jitmeta.get_paged_mqa_logits_metadata(c, 64, 4),
                             fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="context_lens must have dtype torch.int32"):
        compiled(torch.ones(8, 1, dtype=torch.int64))


@pytest.mark.parametrize("strict", [True, False], ids=["dynamo", "non-strict"])
def test_export_cuda_path_from_fake_cuda_tensors(strict):
    """The GPU path traces to the ops without a GPU: export from fake CUDA inputs."""

    class Step(torch.nn.Module):
        def forward(self, ctx, idx, out):
            fresh = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, idx, pdl=True)
            jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 132, idx, out=out)
            return fresh, out

    with FakeTensorMode():
        ctx = torch.empty(4096, 1, dtype=I32, device="cuda")
        idx = torch.empty(4096, dtype=I32, device="cuda")
        out = torch.empty(133, 2, dtype=I32, device="cuda")
    ep = torch.export.export(Step(), (ctx, idx, out), strict=strict)
    targets = _ops_in(ep.graph_module)
    assert targets.count(OP) == 1 and targets.count(OP_OUT) == 1, targets
    fresh = [n for n in ep.graph.nodes if n.target is OP][0]
    assert fresh.meta["val"].device.type == "cuda" and fresh.meta["val"].shape == (133, 2)
    assert fresh.args[-1] is True  # pdl reaches the op


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_eager_call_skips_the_dispatcher():
    """The friendly function is not a wrapper of the op in eager mode (the dispatcher
    would cost more than a whole CUDA call); the op itself is dispatched."""
    ctx = _lengths(torch.Generator().manual_seed(SEED), 20)
    with _OpLog() as eager:
        jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 8)
    with _OpLog() as through_op:
        OP(ctx, 64, 8)
    assert not [n for n in eager.names if n.startswith("jitmeta.")], eager.names
    assert "jitmeta.paged_mqa_logits_metadata.default" in through_op.names


# --- threads ------------------------------------------------------------------------------

def test_cpu_path_from_16_threads():
    gen = torch.Generator().manual_seed(SEED)
    cases = []
    for i in range(24):
        batch = [1, 31, 32, 33, 200, 1000][i % 6]
        varlen = i % 3 == 0
        ctx = _lengths(gen, batch, 1 if varlen else 1 + i % 4)
        idx = _indices(gen, batch) if varlen else None
        num_sms, schedule = [1, 8, 132, 500][i % 4], ("smxx", "sm90")[i % 2]
        cases.append((ctx, idx, num_sms, schedule,
                      jitmeta.reference_schedule(ctx, num_sms, idx, schedule=schedule)))

    def worker(t: int) -> int:
        rng = random.Random(SEED + t)
        bad = 0
        for _ in range(40):
            ctx, idx, num_sms, schedule, want = rng.choice(cases)
            out = torch.empty(num_sms + 1, 2, dtype=I32) if rng.random() < 0.5 else None
            got = jitmeta.get_paged_mqa_logits_metadata(ctx, 64, num_sms, idx, out=out,
                                                        schedule=schedule)
            bad += not torch.equal(got, want)
        return bad

    with ThreadPoolExecutor(16) as pool:
        assert sum(pool.map(worker, range(16))) == 0, f"seed {SEED}"


@pytest.fixture
def two_devices(monkeypatch):
    """Limits of two different GPUs as devices 0 and 1 (a mixed host), without a GPU:
    the planner reads them from api.device_limits' per-device table."""
    monkeypatch.setitem(api._limits, 0, limits_for_arch("sm_90", 132))
    monkeypatch.setitem(api._limits, 1, limits_for_arch("sm_80", 108))
    return api._limits


def test_plans_follow_the_device(two_devices):
    for batch in (100, 5000, 40000, 70000):
        p0 = api.plan_for(batch, 1, True, 132, 256, "smxx", 0)
        p1 = api.plan_for(batch, 1, True, 132, 256, "smxx", 1)
        assert (p0.code.arch, p1.code.arch) == ("sm_90", "sm_80")
        assert p0.smem_bytes <= two_devices[0].smem_optin_bytes
        assert p1.smem_bytes <= two_devices[1].smem_optin_bytes
    # the SM count moves the chunked variant's slab-size steps down:
    # 250000 <= 132 * 2048 = 270336 (H100: slabs of 2048) but > 108 * 2048 = 221184 and
    # <= 108 * 4096 = 442368 (A100: slabs of 4096)
    h100 = api.plan_for(250000, 1, False, 132, 256, "smxx", 0)
    a100 = api.plan_for(250000, 1, False, 132, 256, "smxx", 1)
    assert (h100.variant, h100.code.capacity) == ("chunked", 2048)
    assert (a100.variant, a100.code.capacity) == ("chunked", 4096)


def test_build_from_16_threads_compiles_each_key_once(cache_dir, two_devices):
    """16 threads x mixed shapes on two devices: real NVRTC, each key compiled once,
    every thread gets the cubin for its own device's arch."""
    shapes = [(dev, batch, next_n, varlen)
              for dev in (0, 1) for batch, next_n, varlen in
              [(100, 1, False), (90, 2, False), (100, 1, True), (700, 1, True)]]
    expected = {}
    for dev, batch, next_n, varlen in shapes:
        p = api.plan_for(batch, next_n, varlen, 132, 256, "smxx", dev)
        expected[(dev, batch, next_n, varlen)] = jitmeta.jit.build.key_for(p.code)[0]
    distinct = set(expected.values())
    assert len(distinct) >= 4  # both archs, dense and varlen
    barrier = threading.Barrier(16)

    def worker(t: int):
        barrier.wait()
        got = []
        for i in range(6):
            shape = shapes[(t + i) % len(shapes)]
            _, built = api.build_for(shape[0], shape[1], shape[2], shape[3], 132, 256,
                                     "smxx")
            got.append((shape, built.key, built.cubin))
        return got

    with ThreadPoolExecutor(16) as pool:
        results = [r for rs in pool.map(worker, range(16)) for r in rs]
    stats = jitmeta.stats()
    assert stats["compiles"] == len(distinct), stats
    cubins = {}
    for shape, key, cubin in results:
        assert key == expected[shape]
        assert cubins.setdefault(key, cubin) == cubin
    assert len(cubins) == len(distinct)


# --- the lean launch path, without a driver -----------------------------------------------

def test_knob_snapshot_tracks_environment_and_overrides(monkeypatch):
    for name in list(os.environ):
        if name.startswith("JITMETA_"):
            monkeypatch.delenv(name)
    base = api._call_token()
    monkeypatch.setenv("JITMETA_VARIANT", "chunked")
    in_env = api._call_token()
    assert in_env != base
    with envs.override(JITMETA_VARIANT="static"):
        assert api._call_token() not in (base, in_env)
        with envs.override(JITMETA_NVRTC_FLAGS=["-lineinfo"]):  # unhashable value
            hash(api._call_token())
    assert api._call_token() == in_env
    monkeypatch.setenv("JITMETA_CHECK_INPUTS", "1")
    assert api._call_token() != in_env
    with pytest.raises(KeyError, match="JITMETA_NOPE"):
        envs.token_reader("JITMETA_NOPE")


def test_check_inputs_knob_is_read_per_snapshot():
    ctx = torch.tensor([[3], [-5]], dtype=I32)
    jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4)  # off: the caller's contract
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        with pytest.raises(jitmeta.InputValueError):
            jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4)
    with envs.override(JITMETA_CHECK_INPUTS="maybe"):
        for _ in range(2):  # a bad value is never cached: it raises on every call
            with pytest.raises(envs.EnvError, match="JITMETA_CHECK_INPUTS"):
                jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4)


def test_kernel_params_layout_and_round_trip():
    emit = runtime.KernelParams(api._EMIT_TYPES)
    assert emit.offsets == (0, 8, 16, 20, 24, 32, 40) and emit.size == 48
    values = (0x7F0000001000, 0, 2**32 - 1, 7, 132, 0x7F0000002008, 0x10)
    emit.pack(*values)
    assert emit.values() == values
    ptrs = (ctypes.c_void_p * 7).from_address(emit.address)
    assert [p - ptrs[0] for p in ptrs] == list(emit.offsets)
    P, U = runtime.POINTER, runtime.UINT32
    mixed = runtime.KernelParams((P, P, U, U, P))
    assert mixed.offsets == (0, 8, 16, 20, 24)
    mixed.pack(1, 2, 3, 4, 5)
    assert mixed.values() == (1, 2, 3, 4, 5)
    with pytest.raises(struct.error):
        mixed.pack(1, 2, 2**32, 4, 5)  # a u32 argument out of range
    with pytest.raises(TypeError, match="POINTER"):
        runtime.KernelParams((ctypes.c_float,))


def test_kernel_params_are_per_thread():
    mine = runtime.thread_params(api._EMIT_TYPES)
    assert runtime.thread_params(api._EMIT_TYPES) is mine
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(runtime.thread_params(api._EMIT_TYPES)))
    t.start()
    t.join()
    assert theirs[0] is not mine and theirs[0].address != mine.address


def test_workspace_keys():
    """One workspace per (device, stream); the per-thread default stream is a different
    stream in each thread."""
    assert api._workspace_key(0, 0) == api._workspace_key(0, 0)
    assert api._workspace_key(0, 0) != api._workspace_key(1, 0)
    assert api._workspace_key(0, 0x5000) != api._workspace_key(0, 0x5001)
    here = api._workspace_key(0, 2)
    there = []
    t = threading.Thread(target=lambda: there.append(api._workspace_key(0, 2)))
    t.start()
    t.join()
    assert here != there[0]


def test_launcher_derives_the_call_shape_from_its_plan():
    p = jitmeta.plan(70000, 1, True, 132, arch="sm_90")
    launcher = api.Launcher(device=1, plan=p, emit="e", cooperative=True, threads=p.threads,
                            grid=p.grid, dyn_smem=p.smem_dynamic_bytes,
                            ws_words=api.launcher_ws_words(p))
    assert (launcher.batch, launcher.next_n, launcher.num_sms) == (70000, 1, 132)
    assert launcher.out_shape == (133, 2)


# --- the CUDA glue against a stand-in driver ---------------------------------------
#
# No GPU here, so no libcuda: a small stand-in answers the driver calls the launch path
# makes (contexts, module load, cuMemAlloc, launches) and records the launches with the
# argument values read back through the kernelParams address. The kernels themselves
# run in test_gpu_kernels.py / test_gpu_serving.py on the device.

class _StandInDriver:
    def __init__(self, real):
        self.real = real
        for name in ("CUresult", "CUfunction_attribute", "CUlaunchConfig", "CUlaunchAttribute",
                     "CUlaunchAttributeID", "CUstream"):
            setattr(self, name, getattr(real, name))
        self.current: dict[int, int] = {}
        self.stacks: dict[int, list[int]] = {}
        self.launches: list[dict] = []
        self.allocations: list[ctypes.Array] = []
        self.device = 0  # whose context a launch must find current
        self.resident_blocks = 10**9  # blocks a cooperative launch may have at once
        self.tries: list[int] = []  # grid of every cuLaunchKernelEx call

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGet(self, ordinal):
        return (0, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        return (0, self.real.CUcontext(0x1000 + dev))

    def cuCtxGetCurrent(self):
        return (0, self.real.CUcontext(self.current.get(threading.get_ident(), 0)))

    def cuCtxPushCurrent(self, ctx):
        t = threading.get_ident()
        self.stacks.setdefault(t, []).append(self.current.get(t, 0))
        self.current[t] = int(ctx)
        return (0,)

    def cuCtxPopCurrent(self):
        t = threading.get_ident()
        old, self.current[t] = self.current.get(t, 0), self.stacks[t].pop()
        return (0, self.real.CUcontext(old))

    def cuModuleLoadData(self, cubin):
        assert cubin[:4] == b"\x7fELF"
        return (0, object())

    def cuModuleGetFunction(self, module, name):
        return (0, name.decode())

    def cuFuncSetAttribute(self, *args):
        return (0,)

    def cuFuncGetAttribute(self, attr, fn):
        return (0, 32)

    def cuMemAlloc(self, nbytes):
        buf = (ctypes.c_char * nbytes)()
        ctypes.memset(buf, 0xA5, nbytes)  # device memory starts as garbage
        self.allocations.append(buf)
        self.unsynced = True
        return (0, self.real.CUdeviceptr(ctypes.addressof(buf)))

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE" if err == 720 else b"CUDA_ERROR")

    def cuGetErrorString(self, err):
        return (0, b"too many blocks in cooperative launch" if err == 720 else b"error")

    def cuMemsetD8(self, ptr, value, nbytes):
        ctypes.memset(int(ptr), value, nbytes)
        return (0,)

    def cuCtxSynchronize(self):
        self.unsynced = False
        return (0,)

    def _record(self, fn, grid, threads, smem, stream, params, pdl, cooperative):
        assert self.current.get(threading.get_ident()) == 0x1000 + self.device, \
            "launched without the device's primary context current"
        assert fn == "jitmeta_emit", fn
        assert not getattr(self, "unsynced", False), "launched before the zeroing finished"
        kinds = api._EMIT_TYPES
        ptrs = (ctypes.c_void_p * len(kinds)).from_address(params)
        args = tuple((ctypes.c_uint64 if k is runtime.POINTER else ctypes.c_uint32)
                     .from_address(p).value for p, k in zip(ptrs, kinds))
        self.launches.append(dict(fn=fn, grid=grid, threads=threads, smem=smem,
                                  stream=stream, args=args, pdl=pdl, cooperative=cooperative))
        return (0,)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert (gy, gz, by, bz, extra) == (1, 1, 1, 1, 0)
        return self._record(fn, gx, bx, smem, stream, params, False, False)

    def cuLaunchKernelEx(self, cfg, fn, params, extra):
        assert (cfg.gridDimY, cfg.gridDimZ, cfg.blockDimY, cfg.blockDimZ) == (1, 1, 1, 1)
        ids = self.real.CUlaunchAttributeID
        attrs = {a.id: a for a in cfg.attrs[:cfg.numAttrs]}
        assert cfg.numAttrs == len(cfg.attrs) == len(attrs) >= 1
        pdl = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION in attrs
        if pdl:
            assert attrs[ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION] \
                .value.programmaticStreamSerializationAllowed == 1
        cooperative = ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE in attrs
        if cooperative:
            assert attrs[ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE].value.cooperative == 1
        assert len(attrs) == pdl + cooperative
        self.tries.append(cfg.gridDimX)
        if cooperative and cfg.gridDimX > self.resident_blocks:
            return (720,)  # CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
        return self._record(fn, cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes,
                            int(cfg.hStream), params, pdl, cooperative)


@pytest.fixture
def stand_in(monkeypatch, cache_dir, two_devices):
    """The stand-in driver, fresh jitmeta launch state, and a switch for 'capturing'."""
    from cuda.bindings import driver as real

    drv = _StandInDriver(real)
    monkeypatch.setattr(runtime, "_drv", drv)
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    for name, value in (("_contexts", {}), ("_context_ids", {}), ("_modules", {}),
                        ("_initialized", False)):
        monkeypatch.setattr(runtime, name, value)
    for name, value in (("_launchers", api.collections.OrderedDict()), ("_states", {}),
                        ("_workspaces", {}), ("_spares", {}), ("_grid_caps", {})):
        monkeypatch.setattr(api, name, value)
    drv.capturing = False
    drv.stream = 0x5000
    monkeypatch.setattr(api, "_capturing", lambda device: drv.capturing)
    monkeypatch.setattr(api, "_raw_stream", lambda device: drv.stream + device)
    return drv


def _call(drv, device, ctx, idx=None, out=None, pdl=False):
    """What the public function does for a CUDA tensor of ``device`` (CPU tensors here)."""
    drv.device = device
    c2 = ctx.view(-1, 1) if ctx.dim() == 1 else ctx
    launcher = api.prepare(device, c2.shape[0], c2.shape[1], idx is not None, 132, 256,
                           "smxx")
    token = api._call_token()
    state = api._states.get(token) or api._new_state(token)
    return api._run(launcher, state, ctx, idx, out, pdl), launcher


def test_stand_in_chunked_launch_arguments(stand_in):
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    out = torch.empty(133, 2, dtype=I32)
    res, launcher = _call(stand_in, 0, ctx, idx, out)
    assert res is out and launcher.plan.variant == "chunked"
    (emit,) = stand_in.launches  # one cooperative launch
    ws = emit["args"][6]
    assert emit["args"] == (ctx.data_ptr(), idx.data_ptr(), 70000, 1, 132, out.data_ptr(), ws)
    p = launcher.plan
    # 70000 <= 132 * 1024: slabs of 1024, ceil(70000 / 1024) = 69 blocks of 256 threads
    assert (p.code.capacity, p.grid, p.threads) == (1024, 69, 256)
    assert (emit["grid"], emit["threads"], emit["stream"]) == (p.grid, p.threads, 0x5000)
    assert emit["cooperative"] and not emit["pdl"] and emit["smem"] == 0
    # the workspace: zeroed, at least 4 + 8 * 1024 + 69 * 4 words (epoch, slots, slabs)
    buf = next(b for b in stand_in.allocations if ctypes.addressof(b) == ws)
    assert len(buf) >= 4 * (4 + 8 * 1024 + 69 * 4) == launcher.ws_words * 4
    assert set(bytes(buf)) == {0}
    assert stand_in.current.get(threading.get_ident(), 0) == 0  # pushed, then popped


def test_stand_in_refused_cooperative_grid_is_halved_and_remembered(stand_in, caplog):
    """A process that sees fewer SMs than the device has (MPS, green contexts): the
    driver refuses the planned grid; the launcher halves it until it fits, once."""
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    stand_in.resident_blocks = 10
    with caplog.at_level("WARNING", logger="jitmeta"):
        _, launcher = _call(stand_in, 0, ctx, idx)
        assert launcher.grid == 69  # the plan: one block per SM's slab of 1024
        assert stand_in.tries == [69, 34, 17, 8]
        assert [l["grid"] for l in stand_in.launches] == [8]
        _call(stand_in, 0, ctx, idx)
        _call(stand_in, 0, torch.ones(300000, 1, dtype=I32))  # another shape, same device
    assert stand_in.tries[4:] == [8, 8]
    warnings = [r for r in caplog.records if "refused a cooperative launch" in r.message]
    assert len(warnings) == 3  # 69 -> 34 -> 17 -> 8, each step once, then never again
    assert api._grid_caps == {0: 8}
    stand_in.device = 1  # the other device keeps its own grid
    _call(stand_in, 1, ctx, idx)
    assert stand_in.tries[-4:] == [69, 34, 17, 8]  # its own plan (69 slabs <= 108 SMs)
    assert api._grid_caps == {0: 8, 1: 8}


def test_stand_in_other_launch_errors_are_not_retried(stand_in):
    stand_in.resident_blocks = 0  # even one block is refused: the error surfaces
    with pytest.raises(runtime.DriverError, match="COOPERATIVE_LAUNCH_TOO_LARGE"):
        _call(stand_in, 0, torch.ones(70000, 1, dtype=I32))
    assert stand_in.tries[-1] == 1


def test_stand_in_device_1_context_stream_and_pdl(stand_in):
    ctx = torch.ones(5000, 1, dtype=I32)
    res, launcher = _call(stand_in, 1, ctx, pdl=True)
    assert launcher.device == 1 and launcher.plan.code.arch == "sm_80"
    assert res.shape == (133, 2) and res.dtype == I32
    (emit,) = stand_in.launches
    assert emit["pdl"] and emit["stream"] == 0x5001 and emit["args"][5] == res.data_ptr()
    assert [k[0] for k in runtime.loaded_modules()] == [1]
    assert stand_in.current.get(threading.get_ident(), 0) == 0


def test_stand_in_no_push_when_the_context_is_current(stand_in):
    stand_in.current[threading.get_ident()] = 0x1000  # what PyTorch leaves on cuda:0
    _call(stand_in, 0, torch.ones(100, 1, dtype=I32))
    assert stand_in.stacks.get(threading.get_ident(), []) == []


def test_stand_in_capture_never_compiles_or_allocates(stand_in):
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    out = torch.empty(133, 2, dtype=I32)
    stand_in.capturing = True
    before = jitmeta.stats()
    with pytest.raises(jitmeta.CaptureCompileError, match="warm"):
        _call(stand_in, 0, ctx, idx, out)  # never prepared: would compile and load
    assert jitmeta.stats() == before and not stand_in.allocations
    stand_in.capturing = False
    _call(stand_in, 0, ctx, idx, out)  # warm on stream 0x5000: its workspace + a spare
    assert len(stand_in.allocations) == 2 and len(api._spares[0]) == 1
    stand_in.capturing = True
    stand_in.stream = 0x6000  # a new capture stream adopts the spare
    _call(stand_in, 0, ctx, idx, out)
    assert len(stand_in.allocations) == 2 and api._spares[0] == []
    adopted = stand_in.launches[-1]["args"][6]
    stand_in.stream = 0x7000  # another new capture stream: no spare left
    with pytest.raises(jitmeta.CaptureCompileError, match="workspace"):
        _call(stand_in, 0, ctx, idx, out)
    stand_in.capturing = False
    stand_in.stream = 0x5000
    _call(stand_in, 0, ctx, idx, out)  # an eager call reserves the next spare
    assert len(api._spares[0]) == 1
    stand_in.capturing = True
    stand_in.stream = 0x7000
    _call(stand_in, 0, ctx, idx, out)
    ws = {l["stream"]: l["args"][6] for l in stand_in.launches if l["fn"] == "jitmeta_emit"}
    assert ws[0x6000] == adopted and len(set(ws.values())) == 3  # one per stream


def test_stand_in_threads_on_one_stream_share_its_workspace(stand_in):
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    _call(stand_in, 0, ctx, idx)

    def worker(_):
        for _ in range(100):
            _call(stand_in, 0, ctx, idx)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))
    assert len(stand_in.launches) == 801
    assert len({l["args"][6] for l in stand_in.launches}) == 1
    assert all(l["cooperative"] and l["stream"] == 0x5000 for l in stand_in.launches)
