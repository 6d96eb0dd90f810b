"""The CUDA glue of the launch path, without a GPU.

No GPU here, so no libcuda: a small stand-in answers the driver calls the launch path
makes (contexts, module load, cuMemAlloc, launches) and records each launch with the
argument values read back through the kernelParams address. Covered: the kernel
arguments and their packing, the launch geometry and stream, context push/pop, the PDL
and cooperative launch attributes, CUDA-graph capture (never compiles, loads or
allocates; capture streams adopt spare workspaces), the halving of a refused cooperative
grid, and threads sharing one stream's workspace. Cubins are real (NVRTC on the CPU);
the kernels themselves run in test_gpu_kernels.py / test_gpu_serving.py on a GPU.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import jitmeta
from jitmeta import dispatch, envs, kernels
from jitmeta.jit import launcher as jit_launcher
from jitmeta.jit import runtime, workspace
from jitmeta.kernels import paged_mqa

I32 = torch.int32
ARG_TYPES = paged_mqa.ARG_TYPES


def packed_values(params: runtime.KernelParams) -> tuple[int, ...]:
    """The values a KernelParams buffer holds, read back through its ``void*[]``."""
    ptrs = (ctypes.c_void_p * len(params.types)).from_address(params.address)
    return tuple((ctypes.c_uint64 if k is runtime.POINTER else ctypes.c_uint32)
                 .from_address(p).value for p, k in zip(ptrs, params.types))


# --- kernel arguments, workspaces and the loaded call, without a driver --------------------

def test_kernel_params_layout_and_round_trip():
    assert ARG_TYPES == (runtime.POINTER, runtime.POINTER, runtime.UINT32, runtime.UINT32,
                         runtime.UINT32, runtime.UINT32, runtime.POINTER, runtime.POINTER)
    emit = runtime.KernelParams(ARG_TYPES)
    assert emit.offsets == (0, 8, 16, 20, 24, 28, 32, 40) and emit.size == 48
    values = (0x7F0000001000, 0, 2**32 - 1, 7, 132, 1, 0x7F0000002008, 0x10)
    emit.pack(*values)
    assert packed_values(emit) == values
    ptrs = (ctypes.c_void_p * 8).from_address(emit.address)
    assert [p - ptrs[0] for p in ptrs] == list(emit.offsets)
    assert ptrs[0] == ctypes.addressof(emit.buffer) and ptrs[0] % 8 == 0
    # the raw bytes: little-endian, each value at its natural alignment
    raw = bytes(emit.buffer)[:emit.size]
    assert struct.unpack_from("<QQIIIIQQ", raw) == values
    P, U = runtime.POINTER, runtime.UINT32
    mixed = runtime.KernelParams((P, P, U, U, P))
    assert mixed.offsets == (0, 8, 16, 20, 24)
    mixed.pack(1, 2, 3, 4, 5)
    assert packed_values(mixed) == (1, 2, 3, 4, 5)
    odd = runtime.KernelParams((U, P, U))  # padding before the pointer
    assert odd.offsets == (0, 8, 16) and odd.size == 20
    odd.pack(9, 2**64 - 1, 3)
    assert packed_values(odd) == (9, 2**64 - 1, 3)
    with pytest.raises(struct.error):
        mixed.pack(1, 2, 2**32, 4, 5)  # a u32 argument out of range
    with pytest.raises(TypeError, match="POINTER"):
        runtime.KernelParams((ctypes.c_float,))


def test_kernel_params_are_per_thread():
    mine = runtime.thread_params(ARG_TYPES)
    assert runtime.thread_params(ARG_TYPES) is mine
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(runtime.thread_params(ARG_TYPES)))
    t.start()
    t.join()
    assert theirs[0] is not mine and theirs[0].address != mine.address


def test_workspace_keys():
    """One workspace per (device, stream); the per-thread default stream is a different
    stream in each thread."""
    assert workspace.workspace_key(0, 0) == workspace.workspace_key(0, 0)
    assert workspace.workspace_key(0, 0) != workspace.workspace_key(1, 0)
    assert workspace.workspace_key(0, 0x5000) != workspace.workspace_key(0, 0x5001)
    here = workspace.workspace_key(0, 2)
    there = []
    t = threading.Thread(target=lambda: there.append(workspace.workspace_key(0, 2)))
    t.start()
    t.join()
    assert here != there[0]


def test_schedule_call_derives_the_call_shape_from_its_plan():
    p = jitmeta.plan(70000, 1, True, 132, arch="sm_90")
    call = kernels.call(1, p, "e")
    assert (call.device, call.batch, call.next_n, call.num_sms) == (1, 70000, 1, 132)
    assert call.out_shape == (133, 2)
    # 70000 varlen: 35 slabs of 2048 at 256 threads, one cooperative launch (the
    # workspace keeps each slab's 8 warp parts too)
    launch = call.launch
    assert (launch.device, launch.function, launch.grid, launch.threads, launch.smem,
            launch.cooperative, launch.types) == (1, "e", 35, 256, 0, True, ARG_TYPES)
    assert isinstance(call, paged_mqa.ScheduleCall)
    assert call.ws_words == kernels.workspace_words(p) == 4 + 3 * 8 * 1024 + 35 * 4 + 35 * 8 * 4
    # static and forced dynamic: no workspace, not cooperative, dynamic smem at launch
    small = kernels.call(0, jitmeta.plan(100, 2, arch="sm_90", num_sms=8), "f")
    assert (small.launch.grid, small.launch.cooperative, small.ws_words) == (1, False, 0)
    assert (small.batch, small.next_n, small.out_shape) == (100, 2, (9, 2))
    with envs.override(JITMETA_VARIANT="dynamic"):
        dyn = jitmeta.plan(9000, arch="sm_90")
    call = paged_mqa.ScheduleCall(dyn, kernels.call(0, dyn, "g").launch,
                                  kernels.workspace_words(dyn))
    assert call.launch.smem == dyn.smem_dynamic_bytes == 4 * (9000 + 281 + 1)
    assert call.ws_words == 0 and call.launch.threads == 1024


# --- the CUDA glue against a stand-in driver ---------------------------------------

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
        kinds = ARG_TYPES
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
    for name, value in (("_contexts", {}), ("_context_ids", {}), ("_modules", {}),
                        ("_initialized", False)):
        monkeypatch.setattr(runtime, name, value)
    for module, name in ((dispatch, "_prepared"), (dispatch, "_states"),
                         (workspace, "_workspaces"), (workspace, "_spares"),
                         (jit_launcher, "_grid_caps")):
        monkeypatch.setattr(module, name, {})
    drv.capturing = False
    drv.stream = 0x5000
    monkeypatch.setattr(dispatch, "_capturing", lambda device: drv.capturing)
    monkeypatch.setattr(dispatch, "_raw_stream", lambda device: drv.stream + device)
    return drv


def _call(drv, device, ctx, idx=None, out=None, pdl=False, schedule="smxx"):
    """What the public function does for a CUDA tensor of ``device`` (CPU tensors here)."""
    drv.device = device
    c2 = ctx.view(-1, 1) if ctx.dim() == 1 else ctx
    call = dispatch.prepare(device, c2.shape[0], c2.shape[1], idx is not None, 132, 256,
                            schedule)
    state = dispatch._state(dispatch._token())
    return dispatch._run(call, state, ctx, idx, out, pdl), call


def test_stand_in_chunked_launch_arguments(stand_in):
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    out = torch.empty(133, 2, dtype=I32)
    res, launcher = _call(stand_in, 0, ctx, idx, out)
    assert res is out and launcher.plan.variant == "chunked"
    (emit,) = stand_in.launches  # one cooperative launch
    ws = emit["args"][7]
    assert emit["args"] == (ctx.data_ptr(), idx.data_ptr(), 70000, 1, 132, 0, out.data_ptr(),
                            ws)
    p = launcher.plan
    # 132 * 256 < 70000 <= 132 * 2048: varlen slabs of 2048 (8 tokens per thread),
    # ceil(70000 / 2048) = 35 blocks of 256 threads
    assert (p.code.capacity, p.grid, p.threads) == (2048, 35, 256)
    assert (emit["grid"], emit["threads"], emit["stream"]) == (p.grid, p.threads, 0x5000)
    assert emit["cooperative"] and not emit["pdl"] and emit["smem"] == 0
    # the workspace: zeroed, at least 4 + 3 * 8 * 1024 + 35 * 4 + 35 * 8 * 4 words (epoch
    # and count, three slots per block, slabs, the slabs' warp parts)
    buf = next(b for b in stand_in.allocations if ctypes.addressof(b) == ws)
    assert len(buf) >= 4 * (4 + 3 * 8 * 1024 + 35 * 4 + 35 * 8 * 4) == launcher.ws_words * 4
    assert set(bytes(buf)) == {0}
    assert stand_in.current.get(threading.get_ident(), 0) == 0  # pushed, then popped


def test_stand_in_sm90_launches_the_smxx_function_with_wide_last(stand_in):
    """"sm90" and "smxx" calls of one shape load one module and launch its function,
    differing only in the wide_last argument (1 for "sm90")."""
    ctx = torch.ones(5000, 2, dtype=I32)
    _, c90 = _call(stand_in, 0, ctx, schedule="sm90")
    _, cxx = _call(stand_in, 0, ctx, schedule="smxx")
    assert c90.plan.code == cxx.plan.code and len(runtime.loaded_modules()) == 1
    l90, lxx = stand_in.launches
    assert l90["fn"] == lxx["fn"] and (l90["args"][5], lxx["args"][5]) == (1, 0)
    assert l90["args"][:5] == lxx["args"][:5] == (ctx.data_ptr(), 0, 5000, 2, 132)


def test_stand_in_refused_cooperative_grid_is_halved_and_remembered(stand_in, caplog):
    """A process that sees fewer SMs than the device has (MPS, green contexts): the
    driver refuses the planned grid; the launcher halves it until it fits, once."""
    ctx = torch.ones(70000, 1, dtype=I32)
    idx = (torch.arange(70000) // 2).to(I32)
    stand_in.resident_blocks = 10
    with caplog.at_level("WARNING", logger="jitmeta"):
        _, launcher = _call(stand_in, 0, ctx, idx)
        assert launcher.plan.grid == launcher.launch.grid == 35  # one block per slab
        assert stand_in.tries == [35, 17, 8]
        assert [l["grid"] for l in stand_in.launches] == [8]
        _call(stand_in, 0, ctx, idx)
        _call(stand_in, 0, torch.ones(300000, 1, dtype=I32))  # another shape, same device
    assert stand_in.tries[3:] == [8, 8]
    warnings = [r for r in caplog.records if "refused a cooperative launch" in r.message]
    assert len(warnings) == 2  # 35 -> 17 -> 8, each step once, then never again
    assert jit_launcher._grid_caps == {0: 8}
    stand_in.device = 1  # the other device keeps its own grid
    _call(stand_in, 1, ctx, idx)
    assert stand_in.tries[-3:] == [35, 17, 8]  # its own plan (35 slabs <= 108 SMs)
    assert jit_launcher._grid_caps == {0: 8, 1: 8}
    assert (jit_launcher.grid_cap(0), jit_launcher.grid_cap(1), jit_launcher.grid_cap(2)) \
        == (8, 8, None)
    jit_launcher.reset_grid_caps()
    assert jit_launcher.grid_cap(0) is None


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
    assert emit["pdl"] and emit["stream"] == 0x5001 and emit["args"][6] == res.data_ptr()
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
    assert len(stand_in.allocations) == 2 and len(workspace._spares[0]) == 1
    stand_in.capturing = True
    stand_in.stream = 0x6000  # a new capture stream adopts the spare
    _call(stand_in, 0, ctx, idx, out)
    assert len(stand_in.allocations) == 2 and workspace._spares[0] == []
    adopted = stand_in.launches[-1]["args"][7]
    stand_in.stream = 0x7000  # another new capture stream: no spare left
    with pytest.raises(jitmeta.CaptureCompileError, match="workspace"):
        _call(stand_in, 0, ctx, idx, out)
    stand_in.capturing = False
    stand_in.stream = 0x5000
    _call(stand_in, 0, ctx, idx, out)  # an eager call reserves the next spare
    assert len(workspace._spares[0]) == 1
    stand_in.capturing = True
    stand_in.stream = 0x7000
    _call(stand_in, 0, ctx, idx, out)
    ws = {l["stream"]: l["args"][7] for l in stand_in.launches if l["fn"] == "jitmeta_emit"}
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
    assert len({l["args"][7] for l in stand_in.launches}) == 1
    assert all(l["cooperative"] and l["stream"] == 0x5000 for l in stand_in.launches)


def test_stand_in_check_inputs_mode(stand_in, caplog):
    """JITMETA_CHECK_INPUTS=1 on the CUDA path: bad values raise before the launch;
    inside capture the check (which synchronizes) is skipped, with one warning."""
    bad = torch.tensor([[5], [-3], [7]], dtype=I32)
    _call(stand_in, 0, bad)  # off: the caller's contract, launched as given
    assert len(stand_in.launches) == 1
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        with pytest.raises(jitmeta.InputValueError, match="element 1"):
            _call(stand_in, 0, bad)
        assert len(stand_in.launches) == 1
        stand_in.capturing = True
        with caplog.at_level("WARNING", logger="jitmeta"):
            _call(stand_in, 0, bad)
            _call(stand_in, 0, bad)
        assert len(stand_in.launches) == 3
    warned = [r for r in caplog.records if "JITMETA_CHECK_INPUTS" in r.message]
    assert len(warned) <= 1  # once per process (an earlier test may have warned)
