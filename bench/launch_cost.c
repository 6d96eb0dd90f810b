/* Host microseconds per kernel launch from C, through the CUDA driver API: the floor
 * under jitmeta's launch through cuda.bindings (bench/launch_cost.py builds this with
 * nvcc, runs it and times the Python launch of the same kernel beside it).
 *
 * The kernel is empty, with jitmeta_emit's eight arguments (PTX, loaded by the driver).
 * Each mode is timed as bench/benchmark_host.py times eager calls: loops of LOOP_CALLS
 * launches, the GPU synchronized before and after each loop outside the timing (few
 * enough launches that the launch queue never fills), RUNS loops; printed one line per
 * mode: "<mode> <median us> <min us> <max us>".
 *
 *     nvcc -O2 -o launch_cost bench/launch_cost.c -lcuda && ./launch_cost
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOOP_CALLS 200
#define RUNS 15

static const char kPtx[] =
    ".version 7.8\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry k(.param .u64 p0, .param .u64 p1, .param .u32 p2, .param .u32 p3,\n"
    "                  .param .u32 p4, .param .u32 p5, .param .u64 p6, .param .u64 p7)\n"
    "{ ret; }\n";

#define CHECK(call)                                                         \
    do {                                                                    \
        CUresult err_ = (call);                                             \
        if (err_ != CUDA_SUCCESS) {                                         \
            const char* name_ = "?";                                        \
            cuGetErrorName(err_, &name_);                                   \
            fprintf(stderr, "%s failed: %s\n", #call, name_);               \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int by_value(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static CUfunction fn;
static CUstream stream;
static unsigned long long ctx_ptr, idx_ptr, out_ptr, ws_ptr;
static unsigned batch = 1024, next_n = 1, num_sms = 132, wide_last = 0;
static void* params[8] = {&ctx_ptr, &idx_ptr, &batch,   &next_n,
                          &num_sms, &wide_last, &out_ptr, &ws_ptr};
static CUlaunchConfig plain_cfg, pdl_cfg;
static CUlaunchAttribute pdl_attr;

static void launch(int mode) {
    if (mode == 0)
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL));
    else
        CHECK(cuLaunchKernelEx(mode == 1 ? &plain_cfg : &pdl_cfg, fn, params, NULL));
}

int main(void) {
    static const char* names[] = {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernelEx+PDL"};
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, kPtx));
    CHECK(cuModuleGetFunction(&fn, mod, "k"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    plain_cfg.gridDimX = plain_cfg.gridDimY = plain_cfg.gridDimZ = 1;
    plain_cfg.blockDimX = 256;
    plain_cfg.blockDimY = plain_cfg.blockDimZ = 1;
    plain_cfg.hStream = stream;
    pdl_cfg = plain_cfg;
    pdl_attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl_attr.value.programmaticStreamSerializationAllowed = 1;
    pdl_cfg.attrs = &pdl_attr;
    pdl_cfg.numAttrs = 1;
    for (int mode = 0; mode < 3; ++mode) {
        double us[RUNS];
        for (int i = 0; i < 3 * LOOP_CALLS; ++i) launch(mode);
        for (int run = 0; run < RUNS; ++run) {
            CHECK(cuStreamSynchronize(stream));
            const double t0 = now_us();
            for (int i = 0; i < LOOP_CALLS; ++i) launch(mode);
            us[run] = (now_us() - t0) / LOOP_CALLS;
        }
        CHECK(cuStreamSynchronize(stream));
        qsort(us, RUNS, sizeof us[0], by_value);
        printf("%s %.3f %.3f %.3f\n", names[mode], us[RUNS / 2], us[0], us[RUNS - 1]);
    }
    return 0;
}
