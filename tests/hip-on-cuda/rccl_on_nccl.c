/*
 * rccl_on_nccl.c - a test double of RCCL (librccl.so.1) on NVIDIA's NCCL.
 *
 * Exports exactly the entry points of rocm-sys/src/rccl.rs (`api_table!`, required and
 * optional) and forwards each to the same-named function of NCCL, opened at run time with
 * dlopen: RCCL is a port of NCCL and keeps its C API, so the only ABI differences are the
 * stream type and the data-type enum, and neither matters here:
 *  1. Streams: RCCL takes a hipStream_t, NCCL a cudaStream_t. The HIP double's hipStream_t *is*
 *     a CUstream (hip_on_cuda.c, hipStreamCreateWithFlags), and CUstream and cudaStream_t are
 *     the same type (struct CUstream_st *): streams pass through unchanged.
 *  2. Devices: NCCL takes the calling thread's CUDA device from the current context; the HIP
 *     double's hipSetDevice makes the device's primary context current (hoc_bind), which the
 *     CUDA runtime adopts. rocm-safe calls hipSetDevice before ncclCommInitRank.
 *  3. Enums: ncclResult_t 0..7, ncclRedOp_t 0..4 and ncclDataType_t 0..9 have the same values
 *     in RCCL's nccl.h.in (ROCm 5.7 through 7) and NCCL's nccl.h; the 8-bit floats are 10 and
 *     11 in both from NCCL 2.24 / ROCm 6.2 (RCCL's format on MI300 is FNUZ, NCCL's OCP: a
 *     difference rocm-safe never relies on, since it never reduces 8-bit floats).
 *     build.sh --check-decls compiles this file against NCCL's real nccl.h with static
 *     assertions on every value and on the ncclConfig_t layout.
 *  4. ncclUniqueId is 128 bytes in both.
 *
 * Which NCCL: $RCCL_ON_NCCL_LIB (a path), else the soname libnccl.so.2 (setup.sh points the
 * variable at the NCCL that PyTorch's wheels carry). When it cannot be opened, every call
 * returns ncclSystemError after printing why to stderr once; ncclGetErrorString still works.
 *
 * Failure injection (read once, at the first call):
 *  - RCCL_ON_NCCL_FAIL_AFTER=N: the (N+1)-th and later collective or point-to-point calls
 *    (AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv) return ncclRemoteError
 *    without reaching NCCL, as RCCL does when a peer is known dead at enqueue time.
 *  - RCCL_ON_NCCL_ASYNC_FAIL_AFTER=N: once N collectives have been forwarded, every
 *    ncclCommGetAsyncError reports ncclRemoteError (a peer found dead while work runs);
 *    ncclCommAbort and ncclCommDestroy still reach NCCL.
 * A real dead peer needs no injection: rocm-safe's rccl_multiprocess test kills a rank.
 *
 * Keep NCCL's NVLink multicast off on the device machines (NCCL_NVLS_ENABLE=0: setup.sh).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define RON_EXPORT __attribute__((visibility("default")))

#if defined(RCCL_ON_NCCL_CHECK_DECLS)
/* NCCL's own header: every definition below must match its prototype (cudaStream_t for the
 * stream), and the values rocm-sys declares must be NCCL's. */
#include <nccl.h>
typedef cudaStream_t ron_stream_t;
_Static_assert(NCCL_UNIQUE_ID_BYTES == 128, "ncclUniqueId size");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId size");
_Static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                   ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                   ncclRemoteError == 6 && ncclInProgress == 7,
               "ncclResult_t values");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4,
               "ncclRedOp_t values");
_Static_assert(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 &&
                   ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclFloat32 == 7 &&
                   ncclFloat64 == 8 && ncclBfloat16 == 9,
               "ncclDataType_t values");
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22400
_Static_assert(ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11, "8-bit float values");
#endif
/* The ncclConfig_v21700 prefix rocm-sys may pass (size, magic, version, blocking,
 * cgaClusterSize, minCTAs, maxCTAs, netName). */
_Static_assert(offsetof(ncclConfig_t, magic) == 8 && offsetof(ncclConfig_t, version) == 12 &&
                   offsetof(ncclConfig_t, blocking) == 16 && offsetof(ncclConfig_t, netName) == 32,
               "ncclConfig_t layout");
#else
/* The ABI as rocm-sys/src/rccl.rs declares it. */
typedef int ncclResult_t;
typedef int ncclRedOp_t;
typedef int ncclDataType_t;
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclConfig_v21700 ncclConfig_t; /* only passed through, never read */
typedef struct CUstream_st *ron_stream_t;       /* = cudaStream_t = the HIP double's hipStream_t */
enum { ncclSuccess = 0, ncclSystemError = 2, ncclRemoteError = 6 };
#endif

