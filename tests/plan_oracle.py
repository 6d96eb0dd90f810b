"""The tests' one independent reading of the planner's documented policy.

Plain Python on plain numbers: it imports nothing from jitmeta, so a change of the
library's formulas or of its control flow shows up as a disagreement with this module
(and with the literal numbers the test files work out by hand beside each use).

The policy, in words:

* a tile of ``n`` elements takes ``n + n // 32 + 1`` uint32 words (one spare word per 32
  elements, plus a halo word);
* a block-scan scratch holds ``threads // 32 + 2`` summaries of 4 bytes (dense) or 16
  bytes (varlen);
* static buckets are powers of two from 1024; a bucket runs a quarter of its capacity in
  threads, clamped to [min(256, threads), threads], unless JITMETA_THREADS is set;
* past the static buckets the chunked variant: the default chunk of 8192 (halved, not
  below 32, until its tile fits the static limit at the default threads), unless a
  smaller slab of 1024, 2048 or 4096 elements still gives every SM at most one slab, in
  which case the smallest such slab at its bucket's threads (varlen with more than 256
  tokens per SM: at least 2048, at 256 threads); a cooperative grid of at
  most one block per SM, per thread of a block and 1024 in all, with the slabs spread
  evenly and no block left without one;
* ``dynamic`` serves a batch only when forced (JITMETA_VARIANT), with a static part
  rounded up to 16 bytes.

Every function takes the limits as plain numbers or as any object with the attributes
of ``jitmeta.heuristics.arch.DeviceLimits`` (duck typing; no import).
"""

from __future__ import annotations

MIN_BUCKET = 1024
DEFAULT_CHUNK = 8192
SLABS = (1024, 2048, 4096)     # the slab sizes of the policy, smallest first
MAX_BLOCKS = 1024              # blocks of a chunked launch at most
EPOCH = 4                      # workspace words before the block slots
SLOT = 8                       # workspace words of one block's slot
SLOTS = 3                      # slots per block: what it publishes, its carry-in, the total


# --- the formulas -----------------------------------------------------------------------

def tile_words(n: int) -> int:
    return n + n // 32 + 1


def summary_bytes(varlen: bool) -> int:
    return 16 if varlen else 4


