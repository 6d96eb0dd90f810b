// jitmeta: schedule format "sm100" (rows are (q_token_idx, kv_split_idx)).
//
// A format of the shared machinery in jitmeta_engine.cuh (inlined before this file):
// the stub instantiates Engine<Sm100<...>>. Work sums are 64-bit.
//
// Requests: dense, request r is the next_n tokens [r * next_n, (r + 1) * next_n) with
// the length of its last column; varlen, a request is a maximal run of equal
// consecutive indices with the length of its last token. work(r) = segs(ctx) * tokens;
// SM s starts at w(s) = s * q + min(s, r) of the total (q, r = total / S, total % S) and
// its row is (start token of the request whose work range holds w(s), offset within
// that range / tokens), or (T, 0) past the last request.
//
// Dense: the tile word is segs; the summary is the 64-bit work sum (segs * next_n).
//
// Varlen: a run's work is credited at its last token t (a run end: token t + 1 starts
// a run, or there is none): weight(t) = segs(ctx[t]) * (t - run_start(t) + 1). The run
// start is the last boundary at or before t, so a segment of tokens is summarized, as
// a function of the run start rs coming into it, by
//   lastb   its last boundary position (kNone if it has none),
//   closed  the weights of its run ends after its first boundary (rs-independent),
//   pre_a   sum of segs * (t + 1) over its run ends before its first boundary,
//   pre_b   sum of segs over those,
// and adds closed + pre_a - rs * pre_b. Composition "A then B" resolves B's leading run
// ends with A's last boundary when A has one, else they stay leading; it is
// associative, so slices, slabs and blocks are joined by ordinary scans. All sums are
// mod 2^64: pre_a alone may wrap, but every evaluated work is a true total (< 2^64),
// so the modular result is exact. A prefix of the batch starts with token 0, a
// boundary, so it has no leading run ends: its work is `closed` (pre_a = pre_b = 0).
//
// Rows, dense, when a slab's own work fits 32 bits: the tile becomes 32-bit prefix
// sums relative to the slab's start and each thread binary-searches them for its own
// SMs, as the atom formats do. Otherwise (varlen; dense slabs of 2^32 work units or
// more) each thread walks its own slice after the scan, with the work and the run
// start before it, and writes the rows of the SMs whose w(s) falls in the work range
// of a request ending in its slice (one binary search for the first such s, then in
// order: one division per request, then division-free steps). The last slab also
// writes the rows with w(s) >= total: (T, 0). Divisions and SM searches run in 32 bits
// whenever their operands fit (uniform branches on the total).

