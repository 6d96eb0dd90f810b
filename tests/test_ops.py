"""The custom ops and the serving-facing plumbing that runs without a GPU.

* ``torch.library.opcheck`` on ``jitmeta::paged_mqa_logits_metadata`` and its ``_out``
  variant; the fake implementation (shape, dtype, device, and validation at trace time,
  also for fake CUDA tensors);
* ``torch.compile(fullgraph=True)`` on the CPU path (inductor and dynamic shapes), and
  ``torch.export`` of the CUDA path from fake CUDA tensors (one op, no graph break);
* eager calls skip the dispatcher;
* thread safety of the CPU path, and of plan + build with real NVRTC (each cache key
  compiled once, per-device limits and arch);
* the knob snapshot the hot path keys on.

CPU results are checked against the independent oracle ``tests/spec_oracle.py``. The
CUDA glue against a stand-in driver (launch arguments, contexts, PDL, capture, grid
caps) is in test_launch.py; GPU behaviour in test_gpu_serving.py.
"""
from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import jitmeta
import jitmeta.ops  # noqa: F401  (registers torch.ops.jitmeta; the package itself is lazy)
from jitmeta import dispatch, envs, kernels
from jitmeta.jit import build as jit_build

from spec_oracle import spec_schedule

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


def oracle(ctx, num_sms, indices=None, split_kv=256, schedule="smxx") -> torch.Tensor:
    """The independent oracle's rows as an int32 tensor (its values all fit int32 here)."""
    rows = spec_schedule(ctx.reshape(ctx.shape[0], -1).tolist(), num_sms,
                         None if indices is None else indices.tolist(), split_kv, schedule)
    return torch.tensor(rows, dtype=I32).view(num_sms + 1, 2)


def _reference(args, kwargs):
    ctx, _, num_sms, *rest = args
    return oracle(ctx, num_sms, rest[0] if rest else None, kwargs.get("split_kv", 256),
                  kwargs.get("schedule", "smxx"))


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
    """``import jitmeta`` is lazy (no torch); the first torch-facing name registers both
    ops, and still nothing initializes CUDA, loads libcuda or creates a file."""
    res = run_python("""
        import os, sys
        import jitmeta
        print("torch" in sys.modules)
        import torch
        ops = torch.ops.jitmeta
        before = hasattr(ops, "paged_mqa_logits_metadata")
        jitmeta.get_paged_mqa_logits_metadata  # a torch-facing name
        print(before, hasattr(ops, "paged_mqa_logits_metadata"),
              hasattr(ops, "paged_mqa_logits_metadata_out"),
              torch.cuda.is_initialized(), "cuda.bindings.driver" in sys.modules and
              "libcuda" in open("/proc/self/maps").read(), sorted(os.listdir(".")))
        """, cwd=tmp_path, env={"JITMETA_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "True", "True", "False", "False", "[]"], \
        res.stdout


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
    (dict(schedule="sm120"), ValueError, "schedule"),
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
    assert torch.equal(fresh, oracle(ctx, 16, idx) + 1)
    assert torch.equal(out, oracle(ctx, 16, schedule="sm90"))


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
    assert torch.equal(res, out) and torch.equal(out, oracle(ctx, 8))


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
                           oracle(ctx, num_sms, idx)), (batch, num_sms)


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
                      oracle(ctx, num_sms, idx, schedule=schedule)))

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


def test_plans_follow_the_device(two_devices):
    for batch in (100, 5000, 40000, 70000):
        p0 = dispatch.plan_for(batch, 1, True, 132, 256, "smxx", 0)
        p1 = dispatch.plan_for(batch, 1, True, 132, 256, "smxx", 1)
        assert (p0.code.arch, p1.code.arch) == ("sm_90", "sm_80")
        assert p0.smem_bytes <= two_devices[0].smem_optin_bytes
        assert p1.smem_bytes <= two_devices[1].smem_optin_bytes
    # the SM count moves the chunked variant's slab-size steps down:
    # 250000 <= 132 * 2048 = 270336 (H100: slabs of 2048) but > 108 * 2048 = 221184 and
    # <= 108 * 4096 = 442368 (A100: slabs of 4096)
    h100 = dispatch.plan_for(250000, 1, False, 132, 256, "smxx", 0)
    a100 = dispatch.plan_for(250000, 1, False, 132, 256, "smxx", 1)
    assert (h100.variant, h100.code.capacity) == ("chunked", 2048)
    assert (a100.variant, a100.code.capacity) == ("chunked", 4096)


