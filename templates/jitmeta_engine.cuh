// jitmeta: the kernel machinery every schedule format shares, as ordinary CUDA C++.
//
// Self-contained (NVRTC has no standard headers). The generated stub
// (paged_mqa_metadata.cu.j2) inlines this file, then the header of one format
// (jitmeta_schedule.cuh: "smxx"/"sm90"; jitmeta_sm100.cuh: "sm100"), and instantiates
// Engine<Format>.
//
// One block owns a "slab" of elements [lo, lo + n): requests (dense) or tokens
// (varlen). It loads one 32-bit word per element into a shared tile (plus, varlen, a
// halo word: the next token's), summarizes the tile (each thread walks a contiguous
// slice; a block-wide scan of the slice summaries joins them), and then every thread
// walks its slice again and writes the rows of the SMs whose start falls in a work
// unit (a request, an atom, a run) that its walk credits (Placer). The static and
// dynamic variants run one block over the whole batch; the chunked variant is one
// cooperative grid whose blocks share the slabs and pass their summaries to each other
// through a workspace (Engine::chunked), so each block knows its carry-in and the
// grand total; there, slabs of 8 elements per thread with aligned inputs skip the tile
// in phase 1 (summed in registers, a summary per warp part kept for phase 2).
//
// A format is a struct providing:
//   S                      the scan summary: identity(), compose(a, b) ("a then b"),
//                          associative; shfl_up(d) / shfl(lane) (warp exchange)
//   Work                   the type of work sums (u32 or u64)
//   kThreads, kVarlen      block size, mode
//   kSlotWords, kTileAlign workspace words per block slot; tile words rounded up to
//                          a multiple of kTileAlign (8-byte summaries next to a tile)
//   kLiveFields            the leading 32-bit fields of S that carry anything (those
//                          after them are padding, always 0: never exchanged or kept)
//   kEveryLaneScans        whether the single-block variants' warp scans compose on
//                          every lane (warp_inclusive_scan): for long compositions
//   segs(ctx)              kv splits of a context length
//   dense_word(ctx, mult)  the tile word of a dense request (mult: atoms or tokens)
//   work(S)                the work of a prefix summary (a prefix starts at element 0)
//   split_total(total, num_sms, &q, &r)  q, r = total / num_sms, total % num_sms
//   sm_start(s, q, r, sms) the start of SM s in work units (sms: an Sms, below)
//   first_sm(x, q, r, sms) the first s in [0, sms.n] with sm_start(s) >= x (closed
//                          form; x <= total)
//   summarize_slice(tile, lo, b, end, mult, &after)  the summary of tile slice [b, end)
//   walk(tile, t, lo, before, mult, placer)  visits the work units credited in this
//                          thread's slice in order: placer.hits(hi) / placer.place(...)
//   row(first, div, off)   the row of the SM starting `off` units into a unit
//   end_row(batch, mult)   the row of an SM starting at the total
//   prefix_whole<N>(at, tile, t, mult, &total)  a whole batch held by one block:
//                          writes non-decreasing keys into the tile (the work up to and
//                          including each element, under kKeyMask) and gives the 32-bit
//                          total; at(k) (k < the slice's length) gives the word of slice
//                          element k, t.after the word after the slice; the words come
//                          from the tile itself (N = 0: each read before its element's
//                          key is written) or from registers (N != 0, see
//                          for_each_index); false (nothing written) when the format
//                          cannot (a total too large): the rows are then walked
//   kKeyMask               the bits of a prefix word that hold its key
//   row_at(tile, e, x, mult)  the row of work position x, which lies in element e of
//                          the prefix tile
//
// Varlen tile words pack seg | boundary << 31 (seg = ceil(ctx / split_kv) fits 31 bits
// because ctx is a non-negative int32; boundary: the token starts a run of equal
// indices, always true for token 0 and for the halo past the last token).
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

// The SMs of the schedule: their count, and which of them take one unit more than the
// others when the total does not divide evenly (the r = total % n "wide" SMs): the
// first r (wide_last = 0: "smxx", "sm100") or the last r (wide_last = 1: "sm90"; a
// kernel argument, so one cubin serves both atom formats). Converts to the count.
struct Sms {
    u32 n;
    u32 wide_last;
    __host__ __device__ __forceinline__ operator u32() const { return n; }
};

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

// Calls f(k) for k = 0, 1, ..., len - 1 in order. With N != 0 (len <= N) the loop is
// unrolled and k a constant in each call, so f may index an array held in registers.
template <u32 N, class Fn>
__device__ __forceinline__ void for_each_index(u32 len, const Fn& f) {
    if constexpr (N != 0u) {
#pragma unroll
        for (u32 k = 0; k < N; ++k)
            if (k < len) f(k);
    } else {
        for (u32 k = 0; k < len; ++k) f(k);
    }
}

// A slab scanned by the block: this thread's slice [b, end) of the tile, the word
// after it (varlen), the composition of the slices before it within the slab, and the
// whole slab.
template <class S>
struct Scanned {
    u32 b, end, after;
    S before, block;
};

// ... and the slice's own summary, where the engine skips walks (Engine::kSkipWalks).
template <class S>
struct ScannedOwn : Scanned<S> {
    S own;
};

template <bool B, class T, class U> struct Pick { typedef T type; };
template <class T, class U> struct Pick<false, T, U> { typedef U type; };

template <class F>
struct Engine : F {
    typedef typename F::S S;
    typedef typename F::Work Work;
    static constexpr int THREADS = F::kThreads;
    static constexpr bool VARLEN = F::kVarlen;
    static constexpr int kWarps = THREADS / 32;
    // Whether a slice's walk after the exchange is skipped when it can place no row
    // (may_place, below); where it is, the scanned slab keeps each slice's summary.
    // Only with 64-bit work sums, which never wrap: 32-bit ones (as upstream's) may
    // wrap past a slice's end, which then bounds nothing.
    // (Enumerators, not static constexpr members: with NVRTC 13.5, adding such a member
    // changed the machine code of variants that never use it.)
    enum { kSkipWalkThreads = 1024 };
    enum { kSkipWalks = sizeof(Work) == 8 && THREADS >= kSkipWalkThreads };
    typedef typename Pick<kSkipWalks, ScannedOwn<S>, Scanned<S>>::type Scan;

    // Shared scratch of the block scan: one summary per warp, plus two broadcast slots.
    // Once a scan is over, the warp slots hold the row queue (Placer) and the first
    // word of broadcast[1] counts its entries; broadcast[0] passes a block's carry-in
    // (chunked).
    struct Scratch {
        S warp[kWarps];
        S broadcast[2];
    };

    // Units holding more than kQueueAfter SM starts are queued (Placer) and their rows
    // shared by the whole block; a queue entry is kEntryWords words: first, div, the
    // first SM, the SM past the last, the unit's start (64 bits). As many entries as
    // the warp slots hold (none: every unit is written by its own thread).
    static constexpr u32 kQueueAfter = 8;
    static constexpr u32 kEntryWords = 6;
    static constexpr u32 kQueueCap = (u32)(sizeof(S) * kWarps / 4) / kEntryWords;

    __device__ __forceinline__ static u32* queue_count(Scratch& sc) {
        return reinterpret_cast<u32*>(&sc.broadcast[1]);
    }
    __device__ __forceinline__ static u32* queue_entry(Scratch& sc, u32 k) {
        return reinterpret_cast<u32*>(sc.warp) + k * kEntryWords;
    }

