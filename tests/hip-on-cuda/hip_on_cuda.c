/*
 * hip_on_cuda.c - a test double of the HIP runtime (libamdhip64) on the CUDA driver API.
 *
 * Exports the entry points rocm-sys resolves (rocm-sys/src/bindings/hip.rs `api_table!`, and
 * hipGetDevicePropertiesR0600 from rocm-sys/src/props.rs) with HIP's C ABI. Handles are CUDA
 * handles cast to HIP's opaque pointer types; hipDeviceptr_t is a CUdeviceptr in a void*.
 *
 * Context model: one primary context per device, retained on first use; a thread-local current
 * device (default 0) set by hipSetDevice; hoc_bind() makes that device's primary context current
 * on the calling thread before any call that needs a context.
 *
 * Graphs: stream capture, instantiate, update and launch map to CUDA graphs. HIP's capture
 * modes, capture statuses and update results have CUDA's values (checked in cuda_min.h).
 *
 * Failure injection (read once, at hipInit): HIP_ON_CUDA_FAIL_MALLOC_AFTER=N makes the (N+1)-th
 * and later hipMalloc/hipMallocAsync calls fail with hipErrorOutOfMemory;
 * HIP_ON_CUDA_FAIL_LAUNCH_AFTER=N does the same for hipModuleLaunchKernel (hipErrorLaunchFailure).
 */
#include "hoc_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOC_MAX_DEVICES 64
/* A clearly fake, well-formed HIP_VERSION (major*10^7 + minor*10^5 + patch): "6.3.0". */
#define HOC_FAKE_HIP_RUNTIME_VERSION 60300000

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CUresult g_init_rc = CUDA_ERROR_NOT_INITIALIZED;
static int g_ndev;
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_ctx[HOC_MAX_DEVICES];
static _Thread_local int t_device;
static long g_fail_malloc_after = -1, g_fail_launch_after = -1;
static atomic_long g_malloc_calls, g_launch_calls;

/* ------------------------------------------------------------------------------------------ */
/* CUDA -> HIP error codes. HIP's numbering copies CUDA's for these, so they pass unchanged.    */
static hipError_t map_cu(CUresult rc)
{
    switch ((int)rc) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8:
    case 100: case 101:
    case 200: case 201: case 202: case 205: case 206: case 207: case 208: case 209: case 210:
    case 211: case 212: case 213: case 214: case 215: case 216: case 217: case 218: case 219:
    case 300: case 301: case 302: case 303: case 304:
    case 400: case 401: case 500: case 600:
    case 700: case 701: case 702: case 704: case 705: case 708: case 709: case 710: case 712:
    case 713: case 719: case 720: case 801:
    case 900: case 901: case 902: case 903: case 904: case 905: case 906: case 907: case 908:
    case 910:
        return (hipError_t)rc;
    case 34: /* CUDA_ERROR_STUB_LIBRARY: linked against the toolkit stub, no real driver */
        return hipErrorInsufficientDriver;
    case 222: /* CUDA_ERROR_UNSUPPORTED_PTX_VERSION: HIP has no twin; closest is a bad code object */
        return hipErrorInvalidKernelFile;
    case 714: case 715: case 716: case 717: case 718: /* device-side faults: HIP reports a launch failure */
        return hipErrorLaunchFailure;
    default:
        return hipErrorUnknown;
    }
}

static long env_long(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return (end && *end == '\0' && n >= 0) ? n : -1;
}

static void init_once(void)
{
    g_fail_malloc_after = env_long("HIP_ON_CUDA_FAIL_MALLOC_AFTER");
    g_fail_launch_after = env_long("HIP_ON_CUDA_FAIL_LAUNCH_AFTER");
    g_init_rc = cuInit(0);
    if (g_init_rc == CUDA_SUCCESS && cuDeviceGetCount(&g_ndev) != CUDA_SUCCESS) g_ndev = 0;
    if (g_ndev > HOC_MAX_DEVICES) g_ndev = HOC_MAX_DEVICES;
}

static hipError_t ensure_init(void)
{
    pthread_once(&g_once, init_once);
    if (g_init_rc != CUDA_SUCCESS) return map_cu(g_init_rc);
    return g_ndev > 0 ? hipSuccess : hipErrorNoDevice;
}

