"""Format "sm100": render and compile (NVRTC -> cubin) every variant, on the CPU; the
constants Python and CUDA share are checked by the compiler.

Shared memory (.nv.shared of the cubin) must equal the planner's formula: for sm100 the
tile is declared with an even number of words (its 8-byte summaries share the block's
shared memory, so no alignment padding can appear whatever order the compiler picks)
and a summary is 8 B (dense: the 64-bit work sum) or 16 B (varlen: a 64-bit sum, the
segs of the leading run end and the last boundary).
"""

from __future__ import annotations

import re

import pytest

from jitmeta import kernels
from jitmeta.envs import Knobs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.heuristics.plan import (MAX_GRID, smem_chunked, smem_dynamic, smem_static,
                                     tile_words, workspace_words)
from jitmeta.jit import render as render_mod
from jitmeta.jit.compiler import CompileError, CompileOptions, compile_cubin
from jitmeta.jit.cubin_info import kernel_resources
from jitmeta.jit.source import KernelSource
from jitmeta.kernels import codes_for_batches, plan


def render(code):
    return render_mod.render(kernels.source(code))


def _lay(schedule, varlen):
    return kernels.layout(schedule, varlen)

# (arch, batch, varlen, knobs) -> one plan per variant and mode, with the figures worked
# out by hand (reserved 1024 B per block on both archs)
CASES = [
    # tile_words(1024) = 1057 -> 1058 words; scratch (256 / 32 + 2) * 8 = 80
    ("sm_90", 1000, False, {}, ("static", 1024, 256), (1058 * 4 + 80 + 1024, 0)),
    # scratch 10 * 16 = 160
    ("sm_90", 1000, True, {}, ("static", 1024, 256), (1058 * 4 + 160 + 1024, 0)),
    # tile_words(8192) = 8449 -> 8450; scratch 34 * 16 = 544: 35368 B <= 48 KiB
    ("sm_90", 8192, True, {}, ("static", 8192, 1024), (8450 * 4 + 544 + 1024, 0)),
    # dynamic: ceil16(34 * 8 + 1024) = 1296; tile_words(9000) = 9282 words
    ("sm_90", 9000, False, {"JITMETA_VARIANT": "dynamic"}, ("dynamic", 0, 1024),
     (1296, 9282 * 4)),
    # ceil16(34 * 16 + 1024) = 1568
    ("sm_100", 9000, True, {"JITMETA_VARIANT": "dynamic"}, ("dynamic", 0, 1024),
     (1568, 9282 * 4)),
    # chunked slabs of 1024 at 256 threads (batch <= 132 * 1024; varlen <= 132 * 256)
    ("sm_100", 10**5, False, {}, ("chunked", 1024, 256), (1058 * 4 + 80 + 1024, 0)),
    ("sm_90", 30000, True, {}, ("chunked", 1024, 256), (1058 * 4 + 160 + 1024, 0)),
    # varlen past 132 * 256: slabs of 2048 at 256 threads (tile_words(2048) = 2113 -> 2114)
    ("sm_90", 10**5, True, {}, ("chunked", 2048, 256), (2114 * 4 + 160 + 1024, 0)),
    # 2^24 tokens: varlen, streaming slabs of 4096 at 512 threads (tile_words(4096) =
    # 4225 -> 4226; scratch 18 * 16 = 288); dense, slabs of 8192 at 1024 threads
    ("sm_100", 2**24, True, {}, ("chunked", 4096, 512), (4226 * 4 + 288 + 1024, 0)),
    ("sm_100", 2**24, False, {}, ("chunked", 8192, 1024), (8450 * 4 + 272 + 1024, 0)),
    # an odd tile: tile_words(100) = 104 words (even already); tile_words(32) = 34
    ("sm_90", 10**4, True, {"JITMETA_CHUNK": 100, "JITMETA_THREADS": 64},
     ("chunked", 100, 64), (104 * 4 + 4 * 16 + 1024, 0)),
    ("sm_90", 10**4, False, {"JITMETA_CHUNK": 33, "JITMETA_THREADS": 64},
     ("chunked", 33, 64), (36 * 4 + 4 * 8 + 1024, 0)),
]


def _plan(case):
    arch, batch, varlen, knobs, *_ = case
    # a snapshot built by hand: odd chunks the environment would refuse still exercise
    # the kernel's tile arithmetic
    given = Knobs(**{name[len("JITMETA_"):].lower(): v for name, v in knobs.items()})
    return plan(batch, 1, varlen, 132, 256, "sm100", limits_for_arch(arch), given)


