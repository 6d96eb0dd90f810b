// harness.cpp: the emulator's runtime (threads, barriers, warp exchange, shared-memory
// garbage) and its main(), which runs many launch sequences read from a case file.
//
// Built once per compiler-flag set and linked with one kernel TU (the rendered source
// after cuda_shim.h, plus a table of its kernels). Linux only (futex, mmap).
//
//   harness [--cpu N] CASES OUT   run every case of CASES, write each case's out[] to
//                                 OUT (pinned to CPU N)
//   harness --list                print the kernels (name, parameter kinds) and the
//                                 static shared memory bytes
// Environment: JITMETA_EMU_TIMEOUT (seconds a barrier may wait before it is reported
// as a deadlock, default 60), JITMETA_EMU_STATS=1 (print how often threads slept),
// JITMETA_EMU_LAG=1 (a lagging block, see "determinism").
//
// Case file (little-endian u32 words unless noted), written by core.py:
//   magic 'JEMU', version 1, case count; then per case:
//     batch, next_n, num_sms, has_indices, ws_words, out_words, misalign_bytes,
//     poison_seed, launch count,
//     context_lens (batch * next_n int32), indices (batch int32, if has_indices),
//     per launch: name length, name bytes (padded to 4), grid, threads, dyn_smem bytes,
//                 cooperative (0/1), argument count, then per argument: kind, value
//   argument kinds: 0 u32 value, 1 context_lens, 2 indices, 3 out, 4 workspace, 5 null.
// Output file: per case, out_words int32.
//
// Device memory is modelled strictly: every buffer lies in its own mapping, 256-byte
// aligned (plus misalign_bytes for the inputs), with an inaccessible page after the
// 256-byte-rounded end and before the start; inputs are read-only; out and workspace
// starts as garbage, the workspace zeroed (as runtime.allocate leaves it), and the bytes
// around them are checked for stray writes. Exact sizes: the workspace has exactly
// ws_words words (the library's may be larger). Buffers are shared mappings: the
// blocks of a cooperative launch run as one forked process per block (each with its
// own shared memory) and see each other's global writes. Threads and blocks set out
// in a fixed order (see "determinism" below), so that a read which does not wait for
// its data gives the same answer on every run.

#include "cuda_shim.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define JITMETA_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define JITMETA_EMU_SANITIZER 1
#endif

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread dim3 blockDim;
__thread dim3 gridDim;

// Static shared memory: the link script gathers every __shared__ variable between
// these two symbols. Dynamic shared memory: one buffer (the largest opt-in is 227 KiB).
extern "C" char jitmeta_emu_smem_begin[] __attribute__((weak));
extern "C" char jitmeta_emu_smem_end[] __attribute__((weak));
constexpr std::size_t kDynamicSmemMax = 256 * 1024;
extern "C" {
alignas(256) char jitmeta_emu_dynamic_smem[kDynamicSmemMax];
}
extern "C" const jitmeta_emu::KernelEntry* jitmeta_emu_kernels(int* count);

