// jitmeta: schedule formats "smxx" and "sm90" (rows are (q_atom_idx, kv_split_idx)).
//
// A format of the shared machinery in jitmeta_engine.cuh (inlined before this file):
// the stub instantiates Engine<Schedule<...>>. Work sums are uint32, as upstream's.
// One cubin serves both formats: they differ only in which SMs take the remainder of
// the even split, a kernel argument (Sms::wide_last; the sm_start comment).
//
// Dense: the tile word of request q is A * segs(ctx[q, next_n - 1]) (A atoms); the
// summary is a plain sum. Varlen atoms: a token is an atom start iff its offset from
// the start of its run of equal indices is even. That parity is a two-state automaton,
// so a slab is summarized by a function of the incoming parity q (the parity of the
// token before it): the weight it adds, sum[q], and the parity of its last token,
// p[q]. Those functions compose associatively, so slices and slabs are joined by
// ordinary scans. Rows: each thread walks its slice again and offers the engine's
// Placer every unit with work: a request (dense) or an atom, credited at its first
// token (varlen).

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

template <int THREADS, u32 SPLIT_KV, bool VARLEN>
struct Schedule {
    typedef Summary<VARLEN> S;
    typedef u32 Work;
    static constexpr int kThreads = THREADS;
    static constexpr bool kVarlen = VARLEN;
    static constexpr u32 kSlotWords = 8;  // a summary has at most 4 fields
    static constexpr u32 kLiveFields = sizeof(S) / 4;  // no padding
    static constexpr u32 kTileAlign = 1;  // 4-byte summaries: no alignment needed
    enum { kEveryLaneScans = 0 };  // short compositions: predicated (Engine::whole)

    __device__ __forceinline__ static u32 segs(int ctx) {
        return ((u32)ctx + (SPLIT_KV - 1u)) / SPLIT_KV;
    }

    // start(s) of the even split: s * q plus the wide SMs (q + 1 units each) before s.
    // The r wide SMs are [a, a + r): a = 0 ("smxx") or num_sms - r ("sm90",
    // sms.wide_last), so start(s) = s * q + clamp(s - a, 0, r) (uint32 arithmetic;
    // docs/schedule.md).
    __device__ __forceinline__ static u32 first_wide(u32 r, const Sms& sms) {
        return sms.wide_last ? sms.n - r : 0u;
    }

    __device__ __forceinline__ static u32 sm_start(u32 s, u32 q, u32 r, const Sms& sms) {
        const u32 a = first_wide(r, sms);
        const u32 d = s > a ? s - a : 0u;
        return s * q + (d < r ? d : r);
    }

    __device__ __forceinline__ static void split_total(u32 total, u32 num_sms, u32* q,
                                                       u32* r) {
        *q = total / num_sms;
        *r = total % num_sms;
    }

    // First s in [0, num_sms] with start(s) >= x, for x <= total = num_sms * q + r, in
    // closed form over the three stretches: [0, a) of q units (q >= 1 when x falls
    // there), [a, a + r) of q + 1, [a + r, num_sms) of q (q >= 1 when x falls there).
    // No product below exceeds the total.
    __device__ __forceinline__ static u32 first_sm(u32 x, u32 q, u32 r, const Sms& sms) {
        if (x == 0u) return 0u;
        const u32 a = first_wide(r, sms);
        const u32 narrow = a * q;  // where the SMs before the wide ones end
        if (x <= narrow) return (x - 1u) / q + 1u;
        const u32 wide = narrow + r * (q + 1u);  // where the wide SMs end
        if (x <= wide) return a + (x - narrow - 1u) / (q + 1u) + 1u;
        return a + r + (x - wide - 1u) / q + 1u;
    }

