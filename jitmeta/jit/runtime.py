"""Load cubins into the CUDA context PyTorch uses, and launch them (cuda.bindings driver).

One loaded module per (device, cache key), kept for the life of the process. Launches
go to the stream the caller passes (the API passes the current stream of the tensor's
device); no host-device synchronization happens here.

The launch path is built for a small per-call host cost. Where the package's C
extension ``jitmeta._launch`` was built, :func:`launch` hands the arguments to it: it
reads them into a C array and calls ``cuLaunchKernel`` / ``cuLaunchKernelEx`` through
the driver's own function pointers (resolved once, with ``cuGetProcAddress``, when the
first context is set up), the GIL released for the driver call. Otherwise kernel
arguments are packed with one ``struct.pack_into`` into a per-thread C buffer, and
cuda.bindings gets the address of a ``void*[]`` that points into it (it accepts
``kernelParams`` as such an address), instead of a ``(values, types)`` tuple that it
would convert argument by argument on every call.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import struct
import threading
from dataclasses import dataclass, field

from cuda.bindings import driver as _cuda_driver

try:  # optional: built with the package where a C compiler was at hand
    from .. import _launch as _c_ext
except ImportError:
    _c_ext = None

from .source import POINTER, UINT32  # the argument kinds launch() packs

__all__ = ["DriverError", "CaptureCompileError", "LoadedModule", "KernelParams",
           "load_module", "get_module", "loaded_modules", "launch", "allocate",
           "primary_context", "device_context", "make_current", "pop_current",
           "thread_params", "c_launcher", "POINTER", "UINT32"]

log = logging.getLogger("jitmeta")


class DriverError(RuntimeError):
    """A CUDA driver call failed; ``code`` is the CUresult (an int)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


class CaptureCompileError(RuntimeError):
    """A call inside CUDA-graph capture would need a compile, a module load or an
    allocation: warm it before capturing."""


#: CUresult of a cooperative launch with more blocks than can be resident at once
COOPERATIVE_LAUNCH_TOO_LARGE = 720



_lock = threading.RLock()  # load_module holds it while primary_context takes it
_contexts: dict[int, object] = {}
_context_ids: dict[int, int] = {}  # device -> int(primary context handle)
_modules: dict[tuple[int, str], "LoadedModule"] = {}
_initialized = False
_tls = threading.local()
# jitmeta._launch.launch once init() gave it the driver's functions (primary_context),
# else None: launches go through cuda.bindings
_c_launch = None
# cuda.bindings.driver is imported with jitmeta's JIT layer (it needs no GPU and loads
# libcuda only on its first call): its import takes 25-50 ms, which a first call would
# pay otherwise.
_drv = _cuda_driver


def _error(err, what: str) -> DriverError:
    _, name = _drv.cuGetErrorName(err)
    _, text = _drv.cuGetErrorString(err)
    return DriverError(f"{what} failed: {name.decode() if name else err} "
                       f"({text.decode() if text else ''})", int(err))


def _check(result, what: str):
    """Unwrap a cuda.bindings (err, *values) tuple, raising on error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err:  # CUresult is an int enum; CUDA_SUCCESS is 0
        raise _error(err, what)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# --- contexts ----------------------------------------------------------------------------

def primary_context(device: int):
    """The primary context of ``device`` (the one PyTorch's runtime uses)."""
    global _initialized
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    driver = _drv
    with _lock:
        if not _initialized:
            _check(driver.cuInit(0), "cuInit")
            _init_c_launcher()
            _initialized = True
        ctx = _contexts.get(device)
        if ctx is None:
            dev = _check(driver.cuDeviceGet(device), f"cuDeviceGet({device})")
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev),
                         f"cuDevicePrimaryCtxRetain({device})")
            _context_ids[device] = int(ctx)
            _contexts[device] = ctx
    return ctx


