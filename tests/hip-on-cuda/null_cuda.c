/*
 * null_cuda.c - a do-nothing CUDA driver and cuBLAS for the HIP-on-CUDA double, so the whole
 * Rust stack (candle-core, candle-rocm, rocm-safe, rocm-sys, the double) runs on any CPU machine
 * with no GPU: `build.sh --null OUT` links hip_on_cuda.c and rocblas_on_cublas.c against this
 * file instead of libcuda/libcublas.
 *
 * What it is for: measuring and profiling the host side of our stack (per-op dispatch, checks,
 * allocation, launch argument packing) without the driver's own launch cost, e.g. the
 * `decode_llama_1.1b_host` row of candle-rocm-bench under `perf` (tests/hip-on-cuda/null-host.sh).
 * Results are meaningless: kernels and GEMMs do nothing; device memory is host memory, so
 * copies and memsets are real and a read-back returns whatever was last copied there.
 *
 * It reports one device, compute capability 9.0 ("sm_90", so candle-rocm looks for
 * `<module>.co` in CANDLE_ROCM_KERNELS_DIR: any bytes do, the module load is a no-op), with
 * NULL_CUDA_STATS=1 prints the launch and GEMM counts at exit; NULL_CUDA_STATS=2 also the launches
 * of each kernel name (each cuModuleGetFunction gets its own handle; names past the first 4096
 * lookups share one uncounted handle). Graphs capture nothing (kernel
 * launches during a capture are counted and dropped like any other); a graph launch counts as
 * one launch, so the host cost of a graph step can be measured next to plain launches, and
 * graph instantiations are counted (an update that reuses an executable graph is not).
 */
#include "cuda_min.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NC_EXPORT __attribute__((visibility("default")))

static atomic_long g_launches, g_gemms, g_allocs, g_graph_launches, g_instantiations;
/* Distinct, never-dereferenced handles. */
static char g_ctx, g_module, g_function, g_stream, g_event, g_pool, g_blas, g_graph, g_exec;

/* NULL_CUDA_STATS=2: launches per kernel name (a handle per cuModuleGetFunction). */
#define NC_MAX_NAMES 4096
struct nc_name { char name[128]; long launches; };
static struct nc_name g_names[NC_MAX_NAMES];
static atomic_int g_nnames;
static int g_per_name;

static void report(void)
{
    if (g_per_name) {
        int n = atomic_load(&g_nnames);
        for (int i = 0; i < n; i++)
            if (g_names[i].launches)
                fprintf(stderr, "null_cuda: %10ld %s\n", g_names[i].launches, g_names[i].name);
    }
    fprintf(stderr,
            "null_cuda: %ld kernel launches, %ld GEMMs, %ld allocations, %ld graph launches, %ld "
            "graph instantiations\n",
            atomic_load(&g_launches), atomic_load(&g_gemms), atomic_load(&g_allocs),
            atomic_load(&g_graph_launches), atomic_load(&g_instantiations));
}

NC_EXPORT CUresult cuInit(unsigned int flags)
{
    static int once;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!once) {
        once = 1;
        const char *s = getenv("NULL_CUDA_STATS");
        if (s && (strcmp(s, "1") == 0 || strcmp(s, "2") == 0)) atexit(report);
        g_per_name = s && strcmp(s, "2") == 0;
    }
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "null_cuda"; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    (void)d;
    snprintf(name, (size_t)len, "null_cuda (no GPU)");
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { (void)d; *bytes = (size_t)64 << 30; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 0; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&g_ctx; return CUDA_SUCCESS; }
static _Thread_local CUcontext t_ctx;
NC_EXPORT CUresult cuCtxSetCurrent(CUcontext c) { t_ctx = c; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = t_ctx; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    *free_b = (size_t)60 << 30;
    *total = (size_t)64 << 30;
    return CUDA_SUCCESS;
}