static hipError_t check_device(int device)
{
    hipError_t e = ensure_init();
    if (e != hipSuccess) return e;
    return (device >= 0 && device < g_ndev) ? hipSuccess : hipErrorInvalidDevice;
}

static hipError_t primary_ctx(int device, CUcontext *out)
{
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    pthread_mutex_lock(&g_ctx_mu);
    CUresult rc = CUDA_SUCCESS;
    if (!g_ctx[device]) {
        CUdevice dev;
        rc = cuDeviceGet(&dev, device);
        if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&g_ctx[device], dev);
    }
    *out = g_ctx[device];
    pthread_mutex_unlock(&g_ctx_mu);
    return map_cu(rc);
}

HOC_HIDDEN hipError_t hoc_bind_device(int device)
{
    CUcontext want = NULL, cur = NULL;
    hipError_t e = primary_ctx(device, &want);
    if (e != hipSuccess) return e;
    if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return hipSuccess;
    return map_cu(cuCtxSetCurrent(want));
}

HOC_HIDDEN hipError_t hoc_bind(void) { return hoc_bind_device(t_device); }
HOC_HIDDEN int hoc_current_device(void) { return t_device; }

#define BIND()                                  \
    do {                                        \
        hipError_t bind_e_ = hoc_bind();        \
        if (bind_e_ != hipSuccess) return bind_e_; \
    } while (0)
#define CU(call) return map_cu(call)
#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))
#define STREAM(s) ((CUstream)(s))
#define EVENT(e) ((CUevent)(e))

/* ------------------------------------------------------------------------------------------ */
/* Initialisation, versions, devices                                                          */
HOC_EXPORT hipError_t hipInit(unsigned int flags)
{
    if (flags != 0) return hipErrorInvalidValue; /* HIP and CUDA both require 0 */
    return ensure_init();
}

/* Reports the CUDA driver's version (e.g. 12040), not a HIP-style number. */
HOC_EXPORT hipError_t hipDriverGetVersion(int *v)
{
    if (!v) return hipErrorInvalidValue;
    CU(cuDriverGetVersion(v));
}

/* Needs no device, like HIP's. Value: HOC_FAKE_HIP_RUNTIME_VERSION. */
HOC_EXPORT hipError_t hipRuntimeGetVersion(int *v)
{
    if (!v) return hipErrorInvalidValue;
    *v = HOC_FAKE_HIP_RUNTIME_VERSION;
    return hipSuccess;
}

HOC_EXPORT hipError_t hipGetDeviceCount(int *count)
{
    if (!count) return hipErrorInvalidValue;
    hipError_t e = ensure_init();
    *count = (e == hipSuccess) ? g_ndev : 0;
    return e;
}

HOC_EXPORT hipError_t hipSetDevice(int device)
{
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    t_device = device;
    return hoc_bind();
}

HOC_EXPORT hipError_t hipGetDevice(int *device)
{
    if (!device) return hipErrorInvalidValue;
    hipError_t e = ensure_init();
    if (e != hipSuccess) return e;
    *device = t_device;
    return hipSuccess;
}

/* hipDeviceAttribute_t -> CUdevice_attribute; -1 when this double does not know the attribute. */
static int map_device_attr(int attr)
{
    switch (attr) {
    case 5: return CU_DEVICE_ATTRIBUTE_CLOCK_RATE;
    case 16: return CU_DEVICE_ATTRIBUTE_INTEGRATED;
    case 19: return CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE;
    case 23: return CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
    case 26: return CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X;
    case 27: return CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y;
    case 28: return CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z;
    case 29: return CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X;
    case 30: return CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y;
    case 31: return CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z;
    case 56: return CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
    case 57: return CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR;
    case 61: return CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
    case 63: return CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
    case 67: return CU_DEVICE_ATTRIBUTE_PCI_BUS_ID;
    case 68: return CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID;
    case 71: return CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK;
    case 74: return CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK;
    case 75: return CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN; /* SharedMemPerBlockOptin */
    case 83: return CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY;
    case 87: return CU_DEVICE_ATTRIBUTE_WARP_SIZE; /* 32 on NVIDIA: never wave64 */
    case 88: return CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
    case 10002: return CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR; /* AMD-range attr */
    default: return -1;
    }
}