namespace jitmeta {

template <bool VARLEN> struct Sm100Summary;

template <> struct Sm100Summary<false> {
    u64 work;
    __device__ __forceinline__ static Sm100Summary identity() { return {0ull}; }
    __device__ __forceinline__ static Sm100Summary compose(const Sm100Summary& a,
                                                           const Sm100Summary& b) {
        return {a.work + b.work};
    }
    __device__ __forceinline__ Sm100Summary shfl_up(u32 delta) const {
        return {__shfl_up_sync(0xffffffffu, work, delta)};
    }
    __device__ __forceinline__ Sm100Summary shfl(int lane) const {
        return {__shfl_sync(0xffffffffu, work, lane)};
    }
};

template <> struct Sm100Summary<true> {
    static constexpr u32 kNone = 0xffffffffu;  // no boundary in the segment
    u64 closed, pre_a, pre_b;
    u32 lastb, spare;  // spare: always 0 (the summary is published field by field)
    __device__ __forceinline__ static Sm100Summary identity() {
        return {0ull, 0ull, 0ull, kNone, 0u};
    }
    // "a then b"
    __device__ __forceinline__ static Sm100Summary compose(const Sm100Summary& a,
                                                           const Sm100Summary& b) {
        const bool has = a.lastb != kNone;  // b's leading run ends start at a.lastb
        Sm100Summary c;
        c.closed = a.closed + b.closed + (has ? b.pre_a - (u64)a.lastb * b.pre_b : 0ull);
        c.pre_a = has ? a.pre_a : a.pre_a + b.pre_a;
        c.pre_b = has ? a.pre_b : a.pre_b + b.pre_b;
        c.lastb = b.lastb != kNone ? b.lastb : a.lastb;
        c.spare = 0u;
        return c;
    }
    __device__ __forceinline__ Sm100Summary shfl_up(u32 delta) const {
        return {__shfl_up_sync(0xffffffffu, closed, delta),
                __shfl_up_sync(0xffffffffu, pre_a, delta),
                __shfl_up_sync(0xffffffffu, pre_b, delta),
                __shfl_up_sync(0xffffffffu, lastb, delta), 0u};
    }
    __device__ __forceinline__ Sm100Summary shfl(int lane) const {
        return {__shfl_sync(0xffffffffu, closed, lane), __shfl_sync(0xffffffffu, pre_a, lane),
                __shfl_sync(0xffffffffu, pre_b, lane), __shfl_sync(0xffffffffu, lastb, lane),
                0u};
    }
};

template <int THREADS, u32 SPLIT_KV, bool VARLEN>
struct Sm100 {
    typedef Sm100Summary<VARLEN> S;
    typedef u64 Work;
    static constexpr int kThreads = THREADS;
    static constexpr bool kVarlen = VARLEN;
    static constexpr u32 kSlotWords = VARLEN ? 16 : 8;  // 8 / 2 fields of 32 bits
    static constexpr u32 kTileAlign = 2;  // 8-byte summaries share the block's smem

    __device__ __forceinline__ static u32 segs(int ctx) {
        return ((u32)ctx + (SPLIT_KV - 1u)) / SPLIT_KV;
    }

    // The tile word of a dense request: its segs (times next_n in 64 bits later).
    __device__ __forceinline__ static u32 dense_word(int ctx, u32 /*next_n*/) {
        return segs(ctx);
    }

    // w(s) = s * q + min(s, r).
    __device__ __forceinline__ static u64 sm_start(u32 s, u64 q, u64 r, u32 /*num_sms*/) {
        return (u64)s * q + ((u64)s < r ? (u64)s : r);
    }

    // The work of a prefix of the batch (no leading run ends: see the top).
    __device__ __forceinline__ static u64 work(const S& prefix) {
        if constexpr (VARLEN) {
            return prefix.closed + prefix.pre_a;
        } else {
            return prefix.work;
        }
    }

    // Summary of this thread's slice [b, end) of the tile (slab offset lo), and for
    // varlen the packed word just after the slice in *after.
    __device__ __forceinline__ static S summarize_slice(const u32* tile, u32 lo, u32 b,
                                                        u32 end, u32 next_n, u32* after) {
        if constexpr (!VARLEN) {
            u64 sum = 0;
            for (u32 i = b; i < end; ++i) sum += tile[pad(i)];
            *after = 0u;
            return S{sum * next_n};
        } else {
            u64 closed = 0, pre_a = 0, pre_b = 0;
            u32 lastb = S::kNone;
            u32 cur = b < end ? tile[pad(b)] : 0u;
            for (u32 i = b; i < end; ++i) {
                const u32 next = tile[pad(i + 1)];
                const u32 t = lo + i;
                if (cur & kBoundary) lastb = t;
                if (next & kBoundary) {  // t ends a run
                    const u64 seg = cur & kSegMask;
                    if (lastb != S::kNone) {
                        closed += seg * (u64)(t - lastb + 1u);
                    } else {
                        pre_a += seg * ((u64)t + 1u);
                        pre_b += seg;
                    }
                }
                cur = next;
            }
            *after = cur;
            return S{closed, pre_a, pre_b, lastb, 0u};
        }
    }

    // 32-bit twin of sm_start, exact when the total fits 32 bits (every w(s) <= total).
    __device__ __forceinline__ static u32 sm_start(u32 s, u32 q, u32 r, u32 /*num_sms*/) {
        return s * q + (s < r ? s : r);
    }