def test_sm100_figures():
    dense, varlen = _lay("sm100", False), _lay("sm100", True)
    assert (dense.summary_bytes, varlen.summary_bytes) == (8, 16)
    assert (dense.slot_words, varlen.slot_words) == (8, 8)
    assert (_lay("smxx", False).slot_words, _lay("sm90", True).slot_words) == (8, 8)
    assert varlen.tile_alloc_words(1024) == 1058
    assert _lay("smxx", True).tile_alloc_words(1024) == 1057
    assert varlen.tile_alloc_words(100) == tile_words(100) == 104
    assert smem_static(1024, 256, varlen, 1024) == 1058 * 4 + 160 + 1024
    assert smem_chunked(8192, 1024, dense, 0) == 8450 * 4 + 34 * 8
    assert smem_dynamic(1, 1024, varlen, 1024) == (1568, 8)
    # the epoch and count, 3 slots of 8 words for each of 1024 blocks, 4 slabs of 4 words
    assert workspace_words(4 * 8192, 8192, varlen) == 4 + 3 * 8 * 1024 + 4 * 4
    assert workspace_words(8193, 8192, dense) == 4 + 3 * 8 * 1024 + 2 * 2


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[4][0]}-{c[1]}-"
                         f"{'varlen' if c[2] else 'dense'}-c{c[4][1]}")
def test_sm100_variant_compiles_to_cubin(case):
    p = _plan(case)
    code = p.code
    assert code.schedule == "sm100"
    assert (code.variant, code.capacity, code.threads) == case[4], p.reason
    assert (p.smem_static_bytes, p.smem_dynamic_bytes) == case[5], p.reason
    src = render(code)
    assert f"Sm100<{code.threads}, {code.split_kv}u, {str(code.varlen).lower()}>" in src
    assert "griddepcontrol.wait" in src and "Schedule<" not in src
    cubin = compile_cubin(src, CompileOptions(arch=code.arch)).cubin
    assert cubin[:4] == b"\x7fELF"
    res = kernel_resources(cubin, "jitmeta_emit")
    assert res["static_smem_bytes"] == p.smem_static_bytes, (res, p.reason)
    assert 0 < res["registers"] <= 255


def test_sm100_source_has_no_serial_loop_over_the_batch():
    """Runs come from the scan: no loop in the sm100 header runs up to `batch`."""
    src = render(_plan(CASES[1]).code)
    body = src[src.index("struct Sm100 {"):]
    assert not re.search(r"for \([^;]*;[^;]*<\s*batch\b", body)


def test_sm100_cubins_for_every_batch():
    """Batch 1..2^24 on sm_90 with 132 SMs: 8 cubins per (mode, split_kv), whatever
    next_n (static buckets 1024..8192, chunked slabs 1024..8192)."""
    lim = limits_for_arch("sm_90", 132)
    for varlen in (False, True):
        for split_kv in (64, 256):
            codes = codes_for_batches([(1, 2**24)], 1, varlen, 132, split_kv, "sm100", lim)
            assert len(codes) == 8
            assert {c.schedule for c in codes} == {"sm100"}
            assert {(c.variant, c.capacity) for c in codes} == {
                (v, cap) for v in ("static", "chunked") for cap in (1024, 2048, 4096, 8192)}
            if not varlen:
                more = codes_for_batches([(1, 2**24)], 3, False, 132, split_kv, "sm100", lim)
                assert set(more) == set(codes)


@pytest.mark.parametrize("param,wrong,message", [
    ("summary_bytes", 24, "scan summary size"),
    ("scratch_bytes", 16, "block-scan scratch"),
    ("slot_words", 16, "chunked workspace layout"),
    ("max_grid", 512, "chunked workspace layout"),
    ("epoch_words", 8, "chunked workspace layout"),
    ("tile_words", 1057, "tile size"),
])
def test_mismatched_python_constant_fails_to_compile(param, wrong, message):
    """A planner figure that is not the kernel's is a compile error, not a wrong launch."""
    code = _plan(CASES[6]).code  # chunked varlen: 16-byte summaries, 8-word slots
    source = kernels.source(code)
    params = dict(source.params)
    assert params[param] != wrong
    good = render(code)
    compile_cubin(good, CompileOptions(arch="sm_90"))
    broken = KernelSource.make(family=source.family, name=source.name,
                               template=source.template, params={**params, param: wrong},
                               kernels=source.kernels, arch=source.arch,
                               headers=source.headers)
    bad = render_mod.render(broken)
    with pytest.raises(CompileError) as info:
        compile_cubin(bad, CompileOptions(arch="sm_90"))
    assert message in info.value.log, info.value.log


def test_smxx_slots_and_grid_are_unchanged():
    """The shared engine keeps the smxx/sm90 workspace: 8-word slots (three per block),
    1024 blocks."""
    p = plan(10**5, 1, True, 132, 256, "smxx", limits_for_arch("sm_90"))
    params = dict(kernels.source(p.code).params)
    assert (params["slot_words"], params["max_grid"], params["summary_bytes"]) \
        == (8, MAX_GRID, 16)
    assert params["slab_base"] == 4 + 3 * 8 * 1024
    assert workspace_words(10**5, 1024, _lay("smxx", True)) == 4 + 3 * 8 * 1024 + 98 * 4
