"""One kernel launch configuration, ready to call: function, geometry, argument kinds.

Generic: a kernel family decides the grid, block size, shared memory, whether the
launch is cooperative and the kinds of its arguments; :class:`Launch` launches it on a
stream with :func:`runtime.launch`.

A cooperative launch must fit on the device at once. A family plans for one block per
SM; a process confined to fewer SMs (an MPS active-thread percentage, green contexts)
gets the launch refused, and then the grid is halved until it fits and the cap is
remembered per device. Only kernels that serve any grid may be launched cooperatively
this way (the family guarantees it).
"""

from __future__ import annotations

import logging
import threading

from . import runtime

__all__ = ["Launch", "grid_cap", "reset_grid_caps"]

log = logging.getLogger("jitmeta")

_grid_caps: dict[int, int] = {}
_caps_lock = threading.Lock()


def grid_cap(device: int) -> int | None:
    """The most blocks a cooperative launch may have on ``device`` (None: unlimited)."""
    return _grid_caps.get(device)


def reset_grid_caps() -> None:
    with _caps_lock:
        _grid_caps.clear()


def _shrink(device: int, grid: int) -> int:
    smaller = max(1, grid // 2)
    with _caps_lock:
        if smaller < _grid_caps.get(device, grid + 1):
            _grid_caps[device] = smaller
            log.warning("jitmeta: cuda:%d refused a cooperative launch of %d blocks (fewer "
                        "SMs available to this process than the device has); using at "
                        "most %d blocks from now on", device, grid, smaller)
    return smaller


class Launch:
    """A loaded kernel and how to launch it (immutable).

    ``types`` are the kinds of the kernel's arguments (:data:`runtime.POINTER`,
    :data:`runtime.UINT32`), in order. A plain class rather than a dataclass: defining
    a dataclass runs generated code (about a millisecond), and a process imports this
    module during its first call.
    """

    __slots__ = ("device", "function", "grid", "threads", "smem", "cooperative", "types")

    def __init__(self, device: int, function: object, grid: int, threads: int, smem: int,
                 cooperative: bool, types: tuple):
        for name, value in zip(self.__slots__, (device, function, grid, threads, smem,
                                                cooperative, types)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"Launch is immutable: cannot set {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"Launch is immutable: cannot delete {name!r}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"Launch({fields})"

    def __call__(self, args: tuple, stream: int, pdl: bool = False) -> None:
        """Launch on ``stream`` (raw handle); the device's context must be current."""
        if not self.cooperative:
            runtime.launch(self.function, self.grid, self.threads, self.smem, stream, args,
                           self.types, pdl)
            return
        grid = min(self.grid, _grid_caps.get(self.device, self.grid))
        while True:
            try:
                runtime.launch(self.function, grid, self.threads, self.smem, stream, args,
                               self.types, pdl, True)
                return
            except runtime.DriverError as exc:
                if exc.code != runtime.COOPERATIVE_LAUNCH_TOO_LARGE or grid == 1:
                    raise
                grid = _shrink(self.device, grid)
