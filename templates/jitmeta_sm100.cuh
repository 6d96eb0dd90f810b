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
//   lastb     its last boundary position (kNone if it has none),
//   lead_seg  the segs of its run end before its first boundary (0 if none): there is
//             at most one, since the tokens before the first boundary all belong to the
//             run coming in, which ends once,
//   closed    the weights of its run ends after its first boundary, plus, for that
//             leading run end at token e, lead_seg * (e + 1),
// and adds closed - lead_seg * rs (the leading run end's weight is lead_seg *
// (e + 1 - rs)). Composition "A then B" resolves B's leading run end with A's last
// boundary when A has one (subtracting B.lead_seg * A.lastb); else at most one of A
// and B has a leading run end (if A, a run end with no boundary after it in A, it is
// A's last token, and B starts with a boundary), and it stays leading. A leading run
// end of 0 segs weighs nothing whatever its run start, so lead_seg = 0 stands for it
// too. The composition is associative (the subtracted terms are the same however the
// segments group), so slices, slabs and blocks are joined by ordinary scans. A prefix
// of the batch starts with token 0, a boundary, so it has no leading run end: its work
// is `closed`. All work sums are 64-bit, and closed never falls below what composition
// subtracts from it: with e B's leading run end, which comes after A.lastb, B.closed >=
// B.lead_seg * (e + 1) >= B.lead_seg * A.lastb. The summary is four 32-bit fields.
//
// Rows: a block holding the whole batch searches 32-bit prefix keys (prefix_whole,
// row_at) while the total fits them; otherwise each thread walks its slice again and
// offers the engine's Placer every request ending in it (dense: every element; varlen:
// every run end), with its work range and its start token; the row of an SM starting
// `off` units into it is (start, off / tokens). Divisions run in 32 bits whenever their
// operands fit.

namespace jitmeta {

// The type of sm_start's remainder: the width its quotient chose (not deduced).
template <class W> struct Width { typedef W type; };

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
    u64 closed;
    u32 lead_seg, lastb;
    __device__ __forceinline__ static Sm100Summary identity() { return {0ull, 0u, kNone}; }
    // "a then b"
    __device__ __forceinline__ static Sm100Summary compose(const Sm100Summary& a,
                                                           const Sm100Summary& b) {
        const bool has = a.lastb != kNone;  // b's leading run end started at a.lastb
        // closed = a.closed + b.closed - b.lead_seg * a.lastb (when has): a signed
        // 32 x 32 product added modulo 2^64, one multiply-add with no branch. Both
        // factors are below 2^31 (lead_seg is masked to 31 bits; a token index is below
        // the batch, whose tokens the API keeps within int32).
        const int back = has ? -(int)a.lastb : 0;
        Sm100Summary c;
        c.closed = a.closed + b.closed + (u64)((long long)back * (int)b.lead_seg);
        c.lead_seg = has ? a.lead_seg : a.lead_seg + b.lead_seg;  // one of them is 0
        c.lastb = b.lastb != kNone ? b.lastb : a.lastb;
        return c;
    }
    __device__ __forceinline__ Sm100Summary shfl_up(u32 delta) const {
        return {__shfl_up_sync(0xffffffffu, closed, delta),
                __shfl_up_sync(0xffffffffu, lead_seg, delta),
                __shfl_up_sync(0xffffffffu, lastb, delta)};
    }
    __device__ __forceinline__ Sm100Summary shfl(int lane) const {
        return {__shfl_sync(0xffffffffu, closed, lane), __shfl_sync(0xffffffffu, lead_seg, lane),
                __shfl_sync(0xffffffffu, lastb, lane)};
    }
};

template <int THREADS, u32 SPLIT_KV, bool VARLEN>
struct Sm100 {
    typedef Sm100Summary<VARLEN> S;
    typedef u64 Work;
    static constexpr int kThreads = THREADS;
    static constexpr bool kVarlen = VARLEN;
    static constexpr u32 kSlotWords = 8;  // 4 / 2 fields of 32 bits
    static constexpr u32 kLiveFields = VARLEN ? 4 : 2;  // no padding
    static constexpr u32 kTileAlign = 2;  // 8-byte summaries share the block's smem
    // The single-block variants' scans compose on every lane (Engine::whole): varlen's
    // composition is long enough that branching around it cost more. (An enumerator:
    // see Engine's kSkipWalks.)
    enum { kEveryLaneScans = VARLEN };

    __device__ __forceinline__ static u32 segs(int ctx) {
        return ((u32)ctx + (SPLIT_KV - 1u)) / SPLIT_KV;
    }