def _init_c_launcher() -> None:
    """Hands the C launcher the driver's launch functions, when it was built and the
    driver is the real one (a stand-in driver in tests keeps every launch in Python)."""
    global _c_launch
    if _c_ext is None or _drv is not _cuda_driver:
        return
    try:
        pointers = []
        for name in (b"cuLaunchKernel", b"cuLaunchKernelEx"):  # both in CUDA >= 12.0
            err, pfn = _drv.cuGetProcAddress(
                name, 12000, _drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)[:2]
            if err or not int(pfn):
                raise DriverError(f"cuGetProcAddress({name.decode()}) gave no function")
            pointers.append(int(pfn))
        ids = _drv.CUlaunchAttributeID
        _c_ext.init(*pointers,
                    int(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION),
                    int(ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE))
        _c_launch = _c_ext.launch
    except Exception as exc:  # noqa: BLE001 (any failure: launch through cuda.bindings)
        log.debug("jitmeta: C launcher not used (%s); launching through cuda.bindings", exc)


def c_launcher() -> bool:
    """Whether launches go through the C extension (else through cuda.bindings)."""
    return _c_launch is not None


def make_current(device: int) -> bool:
    """Make ``device``'s primary context current on this thread, if it is not already.

    Returns True when a context was pushed; the caller then owes :func:`pop_current`.
    The common case (PyTorch already made it current) costs one ``cuCtxGetCurrent``.
    """
    want = _context_ids.get(device)
    if want is None:
        primary_context(device)
        want = _context_ids[device]
    err, cur = _drv.cuCtxGetCurrent()
    if err:
        raise _error(err, "cuCtxGetCurrent")
    if int(cur) == want:
        return False
    err, = _drv.cuCtxPushCurrent(_contexts[device])
    if err:
        raise _error(err, "cuCtxPushCurrent")
    return True


def pop_current() -> None:
    """Undo a :func:`make_current` that returned True."""
    err, _ = _drv.cuCtxPopCurrent()
    if err:
        raise _error(err, "cuCtxPopCurrent")


class device_context:
    """Make ``device``'s primary context current for a block; cheap when it already is."""

    __slots__ = ("device", "pushed")

    def __init__(self, device: int):
        primary_context(device)
        self.device = device
        self.pushed = False

    def __enter__(self):
        self.pushed = make_current(self.device)
        return self

    def __exit__(self, *exc):
        if self.pushed:
            pop_current()
        return False


# --- modules -----------------------------------------------------------------------------

@dataclass
class LoadedModule:
    device: int
    key: str
    module: object
    functions: dict[str, object] = field(default_factory=dict)


def load_module(device: int, key: str, cubin: bytes, names: tuple[str, ...],
                max_dynamic_smem: int = 0) -> LoadedModule:
    """Load ``cubin`` once per (device, key) and resolve the kernels ``names``.

    Threads racing on one (device, key) load it once: the first takes the loader lock,
    the others wait for it and find the module.
    """
    mod = _modules.get((device, key))
    if mod is not None:
        return mod
    driver = _drv
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
        _modules[(device, key)] = loaded
    return loaded


def allocate(device: int, nbytes: int) -> int:
    """``nbytes`` of zeroed device memory on ``device``, outside PyTorch's caching
    allocator (so outside any CUDA-graph memory pool), never freed. For small buffers
    that live as long as the process (a captured graph may keep using them). Waits
    for the zeroing (never call it during CUDA-graph capture)."""
    driver = _drv
    with device_context(device):
        ptr = _check(driver.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})")
        _check(driver.cuMemsetD8(ptr, 0, nbytes), "cuMemsetD8")
        _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
        return int(ptr)


def get_module(device: int, key: str) -> LoadedModule | None:
    """The module already loaded for (device, key), or None (never loads)."""
    return _modules.get((device, key))


def loaded_modules() -> list[tuple[int, str]]:
    return list(_modules)


# --- kernel arguments --------------------------------------------------------------------

_CODES = {POINTER: ("Q", 8), UINT32: ("I", 4)}
_C_KINDS = {POINTER: b"P", UINT32: b"I"}
_kinds: dict[tuple, bytes] = {}  # a signature's argument kinds for the C launcher


def _kinds_of(types: tuple) -> bytes:
    try:
        return b"".join(_C_KINDS[t] for t in types)
    except KeyError:
        raise TypeError(f"kernel argument types must be runtime.POINTER or runtime.UINT32; "
                        f"got {types!r}") from None


