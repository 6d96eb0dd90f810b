// cuda_shim.h: the CUDA built-ins jitmeta's kernels use, for g++ on the CPU.
//
// The emulator (tests/emulator/core.py) compiles a *rendered* kernel source as
// ordinary C++20 after this header, links it with harness.cpp, and runs every block's
// threads as real OS threads (one block after another; the blocks of a cooperative
// launch as processes that run at once). What a GPU provides becomes:
//
//   threadIdx, blockIdx           per-thread (__thread) uint3, set by the launcher
//   blockDim, gridDim             per-thread dim3 (the same in every thread)
//   __shared__                    a function/namespace `static`, so every thread of the
//                                 block sees one object; the link script (smem.ld)
//                                 gathers them between two symbols and the launcher
//                                 fills them with garbage before each block, like
//                                 fresh shared memory.
//   extern __shared__ T x[];      rewritten by core.py (before compiling) into a
//                                 pointer to one global dynamic-smem buffer
//   __syncthreads() and friends   a block-wide futex barrier (a thread that returns
//                                 from the kernel stops counting, as on hardware)
//   __shfl*_sync, __ballot_sync   a per-warp exchange: write own slot, warp barrier,
//                                 read the source lane's slot (double-buffered slots)
//   __nanosleep()                 a poll: yields the CPU. Barriers, warp operations and
//                                 polls are the wait points at which threads and
//                                 blocks set out in a fixed order, so that a read that
//                                 does not wait for its data gives the same answer on
//                                 every run (harness.cpp, "determinism")
//
// Only control flow that is uniform around barriers and full-warp shuffles is
// supported (a partial shuffle mask aborts with a message). A barrier that never
// completes aborts after JITMETA_EMU_TIMEOUT seconds (default 60) instead of hanging.
// __CUDA_ARCH__, __CUDACC__ and __CUDACC_RTC__ stay undefined; JITMETA_EMULATOR is 1.
//
// Nothing here is taken from CUDA headers; semantics follow the CUDA C++ Programming
// Guide (warp shuffle functions, synchronization functions, vector types).

#ifndef JITMETA_EMU_CUDA_SHIM_H
#define JITMETA_EMU_CUDA_SHIM_H

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#define JITMETA_EMULATOR 1

// --- declaration specifiers ------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
// Function-scope statics of the kernel TU (compiled with -fdata-sections) land in
// .bss._ZZ* sections, which smem.ld gathers; namespace-scope __shared__ variables are
// placed there by name. ASan does not instrument variables in named sections, so its
// builds leave out the attribute (namespace-scope __shared__ then keeps no garbage).
#if defined(__SANITIZE_ADDRESS__)
#define JITMETA_EMU_SMEM_SECTION
#else
#define JITMETA_EMU_SMEM_SECTION __attribute__((section("jitmeta_emu_smem")))
#endif
#define __shared__ static JITMETA_EMU_SMEM_SECTION
#ifndef __builtin_assume
#define __builtin_assume(x) ((void)0)
#endif
// (__restrict__ is a g++ keyword already.)

// --- vector types (CUDA alignments: 2 and 4 components are over-aligned) -----------
#define JITMETA_EMU_VEC(T, N)                                                          \
    struct __attribute__((aligned(sizeof(T) < 16 ? sizeof(T) : 16))) N##1 { T x; };   \
    struct __attribute__((aligned(2 * sizeof(T) < 16 ? 2 * sizeof(T) : 16))) N##2 {    \
        T x, y;                                                                        \
    };                                                                                 \
    struct N##3 { T x, y, z; };                                                        \
    struct __attribute__((aligned(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16))) N##4 {    \
        T x, y, z, w;                                                                  \
    };                                                                                 \
    inline N##1 make_##N##1(T x) { return N##1{x}; }                                   \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }                           \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }                   \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }

