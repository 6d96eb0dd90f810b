"""Kernel family: the paged-MQA-logits schedule in the atom formats ("smxx", "sm90"),
and the machinery the tile-scan schedule families share.

Everything specific to a family lives in its :class:`TileScheduleFamily` value: its
format header, the layout the planner needs (``layout``), the render parameters
(``source``), the kernel arguments and launch geometry (``call`` ->
:class:`ScheduleCall`), its workspace needs (``workspace_words``) and the command that
warms one of its cubins (``warm_command``). The semantics of the formats are described
in ``docs/schedule.md``; the design of the kernels in the headers' comments.

Kernel signature (every variant)::

    jitmeta_emit(const int* context_lens, const int* indices, u32 batch, u32 next_n,
                 u32 num_sms, u32 wide_last, int* out, u32* ws)

``wide_last`` (1 for "sm90", else 0) puts the SMs that take one unit more last, so one
cubin serves both atom formats (they differ in nothing else).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace

from ..envs import Knobs
from ..heuristics.arch import DeviceLimits
from ..heuristics.plan import (EPOCH_WORDS, MAX_GRID, CodeSpec, Plan, TileLayout,
                               register_slabs, slab_base,
                               codes_for_batches as _codes, plan as _plan, smem_scratch,
                               workspace_words as _ws_words)
from ..jit.source import POINTER, UINT32, KernelSource

__all__ = ["TileScheduleFamily", "FAMILY", "TEMPLATE", "ENGINE_HEADER", "KERNEL",
           "ARG_TYPES", "ScheduleCall"]

TEMPLATE = "paged_mqa_metadata.cu.j2"
ENGINE_HEADER = "jitmeta_engine.cuh"
KERNEL = "jitmeta_emit"
ARG_TYPES = (POINTER, POINTER, UINT32, UINT32, UINT32, UINT32, POINTER, POINTER)


@dataclass(frozen=True)
class TileScheduleFamily:
    """A schedule family built on the shared tile-scan engine (``jitmeta_engine.cuh``).

    Each family contributes a format header (its summary, its rows), the C++ type the
    stub instantiates and the layout numbers the planner needs; everything else (the
    stub, the planner, the launch) is shared. ``FAMILY`` below is the atom formats;
    ``paged_mqa_sm100.FAMILY`` the token format.
    """

    name: str
    schedules: tuple[str, ...]
    header: str
    rows_are_tokens: bool
    #: (schedule, varlen) -> TileLayout
    layouts: dict = field(hash=False, compare=False)
    #: (schedule, varlen, threads, split_kv) -> the C++ format type
    format_type: object = field(hash=False, compare=False)
    #: schedule -> the schedule whose cubin serves it (itself unless listed), and the
    #: schedules whose calls pass wide_last = 1
    served_by: dict = field(default_factory=dict, hash=False, compare=False)
    wide_last: frozenset = frozenset()

    def code_schedule(self, schedule: str) -> str:
        """The schedule a cubin serving ``schedule`` is generated for."""
        return self.served_by.get(schedule, schedule)

    def kernel_code(self, code: CodeSpec) -> CodeSpec:
        """``code`` as this version generates it (a code of a schedule another one's
        cubin serves, e.g. read from an older miss manifest, becomes that one's)."""
        target = self.code_schedule(code.schedule)
        return code if target == code.schedule else replace(code, schedule=target)

    def layout(self, schedule: str, varlen: bool) -> TileLayout:
        return self.layouts[bool(varlen)]

    def plan(self, batch: int, next_n: int, varlen: bool, num_sms: int, split_kv: int,
             schedule: str, limits: DeviceLimits, knobs: Knobs) -> Plan:
        """The planner's decision for one shape of this family."""
        return _plan(batch, next_n, varlen, num_sms, split_kv, schedule, limits, knobs,
                     self.layout(schedule, varlen), self.code_schedule(schedule))

    def codes_for_batches(self, batches, next_n: int, varlen: bool, num_sms: int,
                          split_kv: int, schedule: str, limits: DeviceLimits, knobs: Knobs
                          ) -> dict[CodeSpec, Plan]:
        return _codes(batches, next_n, varlen, num_sms, split_kv, schedule, limits, knobs,
                      self.layout(schedule, varlen), self.code_schedule(schedule))

    def source(self, code: CodeSpec) -> KernelSource:
        """The cubin inputs of ``code``. Besides what shapes the kernel, the parameters
        carry the numbers the planner assumed about it; the stub checks
        them, so a mismatch fails to compile instead of computing garbage."""
        code = self.kernel_code(code)
        lay = self.layout(code.schedule, code.varlen)
        params = {
            "code_name": code.name, "variant": code.variant, "varlen": code.varlen,
            "schedule": code.schedule, "split_kv": code.split_kv, "threads": code.threads,
            "capacity": code.capacity, "rows_are_tokens": self.rows_are_tokens,
            "format_type": self.format_type(code),
            # checked against the kernel by static_assert
            "summary_bytes": lay.summary_bytes,
            "scratch_bytes": smem_scratch(code.threads, lay),
            "slot_words": lay.slot_words, "max_grid": MAX_GRID,
            "epoch_words": EPOCH_WORDS, "slab_base": slab_base(lay),
            "tile_words": lay.tile_alloc_words(code.capacity),
            # (a dynamic code has capacity 0: never register slabs)
            "register_slabs": register_slabs(code.capacity, code.threads),
        }
        describe = {k: getattr(code, k) for k in code.__dataclass_fields__}
        return KernelSource.make(family=self.name, name=code.name, template=TEMPLATE,
                                 params=params, kernels=(KERNEL,), arch=code.arch,
                                 headers=(ENGINE_HEADER, self.header), describe=describe)

    def workspace_words(self, p: Plan) -> int:
        """Workspace words a call of ``p`` needs (0 unless chunked)."""
        if p.variant != "chunked":
            return 0
        return _ws_words(p.batch, p.code.capacity,
                         self.layout(p.code.schedule, p.code.varlen), p.code.threads)

    @staticmethod
    def max_dynamic_smem(p: Plan, limits: DeviceLimits) -> int:
        """The dynamic shared memory a loaded function must be allowed (dynamic)."""
        if p.variant != "dynamic":
            return 0
        return limits.smem_optin_bytes - p.smem_static_bytes

    def call(self, device: int, p: Plan, function: object) -> "ScheduleCall":
        """The loaded call of ``p`` (arguments in the kernel's order, launch geometry)."""
        from ..jit import runtime  # the driver is needed only to launch
        from ..jit.launcher import Launch

        # the C launcher takes the function as its address: no conversion per call
        fn = int(function) if runtime.c_launcher() else function
        return ScheduleCall(p, Launch(device, fn, p.grid, p.threads,
                                      p.smem_dynamic_bytes, p.variant == "chunked",
                                      ARG_TYPES), self.workspace_words(p),
                            int(p.schedule in self.wide_last))

    @staticmethod
    def warm_command(p: Plan, knobs: Knobs, cache_dir=None) -> str:
        return warm_command(p, knobs, cache_dir)


def _atom_format(code: CodeSpec) -> str:
    return f"jitmeta::Schedule<{code.threads}, {code.split_kv}u, {str(code.varlen).lower()}>"


#: The atom formats: rows are (q_atom_idx, kv_split_idx), uint32 work.
FAMILY = TileScheduleFamily(
    name="paged_mqa_schedule", schedules=("smxx", "sm90"), header="jitmeta_schedule.cuh",
    rows_are_tokens=False,
    # dense: a summary is one uint32 sum; varlen: two sums and two parities. A slot
    # holds one tagged 64-bit word per 32-bit summary field.
    layouts={False: TileLayout(summary_bytes=4, slot_words=8),
             True: TileLayout(summary_bytes=16, slot_words=8)},
    format_type=_atom_format,
    # "sm90" differs from "smxx" only in where the remainder's SMs go: a kernel argument
    served_by={"sm90": "smxx"}, wide_last=frozenset({"sm90"}))


_runtime = None  # jitmeta.jit.runtime, imported when the first call is built


@dataclass(frozen=True)
class ScheduleCall:
    """One planned shape, loaded: everything a call needs after the first one.

    Calling it packs the arguments in the kernel's order and launches; the caller has
    made the device's context current and chosen the stream and the workspace.
    """

    plan: Plan
    launch: "Launch"
    ws_words: int
    wide_last: int = 0  # the kernel argument (1: the remainder's SMs last, "sm90")
    # derived from ``plan`` (one shape): what the hot path reads without a lookup
    device: int = field(init=False, repr=False)
    batch: int = field(init=False, repr=False)
    next_n: int = field(init=False, repr=False)
    num_sms: int = field(init=False, repr=False)
    out_shape: tuple[int, int] = field(init=False, repr=False)
    # a plain launch: (function, grid, threads, smem), or None for a cooperative one
    # (which goes through Launch and its grid retry)
    direct: tuple | None = field(init=False, repr=False)

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "device", self.launch.device)
        set_(self, "batch", self.plan.batch)
        set_(self, "next_n", self.plan.next_n)
        set_(self, "num_sms", self.plan.num_sms)
        set_(self, "out_shape", (self.plan.num_sms + 1, 2))
        global _runtime
        if _runtime is None:
            from ..jit import runtime  # loaded by now (the call was just built)

            _runtime = runtime
        lc = self.launch
        set_(self, "direct", None if lc.cooperative
             else (lc.function, lc.grid, lc.threads, lc.smem))

    def __call__(self, ctx_ptr: int, idx_ptr: int, out_ptr: int, stream: int,
                 ws_ptr: int, pdl: bool) -> None:
        args = (ctx_ptr, idx_ptr, self.batch, self.next_n, self.num_sms, self.wide_last,
                out_ptr, ws_ptr)
        direct = self.direct
        if direct is None:
            self.launch(args, stream, pdl)
            return
        fn, grid, threads, smem = direct
        _runtime.launch(fn, grid, threads, smem, stream, args, ARG_TYPES, pdl)