def test_build_from_16_threads_compiles_each_key_once(cache_dir, two_devices):
    """16 threads x mixed shapes on two devices: real NVRTC, each key compiled once,
    every thread gets the cubin for its own device's arch."""
    shapes = [(dev, batch, next_n, varlen)
              for dev in (0, 1) for batch, next_n, varlen in
              [(100, 1, False), (90, 2, False), (100, 1, True), (700, 1, True)]]
    knobs = envs.snapshot()
    expected = {}
    for dev, batch, next_n, varlen in shapes:
        p = dispatch.plan_for(batch, next_n, varlen, 132, 256, "smxx", dev, knobs)
        expected[(dev, batch, next_n, varlen)] = \
            jit_build.key_for(kernels.source(p.code), knobs)[0]
    distinct = set(expected.values())
    assert len(distinct) >= 4  # both archs, dense and varlen
    barrier = threading.Barrier(16)

    def worker(t: int):
        barrier.wait()
        got = []
        for i in range(6):
            shape = shapes[(t + i) % len(shapes)]
            p = dispatch.plan_for(shape[1], shape[2], shape[3], 132, 256, "smxx", shape[0])
            built = jit_build.build(kernels.source(p.code), envs.snapshot(),
                                    example=p.to_dict())
            assert built.kernel.arch == p.code.arch
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


# --- the knob snapshot ---------------------------------------------------------------------

def test_knob_snapshot_tracks_environment_and_overrides(monkeypatch):
    for name in list(os.environ):
        if name.startswith("JITMETA_"):
            monkeypatch.delenv(name)
    base = envs.snapshot()
    assert envs.snapshot() is base  # one object per set of raw values
    monkeypatch.setenv("JITMETA_VARIANT", "chunked")
    in_env = envs.snapshot()
    assert in_env is not base and in_env.variant == "chunked" and base.variant is None
    with envs.override(JITMETA_VARIANT="static"):
        assert envs.snapshot() not in (base, in_env)
        assert envs.snapshot().variant == "static"
        with envs.override(JITMETA_NVRTC_FLAGS=["-lineinfo"]):  # unhashable value
            hash(envs.snapshot())
            assert list(envs.snapshot().nvrtc_flags) == ["-lineinfo"]
    assert envs.snapshot() is in_env
    monkeypatch.setenv("JITMETA_CHECK_INPUTS", "1")
    assert envs.snapshot() is not in_env and envs.snapshot().check_inputs is True
    with pytest.raises(KeyError, match="JITMETA_NOPE"):
        envs.token_reader("JITMETA_NOPE")


def test_malformed_knobs_raise_at_every_call():
    """A snapshot parses every knob: a malformed one raises at the first call, whichever
    knob the call needs, and on every call after (a bad value is never cached)."""
    ctx = torch.tensor([[3], [5]], dtype=I32)
    want = oracle(ctx, 4)
    assert torch.equal(jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4), want)
    for name, value in (("JITMETA_CHECK_INPUTS", "maybe"), ("JITMETA_CHUNK", "3000"),
                        ("JITMETA_LOCK_TIMEOUT", "soon"), ("JITMETA_CACHE_MAX_BYTES", "1Q")):
        with envs.override(**{name: value}):
            for _ in range(2):
                with pytest.raises(envs.EnvError, match=name):
                    jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4)
    assert torch.equal(jitmeta.get_paged_mqa_logits_metadata(ctx, 64, 4), want)
    # negative lengths: the CPU path always checks, whatever JITMETA_CHECK_INPUTS says
    bad = torch.tensor([[3], [-5]], dtype=I32)
    for knob in ("0", "1"):
        with envs.override(JITMETA_CHECK_INPUTS=knob):
            with pytest.raises(jitmeta.InputValueError, match="-5"):
                jitmeta.get_paged_mqa_logits_metadata(bad, 64, 4)
