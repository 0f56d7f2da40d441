/* References for the launch-overhead comparison: a raw cuLaunchKernel loop of the same empty
 * kernel the Rust benchmark launches (rocm-safe/benches/launch_overhead.rs), and, given the HIP
 * library rocm-safe loads (the test double), a raw hipModuleLaunchKernel loop through it: the
 * launch rocm-safe wraps, so the ratio to it is rocm-safe's own overhead. Same output format.
 * Built and run by setup.sh's launch_overhead on the device machine:
 * launch_bench <cubin> [launches [libamdhip64.so]]. */
#include <cuda.h>
#include <dlfcn.h>
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

/* The raw HIP loop through the library at `path` (hipModuleLaunchKernel of `noop` from `image`,
 * on a stream of its own). Prints raw_hiplaunch_{enqueue,with_sync}_us; 1 on any failure. */
static int hip_loop(const char *path, const char *image, unsigned n) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "launch_bench: dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "hipInit");
    int (*load)(void **, const void *) = (int (*)(void **, const void *))dlsym(lib, "hipModuleLoadData");
    int (*get)(void **, void *, const char *) =
        (int (*)(void **, void *, const char *))dlsym(lib, "hipModuleGetFunction");
    int (*stream_create)(void **, unsigned) =
        (int (*)(void **, unsigned))dlsym(lib, "hipStreamCreateWithFlags");
    int (*sync)(void *) = (int (*)(void *))dlsym(lib, "hipStreamSynchronize");
    int (*launch_k)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                    void *, void **, void **) =
        (int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                 void *, void **, void **))dlsym(lib, "hipModuleLaunchKernel");
    if (!init || !load || !get || !stream_create || !sync || !launch_k) {
        fprintf(stderr, "launch_bench: %s lacks a HIP entry point\n", path);
        return 1;
    }
    /* The code object in memory, as rocm-safe hands it over (hipModuleLoadData). */
    FILE *fp = fopen(image, "rb");
    if (!fp) return 1;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *bytes = malloc(size > 0 ? (size_t)size : 1);
    size_t got = bytes ? fread(bytes, 1, (size_t)size, fp) : 0;
    fclose(fp);
    if (!bytes || got != (size_t)size) return 1;
    void *mod = NULL, *f = NULL, *s = NULL;
    /* hipStreamNonBlocking (1), as the CUDA loop's CU_STREAM_NON_BLOCKING. */
    if (init(0) || load(&mod, bytes) || get(&f, mod, "noop") || stream_create(&s, 1)) {
        fprintf(stderr, "launch_bench: HIP setup through %s failed\n", path);
        return 1;
    }
    double times[2];
    for (int pass = -1; pass < 2; pass++) {
        unsigned count = pass < 0 ? 1000 : n; /* pass -1: warm-up */
        double t0 = now();
        for (unsigned i = 0; i < count; i++)
            if (launch_k(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL)) {
                fprintf(stderr, "launch_bench: hipModuleLaunchKernel failed\n");
                return 1;
            }
        double enq = now() - t0;
        if (sync(s)) return 1;
        if (pass >= 0) times[pass] = pass == 0 ? enq : now() - t0;
    }
    printf("launch_overhead raw_hiplaunch_enqueue_us %.3f\n", times[0] * 1e6 / n);
    printf("launch_overhead raw_hiplaunch_with_sync_us %.3f\n", times[1] * 1e6 / n);
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
    if (argc > 3) return hip_loop(argv[3], argv[1], n);
    return 0;
}