    // The summary of dense words summed (uint32 sums wrap, as upstream's).
    __device__ __forceinline__ static S dense_summary(u64 words, u32 /*atoms*/) {
        return S{(u32)words};
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
            S s = S::identity();
            u32 cur = b < end ? tile[pad(b)] : 0u;
            for (u32 i = b; i < end; ++i) {
                const u32 next = tile[pad(i + 1)];
                step(s, cur, next);
                cur = next;
            }
            *after = cur;
            return s;
        }
    }

    // Varlen: appends the token of packed word `cur` (`next`: the token after it) to a
    // summary: both parities advance (a boundary resets them), and a token at an even
    // offset of its run adds its atom's weight (the next token's segs when it is in the
    // same run, else its own).
    __device__ __forceinline__ static void step(S& s, u32 cur, u32 next, u32 /*t*/ = 0u) {
        const bool bnd = cur & kBoundary;
        s.p0 = bnd ? 0u : s.p0 ^ 1u;
        s.p1 = bnd ? 0u : s.p1 ^ 1u;
        const u32 seg = (next & kBoundary) ? (cur & kSegMask) : (next & kSegMask);
        s.sum0 += s.p0 ? 0u : seg;
        s.sum1 += s.p1 ? 0u : seg;
    }

    // A block holding the whole batch: the tile becomes its inclusive prefix sums (the
    // keys the engine searches; uint32, so always possible), written over the slice
    // from the work before it. Words: at(k) for slice element k, t.after past the
    // slice (the next slice may be overwritten already).
    static constexpr u32 kKeyMask = 0xffffffffu;
    template <u32 N, class Words>
    __device__ __forceinline__ static bool prefix_whole(const Words& at, u32* tile,
                                                        const Scanned<S>& t, u32 /*atoms*/,
                                                        u32* total) {
        const u32 len = t.end - t.b;
        u32 acc = t.before.total(kInitialParity);
        if constexpr (!VARLEN) {
            for_each_index<N>(len, [&](u32 k) {
                acc += at(k);
                tile[pad(t.b + k)] = acc;
            });
        } else {
            u32 p = t.before.parity(kInitialParity);
            u32 cur = len ? at(0u) : 0u;
            for_each_index<N>(len, [&](u32 k) {
                const u32 next = k + 1u < len ? at(k + 1u) : t.after;
                p = (cur & kBoundary) ? 0u : p ^ 1u;
                const u32 seg = (next & kBoundary) ? (cur & kSegMask) : (next & kSegMask);
                acc += p ? 0u : seg;
                tile[pad(t.b + k)] = acc;
                cur = next;
            });
        }
        *total = t.block.total(kInitialParity);
        return true;
    }

    // The row of work position x inside element e of the prefix tile: dense, request e
    // (its atoms start at e * atoms and split its work atom-major); varlen, the atom of
    // token e.
    __device__ __forceinline__ static int2 row_at(const u32* tile, u32 e, u32 x, u32 atoms) {
        const u32 prev = e ? tile[pad(e - 1u)] : 0u;
        if (VARLEN) return row((int)e, 0u, x - prev);
        return row((int)(e * atoms), (tile[pad(e)] - prev) / atoms, x - prev);
    }

    // The row of the SM starting `off` units into a unit: dense, the request whose
    // atoms start at `first` with div = segs splits each (atom-major); varlen, the atom
    // of token `first` (div unused).
    __device__ __forceinline__ static int2 row(int first, u32 div, u32 off) {
        if (VARLEN) return make_int2(first, (int)off);
        return make_int2(first + (int)(off / div), (int)(off % div));
    }

    // The row of an SM starting at the total: past the last request / atom (sm90
    // forces this row at s = num_sms, which always starts at the total).
    __device__ __forceinline__ static int2 end_row(u32 batch, u32 atoms) {
        return make_int2((int)(VARLEN ? batch : batch * atoms), 0);
    }

    // Offers the placer the units of this thread's slice [t.b, t.end) of the scanned
    // tile, `before` being the composition of everything before the slice: dense, the
    // request of element i (work atoms * segs); varlen, the atom starting at token i
    // (its weight, the same as in summarize_slice, when i is at an even offset of its
    // run; the other tokens credit nothing).
    template <class Placer>
    __device__ __forceinline__ static void walk(const u32* tile, const Scanned<S>& t, u32 lo,
                                                const S& before, u32 atoms, Placer& placer) {
        u32 acc = before.total(kInitialParity);
        if constexpr (!VARLEN) {
            for (u32 i = t.b; i < t.end; ++i) {
                const u32 w = tile[pad(i)];
                const u32 hi = acc + w;
                if (placer.hits(hi)) placer.place(acc, hi, (int)((lo + i) * atoms), w / atoms);
                acc = hi;
            }
        } else {
            u32 p = before.parity(kInitialParity);
            u32 cur = t.b < t.end ? tile[pad(t.b)] : 0u;
            for (u32 i = t.b; i < t.end; ++i) {
                const u32 next = tile[pad(i + 1)];
                p = (cur & kBoundary) ? 0u : p ^ 1u;
                const u32 seg = (next & kBoundary) ? (cur & kSegMask) : (next & kSegMask);
                const u32 hi = acc + (p ? 0u : seg);
                if (placer.hits(hi)) placer.place(acc, hi, (int)(lo + i), 0u);
                acc = hi;
                cur = next;
            }
        }
    }
};

}  // namespace jitmeta
