"""Floors for the benchmark: an empty kernel, and the "touch" kernel.

The touch kernel is the cheapest kernel that does the schedule kernel's memory work:
it reads every input word once (16-byte loads, grid-stride) and writes the
``[num_sms + 1, 2]`` int32 output. No scan, no search, no exchange between blocks.
A schedule kernel's time divided by it says how far the kernel is from the cost of
merely touching its bytes at that batch. Its best launch shape depends on the batch,
so :func:`candidates` lists a few block sizes and grids to try; the benchmark keeps
the fastest.

Compiled with NVRTC and launched through cuda.bindings (jitmeta.jit.compiler,
jitmeta.jit.runtime), the way jitmeta's own kernels are.
"""

from __future__ import annotations

EMPTY_NAME = "jitmeta_bench_empty"
TOUCH_NAME = "jitmeta_bench_touch"

# the signature of jitmeta's emit kernel, so the empty launch packs the same arguments
EMPTY_SRC = r'''
extern "C" __global__ void jitmeta_bench_empty(const int* a, const int* b, unsigned c,
                                               unsigned d, unsigned e, unsigned f, int* g,
                                               const void* h) {}
'''

TOUCH_SRC = r'''
// Reads a[0, na) and b[0, nb) once (int4 loads, grid-stride; a word tail of na % 4
// read one word per thread) and writes out[0, out_words). Every load feeds the
// stored value, so none can be dropped; a, b (and their word tails) must be 16-byte
// aligned, which the host checks.
extern "C" __global__ void jitmeta_bench_touch(const int* __restrict__ a, unsigned na,
                                               const int* __restrict__ b, unsigned nb,
                                               int* __restrict__ out, unsigned out_words) {
    const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned stride = gridDim.x * blockDim.x;
    const int4* a4 = reinterpret_cast<const int4*>(a);
    const int4* b4 = reinterpret_cast<const int4*>(b);
    const unsigned na4 = na >> 2, nb4 = nb >> 2;
    int acc = 0;
    for (unsigned i = tid; i < na4; i += stride) {
        const int4 v = a4[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    for (unsigned i = tid; i < nb4; i += stride) {
        const int4 v = b4[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (tid < (na & 3u)) acc ^= a[(na4 << 2) + tid];
    if (tid < (nb & 3u)) acc ^= b[(nb4 << 2) + tid];
    for (unsigned w = tid; w < out_words; w += stride) out[w] = acc;
    if (tid >= out_words && acc == 0x7fffffff) out[0] = acc;  // keeps the other loads
}
'''

THREADS = (256, 1024)


def candidates(words: tuple[int, int], num_sms: int) -> list[tuple[int, int]]:
    """(threads, grid) launch shapes to try for inputs of ``words`` = (na, nb) int32.

    Grids of 1 block, 1, 2, 4 and 8 blocks per SM, and one 16-byte load per thread
    (``need``), none larger than ``need``; block sizes of :data:`THREADS`.
    """
    na, nb = words
    if na < 0 or nb < 0:
        raise ValueError(f"words must be two counts >= 0; got {words!r}")
    vectors = max(na // 4, nb // 4, 1)
    out = []
    for threads in THREADS:
        need = -(-vectors // threads)
        grids = {min(g, need) for g in (1, num_sms, 2 * num_sms, 4 * num_sms,
                                          8 * num_sms, need)}
        out += [(threads, g) for g in sorted(grids)]
    return out


def compile_floors(arch: str) -> dict[str, bytes]:
    """Cubins of the empty and the touch kernel for ``arch`` (NVRTC, no GPU needed)."""
    from jitmeta.jit.compiler import CompileOptions, compile_cubin

    options = CompileOptions(arch=arch)  # no JITMETA_NVRTC_FLAGS: a fixed floor
    return {EMPTY_NAME: compile_cubin(EMPTY_SRC, options, "bench_empty.cu").cubin,
            TOUCH_NAME: compile_cubin(TOUCH_SRC, options, "bench_touch.cu").cubin}


class Floors:
    """The two floor kernels loaded on ``device``; ``empty()`` and ``touch(...)`` give
    launch closures for the benchmark's timer (launched on the current stream)."""

    def __init__(self, device: int, arch: str):
        import torch
        from jitmeta.jit import runtime

        self.torch, self.runtime = torch, runtime
        self.device = device
        cubins = compile_floors(arch)
        self.fns = {name: runtime.load_module(device, f"bench-{name}", cubin,
                                              (name,)).functions[name]
                    for name, cubin in cubins.items()}
        runtime.make_current(device)

    def empty(self):
        rt, torch, fn = self.runtime, self.torch, self.fns[EMPTY_NAME]
        args, types = (0,) * 8, (rt.POINTER,) * 2 + (rt.UINT32,) * 4 + (rt.POINTER,) * 2

        def call():
            rt.launch(fn, 1, 1024, 0, torch.cuda.current_stream().cuda_stream, args, types)
        return call

    def touch(self, a, b, out, threads: int, grid: int):
        """A closure launching the touch kernel over tensors ``a``, ``b`` (or None) into
        ``out``; returns ``out`` like the schedule call does."""
        rt, torch, fn = self.runtime, self.torch, self.fns[TOUCH_NAME]
        for name, t in (("a", a), ("b", b), ("out", out)):
            if t is not None and (not t.is_cuda or t.dtype != torch.int32
                                  or not t.is_contiguous() or t.data_ptr() % 16):
                raise ValueError(f"touch kernel: {name} must be a contiguous int32 CUDA "
                                 f"tensor at a 16-byte aligned address; got "
                                 f"{t.dtype} on {t.device}, address {t.data_ptr():#x}")
        args = (a.data_ptr(), a.numel(), 0 if b is None else b.data_ptr(),
                0 if b is None else b.numel(), out.data_ptr(), out.numel())
        types = (rt.POINTER, rt.UINT32, rt.POINTER, rt.UINT32, rt.POINTER, rt.UINT32)

        def call():
            rt.launch(fn, grid, threads, 0, torch.cuda.current_stream().cuda_stream, args,
                      types)
            return out
        return call
