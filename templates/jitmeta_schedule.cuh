// jitmeta: the paged-MQA-logits schedule (SPEC section 2) as ordinary CUDA C++.
//
// Self-contained (NVRTC has no standard headers). The generated stub
// (paged_mqa_metadata.cu.j2) inlines this file and instantiates Schedule<...>.
//
// One block owns a "slab" of elements [lo, lo + n): requests (dense) or tokens
// (varlen). It loads a weight per element into a shared tile, scans the tile
// (each thread walks a contiguous slice; a block-wide scan joins the slices), and
// then every SM row whose start falls inside the slab is found by a binary search in
// the tile. The static and dynamic variants run one block over the whole batch; the
// chunked variant is one cooperative grid whose blocks share the slabs and pass their
// summaries to each other through a workspace (Schedule::chunked), so each block
// knows its carry-in and the grand total.
//
// Varlen atoms: a token is an atom start iff its offset from the start of its run of
// equal indices is even. That parity is a two-state automaton, so a slab is
// summarized by a function of the incoming parity q (the parity of the token before
// it): the weight it adds, sum[q], and the parity of its last token, p[q]. Those
// functions compose associatively, so slices and slabs are joined by ordinary scans.
// Within a slab's tile each varlen word packs seg | boundary << 31, where seg =
// ceil(ctx / split_kv) fits 31 bits because ctx is a non-negative int32.
//
// Tile element i lives at word pad(i) = i + i / 32: threads walk contiguous slices,
// and one spare word per 32 keeps the 32 lanes of a warp on 32 different banks.
// A tile of n elements plus its halo therefore takes tile_words(n) = pad(n) + 1 words.

namespace jitmeta {

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr u32 kBoundary = 1u << 31;
constexpr u32 kSegMask = kBoundary - 1u;
constexpr int kLoadUnroll = 8;  // independent loads in flight per thread while loading

__host__ __device__ __forceinline__ constexpr u32 pad(u32 i) { return i + (i >> 5); }
__host__ __device__ __forceinline__ constexpr u32 tile_words(u32 n) { return pad(n) + 1u; }

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Programmatic dependent launch: wait for the preceding grid's memory.
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Scan element: for dense mode only sum[0] is used.
template <bool VARLEN> struct Summary;

template <> struct Summary<false> {
    u32 sum;
    __device__ __forceinline__ static Summary identity() { return {0u}; }
    // "a then b"
    __device__ __forceinline__ static Summary compose(const Summary& a, const Summary& b) {
        return {a.sum + b.sum};
    }
    __device__ __forceinline__ Summary shfl_up(u32 delta) const {
        return {__shfl_up_sync(0xffffffffu, sum, delta)};
    }
    __device__ __forceinline__ Summary shfl(int lane) const {
        return {__shfl_sync(0xffffffffu, sum, lane)};
    }
    __device__ __forceinline__ u32 total(u32) const { return sum; }
    __device__ __forceinline__ u32 parity(u32) const { return 0u; }
};

template <> struct Summary<true> {
    u32 sum0, sum1;  // weight added when the incoming parity is 0 / 1
    u32 p0, p1;      // parity of the last token when the incoming parity is 0 / 1
    __device__ __forceinline__ static Summary identity() { return {0u, 0u, 0u, 1u}; }
    __device__ __forceinline__ static Summary compose(const Summary& a, const Summary& b) {
        return {a.sum0 + (a.p0 ? b.sum1 : b.sum0), a.sum1 + (a.p1 ? b.sum1 : b.sum0),
                a.p0 ? b.p1 : b.p0, a.p1 ? b.p1 : b.p0};
    }
    __device__ __forceinline__ Summary shfl_up(u32 delta) const {
        return {__shfl_up_sync(0xffffffffu, sum0, delta),
                __shfl_up_sync(0xffffffffu, sum1, delta),
                __shfl_up_sync(0xffffffffu, p0, delta),
                __shfl_up_sync(0xffffffffu, p1, delta)};
    }
    __device__ __forceinline__ Summary shfl(int lane) const {
        return {__shfl_sync(0xffffffffu, sum0, lane), __shfl_sync(0xffffffffu, sum1, lane),
                __shfl_sync(0xffffffffu, p0, lane), __shfl_sync(0xffffffffu, p1, lane)};
    }
    __device__ __forceinline__ u32 total(u32 q) const { return q ? sum1 : sum0; }
    __device__ __forceinline__ u32 parity(u32 q) const { return q ? p1 : p0; }
};

// Parity of the (virtual) token before token 0: token 0 is a run boundary anyway.
constexpr u32 kInitialParity = 1u;

template <int THREADS, u32 SPLIT_KV, bool VARLEN, bool SM90>
struct Schedule {
    typedef Summary<VARLEN> S;
    static constexpr int kWarps = THREADS / 32;