    // The summary of dense words (segs) summed: their work, next_n tokens each.
    __device__ __forceinline__ static S dense_summary(u64 words, u32 next_n) {
        return S{words * next_n};
    }

    // The tile word of a dense request: its segs (times next_n in 64 bits later).
    __device__ __forceinline__ static u32 dense_word(int ctx, u32 /*next_n*/) {
        return segs(ctx);
    }

    // w(s) = s * q + min(s, r), in the width of q (32 bits where the total fits).
    template <class W>
    __device__ __forceinline__ static W sm_start(u32 s, W q, typename Width<W>::type r,
                                                 u32 /*num_sms*/) {
        return (W)s * q + ((W)s < r ? (W)s : r);
    }

    // The work of a prefix of the batch (no leading run ends: see the top).
    __device__ __forceinline__ static u64 work(const S& prefix) {
        if constexpr (VARLEN) {
            return prefix.closed;
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
            S s = S::identity();
            u32 cur = b < end ? tile[pad(b)] : 0u;
            for (u32 i = b; i < end; ++i) {
                const u32 next = tile[pad(i + 1)];
                step(s, cur, next, lo + i);
                cur = next;
            }
            *after = cur;
            return s;
        }
    }

    // Varlen: appends token t (packed word `cur`; `next`: the token after it) to a
    // summary: a boundary moves the last boundary to t; a run end (the next token
    // starts a run) adds its run's work, or, when the summary has no boundary yet,
    // becomes the leading run end (its weight from position 0 in closed, its segs kept).
    __device__ __forceinline__ static void step(S& s, u32 cur, u32 next, u32 t) {
        if (cur & kBoundary) s.lastb = t;
        if (next & kBoundary) {  // t ends a run
            const u32 seg = cur & kSegMask;
            const bool lead = s.lastb == S::kNone;
            s.closed += (u64)seg * (t + 1u - (lead ? 0u : s.lastb));
            if (lead) s.lead_seg = seg;
        }
    }

    // q, r = total / num_sms, total % num_sms: a 32-bit division when the total fits.
    // (The u32 forms serve the engine's narrow rows: a total known to fit 32 bits.)
    __device__ __forceinline__ static void split_total(u32 total, u32 num_sms, u32* q,
                                                       u32* r) {
        *q = total / num_sms;
        *r = total % num_sms;
    }
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

    // a / b, in 32 bits when both fit.
    __device__ __forceinline__ static u32 quot(u32 a, u32 b) { return a / b; }
    __device__ __forceinline__ static u64 quot(u64 a, u64 b) {
        return ((a | b) >> 32) == 0 ? (u64)((u32)a / (u32)b) : a / b;
    }

    // First s in [0, num_sms] with w(s) >= x, for x <= total = num_sms * q + r, in
    // closed form: the first r SMs take q + 1 units, the others q (q >= 1 when x is past
    // the first r). No product below exceeds the total (r * (q + 1) <= num_sms * q + r),
    // so W may be 32 bits where the total fits them.
    template <class W>
    __device__ __forceinline__ static u32 first_sm(W x, W q, u32 r, u32 /*num_sms*/) {
        if (x == 0) return 0u;
        const W wide = (W)r * (q + 1u);  // where the SMs of q + 1 units end
        if (r != 0u && x <= wide) return (u32)quot(x - 1u, q + 1u) + 1u;
        return r + (u32)quot(x - wide - 1u, q) + 1u;
    }

    // A block holding the whole batch: the tile becomes the work up to and including
    // each element (dense: each request; varlen: each token, a run's work counted at its
    // last token), in 32 bits, so only when the total fits: dense below 2^32; varlen
    // below 2^31, because bit 31 keeps each token's run-start flag (row_at needs it).
    // Varlen also leaves, in the spare word after each group of 32 tokens, the start of
    // the run holding the group's last token. Words: at(k) for slice element k, t.after
    // past the slice (the next slice may be overwritten already).
    static constexpr u32 kKeyMask = VARLEN ? kSegMask : 0xffffffffu;
    template <u32 N, class Words>
    __device__ __forceinline__ static bool prefix_whole(const Words& at, u32* tile,
                                                        const Scanned<S>& t, u32 next_n,
                                                        u32* total) {
        const u64 all = work(t.block);
        if (all >> (VARLEN ? 31 : 32)) return false;
        *total = (u32)all;
        const u32 len = t.end - t.b;
        u32 acc = (u32)work(t.before);  // every sum below is at most the total
        if constexpr (!VARLEN) {
            for_each_index<N>(len, [&](u32 k) {
                acc += at(k) * next_n;
                tile[pad(t.b + k)] = acc;
            });
        } else {
            u32 rs = t.before.lastb == S::kNone ? 0u : t.before.lastb;  // current run start
            u32 cur = len ? at(0u) : 0u;
            for_each_index<N>(len, [&](u32 k) {  // lo = 0: i is the token
                const u32 i = t.b + k;
                const u32 next = k + 1u < len ? at(k + 1u) : t.after;
                const u32 flag = cur & kBoundary;
                if (flag) rs = i;
                if (next & kBoundary) acc += (cur & kSegMask) * (i - rs + 1u);  // a run end
                tile[pad(i)] = acc | flag;
                if ((i & 31u) == 31u) tile[pad(i) + 1u] = rs;  // the group's spare word
                cur = next;
            });
        }
        return true;
    }