/* ---- memory: host memory stands in for device memory ---- */
static CUresult alloc(CUdeviceptr *p, size_t n)
{
    void *m = malloc(n ? n : 1);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&g_allocs, 1);
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
#define PTR(d) ((void *)(uintptr_t)(d))
NC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return alloc(p, n); }
NC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return alloc(p, n); }
NC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { free(PTR(p)); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; free(PTR(p)); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
    (void)flags;
    *p = malloc(n ? n : 1);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
NC_EXPORT CUresult cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy(PTR(d), s, n); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, PTR(s), n); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove(PTR(d), PTR(s), n); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
NC_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
NC_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return cuMemcpyDtoD_v2(d, s, n); }
/* One address space: peers always "can" access each other, and a peer copy is a memmove. */
NC_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice p) { *can = d != p; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext c, unsigned int f) { (void)c; (void)f; return CUDA_SUCCESS; }
/* One device: nothing to share with another process; the one-shot all-reduce keeps RCCL. */
NC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr d) { (void)h; (void)d; return CUDA_ERROR_NOT_SUPPORTED; }
NC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *d, CUipcMemHandle h, unsigned int f) { (void)d; (void)h; (void)f; return CUDA_ERROR_NOT_SUPPORTED; }
NC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr d) { (void)d; return CUDA_ERROR_NOT_SUPPORTED; }
NC_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) { (void)dc; (void)sc; (void)st; return cuMemcpyDtoD_v2(d, s, n); }
NC_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; memset(PTR(d), v, n); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    (void)s;
    unsigned short *p = PTR(d);
    for (size_t i = 0; i < n; i++) p[i] = v;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    (void)s;
    unsigned int *p = PTR(d);
    for (size_t i = 0; i < n; i++) p[i] = v;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d) { (void)d; *p = (CUmemoryPool)&g_pool; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v) { (void)p; (void)a; (void)v; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    (void)p; (void)a;
    memset(v, 0, sizeof(cuuint64_t));
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) { (void)p; (void)keep; return CUDA_SUCCESS; }

/* ---- streams, events: everything has already happened ---- */
NC_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) { (void)flags; *s = (CUstream)&g_stream; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuStreamDestroy_v2(CUstream s) { (void)s; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuStreamQuery(CUstream s) { (void)s; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { (void)s; (void)e; (void)f; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) { (void)flags; *e = (CUevent)&g_event; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventDestroy_v2(CUevent e) { (void)e; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { (void)e; (void)s; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventQuery(CUevent e) { (void)e; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0.0f; return CUDA_SUCCESS; }

/* ---- modules and launches: accepted and dropped ---- */
NC_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) { (void)image; *m = (CUmodule)&g_module; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)m;
    int i = atomic_fetch_add(&g_nnames, 1);
    if (g_per_name && i < NC_MAX_NAMES) {
        snprintf(g_names[i].name, sizeof g_names[i].name, "%s", name);
        *f = (CUfunction)&g_names[i];
    } else {
        *f = (CUfunction)&g_function;
    }
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    (void)f;
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                  CUstream s, void **params, void **extra)
{
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s;
    (void)params; (void)extra;
    atomic_fetch_add(&g_launches, 1);
    if (g_per_name && (char *)f >= (char *)g_names && (char *)f < (char *)(g_names + NC_MAX_NAMES))
        ((struct nc_name *)f)->launches++;
    return CUDA_SUCCESS;
}

/* ---- graphs: one capture at a time (one stream handle), nothing recorded ---- */
static _Thread_local int t_capturing;
NC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
    (void)s; (void)m;
    if (t_capturing) return CUDA_ERROR_INVALID_VALUE;
    t_capturing = 1;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    (void)s;
    if (!t_capturing) return CUDA_ERROR_INVALID_VALUE;
    t_capturing = 0;
    *g = (CUgraph)&g_graph;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = t_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    static _Thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    CUstreamCaptureMode old = t_mode;
    t_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long f)
{
    (void)g; (void)f;
    atomic_fetch_add(&g_instantiations, 1);
    *e = (CUgraphExec)&g_exec;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    (void)e; (void)g;
    info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    info->errorNode = NULL;
    info->errorFromNode = NULL;
    return CUDA_SUCCESS;
}
NC_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { (void)e; (void)s; atomic_fetch_add(&g_graph_launches, 1); return CUDA_SUCCESS; }
NC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { (void)e; return CUDA_SUCCESS; }
NC_EXPORT CUresult cuGraphDestroy(CUgraph g) { (void)g; return CUDA_SUCCESS; }

/* ---- cuBLAS ---- */
NC_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)&g_blas; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *v) { (void)h; *v = 130000; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { (void)h; (void)s; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) { (void)h; *s = (cudaStream_t)&g_stream; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t m) { (void)h; (void)m; return CUBLAS_STATUS_SUCCESS; }
NC_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)handle; (void)transa; (void)transb; (void)m; (void)n; (void)k; (void)alpha; (void)A;
    (void)Atype; (void)lda; (void)strideA; (void)B; (void)Btype; (void)ldb; (void)strideB;
    (void)beta; (void)C; (void)Ctype; (void)ldc; (void)strideC; (void)batchCount;
    (void)computeType; (void)algo;
    atomic_fetch_add(&g_gemms, 1);
    return CUBLAS_STATUS_SUCCESS;
}