JITMETA_EMU_VEC(signed char, char)
JITMETA_EMU_VEC(unsigned char, uchar)
JITMETA_EMU_VEC(short, short)
JITMETA_EMU_VEC(unsigned short, ushort)
JITMETA_EMU_VEC(int, int)
JITMETA_EMU_VEC(unsigned int, uint)
JITMETA_EMU_VEC(long, long)
JITMETA_EMU_VEC(unsigned long, ulong)
JITMETA_EMU_VEC(long long, longlong)
JITMETA_EMU_VEC(unsigned long long, ulonglong)
JITMETA_EMU_VEC(float, float)
JITMETA_EMU_VEC(double, double)
#undef JITMETA_EMU_VEC

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// --- built-in variables ------------------------------------------------------------
// (core.py turns `extern __shared__ T name[];` into a pointer to this buffer)
extern "C" char jitmeta_emu_dynamic_smem[];
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread dim3 blockDim;
extern __thread dim3 gridDim;
constexpr int warpSize = 32;

// --- the runtime (harness.cpp) -------------------------------------------------------
namespace jitmeta_emu {
typedef unsigned long long u64;
enum ShflKind { kShflIdx = 0, kShflUp = 1, kShflDown = 2, kShflXor = 3 };
// One warp exchange: every lane of the warp passes `bits`; returns the source lane's.
u64 shfl(unsigned mask, u64 bits, int kind, int arg, int width);
// Every lane passes `bits`; returns the warp's 32 slots (valid until the next-but-one
// warp operation); *lanes gets the number of lanes of this warp.
const u64* warp_gather(unsigned mask, u64 bits, int* lanes);
void syncwarp(unsigned mask);
// Block barrier; returns how many participating threads passed a non-zero `pred`,
// and *participants how many took part.
int syncthreads(int pred, int* participants);
unsigned lane_id();
// __nanosleep: the thread polls for what another thread or block writes.
void poll_sleep();
[[noreturn]] void fatal(const char* what);
}  // namespace jitmeta_emu

