"""The C launcher (``jitmeta._launch``), without a GPU.

Stand-in ``cuLaunchKernel`` / ``cuLaunchKernelEx`` functions (ctypes callbacks with the
driver's C signatures) take the place of the driver's: the extension calls them through
the addresses ``init`` receives, exactly as it calls the driver's. They record what
arrived: the launch geometry and stream, every kernel argument read back through the
``void*[]`` (as the driver reads it), and for ``cuLaunchKernelEx`` the configuration
read through cuda.bindings' own ``CUlaunchConfig`` (so the extension's declaration of
the driver structures is checked against the header cuda.bindings was built from).

The extension is built with the package where a C compiler is at hand (CI builds it:
there a missing extension fails, elsewhere these tests skip).
"""

from __future__ import annotations

import ctypes
import os
import threading

import pytest

from jitmeta.jit import launcher as jit_launcher
from jitmeta.jit import runtime
from jitmeta.kernels import paged_mqa

try:
    from jitmeta import _launch
except ImportError:
    _launch = None
    if os.environ.get("CI"):
        raise  # CI installs with a C compiler: the extension must have been built

pytestmark = pytest.mark.skipif(_launch is None,
                                reason="jitmeta._launch was not built (no C compiler at "
                                       "install time)")

ARG_TYPES = paged_mqa.ARG_TYPES
ATTRS_OFFSET = 40  # CUlaunchConfig.attrs (checked against cuda.bindings below)
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)


def _read_args(params: int, kinds: tuple) -> tuple[int, ...]:
    ptrs = (ctypes.c_void_p * len(kinds)).from_address(params)
    return tuple((ctypes.c_uint64 if k is runtime.POINTER else ctypes.c_uint32)
                 .from_address(p).value for p, k in zip(ptrs, kinds))


