// jitmeta: schedule formats "smxx" and "sm90" (rows are (q_atom_idx, kv_split_idx)).
//
// A format of the shared machinery in jitmeta_engine.cuh (inlined before this file):
// the stub instantiates Engine<Schedule<...>>. Work sums are uint32, as upstream's.
//
// Dense: the tile word of request q is A * segs(ctx[q, next_n - 1]) (A atoms); the
// summary is a plain sum. Varlen atoms: a token is an atom start iff its offset from
// the start of its run of equal indices is even. That parity is a two-state automaton,
// so a slab is summarized by a function of the incoming parity q (the parity of the
// token before it): the weight it adds, sum[q], and the parity of its last token,
// p[q]. Those functions compose associatively, so slices and slabs are joined by
// ordinary scans. Rows are found by a binary search over the tile, overwritten with
// the prefix sums of its slab.

namespace jitmeta {

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
    typedef u32 Work;
    static constexpr int kThreads = THREADS;
    static constexpr bool kVarlen = VARLEN;
    static constexpr u32 kSlotWords = 8;  // a summary has at most 4 fields
    static constexpr u32 kTileAlign = 1;  // 4-byte summaries: no alignment needed

    __device__ __forceinline__ static u32 segs(int ctx) {
        return ((u32)ctx + (SPLIT_KV - 1u)) / SPLIT_KV;
    }

    // start(s) of the "sm90" / "smxx" even split (uint32 arithmetic; docs/schedule.md).
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
        return first_at_or_after<Schedule>(x, q, r, num_sms);
    }

    // The tile word of a dense request: atoms * segs.
    __device__ __forceinline__ static u32 dense_word(int ctx, u32 atoms) {
        return atoms * segs(ctx);
    }

    // The work before a prefix (uint32).
    __device__ __forceinline__ static u32 work(const S& prefix) {
        return prefix.total(kInitialParity);
    }

    // Summary of this thread's slice [b, end) of the tile (before any overwrite), and
    // for varlen the packed word just after the slice in *after.
    __device__ __forceinline__ static S summarize_slice(const u32* tile, u32 /*lo*/, u32 b,
                                                        u32 end, u32 /*atoms*/,
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

    // Writes the rows of every SM whose start lies in the scanned slab (carry-in:
    // `carry` composed of all earlier slabs). `total` is the grand total (ignored when
    // `whole`: the slab is the whole batch and its own sum is the total); `last` says
    // this slab also owns the rows at start == total. Overwrites the tile with prefix
    // sums and searches them.
    __device__ __forceinline__ static void emit_scanned(u32* tile, const Scanned<S>& t, u32 lo,
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
};

}  // namespace jitmeta