class KernelParams:
    """Argument values of one kernel signature in one C buffer, and the ``void*[]``
    the driver reads them through.

    ``types`` is a sequence of :data:`POINTER` / :data:`UINT32`. Each value sits at its
    natural alignment; ``pack(*values)`` overwrites them in one call, and
    :attr:`address` is what ``cuLaunchKernel`` takes as ``kernelParams``. The driver
    copies the values during the launch call, so the buffer is reusable right after
    it, but not by another thread during it: keep one per thread.
    """

    __slots__ = ("types", "offsets", "size", "buffer", "pointers", "address", "pack")

    def __init__(self, types):
        fmt, offsets, offset = "=", [], 0
        for t in types:
            try:
                code, size = _CODES[t]
            except KeyError:
                raise TypeError(f"kernel argument type must be runtime.POINTER or "
                                f"runtime.UINT32; got {t!r}") from None
            pad = -offset % size
            fmt += f"{pad}x" * bool(pad) + code
            offset += pad
            offsets.append(offset)
            offset += size
        layout = struct.Struct(fmt)
        self.types = tuple(types)
        self.offsets = tuple(offsets)
        self.size = layout.size
        self.buffer = (ctypes.c_uint64 * max(1, -(-layout.size // 8)))()  # 8-aligned
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * max(1, len(offsets)))(
            *(base + o for o in offsets))
        self.address = ctypes.addressof(self.pointers)
        self.pack = functools.partial(layout.pack_into, self.buffer, 0)


def thread_params(types: tuple) -> KernelParams:
    """This thread's :class:`KernelParams` for the signature ``types``."""
    try:
        return _tls.params[types]
    except AttributeError:
        _tls.params = {}
    except KeyError:
        pass
    params = _tls.params[types] = KernelParams(types)
    return params


# --- launch ------------------------------------------------------------------------------

def _launch_config(grid: int, threads: int, smem: int, stream: int, pdl: bool,
                   cooperative: bool):
    """This thread's CUlaunchConfig carrying the programmatic-serialization and/or
    cooperative attributes (one per combination, reused)."""
    configs = getattr(_tls, "launch_configs", None)
    if configs is None:
        configs = _tls.launch_configs = {}
    cfg = configs.get((pdl, cooperative))
    if cfg is None:
        driver = _drv
        cfg = driver.CUlaunchConfig()
        cfg.gridDimY = cfg.gridDimZ = cfg.blockDimY = cfg.blockDimZ = 1
        attrs = []
        if pdl:
            attr = driver.CUlaunchAttribute()
            attr.id = (driver.CUlaunchAttributeID
                       .CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        if cooperative:
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attr.value.cooperative = 1
            attrs.append(attr)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        configs[(pdl, cooperative)] = cfg
    cfg.gridDimX = grid
    cfg.blockDimX = threads
    cfg.sharedMemBytes = smem
    cfg.hStream = _drv.CUstream(stream)
    return cfg


def launch(fn, grid: int, threads: int, smem: int, stream: int, args: tuple,
           types: tuple, pdl: bool = False, cooperative: bool = False) -> None:
    """Launch ``fn`` on ``stream`` (a raw cudaStream_t as int). No synchronization.

    ``args`` are ints (device addresses for :data:`POINTER`, values for
    :data:`UINT32`), ``types`` their kinds. The calling thread must have the function's
    context current (see :func:`make_current`).

    With ``pdl`` the launch carries the programmatic-stream-serialization attribute,
    so it may start while the previous kernel in the stream finishes; the kernel
    waits for that kernel's results with ``griddepcontrol.wait``. With
    ``cooperative`` the driver guarantees that all ``grid`` blocks are resident at once
    (or fails the launch), which the chunked variant's in-kernel combine relies on.
    """
    c_launch = _c_launch
    if c_launch is not None:
        kinds = _kinds.get(types)
        if kinds is None:
            kinds = _kinds[types] = _kinds_of(types)
        err = c_launch(fn, grid, threads, smem, stream, pdl | cooperative << 1, kinds, *args)
        if err:
            raise _error(err, "cuLaunchKernelEx" if pdl or cooperative else "cuLaunchKernel")
        return
    params = thread_params(types)
    params.pack(*args)
    driver = _drv
    if pdl or cooperative:
        err, = driver.cuLaunchKernelEx(
            _launch_config(grid, threads, smem, stream, pdl, cooperative), fn,
            params.address, 0)
        if err:
            raise _error(err, "cuLaunchKernelEx")
        return
    err, = driver.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem, stream,
                                 params.address, 0)
    if err:
        raise _error(err, "cuLaunchKernel")