inline void __syncthreads() { jitmeta_emu::syncthreads(0, nullptr); }
inline int __syncthreads_count(int pred) { return jitmeta_emu::syncthreads(pred, nullptr); }
inline int __syncthreads_and(int pred) {
    int n = 0;
    return jitmeta_emu::syncthreads(pred, &n) == n;
}
inline int __syncthreads_or(int pred) { return jitmeta_emu::syncthreads(pred, nullptr) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { jitmeta_emu::syncwarp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// Polling loops sleep: let the threads (and forked blocks) they wait for run. A poll is
// also how a block shows that it waits for another, which lets the next block of a
// cooperative launch start (harness.cpp, "determinism").
inline void __nanosleep(unsigned) { jitmeta_emu::poll_sleep(); }
inline void __trap() { jitmeta_emu::fatal("__trap()"); }

// --- warp shuffles and votes ---------------------------------------------------------
namespace jitmeta_emu {
template <class T> inline u64 to_bits(T v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= sizeof(u64),
                  "warp shuffles move values of at most 8 bytes");
    u64 b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> inline T from_bits(u64 b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
}  // namespace jitmeta_emu

template <class T> inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    return jitmeta_emu::from_bits<T>(
        jitmeta_emu::shfl(mask, jitmeta_emu::to_bits(var), jitmeta_emu::kShflIdx, src_lane,
                          width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return jitmeta_emu::from_bits<T>(
        jitmeta_emu::shfl(mask, jitmeta_emu::to_bits(var), jitmeta_emu::kShflUp, (int)delta,
                          width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return jitmeta_emu::from_bits<T>(
        jitmeta_emu::shfl(mask, jitmeta_emu::to_bits(var), jitmeta_emu::kShflDown,
                          (int)delta, width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    return jitmeta_emu::from_bits<T>(
        jitmeta_emu::shfl(mask, jitmeta_emu::to_bits(var), jitmeta_emu::kShflXor, lane_mask,
                          width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    int lanes = 0;
    const jitmeta_emu::u64* v = jitmeta_emu::warp_gather(mask, pred != 0, &lanes);
    unsigned r = 0;
    for (int i = 0; i < lanes; ++i)
        if (v[i] && ((mask >> i) & 1u)) r |= 1u << i;
    return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
    int lanes = 0;
    const jitmeta_emu::u64* v = jitmeta_emu::warp_gather(mask, pred != 0, &lanes);
    for (int i = 0; i < lanes; ++i)
        if (((mask >> i) & 1u) && !v[i]) return 0;
    return 1;
}
inline unsigned __activemask() {
    int lanes = 0;
    const jitmeta_emu::u64* v = jitmeta_emu::warp_gather(0xffffffffu, 1, &lanes);
    (void)v;
    return lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
}
#define JITMETA_EMU_REDUCE(NAME, T, INIT, OP)                                       \
    inline T NAME(unsigned mask, T value) {                                         \
        int lanes = 0;                                                              \
        const jitmeta_emu::u64* v =                                                 \
            jitmeta_emu::warp_gather(mask, jitmeta_emu::to_bits(value), &lanes);    \
        T acc = INIT;                                                               \
        for (int i = 0; i < lanes; ++i)                                             \
            if ((mask >> i) & 1u) {                                                 \
                const T x = jitmeta_emu::from_bits<T>(v[i]);                        \
                acc = OP;                                                           \
            }                                                                       \
        return acc;                                                                 \
    }
JITMETA_EMU_REDUCE(__reduce_add_sync, unsigned, 0u, acc + x)
JITMETA_EMU_REDUCE(__reduce_add_sync, int, 0, (int)((unsigned)acc + (unsigned)x))
JITMETA_EMU_REDUCE(__reduce_min_sync, unsigned, 0xffffffffu, x < acc ? x : acc)
JITMETA_EMU_REDUCE(__reduce_min_sync, int, 0x7fffffff, x < acc ? x : acc)
JITMETA_EMU_REDUCE(__reduce_max_sync, unsigned, 0u, x > acc ? x : acc)
JITMETA_EMU_REDUCE(__reduce_max_sync, int, (int)0x80000000u, x > acc ? x : acc)
JITMETA_EMU_REDUCE(__reduce_and_sync, unsigned, 0xffffffffu, acc & x)
JITMETA_EMU_REDUCE(__reduce_or_sync, unsigned, 0u, acc | x)
JITMETA_EMU_REDUCE(__reduce_xor_sync, unsigned, 0u, acc ^ x)
#undef JITMETA_EMU_REDUCE

// --- loads and stores with cache hints: plain accesses, alignment checked ------------
namespace jitmeta_emu {
template <class T> inline const T* checked(const T* p, const char* what) {
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) fatal(what);
    return p;
}
}  // namespace jitmeta_emu
#define JITMETA_EMU_LOAD(NAME)                                                       \
    template <class T> inline T NAME(const T* p) {                                   \
        return *jitmeta_emu::checked(p, #NAME " of a misaligned address");           \
    }
JITMETA_EMU_LOAD(__ldg)
JITMETA_EMU_LOAD(__ldca)
JITMETA_EMU_LOAD(__ldcg)
JITMETA_EMU_LOAD(__ldcs)
JITMETA_EMU_LOAD(__ldlu)
JITMETA_EMU_LOAD(__ldcv)
#undef JITMETA_EMU_LOAD
#define JITMETA_EMU_STORE(NAME)                                                      \
    template <class T> inline void NAME(T* p, T v) {                                 \
        *const_cast<T*>(jitmeta_emu::checked(p, #NAME " to a misaligned address")) = v; \
    }
JITMETA_EMU_STORE(__stwb)
JITMETA_EMU_STORE(__stcg)
JITMETA_EMU_STORE(__stcs)
JITMETA_EMU_STORE(__stwt)
#undef JITMETA_EMU_STORE

// --- integer helpers -----------------------------------------------------------------
// CUDA's min/max: mixed signed/unsigned arguments compare as the common (unsigned) type.
template <class A, class B> constexpr typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B> constexpr typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)a < (C)b ? (C)b : (C)a;
}
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a < b ? b : a; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (shift & 31u)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (shift & 31u));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (shift < 32u ? shift : 32u)) >> 32);
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (shift < 32u ? shift : 32u));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (((s >> (4 * i)) & 7u) * 8)) & 0xffu) << (8 * i);
    return r;
}
inline int __float_as_int(float f) { return jitmeta_emu::from_bits<int>(jitmeta_emu::to_bits(f)); }
inline unsigned __float_as_uint(float f) {
    return jitmeta_emu::from_bits<unsigned>(jitmeta_emu::to_bits(f));
}
inline float __int_as_float(int i) { return jitmeta_emu::from_bits<float>(jitmeta_emu::to_bits(i)); }
inline float __uint_as_float(unsigned i) {
    return jitmeta_emu::from_bits<float>(jitmeta_emu::to_bits(i));
}

// --- atomics (shared or global memory alike) ---------------------------------------
template <class T> inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicCAS(T* p, T expected, T desired) {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;  // the old value either way
}
namespace jitmeta_emu {
template <class T, class F> inline T atomic_update(T* p, F f) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, f(old), false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
    return old;
}
}  // namespace jitmeta_emu
template <class T> inline T atomicMin(T* p, T v) {
    return jitmeta_emu::atomic_update(p, [v](T o) { return v < o ? v : o; });
}
template <class T> inline T atomicMax(T* p, T v) {
    return jitmeta_emu::atomic_update(p, [v](T o) { return v > o ? v : o; });
}
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return jitmeta_emu::atomic_update(p, [v](unsigned o) { return o >= v ? 0u : o + 1u; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return jitmeta_emu::atomic_update(
        p, [v](unsigned o) { return (o == 0u || o > v) ? v : o - 1u; });
}

// --- launch ABI between the kernel TU and harness.cpp --------------------------------
// The kernel TU ends with a table (written by core.py) of its extern "C" kernels:
//   JITMETA_EMU_KERNEL(jitmeta_emit), ...
// Each entry calls the kernel with arguments that convert to the declared parameter
// types: a pointer argument to any pointer type, a value to any integer type, so the
// table needs no knowledge of the kernel's signature beyond its arity.
namespace jitmeta_emu {
[[noreturn]] void bad_argument(int index, bool want_pointer);

struct Arg {
    u64 bits;
    int is_pointer;
    int index;
    template <class T> operator T() const {
        if constexpr (std::is_pointer<T>::value) {
            if (!is_pointer) bad_argument(index, true);
            return reinterpret_cast<T>(static_cast<std::uintptr_t>(bits));
        } else {
            static_assert(std::is_integral<T>::value || std::is_enum<T>::value,
                          "kernel parameters must be pointers or integers");
            if (is_pointer) bad_argument(index, false);
            return static_cast<T>(bits);
        }
    }
};

struct KernelEntry {
    const char* name;
    int arity;
    const char* kinds;  // one letter per parameter: 'p' pointer, 'u' integer
    void (*invoke)(const Arg* args);
};

template <class F> struct KernelTraits;
template <class... P> struct KernelTraits<void (*)(P...)> {
    static constexpr int arity = sizeof...(P);
    static constexpr char kinds[sizeof...(P) + 1] = {
        (std::is_pointer<P>::value ? 'p' : 'u')..., '\0'};
    template <void (*F)(P...), std::size_t... I>
    static void call(const Arg* a, std::index_sequence<I...>) {
        F(static_cast<P>(a[I])...);
    }
    template <void (*F)(P...)> static void invoke(const Arg* a) {
        call<F>(a, std::index_sequence_for<P...>{});
    }
};
}  // namespace jitmeta_emu

#define JITMETA_EMU_KERNEL(f)                                                         \
    jitmeta_emu::KernelEntry {                                                        \
        #f, jitmeta_emu::KernelTraits<decltype(&f)>::arity,                           \
            jitmeta_emu::KernelTraits<decltype(&f)>::kinds,                           \
            &jitmeta_emu::KernelTraits<decltype(&f)>::template invoke<&f>             \
    }

#endif  // JITMETA_EMU_CUDA_SHIM_H