HOC_EXPORT hipError_t hipDeviceGetAttribute(int *pi, int attr, int device)
{
    if (!pi) return hipErrorInvalidValue;
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    int cu_attr = map_device_attr(attr);
    if (cu_attr < 0) return hipErrorInvalidValue;
    CUdevice dev;
    CUresult rc = cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(pi, (CUdevice_attribute)cu_attr, dev);
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device)
{
    if (!name || len <= 0) return hipErrorInvalidValue;
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    CUdevice dev;
    CUresult rc = cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetName(name, len, dev);
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
{
    if (!bytes) return hipErrorInvalidValue;
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    CUdevice dev;
    CUresult rc = cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = cuDeviceTotalMem_v2(bytes, dev);
    return map_cu(rc);
}

/*
 * Fills the ROCm 6 (R0600) hipDeviceProp_t layout, only the fields rocm-sys reads or logs:
 * name @0 (char[256]), totalGlobalMem @288, warpSize @308, multiProcessorCount @388 and
 * gcnArchName @1160 (char[256]), which carries "sm_<major><minor>" in place of "gfx...".
 * Every other byte of the 1472-byte struct is zero. The old R0000/unversioned names are
 * deliberately not exported.
 */
#define R0600_SIZE 1472
HOC_EXPORT hipError_t hipGetDevicePropertiesR0600(void *prop, int device)
{
    if (!prop) return hipErrorInvalidValue;
    hipError_t e = check_device(device);
    if (e != hipSuccess) return e;
    unsigned char *p = prop;
    memset(p, 0, R0600_SIZE);
    CUdevice dev;
    CUresult rc = cuDeviceGet(&dev, device);
    if (rc != CUDA_SUCCESS) return map_cu(rc);
    int major = 0, minor = 0, warp = 0, sms = 0;
    size_t total = 0;
    if ((rc = cuDeviceGetName((char *)p, 256, dev)) != CUDA_SUCCESS ||
        (rc = cuDeviceTotalMem_v2(&total, dev)) != CUDA_SUCCESS ||
        (rc = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) != CUDA_SUCCESS ||
        (rc = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) != CUDA_SUCCESS ||
        (rc = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev)) != CUDA_SUCCESS ||
        (rc = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) != CUDA_SUCCESS)
        return map_cu(rc);
    p[255] = '\0';
    memcpy(p + 288, &total, sizeof total);
    memcpy(p + 308, &warp, sizeof warp);
    memcpy(p + 388, &sms, sizeof sms);
    snprintf((char *)p + 1160, 256, "sm_%d%d", major, minor);
    return hipSuccess;
}

HOC_EXPORT hipError_t hipDeviceSynchronize(void)
{
    BIND();
    CU(cuCtxSynchronize());
}

HOC_EXPORT hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes) return hipErrorInvalidValue;
    BIND();
    CU(cuMemGetInfo_v2(free_bytes, total_bytes));
}