/* ---- NCCL, opened once ---- */

/* Every NCCL function forwarded: (name, return type, parameter types). */
#define RON_FUNCTIONS(X)                                                                      \
    X(ncclGetVersion, ncclResult_t, (int *))                                                  \
    X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId *))                                        \
    X(ncclCommInitRank, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))                 \
    X(ncclCommInitRankConfig, ncclResult_t,                                                   \
      (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))                                 \
    X(ncclCommInitAll, ncclResult_t, (ncclComm_t *, int, const int *))                        \
    X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                                            \
    X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                              \
    X(ncclCommFinalize, ncclResult_t, (ncclComm_t))                                           \
    X(ncclGetErrorString, const char *, (ncclResult_t))                                       \
    X(ncclGetLastError, const char *, (ncclComm_t))                                           \
    X(ncclCommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t *))                      \
    X(ncclCommCount, ncclResult_t, (ncclComm_t, int *))                                       \
    X(ncclCommCuDevice, ncclResult_t, (ncclComm_t, int *))                                    \
    X(ncclCommUserRank, ncclResult_t, (ncclComm_t, int *))                                    \
    X(ncclBroadcast, ncclResult_t,                                                            \
      (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, ron_stream_t))         \
    X(ncclAllReduce, ncclResult_t,                                                            \
      (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, ron_stream_t))  \
    X(ncclReduceScatter, ncclResult_t,                                                        \
      (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, ron_stream_t))  \
    X(ncclAllGather, ncclResult_t,                                                            \
      (const void *, void *, size_t, ncclDataType_t, ncclComm_t, ron_stream_t))               \
    X(ncclSend, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, ron_stream_t)) \
    X(ncclRecv, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, ron_stream_t)) \
    X(ncclGroupStart, ncclResult_t, (void))                                                   \
    X(ncclGroupEnd, ncclResult_t, (void))

/* NCCL's functions, resolved once by open_nccl (NULL when NCCL or the symbol is absent). */
static struct {
#define RON_FIELD(name, ret, params) ret(*name) params;
    RON_FUNCTIONS(RON_FIELD)
#undef RON_FIELD
} g_fn;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static long g_fail_after = -1;       /* RCCL_ON_NCCL_FAIL_AFTER */
static long g_async_fail_after = -1; /* RCCL_ON_NCCL_ASYNC_FAIL_AFTER */
static atomic_long g_collectives;    /* collective/p2p calls seen */

static long env_count(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return (end && *end == '\0' && n >= 0) ? n : -1;
}

static void open_nccl(void)
{
    g_fail_after = env_count("RCCL_ON_NCCL_FAIL_AFTER");
    g_async_fail_after = env_count("RCCL_ON_NCCL_ASYNC_FAIL_AFTER");
    const char *path = getenv("RCCL_ON_NCCL_LIB");
    if (!path || !*path) path = "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "rccl_on_nccl: cannot open NCCL (%s): %s; set RCCL_ON_NCCL_LIB\n", path,
                dlerror());
        return;
    }
#define RON_RESOLVE(name, ret, params)                                                        \
    *(void **)&g_fn.name = dlsym(lib, #name);                                                 \
    if (!g_fn.name) fprintf(stderr, "rccl_on_nccl: %s lacks " #name "\n", path);
    RON_FUNCTIONS(RON_RESOLVE)
#undef RON_RESOLVE
}

/* NCCL's `name` after the one-time load (NULL when absent). */
#define NCCL_FN(name) (pthread_once(&g_once, open_nccl), g_fn.name)

/* Counts a collective; returns nonzero when it must fail (RCCL_ON_NCCL_FAIL_AFTER). */
static int inject_sync_failure(void)
{
    pthread_once(&g_once, open_nccl);
    long seen = atomic_fetch_add(&g_collectives, 1);
    return g_fail_after >= 0 && seen >= g_fail_after;
}

/* ---- version, ids, communicators ---- */

RON_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    __typeof__(g_fn.ncclGetVersion) fn_ = NCCL_FN(ncclGetVersion);
    return fn_ ? fn_(version) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    __typeof__(g_fn.ncclGetUniqueId) fn_ = NCCL_FN(ncclGetUniqueId);
    return fn_ ? fn_(id) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    __typeof__(g_fn.ncclCommInitRank) fn_ = NCCL_FN(ncclCommInitRank);
    return fn_ ? fn_(comm, nranks, id, rank) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id,
                                               int rank, ncclConfig_t *config)
{
    __typeof__(g_fn.ncclCommInitRankConfig) fn_ = NCCL_FN(ncclCommInitRankConfig);
    return fn_ ? fn_(comm, nranks, id, rank, config) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    __typeof__(g_fn.ncclCommInitAll) fn_ = NCCL_FN(ncclCommInitAll);
    return fn_ ? fn_(comm, ndev, devlist) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    __typeof__(g_fn.ncclCommDestroy) fn_ = NCCL_FN(ncclCommDestroy);
    return fn_ ? fn_(comm) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    __typeof__(g_fn.ncclCommAbort) fn_ = NCCL_FN(ncclCommAbort);
    return fn_ ? fn_(comm) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    __typeof__(g_fn.ncclCommFinalize) fn_ = NCCL_FN(ncclCommFinalize);
    return fn_ ? fn_(comm) : ncclSystemError;
}