namespace jitmeta_emu {
namespace {

typedef std::uint32_t u32;

// Where we are, for messages (read by the signal handler too).
volatile long g_case = -1;
const char* volatile g_kernel = "";
double g_timeout_s = 60.0;
std::atomic<unsigned long> g_sleeps_block{0}, g_sleeps_warp{0}, g_sleeps_pool{0};

[[noreturn]] void die(const std::string& msg, int code = 3) {
    std::fprintf(stderr, "jitmeta-emu: %s\n", msg.c_str());
    std::fflush(stderr);
    std::_Exit(code);
}

std::string where() {
    std::string s = "case " + std::to_string(g_case) + ", kernel " + g_kernel;
    s += ", block " + std::to_string(blockIdx.x) + ", thread " + std::to_string(threadIdx.x);
    return s;
}

// --- futex helpers ---------------------------------------------------------------------
void futex_wake_all(std::atomic<u32>* word) {
    syscall(SYS_futex, reinterpret_cast<u32*>(word), FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr,
            nullptr, 0);
}

// Sleeps while *word == seen (1 s slices); dies with `what()` after g_timeout_s.
template <class What> void futex_wait(std::atomic<u32>* word, u32 seen, double* waited,
                                      What what) {
    timespec ts{1, 0};
    const long r = syscall(SYS_futex, reinterpret_cast<u32*>(word), FUTEX_WAIT_PRIVATE, seen,
                           &ts, nullptr, 0);
    if (r == -1 && errno == ETIMEDOUT) {
        *waited += 1.0;
        if (*waited >= g_timeout_s)
            die("deadlock: waited " + std::to_string((int)*waited) + " s " + what() + " in " +
                where());
    }
}

// --- determinism: threads and blocks set out in order ------------------------------------
// Threads (and the blocks of a cooperative launch) that simply all run at once make a
// read that does not wait for the write it needs -- a missing barrier or a missing
// wait, i.e. a bug -- see that write or not as the OS happens to schedule them, so the
// emulator would catch such a bug on some runs only. Instead they set out in a fixed
// order, and such a read gives the same answer on every run, under any load:
//
// * Threads. When a block starts and whenever a barrier completes, its threads set out
//   one at a time, in index order: thread t runs on (the higher threads wait) until its
//   first wait point -- a barrier, a warp operation, __nanosleep or its return -- and
//   only then does the next thread that has not returned set out. Past their first wait
//   point the threads run at once. So a thread that reads before its first wait point
//   finds what lower threads wrote before theirs, and nothing of the higher threads'.
// * Blocks of a cooperative launch (one process each) start one at a time, from the
//   highest: block b - 1 starts once every thread of block b has set out and block b
//   polls for another block (__nanosleep), or once block b has returned. So a block
//   that reads a lower block's data without waiting for it finds what was there before
//   the launch: the chunked kernel's exchange with its wait taken out reads every lower
//   slot unpublished. A block that waits polls, which lets the next block start; from
//   then on the blocks run at once and waiting code computes what it always did. (Block
//   0 comes last: it ends the chunked kernel's exchange, advancing the epoch that every
//   thread reads as it sets out.)
//
// * Lagging blocks (JITMETA_EMU_LAG=1, ordered builds): when thread 0 of a block of a
//   cooperative launch polls (__nanosleep) before any other thread of the block has
//   set out, the block's other threads wait until every lower block has returned,
//   and the lower blocks start meanwhile. That is the warp skew a GPU may show: a
//   block's thread 0 far ahead of its other warps. A kernel in which a block publishes
//   something before all of its threads have read what the other blocks then change
//   is caught this way (the chunked kernel's epoch: a block must pass a barrier first).
//
// A kernel that waits for another thread or block by spinning without any of these
// wait points cannot be emulated (reported as a deadlock, or by the kernel's __trap).
// Not in TSan builds: each hand-over would be a happens-before edge that hides the very
// races TSan is there to report (it finds them whatever the interleaving).
#if defined(__SANITIZE_THREAD__)
constexpr bool kOrdered = false;
#else
constexpr bool kOrdered = true;
#endif
constexpr unsigned kMaxThreads = 1024;

// The start gate: gate[b] (one word per block, in a shared mapping made before the
// fork) turns non-zero when block b may start (the highest block's from the start).
// This process runs block g_gate_block and lets block g_gate_block - 1 start once both
// flags below are set, or once it has returned.
std::atomic<u32>* g_gate = nullptr;  // set in the block processes of a cooperative launch
unsigned g_gate_block = 0;
std::atomic<bool> g_gate_set_out{!kOrdered};  // every thread of the block has set out
std::atomic<bool> g_gate_polled{false};       // a thread polled for another block
std::atomic<bool> g_gate_opened{false};
std::atomic<u32>* g_done = nullptr;  // g_done[b] turns non-zero once block b has returned
bool g_lag = false;                  // JITMETA_EMU_LAG: lagging blocks (ordered builds)

// Flags shared between the block processes (not FUTEX_*_PRIVATE): set once, waited for.
void shared_set(std::atomic<u32>& w) {
    w.store(1, std::memory_order_release);
    syscall(SYS_futex, reinterpret_cast<u32*>(&w), FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

// Waits until `w` is set (1 s slices); dies with "deadlock: waited N s " + why() after
// g_timeout_s.
template <class Why> void shared_wait(std::atomic<u32>& w, Why why) {
    double waited = 0;
    while (w.load(std::memory_order_acquire) == 0) {
        timespec ts{1, 0};
        if (syscall(SYS_futex, reinterpret_cast<u32*>(&w), FUTEX_WAIT, 0u, &ts, nullptr, 0) ==
                -1 &&
            errno == ETIMEDOUT && (waited += 1.0) >= g_timeout_s)
            die("deadlock: waited " + std::to_string((int)waited) + " s " + why());
    }
}

// Lets block g_gate_block - 1 start (once; a no-op outside a cooperative launch).
void gate_open() {
    if (!g_gate || g_gate_block == 0 || g_gate_opened.exchange(true)) return;
    shared_set(g_gate[g_gate_block - 1]);
}

// Sets one of the two flags; opens the gate once both are set. (Sequentially consistent:
// of two threads that set one each, at least one sees both.)
void gate_note(std::atomic<bool>& flag) {
    if (flag.load()) return;
    flag.store(true);
    if (g_gate_set_out.load() && g_gate_polled.load()) gate_open();
}

// Waits until block b may start.
void gate_wait(unsigned b) {
    shared_wait(g_gate[b], [&] {
        return "for block " + std::to_string(b) + " of " + g_kernel + " to start in case " +
               std::to_string(g_case) + ": block " + std::to_string(b + 1) +
               " neither returned nor had every thread set out and one poll for another "
               "block with __nanosleep (the emulator's start gate)";
    });
}

// The threads of a block set out in order (above): thread t waits in take() for its
// turn, and pass() at its first wait point hands the turn on.
class Order {
  public:
    void reset(unsigned threads) {
        n_ = threads;
        first_round_ = true;
        for (unsigned t = 0; t < threads; ++t) {
            go_[t].store(0, std::memory_order_relaxed);
            gone_[t].store(false, std::memory_order_relaxed);
            turn_[t] = false;
        }
    }

    // Run by the thread that completes a barrier, before the others leave it (they have
    // all passed their turns): the first thread that has not returned sets out.
    void restart() {
        if (kOrdered) send(0);
    }

    // The word thread t's turn is signalled on (null: no order).
    std::atomic<u32>* turn_word(unsigned t) { return kOrdered ? &go_[t] : nullptr; }

    // Thread t, leaving a barrier: waits for its turn to set out.
    void take(unsigned t) {
        if (!kOrdered) return;
        double waited = 0;
        while (go_[t].load(std::memory_order_acquire) == 0)
            futex_wait(&go_[t], 0, &waited, [&] {
                return std::string("for its turn to set out after a barrier (a lower "
                                   "thread must first reach a barrier, a warp operation, "
                                   "__nanosleep or its return)");
            });
        go_[t].store(0, std::memory_order_relaxed);
        turn_[t] = true;
    }

    // Thread t reached a wait point: if it was setting out, the next thread may.
    void pass(unsigned t) {
        if (!kOrdered || !turn_[t]) return;
        turn_[t] = false;
        send(t + 1);
    }

    // Whether thread t is setting out in the block's first round (no wait point yet).
    bool first_turn(unsigned t) const { return kOrdered && first_round_ && turn_[t]; }

    // Thread t reached its first wait point, but the next thread sets out only when
    // release(t + 1) is called (a lagging block).
    void hold(unsigned t) { turn_[t] = false; }
    void release(unsigned t) { send(t); }

    // Thread t returned from the kernel.
    void leave(unsigned t) {
        gone_[t].store(true, std::memory_order_relaxed);
        pass(t);
    }

  private:
    // Lets the first thread from `t` on that has not returned set out. (The threads it
    // skips returned before this round began; none above it has set out yet.) Past the
    // last one, the round is over: after the first, every thread has set out.
    void send(unsigned t) {
        while (t < n_ && gone_[t].load(std::memory_order_relaxed)) ++t;
        if (t >= n_) {
            if (first_round_) gate_note(g_gate_set_out);
            first_round_ = false;
            return;
        }
        go_[t].store(1, std::memory_order_release);
        futex_wake_all(&go_[t]);
    }

    unsigned n_ = 0;
    bool first_round_ = true;               // since the block started (one thread at a time)
    std::atomic<u32> go_[kMaxThreads];      // 1: that thread may set out
    std::atomic<bool> gone_[kMaxThreads];   // returned from the kernel (this block)
    bool turn_[kMaxThreads];                // set out, first wait point not reached yet
};

// --- the block barrier: futex, drop-out, a block-wide count, a completion step ---------
// Arriving is a wait point of the thread order (`order`), and the threads leave the
// barrier in order.
class Barrier {
  public:
    void reset(u32 expected, const char* what, Order* order) {
        order_ = order;
        gen_.store(0, std::memory_order_relaxed);
        arrived_.store(0, std::memory_order_relaxed);
        expected_.store(expected, std::memory_order_relaxed);
        drops_.store(0, std::memory_order_relaxed);
        count_.store(0, std::memory_order_relaxed);
        what_ = what;
    }

    // Thread t waits for every participating thread; returns how many passed a non-zero
    // `pred`. The last thread to arrive runs `done(ctx)` before it releases the others.
    int arrive_and_wait(unsigned t, int pred, int* participants,
                        void (*done)(void*) = nullptr, void* ctx = nullptr) {
        order_->pass(t);
        const u32 g = gen_.load(std::memory_order_acquire);
        if (pred) count_.fetch_add(1, std::memory_order_relaxed);
        const u32 n = arrived_.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (n == expected_.load(std::memory_order_relaxed)) {
            if (done) done(ctx);
            finish(g);
        } else {
            double waited = 0;
            (done ? g_sleeps_pool : g_sleeps_block).fetch_add(1, std::memory_order_relaxed);
            auto what = [&] {
                return std::string("at ") + what_ + " (" + std::to_string(arrived_.load()) +
                       " of " + std::to_string(expected_.load()) +
                       " threads arrived; every thread of the block must reach it)";
            };
            // In order, a thread sleeps until its turn rather than until the barrier
            // completes: the completion wakes one thread, and each the next. (Its turn
            // is signalled just before the completion is: then it waits on gen_.)
            std::atomic<u32>* turn = order_->turn_word(t);
            while (gen_.load(std::memory_order_acquire) == g) {
                if (turn && turn->load(std::memory_order_acquire) == 0)
                    futex_wait(turn, 0, &waited, what);
                else
                    futex_wait(&gen_, g, &waited, what);
            }
        }
        order_->take(t);
        if (participants) *participants = (int)result_n_[g & 1];
        return result_[g & 1];
    }

    // Thread t leaves (returned from the kernel): it counts as arrived now and is no
    // longer waited for (what hardware does for exited threads).
    void arrive_and_drop(unsigned t) {
        order_->leave(t);  // before the barrier can complete without it
        const u32 g = gen_.load(std::memory_order_acquire);
        drops_.fetch_add(1, std::memory_order_relaxed);
        const u32 n = arrived_.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (n == expected_.load(std::memory_order_relaxed)) finish(g);
    }

  private:
    void finish(u32 g) {
        const u32 drops = drops_.exchange(0, std::memory_order_relaxed);
        const u32 expected = expected_.load(std::memory_order_relaxed);
        result_[g & 1] = count_.exchange(0, std::memory_order_relaxed);
        result_n_[g & 1] = expected - drops;
        expected_.store(expected - drops, std::memory_order_relaxed);
        arrived_.store(0, std::memory_order_relaxed);
        order_->restart();
        gen_.store(g + 1, std::memory_order_release);
        futex_wake_all(&gen_);
    }

    alignas(64) std::atomic<u32> gen_{0};
    alignas(64) std::atomic<u32> arrived_{0};
    std::atomic<u32> expected_{0};
    std::atomic<u32> drops_{0};
    std::atomic<int> count_{0};
    int result_[2] = {0, 0};
    u32 result_n_[2] = {0, 0};
    const char* what_ = "";
    Order* order_ = nullptr;
};

// --- a warp: point-to-point exchange through a ring of value slots ---------------------
// Warp operation k (1, 2, ... in every lane, per block) stores the lane's value in
// ring[(k - 1) % kRing][lane] and publishes seq[lane] = k; a reader waits only for its
// source lane(s) to publish k. Before a lane overwrites the ring row of operation
// k - kRing, every lane must have published k - kRing + 1 (so it has finished reading
// that row). Lanes that return from the kernel publish kGone.
constexpr u32 kRing = 64;
constexpr u32 kGone = 0xffffffffu;

struct Warp {
    int lanes = 32;
    std::atomic<u32> seq[32];
    std::atomic<u32> waiters[32];
    u32 last[32];  // operations a lane did before it returned
    u64 ring[kRing][32];

    void reset(int n) {
        lanes = n;
        for (int l = 0; l < 32; ++l) {
            seq[l].store(0, std::memory_order_relaxed);
            waiters[l].store(0, std::memory_order_relaxed);
            last[l] = 0;
        }
    }

    // Blocks until lane `l` has published operation k (or returned).
    u32 wait_for(int l, u32 k, const char* what) {
        u32 s = seq[l].load(std::memory_order_acquire);
        if (s >= k) return s;
        waiters[l].fetch_add(1, std::memory_order_seq_cst);
        g_sleeps_warp.fetch_add(1, std::memory_order_relaxed);
        double waited = 0;
        while ((s = seq[l].load(std::memory_order_seq_cst)) < k)
            futex_wait(&seq[l], s, &waited, [&] {
                return std::string("at ") + what + " #" + std::to_string(k) + " for lane " +
                       std::to_string(l) + ", which has done " + std::to_string(s) +
                       " warp operations (every lane of the warp must reach it)";
            });
        waiters[l].fetch_sub(1, std::memory_order_relaxed);
        return s;
    }

    void publish(int l, u32 k) {
        seq[l].store(k, std::memory_order_seq_cst);
        if (waiters[l].load(std::memory_order_seq_cst)) futex_wake_all(&seq[l]);
    }
};

struct ThreadState {
    unsigned linear = 0;  // thread index in the block
    unsigned lane = 0;
    u32 ops = 0;          // warp operations done in this block
    u32 ring_free = 0;    // every lane has published at least this many
    Warp* warp = nullptr;
    Barrier* block = nullptr;
    Order* order = nullptr;
};

__thread ThreadState* t_state = nullptr;

// Starts warp operation ops + 1 of this lane: returns its ring row, value stored.
u64* warp_begin(ThreadState& st, u64 bits, const char* what) {
    st.order->pass(st.linear);  // a wait point
    Warp& w = *st.warp;
    const u32 k = ++st.ops;
    if (k > kRing && st.ring_free < k - kRing + 1) {
        const u32 need = k - kRing + 1;
        for (int l = 0; l < w.lanes; ++l) w.wait_for(l, need, what);
        st.ring_free = need;
    }
    u64* row = w.ring[(k - 1) % kRing];
    row[st.lane] = bits;
    w.publish((int)st.lane, k);
    return row;
}

// The value lane `src` stored at this lane's current operation.
u64 warp_read(ThreadState& st, u64* row, int src, const char* what) {
    Warp& w = *st.warp;
    if (src == (int)st.lane) return row[src];
    const u32 s = w.wait_for(src, st.ops, what);
    if (s == kGone && w.last[src] < st.ops)
        die(std::string(what) + " reads lane " + std::to_string(src) +
            ", which has returned from the kernel, in " + where());
    return row[src];
}

void warp_exit(ThreadState& st) {
    st.warp->last[st.lane] = st.ops;
    st.warp->publish((int)st.lane, kGone);
}

// --- garbage for fresh memory ----------------------------------------------------------
u64 splitmix(u64& s) {
    u64 z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Not a memset: the range may hold sanitizer redzones between variables.
__attribute__((no_sanitize_address)) void fill_garbage(char* p, std::size_t n, u64 seed) {
    volatile unsigned char* b = reinterpret_cast<volatile unsigned char*>(p);
    u64 s = seed;
    std::size_t i = 0;
    while (i < n) {
        u64 w = splitmix(s);
        for (int k = 0; k < 8 && i < n; ++k, ++i, w >>= 8) b[i] = (unsigned char)w;
    }
}

// --- one launch: `threads` OS threads run the grid's blocks one after another ----------
struct Launch {
    unsigned grid = 1, threads = 1;
    unsigned first_block = 0, end_block = 1;  // the blocks this process runs
    std::size_t dyn = 0;
    const KernelEntry* kernel = nullptr;
    const Arg* args = nullptr;
    u64 seed = 0;
    unsigned next_block = 0;  // the block prepare_block sets up
    Barrier pool;             // between blocks
    Barrier block;            // __syncthreads
    Order order;              // the threads set out in order (at both barriers)
    std::vector<Warp>* warps = nullptr;
};

// Run by the last thread to finish a block (all others wait): fresh barrier, warps and
// shared memory (garbage, as a GPU leaves it) for the next block.
void prepare_block(void* p) {
    Launch& L = *static_cast<Launch*>(p);
    const unsigned b = L.next_block++;
    L.block.reset(L.threads, "__syncthreads", &L.order);
    L.order.reset(L.threads);
    for (std::size_t w = 0; w < L.warps->size(); ++w) {
        Warp& wp = (*L.warps)[w];
        wp.reset((int)std::min<std::size_t>(32, L.threads - w * 32));
        fill_garbage(reinterpret_cast<char*>(wp.ring), sizeof wp.ring, L.seed ^ (w << 20) ^ b);
    }
    const u64 seed = L.seed * 0x2545f4914f6cdd1dull + b;
    if (jitmeta_emu_smem_begin && jitmeta_emu_smem_end)
        fill_garbage(jitmeta_emu_smem_begin, jitmeta_emu_smem_end - jitmeta_emu_smem_begin, seed);
    fill_garbage(jitmeta_emu_dynamic_smem, L.dyn, seed ^ 0x5555);
}

struct Worker {
    Launch* launch;
    unsigned linear;
};

void* worker_main(void* p) {
    Worker* w = static_cast<Worker*>(p);
    Launch& L = *w->launch;
    ThreadState st;
    st.linear = w->linear;
    st.lane = w->linear % 32;
    st.warp = &(*L.warps)[w->linear / 32];
    st.block = &L.block;
    st.order = &L.order;
    t_state = &st;
    threadIdx = uint3{w->linear, 0, 0};
    blockDim = dim3(L.threads, 1, 1);
    gridDim = dim3(L.grid, 1, 1);
    for (unsigned b = L.first_block; b < L.end_block; ++b) {
        L.pool.arrive_and_wait(st.linear, 0, nullptr, prepare_block, &L);
        blockIdx = uint3{b, 0, 0};
        st.ops = 0;
        st.ring_free = 0;
        L.kernel->invoke(L.args);
        L.block.arrive_and_drop(st.linear);
        warp_exit(st);
    }
    t_state = nullptr;
    return nullptr;
}

void run_blocks(const KernelEntry& k, unsigned grid, unsigned first, unsigned end,
                unsigned threads, std::size_t dyn, const Arg* args, u64 seed);

// A cooperative launch: one forked process per block (its own shared memory), over the
// shared mappings of the buffers; CUDA guarantees co-residency, and blocks may wait for
// each other. They start one at a time through the start gate (see "determinism"). A
// block that fails has printed why; the others are then killed (some may wait at the
// gate for it) and the launch fails with the first failed block's status.
void run_cooperative(const KernelEntry& k, unsigned grid, unsigned threads, std::size_t dyn,
                     const Arg* args, u64 seed) {
    std::fflush(nullptr);
    const std::size_t gate_bytes = 2 * grid * sizeof(std::atomic<u32>);  // gates, done flags
    void* gm = mmap(nullptr, gate_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    if (gm == MAP_FAILED) die(std::string("mmap failed for the start gate of ") + k.name);
    std::atomic<u32>* gate = static_cast<std::atomic<u32>*>(gm);  // zero: all closed
    gate[grid - 1].store(1, std::memory_order_relaxed);
    std::vector<pid_t> kids;
    for (unsigned b = 0; b < grid; ++b) {
        const pid_t pid = fork();
        if (pid < 0) die("fork failed for block " + std::to_string(b) + " of " + k.name);
        if (pid == 0) {
            g_gate = gate;
            g_done = gate + grid;
            g_gate_block = b;
            g_gate_set_out = !kOrdered;  // (the parent's launches may have set them)
            g_gate_polled = false;
            g_gate_opened = false;
            g_kernel = k.name;
            gate_wait(b);
            run_blocks(k, grid, b, b + 1, threads, dyn, args, seed);
            gate_open();  // returned
            shared_set(g_done[b]);
            std::fflush(nullptr);
            _exit(0);
        }
        kids.push_back(pid);
    }
    int failed = 0;
    for (std::size_t left = kids.size(); left;) {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, 0);  // the harness has no other children
        if (pid < 0) {
            if (errno == EINTR) continue;
            die(std::string("waitpid failed in cooperative launch ") + k.name);
        }
        bool ours = false;
        for (pid_t& kid : kids)
            if (kid == pid) kid = 0, ours = true;
        if (!ours) continue;
        --left;
        if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            failed = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            for (pid_t kid : kids)
                if (kid > 0) kill(kid, SIGKILL);
        }
    }
    munmap(gm, gate_bytes);
    if (failed) {
        std::fprintf(stderr, "jitmeta-emu: a block of cooperative launch %s failed "
                     "(status %d) in case %ld\n", k.name, failed, (long)g_case);
        _exit(failed);
    }
}

void run_launch(const KernelEntry& k, unsigned grid, unsigned threads, std::size_t dyn,
                const Arg* args, u64 seed) {
    run_blocks(k, grid, 0, grid, threads, dyn, args, seed);
}

void run_blocks(const KernelEntry& k, unsigned grid, unsigned first, unsigned end,
                unsigned threads, std::size_t dyn, const Arg* args, u64 seed) {
    if (grid < 1 || threads < 1 || threads > 1024)
        die(std::string("invalid launch of ") + k.name + ": grid " + std::to_string(grid) +
            ", threads " + std::to_string(threads) + " (CUDA: 1..2^31-1 blocks, 1..1024 threads)");
    if (dyn > kDynamicSmemMax)
        die(std::string("launch of ") + k.name + " asks for " + std::to_string(dyn) +
            " B of dynamic shared memory; the emulator has " + std::to_string(kDynamicSmemMax));
    g_kernel = k.name;
    std::vector<Warp> warps((threads + 31) / 32);
    Launch L;
    L.grid = grid;
    L.first_block = first;
    L.end_block = end;
    L.next_block = first;
    L.threads = threads;
    L.dyn = dyn;
    L.kernel = &k;
    L.args = args;
    L.seed = seed;
    L.warps = &warps;
    L.order.reset(threads);
    L.pool.reset(threads, "the emulator's between-blocks barrier", &L.order);
#ifdef JITMETA_EMU_ASAN
    ASAN_POISON_MEMORY_REGION(jitmeta_emu_dynamic_smem + dyn, kDynamicSmemMax - dyn);
#endif
    std::vector<Worker> ws(threads);
    std::vector<pthread_t> tids(threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
#ifdef JITMETA_EMU_SANITIZER
    pthread_attr_setstacksize(&attr, 4u << 20);
#else
    pthread_attr_setstacksize(&attr, 256u << 10);
#endif
    for (unsigned t = 0; t < threads; ++t) {
        ws[t] = Worker{&L, t};
        const int rc = pthread_create(&tids[t], &attr, worker_main, &ws[t]);
        if (rc) die("pthread_create failed for thread " + std::to_string(t) + " of " +
                    std::to_string(threads) + " (errno " + std::to_string(rc) + ")");
    }
    for (unsigned t = 0; t < threads; ++t) pthread_join(tids[t], nullptr);
    pthread_attr_destroy(&attr);
#ifdef JITMETA_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(jitmeta_emu_dynamic_smem, kDynamicSmemMax);
#endif
    g_kernel = "";
}

// --- device-like buffers -------------------------------------------------------------
struct Buffer {
    char* map = nullptr;
    std::size_t map_len = 0;
    char* data = nullptr;
    std::size_t bytes = 0;
    char* lo = nullptr;  // accessible range [lo, hi) around data
    char* hi = nullptr;
    const char* name = "";
    u64 seed = 0;

    void allocate(const char* what, std::size_t n, std::size_t misalign, u64 s) {
        name = what;
        bytes = n;
        seed = s;
        const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
        const std::size_t span = (n + misalign + 255) / 256 * 256;
        const std::size_t body = (span + page - 1) / page * page;
        map_len = body + 2 * page;
        void* m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED) die(std::string("mmap failed for ") + what);
        map = static_cast<char*>(m);
        mprotect(map, page, PROT_NONE);
        mprotect(map + page + body, page, PROT_NONE);
        lo = map + page;
        hi = map + page + body;
        data = hi - span + misalign;
        fill_garbage(lo, hi - lo, seed);
    }
    void read_only() { mprotect(lo, hi - lo, PROT_READ); }
    // Every byte outside [data, data + bytes) must still hold its garbage.
    void check_untouched() const {
        std::vector<char> want(hi - lo);
        fill_garbage(want.data(), want.size(), seed);
        for (char* p = lo; p < hi; ++p) {
            if (p >= data && p < data + bytes) continue;
            if (*p != want[p - lo]) {
                const long off = p < data ? -(long)(data - p) : (long)(p - data - bytes);
                die(std::string("stray write next to ") + name + " in case " +
                    std::to_string(g_case) + ": byte " +
                    (off < 0 ? std::to_string(-off) + " before its start"
                             : std::to_string(off) + " after its end"));
            }
        }
    }
    void release() {
        if (map) munmap(map, map_len);
        map = nullptr;
    }
};

// --- input ------------------------------------------------------------------------------
struct Reader {
    std::vector<char> buf;
    std::size_t pos = 0;
    u32 u() {
        if (pos + 4 > buf.size()) die("case file ends early");
        u32 v;
        std::memcpy(&v, buf.data() + pos, 4);
        pos += 4;
        return v;
    }
    const char* bytes(std::size_t n) {
        if (pos + n > buf.size()) die("case file ends early");
        const char* p = buf.data() + pos;
        pos += (n + 3) / 4 * 4;
        return p;
    }
};

std::vector<char> read_file(const char* path) {
    FILE* f = std::fopen(path, "rb");
    if (!f) die(std::string("cannot open ") + path);
    std::vector<char> data;
    char chunk[1 << 16];
    std::size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) data.insert(data.end(), chunk, chunk + n);
    std::fclose(f);
    return data;
}

const KernelEntry* find_kernel(const std::string& name) {
    int count = 0;
    const KernelEntry* table = jitmeta_emu_kernels(&count);
    for (int i = 0; i < count; ++i)
        if (name == table[i].name) return &table[i];
    std::string known;
    for (int i = 0; i < count; ++i) known += std::string(i ? ", " : "") + table[i].name;
    die("the launcher asks for kernel '" + name + "', the source defines: " + known);
}

void fatal_signal(int sig) {
    char msg[256];
    const int n = std::snprintf(msg, sizeof msg,
                                "jitmeta-emu: fatal signal %d (%s) in case %ld, kernel %s, "
                                "block %u, thread %u\n",
                                sig, sig == SIGSEGV ? "SIGSEGV: bad memory access"
                                     : sig == SIGBUS ? "SIGBUS"
                                     : sig == SIGFPE ? "SIGFPE: integer division by zero?"
                                     : sig == SIGABRT ? "SIGABRT: assert?"
                                                      : "signal",
                                (long)g_case, (const char*)g_kernel, blockIdx.x, threadIdx.x);
    if (n > 0) (void)!write(2, msg, (std::size_t)n);
    _exit(128 + sig);
}

int run_cases(const char* in_path, const char* out_path) {
    Reader r{read_file(in_path)};
    if (r.u() != 0x554d454au || r.u() != 1u) die("not a version-1 case file");
    const u32 ncases = r.u();
    FILE* out = std::fopen(out_path, "wb");
    if (!out) die(std::string("cannot write ") + out_path);
    for (u32 c = 0; c < ncases; ++c) {
        g_case = (long)c;
        const u32 batch = r.u(), next_n = r.u(), num_sms = r.u(), has_idx = r.u();
        const u32 ws_words = r.u(), out_words = r.u(), misalign = r.u(), seed = r.u();
        const u32 nlaunch = r.u();
        (void)num_sms;
        const std::size_t ctx_bytes = (std::size_t)batch * next_n * 4;
        Buffer ctx, idx, o, ws;
        ctx.allocate("context_lens", ctx_bytes, misalign, seed * 4 + 1);
        std::memcpy(ctx.data, r.bytes(ctx_bytes), ctx_bytes);
        ctx.read_only();
        if (has_idx) {
            idx.allocate("indices", (std::size_t)batch * 4, misalign, seed * 4 + 2);
            std::memcpy(idx.data, r.bytes((std::size_t)batch * 4), (std::size_t)batch * 4);
            idx.read_only();
        }
        o.allocate("out", (std::size_t)out_words * 4, 0, seed * 4 + 3);
        if (ws_words) {
            ws.allocate("workspace", (std::size_t)ws_words * 4, 0, seed * 4 + 4);
            std::memset(ws.data, 0, (std::size_t)ws_words * 4);
        }
        for (u32 l = 0; l < nlaunch; ++l) {
            const u32 name_len = r.u();
            const std::string name(r.bytes(name_len), name_len);
            const u32 grid = r.u(), threads = r.u(), dyn = r.u(), coop = r.u(), nargs = r.u();
            const KernelEntry* k = find_kernel(name);
            if ((int)nargs != k->arity)
                die("the launcher passes " + std::to_string(nargs) + " arguments to " + name +
                    ", which takes " + std::to_string(k->arity));
            std::vector<Arg> args(nargs);
            for (u32 a = 0; a < nargs; ++a) {
                const u32 kind = r.u(), value = r.u();
                char* p = nullptr;
                switch (kind) {
                    case 0: args[a] = Arg{value, 0, (int)a}; continue;
                    case 1: p = ctx.data; break;
                    case 2: p = idx.data; break;
                    case 3: p = o.data; break;
                    case 4: p = ws.data; break;
                    case 5: p = nullptr; break;
                    default: die("bad argument kind in the case file");
                }
                args[a] = Arg{(u64)(std::uintptr_t)p, 1, (int)a};
            }
            const u64 launch_seed = (u64)seed * 1000003u + l;
            if (coop && grid > 1)
                run_cooperative(*k, grid, threads, dyn, args.data(), launch_seed);
            else
                run_launch(*k, grid, threads, dyn, args.data(), launch_seed);
        }
        o.check_untouched();
        if (ws_words) ws.check_untouched();
        std::fwrite(o.data, 4, out_words, out);
        ctx.release();
        idx.release();
        o.release();
        ws.release();
    }
    g_case = -1;
    if (std::getenv("JITMETA_EMU_STATS"))
        std::fprintf(stderr, "jitmeta-emu stats: sleeps at __syncthreads %lu, warp ops %lu, "
                     "between blocks %lu\n", g_sleeps_block.load(), g_sleeps_warp.load(),
                     g_sleeps_pool.load());
    if (std::fclose(out) != 0) die(std::string("cannot write ") + out_path);
    return 0;
}

}  // namespace

// --- the interface cuda_shim.h declares -------------------------------------------------
[[noreturn]] void fatal(const char* what) { die(std::string(what) + " in " + where()); }

[[noreturn]] void bad_argument(int index, bool want_pointer) {
    die(std::string("argument ") + std::to_string(index) + " of " + g_kernel + ": the kernel " +
        "declares " + (want_pointer ? "a pointer" : "an integer") + ", the launcher passes " +
        (want_pointer ? "an integer" : "a pointer"));
}

unsigned lane_id() { return t_state ? t_state->lane : 0u; }

// A lagging block's other threads set out once every lower block has returned.
static void release_when_lower_blocks_return(Order* order) {
    for (unsigned b = 0; b < g_gate_block; ++b)
        shared_wait(g_done[b], [&] {
            return "in lagging block " + std::to_string(g_gate_block) + " of " + g_kernel +
                   " for block " + std::to_string(b) + " to return in case " +
                   std::to_string(g_case);
        });
    order->release(1);
}

void poll_sleep() {
    if (t_state && g_lag && g_gate && t_state->linear == 0 &&
        t_state->order->first_turn(0)) {
        // a lagging block: thread 0 polls before its other threads set out
        Order* order = t_state->order;
        order->hold(0);
        gate_open();
        std::thread(release_when_lower_blocks_return, order).detach();
    } else if (t_state) {
        t_state->order->pass(t_state->linear);  // a wait point
    }
    if (g_gate) {
        gate_note(g_gate_polled);  // this block waits for another
        // Until every block has started, which polling cannot hasten, a poll sleeps
        // instead of spinning: the blocks still to start get the CPU.
        gate_wait(0);
    }
    sched_yield();
}

static ThreadState& state() {
    if (!t_state) die("a CUDA built-in was called outside a kernel");
    return *t_state;
}

static void check_mask(const ThreadState& st, unsigned mask, const char* what) {
    const int lanes = st.warp->lanes;
    const unsigned all = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    if ((mask & all) != all) {
        char b[16];
        std::snprintf(b, sizeof b, "%08x", mask);
        die(std::string(what) + " with mask 0x" + b +
            ": the emulator supports only masks naming every lane of the warp; in " + where());
    }
}

const u64* warp_gather(unsigned mask, u64 bits, int* lanes) {
    ThreadState& st = state();
    const char* what = "a warp vote/reduce";
    check_mask(st, mask, what);
    u64* row = warp_begin(st, bits, what);
    for (int l = 0; l < st.warp->lanes; ++l) warp_read(st, row, l, what);
    *lanes = st.warp->lanes;
    return row;
}

u64 shfl(unsigned mask, u64 bits, int kind, int arg, int width) {
    ThreadState& st = state();
    const char* what = "__shfl*_sync";
    check_mask(st, mask, what);
    if (width < 1 || width > 32 || (width & (width - 1)))
        die("__shfl*_sync width " + std::to_string(width) + " is not a power of two <= 32 in " +
            where());
    u64* row = warp_begin(st, bits, what);
    const int lane = (int)st.lane, base = lane & ~(width - 1), in = lane - base;
    int src = lane;
    switch (kind) {
        case kShflIdx: src = base + (arg & (width - 1)); break;
        case kShflUp: src = in >= arg ? lane - arg : lane; break;
        case kShflDown: src = in + arg < width ? lane + arg : lane; break;
        case kShflXor: src = (in ^ arg) < width ? base + (in ^ arg) : lane; break;
    }
    if (src >= st.warp->lanes)
        die("__shfl*_sync reads lane " + std::to_string(src) + " of a warp with " +
            std::to_string(st.warp->lanes) + " threads in " + where());
    return warp_read(st, row, src, what);
}

void syncwarp(unsigned mask) {
    ThreadState& st = state();
    const char* what = "__syncwarp";
    check_mask(st, mask, what);
    u64* row = warp_begin(st, 0, what);
    for (int l = 0; l < st.warp->lanes; ++l) warp_read(st, row, l, what);
}

int syncthreads(int pred, int* participants) {
    ThreadState& st = state();
    return st.block->arrive_and_wait(st.linear, pred, participants);
}

}  // namespace jitmeta_emu

int main(int argc, char** argv) {
    using namespace jitmeta_emu;
    if (const char* t = std::getenv("JITMETA_EMU_TIMEOUT")) g_timeout_s = std::atof(t);
    if (const char* l = std::getenv("JITMETA_EMU_LAG")) g_lag = kOrdered && std::atoi(l) != 0;
#ifndef JITMETA_EMU_SANITIZER
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, fatal_signal);
#endif
    if (argc == 2 && std::string(argv[1]) == "--list") {
        int count = 0;
        const KernelEntry* table = jitmeta_emu_kernels(&count);
        for (int i = 0; i < count; ++i)
            std::printf("kernel %s %s\n", table[i].name, table[i].kinds);
        std::printf("smem %ld\n", jitmeta_emu_smem_begin && jitmeta_emu_smem_end
                                      ? (long)(jitmeta_emu_smem_end - jitmeta_emu_smem_begin)
                                      : 0L);
        return 0;
    }
    if (argc == 5 && std::string(argv[1]) == "--cpu") {
        // One CPU per emulator process: cheaper wake-ups than migrating threads.
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(std::atoi(argv[2]), &set);
        sched_setaffinity(0, sizeof set, &set);
        argc -= 2;
        argv += 2;
    }
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s [--cpu N] CASES OUT | --list\n", argv[0]);
        return 2;
    }
    return run_cases(argv[1], argv[2]);
}