/* ------------------------------------------------------------------------------------------ */
/* Error strings                                                                              */
static const struct { int code; const char *name, *text; } k_errors[] = {
    {0, "hipSuccess", "no error"},
    {1, "hipErrorInvalidValue", "invalid argument"},
    {2, "hipErrorOutOfMemory", "out of memory"},
    {3, "hipErrorNotInitialized", "initialization error"},
    {4, "hipErrorDeinitialized", "driver shutting down"},
    {9, "hipErrorInvalidConfiguration", "invalid configuration argument"},
    {35, "hipErrorInsufficientDriver", "driver version is insufficient for runtime version"},
    {98, "hipErrorInvalidDeviceFunction", "invalid device function"},
    {100, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {101, "hipErrorInvalidDevice", "invalid device ordinal"},
    {200, "hipErrorInvalidImage", "device kernel image is invalid"},
    {201, "hipErrorInvalidContext", "invalid device context"},
    {209, "hipErrorNoBinaryForGpu", "no kernel image is available for execution on the device"},
    {218, "hipErrorInvalidKernelFile", "invalid kernel file"},
    {400, "hipErrorInvalidHandle", "invalid resource handle"},
    {500, "hipErrorNotFound", "named symbol not found"},
    {600, "hipErrorNotReady", "device not ready"},
    {700, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {701, "hipErrorLaunchOutOfResources", "too many resources requested for launch"},
    {702, "hipErrorLaunchTimeOut", "the launch timed out and was terminated"},
    {719, "hipErrorLaunchFailure", "unspecified launch failure"},
    {801, "hipErrorNotSupported", "operation not supported"},
    {900, "hipErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {901, "hipErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"},
    {902, "hipErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences"},
    {903, "hipErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began"},
    {904, "hipErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {905, "hipErrorStreamCaptureIsolation", "dependency created on uncaptured work in another stream"},
    {906, "hipErrorStreamCaptureImplicit", "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "hipErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"},
    {908, "hipErrorStreamCaptureWrongThread", "attempt to terminate a thread-local capture sequence from another thread"},
    {910, "hipErrorGraphExecUpdateFailure", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {999, "hipErrorUnknown", "unknown error"},
};

HOC_EXPORT const char *hipGetErrorName(hipError_t e)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == e) return k_errors[i].name;
    return "hipErrorUnknown";
}

HOC_EXPORT const char *hipGetErrorString(hipError_t e)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == e) return k_errors[i].text;
    return "unknown error";
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */
static int injected(atomic_long *calls, long after)
{
    long n = atomic_fetch_add(calls, 1);
    return after >= 0 && n >= after;
}

HOC_EXPORT hipError_t hipMalloc(void **ptr, size_t size)
{
    if (!ptr) return hipErrorInvalidValue;
    BIND();
    *ptr = NULL;
    if (size == 0) return hipSuccess; /* HIP: success and NULL; cuMemAlloc(0) would fail */
    if (injected(&g_malloc_calls, g_fail_malloc_after)) return hipErrorOutOfMemory;
    CUdeviceptr d = 0;
    CUresult rc = cuMemAlloc_v2(&d, size);
    if (rc == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipFree(void *ptr)
{
    BIND();
    if (!ptr) return hipSuccess;
    CU(cuMemFree_v2(DPTR(ptr)));
}

HOC_EXPORT hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t stream)
{
    if (!ptr) return hipErrorInvalidValue;
    BIND();
    *ptr = NULL;
    if (size == 0) return hipSuccess;
    if (injected(&g_malloc_calls, g_fail_malloc_after)) return hipErrorOutOfMemory;
    CUdeviceptr d = 0;
    CUresult rc = cuMemAllocAsync(&d, size, STREAM(stream));
    if (rc == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipFreeAsync(void *ptr, hipStream_t stream)
{
    BIND();
    if (!ptr) return hipSuccess;
    CU(cuMemFreeAsync(DPTR(ptr), STREAM(stream)));
}

/* hipDeviceMallocDefault 0 / hipDeviceMallocFinegrained 1 / hipDeviceMallocUncached 3: CUDA's
 * device memory is already what fine-grained memory is for on AMD (stores and system-scope
 * atomics seen by a peer GPU while a kernel runs), so all three are plain allocations. */
HOC_EXPORT hipError_t hipExtMallocWithFlags(void **ptr, size_t size, unsigned int flags)
{
    if (flags != 0 && flags != 1 && flags != 3) return hipErrorInvalidValue;
    return hipMalloc(ptr, size);
}

/* Interprocess memory: the handle is CUDA's, byte for byte (both 64 bytes). Opening always
 * enables peer access lazily, as HIP's only flag (hipIpcMemLazyEnablePeerAccess, 0) asks. */
HOC_EXPORT hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr)
{
    if (!handle || !ptr) return hipErrorInvalidValue;
    BIND();
    CUipcMemHandle h;
    CUresult rc = cuIpcGetMemHandle(&h, DPTR(ptr));
    if (rc == CUDA_SUCCESS) memcpy(handle->reserved, h.reserved, sizeof h.reserved);
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle, unsigned int flags)
{
    if (!ptr || flags != 0) return hipErrorInvalidValue;
    BIND();
    *ptr = NULL;
    CUipcMemHandle h;
    memcpy(h.reserved, handle.reserved, sizeof h.reserved);
    CUdeviceptr d = 0;
    CUresult rc = cuIpcOpenMemHandle_v2(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipIpcCloseMemHandle(void *ptr)
{
    if (!ptr) return hipErrorInvalidValue;
    BIND();
    CU(cuIpcCloseMemHandle(DPTR(ptr)));
}

/* HIP flags Portable 1 / Mapped 2 / WriteCombined 4 equal CUDA's; AMD-only bits (coherence,
 * NUMA) are dropped. HIP's default pinned memory is portable and mapped, so those are forced. */
HOC_EXPORT hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
    if (!ptr) return hipErrorInvalidValue;
    BIND();
    *ptr = NULL;
    if (size == 0) return hipSuccess;
    unsigned int cu_flags = (flags & 0x7u) | CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
    CU(cuMemHostAlloc(ptr, size, cu_flags));
}

HOC_EXPORT hipError_t hipHostFree(void *ptr)
{
    BIND();
    if (!ptr) return hipSuccess;
    CU(cuMemFreeHost(ptr));
}

HOC_EXPORT hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void *src, size_t n)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyHtoD_v2(DPTR(dst), src, n));
}

HOC_EXPORT hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t n)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyDtoH_v2(dst, DPTR(src), n));
}