def scratch(threads: int, varlen: bool) -> int:
    return (threads // 32 + 2) * summary_bytes(varlen)


def static_bytes(capacity: int, threads: int, varlen: bool, reserved: int) -> int:
    return 4 * tile_words(capacity) + scratch(threads, varlen) + reserved


def dynamic_bytes(batch: int, threads: int, varlen: bool, reserved: int) -> tuple[int, int]:
    part = scratch(threads, varlen) + reserved
    return (part + 15) // 16 * 16, 4 * tile_words(batch)


def chunked_bytes(chunk: int, threads: int, varlen: bool, reserved: int) -> int:
    return static_bytes(chunk, threads, varlen, reserved)


def workspace(batch: int, chunk: int, varlen: bool, threads: int = 0) -> int:
    """Words of the chunked workspace: epoch and count, 3 slots for each of 1024 blocks,
    one summary per slab; slabs of 8 elements per thread also keep one summary per warp
    of 32 threads and slab, starting at an even word."""
    slabs = -(-batch // chunk)
    words = EPOCH + SLOTS * SLOT * MAX_BLOCKS + slabs * summary_bytes(varlen) // 4
    if threads and chunk == 8 * threads:
        words += words % 2 + slabs * (threads // 32) * summary_bytes(varlen) // 4
    return words


# --- the decisions ----------------------------------------------------------------------

def default_threads(max_threads_per_block: int) -> int:
    return min(1024, max_threads_per_block // 32 * 32)


def bucket_threads(cap: int, threads: int, forced: bool) -> int:
    """Threads of a static bucket: an eighth of its capacity, clamped to
    [min(256, threads), threads]; JITMETA_THREADS (``forced``) everywhere when set."""
    return threads if forced else max(min(256, threads), min(threads, cap // 8))


def slab_threads(slab: int, threads: int, forced: bool, varlen: bool = False) -> int:
    """Threads of a chunked slab: a quarter of its size, an eighth from 4096 up (varlen:
    from 2048 up; a register slab: 8 elements per thread), clamped the same way."""
    share = slab // 8 if slab >= (2048 if varlen else 4096) else slab // 4
    return threads if forced else max(min(256, threads), min(threads, share))


def bucket(batch: int) -> int:
    cap = MIN_BUCKET
    while cap < batch:
        cap *= 2
    return cap


def largest_static_batch(limits, threads: int, varlen: bool, forced: bool = False) -> int:
    """Largest power-of-two bucket whose static tile fits the static limit (0 if none)."""
    best, cap = 0, MIN_BUCKET
    while static_bytes(cap, bucket_threads(cap, threads, forced), varlen,
                       limits.smem_reserved_bytes) <= limits.smem_static_bytes:
        best, cap = cap, cap * 2
    return best


def largest_dynamic_batch(limits, threads: int, varlen: bool) -> int:
    """Largest batch whose forced-dynamic static + dynamic bytes fit the opt-in limit
    (-1 if none): a bisection over ``dynamic_bytes``."""
    def fits(b: int) -> bool:
        return sum(dynamic_bytes(b, threads, varlen, limits.smem_reserved_bytes)) \
            <= limits.smem_optin_bytes
    if not fits(0):
        return -1
    lo, hi = 0, limits.smem_optin_bytes  # a tile of b elements takes more than b bytes
    assert not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def grid(batch: int, chunk: int, sm_count: int, threads: int) -> int:
    """Blocks of a chunked launch: at most one per SM, one per thread of a block and
    1024 in all; the fewest slabs per block that allows, then no idle block."""
    slabs = -(-batch // chunk)
    most = min(slabs, sm_count, threads, MAX_BLOCKS)
    per = -(-slabs // most)
    return -(-slabs // per)


def default_chunk(limits, threads: int, varlen: bool) -> int:
    """8192 halved (not below 32) until its tile at ``threads`` fits the static limit
    (``limits`` after the budget)."""
    chunk = DEFAULT_CHUNK
    while chunk > 32 and chunked_bytes(chunk, threads, varlen, limits.smem_reserved_bytes) \
            > limits.smem_static_bytes:
        chunk //= 2
    return chunk


def slab_for(batch: int, sm_count: int, chunk: int) -> int | None:
    """The smallest slab below ``chunk`` that needs no more slabs than there are SMs."""
    fits = [c for c in SLABS if c < chunk and -(-batch // c) <= sm_count]
    return min(fits) if fits else None


def chunked(batch, limits, threads, varlen, forced_threads=False, chunk_knob=None
            ) -> tuple[int, int, int, int] | None:
    """The chunked choice: (chunk, threads, static bytes, grid), or None if it does not
    fit. JITMETA_CHUNK (``chunk_knob``) is used as given, at ``threads``."""
    t = threads
    if chunk_knob is not None:
        chunk = chunk_knob
    else:
        chunk = default_chunk(limits, threads, varlen)
        slab = slab_for(batch, limits.sm_count, chunk)
        # varlen with more than 256 tokens per SM: a 1024 slab becomes 2048 (if the
        # default chunk is larger and a 2048 slab gets 256 threads: 8 tokens each)
        if varlen and slab == 1024 and chunk > 2048 and batch > 256 * limits.sm_count and \
                slab_threads(2048, threads, forced_threads, True) == 256:
            slab = 2048
        # more slabs of the default chunk than SMs: 4096-element slabs for varlen, and
        # for dense while the default chunk gives at most 4 slabs per SM
        # (only where a 4096 slab gets 512 threads: 8 elements each, summed in registers)
        slabs = -(-batch // chunk)
        if slab is None and chunk > 4096 and slabs > limits.sm_count and (
                varlen or slabs <= 4 * limits.sm_count) and \
                slab_threads(4096, threads, forced_threads, varlen) == 512:
            slab = 4096
        if slab is not None:
            chunk, t = slab, slab_threads(slab, threads, forced_threads, varlen)
    smem = chunked_bytes(chunk, t, varlen, limits.smem_reserved_bytes)
    if smem > limits.smem_static_bytes:
        return None
    return chunk, t, smem, grid(batch, chunk, limits.sm_count, t)


def decide(batch, limits, threads, varlen, forced_threads=False, chunk_knob=None,
           variant_knob=None) -> tuple | None:
    """The whole decision as (variant, capacity, threads, static bytes, dynamic bytes,
    grid): the forced variant if it fits; else static, else chunked; else None.
    ``limits`` are the limits after the budget."""
    rsv = limits.smem_reserved_bytes
    cap = bucket(batch)
    t = bucket_threads(cap, threads, forced_threads)
    st = static_bytes(cap, t, varlen, rsv)
    static = ("static", cap, t, st, 0, 1) if st <= limits.smem_static_bytes else None
    if variant_knob == "static":
        return static
    if variant_knob == "dynamic":
        st, dyn = dynamic_bytes(batch, threads, varlen, rsv)
        return ("dynamic", 0, threads, st, dyn, 1) \
            if st + dyn <= limits.smem_optin_bytes else None
    ch = chunked(batch, limits, threads, varlen, forced_threads, chunk_knob)
    chunk_plan = None if ch is None else ("chunked", ch[0], ch[1], ch[2], 0, ch[3])
    if variant_knob == "chunked":
        return chunk_plan
    return static or chunk_plan
