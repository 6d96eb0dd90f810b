"""The value the JIT layer works on: what to render, compile and load for one cubin.

A kernel family (``jitmeta/kernels``) turns its own configuration into a
:class:`KernelSource`; everything under ``jitmeta/jit`` takes one and knows nothing
else about the kernel. Two equal sources render byte-identical CUDA and map to the same
cache key (given the same compile options).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["KernelSource", "POINTER", "UINT32"]

# The kinds of kernel arguments a launch packs (jit.runtime.launch): a family lists its
# kernel's signature with them; defined here so that describing a kernel needs no driver.
POINTER = ctypes.c_void_p  # a device pointer argument (8 bytes)
UINT32 = ctypes.c_uint32   # an unsigned int argument (4 bytes)


def _frozen(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    items = tuple(sorted(params.items()))
    for name, value in items:
        if not isinstance(value, (bool, int, str)):
            raise TypeError(f"render parameter {name!r} must be a bool, int or str; got "
                            f"{type(value).__name__} {value!r}")
    return items


@dataclass(frozen=True)
class KernelSource:
    """One cubin's inputs, as the family describes them.

    Parameters
    ----------
    family : str
        The kernel family's name (recorded in cache metadata and miss manifests).
    name : str
        A readable name of this configuration (file names, logs, ``jitmeta-cache ls``).
    template : str
        The ``.cu.j2`` file among the packaged templates.
    params : tuple of (str, bool | int | str)
        Render parameters (build with :meth:`make`); the headers listed in ``headers``
        are passed to the template too, as ``headers[file name]`` (their text).
    kernels : tuple of str
        The ``extern "C"`` kernels the source defines (resolved by name on load).
    arch : str
        The exact NVRTC target, e.g. ``"sm_90a"``.
    headers : tuple of str
        Packaged ``.cuh`` files the template inserts verbatim.
    describe : tuple of (str, bool | int | str)
        What the family wants recorded about this configuration (metadata, manifests,
        ``jitmeta-cache ls``); not part of the key.
    """

    family: str
    name: str
    template: str
    params: tuple[tuple[str, Any], ...]
    kernels: tuple[str, ...]
    arch: str
    headers: tuple[str, ...] = ()
    describe: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    @classmethod
    def make(cls, *, family: str, name: str, template: str, params: Mapping[str, Any],
             kernels: tuple[str, ...], arch: str, headers: tuple[str, ...] = (),
             describe: Mapping[str, Any] | None = None) -> "KernelSource":
        return cls(family, name, template, _frozen(params), tuple(kernels), arch,
                   tuple(headers), _frozen(describe or {}))

    def param(self, name: str) -> Any:
        return dict(self.params)[name]