HOC_EXPORT hipError_t hipMemcpyDtoD(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyDtoD_v2(DPTR(dst), DPTR(src), n));
}

HOC_EXPORT hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t n, hipStream_t s)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyHtoDAsync_v2(DPTR(dst), src, n, STREAM(s)));
}

HOC_EXPORT hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t n, hipStream_t s)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyDtoHAsync_v2(dst, DPTR(src), n, STREAM(s)));
}

HOC_EXPORT hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n, hipStream_t s)
{
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyDtoDAsync_v2(DPTR(dst), DPTR(src), n, STREAM(s)));
}

/* ---- Peer to peer: HIP's device-numbered calls on CUDA's per-context ones (each device's
 * primary context). HIP's hipErrorPeerAccessAlreadyEnabled (704) is CUDA's code too. */
HOC_EXPORT hipError_t hipDeviceCanAccessPeer(int *can, int device, int peer)
{
    if (!can) return hipErrorInvalidValue;
    hipError_t e = check_device(device);
    if (e == hipSuccess) e = check_device(peer);
    if (e != hipSuccess) return e;
    *can = 0;
    if (device == peer) return hipSuccess; /* HIP: a device is not a peer of itself */
    CUdevice d, p;
    CUresult rc = cuDeviceGet(&d, device);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGet(&p, peer);
    if (rc == CUDA_SUCCESS) rc = cuDeviceCanAccessPeer(can, d, p);
    return map_cu(rc);
}

/* Access from the calling thread's current device to `peer`'s memory. */
HOC_EXPORT hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    if (flags != 0) return hipErrorInvalidValue;
    CUcontext peer_ctx = NULL;
    hipError_t e = primary_ctx(peer, &peer_ctx);
    if (e != hipSuccess) return e;
    BIND();
    CU(cuCtxEnablePeerAccess(peer_ctx, 0));
}

HOC_EXPORT hipError_t hipMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                         size_t n, hipStream_t s)
{
    CUcontext dst_ctx = NULL, src_ctx = NULL;
    hipError_t e = primary_ctx(dst_device, &dst_ctx);
    if (e == hipSuccess) e = primary_ctx(src_device, &src_ctx);
    if (e != hipSuccess) return e;
    BIND();
    if (n == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    CU(cuMemcpyPeerAsync(DPTR(dst), dst_ctx, DPTR(src), src_ctx, n, STREAM(s)));
}

HOC_EXPORT hipError_t hipMemsetD8Async(hipDeviceptr_t dst, unsigned char v, size_t count, hipStream_t s)
{
    BIND();
    if (count == 0) return hipSuccess;
    if (!dst) return hipErrorInvalidValue;
    CU(cuMemsetD8Async(DPTR(dst), v, count, STREAM(s)));
}

HOC_EXPORT hipError_t hipMemsetD16Async(hipDeviceptr_t dst, unsigned short v, size_t count, hipStream_t s)
{
    BIND();
    if (count == 0) return hipSuccess;
    if (!dst) return hipErrorInvalidValue;
    CU(cuMemsetD16Async(DPTR(dst), v, count, STREAM(s)));
}

/* HIP takes the 32-bit pattern as int, CUDA as unsigned int: same bits. */
HOC_EXPORT hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int v, size_t count, hipStream_t s)
{
    BIND();
    if (count == 0) return hipSuccess;
    if (!dst) return hipErrorInvalidValue;
    CU(cuMemsetD32Async(DPTR(dst), (unsigned int)v, count, STREAM(s)));
}