    // q, r = total / num_sms, total % num_sms: a 32-bit division when the total fits.
    __device__ __forceinline__ static void split_total(u64 total, u32 num_sms, u64* q,
                                                       u32* r) {
        if ((total >> 32) == 0) {
            *q = (u32)total / num_sms;
            *r = (u32)total % num_sms;
        } else {
            *q = total / num_sms;
            *r = (u32)(total % num_sms);
        }
    }

    // First s in [0, num_sms] with w(s) >= x (num_sms + 1 if none); `narrow`: the total
    // fits 32 bits, so x (a work prefix, <= total), q, r and every w(s) do too.
    __device__ __forceinline__ static u32 first_sm(u64 x, u64 q, u32 r, u32 num_sms,
                                                   bool narrow) {
        return narrow ? first_at_or_after<Sm100>((u32)x, (u32)q, r, num_sms)
                      : first_at_or_after<Sm100>(x, q, (u64)r, num_sms);
    }

    // The step between consecutive SM starts, q (+ 1 for s < r), as a quotient and a
    // remainder by `tokens`: dq = q / tokens (clamped to kSegMask: a step that large
    // leaves any request, segs <= kSegMask), dr = q % tokens.
    __device__ __forceinline__ static void step_of(u64 q, u32 tokens, u32* dq, u32* dr) {
        if ((q >> 32) == 0) {
            *dq = min((u32)q / tokens, kSegMask);
            *dr = (u32)q % tokens;
        } else {
            *dq = (u32)min(q / tokens, (u64)kSegMask);
            *dr = (u32)(q % tokens);
        }
    }

    // Writes the rows of the SMs s, s + 1, ... whose start lies in the work range
    // [acc, acc + segs * tokens) of a request of `tokens` tokens from token `start`:
    // (start, (w(s) - acc) / tokens). On entry x = w(s) >= acc (~0 once s > num_sms);
    // on return s is the first SM past the request and x its start. One division for
    // the first row; then w(s + 1) = w(s) + q (+ 1 for s < r) is added as a quotient
    // and a remainder by tokens (dq, dr: step_of), with one carry.
    __device__ __forceinline__ static void emit_request(int2* rows, u32& s, u64& x, u64 acc,
                                                        u32 segs, u32 tokens, int start,
                                                        u64 q, u32 r, u32 dq, u32 dr,
                                                        u32 num_sms) {
        const u64 off = x - acc;  // < segs * tokens
        u32 split, rem;
        if ((off >> 32) == 0) {
            split = (u32)off / tokens;
            rem = (u32)off % tokens;
        } else {
            split = (u32)(off / tokens);
            rem = (u32)(off % tokens);
        }
        for (;;) {  // split < segs < 2^31, rem < tokens <= 2^31: no sum below wraps
            rows[s] = make_int2(start, (int)split);
            const u32 extra = s < r ? 1u : 0u;
            if (++s > num_sms) break;
            rem += dr + extra;  // < 2 * tokens
            split += dq;
            if (rem >= tokens) {
                rem -= tokens;
                ++split;
            }
            if (split >= segs) break;
        }
        x = s <= num_sms ? sm_start(s, q, (u64)r, num_sms) : ~0ull;
    }

