"""Per-(device, stream) scratch buffers for kernels whose blocks talk through memory.

Invariants (what the kernels and CUDA-graph capture rely on):

* a workspace starts zeroed (:func:`runtime.allocate`) and serves one launch at a time:
  a kernel leaves it in a state the next launch accepts (e.g. an epoch word);
* one workspace per (device, stream): two streams never share one, so their kernels
  can overlap freely; the per-thread default stream (handle 2) is a different stream in
  each thread, so it is keyed by thread too;
* a workspace's lock is held while a call picks it and enqueues its kernel;
* buffers come from the driver, not from PyTorch's caching allocator (a first call
  during torch.compile's CUDA-graph warm-up must not take memory from a graph's private
  pool) and are never freed (a captured graph may hold a pointer into an old one);
* nothing is allocated during CUDA-graph capture: a capture stream without a large
  enough workspace adopts the spare reserved for its device by an earlier eager call or
  by :func:`reserve_spare` (warm-up), and the next eager call reserves the next spare;
  with no spare, :class:`runtime.CaptureCompileError` says to warm first.

Graphs captured on one stream share that stream's workspace: replay them in one stream
order (as engines do), or capture them on different streams.
"""

from __future__ import annotations

import threading
from typing import Callable

from . import runtime

__all__ = ["Workspace", "stream_workspace", "reserve_spare", "has_spare", "MIN_WORDS",
           "PER_THREAD_STREAM", "workspace_key"]

MIN_WORDS = 1 << 16      # 256 KiB: enough for most launches, so buffers rarely grow
PER_THREAD_STREAM = 2    # CU_STREAM_PER_THREAD

_workspaces: dict[tuple, "Workspace"] = {}
_spares: dict[int, list[tuple[int, int]]] = {}
_lock = threading.Lock()


def _new_buffer(device: int, words: int) -> tuple[int, int]:
    return runtime.allocate(device, 4 * words), words


def reserve_spare(device: int, words: int) -> None:
    """Keep one workspace of at least ``words`` words for ``device``'s next capture
    stream (allocates; never call during capture)."""
    with _lock:
        spares = _spares.setdefault(device, [])
        if any(w >= words for _, w in spares):
            return
        spares.append(_new_buffer(device, max(words, MIN_WORDS)))


def has_spare(device: int) -> bool:
    return bool(_spares.get(device))


def _take_spare(device: int, words: int) -> tuple[int, int] | None:
    with _lock:
        spares = _spares.get(device, [])
        for i, (_, w) in enumerate(spares):
            if w >= words:
                return spares.pop(i)
    return None


class Workspace:
    """The buffers of one (device, stream); the newest is the one in use: ``ptr``, of
    ``words`` zero-initialized uint32 words. A launch needing more calls :meth:`grow`
    first (with ``lock`` held)."""

    __slots__ = ("lock", "buffers", "words", "ptr")

    def __init__(self):
        self.lock = threading.Lock()
        self.buffers: list[tuple[int, int]] = []  # (address, words), newest last
        self.words = 0
        self.ptr = 0

    def grow(self, device: int, stream: int, words: int, capturing: Callable[[], bool],
             what: str = "a kernel") -> int:
        """Make a buffer of at least ``words`` (more than ``self.words``) the one in use
        and return its address; call with ``self.lock`` held. ``capturing()`` says
        whether ``stream`` is being captured: then the device's spare is adopted, as
        nothing may be allocated."""
        if capturing():
            buf = _take_spare(device, words)
            if buf is None:
                raise runtime.CaptureCompileError(
                    f"jitmeta: {what} ({words} workspace words) is being captured on "
                    f"stream {stream:#x} of cuda:{device}, which has no workspace, and "
                    "nothing may be allocated during capture. Warm first: one eager "
                    "call of the same kind on this device before capturing (any "
                    f"stream), or jitmeta.warm(device={device}, load=True), reserves "
                    "a workspace that the capture stream adopts; each new capture "
                    "stream adopts one, and the next eager call or warm reserves the "
                    "next (or run one eager call on the capture stream itself)")
        else:
            buf = _new_buffer(device, max(words, 2 * self.words, MIN_WORDS))
            reserve_spare(device, words)
        self.use(buf)
        return self.ptr

    def use(self, buf: tuple[int, int]) -> None:
        """Make ``buf`` (address, words) the buffer in use, kept with the earlier ones."""
        self.buffers.append(buf)
        self.ptr, self.words = buf


def workspace_key(device: int, stream: int) -> tuple:
    if stream == PER_THREAD_STREAM:
        return (device, stream, threading.get_ident())
    return (device, stream)


def stream_workspace(device: int, stream: int) -> Workspace:
    key = workspace_key(device, stream)
    ws = _workspaces.get(key)
    if ws is None:
        with _lock:
            ws = _workspaces.setdefault(key, Workspace())
    return ws