/* ------------------------------------------------------------------------------------------ */
/* Memory pools (hipMemPoolAttr values 1..8 equal CUmemPool_attribute's)                     */
HOC_EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *pool, int device)
{
    if (!pool) return hipErrorInvalidValue;
    hipError_t e = hoc_bind_device(device);
    if (e != hipSuccess) return e;
    CUdevice dev;
    CUmemoryPool p = NULL;
    CUresult rc = cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetDefaultMemPool(&p, dev);
    if (rc == CUDA_SUCCESS) *pool = (hipMemPool_t)p;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, unsigned int attr, void *value)
{
    if (!pool || !value || attr < 1 || attr > 8) return hipErrorInvalidValue;
    BIND();
    CU(cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}

HOC_EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t pool, unsigned int attr, void *value)
{
    if (!pool || !value || attr < 1 || attr > 8) return hipErrorInvalidValue;
    BIND();
    CU(cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}

HOC_EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t min_bytes_to_hold)
{
    if (!pool) return hipErrorInvalidValue;
    BIND();
    CU(cuMemPoolTrimTo((CUmemoryPool)pool, min_bytes_to_hold));
}

/* ------------------------------------------------------------------------------------------ */
/* Streams and events                                                                         */
HOC_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
    if (!stream || (flags & ~1u)) return hipErrorInvalidValue; /* hipStreamDefault 0, NonBlocking 1 */
    BIND();
    CUstream s = NULL;
    CUresult rc = cuStreamCreate(&s, flags ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
    if (rc == CUDA_SUCCESS) *stream = (hipStream_t)s;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipStreamDestroy(hipStream_t stream)
{
    if (!stream) return hipErrorInvalidHandle;
    BIND();
    CU(cuStreamDestroy_v2(STREAM(stream)));
}

HOC_EXPORT hipError_t hipStreamSynchronize(hipStream_t stream)
{
    BIND();
    CU(cuStreamSynchronize(STREAM(stream)));
}

HOC_EXPORT hipError_t hipStreamQuery(hipStream_t stream)
{
    BIND();
    CU(cuStreamQuery(STREAM(stream)));
}

HOC_EXPORT hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
    if (!event) return hipErrorInvalidHandle;
    if (flags != 0) return hipErrorInvalidValue;
    BIND();
    CU(cuStreamWaitEvent(STREAM(stream), EVENT(event), 0));
}

/* HIP's Default 0 / BlockingSync 1 / DisableTiming 2 / Interprocess 4 equal CUDA's; the AMD-only
 * release-scope bits (0x20000000, 0x40000000, 0x80000000) are accepted and dropped. */
HOC_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned int flags)
{
    const unsigned int amd_only = 0x20000000u | 0x40000000u | 0x80000000u;
    if (!event || (flags & ~(0x7u | amd_only))) return hipErrorInvalidValue;
    BIND();
    CUevent ev = NULL;
    CUresult rc = cuEventCreate(&ev, flags & 0x7u);
    if (rc == CUDA_SUCCESS) *event = (hipEvent_t)ev;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipEventDestroy(hipEvent_t event)
{
    if (!event) return hipErrorInvalidHandle;
    BIND();
    CU(cuEventDestroy_v2(EVENT(event)));
}

HOC_EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
    if (!event) return hipErrorInvalidHandle;
    BIND();
    CU(cuEventRecord(EVENT(event), STREAM(stream)));
}

HOC_EXPORT hipError_t hipEventSynchronize(hipEvent_t event)
{
    if (!event) return hipErrorInvalidHandle;
    BIND();
    CU(cuEventSynchronize(EVENT(event)));
}

