"""GPU: jitmeta the way serving engines run it.

CUDA-graph capture and replay with inputs changed in place; capture of an unwarmed
configuration (CaptureCompileError, nothing compiled); chunked workspaces and capture
streams; non-default streams with a dependency chain; 16 threads x 100 calls over mixed
shapes (each new key compiled once); programmatic dependent launch; torch.compile on
the GPU path (inductor, and CUDA graphs through mode="reduce-overhead"); a tensor on
cuda:1; fast-path validation after warm-up; host overhead per call.

Runs only where a CUDA GPU is present (marker ``gpu``); elsewhere each test is skipped
with the reason shown by ``pytest -ra``. Every result is compared bit for bit with
``jitmeta.reference_schedule``.
"""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import jitmeta
from jitmeta import dispatch, envs, kernels
from jitmeta.jit import build as jit_build
from jitmeta.jit import runtime, workspace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (none visible to torch here)"),
]

I32 = torch.int32
SEED = int(os.environ.get("JITMETA_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
print(f"[test_gpu_serving] seed={SEED} (set JITMETA_TEST_SEED={SEED} to reproduce)")
get = jitmeta.get_paged_mqa_logits_metadata

# (forced variant, batch, next_n, varlen, schedule): every variant, dense and varlen
CASES = [
    ("static", 500, 1, False, "smxx"),
    ("static", 300, 1, True, "sm90"),
    ("dynamic", 20000, 2, False, "sm90"),
    ("dynamic", 12000, 1, True, "smxx"),
    ("chunked", 100000, 1, False, "smxx"),
    ("chunked", 70000, 1, True, "sm90"),
    ("chunked", 5000, 4, False, "sm90"),
    ("static", 3000, 1, True, "sm100"),
    ("dynamic", 20000, 3, False, "sm100"),
    ("chunked", 70000, 1, True, "sm100"),
]
CASE_IDS = [f"{v}-b{b}-n{n}-{'varlen' if vl else 'dense'}-{s}" for v, b, n, vl, s in CASES]


def num_sms(device: int = 0) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def host_lengths(gen: torch.Generator, batch: int, next_n: int) -> torch.Tensor:
    t = torch.randint(0, 20000, (batch, next_n), generator=gen, dtype=I32)
    t[torch.rand(batch, next_n, generator=gen) < 0.15] = 0
    if batch > 1:
        t[torch.randint(0, batch, (1,), generator=gen)] = 131072  # one huge request
    return t


def host_indices(gen: torch.Generator, batch: int) -> torch.Tensor:
    runs = torch.randint(1, 5, (batch,), generator=gen)
    ids = torch.repeat_interleave(torch.arange(batch), runs)[:batch]
    return (torch.randperm(batch, generator=gen)[ids] % max(1, batch // 3)).to(I32)


def make_inputs(gen, batch, next_n, varlen, device="cuda"):
    ctx = host_lengths(gen, batch, next_n).to(device)
    idx = host_indices(gen, batch).to(device) if varlen else None
    return ctx, idx


def want(ctx, sms, idx, schedule):
    return jitmeta.reference_schedule(ctx, sms, idx, schedule=schedule)


def assert_exact(got, expected, what):
    if not torch.equal(got, expected):
        rows = (got != expected).any(dim=1).nonzero().flatten()[:5].tolist()
        detail = [(r, got[r].tolist(), expected[r].tolist()) for r in rows]
        pytest.fail(f"{what}: mismatch at rows (row, got, want) {detail}; seed {SEED}")


def counters() -> dict:
    s = jitmeta.stats()
    return {"compiles": s["compiles"], "disk_hits": s["disk_hits"],
            "memory_hits": s["memory_hits"], "modules": len(runtime.loaded_modules())}


# --- CUDA graphs --------------------------------------------------------------------------

@pytest.mark.parametrize("variant,batch,next_n,varlen,schedule", CASES, ids=CASE_IDS)
def test_graph_capture_and_100_replays_bit_exact(variant, batch, next_n, varlen, schedule):
    """Warm on the capture stream, capture with out=, then 100 replays with the inputs
    rewritten in place: every replay bit-exact. During capture nothing compiles, loads,
    allocates or synchronizes."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    with envs.override(JITMETA_VARIANT=variant):
        ctx, idx = make_inputs(gen, batch, next_n, varlen)
        out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                get(ctx, 64, sms, idx, out=out, schedule=schedule)
        torch.cuda.synchronize()
        assert jitmeta.plan(batch, next_n, varlen, sms, schedule=schedule).variant == variant
        g = torch.cuda.CUDAGraph()
        before = counters()
        with torch.cuda.graph(g, stream=s):
            allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
            torch.cuda.set_sync_debug_mode("error")
            try:
                res = get(ctx, 64, sms, idx, out=out, schedule=schedule)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocs
        assert res is out
        assert counters() == before, "capture compiled, loaded or looked up a kernel"
        for replay in range(100):
            new_ctx, new_idx = make_inputs(gen, batch, next_n, varlen, device="cpu")
            ctx.copy_(new_ctx)
            if varlen:
                idx.copy_(new_idx)
            out.fill_(-1)
            g.replay()
            assert_exact(out, want(ctx, sms, idx, schedule), f"replay {replay}")


def test_capture_of_an_unwarmed_configuration_says_warm_first(tmp_path):
    """The first call of a configuration inside capture raises CaptureCompileError
    before any CUDA work (nothing compiled); warming it makes the same capture work."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    ctx, _ = make_inputs(gen, 777, 1, False)
    out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
    # flags no other test uses: a key that is neither loaded nor cached anywhere
    with envs.override(JITMETA_NVRTC_FLAGS=("-DJITMETA_UNWARMED_TEST=1",),
                       JITMETA_CACHE_DIR=str(tmp_path / "cache")):
        before = counters()
        g = torch.cuda.CUDAGraph()
        with pytest.raises(jitmeta.CaptureCompileError, match="[Ww]arm"):
            with torch.cuda.graph(g):
                get(ctx, 64, sms, out=out)
        assert counters() == before
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            get(ctx, 64, sms, out=out)  # warm (compiles, loads)
        torch.cuda.synchronize()
        assert counters()["compiles"] == before["compiles"] + 1
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            get(ctx, 64, sms, out=out)
        ctx.copy_(host_lengths(gen, 777, 1))
        g.replay()
        assert_exact(out, want(ctx, sms, None, "smxx"), "after warming")


def test_warm_at_start_up_then_capture_without_eager_calls(tmp_path):
    """jitmeta.warm(device=..., load=True) is enough: capture then needs no eager call,
    also for the chunked variant on a fresh capture stream."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    with envs.override(JITMETA_NVRTC_FLAGS=("-DJITMETA_WARM_TEST=1",),
                       JITMETA_CACHE_DIR=str(tmp_path / "cache")):
        res = jitmeta.warm(device=0, load=True, batches="1-70000", next_n=(1,),
                           varlen=(False, True), schedules=("smxx",), jobs=8)
        assert not res.failed, res.failed
        before = counters()
        for batch, varlen in [(300, True), (5000, False), (70000, True)]:
            ctx, idx = make_inputs(gen, batch, 1, varlen)
            out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=torch.cuda.Stream()):
                get(ctx, 64, sms, idx, out=out)
            g.replay()
            assert_exact(out, want(ctx, sms, idx, "smxx"), f"warmed batch {batch}")
        assert counters()["compiles"] == before["compiles"]


def test_chunked_capture_streams_adopt_reserved_workspaces(monkeypatch):
    """A capture stream without a workspace adopts the device's spare (nothing is
    allocated in capture); with none left, CaptureCompileError; the next eager call
    reserves another."""
    dev = torch.cuda.current_device()
    monkeypatch.setitem(workspace._spares, dev, [])  # start without spares from other tests
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    with envs.override(JITMETA_VARIANT="chunked"):
        ctx, idx = make_inputs(gen, 40000, 1, True)
        outs = [torch.full((sms + 1, 2), -1, dtype=I32, device="cuda") for _ in range(3)]
        a, b, c = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
        a.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(a):
            get(ctx, 64, sms, idx, out=outs[0])  # eager: a's workspace, and one spare
        torch.cuda.synchronize()
        assert len(workspace._spares[dev]) == 1
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1, stream=b):
            get(ctx, 64, sms, idx, out=outs[1])
        assert workspace._spares[dev] == []
        g2 = torch.cuda.CUDAGraph()
        with pytest.raises(jitmeta.CaptureCompileError, match="workspace"):
            with torch.cuda.graph(g2, stream=c):
                get(ctx, 64, sms, idx, out=outs[2])
        torch.cuda.synchronize()
        with torch.cuda.stream(a):
            get(ctx, 64, sms, idx, out=outs[0])  # reserves the next spare
        torch.cuda.synchronize()
        g3 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g3, stream=c):
            get(ctx, 64, sms, idx, out=outs[2])
        on = workspace._workspaces
        assert on[workspace.workspace_key(dev, b.cuda_stream)].ptr != \
            on[workspace.workspace_key(dev, c.cuda_stream)].ptr
        for _ in range(5):
            ctx.copy_(host_lengths(gen, 40000, 1))
            g1.replay()
            g3.replay()
            expected = want(ctx, sms, idx, "smxx")
            assert_exact(outs[1], expected, "graph on b")
            assert_exact(outs[2], expected, "graph on c")


def test_check_inputs_mode_skips_the_check_inside_capture():
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    ctx, idx = make_inputs(gen, 2000, 1, True)
    out = torch.empty(sms + 1, 2, dtype=I32, device="cuda")
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            get(ctx, 64, sms, idx, out=out)  # checked eagerly (synchronizes)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            get(ctx, 64, sms, idx, out=out)
        ctx.copy_(host_lengths(gen, 2000, 1))
        g.replay()
        assert_exact(out, want(ctx, sms, idx, "smxx"), "checked mode, replay")


# --- streams ------------------------------------------------------------------------------

def test_non_default_streams_dependency_chain():
    """producer stream writes the lengths (late, after a sleep) -> jitmeta on its own
    stream (late too) -> consumer stream reads the result: events order everything."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    producer, meta, consumer = (torch.cuda.Stream() for _ in range(3))
    checks = []
    for it in range(8):
        for variant, batch, next_n, varlen, schedule in CASES:
            src, idx = make_inputs(gen, batch, next_n, varlen)
            ctx = torch.zeros_like(src)
            torch.cuda.synchronize()
            with torch.cuda.stream(producer):
                torch.cuda._sleep(200_000)
                ctx.copy_(src)
                produced = torch.cuda.Event()
                produced.record()
            meta.wait_event(produced)
            with envs.override(JITMETA_VARIANT=variant), torch.cuda.stream(meta):
                torch.cuda._sleep(200_000)
                res = get(ctx, 64, sms, idx, schedule=schedule, pdl=bool(it % 2))
                made = torch.cuda.Event()
                made.record()
            consumer.wait_event(made)
            with torch.cuda.stream(consumer):
                seen = res.clone()
                res.record_stream(consumer)
            # everything stays referenced until the end: no buffer of a stream that
            # may still run is handed back to the allocator
            checks.append((seen, src, idx, schedule, f"{variant} it {it}", ctx, res))
    torch.cuda.synchronize()
    for seen, src, idx, schedule, what, *_ in checks:
        assert_exact(seen, want(src, sms, idx, schedule), what)


def test_results_follow_the_current_stream():
    """Capture proves the stream: a launch on any other stream would not be captured."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    ctx, idx = make_inputs(gen, 1000, 1, True)
    out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
    get(ctx, 64, sms, idx, out=out)
    torch.cuda.synchronize()
    out.fill_(-1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        get(ctx, 64, sms, idx, out=out)
    torch.cuda.synchronize()
    assert (out == -1).all(), "the call ran outside the capturing stream"
    g.replay()
    assert_exact(out, want(ctx, sms, idx, "smxx"), "captured on the current stream")


# --- threads ------------------------------------------------------------------------------

def test_16_threads_x_100_calls_mixed_shapes_compile_each_key_once(tmp_path):
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    shapes = [(1, 1, False), (64, 2, False), (300, 1, True), (4096, 1, False),
              (9000, 1, True), (20000, 3, False), (70000, 1, True), (100000, 1, False)]
    cases = []
    for batch, next_n, varlen in shapes:
        ctx, idx = make_inputs(gen, batch, next_n, varlen)
        for schedule in jitmeta.SCHEDULES:
            cases.append((ctx, idx, schedule, want(ctx, sms, idx, schedule)))
    outs = [[torch.empty(sms + 1, 2, dtype=I32, device="cuda") for _ in cases]
            for _ in range(16)]
    torch.cuda.synchronize()
    # fresh keys (flags no other test uses) in a fresh cache: all 16 threads race to
    # compile them
    with envs.override(JITMETA_NVRTC_FLAGS=("-DJITMETA_THREADS_TEST=1",),
                       JITMETA_CACHE_DIR=str(tmp_path / "cache")):
        knobs = envs.snapshot()
        keys = {jit_build.key_for(kernels.source(
                    dispatch.plan_for(b, n, v, sms, 256, s, 0, knobs).code), knobs)[0]
                for b, n, v in shapes for s in jitmeta.SCHEDULES}
        before = jitmeta.stats()["compiles"]
        barrier = threading.Barrier(16)

        def worker(t: int) -> list[str]:
            rng = random.Random(SEED * 31 + t)
            stream = torch.cuda.Stream() if t % 2 else None  # half share the default one
            errors = []
            barrier.wait()
            with torch.cuda.stream(stream):
                for call in range(100):
                    i = rng.randrange(len(cases))
                    ctx, idx, schedule, expected = cases[i]
                    out = outs[t][i] if rng.random() < 0.5 else None
                    got = get(ctx, 64, sms, idx, out=out, schedule=schedule,
                              pdl=rng.random() < 0.3)
                    if not torch.equal(got, expected):
                        errors.append(f"thread {t} call {call} case {i}")
            return errors

        with ThreadPoolExecutor(16) as pool:
            errors = [e for es in pool.map(worker, range(16)) for e in es]
        compiles = jitmeta.stats()["compiles"] - before
    assert not errors, f"{errors[:5]} (seed {SEED})"
    assert compiles == len(keys), f"{compiles} compiles for {len(keys)} keys"


# --- programmatic dependent launch --------------------------------------------------------

@pytest.mark.parametrize("variant,batch,next_n,varlen,schedule", CASES, ids=CASE_IDS)
def test_pdl_launch_gives_the_same_results(variant, batch, next_n, varlen, schedule):
    """pdl=True behind a kernel that rewrites the input: griddepcontrol.wait holds
    the schedule until the writer is done."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    with envs.override(JITMETA_VARIANT=variant):
        ctx, idx = make_inputs(gen, batch, next_n, varlen)
        for it in range(20):
            ctx.add_(it % 3)  # the producer kernel right before the PDL launch
            got = get(ctx, 64, sms, idx, schedule=schedule, pdl=True)
            plain = get(ctx, 64, sms, idx, schedule=schedule)
            expected = want(ctx, sms, idx, schedule)
            assert_exact(got, expected, f"pdl it {it}")
            assert_exact(plain, expected, f"plain it {it}")


def test_pdl_inside_a_cuda_graph():
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    src, idx = make_inputs(gen, 3000, 1, True)
    ctx = src.clone()
    out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        get(ctx, 64, sms, idx, out=out, pdl=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        ctx.copy_(src)
        ctx.mul_(2)
        get(ctx, 64, sms, idx, out=out, pdl=True)
    for _ in range(10):
        src.copy_(host_lengths(gen, 3000, 1))
        g.replay()
        assert_exact(out, want(src * 2, sms, idx, "smxx"), "pdl in a graph")


# --- torch.compile on the GPU -------------------------------------------------------------

def test_compile_fullgraph_gpu():
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()

    def step(ctx, idx, out):
        fresh = get(ctx, 64, sms, idx)
        get(ctx, 64, sms, out=out, schedule="sm90")
        return fresh * 2, out

    compiled = torch.compile(step, fullgraph=True)
    for batch in (300, 20000, 100000):
        ctx, idx = make_inputs(gen, batch, 1, True)
        out = torch.full((sms + 1, 2), -1, dtype=I32, device="cuda")
        fresh, res = compiled(ctx, idx, out)
        assert_exact(fresh, want(ctx, sms, idx, "smxx") * 2, f"compiled batch {batch}")
        assert_exact(out, want(ctx, sms, None, "sm90"), f"compiled out= batch {batch}")


@pytest.mark.parametrize("variant", ["static", "chunked"])
def test_compile_reduce_overhead_cuda_graphs(variant):
    """mode="reduce-overhead" captures the op into PyTorch's CUDA graph trees."""
    gen = torch.Generator().manual_seed(SEED)
    sms = num_sms()
    batch = 500 if variant == "static" else 70000
    with envs.override(JITMETA_VARIANT=variant):
        compiled = torch.compile(lambda c, i: get(c, 64, sms, i) + 0,
                                 mode="reduce-overhead", fullgraph=True)
        for it in range(6):
            ctx, idx = make_inputs(gen, batch, 1, True)
            got = compiled(ctx, idx).clone()
            assert_exact(got, want(ctx, sms, idx, "smxx"), f"reduce-overhead call {it}")


# --- validation after warm-up -------------------------------------------------------------

def test_bad_input_still_raises_after_warm_up():
    """The fast path re-checks what its cache key cannot hold."""
    sms = num_sms()
    ctx = torch.ones(64, 1, dtype=I32, device="cuda")
    idx = torch.arange(64, dtype=I32, device="cuda")
    out = torch.empty(sms + 1, 2, dtype=I32, device="cuda")
    get(ctx, 64, sms, idx, out=out)  # the configuration is now served by the fast path
    get(ctx, 64, sms, idx)
    wide = torch.empty(64, 2, dtype=I32, device="cuda")
    bad = [
        (dict(out=out.long()), TypeError, "out"),
        (dict(out=torch.empty(2 * sms + 3, dtype=I32, device="cuda")[1:].view(sms + 1, 2)),
         ValueError, "out"),
        (dict(out=out.cpu()), ValueError, "out"),
        (dict(out=torch.empty(2, sms + 1, dtype=I32, device="cuda").t()), ValueError, "out"),
        (dict(ctx=wide[:, :1]), ValueError, "context_lens"),
        (dict(ctx=ctx.long()), TypeError, "context_lens"),
        (dict(idx=idx.cpu()), ValueError, "indices"),
        (dict(idx=idx.long()), TypeError, "indices"),
        (dict(num_sms=True), TypeError, "num_sms"),
        (dict(num_sms=float(sms)), TypeError, "num_sms"),
        (dict(schedule=["smxx"]), ValueError, "schedule"),
        (dict(pdl=1), TypeError, "pdl"),
    ]
    for change, exc, name in bad:
        args = dict(ctx=ctx, idx=idx, out=out, num_sms=sms, schedule="smxx", pdl=False)
        args.update(change)
        with pytest.raises(exc, match=name):
            get(args["ctx"], 64, args["num_sms"], args["idx"], out=args["out"],
                schedule=args["schedule"], pdl=args["pdl"])
    torch.cuda.synchronize()


# --- devices ------------------------------------------------------------------------------

def test_tensor_on_cuda_1_runs_on_device_1():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (this machine has one): cuda:1 is tested where two "
                    "are lent")
    gen = torch.Generator().manual_seed(SEED)
    sms1 = num_sms(1)
    torch.cuda.set_device(0)
    ctx, idx = make_inputs(gen, 5000, 1, True, device="cuda:1")
    cur = runtime._drv.cuCtxGetCurrent()[1]
    res = get(ctx, 64, sms1, idx)
    assert res.device == torch.device("cuda", 1)
    assert_exact(res, want(ctx, sms1, idx, "smxx"), "cuda:1 eager")
    assert torch.cuda.current_device() == 0
    assert int(runtime._drv.cuCtxGetCurrent()[1]) == int(cur), "context left pushed"
    knobs = envs.snapshot()
    key = jit_build.key_for(kernels.source(
        dispatch.plan_for(5000, 1, True, sms1, 256, "smxx", 1, knobs).code), knobs)[0]
    assert (1, key) in runtime.loaded_modules()
    assert dispatch.device_limits(1).sm_count == sms1
    # the current stream of device 1 (not of the current device 0): capture proves it
    out = torch.full((sms1 + 1, 2), -1, dtype=I32, device="cuda:1")
    s1 = torch.cuda.Stream(device=1)
    with torch.cuda.device(1):
        s1.wait_stream(torch.cuda.current_stream(1))
        with torch.cuda.stream(s1):
            get(ctx, 64, sms1, idx, out=out)
        torch.cuda.synchronize(1)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s1):
            get(ctx, 64, sms1, idx, out=out)
    out.fill_(-1)
    g.replay()
    assert_exact(out, want(ctx, sms1, idx, "smxx"), "cuda:1 replay")
