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
// as a deadlock, default 60), JITMETA_EMU_STATS=1 (print how often threads slept).
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
// blocks of a cooperative launch run at once, one forked process per block (each with
// its own shared memory), and see each other's global writes.

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

// --- the block barrier: futex, drop-out, a block-wide count, a completion step ---------
class Barrier {
  public:
    void reset(u32 expected, const char* what) {
        gen_.store(0, std::memory_order_relaxed);
        arrived_.store(0, std::memory_order_relaxed);
        expected_.store(expected, std::memory_order_relaxed);
        drops_.store(0, std::memory_order_relaxed);
        count_.store(0, std::memory_order_relaxed);
        what_ = what;
    }

    // Waits for every participating thread; returns how many passed a non-zero `pred`.
    // The last thread to arrive runs `done(ctx)` before it releases the others.
    int arrive_and_wait(int pred, int* participants, void (*done)(void*) = nullptr,
                        void* ctx = nullptr) {
        const u32 g = gen_.load(std::memory_order_acquire);
        if (pred) count_.fetch_add(1, std::memory_order_relaxed);
        const u32 n = arrived_.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (n == expected_.load(std::memory_order_relaxed)) {
            if (done) done(ctx);
            finish(g);
        } else {
            double waited = 0;
            (done ? g_sleeps_pool : g_sleeps_block).fetch_add(1, std::memory_order_relaxed);
            while (gen_.load(std::memory_order_acquire) == g)
                futex_wait(&gen_, g, &waited, [&] {
                    return std::string("at ") + what_ + " (" +
                           std::to_string(arrived_.load()) + " of " +
                           std::to_string(expected_.load()) +
                           " threads arrived; every thread of the block must reach it)";
                });
        }
        if (participants) *participants = (int)result_n_[g & 1];
        return result_[g & 1];
    }

    // This thread leaves (returned from the kernel): it counts as arrived now and is no
    // longer waited for (what hardware does for exited threads).
    void arrive_and_drop() {
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
};

__thread ThreadState* t_state = nullptr;

// Starts warp operation ops + 1 of this lane: returns its ring row, value stored.
u64* warp_begin(ThreadState& st, u64 bits, const char* what) {
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
    std::vector<Warp>* warps = nullptr;
};

// Run by the last thread to finish a block (all others wait): fresh barrier, warps and
// shared memory (garbage, as a GPU leaves it) for the next block.
void prepare_block(void* p) {
    Launch& L = *static_cast<Launch*>(p);
    const unsigned b = L.next_block++;
    L.block.reset(L.threads, "__syncthreads");
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
    t_state = &st;
    threadIdx = uint3{w->linear, 0, 0};
    blockDim = dim3(L.threads, 1, 1);
    gridDim = dim3(L.grid, 1, 1);
    for (unsigned b = L.first_block; b < L.end_block; ++b) {
        L.pool.arrive_and_wait(0, nullptr, prepare_block, &L);
        blockIdx = uint3{b, 0, 0};
        st.ops = 0;
        st.ring_free = 0;
        L.kernel->invoke(L.args);
        L.block.arrive_and_drop();
        warp_exit(st);
    }
    t_state = nullptr;
    return nullptr;
}

void run_blocks(const KernelEntry& k, unsigned grid, unsigned first, unsigned end,
                unsigned threads, std::size_t dyn, const Arg* args, u64 seed);

// A cooperative launch: every block at once, one forked process per block (CUDA
// guarantees co-residency, and blocks may wait for each other). A block that fails
// has printed why; the launch then fails with its status.
void run_cooperative(const KernelEntry& k, unsigned grid, unsigned threads, std::size_t dyn,
                     const Arg* args, u64 seed) {
    std::fflush(nullptr);
    std::vector<pid_t> kids;
    for (unsigned b = 0; b < grid; ++b) {
        const pid_t pid = fork();
        if (pid < 0) die("fork failed for block " + std::to_string(b) + " of " + k.name);
        if (pid == 0) {
            run_blocks(k, grid, b, b + 1, threads, dyn, args, seed);
            std::fflush(nullptr);
            _exit(0);
        }
        kids.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : kids) {
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            failed = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
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
    L.pool.reset(threads, "the emulator's between-blocks barrier");
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
    return state().block->arrive_and_wait(pred, participants);
}

}  // namespace jitmeta_emu

int main(int argc, char** argv) {
    using namespace jitmeta_emu;
    if (const char* t = std::getenv("JITMETA_EMU_TIMEOUT")) g_timeout_s = std::atof(t);
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
