"""The planner: which kernel variant serves a shape, with which parameters, and why.

A pure function of (shape, device limits, knob snapshot, kernel layout): no GPU, no
compiler, no environment. Batch size is a run-time argument of every variant, so a
cubin is identified by :attr:`Plan.code` alone, and a whole range of batch sizes maps
to a handful of cubins (:func:`codes_for_batches`).

Variants (identical output):

* ``static``  -- the whole batch in a static ``__shared__`` tile of a power-of-two
  capacity bucket; chosen while it fits the 48 KiB static limit.
* ``dynamic`` -- the whole batch in dynamic shared memory sized at launch; one cubin
  for every batch up to the per-block opt-in limit.
* ``chunked`` -- slabs of ``chunk`` elements shared by a cooperative grid of at most one
  block per SM, one launch (summarize, one in-kernel combine, emit); bounded shared
  memory, unlimited batch. Chosen past the static buckets: several blocks load and
  scan in parallel, so it beats one block of dynamic shared memory, which serves a
  batch only when forced. The slab is the smallest of SLAB_SIZES that still gives
  every block one slab at most (measured fastest on an H200; varlen past
  VARLEN_SLAB_FROM tokens per SM at least VARLEN_SLAB, read into registers); past
  that, the default chunk while it is one per block, then STREAM_SLAB (varlen; dense
  up to DENSE_STREAM_SLABS default slabs per SM), then the default chunk again.

What differs between kernel families that share this tile-scan design (the size of a
scan summary, of a block's workspace slot) comes in as a :class:`TileLayout`; the
shared-memory formulas below are checked against the kernels by ``static_assert`` checks
rendered into every source (see ``jitmeta/kernels``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from ..envs import Knobs
from .arch import DeviceLimits

__all__ = ["Plan", "PlanError", "CodeSpec", "TileLayout", "plan", "codes_for_batches",
           "smem_static", "smem_dynamic", "smem_chunked", "smem_scratch", "tile_words",
           "static_threads", "slab_threads",
           "VARIANTS", "MIN_STATIC_CAPACITY", "DEFAULT_THREADS", "DEFAULT_CHUNK",
           "SLAB_SIZES", "VARLEN_SLAB", "VARLEN_SLAB_FROM", "MAX_GRID", "EPOCH_WORDS",
           "SLOTS_PER_BLOCK",
           "REG_PER_THREAD", "register_slabs",
           "slab_base", "workspace_words", "chunked_grid"]

VARIANTS = ("static", "dynamic", "chunked")
MIN_STATIC_CAPACITY = 1024
DEFAULT_THREADS = 1024
DEFAULT_CHUNK = 8192
SLAB_SIZES = (1024, 2048, 4096)  # smaller chunked slabs, while one per block suffices
# Past one default slab per SM, slabs of STREAM_SLAB (when summed in registers: at 512
# threads) serve varlen batches, and dense ones up to DENSE_STREAM_SLABS default slabs per
# SM.
# On an H200 (132 SMs) against 8192-element slabs at 1024 threads: varlen 2^21 17.91 ->
# 14.81 us, 2^24 50.19 -> 47.15 ("sm100" 58.46 -> 50.99); dense next_n=1 2^21 10.45 ->
# 9.36, 2^23 13.77 -> 12.92, but 2^24 26.01 -> 28.37 and next_n=2 2^23 24.63 -> 25.58
# (docs/benchmarks/experiments/2026-12-04-NVIDIA_H200-c768ba2-configs-stream.json).
STREAM_SLAB = 4096
DENSE_STREAM_SLABS = 4
# Varlen batches of more than VARLEN_SLAB_FROM tokens per SM, up to VARLEN_SLAB per SM:
# slabs of VARLEN_SLAB at VARLEN_SLAB / REG_PER_THREAD threads (read into registers),
# instead of the smallest slab at a quarter of its size. On an H200 (132 SMs), "smxx"
# 65536 6.74 -> 6.31 us, 131072 7.35 -> 6.62; "sm100" 65536 7.30 -> 7.12, 131072 9.05
# -> 7.59; at 32768 (below 132 * 256) it was 2.6 % slower in "sm100"
# (docs/benchmarks/experiments/2026-12-04-NVIDIA_H200-2ed3c5e-configs.json).
VARLEN_SLAB = 2048
VARLEN_SLAB_FROM = 256
MAX_GRID = 1024     # blocks of a chunked launch at most
EPOCH_WORDS = 4     # workspace words before the first slot (the epoch, padded)
SLOTS_PER_BLOCK = 3  # workspace slots of a chunked block: its summary, its carry, the total
REG_PER_THREAD = 8  # elements per thread of a chunked slab summed in registers
WORD = 4  # bytes per element held in shared memory (one uint32 word)


@dataclass(frozen=True)
class TileLayout:
    """What a tile-scan kernel family tells the planner about its generated code.

    ``summary_bytes``: one block-scan summary (the scratch holds one per warp plus two;
    the chunked workspace one per slab). ``slot_words``: uint32 words of one block's
    slot in the chunked workspace. ``tile_align``: a static tile is declared with a
    multiple of this many words (so summaries declared next to it need no padding).
    """

    summary_bytes: int
    slot_words: int
    tile_align: int = 1

    def tile_alloc_words(self, n: int) -> int:
        """Words a static tile of ``n`` elements is declared with."""
        return -(-tile_words(n) // self.tile_align) * self.tile_align


class PlanError(ValueError):
    """No plan can serve the request under the given limits or overrides."""


# --- shared-memory formulas (must match templates/paged_mqa_metadata.cu.j2) ---------

def tile_words(n: int) -> int:
    """Words of a tile of ``n`` elements plus its halo: element i sits at word
    ``i + i // 32`` (one spare word per 32 avoids bank conflicts), so pad(n) + 1."""
    return n + n // 32 + 1