def warm_command(p: Plan, knobs: Knobs, cache_dir=None) -> str:
    """The ``jitmeta-cache warm`` command that produces ``p``'s cubin.

    Planner and compiler knobs in effect are prefixed as environment assignments;
    ``cache_dir`` adds ``--cache-dir`` so that the command fills that exact cache.
    """
    c = p.code
    env = [f"{name}={value}" for name, value in (
        ("JITMETA_VARIANT", knobs.variant), ("JITMETA_THREADS", knobs.threads),
        ("JITMETA_CHUNK", knobs.chunk), ("JITMETA_SMEM_BUDGET", knobs.smem_budget))
        if value is not None]
    if knobs.nvrtc_flags:
        env.append("JITMETA_NVRTC_FLAGS=" + shlex.quote(" ".join(knobs.nvrtc_flags)))
    cmd = ["jitmeta-cache"]
    if cache_dir is not None:
        cmd += ["--cache-dir", shlex.quote(str(cache_dir))]
    cmd += ["warm", "--arch", c.arch, "--num-sms", str(p.num_sms), "--batch",
            str(p.batch), "--next-n", str(p.next_n), "--varlen",
            "yes" if c.varlen else "no", "--format", p.schedule, "--split-kv",
            str(c.split_kv)]
    return " ".join(env + cmd)


def describe_plan(p: Plan) -> str:
    """The configuration in words (for error messages)."""
    c = p.code
    return (f"{c.name} (batch {p.batch}, next_n {p.next_n}, "
            f"{'varlen' if c.varlen else 'non-varlen'}, {p.num_sms} SMs, format "
            f"{p.schedule}, split_kv {c.split_kv}, {c.arch})")

