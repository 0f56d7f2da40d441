/* Reference for the launch-overhead comparison: a raw cuLaunchKernel loop of the same empty
 * kernel the Rust benchmark launches (rocm-safe/benches/launch_overhead.rs), same output format.
 * Built and run by run.sh on the device machine: launch_bench <cubin> [launches]. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        CUresult r_ = (call);                                                    \
        if (r_ != CUDA_SUCCESS) {                                                \
            const char *n_ = "?";                                                \
            cuGetErrorName(r_, &n_);                                             \
            fprintf(stderr, "launch_bench: %s failed: %s\n", #call, n_);         \
            return 1;                                                            \
        }                                                                        \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int launch(CUfunction f, CUstream s, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: launch_bench <cubin> [launches]\n");
        return 2;
    }
    unsigned n = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 100000u;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoad(&mod, argv[1]));
    CHECK(cuModuleGetFunction(&f, mod, "noop"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (launch(f, s, 1000)) return 1; /* warm-up */
    CHECK(cuStreamSynchronize(s));
    double t0 = now();
    if (launch(f, s, n)) return 1;
    double enqueue = now() - t0;
    CHECK(cuStreamSynchronize(s));
    t0 = now();
    if (launch(f, s, n)) return 1;
    CHECK(cuStreamSynchronize(s));
    double total = now() - t0;
    printf("launch_overhead raw_culaunch_enqueue_us %.3f\n", enqueue * 1e6 / n);
    printf("launch_overhead raw_culaunch_with_sync_us %.3f\n", total * 1e6 / n);
    return 0;
}