    // The start of the run holding token e of the prefix tile: the last flagged token
    // at or before e in e's group of 32 (eight words at a time), else the run start the
    // previous group left in its spare word (token 0 is always flagged).
    __device__ __forceinline__ static u32 run_start(const u32* tile, u32 e) {
        const u32 g0 = e & ~31u;
        for (u32 top = e + 1u; top > g0; top = top > g0 + 8u ? top - 8u : g0) {
            u32 flags = 0;  // bit k: token top - 1 - k is flagged
#pragma unroll
            for (u32 k = 0; k < 8u; ++k)
                if (k < top - g0) flags |= (tile[pad(top - 1u - k)] >> 31) << k;
            if (flags) return top - (u32)__ffs(flags);
        }
        return tile[pad(g0 - 1u) + 1u];
    }

    // The row of work position x inside token e of the prefix tile (dense: request e).
    __device__ __forceinline__ static int2 row_at(const u32* tile, u32 e, u32 x, u32 next_n) {
        if constexpr (!VARLEN) {
            const u32 prev = e ? tile[pad(e - 1u)] : 0u;
            return make_int2((int)(e * next_n), (int)((x - prev) / next_n));
        } else {
            // e holds the first key past x, so it ends a run [rs, e]; no token before
            // it in that run ends one, so their keys all equal the key before rs: the
            // key of e - 1 (0 for none) is the work before the run, read beside the
            // run start's search instead of after it
            const u32 prev = e ? tile[pad(e - 1u)] & kSegMask : 0u;
            const u32 rs = run_start(tile, e);
            return make_int2((int)rs, (int)((x - prev) / (e - rs + 1u)));
        }
    }

    // The row of the SM starting `off` units into a request of `tokens` tokens from
    // token `first` (off < segs * tokens: the split is off / tokens).
    template <class W>
    __device__ __forceinline__ static int2 row(int first, u32 tokens, W off) {
        return make_int2(first, (int)quot(off, (W)tokens));
    }

    // The row of an SM starting at the total: past the last request, (T, 0).
    __device__ __forceinline__ static int2 end_row(u32 batch, u32 next_n) {
        return make_int2((int)(VARLEN ? batch : batch * next_n), 0);
    }

    // Offers the placer the requests ending in this thread's slice [t.b, t.end) of the
    // scanned tile, `before` being the composition of everything before the slice:
    // dense, the request of element i; varlen, the run ending at token i (a run end:
    // the next token starts a run), which started at the last boundary at or before i.
    // Sums in the placer's width (32 bits only where the total fits them).
    template <class Placer>
    __device__ __forceinline__ static void walk(const u32* tile, const Scanned<S>& t, u32 lo,
                                                const S& before, u32 next_n, Placer& placer) {
        typedef typename Placer::Width W;
        W acc = (W)work(before);  // the work of the requests ending before the slice
        if constexpr (!VARLEN) {
            for (u32 i = t.b; i < t.end; ++i) {
                const W hi = acc + (W)tile[pad(i)] * next_n;
                if (placer.hits(hi)) placer.place(acc, hi, (int)((lo + i) * next_n), next_n);
                acc = hi;
            }
        } else {
            u32 rs = before.lastb == S::kNone ? 0u : before.lastb;  // current run start
            u32 cur = t.b < t.end ? tile[pad(t.b)] : 0u;
            for (u32 i = t.b; i < t.end; ++i) {
                const u32 next = tile[pad(i + 1)];
                if (cur & kBoundary) rs = lo + i;
                if (next & kBoundary) {  // the run [rs, lo + i] ends here
                    const u32 tokens = lo + i - rs + 1u;
                    const W hi = acc + (W)(cur & kSegMask) * tokens;
                    if (placer.hits(hi)) placer.place(acc, hi, (int)rs, tokens);
                    acc = hi;
                }
                cur = next;
            }
        }
    }
};

}  // namespace jitmeta