HOC_EXPORT hipError_t hipEventQuery(hipEvent_t event)
{
    if (!event) return hipErrorInvalidHandle;
    BIND();
    CU(cuEventQuery(EVENT(event)));
}

HOC_EXPORT hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop)
{
    if (!ms) return hipErrorInvalidValue;
    if (!start || !stop) return hipErrorInvalidHandle;
    BIND();
    CU(cuEventElapsedTime(ms, EVENT(start), EVENT(stop)));
}

/* ------------------------------------------------------------------------------------------ */
/* Modules and launches                                                                       */
/* `image` must be something cuModuleLoadData accepts: cubin, fatbin or NUL-terminated PTX. */
HOC_EXPORT hipError_t hipModuleLoadData(hipModule_t *module, const void *image)
{
    if (!module || !image) return hipErrorInvalidValue;
    BIND();
    CUmodule m = NULL;
    CUresult rc = cuModuleLoadData(&m, image);
    if (rc == CUDA_SUCCESS) *module = (hipModule_t)m;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipModuleUnload(hipModule_t module)
{
    if (!module) return hipErrorInvalidHandle;
    BIND();
    CU(cuModuleUnload((CUmodule)module));
}

HOC_EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *kname)
{
    if (!function || !kname) return hipErrorInvalidValue;
    if (!module) return hipErrorInvalidHandle;
    BIND();
    CUfunction f = NULL;
    CUresult rc = cuModuleGetFunction(&f, (CUmodule)module, kname);
    if (rc == CUDA_SUCCESS) *function = (hipFunction_t)f;
    return map_cu(rc); /* CUDA_ERROR_NOT_FOUND -> hipErrorNotFound, as HIP reports */
}

/* HIP_FUNC_ATTRIBUTE_* 0..9 have CU_FUNC_ATTRIBUTE_*'s values. */
HOC_EXPORT hipError_t hipFuncGetAttribute(int *value, unsigned int attrib, hipFunction_t f)
{
    if (!value || attrib > 9) return hipErrorInvalidValue;
    if (!f) return hipErrorInvalidHandle;
    BIND();
    CU(cuFuncGetAttribute(value, (CUfunction_attribute)attrib, (CUfunction)f));
}

#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define HIP_LAUNCH_PARAM_END ((void *)0x03)

/*
 * HIP ends `extra` with HIP_LAUNCH_PARAM_END = (void*)3; CUDA with CU_LAUNCH_PARAM_END =
 * (void*)0. BUFFER_POINTER (1) and BUFFER_SIZE (2) coincide. The array is rebuilt CUDA-style.
 * Checks follow HIP's: null function -> hipErrorInvalidHandle, a zero dimension ->
 * hipErrorInvalidValue (not hipErrorInvalidConfiguration), both kernelParams and extra ->
 * hipErrorInvalidValue.
 */
HOC_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy,
                                            unsigned int gz, unsigned int bx, unsigned int by,
                                            unsigned int bz, unsigned int shared, hipStream_t stream,
                                            void **kernelParams, void **extra)
{
    if (!f) return hipErrorInvalidHandle;
    if (!gx || !gy || !gz || !bx || !by || !bz) return hipErrorInvalidValue;
    if (kernelParams && extra) return hipErrorInvalidValue;
    void *cu_extra[5];
    void **cu_extra_p = NULL;
    if (extra) {
        void *buf = NULL, *size = NULL;
        for (int i = 0; extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
            if (i >= 16) return hipErrorInvalidValue; /* unterminated */
            if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE) size = extra[i + 1];
            else return hipErrorInvalidValue;
        }
        if (!buf || !size) return hipErrorInvalidValue;
        cu_extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
        cu_extra[1] = buf;
        cu_extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
        cu_extra[3] = size;
        cu_extra[4] = CU_LAUNCH_PARAM_END;
        cu_extra_p = cu_extra;
    }
    BIND();
    if (injected(&g_launch_calls, g_fail_launch_after)) return hipErrorLaunchFailure;
    CU(cuLaunchKernel((CUfunction)f, gx, gy, gz, bx, by, bz, shared, STREAM(stream), kernelParams,
                      cu_extra_p));
}