    // Shared scratch of the block scan: one summary per warp, plus two broadcast slots.
    struct Scratch {
        S warp[kWarps];
        S broadcast[2];
    };

    __device__ __forceinline__ static u32 segs(int ctx) {
        return ((u32)ctx + (SPLIT_KV - 1u)) / SPLIT_KV;
    }

    // start(s) of SPEC section 2 step 4 (uint32 arithmetic).
    __device__ __forceinline__ static u32 sm_start(u32 s, u32 q, u32 r, u32 num_sms) {
        if (SM90) {
            const u32 pivot = num_sms - r;
            return s * q + (s > pivot ? s - pivot : 0u);
        }
        return s * q + (s < r ? s : r);
    }

    // First s in [0, num_sms] with start(s) >= x (num_sms + 1 if none).
    __device__ __forceinline__ static u32 first_sm_at_or_after(u32 x, u32 q, u32 r,
                                                               u32 num_sms) {
        u32 lo = 0, hi = num_sms + 1;
        while (lo < hi) {
            const u32 mid = (lo + hi) >> 1;
            if (sm_start(mid, q, r, num_sms) >= x) hi = mid; else lo = mid + 1;
        }
        return lo;
    }

    // Inclusive-then-exclusive block scan of one summary per thread. Returns the
    // exclusive prefix of this thread; *block_total gets the whole block's summary.
    __device__ __forceinline__ static S block_exclusive_scan(S v, Scratch& sc,
                                                             S* block_total) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        S inc = v;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const S o = inc.shfl_up(d);
            if (lane >= d) inc = S::compose(o, inc);
        }
        S exc = inc.shfl_up(1);
        if (lane == 0) exc = S::identity();
        if (lane == 31) sc.warp[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            S w = lane < kWarps ? sc.warp[lane] : S::identity();
            S winc = w;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const S o = winc.shfl_up(d);
                if (lane >= d) winc = S::compose(o, winc);
            }
            S wexc = winc.shfl_up(1);
            if (lane == 0) wexc = S::identity();
            if (lane < kWarps) sc.warp[lane] = wexc;
            if (lane == 31) sc.broadcast[0] = winc;
        }
        __syncthreads();
        const S result = S::compose(sc.warp[warp], exc);
        *block_total = sc.broadcast[0];
        __syncthreads();  // scratch may be reused right after
        return result;
    }

    // Packed varlen word of token e (e < batch): seg | boundary << 31.
    __device__ __forceinline__ static u32 varlen_word(int c, int id, int prev_id, u32 e) {
        return segs(c) | ((e == 0 || id != prev_id) ? kBoundary : 0u);
    }

    // One round of a slab's loads, held in registers: kLoadUnroll elements per thread
    // (element base + k * THREADS + threadIdx.x) and, in thread 0, the varlen halo.
    struct Fetched {
        int c[kLoadUnroll], id[kLoadUnroll], pid[kLoadUnroll];
        int halo_c, halo_id, halo_pid;
    };

    // Issues the loads of round `base` of slab [lo, lo + n) unconditionally (addresses
    // clamped into the batch, which is never empty): nothing waits for them here.
    __device__ __forceinline__ static void fetch(Fetched& f, const int* __restrict__ ctx,
                                                 const int* __restrict__ idx, u32 lo, u32 n,
                                                 u32 base, u32 batch, u32 next_n) {
        const u32 top = batch - 1u;
#pragma unroll
        for (int k = 0; k < kLoadUnroll; ++k) {
            const u32 ec = min(lo + base + (u32)k * THREADS + threadIdx.x, top);
            if (VARLEN) {
                f.c[k] = __ldg(ctx + ec);
                f.id[k] = __ldg(idx + ec);
                f.pid[k] = __ldg(idx + (ec ? ec - 1u : 0u));
            } else {
                f.c[k] = __ldg(ctx + (u64)ec * next_n + (next_n - 1u));
            }
        }
        if (VARLEN && base == 0 && threadIdx.x == 0) {  // the halo: token lo + n
            const u32 ec = min(lo + n, top);
            f.halo_c = __ldg(ctx + ec);
            f.halo_id = __ldg(idx + ec);
            f.halo_pid = __ldg(idx + (ec ? ec - 1u : 0u));
        }
    }

    // Writes a fetched round into the tile (waiting for its loads).
    __device__ __forceinline__ static void store(u32* tile, const Fetched& f, u32 lo, u32 n,
                                                 u32 base, u32 batch, u32 atoms) {
#pragma unroll
        for (int k = 0; k < kLoadUnroll; ++k) {
            const u32 i = base + (u32)k * THREADS + threadIdx.x;
            if (i < n)
                tile[pad(i)] = VARLEN ? varlen_word(f.c[k], f.id[k], f.pid[k], lo + i)
                                      : atoms * segs(f.c[k]);
        }
        if (VARLEN && base == 0 && threadIdx.x == 0) {
            const u32 e = lo + n;
            tile[pad(n)] = e < batch ? varlen_word(f.halo_c, f.halo_id, f.halo_pid, e)
                                     : kBoundary;
        }
    }

    // Loads slab [lo, lo + n) into tile elements 0..n-1 and a halo word into element n.
    // dense: A * segs(ctx[e, next_n - 1]); varlen: seg | boundary << 31, the halo being
    // the next token's word (or a boundary when there is none). Coalesced, kLoadUnroll
    // loads per thread in flight; every load of a round is issued before any of its
    // values is used, so a round costs one memory latency.
    __device__ __forceinline__ static void load_tile(u32* tile, const int* __restrict__ ctx,
                                                     const int* __restrict__ idx, u32 lo,
                                                     u32 n, u32 batch, u32 next_n,
                                                     u32 atoms) {
        for (u32 base = 0; base < n; base += THREADS * kLoadUnroll) {
            Fetched f;
            fetch(f, ctx, idx, lo, n, base, batch, next_n);
            store(tile, f, lo, n, base, batch, atoms);
        }
    }

    // Summary of this thread's slice [b, end) of the tile (before any overwrite), and
    // for varlen the packed word just after the slice in *after.
    __device__ __forceinline__ static S summarize_slice(const u32* tile, u32 b, u32 end,
                                                        u32* after) {
        if constexpr (!VARLEN) {
            u32 sum = 0;
            for (u32 i = b; i < end; ++i) sum += tile[pad(i)];
            *after = 0u;
            return S{sum};
        } else {
            u32 sum0 = 0, sum1 = 0, p0 = 0, p1 = 1;
            u32 cur = b < end ? tile[pad(b)] : 0u;
            for (u32 i = b; i < end; ++i) {
                const u32 next = tile[pad(i + 1)];
                const bool bnd = cur & kBoundary;
                p0 = bnd ? 0u : p0 ^ 1u;
                p1 = bnd ? 0u : p1 ^ 1u;
                const u32 seg = (next & kBoundary) ? (cur & kSegMask) : (next & kSegMask);
                sum0 += p0 ? 0u : seg;
                sum1 += p1 ? 0u : seg;
                cur = next;
            }
            *after = cur;
            return S{sum0, sum1, p0, p1};
        }
    }

    // Overwrites the slice with inclusive prefix sums starting from `base`.
    __device__ __forceinline__ static void prefix_slice(u32* tile, u32 b, u32 end, u32 base,
                                                        u32 parity, u32 after) {
        u32 acc = base;
        if constexpr (!VARLEN) {
            for (u32 i = b; i < end; ++i) { acc += tile[pad(i)]; tile[pad(i)] = acc; }
        } else {
            u32 p = parity;
            u32 cur = b < end ? tile[pad(b)] : 0u;
            for (u32 i = b; i < end; ++i) {
                const u32 next = i + 1 < end ? tile[pad(i + 1)] : after;
                p = (cur & kBoundary) ? 0u : p ^ 1u;
                const u32 seg = (next & kBoundary) ? (cur & kSegMask) : (next & kSegMask);
                acc += p ? 0u : seg;
                tile[pad(i)] = acc;
                cur = next;
            }
        }
    }

    // Slice of the tile owned by this thread: contiguous, ceil(n / THREADS) long.
    __device__ __forceinline__ static void slice(u32 n, u32* b, u32* end) {
        const u32 per = (n + THREADS - 1) / THREADS;
        const u32 bb = min(n, threadIdx.x * per);
        *b = bb;
        *end = min(n, bb + per);
    }

    // A slab scanned by the block: this thread's slice, the word after it (varlen),
    // the composition of the slices before it within the slab, and the whole slab.
    struct Scanned {
        u32 b, end, after;
        S before, block;
    };

    __device__ __forceinline__ static Scanned scan_tile(const u32* tile, u32 n, Scratch& sc) {
        Scanned t;
        slice(n, &t.b, &t.end);
        t.after = 0u;
        t.before = block_exclusive_scan(summarize_slice(tile, t.b, t.end, &t.after), sc,
                                        &t.block);
        return t;
    }

    // Writes the rows of every SM whose start lies in the scanned slab (carry-in:
    // `carry` composed of all earlier slabs). `total` is the grand total (ignored when
    // `whole`: the slab is the whole batch and its own sum is the total); `last` says
    // this slab also owns the rows at start == total. Overwrites the tile with prefix
    // sums and searches them.
    __device__ __forceinline__ static void emit_scanned(u32* tile, const Scanned& t, u32 lo,
                                                        u32 n, S carry, u32 total,
                                                        bool whole, bool last, u32 batch,
                                                        u32 atoms, u32 num_sms,
                                                        int* __restrict__ out) {
        const S before = S::compose(carry, t.before);
        prefix_slice(tile, t.b, t.end, before.total(kInitialParity),
                     before.parity(kInitialParity), t.after);
        __syncthreads();

        const u32 base = carry.total(kInitialParity);
        const u32 slab_end = base + t.block.total(carry.parity(kInitialParity));
        if (whole) total = slab_end;
        const u32 q = total / num_sms, r = total % num_sms;
        const u32 s_lo = first_sm_at_or_after(base, q, r, num_sms);
        const u32 s_hi = last ? num_sms + 1 : first_sm_at_or_after(slab_end, q, r, num_sms);
        for (u32 s = s_lo + threadIdx.x; s < s_hi; s += THREADS) {
            const u32 x = sm_start(s, q, r, num_sms);
            int2 row;
            if (x >= slab_end) {  // only in the last slab: start(s) == total
                row = make_int2((int)(VARLEN ? batch : batch * atoms), 0);
            } else {
                u32 lo_i = 0, hi_i = n;  // first i with P[i] > x
                while (lo_i < hi_i) {
                    const u32 mid = (lo_i + hi_i) >> 1;
                    if (tile[pad(mid)] > x) hi_i = mid; else lo_i = mid + 1;
                }
                const u32 prev = lo_i ? tile[pad(lo_i - 1)] : base;
                const u32 off = x - prev;
                if (VARLEN) {
                    row = make_int2((int)(lo + lo_i), (int)off);
                } else {
                    const u32 nseg = (tile[pad(lo_i)] - prev) / atoms;
                    row = make_int2((int)((lo + lo_i) * atoms + off / nseg), (int)(off % nseg));
                }
            }
            if (SM90 && !VARLEN && s == num_sms) row = make_int2((int)(batch * atoms), 0);
            reinterpret_cast<int2*>(out)[s] = row;
        }
    }

    // Scans the loaded slab and writes its rows (see emit_scanned).
    __device__ __forceinline__ static void emit_tile(u32* tile, u32 lo, u32 n, S carry,
                                                     u32 total, bool whole, bool last,
                                                     u32 batch, u32 atoms, u32 num_sms,
                                                     int* __restrict__ out, Scratch& sc) {
        const Scanned t = scan_tile(tile, n, sc);
        emit_scanned(tile, t, lo, n, carry, total, whole, last, batch, atoms, num_sms, out);
    }

    // --- chunked variant: one cooperative launch ---------------------------------------
    //
    // gridDim.x co-resident blocks (a cooperative launch, at most THREADS and kMaxGrid)
    // share the slabs of CHUNK elements: block g takes a contiguous run of them.
    // Phase 1: each block summarizes its slabs (kept in the workspace) and publishes the
    // composition in its slot. Every block then waits for all slots, scans them (its
    // carry-in and the grand total) and, phase 2, emits the rows of its slabs that
    // contain an SM start, reloading a slab only when it is not the one still in shared
    // memory.
    //
    // Workspace (u32 words, zeroed once when allocated, used by one launch at a time):
    //   [0]                      epoch: how many launches have used it (mod 2^32)
    //   [4 + 8 g, + 8)           slot of block g < kMaxGrid: one 64-bit word per summary
    //                            field, (tag << 32) | field, tag = epoch + 1 once published
    //   [kSlabBase, ...)         summary of every slab, sizeof(S) / 4 words each
    // A launch reads the epoch, publishes its slot with tag epoch + 1 and waits for that
    // tag in every field of every slot; block 0 advances the epoch once it has seen them
    // all (so every block has read it). Each 64-bit word is written and read whole
    // (single-copy atomic), so a field carrying this launch's tag is this launch's value:
    // no fence and no second read. Slots sit at fixed places whatever the grid and
    // nothing else is ever written there, so a stale tag is never ahead of the epoch and
    // no reset is needed.
    static constexpr u32 kSlotWords = 8;
    static constexpr u32 kMaxGrid = 1024;
    static constexpr u32 kSlotBase = 4u;
    static constexpr u32 kSlabBase = kSlotBase + kSlotWords * kMaxGrid;
    static constexpr u32 kSpinLimit = 1u << 24;  // ~1 s of polling: then trap, never hang
    static constexpr u32 kFields = sizeof(S) / 4;
    static_assert(2 * kFields <= kSlotWords, "a slot holds one 64-bit word per field");

    __device__ __forceinline__ static u32* slot_of(u32* ws, u32 g) {
        return ws + kSlotBase + kSlotWords * g;
    }

    __device__ __forceinline__ static void publish(u32* slot, const S& v, u32 tag) {
        volatile u64* vs = reinterpret_cast<volatile u64*>(slot);
        const u32* f = reinterpret_cast<const u32*>(&v);
#pragma unroll
        for (u32 k = 0; k < kFields; ++k) vs[k] = (u64)tag << 32 | f[k];
    }

    __device__ __forceinline__ static S wait_slot(const u32* slot, u32 tag) {
        const volatile u64* vs = reinterpret_cast<const volatile u64*>(slot);
        S v;
        u32* f = reinterpret_cast<u32*>(&v);
        for (u32 spins = 0;; ++spins) {
            bool ready = true;
#pragma unroll
            for (u32 k = 0; k < kFields; ++k) {
                const u64 word = vs[k];
                f[k] = (u32)word;
                ready &= (u32)(word >> 32) == tag;
            }
            if (ready) return v;
            if (spins == kSpinLimit) __trap();
            __nanosleep(32);
        }
    }

    template <u32 CHUNK>
    __device__ __forceinline__ static void chunked(u32* tile, const int* __restrict__ ctx,
                                                   const int* __restrict__ idx, u32 batch,
                                                   u32 next_n, u32 atoms, u32 num_sms,
                                                   int* __restrict__ out, u32* ws,
                                                   Scratch& sc) {
        const u32 grid = gridDim.x, g = blockIdx.x;
        const u32 slabs = (batch - 1u) / CHUNK + 1u;  // batch >= 1
        const u32 per = (slabs + grid - 1u) / grid;
        const u32 j0 = min(slabs, g * per), j1 = min(slabs, j0 + per);
        const u32 epoch = *static_cast<volatile u32*>(ws);
        S* slab_sums = reinterpret_cast<S*>(ws + kSlabBase);

        // Phase 1. The last slab stays in shared memory, scanned, for phase 2. When a
        // slab is one round of loads, the next slab's loads are in flight while this
        // one is scanned.
        constexpr bool kPrefetch = CHUNK <= THREADS * kLoadUnroll;
        S mine = S::identity(), before_kept = S::identity();
        Scanned kept{};
        Fetched f;
        if (kPrefetch && j0 < j1) fetch(f, ctx, idx, j0 * CHUNK, min(CHUNK, batch - j0 * CHUNK),
                                         0u, batch, next_n);
        for (u32 j = j0; j < j1; ++j) {
            const u32 lo = j * CHUNK, n = min(CHUNK, batch - lo);
            if (kPrefetch) {
                store(tile, f, lo, n, 0u, batch, atoms);
                if (j + 1u < j1)
                    fetch(f, ctx, idx, lo + CHUNK, min(CHUNK, batch - lo - CHUNK), 0u, batch,
                          next_n);
            } else {
                load_tile(tile, ctx, idx, lo, n, batch, next_n, atoms);
            }
            __syncthreads();
            kept = scan_tile(tile, n, sc);  // ends synced: the tile may be rewritten
            if (threadIdx.x == 0) slab_sums[j] = kept.block;
            before_kept = mine;
            mine = S::compose(mine, kept.block);
        }
        if (threadIdx.x == 0) publish(slot_of(ws, g), mine, epoch + 1u);

        S slot = S::identity(), all;
        if (threadIdx.x < grid) slot = wait_slot(slot_of(ws, threadIdx.x), epoch + 1u);
        const S before = block_exclusive_scan(slot, sc, &all);
        if (threadIdx.x == g) sc.broadcast[1] = before;
        __syncthreads();
        const S carry = sc.broadcast[1];
        if (g == 0 && threadIdx.x == 0) *static_cast<volatile u32*>(ws) = epoch + 1u;
        if (j0 == j1) return;

        // Phase 2: the slabs holding an SM start (and the last slab of all). The one
        // still in shared memory first (it is scanned already), then the others,
        // reloaded.
        const u32 total = all.total(kInitialParity);
        const u32 q = total / num_sms, r = total % num_sms;
        const S carry_last = S::compose(carry, before_kept);  // every slab before j1 - 1
        S c = carry;
        for (u32 k = 0; k < j1 - j0; ++k) {
            const u32 j = k == 0 ? j1 - 1u : j0 + k - 1u;  // the resident slab first
            const S cj = k == 0 ? carry_last : c;
            const S sj = slab_sums[j];
            if (k > 0) c = S::compose(c, sj);
            const u32 base = cj.total(kInitialParity);
            const u32 end = base + sj.total(cj.parity(kInitialParity));
            const u32 s = first_sm_at_or_after(base, q, r, num_sms);
            const bool last = j + 1u == slabs;
            if (!last && !(s <= num_sms && sm_start(s, q, r, num_sms) < end)) continue;
            const u32 lo = j * CHUNK, n = min(CHUNK, batch - lo);
            if (k == 0) {
                emit_scanned(tile, kept, lo, n, cj, total, false, last, batch, atoms,
                             num_sms, out);
            } else {
                __syncthreads();  // every thread is done with the slab in the tile
                load_tile(tile, ctx, idx, lo, n, batch, next_n, atoms);
                __syncthreads();
                emit_tile(tile, lo, n, cj, total, false, last, batch, atoms, num_sms, out, sc);
            }
        }
    }
};

}  // namespace jitmeta