    // Words a tile of n elements is declared with (its halo and padding included).
    __host__ __device__ static constexpr u32 tile_alloc(u32 words) {
        return (words + F::kTileAlign - 1u) / F::kTileAlign * F::kTileAlign;
    }

    // Inclusive scan of one summary per lane of a warp (lane 31 gets the warp's).
    // kEveryLane: every lane composes, those below d with the identity, instead of
    // branching around the composition (its lanes diverge at every step). The
    // single-block variants of a format with a long composition (F::kEveryLaneScans)
    // scan so; the chunked kernels keep the branch (measured on an H100: every lane
    // composing shortened the "sm100" varlen single-block scans and lengthened the
    // chunked ones).
    template <bool kEveryLane = false>
    __device__ __forceinline__ static S warp_inclusive_scan(S v) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const S o = v.shfl_up(d);
            if constexpr (kEveryLane) {
                v = S::compose(lane >= d ? o : S::identity(), v);
            } else {
                if (lane >= d) v = S::compose(o, v);
            }
        }
        return v;
    }

    // The exclusive prefix of a lane, given the lanes' inclusive scan (lane 0: identity).
    __device__ __forceinline__ static S warp_exclusive(const S& inc) {
        S exc = inc.shfl_up(1);
        if ((threadIdx.x & 31) == 0) exc = S::identity();
        return exc;
    }

    // Inclusive-then-exclusive block scan of one summary per thread. Returns the
    // exclusive prefix of this thread; *block_total gets the whole block's summary.
    // Also empties the row queue (between its first two barriers, where nothing reads
    // broadcast[1]; whatever read the queue last did so before a barrier that precedes
    // this call).
    template <bool kEveryLane = false>
    __device__ __forceinline__ static S block_exclusive_scan(S v, Scratch& sc,
                                                             S* block_total) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const S inc = warp_inclusive_scan<kEveryLane>(v);
        const S exc = warp_exclusive(inc);
        if (lane == 31) sc.warp[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            const S winc =
                warp_inclusive_scan<kEveryLane>(lane < kWarps ? sc.warp[lane] : S::identity());
            const S wexc = warp_exclusive(winc);  // every lane shuffles
            if (lane < kWarps) sc.warp[lane] = wexc;
            if (lane == 31) sc.broadcast[0] = winc;
        }
        if (threadIdx.x == 0) *queue_count(sc) = 0u;
        __syncthreads();
        const S result = S::compose(sc.warp[warp], exc);
        *block_total = sc.broadcast[0];
        __syncthreads();  // scratch may be reused right after
        return result;
    }

    // Packed varlen word of token e (e < batch): seg | boundary << 31.
    __device__ __forceinline__ static u32 varlen_word(int c, int id, int prev_id, u32 e) {
        return F::segs(c) | ((e == 0 || id != prev_id) ? kBoundary : 0u);
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
                                                 u32 base, u32 batch, u32 mult) {
#pragma unroll
        for (int k = 0; k < kLoadUnroll; ++k) {
            const u32 i = base + (u32)k * THREADS + threadIdx.x;
            if (i < n)
                tile[pad(i)] = VARLEN ? varlen_word(f.c[k], f.id[k], f.pid[k], lo + i)
                                      : F::dense_word(f.c[k], mult);
        }
        if (VARLEN && base == 0 && threadIdx.x == 0) {
            const u32 e = lo + n;
            tile[pad(n)] = e < batch ? varlen_word(f.halo_c, f.halo_id, f.halo_pid, e)
                                     : kBoundary;
        }
    }

    // Loads slab [lo, lo + n) into tile elements 0..n-1 and a halo word into element n.
    // dense: F::dense_word(ctx[e, next_n - 1], mult); varlen: seg | boundary << 31, the
    // halo being the next token's word (or a boundary when there is none). Coalesced,
    // kLoadUnroll loads per thread in flight; every load of a round is issued before
    // any of its values is used, so a round costs one memory latency.
    __device__ __forceinline__ static void load_tile(u32* tile, const int* __restrict__ ctx,
                                                     const int* __restrict__ idx, u32 lo,
                                                     u32 n, u32 batch, u32 next_n,
                                                     u32 mult) {
        for (u32 base = 0; base < n; base += THREADS * kLoadUnroll) {
            Fetched f;
            fetch(f, ctx, idx, lo, n, base, batch, next_n);
            store(tile, f, lo, n, base, batch, mult);
        }
    }

    // Slice of the tile owned by this thread: contiguous, ceil(n / THREADS) long.
    __device__ __forceinline__ static void slice(u32 n, u32* b, u32* end) {
        const u32 per = (n + THREADS - 1) / THREADS;
        const u32 bb = min(n, threadIdx.x * per);
        *b = bb;
        *end = min(n, bb + per);
    }

    // (kEveryLane: as in warp_inclusive_scan.)
    template <bool kEveryLane = false>
    __device__ __forceinline__ static Scan scan_tile(const u32* tile, u32 lo, u32 n,
                                                           u32 mult, Scratch& sc) {
        Scan t;
        slice(n, &t.b, &t.end);
        t.after = 0u;
        if constexpr (kSkipWalks) {
            t.own = F::summarize_slice(tile, lo, t.b, t.end, mult, &t.after);
            t.before = block_exclusive_scan<kEveryLane>(t.own, sc, &t.block);
        } else {
            t.before = block_exclusive_scan<kEveryLane>(
                F::summarize_slice(tile, lo, t.b, t.end, mult, &t.after), sc, &t.block);
        }
        return t;
    }

    // --- rows ------------------------------------------------------------------------
    //
    // After the scan every thread walks its slice once more (F::walk) with the work
    // before it, and each work unit [acc, hi) credited there (a request, an atom, a run)
    // is offered to the Placer, which holds the first SM s not yet placed and its start
    // x (x >= acc: every SM starting earlier belongs to an earlier unit). A unit gets
    // the rows of the SMs starting inside it: at most kQueueAfter of them written at
    // once by this thread; more (one long request holding many SMs) are queued in the
    // scratch, and after a barrier the whole block writes the queued rows, one SM per
    // thread (drain). A full queue: the thread writes them all itself. No prefix array
    // and no search over memory: the first SM at or past a work position is a closed
    // form (F::first_sm). Where sums never wrap, a slice holding no SM start is not
    // walked at all (may_place). W: the width of its sums, Work, or 32 bits where a
    // 64-bit format's total fits them (narrow rows, below).
    template <class W>
    struct PlacerOf {
        typedef W Width;
        int2* rows;
        Scratch* sc;
        W q;
        u32 r, s;
        Sms num_sms;
        W x;  // sm_start(s), or ~0 once s > num_sms
        bool queue;  // may queue (the whole block drains the queue after a barrier)

        __device__ __forceinline__ void seek(u32 sm) {
            s = sm;
            x = sm <= num_sms ? F::sm_start(sm, q, r, num_sms) : ~(W)0;
        }
        // A placer for this thread's walk, `work` units into the batch (q, r as
        // F::split_total gives them; `queue`: whether units may be queued).
        __device__ __forceinline__ static PlacerOf at(int* out, Scratch& sc, W q, u32 r,
                                                     Sms num_sms, bool queue, W work) {
            PlacerOf p;
            p.rows = reinterpret_cast<int2*>(out);
            p.sc = &sc;
            p.q = q;
            p.r = r;
            p.num_sms = num_sms;
            p.queue = queue;
            p.seek(F::first_sm(work, q, r, num_sms));
            return p;
        }
        // Whether some SM starts before hi (then it starts in the unit ending at hi).
        __device__ __forceinline__ bool hits(W hi) const { return x < hi; }

        // The rows of the SMs starting in [acc, hi): first and div as F::row takes them.
        __device__ __forceinline__ void place(W acc, W hi, int first, u32 div) {
            const u32 after = s + kQueueAfter;
            if (kQueueCap != 0 && queue && after <= num_sms &&
                F::sm_start(after, q, r, num_sms) < hi) {
                const u32 s_hi = F::first_sm(hi, q, r, num_sms);
                const u32 k = atomicAdd(queue_count(*sc), 1u);
                if (k < kQueueCap) {
                    u32* e = queue_entry(*sc, k);
                    e[0] = (u32)first;
                    e[1] = div;
                    e[2] = s;
                    e[3] = s_hi;
                    e[4] = (u32)acc;
                    e[5] = (u32)((u64)acc >> 32);
                    seek(s_hi);
                    return;
                }
            }
            do {
                rows[s] = F::row(first, div, x - acc);
                seek(s + 1u);
            } while (x < hi);
        }
    };
    typedef PlacerOf<Work> Placer;

    // Whether a walk of the slice whose summary is `own`, after `before` (a prefix of
    // the batch), can place a row: some SM starts before the slice's end. Asked only
    // where kSkipWalks: sums that never wrap, and blocks of 1024 threads, whose chunked
    // slabs (8192 elements) hold about one SM start at the batches that choose them, so
    // most of their 32 warps skip the walk. (A static tile of 8192 holds every start,
    // but emit_whole takes it unless its total outgrows 32-bit keys.) In blocks of 256
    // and 512 threads the slab holds several starts, most warps walk anyway, and the
    // check made them slower (measured on an H100 at 65536).
    template <class P>
    __device__ __forceinline__ static bool may_place(const P& p, const S& before,
                                                     const S& own) {
        return p.hits((typename P::Width)F::work(S::compose(before, own)));
    }

    // The queued rows, THREADS at a time across the entries (after a barrier: every
    // entry is written).
    template <class P>
    __device__ __forceinline__ static void drain(const P& p) {
        if (kQueueCap == 0) return;
        __syncthreads();
        const u32 count = min(*queue_count(*p.sc), kQueueCap);
        u32 skip = threadIdx.x;  // this thread's next row, counted from entry k's first
        for (u32 k = 0; k < count; ++k) {
            const u32* e = queue_entry(*p.sc, k);
            const u32 s_lo = e[2], n_rows = e[3] - e[2];
            if (skip < n_rows) {
                const int first = (int)e[0];
                const u32 div = e[1];
                const typename P::Width acc = (typename P::Width)((u64)e[5] << 32 | e[4]);
                for (; skip < n_rows; skip += THREADS) {
                    const u32 sm = s_lo + skip;
                    p.rows[sm] = F::row(first, div, F::sm_start(sm, p.q, p.r, p.num_sms) - acc);
                }
            }
            skip -= n_rows;
        }
    }

    // The rows of a whole batch held by one block, SIMT-parallel: the tile becomes the
    // prefix keys (F::prefix_whole, the words given by at: see there) and thread s
    // searches them for the element holding SM s's start (the first key past it).
    // Returns false, nothing written, when the format leaves the batch to the walk.
    template <u32 N, class Words>
    __device__ __forceinline__ static bool emit_whole(const Words& at, u32* tile,
                                                      const Scanned<S>& t, u32 n, u32 batch,
                                                      u32 mult, Sms num_sms,
                                                      int* __restrict__ out) {
        u32 total;
        if (!F::template prefix_whole<N>(at, tile, t, mult, &total)) return false;  // uniform: t.block
        __syncthreads();
        const u32 q = total / num_sms, r = total % num_sms;
        for (u32 s = threadIdx.x; s <= num_sms; s += THREADS) {
            const u32 x = F::sm_start(s, q, r, num_sms);
            int2 row = F::end_row(batch, mult);  // start(s) == total
            if (x < total) {  // then some key exceeds x: the last one is the total
                // the first key past x lies in [a, b]: eight-way steps while the range
                // is long (seven probes loaded at once, one dependent step per eighth:
                // a search is a chain of shared-memory latencies), then halving
                u32 a = 0, b = n;
                while (b - a >= 8u) {
                    const u32 len = b - a;
                    u32 c = 0;  // probes at or below x (keys do not decrease: the first c)
#pragma unroll
                    for (u32 j = 1; j < 8u; ++j)
                        c += (tile[pad(a + ((len * j) >> 3))] & F::kKeyMask) <= x ? 1u : 0u;
                    if (c < 7u) b = a + ((len * (c + 1u)) >> 3);  // a probe past x
                    if (c != 0u) a += ((len * c) >> 3) + 1u;      // past a probe at or below x
                }
                while (a < b) {
                    const u32 mid = (a + b) >> 1;
                    if ((tile[pad(mid)] & F::kKeyMask) > x) b = mid; else a = mid + 1u;
                }
                row = F::row_at(tile, a, x, mult);
            }
            reinterpret_cast<int2*>(out)[s] = row;
        }
        return true;
    }

    // Writes the rows of every SM whose start lies in the scanned slab held in the tile
    // (carry-in: `carry` composed of all earlier slabs) by walking each thread's slice
    // (F::walk). `total` is the grand total (ignored when `whole`: the slab is the
    // whole batch and its own work is the total); `last` says this slab also owns the
    // rows of the SMs starting at the total (F::end_row). W: the width of the placement
    // (32 bits only where the total fits them).
    template <class W = Work>
    __device__ __forceinline__ static void emit_walk(u32* tile, const Scan& t, u32 lo,
                                                     S carry, Work total, bool whole,
                                                     bool last, u32 batch, u32 mult,
                                                     Sms num_sms, int* __restrict__ out,
                                                     Scratch& sc) {
        const S before = S::compose(carry, t.before);
        if (whole) total = F::work(S::compose(carry, t.block));
        W q;
        u32 r;
        F::split_total((W)total, num_sms, &q, &r);
        PlacerOf<W> p = PlacerOf<W>::at(out, sc, q, r, num_sms, true, (W)F::work(before));
        if constexpr (kSkipWalks) {
            if (may_place(p, before, t.own)) F::walk(tile, t, lo, before, mult, p);
        } else {
            F::walk(tile, t, lo, before, mult, p);
        }
        if (last) {  // the SMs starting at the total (or later: none)
            const int2 end = F::end_row(batch, mult);
            for (u32 e = F::first_sm((W)total, q, r, num_sms) + threadIdx.x; e <= num_sms;
                 e += THREADS)
                p.rows[e] = end;
        }
        drain(p);
    }

    // emit_walk, except that a whole batch in one block goes to emit_whole first,
    // which may take it: one block of many warps is bound by the instructions it
    // issues, and a walk computes each row in one lane while its warp waits, where a
    // search over prefix sums computes 32 rows per warp instruction (measured on an
    // H200: 26.5K warp instructions against 14.0K at batch 8192). Small chunked blocks
    // are bound by latency instead, and the walk has the shorter chain (no prefix
    // pass, no barrier before the rows, no dependent search). Uniform control flow
    // around the barriers.
    template <class W = Work>
    __device__ __forceinline__ static void emit_scanned(u32* tile, const Scan& t, u32 lo,
                                                        u32 n, S carry, Work total,
                                                        bool whole, bool last, u32 batch,
                                                        u32 mult, Sms num_sms,
                                                        int* __restrict__ out, Scratch& sc) {
        const u32 b = t.b;
        if (whole && emit_whole<0u>([tile, b](u32 k) { return tile[pad(b + k)]; }, tile, t, n,
                                    batch, mult, num_sms, out))
            return;
        emit_walk<W>(tile, t, lo, carry, total, whole, last, batch, mult, num_sms, out, sc);
    }

    // Scans a slab reloaded into the tile and writes its rows (see emit_scanned).
    __device__ __forceinline__ static void emit_reloaded(u32* tile, u32 lo, u32 n, S carry,
                                                         Work total, u32 batch, u32 mult,
                                                         Sms num_sms, int* __restrict__ out,
                                                         Scratch& sc) {
        const Scan t = scan_tile(tile, lo, n, mult, sc);
        emit_scanned(tile, t, lo, n, carry, total, false, false, batch, mult, num_sms, out, sc);
    }

    // --- chunked variant: one cooperative launch ---------------------------------------
    //
    // gridDim.x co-resident blocks (a cooperative launch, at most THREADS and kMaxGrid)
    // share the slabs of CHUNK elements: block g takes a contiguous run of them.
    // Phase 1: each block summarizes its slabs (kept in the workspace) and publishes the
    // composition in its slot. Every block then waits for all slots, scans them (its
    // carry-in and the grand total) and, phase 2, emits the rows of its slabs that
    // contain an SM start: the one still in shared memory from its tile, a slab summed
    // in registers by reloading only its warp parts that hold a start, and a stored slab
    // by reloading it whole.
    //
    // Workspace (u32 words, zeroed once when allocated, used by one launch at a time):
    //   [0]                      epoch: how many launches have used it (mod 2^32)
    //   [1]                      blocks of this launch that have published (the
    //                            counted exchange; back to 0 when the launch ends)
    //   [4 + kSlotWords g, ...)  slot of block g < kMaxGrid: one 64-bit word per 32-bit
    //                            summary field, (tag << 32) | field, tag = epoch + 1
    //                            once published
    //   [kResultBase, + 2 kSlotWords kMaxGrid)
    //                            results (the counted exchange): field k of block g's
    //                            carry-in, then of the grand total (k + kFields), is the
    //                            tagged 64-bit word k kMaxGrid + g, so that a warp's
    //                            stores of one field to 32 blocks are contiguous
    //   [kSlabBase, ...)         summary of every slab, sizeof(S) / 4 words each
    //   [part_base(slabs), ...)  register slabs (kRegSlabs): the summary of each warp's
    //                            part of every slab, [slab][warp] (written only for the
    //                            slabs summarized in registers)
    // A launch reads the epoch, publishes its slot with tag epoch + 1 and waits for that
    // tag in every field of every slot (or, in the counted exchange, of its result); the
    // epoch is advanced once every slot is known to be published (so every block has
    // read it). Each 64-bit word is written and read whole (single-copy atomic), so a
    // field carrying this launch's tag is this launch's value:
    // no fence and no second read. Slots and results sit at fixed places whatever the
    // grid and nothing else is ever written there, so a stale tag is never ahead of the
    // epoch and they need no reset (the count is set back to 0 by the launch that
    // raised it).
    static constexpr u32 kSlotWords = F::kSlotWords;
    static constexpr u32 kMaxGrid = 1024;
    static constexpr u32 kCountWord = 1u;
    static constexpr u32 kSlotBase = 4u;
    static constexpr u32 kResultBase = kSlotBase + kSlotWords * kMaxGrid;
    static constexpr u32 kSlabBase = kResultBase + 2u * kSlotWords * kMaxGrid;
    static constexpr u32 kSpinLimit = 1u << 24;  // ~1 s of polling: then trap, never hang
    static constexpr u32 kFields = sizeof(S) / 4;
    // fields written to and read from slots, results and the tile (the rest are 0)
    static constexpr u32 kLive = F::kLiveFields;
    static_assert(kLive >= 1u && kLive <= kFields, "live fields lead the summary");
    static_assert(sizeof(S) % 4 == 0, "a summary is a whole number of 32-bit fields");
    static_assert(2 * kFields <= kSlotWords, "a slot holds one 64-bit word per field");
    static_assert(kSlabBase % 2 == 0, "slab summaries (64-bit fields) stay 8-byte aligned");

    // Where the part summaries of register slabs start: after the slab summaries, from
    // an even word (8-byte fields).
    __device__ __forceinline__ static u32 part_base(u32 slabs) {
        const u32 end = kSlabBase + slabs * kFields;
        return end + (end & 1u);
    }

    __device__ __forceinline__ static u32* slot_of(u32* ws, u32 g) {
        return ws + kSlotBase + kSlotWords * g;
    }
    // block g's carry-in (its fields kMaxGrid 64-bit words apart); the grand total is
    // kFields fields further (kTotalOffset words)
    static constexpr u32 kResultStride = kMaxGrid;  // in 64-bit words
    static constexpr u32 kTotalOffset = 2u * kFields * kResultStride;
    static_assert(2u * kFields <= kSlotWords, "results fit two slots per block");
    __device__ __forceinline__ static u32* result_of(u32* ws, u32 g) {
        return ws + kResultBase + 2u * g;
    }

    // Writes v's fields tagged, 64-bit words STRIDE words apart (1: a slot).
    template <u32 STRIDE = 1u>
    __device__ __forceinline__ static void publish(u32* slot, const S& v, u32 tag) {
        volatile u64* vs = reinterpret_cast<volatile u64*>(slot);
        const u32* f = reinterpret_cast<const u32*>(&v);
#pragma unroll
        for (u32 k = 0; k < kLive; ++k) vs[k * STRIDE] = (u64)tag << 32 | f[k];
    }

    template <u32 STRIDE = 1u>
    __device__ __forceinline__ static S wait_slot(const u32* slot, u32 tag) {
        const volatile u64* vs = reinterpret_cast<const volatile u64*>(slot);
        S v;
        u32* f = reinterpret_cast<u32*>(&v);
#pragma unroll
        for (u32 k = kLive; k < kFields; ++k) f[k] = 0u;
        for (u32 spins = 0;; ++spins) {
            bool ready = true;
#pragma unroll
            for (u32 k = 0; k < kLive; ++k) {
                const u64 word = vs[k * STRIDE];
                f[k] = (u32)word;
                ready &= (u32)(word >> 32) == tag;
            }
            if (ready) return v;
            if (spins == kSpinLimit) __trap();
            __nanosleep(32);
        }
    }

    // --- chunked phase 1 in registers --------------------------------------------------
    //
    // A slab that is not its block's last needs only its summary in phase 1 (phase 2
    // reloads the warp parts of it that hold an SM start, from the part summaries kept
    // in the workspace). When the slab is 8 elements per thread and
    // the inputs are 16-byte aligned, thread t loads its own 8 consecutive elements
    // [lo + 8t, lo + 8t + 8) with 16-byte loads (the next slab's are in flight while
    // these are summarized), summarizes them in registers, and its warp composes the
    // lanes' summaries in order by shuffles and leaves the warp's in a slot in the tile.
    // No barrier inside a group of kRegGroup slabs, so warps drift apart and one's loads
    // overlap another's arithmetic; once a group is done, the block composes each
    // slab's warps (one warp per slab) and warp 0 the slabs. No per-thread slice walks,
    // no block scan per slab. Dense: next_n 1 (a request is one word; wider rows are
    // stored and scanned), the words simply summed. Varlen: the index before the
    // thread's tokens and the token after them come from its warp neighbours (lanes 0
    // and 31 load theirs), and the packed words go through F::step as the tile's do.
    template <u32 CHUNK>
    static constexpr bool kRegSlabs = CHUNK == 8u * THREADS;
    // Slabs of a group: a slot per warp and slab plus a summary per slab fit the tile.
    template <u32 CHUNK>
    static constexpr u32 kRegGroup =
        tile_words(CHUNK) / ((kWarps + 1u) * kFields) < 32u
            ? tile_words(CHUNK) / ((kWarps + 1u) * kFields) : 32u;

    struct RegFetched {
        int4 v[VARLEN ? 4 : 2];  // context lengths v[0..1]; varlen: indices v[2..3]
        int pid, nc, nid;  // varlen, lane 0: the index before; lane 31: the token after
    };

    // Whether a launch can summarize slabs in registers (uniform).
    __device__ __forceinline__ static bool reg_capable(const int* ctx, const int* idx,
                                                       u32 next_n) {
        const u64 addr = reinterpret_cast<u64>(ctx) | (VARLEN ? reinterpret_cast<u64>(idx) : 0u);
        return (addr & 15u) == 0u && (VARLEN || next_n == 1u);
    }

    // Issues the loads of position `pos` of a register slab [lo, lo + 8 * THREADS) (not
    // the batch's last: the token after it exists): elements [lo + 8 pos, lo + 8 pos + 8).
    // Positions are those of the threads of whole warps: a lane's neighbours hold the
    // next and the previous 8.
    __device__ __forceinline__ static void reg_fetch(RegFetched& f, const int* __restrict__ ctx,
                                                     const int* __restrict__ idx, u32 lo,
                                                     u32 batch, u32 pos) {
        const u32 lane = threadIdx.x & 31u, e0 = lo + pos * 8u;
        if constexpr (VARLEN) {
            const int4* pc = reinterpret_cast<const int4*>(ctx + e0);
            const int4* pi = reinterpret_cast<const int4*>(idx + e0);
            f.v[0] = __ldg(pc);
            f.v[1] = __ldg(pc + 1);
            f.v[2] = __ldg(pi);
            f.v[3] = __ldg(pi + 1);
            f.pid = lane == 0u ? __ldg(idx + (e0 ? e0 - 1u : 0u)) : 0;
            const u32 e1 = min(e0 + 8u, batch - 1u);
            f.nc = lane == 31u ? __ldg(ctx + e1) : 0;
            f.nid = lane == 31u ? __ldg(idx + e1) : 0;
        } else {
            const int4* p = reinterpret_cast<const int4*>(ctx + e0);
            f.v[0] = __ldg(p);
            f.v[1] = __ldg(p + 1);
        }
    }

    // The 8 tile words of position `pos` of a fetched register slab and, varlen, the
    // word after them (waiting for the loads).
    __device__ __forceinline__ static void reg_words(const RegFetched& f, u32 lo, u32 pos,
                                                     u32 mult, u32 (&w)[9]) {
        const u32 lane = threadIdx.x & 31u, e0 = lo + pos * 8u;
        const int c[8] = {f.v[0].x, f.v[0].y, f.v[0].z, f.v[0].w,
                          f.v[1].x, f.v[1].y, f.v[1].z, f.v[1].w};
        if constexpr (!VARLEN) {
#pragma unroll
            for (u32 k = 0; k < 8u; ++k) w[k] = F::dense_word(c[k], mult);
            w[8] = 0u;
        } else {
            const int id[8] = {f.v[2].x, f.v[2].y, f.v[2].z, f.v[2].w,
                               f.v[3].x, f.v[3].y, f.v[3].z, f.v[3].w};
            int pid = __shfl_up_sync(0xffffffffu, id[7], 1);
            int nc = __shfl_down_sync(0xffffffffu, c[0], 1);
            int nid = __shfl_down_sync(0xffffffffu, id[0], 1);
            if (lane == 0u) pid = f.pid;
            if (lane == 31u) {
                nc = f.nc;
                nid = f.nid;
            }
#pragma unroll
            for (u32 k = 0; k < 8u; ++k)
                w[k] = varlen_word(c[k], id[k], k ? id[k - 1u] : pid, e0 + k);
            w[8] = varlen_word(nc, nid, id[7], e0 + 8u);
        }
    }

    // The summary of the 8 words of position `pos` (w[8]: the word after them).
    __device__ __forceinline__ static S fold_words(const u32 (&w)[9], u32 lo, u32 pos,
                                                   u32 mult) {
        if constexpr (!VARLEN) {
            u64 sum = 0;
#pragma unroll
            for (u32 k = 0; k < 8u; ++k) sum += w[k];
            return F::dense_summary(sum, mult);
        } else {
            const u32 e0 = lo + pos * 8u;
            S s = S::identity();
#pragma unroll
            for (u32 k = 0; k < 8u; ++k) F::step(s, w[k], w[k + 1u], e0 + k);
            return s;
        }
    }

    // The composition of a warp's summaries in lane order, in lane 0 (a tree: at step d
    // lane l takes lane l + d's; only lane 0's chain is kept).
    __device__ __forceinline__ static S warp_total(S v) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) v = S::compose(v, v.shfl(lane + d));
        return v;
    }

    // A summary as 32-bit words (the tile is only 4-byte aligned).
    __device__ __forceinline__ static void put(u32* p, const S& v) {
        const u32* w = reinterpret_cast<const u32*>(&v);
#pragma unroll
        for (u32 k = 0; k < kLive; ++k) p[k] = w[k];
    }
    __device__ __forceinline__ static S get(const u32* p) {
        S v;
        u32* w = reinterpret_cast<u32*>(&v);
#pragma unroll
        for (u32 k = 0; k < kFields; ++k) w[k] = k < kLive ? p[k] : 0u;
        return v;
    }

    // --- a slab read into registers, words kept in the tile -----------------------------
    //
    // A slab of 8 elements per thread (CHUNK == 8 * THREADS) that must stay in shared
    // memory for its rows (a static tile: the whole batch; a chunked block's last slab),
    // when its inputs allow 16-byte loads (reg_capable), is loaded as a register slab
    // is: thread t reads its own elements [lo + 8t, lo + 8t + 8) (16-byte loads; one
    // clamped load each in the thread holding the batch's end when it is not a multiple
    // of 8), summarizes them in registers for the block scan and writes their words, and
    // the halo, into the tile. Against
    // load_tile + scan_tile: 4 (varlen) or 2 (dense) loads per thread instead of 24 or
    // 8, and no read of the tile before the scan. Slices are [8t, 8t + 8) clipped to
    // the slab, not slice()'s.

    // Clamped scalar loads of position `pos` of a slab at lo (elements past the batch
    // read its last one; dense: next_n 1), in the layout reg_fetch leaves.
    __device__ __forceinline__ static void reg_fetch_scalar(RegFetched& f,
                                                            const int* __restrict__ ctx,
                                                            const int* __restrict__ idx,
                                                            u32 lo, u32 batch, u32 pos) {
        const u32 top = batch - 1u, e0 = lo + pos * 8u;
        int* c = reinterpret_cast<int*>(&f.v[0]);
#pragma unroll
        for (u32 k = 0; k < 8u; ++k) {
            const u32 e = min(e0 + k, top);
            c[k] = __ldg(ctx + e);
        }
        if constexpr (VARLEN) {
            int* id = reinterpret_cast<int*>(&f.v[2]);
#pragma unroll
            for (u32 k = 0; k < 8u; ++k) id[k] = __ldg(idx + min(e0 + k, top));
            f.pid = __ldg(idx + min(e0 ? e0 - 1u : 0u, top));
            const u32 e1 = min(e0 + 8u, top);
            f.nc = __ldg(ctx + e1);
            f.nid = __ldg(idx + e1);
        }
    }

    // Loads slab [lo, lo + n) (n <= CHUNK; the batch's last slab when n < CHUNK) and
    // scans it (as load_tile, a barrier and scan_tile do, with this thread's slice
    // [8t, 8t + 8) of it), leaving the slice's words in w (w[8]: the word after them;
    // past the batch, no work). TILE: also writes them into tile elements 0..n-1 and
    // the halo into element n (put_words). For inputs reg_capable() accepts: only the
    // thread holding the batch's end, if it is not a multiple of 8, loads element by
    // element. (kEveryLane: as in warp_inclusive_scan.)
    template <u32 CHUNK, bool TILE, bool kEveryLane = false>
    __device__ __forceinline__ static Scan reg_scan(u32* tile, const int* __restrict__ ctx,
                                                          const int* __restrict__ idx, u32 lo,
                                                          u32 n, u32 batch, u32 mult,
                                                          Scratch& sc, u32 (&w)[9]) {
        static_assert(kRegSlabs<CHUNK>, "8 elements per thread");
        const u32 pos = threadIdx.x, i0 = 8u * pos, e0 = lo + i0;
        RegFetched f;
        if (e0 + 8u <= batch)  // per thread: no exchange inside
            reg_fetch(f, ctx, idx, lo, batch, pos);
        else
            reg_fetch_scalar(f, ctx, idx, lo, batch, pos);
        reg_words(f, lo, pos, mult, w);  // every lane: it shuffles
        // Past the batch: dense, no work; varlen, the halo's boundary word (seg 0), so
        // these words add nothing to the summary either (a run of one token of no work).
        // (A slab that is not the batch's last is full: its 8 * THREADS words and halo
        // are tokens of the batch.)
#pragma unroll
        for (u32 k = 0; k < 9u; ++k)
            if (e0 + k >= batch) w[k] = VARLEN ? kBoundary : 0u;
        if (TILE) put_words(tile, w, n);
        Scan t;
        t.b = min(n, i0);
        t.end = min(n, i0 + 8u);
        t.after = VARLEN ? w[8] : 0u;  // (the halo when the slice ends the slab)
        if constexpr (kSkipWalks) {
            t.own = fold_words(w, lo, pos, mult);
            t.before = block_exclusive_scan<kEveryLane>(t.own, sc, &t.block);
        } else {
            t.before = block_exclusive_scan<kEveryLane>(fold_words(w, lo, pos, mult), sc,
                                                        &t.block);
        }
        // (the scan's barriers order the tile writes before any read of another slice)
        return t;
    }

    // Writes this thread's words of a slab of n elements read into registers (w, as
    // reg_scan leaves them) into the tile, and the halo (element n) when it falls
    // here: at its k < 8, or after the last thread's 8 when the slab fills the tile.
    __device__ __forceinline__ static void put_words(u32* tile, const u32 (&w)[9], u32 n) {
        const u32 i0 = 8u * threadIdx.x;
#pragma unroll
        for (u32 k = 0; k < 8u; ++k)
            if (i0 + k <= n) tile[pad(i0 + k)] = w[k];
        if (i0 + 8u == n && threadIdx.x + 1u == THREADS) tile[pad(n)] = w[8];
    }

    // The static and dynamic variants: one block, one slab, the whole batch (its own
    // sum is the grand total). A static tile of 8 elements per thread is read into
    // registers when the loads can be 16-byte (reg_capable), and the prefix keys are
    // made from the words still there (the tile holds only keys; a total too large
    // for keys puts the words there, for the walk); otherwise, and for other tiles,
    // the block loads the tile coalesced (neighbouring threads, neighbouring elements:
    // a thread's own 8 would be 8 strided loads at next_n > 1) and scans it.
    template <u32 CAPACITY>
    __device__ __forceinline__ static void whole(u32* tile, const int* __restrict__ ctx,
                                                 const int* __restrict__ idx, u32 batch,
                                                 u32 next_n, u32 mult, Sms num_sms,
                                                 int* __restrict__ out, Scratch& sc) {
        if constexpr (kRegSlabs<CAPACITY>) {
            if (reg_capable(ctx, idx, next_n)) {  // uniform
                u32 w[9];
                const Scan t =
                    reg_scan<CAPACITY, false, F::kEveryLaneScans != 0>(tile, ctx, idx, 0u,
                                                                       batch, batch, mult,
                                                                       sc, w);
                if (emit_whole<8u>([&w](u32 k) { return w[k]; }, tile, t, batch, batch, mult,
                                   num_sms, out))
                    return;
                put_words(tile, w, batch);  // (uniform: t.block)
                __syncthreads();
                emit_walk(tile, t, 0u, S::identity(), 0u, true, true, batch, mult, num_sms,
                          out, sc);
                return;
            }
        }
        load_tile(tile, ctx, idx, 0u, batch, batch, next_n, mult);
        __syncthreads();
        const Scan t = scan_tile<F::kEveryLaneScans != 0>(tile, 0u, batch, mult, sc);
        emit_scanned(tile, t, 0u, batch, S::identity(), 0u, true, true, batch, mult,
                     num_sms, out, sc);
    }

    template <u32 CHUNK>
    __device__ __forceinline__ static void chunked(u32* tile, const int* __restrict__ ctx,
                                                   const int* __restrict__ idx, u32 batch,
                                                   u32 next_n, u32 mult, Sms num_sms,
                                                   int* __restrict__ out, u32* ws,
                                                   Scratch& sc) {
        const u32 grid = gridDim.x, g = blockIdx.x;
        const u32 slabs = (batch - 1u) / CHUNK + 1u;  // batch >= 1
        const u32 per = (slabs + grid - 1u) / grid;
        const u32 j0 = min(slabs, g * per), j1 = min(slabs, j0 + per);
        const u32 epoch = *static_cast<volatile u32*>(ws);
        S* slab_sums = reinterpret_cast<S*>(ws + kSlabBase);
        S* parts = reinterpret_cast<S*>(ws + part_base(slabs));  // [slab][warp] (registers)

        // Phase 1. The last slab stays in shared memory, scanned, for phase 2; the others
        // are summarized in registers when they can be (kRegSlabs, above), else stored
        // and scanned. When a slab is one round of loads, the next slab's loads are in
        // flight while this one is summarized.
        constexpr bool kPrefetch = CHUNK <= THREADS * kLoadUnroll;
        constexpr bool kRegs = kRegSlabs<CHUNK>;
        const bool regs = kRegs && reg_capable(ctx, idx, next_n);
        const u32 jr = j1 - 1u;  // slabs [j0, jr) are not kept in shared memory
        const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
        S mine = S::identity(), before_kept = S::identity();
        Scan kept{};
        u32 j = j0;
        if constexpr (kRegs) {
            if (regs && j0 < jr) {
                constexpr u32 G = kRegGroup<CHUNK>;
                static_assert(G != 0u, "a group of register slabs fits the tile");
                u32* slots = tile;                        // [G][kWarps] warp summaries
                u32* sums = tile + G * kWarps * kFields;  // [G] slab summaries
                // kDepth slabs of loads in flight per thread (dense words are few)
                constexpr u32 kDepth = VARLEN ? 1u : 2u;
                RegFetched rf[kDepth];  // indexed by unrolled constants only: registers
#pragma unroll
                for (u32 d = 0; d < kDepth; ++d)
                    if (j0 + d < jr) reg_fetch(rf[d], ctx, idx, (j0 + d) * CHUNK, batch, threadIdx.x);
                // slab j, whose loads are in rf[d]
                auto summarize = [&](RegFetched& f, u32 j) {
                    u32 w[9];  // unpacked: the buffer can take the next slab's loads
                    reg_words(f, j * CHUNK, threadIdx.x, mult, w);
                    if (j + kDepth < jr)
                        reg_fetch(f, ctx, idx, (j + kDepth) * CHUNK, batch, threadIdx.x);
                    const S part = warp_total(fold_words(w, j * CHUNK, threadIdx.x, mult));
                    const u32 k = (j - j0) % G;  // this slab's place in its group
                    if (lane == 0u) put(slots + (k * kWarps + warp) * kFields, part);
                    if (k + 1u == G || j + 1u == jr) {  // the group is summarized: compose it
                        const u32 count = k + 1u, first = j - k;
                        __syncthreads();
                        for (u32 m = warp; m < count; m += kWarps) {  // slab m: warp by warp
                            // its warps' parts, kept for phase 2 too (here, not in the
                            // loop above: storing there slowed the loads on the H200)
                            const S part = lane < kWarps
                                               ? get(slots + (m * kWarps + lane) * kFields)
                                               : S::identity();
                            if (lane < kWarps) parts[(first + m) * kWarps + lane] = part;
                            const S v = warp_inclusive_scan(part);
                            if (lane == 31u) {
                                slab_sums[first + m] = v;
                                put(sums + m * kFields, v);
                            }
                        }
                        __syncthreads();  // the next group writes slots only, then syncs
                        if (warp == 0u) {
                            const S v = warp_inclusive_scan(
                                lane < count ? get(sums + lane * kFields) : S::identity());
                            mine = S::compose(mine, v.shfl(31));  // in warp 0 only
                        }
                    }
                };
                while (j < jr) {
#pragma unroll
                    for (u32 d = 0; d < kDepth; ++d) {
                        if (j < jr) summarize(rf[d], j++);
                    }
                }
                // every thread gets `mine`; warp 0 is done with the tile after the barrier
                if (threadIdx.x == 0) sc.broadcast[1] = mine;
                __syncthreads();
                mine = sc.broadcast[1];  // read before the scan below reuses it
            }
        }
        // With 16-byte loads (regs), the last slab is read into registers as well and
        // its words written to the tile (reg_scan: no barrier needed before it, nothing
        // reads the tile in phase 1); otherwise every slab is stored and scanned here.
        if constexpr (kRegs) {
            if (regs && j < j1) {  // uniform; then j == jr
                const u32 lo = j * CHUNK, n = min(CHUNK, batch - lo);
                u32 w[9];
                kept = reg_scan<CHUNK, true>(tile, ctx, idx, lo, n, batch, mult, sc, w);
                before_kept = mine;
                mine = S::compose(mine, kept.block);
                j = j1;
            }
        }
        Fetched f;
        if (kPrefetch && j < j1) fetch(f, ctx, idx, j * CHUNK, min(CHUNK, batch - j * CHUNK),
                                       0u, batch, next_n);
        for (; j < j1; ++j) {
            const u32 lo = j * CHUNK, n = min(CHUNK, batch - lo);
            if (kPrefetch) {
                store(tile, f, lo, n, 0u, batch, mult);
                if (j + 1u < j1)
                    fetch(f, ctx, idx, lo + CHUNK, min(CHUNK, batch - lo - CHUNK), 0u, batch,
                          next_n);
            } else {
                load_tile(tile, ctx, idx, lo, n, batch, next_n, mult);
            }
            __syncthreads();
            kept = scan_tile(tile, lo, n, mult, sc);  // ends synced: the tile may be rewritten
            if (threadIdx.x == 0 && j + 1u < j1) slab_sums[j] = kept.block;  // see phase 2
            before_kept = mine;
            mine = S::compose(mine, kept.block);
        }
        // Every thread of this block has read the epoch before its slot is published:
        // block 0 advances the epoch once it has seen every slot, and a thread reading it
        // later would wait for a tag that never comes. A block with slabs passed a
        // barrier since (its scans). One without (j0 == j1) takes one here: the planner's
        // grid leaves no block without a slab, but a smaller grid can (a refused
        // cooperative launch is retried with half the blocks). Uniform: j0, j1 are the
        // block's.
        if (j0 == j1) __syncthreads();
        if (threadIdx.x == 0) publish(slot_of(ws, g), mine, epoch + 1u);
        // Phase 2 takes the summaries of this block's slabs [j0, jr) 32 at a time, one
        // per lane (the last slab's is in registers: kept.block); the first 32 load now,
        // while the exchange runs (every one of them was written before a barrier, by
        // this block).
        auto slab_group = [&](u32 m) {  // slabs j0 + m + lane
            const u32 jl = j0 + m + lane;
            return jl < jr ? slab_sums[jl] : S::identity();
        };
        S group = slab_group(0u);

        // The exchange: this block's carry-in (the composition of the blocks before it)
        // and the grand total, from a scan of the slots. Two forms (`counted` is
        // uniform, and constant false for summaries of fewer than 4 fields):
        // * Every block waits for every slot, thread l for slot l, and scans them: in a
        //   grid of at most 32 blocks warp 0 scans them alone (shuffles, no block scan),
        //   leaving the carry in broadcast[0] and the total in warp[0], which every
        //   thread reads between two barriers (the second: the row queue reuses the
        //   scratch); larger grids take the block scan. Block 0 advances the epoch once
        //   it has seen every slot.
        // * Counted (summaries of 4 fields or more, past 32 blocks): 128 blocks polling
        //   every slot's 4-6 words crowd the L2 lines that hold them, and the last slot
        //   was seen microseconds after its publish. So each block counts itself in
        //   once its slot is out, and the block counted last (every slot is out: it
        //   waits for the tags only until the stores land) scans the slots and leaves
        //   each block its carry and the total in that block's result, which only that
        //   block polls (two threads: one each). A result is laid out field-major, so
        //   that the last block's warps store each field for 32 blocks in two lines
        //   (block-major, each of those stores touched 32 lines). The last block then
        //   advances the epoch (every block has counted in, so has read it) and sets
        //   the count back to 0 for the next launch. With one or two fields the polling
        //   costs less than this chain of round trips (atomic, slots, results), so
        //   dense keeps the first form.
        S slot = S::identity(), carry, all;
        const bool counted = kFields >= 4u && grid > 32u;
        if (!counted) {
            if (threadIdx.x < grid) slot = wait_slot(slot_of(ws, threadIdx.x), epoch + 1u);
            if (grid <= 32u) {  // uniform
                if (warp == 0u) {
                    const S inc = warp_inclusive_scan(slot);
                    const S exc = warp_exclusive(inc);  // every lane shuffles
                    const S tot = inc.shfl(31);
                    if (lane == g) sc.broadcast[0] = exc;
                    if (lane == 0u) sc.warp[0] = tot;  // (the row queue is empty: the
                                                       // last slab's scan emptied it)
                }
                __syncthreads();
                carry = sc.broadcast[0];
                all = sc.warp[0];
                __syncthreads();
            } else {
                const S before = block_exclusive_scan(slot, sc, &all);
                if (threadIdx.x == g) sc.broadcast[0] = before;
                __syncthreads();
                carry = sc.broadcast[0];
            }
            if (g == 0 && threadIdx.x == 0) *static_cast<volatile u32*>(ws) = epoch + 1u;
        } else {
            u32 arrived = 0u;
            if (threadIdx.x == 0) arrived = atomicAdd(ws + kCountWord, 1u) + 1u;
            if (__syncthreads_or(arrived == grid)) {  // uniform: this block came last
                if (threadIdx.x < grid) slot = wait_slot(slot_of(ws, threadIdx.x), epoch + 1u);
                const S before = block_exclusive_scan(slot, sc, &all);
                if (threadIdx.x < grid && threadIdx.x != g) {
                    u32* res = result_of(ws, threadIdx.x);
                    publish<kResultStride>(res, before, epoch + 1u);
                    publish<kResultStride>(res + kTotalOffset, all, epoch + 1u);
                }
                if (threadIdx.x == g) sc.broadcast[0] = before;
                if (threadIdx.x == 0) {
                    static_cast<volatile u32*>(ws)[kCountWord] = 0u;
                    *static_cast<volatile u32*>(ws) = epoch + 1u;
                }
                __syncthreads();
                carry = sc.broadcast[0];
            } else {
                const u32* res = result_of(ws, g);
                if (threadIdx.x == 0) sc.broadcast[0] = wait_slot<kResultStride>(res, epoch + 1u);
                if (threadIdx.x == THREADS - 1u)
                    sc.warp[0] = wait_slot<kResultStride>(res + kTotalOffset, epoch + 1u);
                __syncthreads();
                carry = sc.broadcast[0];
                all = sc.warp[0];  // (the row queue is empty, as above)
                __syncthreads();
            }
        }
        if (j0 == j1) return;

        // Phase 2: the slabs holding an SM start (and the last slab of all). The one
        // still in shared memory first (it is scanned already), then the others. Which
        // of those hold one, every warp finds out 32 slabs at a time, a slab per lane (a
        // scan of their summaries and one ballot: no chain of dependent steps per slab),
        // so the slabs holding none cost nothing. A slab summarized in registers left a
        // summary per warp part: only the parts holding a start are loaded again
        // (emit_parts); a stored slab is reloaded whole and scanned again.
        const Work total = F::work(all);
        Work q;
        u32 r;
        F::split_total(total, num_sms, &q, &r);
        // whether an SM starts in a unit of work `sum` after `pre`
        auto starts_in = [&](const S& pre, const S& sum) {
            const Work base = F::work(pre), end = F::work(S::compose(pre, sum));
            const u32 s = F::first_sm(base, q, r, num_sms);
            return s <= num_sms && F::sm_start(s, q, r, num_sms) < end;
        };
        // The block's last slab, still in shared memory: where the grid is about a
        // slab per block (up to 2^20 or so), the only one with rows. Narrow rows: when
        // the total fits 32 bits (uniform: every block has it), they are placed with
        // 32-bit sums (every prefix of the batch is at most the total), the chain of
        // "smxx"'s, whose Work is 32 bits anyway (the test is then constant and the
        // two calls one). The slabs below keep Work: every narrow copy of the placement
        // (all of it is inlined) lengthens NVRTC's compile, and blocks of many slabs
        // spend their time streaming; the single-block variants search 32-bit keys.
        const S carry_last = S::compose(carry, before_kept);  // every slab before j1 - 1
        if (j1 == slabs || starts_in(carry_last, kept.block)) {
            const u32 lo = (j1 - 1u) * CHUNK, n = min(CHUNK, batch - lo);
            const bool narrow = ((u64)total >> 32) == 0u;
            if (narrow)
                emit_scanned<u32>(tile, kept, lo, n, carry_last, total, false, j1 == slabs,
                                  batch, mult, num_sms, out, sc);
            else
                emit_scanned(tile, kept, lo, n, carry_last, total, false, j1 == slabs, batch,
                             mult, num_sms, out, sc);
        }
        // The rows of register slab j (`pre`: every slab before it). Its parts holding a
        // start, found as the slabs are, go one to a warp: the warp loads its 256
        // elements again (16-byte loads), writes their words into a region of the tile
        // of its own and walks them there (no queue: no block barrier).
        auto emit_parts = [&](u32 j, const S& pre) {
            constexpr u32 kRegion = tile_words(32u * 8u);
            constexpr u32 kRegions = tile_alloc(tile_words(CHUNK)) / kRegion < kWarps
                                         ? tile_alloc(tile_words(CHUNK)) / kRegion : kWarps;
            static_assert(!kRegs || kRegions != 0u, "a warp's region fits the tile");
            const S part = lane < kWarps ? parts[j * kWarps + lane] : S::identity();
            const S inc = warp_inclusive_scan(part);
            const S ppre = S::compose(pre, warp_exclusive(inc));  // every part before this lane's
            const u32 todo = __ballot_sync(0xffffffffu, lane < kWarps && starts_in(ppre, part));
            __syncthreads();  // every thread is done with the tile
            if (warp >= kRegions) return;
            u32* region = tile + warp * kRegion;
            const u32 count = __popc(todo);
            for (u32 rank = warp; rank < count; rank += kRegions) {
                u32 m = todo;  // the part: the rank-th set bit
                for (u32 i = 0; i < rank; ++i) m &= m - 1u;
                const u32 pt = __ffs(m) - 1u, pos = pt * 32u + lane, lo = j * CHUNK;
                RegFetched f;
                reg_fetch(f, ctx, idx, lo, batch, pos);
                u32 w[9];
                reg_words(f, lo, pos, mult, w);
                const S sw = fold_words(w, lo, pos, mult);
                const S before = S::compose(ppre.shfl((int)pt),
                                            warp_exclusive(warp_inclusive_scan(sw)));
#pragma unroll
                for (u32 k = 0; k < 8u; ++k) region[pad(8u * lane + k)] = w[k];
                if (VARLEN && lane == 31u) region[pad(256u)] = w[8];
                __syncwarp();
                Scanned<S> t{};
                t.b = 8u * lane;
                t.end = t.b + 8u;
                Placer pl = Placer::at(out, sc, q, r, num_sms, false, F::work(before));
                F::walk(region, t, lo + pt * 256u, before, mult, pl);
                __syncwarp();  // the region takes this warp's next part
            }
        };
        S c = carry;  // every slab before j0 + m
        for (u32 m = 0; j0 + m < jr; m += 32u) {
            if (m != 0u) group = slab_group(m);
            const S inc = warp_inclusive_scan(group);
            const S pre = S::compose(c, warp_exclusive(inc));  // every slab before j0 + m + lane
            const u32 jl = j0 + m + lane;
            // (never the last slab of all: that one is its block's last, never in [j0, jr))
            u32 todo = __ballot_sync(0xffffffffu, jl < jr && starts_in(pre, group));
            c = S::compose(c, inc.shfl(31));
            while (todo != 0u) {  // the same in every warp: uniform
                const u32 l = __ffs(todo) - 1u;
                todo &= todo - 1u;
                const S cl = pre.shfl((int)l);
                const u32 j = j0 + m + l, lo = j * CHUNK, n = min(CHUNK, batch - lo);
                if constexpr (kRegs) {
                    if (regs) {  // uniform
                        emit_parts(j, cl);
                        continue;
                    }
                }
                __syncthreads();  // every thread is done with the slab in the tile
                load_tile(tile, ctx, idx, lo, n, batch, next_n, mult);
                __syncthreads();
                emit_reloaded(tile, lo, n, cl, total, batch, mult, num_sms, out, sc);
            }
        }
    }
};

}  // namespace jitmeta