class StandIn:
    """Driver launch functions that record each call; ``result`` is what they return."""

    def __init__(self, kinds=ARG_TYPES):
        from cuda.bindings import driver

        self.driver, self.kinds = driver, kinds
        self.calls, self.result, self.threads = [], 0, set()
        self.launch = LAUNCH(self._launch)
        self.launch_ex = LAUNCH_EX(self._launch_ex)
        ids = driver.CUlaunchAttributeID
        self.pdl_id = int(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        self.coop_id = int(ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE)

    def _launch(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.threads.add(threading.get_ident())
        self.calls.append(dict(api="cuLaunchKernel", fn=fn or 0, grid=(gx, gy, gz),
                               block=(bx, by, bz), smem=smem, stream=stream or 0,
                               args=_read_args(params, self.kinds), extra=extra, attrs={}))
        return self.result

    def _launch_ex(self, cfg_ptr, fn, params, extra):
        cfg = self.driver.CUlaunchConfig(_ptr=cfg_ptr)
        # (cuda.bindings' `attrs` getter returns the list its setter was given: the
        # array is read here, each element through cuda.bindings' CUlaunchAttribute)
        base = ctypes.c_uint64.from_address(cfg_ptr + ATTRS_OFFSET).value
        size = _launch.LAUNCH_ATTRIBUTE_BYTES
        attrs = {}
        for i in range(cfg.numAttrs):
            a = self.driver.CUlaunchAttribute(_ptr=base + i * size)
            attrs[int(a.id)] = a
        self.calls.append(dict(
            api="cuLaunchKernelEx", fn=fn or 0, grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
            block=(cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), smem=cfg.sharedMemBytes,
            stream=int(cfg.hStream), args=_read_args(params, self.kinds), extra=extra,
            attrs={k: (a.value.programmaticStreamSerializationAllowed if k == self.pdl_id
                       else a.value.cooperative) for k, a in attrs.items()}))
        return self.result


@pytest.fixture
def stand_in(monkeypatch):
    """The extension initialized with the stand-ins, and runtime.launch routed to it;
    afterwards the real driver's functions are handed back (on a GPU machine)."""
    drv = StandIn()
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    _launch.init(addr(drv.launch), addr(drv.launch_ex), drv.pdl_id, drv.coop_id)
    was_active = runtime.c_launcher()
    monkeypatch.setattr(runtime, "_c_launch", _launch.launch)
    monkeypatch.setattr(runtime, "_kinds", {})
    yield drv
    if was_active:  # the GPU tests that follow launch through the real driver again
        monkeypatch.undo()
        runtime._init_c_launcher()


def test_driver_structures_match_cuda_bindings():
    from cuda.bindings import driver

    assert _launch.LAUNCH_CONFIG_BYTES == 56  # the CUDA 12 / 13 header's layout on LP64
    assert _launch.LAUNCH_ATTRIBUTE_BYTES == 72
    # where cuda.bindings keeps `attrs` and what follows it (the stand-in reads them so)
    cfg = driver.CUlaunchConfig()
    a = [driver.CUlaunchAttribute(), driver.CUlaunchAttribute()]
    cfg.attrs, cfg.numAttrs = a, 2
    base = ctypes.c_uint64.from_address(cfg.getPtr() + ATTRS_OFFSET).value
    assert base and ctypes.c_uint32.from_address(cfg.getPtr() + ATTRS_OFFSET + 8).value == 2
    a[1].id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    cfg.attrs = a
    base = ctypes.c_uint64.from_address(cfg.getPtr() + ATTRS_OFFSET).value
    second = driver.CUlaunchAttribute(_ptr=base + _launch.LAUNCH_ATTRIBUTE_BYTES)
    assert second.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE


def test_plain_launch_arguments(stand_in):
    args = (0x7F00_0000_1000, 0xFFFF_8000_0000_0008, 2**32 - 1, 7, 132, 1, 0x10, 0)
    runtime.launch(0xABC0, 35, 256, 4096, 0x5000, args, ARG_TYPES)
    (c,) = stand_in.calls
    assert c == dict(api="cuLaunchKernel", fn=0xABC0, grid=(35, 1, 1), block=(256, 1, 1),
                     smem=4096, stream=0x5000, args=args, extra=None, attrs={})


@pytest.mark.parametrize("pdl,cooperative", [(True, False), (False, True), (True, True)])
def test_launch_attributes(stand_in, pdl, cooperative):
    args = (1, 2, 3, 4, 5, 6, 7, 8)
    runtime.launch(0x1230, 132, 1024, 0, 0x7000, args, ARG_TYPES, pdl, cooperative)
    (c,) = stand_in.calls
    want = {}
    if pdl:
        want[stand_in.pdl_id] = 1
    if cooperative:
        want[stand_in.coop_id] = 1
    assert c == dict(api="cuLaunchKernelEx", fn=0x1230, grid=(132, 1, 1),
                     block=(1024, 1, 1), smem=0, stream=0x7000, args=args, extra=None,
                     attrs=want)


def test_null_stream_and_a_function_handle_object(stand_in):
    from cuda.bindings import driver

    runtime.launch(driver.CUfunction(0x4440), 1, 32, 0, 0, (0,) * len(ARG_TYPES), ARG_TYPES)
    assert stand_in.calls[0]["fn"] == 0x4440 and stand_in.calls[0]["stream"] == 0


def test_other_signatures(stand_in):
    P, U = runtime.POINTER, runtime.UINT32
    stand_in.kinds = (U, P, U)
    runtime.launch(1, 1, 32, 0, 0, (9, 2**64 - 1, 0), (U, P, U))
    assert stand_in.calls[0]["args"] == (9, 2**64 - 1, 0)


def test_driver_errors_raise_with_their_code(stand_in, monkeypatch):
    class Names:
        def cuGetErrorName(self, err):
            return (0, b"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")

        def cuGetErrorString(self, err):
            return (0, b"too many blocks")

    monkeypatch.setattr(runtime, "_drv", Names())
    stand_in.result = 720
    with pytest.raises(runtime.DriverError, match="cuLaunchKernelEx failed") as exc:
        runtime.launch(1, 200, 256, 0, 0, (0,) * len(ARG_TYPES), ARG_TYPES, cooperative=True)
    assert exc.value.code == 720
    # through Launch: a refused cooperative grid is halved until it fits
    jit_launcher.reset_grid_caps()
    tries = []

    def fits(cfg_ptr, fn, params, extra):
        cfg = stand_in.driver.CUlaunchConfig(_ptr=cfg_ptr)
        tries.append(cfg.gridDimX)
        return 720 if cfg.gridDimX > 40 else 0

    cb = LAUNCH_EX(fits)
    _launch.init(ctypes.cast(stand_in.launch, ctypes.c_void_p).value,
                 ctypes.cast(cb, ctypes.c_void_p).value, stand_in.pdl_id, stand_in.coop_id)
    launch = jit_launcher.Launch(0, 1, 132, 256, 0, True, ARG_TYPES)
    launch((0,) * len(ARG_TYPES), 0)
    assert tries == [132, 66, 33] and jit_launcher.grid_cap(0) == 33
    jit_launcher.reset_grid_caps()


def test_bad_arguments_raise_before_the_driver_is_called(stand_in):
    launch = _launch.launch
    with pytest.raises(OverflowError, match="does not fit 32 bits"):
        launch(1, 1, 32, 0, 0, 0, b"PPIIIPP", 0, 0, 2**32, 1, 1, 0, 0)
    with pytest.raises(OverflowError, match="grid"):
        launch(1, 2**32, 32, 0, 0, 0, b"")
    with pytest.raises(OverflowError):
        launch(1, 1, 32, 0, 0, 0, b"P", -1)
    with pytest.raises(TypeError, match="2 kinds for 1 kernel arguments"):
        launch(1, 1, 32, 0, 0, 0, b"PP", 0)
    with pytest.raises(ValueError, match="unknown argument kind"):
        launch(1, 1, 32, 0, 0, 0, b"Q", 0)
    with pytest.raises(TypeError, match="kinds must be bytes"):
        launch(1, 1, 32, 0, 0, 0, "P", 0)
    with pytest.raises(TypeError, match="at least 7"):
        launch(1, 1, 32)
    with pytest.raises(TypeError):
        launch(1, 1, 32, 0, 0, 0, b"P", "0")
    with pytest.raises(TypeError):
        launch(1, 1, 32, 0, 0, 0, b"P" * 33, *[0] * 33)
    assert stand_in.calls == []


def test_launches_from_many_threads(stand_in):
    """The GIL is released around the driver call; each thread's arguments arrive intact."""
    def work(k):
        for i in range(200):
            runtime.launch(k + 1, 1 + i, 32, 0, k, (k, i, k, i, 1, 0, 2, 3), ARG_TYPES)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stand_in.calls) == 1600
    for c in stand_in.calls:
        k = c["stream"]
        assert c["fn"] == k + 1 and c["args"][0] == k == c["args"][2]
        assert c["grid"][0] == c["args"][1] + 1