    // Writes the rows of every SM whose start lies in the scanned slab (carry-in:
    // `carry` composed of all earlier slabs). `total` is the grand total (ignored when
    // `whole`: the slab is the whole batch); `last` says this slab also owns the rows
    // at w(s) >= total. Dense, when the slab's own work fits 32 bits (the usual case):
    // the tile is overwritten with 32-bit prefix sums relative to the slab's start and
    // every thread binary-searches them for its own SMs (s = s_lo + threadIdx.x, step
    // THREADS), as the atom formats do. Otherwise (varlen, or a dense slab of 2^32 work
    // units or more) each thread walks its slice and writes the rows of the SMs whose
    // start falls in a request ending in it (emit_request). Uniform branches only
    // (total, carry and the slab summary are the same in every thread).
    __device__ __forceinline__ static void emit_scanned(u32* tile, const Scanned<S>& t, u32 lo,
                                                        u32 n, S carry, u64 total,
                                                        bool whole, bool last, u32 batch,
                                                        u32 next_n, u32 num_sms,
                                                        int* __restrict__ out) {
        int2* rows = reinterpret_cast<int2*>(out);
        const S before = S::compose(carry, t.before);
        const u64 base = work(carry);
        const u64 slab_end = work(S::compose(carry, t.block));
        if (whole) total = slab_end;
        const bool narrow = (total >> 32) == 0;
        u64 q;
        u32 r;
        split_total(total, num_sms, &q, &r);
        const int end_token = (int)(VARLEN ? batch : batch * next_n);
        if constexpr (!VARLEN) {
            if (((slab_end - base) >> 32) == 0) {  // prefix sums and searches, 32-bit
                u32 acc = (u32)(work(before) - base);
                for (u32 i = t.b; i < t.end; ++i) {
                    acc += tile[pad(i)] * next_n;  // <= the slab's work: no wrap
                    tile[pad(i)] = acc;
                }
                __syncthreads();
                const u32 s_lo = first_sm(base, q, r, num_sms, narrow);
                const u32 s_hi = last ? num_sms + 1u : first_sm(slab_end, q, r, num_sms, narrow);
                for (u32 s = s_lo + threadIdx.x; s < s_hi; s += THREADS) {
                    const u64 x = sm_start(s, q, (u64)r, num_sms);
                    int2 row = make_int2(end_token, 0);  // past the last request
                    if (x < slab_end) {
                        const u32 xr = (u32)(x - base);
                        u32 a = 0, b = n;  // first i with P[i] > xr
                        while (a < b) {
                            const u32 mid = (a + b) >> 1;
                            if (tile[pad(mid)] > xr) b = mid; else a = mid + 1u;
                        }
                        const u32 prev = a ? tile[pad(a - 1u)] : 0u;
                        row = make_int2((int)((lo + a) * next_n), (int)((xr - prev) / next_n));
                    }
                    rows[s] = row;
                }
                return;
            }
        }
        u64 acc = work(before);  // the work of the requests ending before the slice
        u32 s = first_sm(acc, q, r, num_sms, narrow);
        u64 x = s <= num_sms ? sm_start(s, q, (u64)r, num_sms) : ~0ull;  // next w(s) to place
        if constexpr (!VARLEN) {
            u32 dq, dr;
            step_of(q, next_n, &dq, &dr);
            for (u32 i = t.b; i < t.end; ++i) {
                const u32 segs = tile[pad(i)];
                const u64 hi = acc + (u64)segs * next_n;
                if (x < hi)
                    emit_request(rows, s, x, acc, segs, next_n, (int)((lo + i) * next_n), q,
                                 r, dq, dr, num_sms);
                acc = hi;
            }
        } else {
            u32 rs = before.lastb == S::kNone ? 0u : before.lastb;  // current run start
            u32 cur = t.b < t.end ? tile[pad(t.b)] : 0u;
            for (u32 i = t.b; i < t.end; ++i) {
                const u32 next = i + 1 < t.end ? tile[pad(i + 1)] : t.after;
                if (cur & kBoundary) rs = lo + i;
                if (next & kBoundary) {  // the run [rs, lo + i] ends here
                    const u32 tokens = lo + i - rs + 1u, segs = cur & kSegMask;
                    const u64 hi = acc + (u64)segs * tokens;
                    if (x < hi) {
                        u32 dq, dr;
                        step_of(q, tokens, &dq, &dr);
                        emit_request(rows, s, x, acc, segs, tokens, (int)rs, q, r, dq, dr,
                                     num_sms);
                    }
                    acc = hi;
                }
                cur = next;
            }
        }
        if (last) {  // past the last request: (T, 0)
            for (u32 e = first_sm(total, q, r, num_sms, narrow) + threadIdx.x; e <= num_sms;
                 e += THREADS)
                rows[e] = make_int2(end_token, 0);
        }
    }
};

}  // namespace jitmeta