RON_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    __typeof__(g_fn.ncclGetErrorString) fn_ = NCCL_FN(ncclGetErrorString);
    if (fn_) return fn_(result);
    return result == ncclSuccess ? "no error" : "NCCL could not be loaded by the RCCL double";
}

RON_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    __typeof__(g_fn.ncclGetLastError) fn_ = NCCL_FN(ncclGetLastError);
    return fn_ ? fn_(comm) : "NCCL could not be loaded by the RCCL double (see stderr)";
}

RON_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    __typeof__(g_fn.ncclCommGetAsyncError) fn_ = NCCL_FN(ncclCommGetAsyncError);
    if (!fn_) return ncclSystemError;
    ncclResult_t rc = fn_(comm, async_error);
    if (rc == ncclSuccess && async_error && g_async_fail_after >= 0 &&
        atomic_load(&g_collectives) >= g_async_fail_after)
        *async_error = ncclRemoteError;
    return rc;
}

#if defined(RCCL_ON_NCCL_CHECK_DECLS)
#define RON_CONST_COMM const ncclComm_t
#else
#define RON_CONST_COMM ncclComm_t
#endif

RON_EXPORT ncclResult_t ncclCommCount(RON_CONST_COMM comm, int *count)
{
    __typeof__(g_fn.ncclCommCount) fn_ = NCCL_FN(ncclCommCount);
    return fn_ ? fn_(comm, count) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommCuDevice(RON_CONST_COMM comm, int *device)
{
    __typeof__(g_fn.ncclCommCuDevice) fn_ = NCCL_FN(ncclCommCuDevice);
    return fn_ ? fn_(comm, device) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclCommUserRank(RON_CONST_COMM comm, int *rank)
{
    __typeof__(g_fn.ncclCommUserRank) fn_ = NCCL_FN(ncclCommUserRank);
    return fn_ ? fn_(comm, rank) : ncclSystemError;
}

/* ---- collectives and point-to-point ---- */

RON_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      ron_stream_t stream)
{
    __typeof__(g_fn.ncclBroadcast) fn_ = NCCL_FN(ncclBroadcast);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(sendbuff, recvbuff, count, datatype, root, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      ron_stream_t stream)
{
    __typeof__(g_fn.ncclAllReduce) fn_ = NCCL_FN(ncclAllReduce);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(sendbuff, recvbuff, count, datatype, op, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op,
                                          ncclComm_t comm, ron_stream_t stream)
{
    __typeof__(g_fn.ncclReduceScatter) fn_ = NCCL_FN(ncclReduceScatter);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(sendbuff, recvbuff, recvcount, datatype, op, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      ron_stream_t stream)
{
    __typeof__(g_fn.ncclAllGather) fn_ = NCCL_FN(ncclAllGather);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(sendbuff, recvbuff, sendcount, datatype, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, ron_stream_t stream)
{
    __typeof__(g_fn.ncclSend) fn_ = NCCL_FN(ncclSend);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(sendbuff, count, datatype, peer, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, ron_stream_t stream)
{
    __typeof__(g_fn.ncclRecv) fn_ = NCCL_FN(ncclRecv);
    if (inject_sync_failure()) return ncclRemoteError;
    return fn_ ? fn_(recvbuff, count, datatype, peer, comm, stream) : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclGroupStart(void)
{
    __typeof__(g_fn.ncclGroupStart) fn_ = NCCL_FN(ncclGroupStart);
    return fn_ ? fn_() : ncclSystemError;
}

RON_EXPORT ncclResult_t ncclGroupEnd(void)
{
    __typeof__(g_fn.ncclGroupEnd) fn_ = NCCL_FN(ncclGroupEnd);
    return fn_ ? fn_() : ncclSystemError;
}
