"""Render (Jinja2) and compile (NVRTC -> cubin) every variant, on the CPU.

NVRTC runs without a GPU, so these tests produce real cubins and read their shared
memory and kernel symbols straight out of the ELF (``jitmeta.jit.cubin_info``). The
compiled set is a representative ~20 configurations: every variant (static buckets,
dynamic, chunked) x varlen or not x both schedule formats, spread over sm_90, sm_100
and sm_90a.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys

import jinja2
import jinja2.meta
import pytest

from jitmeta import envs
from jitmeta.heuristics.arch import limits_for_arch
from jitmeta.heuristics.plan import CodeSpec, Plan, plan
from jitmeta.impls import render as render_mod
from jitmeta.impls.render import TEMPLATE, kernel_names, render
from jitmeta.jit.compiler import CompileError, CompileOptions, compile_cubin
from jitmeta.jit.cubin_info import kernel_resources

STATIC_LIMIT = 48 * 1024
EM_CUDA = 190
RENDER_VARS = {"code_name", "variant", "varlen", "schedule", "split_kv", "threads",
               "capacity"}

# (id, arch, batch, varlen, schedule, split_kv, knobs, expected (variant, capacity))
CASES = [
    ("sm90-static1024-dense-smxx", "sm_90", 1000, False, "smxx", 256, {}, ("static", 1024)),
    ("sm90-static1024-varlen-sm90", "sm_90", 1, True, "sm90", 256, {}, ("static", 1024)),
    ("sm90-static2048-dense-kv64", "sm_90", 2000, False, "smxx", 64, {}, ("static", 2048)),
    ("sm90-static8192-dense-sm90", "sm_90", 8192, False, "sm90", 256, {}, ("static", 8192)),
    ("sm90-static8192-varlen-smxx", "sm_90", 8192, True, "smxx", 256, {}, ("static", 8192)),
    ("sm90-dynamic-dense-smxx", "sm_90", 8193, False, "smxx", 256, {}, ("dynamic", 0)),
    ("sm90-dynamic-varlen-sm90", "sm_90", 57719, True, "sm90", 256, {}, ("dynamic", 0)),
    ("sm90-chunked-dense-sm90", "sm_90", 57820, False, "sm90", 256, {}, ("chunked", 8192)),
    ("sm90-chunked-varlen-smxx", "sm_90", 57720, True, "smxx", 256, {}, ("chunked", 8192)),
    ("sm90-chunked-varlen-sm90-t128-c2048", "sm_90", 2**24, True, "sm90", 256,
     {"JITMETA_THREADS": 128, "JITMETA_CHUNK": 2048}, ("chunked", 2048)),
    ("sm100-static2048-dense-sm90", "sm_100", 2000, False, "sm90", 256, {}, ("static", 2048)),
    ("sm100-static8192-varlen-smxx", "sm_100", 8000, True, "smxx", 256, {}, ("static", 8192)),
    ("sm100-dynamic-varlen-smxx", "sm_100", 30000, True, "smxx", 256, {}, ("dynamic", 0)),
    ("sm100-dynamic-dense-sm90", "sm_100", 30000, False, "sm90", 256, {}, ("dynamic", 0)),
    ("sm100-chunked-dense-sm90", "sm_100", 10**6, False, "sm90", 256, {}, ("chunked", 8192)),
    ("sm100-chunked-varlen-smxx", "sm_100", 10**6, True, "smxx", 256, {}, ("chunked", 8192)),
    ("sm90a-static4096-varlen-sm90", "sm_90a", 4000, True, "sm90", 256, {}, ("static", 4096)),
    ("sm90a-dynamic-dense-smxx-t256", "sm_90a", 20000, False, "smxx", 256,
     {"JITMETA_THREADS": 256}, ("dynamic", 0)),
    ("sm90a-chunked-varlen-sm90", "sm_90a", 10**5, True, "sm90", 256, {}, ("chunked", 8192)),
    ("sm90a-chunked-dense-smxx-c1024", "sm_90a", 10**5, False, "smxx", 512,
     {"JITMETA_CHUNK": 1024}, ("chunked", 1024)),
]


def _plan_case(case) -> Plan:
    _, arch, batch, varlen, schedule, split_kv, knobs, _ = case
    with envs.override(**knobs):
        return plan(batch, 1, varlen, 132, split_kv, schedule, limits_for_arch(arch))


_cubins: dict[CodeSpec, bytes] = {}


def _cubin(code: CodeSpec) -> bytes:
    if code not in _cubins:
        _cubins[code] = compile_cubin(render(code), CompileOptions(arch=code.arch)).cubin
    return _cubins[code]


def _elf_sections(blob: bytes) -> list[str]:
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    hdr = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize)
           for i in range(shnum)]
    str_off, str_size = hdr[shstrndx][4], hdr[shstrndx][5]
    strtab = blob[str_off:str_off + str_size]
    return [strtab[h[0]:strtab.index(b"\0", h[0])].decode() for h in hdr]


def _elf_symbols(blob: bytes) -> set[str]:
    """Names in the ELF symbol table (.symtab + its .strtab)."""
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", blob, 0x3A)
    hdr = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize)
           for i in range(shnum)]
    symtab = next(h for h in hdr if h[1] == 2)  # SHT_SYMTAB
    strtab = hdr[symtab[6]]  # sh_link -> string table
    strings = blob[strtab[4]:strtab[4] + strtab[5]]
    names = set()
    for off in range(symtab[4], symtab[4] + symtab[5], 24):
        st_name, = struct.unpack_from("<I", blob, off)
        names.add(strings[st_name:strings.index(b"\0", st_name)].decode())
    return names


def _elf_sm(blob: bytes) -> int:
    """The SM number a CUDA ELF targets, from e_flags (layout depends on the ABI)."""
    e_flags, = struct.unpack_from("<I", blob, 0x30)
    return (e_flags >> 8) & 0xFF if blob[8] >= 8 else e_flags & 0xFF


# --- rendering ---------------------------------------------------------------------------

def _all_codes() -> list[CodeSpec]:
    return [_plan_case(c).code for c in CASES]


def test_render_is_deterministic_in_process():
    for code in _all_codes():
        first = render_mod.render.__wrapped__(code)  # bypass the lru_cache
        second = render_mod.render.__wrapped__(code)
        assert first == second and first.encode() == render(code).encode(), code.name


def test_render_is_deterministic_in_fresh_subprocess(tmp_path):
    codes = _all_codes()
    here = {c.name: hashlib.sha256(render(c).encode()).hexdigest() for c in codes}
    specs = [c.__dict__ for c in codes]
    script = (
        "import hashlib, json, sys\n"
        "from jitmeta.heuristics.plan import CodeSpec\n"
        "from jitmeta.impls.render import render\n"
        "specs = json.loads(sys.stdin.read())\n"
        "print(json.dumps({CodeSpec(**s).name: hashlib.sha256(render(CodeSpec(**s))"
        ".encode()).hexdigest() for s in specs}))\n")
    env = dict(os.environ, PYTHONHASHSEED="4242")
    res = subprocess.run([sys.executable, "-c", script], input=json.dumps(specs),
                         capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == here


def test_different_specs_render_differently():
    sources = {render(c) for c in _all_codes()}
    assert len(sources) == len({c for c in _all_codes()})


def test_rendered_source_is_self_contained():
    for code in _all_codes():
        src = render(code)
        assert not re.search(r"^\s*#\s*include\s*<", src, re.M), \
            f"{code.name}: system header include (NVRTC has none)"
        assert not re.search(r"^\s*#\s*include\b", src, re.M), \
            f"{code.name}: the source must not include any file"
        assert "{{" not in src and "{%" not in src, f"{code.name}: unrendered Jinja"
        for name in kernel_names(code):
            assert re.search(rf'extern "C" __global__ void[^;{{}}]*?\b{name}\(', src), \
                (code.name, name)
        assert f"__launch_bounds__({code.threads})" in src
        assert f"{code.split_kv}u" in src


def test_environment_uses_strict_undefined():
    env = render_mod._environment()
    assert env.undefined is jinja2.StrictUndefined


def test_template_variables_are_exactly_the_rendered_ones():
    env = render_mod._environment()
    used = set()
    for name in (TEMPLATE, "jitmeta_schedule.cuh"):
        source, _, _ = env.loader.get_source(env, name)
        used |= jinja2.meta.find_undeclared_variables(env.parse(source))
    assert used == RENDER_VARS


@pytest.mark.parametrize("missing", sorted(RENDER_VARS))
def test_missing_template_variable_raises(missing):
    code = _plan_case(CASES[7]).code  # chunked: every variable is used
    values = {"code_name": code.name, "variant": code.variant, "varlen": code.varlen,
              "schedule": code.schedule, "split_kv": code.split_kv,
              "threads": code.threads, "capacity": code.capacity}
    template = render_mod._environment().get_template(TEMPLATE)
    assert template.render(**values) == render(code)
    del values[missing]
    with pytest.raises(jinja2.UndefinedError, match=missing):
        template.render(**values)


def test_misspelled_variable_in_a_template_raises():
    env = render_mod._environment()
    with pytest.raises(jinja2.UndefinedError, match="capacty"):
        env.from_string("__shared__ u32 tile[{{ capacty }} + 1];").render(capacity=8)


# --- compiling ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_variant_compiles_to_cubin(case):
    p = _plan_case(case)
    code = p.code
    assert (code.variant, code.capacity) == case[7]
    assert code.arch == case[1]
    cubin = _cubin(code)
    # an ELF64 little-endian CUDA executable for the exact SM, not PTX
    assert cubin[:4] == b"\x7fELF" and cubin[4] == 2 and cubin[5] == 1
    assert struct.unpack_from("<H", cubin, 0x12)[0] == EM_CUDA
    assert _elf_sm(cubin) == int(re.match(r"sm_(\d+)", code.arch).group(1))
    # extern "C" kernels: plain, unmangled symbol names
    want = {"jitmeta_emit", "jitmeta_summarize"} if code.variant == "chunked" \
        else {"jitmeta_emit"}
    assert set(kernel_names(code)) == want
    texts = {s[len(".text."):] for s in _elf_sections(cubin) if s.startswith(".text.")}
    assert texts == want
    assert want <= _elf_symbols(cubin)
    # static shared memory: within 48 KiB, and exactly the planner's formula
    for kernel in sorted(want):
        res = kernel_resources(cubin, kernel)
        assert res["static_smem_bytes"] <= STATIC_LIMIT, (kernel, res)
        assert res["static_smem_bytes"] == p.smem_static_bytes, (kernel, res, p.reason)
        assert 0 < res["registers"] <= 255, (kernel, res)
    if code.variant == "dynamic":
        lim = limits_for_arch(code.arch)
        assert p.smem_static_bytes + p.smem_dynamic_bytes <= lim.smem_optin_bytes


def test_static_variant_at_largest_bucket_fits_48k():
    """The upstream failure: batch 8192 in static smem. Here it is 33932 B / 34340 B."""
    for varlen, want in ((False, 33932), (True, 34340)):
        p = plan(8192, 1, varlen, 132, 256, "smxx", limits_for_arch("sm_90"))
        res = kernel_resources(_cubin(p.code), "jitmeta_emit")
        assert res["static_smem_bytes"] == p.smem_static_bytes == want


def test_registers_are_read_for_pre_hopper_cubins():
    """cubin_info must report registers for every arch in the table (sm_80 included)."""
    p = plan(100, 1, False, 108, 256, "smxx", limits_for_arch("sm_80"))
    cubin = _cubin(p.code)
    res = kernel_resources(cubin, "jitmeta_emit")
    assert res["static_smem_bytes"] == p.smem_static_bytes == 4236  # no reserved bytes
    assert res["registers"] > 0, res


def test_unknown_kernel_name_raises():
    p = _plan_case(CASES[0])
    with pytest.raises(KeyError, match="jitmeta_summarize"):
        kernel_resources(_cubin(p.code), "jitmeta_summarize")


def test_compile_options_flag_list():
    opts = CompileOptions(arch="sm_90a")
    assert opts.as_bytes() == [b"--gpu-architecture=sm_90a", b"--std=c++17", b"-DNDEBUG"]
    with envs.override(JITMETA_NVRTC_FLAGS="-lineinfo '-DFOO=a b'"):
        extra = CompileOptions.for_arch("sm_100")
    assert extra.as_bytes()[-2:] == [b"-lineinfo", b"-DFOO=a b"]
    assert CompileOptions.for_arch("sm_100") != extra


BROKEN = """extern "C" __global__ void jitmeta_emit(int* out) {
    int ok = 1;
    out[0] = ok + jitmeta_no_such_symbol;
}
"""


def test_broken_source_raises_compile_error_with_log_and_numbered_source():
    with pytest.raises(CompileError) as info:
        compile_cubin(BROKEN, CompileOptions(arch="sm_90"))
    exc = info.value
    msg = str(exc)
    assert "jitmeta_no_such_symbol" in exc.log and "error" in exc.log.lower()
    assert exc.source == BROKEN
    assert "sm_90" in msg
    assert "--- NVRTC log ---" in msg and exc.log in msg
    assert "--- rendered source ---" in msg
    assert "    3 |     out[0] = ok + jitmeta_no_such_symbol;" in msg
    assert "    1 | extern \"C\"" in msg


def test_broken_rendered_source_raises_compile_error():
    code = _plan_case(CASES[0]).code
    src = render(code).replace("__syncthreads();", "__syncthreads()", 1)
    with pytest.raises(CompileError) as info:
        compile_cubin(src, CompileOptions(arch="sm_90"))
    assert info.value.log and "error" in info.value.log.lower()
    lines = src.splitlines()
    assert f"{len(lines):5d} | {lines[-1]}" in str(info.value)