def largest_tile(words: int) -> int:
    """The largest n with ``tile_words(n) <= words`` (-1 if none)."""
    n = max(-1, (words - 1) * 32 // 33)
    while n >= 0 and tile_words(n) > words:
        n -= 1
    while tile_words(n + 1) <= words:
        n += 1
    return n


# Each "static" figure is what the cubin's .nv.shared.<kernel> section holds: the
# arrays declared by the kernel plus the block's reserved system bytes (1 KiB on
# sm_90 and later, DeviceLimits.smem_reserved_bytes). The planner checks static +
# dynamic against the limits with the reserved bytes included.

def smem_scratch(threads: int, layout: TileLayout) -> int:
    """Bytes of the block-scan scratch: one summary per warp plus two."""
    return (threads // 32 + 2) * layout.summary_bytes


def smem_static(capacity: int, threads: int, layout: TileLayout, reserved: int) -> int:
    """Static variant: a tile of ``capacity`` elements (+ halo, padded) + scratch."""
    return layout.tile_alloc_words(capacity) * WORD + smem_scratch(threads, layout) + reserved


def smem_dynamic(batch: int, threads: int, layout: TileLayout, reserved: int
                 ) -> tuple[int, int]:
    """Dynamic variant: (static bytes, dynamic tile bytes at launch); the dynamic
    tile starts 16-byte aligned, so the static part is rounded up to 16."""
    static = smem_scratch(threads, layout) + reserved
    return -(-static // 16) * 16, tile_words(batch) * WORD


def smem_chunked(chunk: int, threads: int, layout: TileLayout, reserved: int) -> int:
    """Chunked variant: a static tile of ``chunk`` elements + scratch."""
    return layout.tile_alloc_words(chunk) * WORD + smem_scratch(threads, layout) + reserved


def chunked_grid(batch: int, chunk: int, sm_count: int, threads: int) -> int:
    """Blocks of a chunked launch: at most one per SM (a cooperative launch must fit
    at once) and one per thread of a block (each thread polls one block's slot), with
    the slabs spread so that no block is left without one."""
    slabs = -(-batch // chunk)
    per = -(-slabs // max(1, min(slabs, sm_count, threads, MAX_GRID)))
    return -(-slabs // per)


def register_slabs(chunk: int, threads: int) -> bool:
    """Whether a kernel of ``chunk``-element slabs (static: tiles) at ``threads`` threads
    reads them into registers, REG_PER_THREAD elements per thread: a static kernel then
    loads and summarizes its batch there; a chunked one sums slabs there, and so keeps
    a summary per warp and slab in its workspace."""
    return chunk == REG_PER_THREAD * threads


def slab_base(layout: TileLayout) -> int:
    """The first workspace word after the block slots: the epoch and the arrival count
    (EPOCH_WORDS words), then SLOTS_PER_BLOCK slots for each of up to MAX_GRID blocks
    (the summary it publishes; its carry-in and the grand total, handed back to it in
    the counted exchange of varlen grids of more than 32 blocks)."""
    return EPOCH_WORDS + SLOTS_PER_BLOCK * layout.slot_words * MAX_GRID


def workspace_words(batch: int, chunk: int, layout: TileLayout, threads: int = 0) -> int:
    """uint32 words of the chunked workspace: the epoch, count and block slots
    (:func:`slab_base`), one summary per slab and, when the slabs are summed in
    registers at ``threads`` threads (:func:`register_slabs`), one per warp and slab
    after them, from an even word (the kernel's layout, and why the slots never move,
    are described in its header)."""
    slabs = -(-batch // chunk)
    words = slab_base(layout) + slabs * layout.summary_bytes // WORD
    if threads and register_slabs(chunk, threads):
        words += words % 2 + slabs * (threads // 32) * layout.summary_bytes // WORD
    return words


@dataclass(frozen=True)
class CodeSpec:
    """Everything that changes the generated code (and so the cubin)."""

    variant: str
    varlen: bool
    schedule: str
    split_kv: int
    threads: int
    capacity: int  # static: tile elements; chunked: chunk elements; dynamic: 0 (run time)
    arch: str

    @property
    def name(self) -> str:
        v = "varlen" if self.varlen else "dense"
        return (f"{self.variant}_{v}_{self.schedule}_kv{self.split_kv}_t{self.threads}"
                f"_c{self.capacity}_{self.arch}")


@dataclass(frozen=True)
class Plan:
    """A variant decision for one shape, with the numbers behind it."""

    code: CodeSpec
    batch: int
    next_n: int
    num_sms: int
    grid: int
    smem_static_bytes: int
    smem_dynamic_bytes: int
    reason: str
    #: the format the call computes (its code's may be another that the same cubin
    #: serves: "sm90" runs the "smxx" cubin with a kernel argument)
    schedule: str

    @property
    def variant(self) -> str:
        return self.code.variant

    @property
    def threads(self) -> int:
        return self.code.threads

    @property
    def smem_bytes(self) -> int:
        return self.smem_static_bytes + self.smem_dynamic_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("code")
        schedule = d.pop("schedule")
        d.update(asdict(self.code))
        d["code_schedule"] = d["schedule"]
        d["schedule"] = schedule
        d["smem_bytes"] = self.smem_bytes
        d["code_name"] = self.code.name
        return d


def _bucket(batch: int) -> int:
    cap = MIN_STATIC_CAPACITY
    while cap < batch:
        cap *= 2
    return cap


def _block_size(capacity: int, threads: int, per_thread: int) -> int:
    """``capacity / per_thread`` threads, clamped to [min(256, threads), threads]."""
    return max(min(256, threads), min(threads, capacity // per_thread))


def static_threads(capacity: int, threads: int) -> int:
    """Default block size of a static bucket: an eighth of its capacity, 256 to
    ``threads``. One block is bound by the instructions it issues and by its barriers:
    on an H200, 4096 elements took 3.3 us at 512 threads against 3.7 at 1024 (dense;
    varlen 4.2 against 4.9), 1024 elements 2.8 at 256 against 3.3 at 1024, and 8192
    were equal at 512 and 1024 (the tuning table of docs/benchmarks/)."""
    return _block_size(capacity, threads, 8)


def slab_threads(capacity: int, threads: int, varlen: bool = False) -> int:
    """Default block size of a chunked slab: a quarter of its capacity, 256 to
    ``threads`` (a small block reaches its barriers sooner); from STREAM_SLAB up (varlen:
    from VARLEN_SLAB up) an eighth (REG_PER_THREAD elements per thread: the slab is
    read into registers). On an H200, 4096-element slabs one per block: 512 threads
    5.61 us at 2^19 dense against 6.75 at 1024, varlen 8.92 against 11.13."""
    regs = capacity >= (VARLEN_SLAB if varlen else STREAM_SLAB)
    return _block_size(capacity, threads, REG_PER_THREAD if regs else 4)


def _threads(limits: DeviceLimits, knobs: Knobs) -> int:
    cap = min(1024, limits.max_threads_per_block)
    threads = knobs.threads
    if threads is None:
        return min(DEFAULT_THREADS, cap // 32 * 32)
    if threads % 32 or threads > cap:
        raise PlanError(f"JITMETA_THREADS={threads} is not usable: expected a multiple "
                        f"of 32 no larger than {min(1024, limits.max_threads_per_block)}")
    return threads


def plan(batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
         schedule: str, limits: DeviceLimits, knobs: Knobs, layout: TileLayout,
         code_schedule: str | None = None) -> Plan:
    """Choose the variant and parameters for one shape.

    Honours the knobs ``variant``, ``threads``, ``chunk``, ``smem_budget`` and
    ``arch`` (JITMETA_VARIANT, ...). Never returns a plan whose shared memory exceeds
    the limits; a forced variant that cannot fit raises :class:`PlanError`.
    ``schedule`` is recorded in the plan as given (the kernel family checked it), and
    in the code unless the family gives ``code_schedule``: the format whose cubin
    serves it.
    """
    for name, value in (("batch", batch), ("next_n", next_n), ("num_sms", num_sms),
                        ("split_kv", split_kv)):
        if value < 1:
            raise PlanError(f"{name} must be >= 1; got {value}")
    arch = knobs.arch or limits.arch
    budget = knobs.smem_budget
    lim = limits.with_budget(budget)
    threads = _threads(limits, knobs)
    forced = knobs.variant
    chunk_forced = knobs.chunk
    chunk = chunk_forced or DEFAULT_CHUNK
    budget_note = f" (smem budget {budget} B)" if budget is not None else ""

    tuned = knobs.threads is None

    def own_threads(rule, capacity: int) -> int:  # a bucket's / slab's block size
        return rule(capacity, threads) if tuned else threads

    def slab_rule(capacity: int, t: int) -> int:
        return slab_threads(capacity, t, bool(varlen))

    def spec(variant: str, capacity: int, t: int = threads) -> CodeSpec:
        return CodeSpec(variant, bool(varlen), code_schedule or schedule, int(split_kv), t,
                        capacity, arch)

    rsv = lim.smem_reserved_bytes
    if chunk_forced is None:  # shrink the default tile until it fits a small budget
        while chunk > 32 and smem_chunked(chunk, threads, layout, rsv) > lim.smem_static_bytes:
            chunk //= 2

    def unforced_slab() -> int:
        """The smallest slab that still is one per block (varlen past VARLEN_SLAB_FROM
        tokens per SM: at least VARLEN_SLAB, where it is read into registers); past one
        default chunk per SM, the streaming slab (varlen; dense up to
        DENSE_STREAM_SLABS per SM) where it is summed in registers; else the default
        chunk."""
        for c in SLAB_SIZES:
            if c < chunk and batch <= lim.sm_count * c:
                if (varlen and c < VARLEN_SLAB < chunk
                        and batch > lim.sm_count * VARLEN_SLAB_FROM
                        and register_slabs(VARLEN_SLAB, own_threads(slab_rule, VARLEN_SLAB))):
                    return VARLEN_SLAB
                return c
        per_sm = -(-batch // (lim.sm_count * chunk))  # default chunks per SM, rounded up
        if (chunk > STREAM_SLAB and per_sm > 1 and (varlen or per_sm <= DENSE_STREAM_SLABS)
                and register_slabs(STREAM_SLAB, own_threads(slab_rule, STREAM_SLAB))):
            return STREAM_SLAB
        return chunk

    def make(variant: str, why: str) -> Plan | None:
        if variant == "static":
            cap = _bucket(batch)
            t = own_threads(static_threads, cap)
            smem = smem_static(cap, t, layout, rsv)
            if smem > lim.smem_static_bytes:
                return None
            return Plan(spec("static", cap, t), batch, next_n, num_sms, 1, smem, 0,
                        f"{why}: static tile of {cap} elements, {smem} B <= "
                        f"{lim.smem_static_bytes} B static limit{budget_note}", schedule)
        if variant == "dynamic":
            st, dyn = smem_dynamic(batch, threads, layout, rsv)
            if st + dyn > lim.smem_optin_bytes:
                return None
            return Plan(spec("dynamic", 0), batch, next_n, num_sms, 1, st, dyn,
                        f"{why}: dynamic tile of {batch} elements, {st + dyn} B <= "
                        f"{lim.smem_optin_bytes} B opt-in limit{budget_note}", schedule)
        slab, t = chunk, threads
        if chunk_forced is None:
            slab = unforced_slab()
            if slab != chunk:
                t = own_threads(slab_rule, slab)
        smem = smem_chunked(slab, t, layout, rsv)
        if smem > lim.smem_static_bytes:
            return None
        grid = chunked_grid(batch, slab, lim.sm_count, t)
        return Plan(spec("chunked", slab, t), batch, next_n, num_sms, grid, smem, 0,
                    f"{why}: {grid} cooperative block(s) over {-(-batch // slab)} slab(s) "
                    f"of {slab} elements, {smem} B static smem per block{budget_note}",
                    schedule)

    if forced is not None:
        p = make(forced, "forced by JITMETA_VARIANT")
        if p is None and forced == "chunked":
            raise PlanError(
                f"JITMETA_CHUNK={chunk} does not fit: the chunked tile needs "
                f"{smem_chunked(chunk, threads, layout, rsv)} B of static smem, more than "
                f"{lim.smem_static_bytes} B{budget_note}; use a smaller JITMETA_CHUNK")
        if p is None:
            raise PlanError(
                f"JITMETA_VARIANT={forced} cannot serve batch {batch} on {arch}: its "
                f"shared memory would exceed the limit (static {lim.smem_static_bytes} B,"
                f" opt-in {lim.smem_optin_bytes} B{budget_note}); unset JITMETA_VARIANT "
                "or use 'chunked', which fits any batch")
        return p
    for variant, why in (("static", "batch fits a static bucket"),
                         ("chunked", "batch too large for static smem")):
        p = make(variant, why)
        if p is not None:
            return p
    what = f"JITMETA_CHUNK={chunk}" if chunk_forced is not None else f"a chunk of {chunk}"
    raise PlanError(f"no variant fits the shared-memory limits: {what} "
                    f"with {threads} threads needs {smem_chunked(chunk, threads, layout, rsv)} B of "
                    f"static smem, more than {lim.smem_static_bytes} B{budget_note}")


def _boundaries(lo: int, hi: int, limits: DeviceLimits, threads: int, knobs: Knobs,
                layout: TileLayout) -> list[int]:
    """Batch sizes in [lo, hi] where the plan can change (the planner is monotone)."""
    points = {lo, hi}
    cap = MIN_STATIC_CAPACITY
    while cap <= hi:
        points.update((cap, cap + 1))
        cap *= 2
    # largest dynamic batch under the opt-in limit and the budget
    lim = limits.with_budget(knobs.smem_budget)
    st, _ = smem_dynamic(0, threads, layout, lim.smem_reserved_bytes)
    dyn_max = largest_tile((lim.smem_optin_bytes - st) // WORD)
    points.update((dyn_max, dyn_max + 1))
    for c in SLAB_SIZES:  # the chunked variant's slab changes there
        points.update((lim.sm_count * c, lim.sm_count * c + 1))
    # where varlen's slabs of VARLEN_SLAB start (a point more for dense, which keeps
    # its plan there: the boundaries do not depend on the mode)
    points.update((lim.sm_count * VARLEN_SLAB_FROM, lim.sm_count * VARLEN_SLAB_FROM + 1))
    for k in (1, DENSE_STREAM_SLABS):  # and where streaming slabs start and end
        points.update((k * lim.sm_count * DEFAULT_CHUNK, k * lim.sm_count * DEFAULT_CHUNK + 1))
    return sorted(p for p in points if lo <= p <= hi)


def codes_for_batches(batches: Iterable[tuple[int, int]], next_n: int, varlen: bool,
                      num_sms: int, split_kv: int, schedule: str, limits: DeviceLimits,
                      knobs: Knobs, layout: TileLayout, code_schedule: str | None = None
                      ) -> dict[CodeSpec, Plan]:
    """The distinct cubins (with one example plan each) serving batch ranges.

    ``batches`` is an iterable of inclusive ``(lo, hi)`` ranges; ``code_schedule`` as
    :func:`plan` takes it.
    """
    threads = _threads(limits, knobs)
    out: dict[CodeSpec, Plan] = {}
    for lo, hi in batches:
        for b in _boundaries(lo, hi, limits, threads, knobs, layout):
            p = plan(b, next_n, varlen, num_sms, split_kv, schedule, limits, knobs, layout,
                     code_schedule)
            out.setdefault(p.code, p)
    return out