/* ------------------------------------------------------------------------------------------ */
/* Stream capture and graphs                                                                  */
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphNode *hipGraphNode_t;
typedef struct hipGraphExec *hipGraphExec_t;

/* hipStreamCaptureMode 0..2 = CUstreamCaptureMode's values. */
HOC_EXPORT hipError_t hipStreamBeginCapture(hipStream_t stream, int mode)
{
    if (mode < 0 || mode > 2) return hipErrorInvalidValue;
    BIND();
    CU(cuStreamBeginCapture_v2(STREAM(stream), (CUstreamCaptureMode)mode));
}

HOC_EXPORT hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *graph)
{
    if (!graph) return hipErrorInvalidValue;
    BIND();
    CUgraph g = NULL;
    CUresult rc = cuStreamEndCapture(STREAM(stream), &g);
    *graph = (hipGraph_t)g; /* CUDA returns NULL when the capture was invalidated */
    return map_cu(rc);
}

/* hipStreamCaptureStatus 0..2 = CUstreamCaptureStatus's values. */
HOC_EXPORT hipError_t hipStreamIsCapturing(hipStream_t stream, int *status)
{
    if (!status) return hipErrorInvalidValue;
    BIND();
    CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = cuStreamIsCapturing(STREAM(stream), &s);
    if (rc == CUDA_SUCCESS) *status = (int)s;
    return map_cu(rc);
}

/* The calling thread's capture mode, swapped (needs no context). */
HOC_EXPORT hipError_t hipThreadExchangeStreamCaptureMode(int *mode)
{
    if (!mode || *mode < 0 || *mode > 2) return hipErrorInvalidValue;
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    CUresult rc = cuThreadExchangeStreamCaptureMode(&m);
    if (rc == CUDA_SUCCESS) *mode = (int)m;
    return map_cu(rc);
}

/* HIP keeps the pre-CUDA-12 signature (error node, log buffer); CUDA 12's plain
 * cuGraphInstantiate is cuGraphInstantiateWithFlags, which reports no error node: it is left
 * null and the log empty. */
HOC_EXPORT hipError_t hipGraphInstantiate(hipGraphExec_t *exec, hipGraph_t graph,
                                          hipGraphNode_t *error_node, char *log, size_t log_size)
{
    if (!exec) return hipErrorInvalidValue;
    if (!graph) return hipErrorInvalidValue;
    BIND();
    if (error_node) *error_node = NULL;
    if (log && log_size) log[0] = '\0';
    CUgraphExec e = NULL;
    CUresult rc = cuGraphInstantiateWithFlags(&e, (CUgraph)graph, 0);
    if (rc == CUDA_SUCCESS) *exec = (hipGraphExec_t)e;
    return map_cu(rc);
}

/* HIP's update reports (error node, result) by pointer; CUDA 12's _v2 fills a struct. The
 * hipGraphExecUpdateResult values 0..7 are CUgraphExecUpdateResult's; CUDA's 8 (attributes
 * changed) has no HIP twin and passes through as a number. */
HOC_EXPORT hipError_t hipGraphExecUpdate(hipGraphExec_t exec, hipGraph_t graph,
                                         hipGraphNode_t *error_node, int *result)
{
    if (!exec || !graph) return hipErrorInvalidValue;
    if (!error_node || !result) return hipErrorInvalidValue;
    BIND();
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult rc = cuGraphExecUpdate_v2((CUgraphExec)exec, (CUgraph)graph, &info);
    *error_node = (hipGraphNode_t)info.errorNode;
    *result = (int)info.result;
    return map_cu(rc);
}

HOC_EXPORT hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream)
{
    if (!exec) return hipErrorInvalidValue;
    BIND();
    CU(cuGraphLaunch((CUgraphExec)exec, STREAM(stream)));
}

HOC_EXPORT hipError_t hipGraphExecDestroy(hipGraphExec_t exec)
{
    if (!exec) return hipErrorInvalidValue;
    BIND();
    CU(cuGraphExecDestroy((CUgraphExec)exec));
}

HOC_EXPORT hipError_t hipGraphDestroy(hipGraph_t graph)
{
    if (!graph) return hipErrorInvalidValue;
    BIND();
    CU(cuGraphDestroy((CUgraph)graph));
}
