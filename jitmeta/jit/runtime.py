"""Load cubins into the CUDA context PyTorch uses, and launch them (cuda.bindings driver).

One loaded module per (device, cache key), kept for the life of the process. Launches
go to the stream the caller passes (the API passes ``torch.cuda.current_stream``); no
host-device synchronization happens here.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

__all__ = ["DriverError", "LoadedModule", "load_module", "launch", "primary_context",
           "device_context"]


class DriverError(RuntimeError):
    """A CUDA driver call failed."""


_lock = threading.RLock()  # load_module holds it while primary_context takes it
_contexts: dict[int, object] = {}
_modules: dict[tuple[int, str], "LoadedModule"] = {}
_initialized = False


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, what: str):
    """Unwrap a cuda.bindings (err, *values) tuple, raising on error."""
    driver = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        raise DriverError(f"{what} failed: {name.decode() if name else err} "
                          f"({text.decode() if text else ''})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def primary_context(device: int):
    """The primary context of ``device`` (the one PyTorch's runtime uses)."""
    global _initialized
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    driver = _driver()
    with _lock:
        if not _initialized:
            _check(driver.cuInit(0), "cuInit")
            _initialized = True
        ctx = _contexts.get(device)
        if ctx is None:
            dev = _check(driver.cuDeviceGet(device), f"cuDeviceGet({device})")
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev),
                         f"cuDevicePrimaryCtxRetain({device})")
            _contexts[device] = ctx
    return ctx


class device_context:
    """Make ``device``'s primary context current for a block; cheap when it already is."""

    __slots__ = ("ctx", "pushed")

    def __init__(self, device: int):
        self.ctx = primary_context(device)
        self.pushed = False

    def __enter__(self):
        driver = _driver()
        cur = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(cur) != int(self.ctx):
            _check(driver.cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
            self.pushed = True
        return self

    def __exit__(self, *exc):
        if self.pushed:
            _check(_driver().cuCtxPopCurrent(), "cuCtxPopCurrent")
        return False


@dataclass
class LoadedModule:
    device: int
    key: str
    module: object
    functions: dict[str, object] = field(default_factory=dict)
    registers: dict[str, int] = field(default_factory=dict)
    max_dynamic_smem: int = 0


def load_module(device: int, key: str, cubin: bytes, names: tuple[str, ...],
                max_dynamic_smem: int = 0) -> LoadedModule:
    """Load ``cubin`` once per (device, key) and resolve the kernels ``names``."""
    mod = _modules.get((device, key))
    if mod is not None:
        return mod
    driver = _driver()
    with _lock:
        mod = _modules.get((device, key))
        if mod is not None:
            return mod
        with device_context(device):
            module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
            loaded = LoadedModule(device, key, module)
            for name in names:
                fn = _check(driver.cuModuleGetFunction(module, name.encode()),
                            f"cuModuleGetFunction({name})")
                if max_dynamic_smem:
                    _check(driver.cuFuncSetAttribute(
                        fn, driver.CUfunction_attribute
                        .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_dynamic_smem),
                        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                loaded.functions[name] = fn
                loaded.registers[name] = _check(driver.cuFuncGetAttribute(
                    driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, fn),
                    "cuFuncGetAttribute(NUM_REGS)")
            loaded.max_dynamic_smem = max_dynamic_smem
        _modules[(device, key)] = loaded
    return loaded


def loaded_modules() -> list[tuple[int, str]]:
    return list(_modules)


_P = ctypes.c_void_p
_U = ctypes.c_uint32


def launch(fn, grid: int, threads: int, smem: int, stream: int, args: tuple,
           types: tuple, pdl: bool = False) -> None:
    """Launch ``fn`` on ``stream`` (a raw cudaStream_t as int). No synchronization.

    With ``pdl`` the launch carries the programmatic-stream-serialization attribute,
    so it may start while the previous kernel in the stream finishes; the kernel
    waits for that kernel's results with ``griddepcontrol.wait``.
    """
    driver = _driver()
    if not pdl:
        _check(driver.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem, stream,
                                     (args, types), 0), "cuLaunchKernel")
        return
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = driver.CUstream(stream)
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    _check(driver.cuLaunchKernelEx(cfg, fn, (args, types), 0), "cuLaunchKernelEx")


POINTER = _P
UINT32 = _U
