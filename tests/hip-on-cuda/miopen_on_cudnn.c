/*
 * miopen_on_cudnn.c - a test double of MIOpen (libMIOpen.so.1) on cuDNN 9.
 *
 * Exports exactly the entry points of rocm-sys/src/miopen.rs (`api_table!`, required and
 * optional), with MIOpen's C ABI, implemented over cuDNN's legacy convolution/pooling API. It is
 * a separate shared object (build.sh puts it in $OUT/miopen/, so only ROCM_SYS_MIOPEN_LIB
 * loads it) linked against the HIP double (libamdhip64.so, for hipGetDevice/hipSetDevice and
 * its primary contexts), libcuda and libcudnn.so.9.
 *
 * MIOpen facts used, and where they come from. "miopen.h" is include/miopen/miopen.h of
 * ROCm/MIOpen at rocm-5.2.0, rocm-5.7.0, rocm-6.0.0 and 2d1fd99 (MIOpen 3.3.0): the prototypes
 * and values below are the same in all of them. Source files are ROCm/MIOpen at 2d1fd99.
 *  1. Argument orders: as miopen.h declares them (note GetWorkSpaceSize's (w, x, conv, y) for
 *     forward and (dy, w, conv, dx) for backward data, and Find's (x, w, conv, y) / (dy, w,
 *     conv, dx)).
 *  2. Enum values: miopenStatus_t 0..10, miopenDataType_t (Half 0, Float 1, Int32 2, Int8 3,
 *     BFloat16 5, Double 6), miopenConvolutionMode_t (Convolution 0, Transpose 1, GroupConv 2,
 *     Depthwise 3), miopenPoolingMode_t (Max 0, Average 1 = padding excluded, AverageInclusive 2),
 *     miopenConvFwdAlgorithm_t (GEMM 0, Direct 1, FFT 2, Winograd 3, ImplicitGEMM 5),
 *     miopenConvBwdDataAlgorithm_t (same, plus TransposeGEMM 4): miopen.h.
 *  3. miopenConvAlgoPerf_t = { union of 32-bit algorithm enums; float time; size_t memory }:
 *     miopen.h.
 *  4. Tensors: miopenSet4dTensorDescriptor gives a packed NCHW tensor (miopen.h: "MIOpen
 *     currently implements NCHW"); a filter is the same kind of descriptor with lengths
 *     (K, C / groups, R, S) (src/convolution.cpp, GetForwardOutputTensorWithLayout: wei_k, wei_c
 *     are lengths 0 and 1, spatial from 2).
 *  5. Convolution output size (src/convolution.cpp, GetForwardOutputTensorWithLayout, default
 *     padding mode, miopenConvolution): out_c = wei_k; each spatial
 *     max(1, (in - (1 + dil * (k - 1)) + 2 * pad) / stride + 1) in signed (ptrdiff_t) math;
 *     channel check: groups == 1 needs in_c == wei_c, groups > 1 needs in_c % wei_c == 0 and
 *     wei_k % (in_c / wei_c) == 0, else miopenStatusBadParm ("Channels do not match"); x and w of
 *     different types: miopenStatusBadParm.
 *  6. Group count: miopenSetConvolutionGroupCount after miopenInitConvolutionDescriptor
 *     (miopen.h); default 1.
 *  7. Find "is mandatory before" the execution call; its workspace comes from GetWorkSpaceSize;
 *     results are "sorted" fastest first; perf.memory is the workspace the chosen algorithm
 *     needs; no applicable algorithm: MIOPEN_THROW("No suitable algorithm was found ...")
 *     without a status, i.e. miopenStatusUnknownError (src/ocl/convolutionocl.cpp,
 *     src/include/miopen/errors.hpp: Exception's default status).
 *  8. Convolution alpha/beta: host scalars, only alpha = 1, beta = 0 in 2-D, else
 *     miopenStatusNotImplemented (src/ocl/convolutionocl.cpp, ValidateAlphaBeta).
 *  9. Pooling output size (src/pooling.cpp, GetForwardOutputDim):
 *     max(1, (in + 2 * pad - window) / stride + 1). Pooling alpha/beta are read as float and
 *     must be 1 and 0, else MIOPEN_THROW without a status: miopenStatusUnknownError
 *     (src/ocl/pooling_ocl.cpp). do_backward == 0 takes a null, zero-sized workspace (miopen.h).
 * 10. miopenPoolingGetWorkSpaceSize = product of y's lengths * sizeof(uint8_t)
 *     (src/pooling_api.cpp); ...V2 = that for max pooling with the default uint8 index type,
 *     0 for average pooling (src/pooling.cpp, GetWorkSpaceSize, NCHW so no transpose space).
 * 11. A null handle/descriptor/out-pointer where MIOpen dereferences one: miopenStatusBadParm
 *     (miopen::deref throws it); destroying a null descriptor succeeds (delete nullptr).
 * 12. miopenGetErrorString's strings (src/handle_api.cpp), "Unknown error status" otherwise.
 *
 * 13. Immediate mode: miopenConvolution{Forward,BackwardData}GetSolutionCount / GetSolution /
 *     CompileSolution / Immediate; GetSolution's array is "sorted in the order of decreasing
 *     performance" and comes from the find-db or heuristics without running anything; each
 *     miopenConvSolution_t = { float time; size_t workspace_size; uint64_t solution_id;
 *     miopenConvAlgorithm_t algorithm } (miopen.h at ROCm/MIOpen 003eaf5).
 * 14. MIOpen has no math-type switch: its half and bfloat16 solvers use the matrix units (MFMA,
 *     WMMA) where the GPU has them.
 *
 * How the double maps them: immediate mode's ranking is cuDNN's heuristics
 * (cudnnGetConvolution{Forward,BackwardData}Algorithm_v7, which rank without running), each
 * (cuDNN algorithm, math type) one solution, id = 1 + algo + 16 * math; half and bfloat16 allow
 * tensor cores (CUDNN_TENSOR_OP_MATH, fact 14), float stays on FMA math (no TF32, like MIOpen's
 * float solvers). Find times cuDNN's algorithms under the same math type and the execution call
 * runs the math type find measured. A convolution descriptor is programmed into cuDNN once per
 * data type and math type, and a problem's workspace need is remembered per handle, so a
 * repeated call adds no cuDNN set-up to the host time.
 *
 * What the double does not model (the double's limits, not MIOpen's rules): transposed mode
 * (miopenTranspose) and the deprecated group/depthwise modes, integer types, non-default
 * padding modes, do_backward pooling (MIOpen's index workspace format) and exhaustive search
 * (cuDNN's find always times every algorithm) - those return miopenStatusNotImplemented or are
 * ignored as noted. Algorithms are cuDNN's: each cuDNN algorithm is reported under the MIOpen
 * algorithm family it belongs to, and the execution call runs the cuDNN algorithm find chose for
 * that family and problem (remembered per handle), or the first of the family that fits the
 * workspace. Numerics are cuDNN's: float convolutions run with CUDNN_FMA_MATH (no TF32),
 * half and bfloat16 with CUDNN_TENSOR_OP_MATH (tensor cores, float accumulation). Max pooling
 * does not propagate NaN.
 *
 * Failure injection: HIP_ON_CUDA_MIOPEN_FAIL=name[,name...] (read once) makes those entry
 * points return miopenStatusInternalError without doing anything.
 */
#include "hoc_internal.h"

#if defined(HIP_ON_CUDA_MIN_DECLS)
#include "cudnn_min.h"
#else
#include <cudnn.h>
#if defined(HIP_ON_CUDA_CHECK_DECLS)
#include "cudnn_min.h"
#endif
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exported by the HIP double (hip_on_cuda.c), which this library links against. */
hipError_t hipGetDevice(int *device);
hipError_t hipSetDevice(int device);

/* A clearly fake, well-formed version: MIOpen 3.3.0 is the ROCm 6.3 release, matching the HIP
 * double's fake runtime version 6.3.0. */
#define HOC_FAKE_MIOPEN_MAJOR 3
#define HOC_FAKE_MIOPEN_MINOR 3
#define HOC_FAKE_MIOPEN_PATCH 0
/* Algorithms needing more workspace than this are not offered by the double's find. */
#define HOC_MIOPEN_WS_CAP ((size_t)256 << 20)
#define HOC_MIOPEN_MEMO 64

typedef unsigned int miopenStatus_t;
enum {
    miopenStatusSuccess = 0, miopenStatusNotInitialized = 1, miopenStatusInvalidValue = 2,
    miopenStatusBadParm = 3, miopenStatusAllocFailed = 4, miopenStatusInternalError = 5,
    miopenStatusNotImplemented = 6, miopenStatusUnknownError = 7, miopenStatusUnsupportedOp = 8,
    miopenStatusGpuOperationsSkipped = 9, miopenStatusVersionMismatch = 10,
};
enum { miopenHalf = 0, miopenFloat = 1, miopenInt32 = 2, miopenInt8 = 3, miopenBFloat16 = 5, miopenDouble = 6 };
enum { miopenConvolution = 0, miopenTranspose = 1, miopenGroupConv = 2, miopenDepthwise = 3 };
enum { miopenPoolingMax = 0, miopenPoolingAverage = 1, miopenPoolingAverageInclusive = 2 };
enum { mi_algo_gemm = 0, mi_algo_direct = 1, mi_algo_fft = 2, mi_algo_winograd = 3, mi_algo_implicit_gemm = 5 };

typedef struct {
    unsigned int algo; /* union { fwd_algo; bwd_weights_algo; bwd_data_algo } */
    float time;
    size_t memory;
} miopenConvAlgoPerf_t;
_Static_assert(sizeof(miopenConvAlgoPerf_t) == 16 && offsetof(miopenConvAlgoPerf_t, memory) == 8,
               "miopenConvAlgoPerf_t layout (miopen.h)");

enum { DIR_FWD = 0, DIR_BWD_DATA = 1 };

/* What identifies a convolution problem for the handle's find memo: all ints, no padding. */
struct conv_problem {
    int dir, dtype, x[4], w[4], pad[2], stride[2], dil[2], groups;
};

/* key: a MIOpen algorithm family (find) or MEMO_SOLUTION + a solution id (immediate mode). */
#define MEMO_SOLUTION ((long long)1 << 32)
struct memo_entry {
    int used;
    struct conv_problem p;
    long long key;
    int dnn_algo, math;
    size_t need; /* workspace bytes, (size_t)-1 until known */
};

struct miopenHandle {
    cudnnHandle_t dnn;
    CUcontext ctx;
    hipStream_t stream;
    unsigned next_memo;
    struct memo_entry memo[HOC_MIOPEN_MEMO];
};
struct miopenTensorDescriptor {
    int set, dtype, dims[4];
    cudnnTensorDescriptor_t t;
    cudnnFilterDescriptor_t f;
};
struct miopenConvolutionDescriptor {
    int init, mode, pad[2], stride[2], dil[2], groups;
    /* What c holds: programmed for prog_dtype (0: not yet), with math type prog_math. */
    int programmed, prog_dtype, prog_math;
    cudnnConvolutionDescriptor_t c;
};
struct miopenPoolingDescriptor {
    int set, mode, win[2], pad[2], stride[2];
    cudnnPoolingDescriptor_t p;
};
typedef struct miopenHandle *miopenHandle_t;
typedef struct miopenTensorDescriptor *miopenTensorDescriptor_t;
typedef struct miopenConvolutionDescriptor *miopenConvolutionDescriptor_t;
typedef struct miopenPoolingDescriptor *miopenPoolingDescriptor_t;

/* ------------------------------------------------------------------------------------------ */
/* Failure injection                                                                          */
static pthread_once_t g_fail_once = PTHREAD_ONCE_INIT;
static char *g_fail_list; /* ",name,name," or NULL */

static void read_fail_list(void)
{
    const char *v = getenv("HIP_ON_CUDA_MIOPEN_FAIL");
    if (!v || !*v) return;
    size_t n = strlen(v);
    g_fail_list = malloc(n + 3);
    if (!g_fail_list) return;
    g_fail_list[0] = ',';
    memcpy(g_fail_list + 1, v, n);
    g_fail_list[n + 1] = ',';
    g_fail_list[n + 2] = '\0';
}

static bool injected(const char *name)
{
    pthread_once(&g_fail_once, read_fail_list);
    if (!g_fail_list) return false;
    char key[96];
    size_t n = strlen(name);
    if (n + 3 > sizeof key) return false;
    key[0] = ',';
    memcpy(key + 1, name, n);
    key[n + 1] = ',';
    key[n + 2] = '\0';
    return strstr(g_fail_list, key) != NULL;
}
#define INJECT(name) \
    do { if (injected(name)) return miopenStatusInternalError; } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Mappings                                                                                   */
static miopenStatus_t map_dnn(cudnnStatus_t st)
{
    int s = (int)st;
    if (s == CUDNN_STATUS_SUCCESS) return miopenStatusSuccess;
    if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        return miopenStatusAllocFailed;
    if (s >= 1000 && s < 2000) return miopenStatusNotInitialized;
    if (s >= 2000 && s < 3000) return miopenStatusBadParm;
    if (s >= 3000 && s < 4000) return miopenStatusNotImplemented;
    if (s >= 4000 && s < 5000) return miopenStatusInternalError;
    return miopenStatusUnknownError; /* execution failures: MIOpen reports HIP errors so */
}
/* A Find that kept no algorithm: says on stderr what cuDNN returned for each one (the caller
 * sees only miopenStatusUnknownError), so the harness's log shows why. */
#define REPORT_NO_ALGO(dir, res, n, ws_size)                                                          \
    do {                                                                                             \
        fprintf(stderr, "miopen double: Find %s kept no algorithm (cuDNN returned %d, workspace %zu):", \
                dir, n, (size_t)(ws_size));                                                          \
        for (int i_ = 0; i_ < (n); i_++)                                                             \
            fprintf(stderr, " [algo %d status %d memory %zu]", (int)(res)[i_].algo,                  \
                    (int)(res)[i_].status, (size_t)(res)[i_].memory);                                \
        fprintf(stderr, "\n");                                                                       \
    } while (0)

#define DNN(call)                                        \
    do {                                                 \
        miopenStatus_t st_ = map_dnn(call);              \
        if (st_ != miopenStatusSuccess) return st_;      \
    } while (0)

/* MIOpen data type -> cuDNN data type; -1 for types the double does not model. */
static int dnn_type(int t)
{
    switch (t) {
    case miopenHalf: return CUDNN_DATA_HALF;
    case miopenFloat: return CUDNN_DATA_FLOAT;
    case miopenBFloat16: return CUDNN_DATA_BFLOAT16;
    case miopenDouble: return CUDNN_DATA_DOUBLE;
    default: return -1;
    }
}

static int fwd_family(int dnn_algo)
{
    switch (dnn_algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return mi_algo_implicit_gemm;
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return mi_algo_gemm;
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return mi_algo_direct;
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return mi_algo_fft;
    default: return mi_algo_winograd; /* WINOGRAD, WINOGRAD_NONFUSED */
    }
}

static int bwd_data_family(int dnn_algo)
{
    switch (dnn_algo) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return mi_algo_gemm; /* sum of matrix products */
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return mi_algo_implicit_gemm;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return mi_algo_fft;
    default: return mi_algo_winograd;
    }
}

static miopenStatus_t bind(miopenHandle_t h)
{
    return cuCtxSetCurrent(h->ctx) == CUDA_SUCCESS ? miopenStatusSuccess : miopenStatusInternalError;
}

/* ------------------------------------------------------------------------------------------ */
/* Handle, version, errors                                                                    */
HOC_EXPORT const char *miopenGetErrorString(miopenStatus_t error)
{
    static const char *const names[] = {
        "miopenStatusSuccess", "miopenStatusNotInitialized", "miopenStatusInvalidValue",
        "miopenStatusBadParm", "miopenStatusAllocFailed", "miopenStatusInternalError",
        "miopenStatusNotImplemented", "miopenStatusUnknownError", "miopenStatusUnsupportedOp",
        "miopenStatusGpuOperationsSkipped", "miopenStatusVersionMismatch",
    };
    return error < sizeof names / sizeof names[0] ? names[error] : "Unknown error status";
}

HOC_EXPORT miopenStatus_t miopenGetVersion(size_t *major, size_t *minor, size_t *patch)
{
    INJECT("miopenGetVersion");
    if (major) *major = HOC_FAKE_MIOPEN_MAJOR;
    if (minor) *minor = HOC_FAKE_MIOPEN_MINOR;
    if (patch) *patch = HOC_FAKE_MIOPEN_PATCH;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenCreateWithStream(miopenHandle_t *handle, hipStream_t stream)
{
    INJECT("miopenCreateWithStream");
    if (!handle) return miopenStatusBadParm;
    int dev = 0;
    /* MIOpen binds a handle to the calling thread's current device. */
    if (hipGetDevice(&dev) != hipSuccess || hipSetDevice(dev) != hipSuccess)
        return miopenStatusNotInitialized;
    struct miopenHandle *h = calloc(1, sizeof *h);
    if (!h) return miopenStatusAllocFailed;
    if (cuCtxGetCurrent(&h->ctx) != CUDA_SUCCESS || !h->ctx) {
        free(h);
        return miopenStatusNotInitialized;
    }
    miopenStatus_t st = map_dnn(cudnnCreate(&h->dnn));
    if (st == miopenStatusSuccess && stream) st = map_dnn(cudnnSetStream(h->dnn, (cudaStream_t)stream));
    if (st != miopenStatusSuccess) {
        if (h->dnn) cudnnDestroy(h->dnn);
        free(h);
        return st;
    }
    h->stream = stream;
    *handle = h;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenCreate(miopenHandle_t *handle)
{
    INJECT("miopenCreate");
    return miopenCreateWithStream(handle, NULL);
}

HOC_EXPORT miopenStatus_t miopenDestroy(miopenHandle_t h)
{
    INJECT("miopenDestroy");
    if (!h) return miopenStatusBadParm;
    miopenStatus_t st = bind(h);
    if (st == miopenStatusSuccess) st = map_dnn(cudnnDestroy(h->dnn));
    free(h);
    return st;
}

HOC_EXPORT miopenStatus_t miopenSetStream(miopenHandle_t h, hipStream_t stream)
{
    INJECT("miopenSetStream");
    if (!h) return miopenStatusBadParm;
    miopenStatus_t st = bind(h);
    if (st != miopenStatusSuccess) return st;
    DNN(cudnnSetStream(h->dnn, (cudaStream_t)stream));
    h->stream = stream;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenGetStream(miopenHandle_t h, hipStream_t *stream)
{
    INJECT("miopenGetStream");
    if (!h || !stream) return miopenStatusBadParm;
    *stream = h->stream;
    return miopenStatusSuccess;
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor descriptors                                                                         */
HOC_EXPORT miopenStatus_t miopenCreateTensorDescriptor(miopenTensorDescriptor_t *desc)
{
    INJECT("miopenCreateTensorDescriptor");
    if (!desc) return miopenStatusBadParm;
    struct miopenTensorDescriptor *d = calloc(1, sizeof *d);
    if (!d) return miopenStatusAllocFailed;
    miopenStatus_t st = map_dnn(cudnnCreateTensorDescriptor(&d->t));
    if (st == miopenStatusSuccess) st = map_dnn(cudnnCreateFilterDescriptor(&d->f));
    if (st != miopenStatusSuccess) {
        if (d->t) cudnnDestroyTensorDescriptor(d->t);
        free(d);
        return st;
    }
    *desc = d;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenSet4dTensorDescriptor(miopenTensorDescriptor_t d, int dtype, int n, int c,
                                                     int h, int w)
{
    INJECT("miopenSet4dTensorDescriptor");
    if (!d) return miopenStatusBadParm;
    int t = dnn_type(dtype);
    if (t < 0) return miopenStatusNotImplemented; /* the double's limit (integer types) */
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return miopenStatusBadParm;
    /* The same lengths as a packed NCHW tensor and as a (K, C, R, S) filter (fact 4). */
    DNN(cudnnSetTensor4dDescriptor(d->t, CUDNN_TENSOR_NCHW, (cudnnDataType_t)t, n, c, h, w));
    DNN(cudnnSetFilter4dDescriptor(d->f, (cudnnDataType_t)t, CUDNN_TENSOR_NCHW, n, c, h, w));
    d->dtype = dtype;
    d->dims[0] = n, d->dims[1] = c, d->dims[2] = h, d->dims[3] = w;
    d->set = 1;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenDestroyTensorDescriptor(miopenTensorDescriptor_t d)
{
    INJECT("miopenDestroyTensorDescriptor");
    if (!d) return miopenStatusSuccess; /* fact 11 */
    cudnnStatus_t a = cudnnDestroyTensorDescriptor(d->t);
    cudnnStatus_t b = cudnnDestroyFilterDescriptor(d->f);
    free(d);
    return a != CUDNN_STATUS_SUCCESS ? map_dnn(a) : map_dnn(b);
}

/* ------------------------------------------------------------------------------------------ */
/* Convolution descriptors                                                                    */
HOC_EXPORT miopenStatus_t miopenCreateConvolutionDescriptor(miopenConvolutionDescriptor_t *desc)
{
    INJECT("miopenCreateConvolutionDescriptor");
    if (!desc) return miopenStatusBadParm;
    struct miopenConvolutionDescriptor *d = calloc(1, sizeof *d);
    if (!d) return miopenStatusAllocFailed;
    miopenStatus_t st = map_dnn(cudnnCreateConvolutionDescriptor(&d->c));
    if (st != miopenStatusSuccess) {
        free(d);
        return st;
    }
    d->groups = 1;
    *desc = d;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenInitConvolutionDescriptor(miopenConvolutionDescriptor_t d, int mode, int pad_h,
                                                         int pad_w, int stride_h, int stride_w, int dil_h,
                                                         int dil_w)
{
    INJECT("miopenInitConvolutionDescriptor");
    if (!d) return miopenStatusBadParm;
    if (mode < miopenConvolution || mode > miopenDepthwise) return miopenStatusBadParm;
    if (pad_h < 0 || pad_w < 0 || stride_h <= 0 || stride_w <= 0 || dil_h <= 0 || dil_w <= 0)
        return miopenStatusBadParm;
    d->mode = mode;
    d->pad[0] = pad_h, d->pad[1] = pad_w;
    d->stride[0] = stride_h, d->stride[1] = stride_w;
    d->dil[0] = dil_h, d->dil[1] = dil_w;
    d->init = 1;
    d->programmed = 0;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenSetConvolutionGroupCount(miopenConvolutionDescriptor_t d, int groups)
{
    INJECT("miopenSetConvolutionGroupCount");
    if (!d || groups < 1) return miopenStatusBadParm;
    d->groups = groups;
    d->programmed = 0;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenDestroyConvolutionDescriptor(miopenConvolutionDescriptor_t d)
{
    INJECT("miopenDestroyConvolutionDescriptor");
    if (!d) return miopenStatusSuccess;
    cudnnStatus_t st = cudnnDestroyConvolutionDescriptor(d->c);
    free(d);
    return map_dnn(st);
}

/* Fact 5: MIOpen's output size of convolving x with w (miopenConvolution mode). */
static miopenStatus_t conv_out_dims(const struct miopenConvolutionDescriptor *c,
                                    const struct miopenTensorDescriptor *x,
                                    const struct miopenTensorDescriptor *w, int out[4])
{
    if (!c || !x || !w || !c->init || !x->set || !w->set) return miopenStatusBadParm;
    if (c->mode != miopenConvolution) return miopenStatusNotImplemented; /* the double's limit */
    if (x->dtype != w->dtype) return miopenStatusBadParm;
    int in_c = x->dims[1], wei_k = w->dims[0], wei_c = w->dims[1];
    if ((c->groups == 1 && in_c != wei_c) ||
        (c->groups > 1 && (in_c % wei_c != 0 || wei_k % (in_c / wei_c) != 0)))
        return miopenStatusBadParm;
    out[0] = x->dims[0];
    out[1] = wei_k;
    for (int i = 0; i < 2; i++) {
        ptrdiff_t in = x->dims[2 + i], k = w->dims[2 + i];
        ptrdiff_t o = (in - (1 + (ptrdiff_t)c->dil[i] * (k - 1)) + 2 * (ptrdiff_t)c->pad[i]) / c->stride[i] + 1;
        out[2 + i] = (int)(o < 1 ? 1 : o);
    }
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenGetConvolutionForwardOutputDim(miopenConvolutionDescriptor_t c,
                                                              miopenTensorDescriptor_t x,
                                                              miopenTensorDescriptor_t w, int *n, int *ch,
                                                              int *h, int *wd)
{
    INJECT("miopenGetConvolutionForwardOutputDim");
    if (!n || !ch || !h || !wd) return miopenStatusBadParm;
    int out[4];
    miopenStatus_t st = conv_out_dims(c, x, w, out);
    if (st != miopenStatusSuccess) return st;
    *n = out[0], *ch = out[1], *h = out[2], *wd = out[3];
    return miopenStatusSuccess;
}

/* The math type a data type's convolutions may use (fact 14): tensor cores for half and
 * bfloat16, FMA (no TF32) for float and double. */
static int default_math(int dtype)
{
    return dtype == miopenHalf || dtype == miopenBFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

/* Sets the cuDNN math type of c, only when it changes. */
static miopenStatus_t set_math(miopenConvolutionDescriptor_t c, int math)
{
    if (c->prog_math == math) return miopenStatusSuccess;
    c->prog_math = -1;
    DNN(cudnnSetConvolutionMathType(c->c, (cudnnMathType_t)math));
    c->prog_math = math;
    return miopenStatusSuccess;
}

/* Checks a (x, w, y) convolution problem (x = dx, y = dy for backward data), programs the cuDNN
 * convolution descriptor for it, and fills the memo key. */
static miopenStatus_t prepare_conv(int dir, miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t x,
                                   miopenTensorDescriptor_t w, miopenTensorDescriptor_t y,
                                   struct conv_problem *p)
{
    int out[4];
    miopenStatus_t st = conv_out_dims(c, x, w, out);
    if (st != miopenStatusSuccess) return st;
    if (!y || !y->set || y->dtype != x->dtype || memcmp(out, y->dims, sizeof out) != 0)
        return miopenStatusBadParm;
    /* cuDNN's stricter group rule: C = wei_c * groups, K divisible by groups. */
    if (x->dims[1] != w->dims[1] * c->groups || w->dims[0] % c->groups != 0) return miopenStatusBadParm;
    if (!c->programmed || c->prog_dtype != x->dtype) {
        cudnnDataType_t compute = x->dtype == miopenDouble ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
        c->programmed = 0;
        DNN(cudnnSetConvolution2dDescriptor(c->c, c->pad[0], c->pad[1], c->stride[0], c->stride[1],
                                            c->dil[0], c->dil[1], CUDNN_CROSS_CORRELATION, compute));
        DNN(cudnnSetConvolutionGroupCount(c->c, c->groups));
        c->programmed = 1;
        c->prog_dtype = x->dtype;
        c->prog_math = -1;
    }
    st = set_math(c, default_math(x->dtype));
    if (st != miopenStatusSuccess) return st;
    memset(p, 0, sizeof *p);
    p->dir = dir;
    p->dtype = x->dtype;
    memcpy(p->x, x->dims, sizeof p->x);
    memcpy(p->w, w->dims, sizeof p->w);
    memcpy(p->pad, c->pad, sizeof p->pad);
    memcpy(p->stride, c->stride, sizeof p->stride);
    memcpy(p->dil, c->dil, sizeof p->dil);
    p->groups = c->groups;
    return miopenStatusSuccess;
}

static struct memo_entry *memo_find(miopenHandle_t h, const struct conv_problem *p, long long key)
{
    for (int i = 0; i < HOC_MIOPEN_MEMO; i++) {
        struct memo_entry *e = &h->memo[i];
        if (e->used && e->key == key && memcmp(&e->p, p, sizeof *p) == 0) return e;
    }
    return NULL;
}

static struct memo_entry *memo_put(miopenHandle_t h, const struct conv_problem *p, long long key, int dnn_algo,
                                   int math)
{
    struct memo_entry *e = memo_find(h, p, key);
    if (!e) e = &h->memo[h->next_memo++ % HOC_MIOPEN_MEMO];
    e->used = 1, e->p = *p, e->key = key, e->dnn_algo = dnn_algo, e->math = math, e->need = (size_t)-1;
    return e;
}

/* Immediate mode's solution ids (see the header): 1 + algo + 16 * math. */
static unsigned long long solution_id(int dnn_algo, int math)
{
    return 1ull + (unsigned long long)dnn_algo + 16ull * (unsigned long long)math;
}

static int solution_decode(unsigned long long id, int algo_count, int *dnn_algo, int *math)
{
    if (id < 1) return 0;
    unsigned long long a = (id - 1) % 16, m = (id - 1) / 16;
    if (a >= (unsigned long long)algo_count || (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_FMA_MATH))
        return 0;
    *dnn_algo = (int)a, *math = (int)m;
    return 1;
}

static int alpha_beta_default(int dtype, const void *alpha, const void *beta)
{
    if (!alpha || !beta) return 0;
    if (dtype == miopenDouble) return *(const double *)alpha == 1.0 && *(const double *)beta == 0.0;
    return *(const float *)alpha == 1.0f && *(const float *)beta == 0.0f;
}

/* ------------------------------------------------------------------------------------------ */
/* Forward convolution                                                                        */
static size_t fwd_ws(miopenHandle_t h, miopenTensorDescriptor_t x, miopenTensorDescriptor_t w,
                     miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t y, int algo)
{
    size_t sz = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h->dnn, x->t, w->f, c->c, y->t, (cudnnConvolutionFwdAlgo_t)algo,
                                                &sz) != CUDNN_STATUS_SUCCESS)
        return (size_t)-1;
    return sz;
}

HOC_EXPORT miopenStatus_t miopenConvolutionForwardGetWorkSpaceSize(miopenHandle_t h, miopenTensorDescriptor_t w,
                                                                  miopenTensorDescriptor_t x,
                                                                  miopenConvolutionDescriptor_t c,
                                                                  miopenTensorDescriptor_t y, size_t *size)
{
    INJECT("miopenConvolutionForwardGetWorkSpaceSize");
    if (!h || !size) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_FWD, c, x, w, y, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    /* MIOpen returns the most any applicable solver needs (miopen.h: "the minimum size of the
     * workspace that must be provided to [find] in order for the latter to find the best
     * candidate"); here: the most any cuDNN algorithm under the cap needs. */
    size_t most = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++) {
        size_t sz = fwd_ws(h, x, w, c, y, a);
        if (sz != (size_t)-1 && sz <= HOC_MIOPEN_WS_CAP && sz > most) most = sz;
    }
    *size = most;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenFindConvolutionForwardAlgorithm(
    miopenHandle_t h, miopenTensorDescriptor_t xd, const void *x, miopenTensorDescriptor_t wd, const void *w,
    miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t yd, void *y, const int request,
    int *returned, miopenConvAlgoPerf_t *perf, void *ws, size_t ws_size, bool exhaustive)
{
    INJECT("miopenFindConvolutionForwardAlgorithm");
    (void)exhaustive; /* cuDNN's find always times every algorithm */
    if (!h || !x || !w || !y || !returned || !perf || request < 1) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_FWD, c, xd, wd, yd, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    cudnnConvolutionFwdAlgoPerf_t res[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    DNN(cudnnFindConvolutionForwardAlgorithmEx(h->dnn, xd->t, x, wd->f, w, c->c, yd->t, y,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, res, ws, ws_size));
    int out = 0, seen = 0; /* bit set of MIOpen families already reported */
    for (int i = 0; i < n && out < request; i++) {
        if (res[i].status != CUDNN_STATUS_SUCCESS || res[i].memory > ws_size) continue;
        int fam = fwd_family((int)res[i].algo);
        if (seen & (1 << fam)) continue; /* keep the fastest of each family (res is sorted) */
        seen |= 1 << fam;
        memo_put(h, &p, fam, (int)res[i].algo, (int)res[i].mathType);
        perf[out].algo = (unsigned)fam;
        perf[out].time = res[i].time;
        perf[out].memory = res[i].memory;
        out++;
    }
    *returned = out;
    if (out == 0) REPORT_NO_ALGO("forward", res, n, ws_size);
    return out > 0 ? miopenStatusSuccess : miopenStatusUnknownError; /* fact 7 */
}

HOC_EXPORT miopenStatus_t miopenConvolutionForward(miopenHandle_t h, const void *alpha, miopenTensorDescriptor_t xd,
                                                  const void *x, miopenTensorDescriptor_t wd, const void *w,
                                                  miopenConvolutionDescriptor_t c, int algo, const void *beta,
                                                  miopenTensorDescriptor_t yd, void *y, void *ws, size_t ws_size)
{
    INJECT("miopenConvolutionForward");
    if (!h || !x || !w || !y) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_FWD, c, xd, wd, yd, &p);
    if (st != miopenStatusSuccess) return st;
    if (!alpha_beta_default(xd->dtype, alpha, beta)) return miopenStatusNotImplemented; /* fact 8 */
    if ((st = bind(h)) != miopenStatusSuccess) return st;
    struct memo_entry *e = memo_find(h, &p, algo);
    int dnn = e ? e->dnn_algo : -1;
    if ((st = set_math(c, e ? e->math : default_math(xd->dtype))) != miopenStatusSuccess) return st;
    if (dnn < 0) { /* no find for this problem: the first algorithm of the family that fits */
        for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT && dnn < 0; a++)
            if (fwd_family(a) == algo && fwd_ws(h, xd, wd, c, yd, a) <= ws_size) dnn = a;
        if (dnn < 0) return miopenStatusBadParm;
    }
    size_t need = e && e->need != (size_t)-1 ? e->need : fwd_ws(h, xd, wd, c, yd, dnn);
    if (e) e->need = need;
    if (need == (size_t)-1 || need > ws_size || (need > 0 && !ws)) return miopenStatusBadParm;
    DNN(cudnnConvolutionForward(h->dnn, alpha, xd->t, x, wd->f, w, c->c, (cudnnConvolutionFwdAlgo_t)dnn, ws,
                                ws_size, beta, yd->t, y));
    return miopenStatusSuccess;
}

/* ------------------------------------------------------------------------------------------ */
/* Backward-data convolution (what a transposed convolution runs as)                          */
static size_t bwd_ws(miopenHandle_t h, miopenTensorDescriptor_t dy, miopenTensorDescriptor_t w,
                     miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t dx, int algo)
{
    size_t sz = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(h->dnn, w->f, dy->t, c->c, dx->t,
                                                     (cudnnConvolutionBwdDataAlgo_t)algo, &sz) != CUDNN_STATUS_SUCCESS)
        return (size_t)-1;
    return sz;
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardDataGetWorkSpaceSize(
    miopenHandle_t h, miopenTensorDescriptor_t dy, miopenTensorDescriptor_t w, miopenConvolutionDescriptor_t c,
    miopenTensorDescriptor_t dx, size_t *size)
{
    INJECT("miopenConvolutionBackwardDataGetWorkSpaceSize");
    if (!h || !size) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_BWD_DATA, c, dx, w, dy, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    size_t most = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++) {
        size_t sz = bwd_ws(h, dy, w, c, dx, a);
        if (sz != (size_t)-1 && sz <= HOC_MIOPEN_WS_CAP && sz > most) most = sz;
    }
    *size = most;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenFindConvolutionBackwardDataAlgorithm(
    miopenHandle_t h, miopenTensorDescriptor_t dyd, const void *dy, miopenTensorDescriptor_t wd, const void *w,
    miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t dxd, void *dx, const int request,
    int *returned, miopenConvAlgoPerf_t *perf, void *ws, size_t ws_size, bool exhaustive)
{
    INJECT("miopenFindConvolutionBackwardDataAlgorithm");
    (void)exhaustive;
    if (!h || !dy || !w || !dx || !returned || !perf || request < 1) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_BWD_DATA, c, dxd, wd, dyd, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    cudnnConvolutionBwdDataAlgoPerf_t res[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    DNN(cudnnFindConvolutionBackwardDataAlgorithmEx(h->dnn, wd->f, w, dyd->t, dy, c->c, dxd->t, dx,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, res, ws, ws_size));
    int out = 0, seen = 0;
    for (int i = 0; i < n && out < request; i++) {
        if (res[i].status != CUDNN_STATUS_SUCCESS || res[i].memory > ws_size) continue;
        int fam = bwd_data_family((int)res[i].algo);
        if (seen & (1 << fam)) continue;
        seen |= 1 << fam;
        memo_put(h, &p, fam, (int)res[i].algo, (int)res[i].mathType);
        perf[out].algo = (unsigned)fam;
        perf[out].time = res[i].time;
        perf[out].memory = res[i].memory;
        out++;
    }
    *returned = out;
    if (out == 0) REPORT_NO_ALGO("backward data", res, n, ws_size);
    return out > 0 ? miopenStatusSuccess : miopenStatusUnknownError;
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardData(miopenHandle_t h, const void *alpha,
                                                       miopenTensorDescriptor_t dyd, const void *dy,
                                                       miopenTensorDescriptor_t wd, const void *w,
                                                       miopenConvolutionDescriptor_t c, int algo, const void *beta,
                                                       miopenTensorDescriptor_t dxd, void *dx, void *ws,
                                                       size_t ws_size)
{
    INJECT("miopenConvolutionBackwardData");
    if (!h || !dy || !w || !dx) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(DIR_BWD_DATA, c, dxd, wd, dyd, &p);
    if (st != miopenStatusSuccess) return st;
    if (!alpha_beta_default(dxd->dtype, alpha, beta)) return miopenStatusNotImplemented;
    if ((st = bind(h)) != miopenStatusSuccess) return st;
    struct memo_entry *e = memo_find(h, &p, algo);
    int dnn = e ? e->dnn_algo : -1;
    if ((st = set_math(c, e ? e->math : default_math(dxd->dtype))) != miopenStatusSuccess) return st;
    if (dnn < 0) {
        for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT && dnn < 0; a++)
            if (bwd_data_family(a) == algo && bwd_ws(h, dyd, wd, c, dxd, a) <= ws_size) dnn = a;
        if (dnn < 0) return miopenStatusBadParm;
    }
    size_t need = e && e->need != (size_t)-1 ? e->need : bwd_ws(h, dyd, wd, c, dxd, dnn);
    if (e) e->need = need;
    if (need == (size_t)-1 || need > ws_size || (need > 0 && !ws)) return miopenStatusBadParm;
    cudnnStatus_t ds = cudnnConvolutionBackwardData(h->dnn, alpha, wd->f, w, dyd->t, dy, c->c,
                                                    (cudnnConvolutionBwdDataAlgo_t)dnn, ws, ws_size, beta,
                                                    dxd->t, dx);
    if (ds != CUDNN_STATUS_SUCCESS)
        fprintf(stderr,
                "miopen double: cudnnConvolutionBackwardData failed: status %d, algo %d, workspace %zu of %zu, "
                "dx %dx%dx%dx%d, w %dx%dx%dx%d, groups %d, pad %d,%d, stride %d,%d, dil %d,%d\n",
                (int)ds, dnn, need, ws_size, p.x[0], p.x[1], p.x[2], p.x[3], p.w[0], p.w[1], p.w[2], p.w[3],
                p.groups, p.pad[0], p.pad[1], p.stride[0], p.stride[1], p.dil[0], p.dil[1]);
    return map_dnn(ds);
}

/* ------------------------------------------------------------------------------------------ */
/* Immediate mode (facts 13 and 14): cuDNN's heuristics rank, solution ids name (algo, math)   */
typedef struct {
    float time;
    size_t workspace_size;
    unsigned long long solution_id;
    unsigned int algorithm; /* miopenConvAlgorithm_t: the same values as the families */
} miopenConvSolution_t;
_Static_assert(sizeof(miopenConvSolution_t) == 32 && offsetof(miopenConvSolution_t, solution_id) == 16 &&
                   offsetof(miopenConvSolution_t, algorithm) == 24,
               "miopenConvSolution_t layout (miopen.h)");

#define HOC_MATH_KINDS 3 /* default, tensor op, FMA: the most solutions one algorithm gives */

static int algo_count(int dir)
{
    return dir == DIR_FWD ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT : CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
}

/* Workspace of cuDNN algorithm a for (x, w, y) (x = dx, y = dy for backward data) under the math
 * type c holds now; (size_t)-1 when cuDNN refuses it. */
static size_t dir_ws(miopenHandle_t h, int dir, miopenTensorDescriptor_t x, miopenTensorDescriptor_t w,
                     miopenConvolutionDescriptor_t c, miopenTensorDescriptor_t y, int a)
{
    return dir == DIR_FWD ? fwd_ws(h, x, w, c, y, a) : bwd_ws(h, y, w, c, x, a);
}

static miopenStatus_t solution_count(int dir, miopenHandle_t h, miopenTensorDescriptor_t x,
                                     miopenTensorDescriptor_t w, miopenConvolutionDescriptor_t c,
                                     miopenTensorDescriptor_t y, size_t *count)
{
    if (!h || !count) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(dir, c, x, w, y, &p);
    if (st != miopenStatusSuccess) return st;
    *count = (size_t)algo_count(dir) * HOC_MATH_KINDS;
    return miopenStatusSuccess;
}

static miopenStatus_t get_solutions(int dir, miopenHandle_t h, miopenTensorDescriptor_t x,
                                    miopenTensorDescriptor_t w, miopenConvolutionDescriptor_t c,
                                    miopenTensorDescriptor_t y, size_t max, size_t *count,
                                    miopenConvSolution_t *sols)
{
    if (!h || !count || (max > 0 && !sols)) return miopenStatusBadParm;
    struct conv_problem p;
    miopenStatus_t st = prepare_conv(dir, c, x, w, y, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    enum { CAP = 8 * HOC_MATH_KINDS };
    struct { int algo, status, math; float time; size_t memory; } r[CAP];
    int n = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t res[CAP];
        DNN(cudnnGetConvolutionForwardAlgorithm_v7(h->dnn, x->t, w->f, c->c, y->t, CAP, &n, res));
        for (int i = 0; i < n && i < CAP; i++)
            r[i].algo = (int)res[i].algo, r[i].status = (int)res[i].status, r[i].math = (int)res[i].mathType,
            r[i].time = res[i].time, r[i].memory = res[i].memory;
    } else {
        cudnnConvolutionBwdDataAlgoPerf_t res[CAP];
        DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h->dnn, w->f, y->t, c->c, x->t, CAP, &n, res));
        for (int i = 0; i < n && i < CAP; i++)
            r[i].algo = (int)res[i].algo, r[i].status = (int)res[i].status, r[i].math = (int)res[i].mathType,
            r[i].time = res[i].time, r[i].memory = res[i].memory;
    }
    size_t out = 0;
    for (int i = 0; i < n && i < CAP && out < max; i++) { /* cuDNN's order: best expected first */
        if (r[i].status != CUDNN_STATUS_SUCCESS) continue;
        unsigned long long id = solution_id(r[i].algo, r[i].math);
        int dup = 0;
        for (size_t j = 0; j < out; j++) dup |= sols[j].solution_id == id;
        if (dup) continue;
        sols[out].time = r[i].time;
        sols[out].workspace_size = r[i].memory;
        sols[out].solution_id = id;
        sols[out].algorithm = (unsigned)(dir == DIR_FWD ? fwd_family(r[i].algo) : bwd_data_family(r[i].algo));
        out++;
    }
    *count = out;
    return miopenStatusSuccess;
}

/* The problem of a solution: checks it, programs c with its math type, and returns its cuDNN
 * algorithm and its workspace need (remembered per handle). */
static miopenStatus_t solution_setup(int dir, miopenHandle_t h, miopenTensorDescriptor_t x,
                                     miopenTensorDescriptor_t w, miopenConvolutionDescriptor_t c,
                                     miopenTensorDescriptor_t y, unsigned long long id, int *dnn, size_t *need)
{
    if (!h) return miopenStatusBadParm;
    struct conv_problem p;
    int math = 0;
    miopenStatus_t st = prepare_conv(dir, c, x, w, y, &p);
    if (st == miopenStatusSuccess) st = bind(h);
    if (st != miopenStatusSuccess) return st;
    if (!solution_decode(id, algo_count(dir), dnn, &math)) return miopenStatusBadParm;
    if ((st = set_math(c, math)) != miopenStatusSuccess) return st;
    long long key = MEMO_SOLUTION + (long long)id;
    struct memo_entry *e = memo_find(h, &p, key);
    if (!e) e = memo_put(h, &p, key, *dnn, math);
    if (e->need == (size_t)-1) e->need = dir_ws(h, dir, x, w, c, y, *dnn);
    *need = e->need;
    return *need == (size_t)-1 ? miopenStatusBadParm : miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenConvolutionForwardGetSolutionCount(miopenHandle_t h, miopenTensorDescriptor_t wd,
                                                                  miopenTensorDescriptor_t xd,
                                                                  miopenConvolutionDescriptor_t c,
                                                                  miopenTensorDescriptor_t yd, size_t *count)
{
    INJECT("miopenConvolutionForwardGetSolutionCount");
    return solution_count(DIR_FWD, h, xd, wd, c, yd, count);
}

HOC_EXPORT miopenStatus_t miopenConvolutionForwardGetSolution(miopenHandle_t h, miopenTensorDescriptor_t wd,
                                                             miopenTensorDescriptor_t xd,
                                                             miopenConvolutionDescriptor_t c,
                                                             miopenTensorDescriptor_t yd, const size_t max,
                                                             size_t *count, miopenConvSolution_t *sols)
{
    INJECT("miopenConvolutionForwardGetSolution");
    return get_solutions(DIR_FWD, h, xd, wd, c, yd, max, count, sols);
}

HOC_EXPORT miopenStatus_t miopenConvolutionForwardCompileSolution(miopenHandle_t h, miopenTensorDescriptor_t wd,
                                                                 miopenTensorDescriptor_t xd,
                                                                 miopenConvolutionDescriptor_t c,
                                                                 miopenTensorDescriptor_t yd,
                                                                 const unsigned long long id)
{
    INJECT("miopenConvolutionForwardCompileSolution");
    int dnn = 0;
    size_t need = 0;
    return solution_setup(DIR_FWD, h, xd, wd, c, yd, id, &dnn, &need); /* cuDNN compiles nothing */
}

HOC_EXPORT miopenStatus_t miopenConvolutionForwardImmediate(miopenHandle_t h, miopenTensorDescriptor_t wd,
                                                           const void *w, miopenTensorDescriptor_t xd,
                                                           const void *x, miopenConvolutionDescriptor_t c,
                                                           miopenTensorDescriptor_t yd, void *y, void *ws,
                                                           size_t ws_size, const unsigned long long id)
{
    INJECT("miopenConvolutionForwardImmediate");
    if (!x || !w || !y) return miopenStatusBadParm;
    int dnn = 0;
    size_t need = 0;
    miopenStatus_t st = solution_setup(DIR_FWD, h, xd, wd, c, yd, id, &dnn, &need);
    if (st != miopenStatusSuccess) return st;
    if (need > ws_size || (need > 0 && !ws)) return miopenStatusBadParm;
    double one_d = 1.0, zero_d = 0.0;
    float one_f = 1.0f, zero_f = 0.0f;
    int dbl = xd->dtype == miopenDouble;
    DNN(cudnnConvolutionForward(h->dnn, dbl ? (const void *)&one_d : (const void *)&one_f, xd->t, x, wd->f, w,
                                c->c, (cudnnConvolutionFwdAlgo_t)dnn, ws, ws_size,
                                dbl ? (const void *)&zero_d : (const void *)&zero_f, yd->t, y));
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardDataGetSolutionCount(miopenHandle_t h,
                                                                       miopenTensorDescriptor_t dyd,
                                                                       miopenTensorDescriptor_t wd,
                                                                       miopenConvolutionDescriptor_t c,
                                                                       miopenTensorDescriptor_t dxd, size_t *count)
{
    INJECT("miopenConvolutionBackwardDataGetSolutionCount");
    return solution_count(DIR_BWD_DATA, h, dxd, wd, c, dyd, count);
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardDataGetSolution(miopenHandle_t h, miopenTensorDescriptor_t dyd,
                                                                  miopenTensorDescriptor_t wd,
                                                                  miopenConvolutionDescriptor_t c,
                                                                  miopenTensorDescriptor_t dxd, const size_t max,
                                                                  size_t *count, miopenConvSolution_t *sols)
{
    INJECT("miopenConvolutionBackwardDataGetSolution");
    return get_solutions(DIR_BWD_DATA, h, dxd, wd, c, dyd, max, count, sols);
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardDataCompileSolution(miopenHandle_t h,
                                                                      miopenTensorDescriptor_t dyd,
                                                                      miopenTensorDescriptor_t wd,
                                                                      miopenConvolutionDescriptor_t c,
                                                                      miopenTensorDescriptor_t dxd,
                                                                      const unsigned long long id)
{
    INJECT("miopenConvolutionBackwardDataCompileSolution");
    int dnn = 0;
    size_t need = 0;
    return solution_setup(DIR_BWD_DATA, h, dxd, wd, c, dyd, id, &dnn, &need);
}

HOC_EXPORT miopenStatus_t miopenConvolutionBackwardDataImmediate(miopenHandle_t h, miopenTensorDescriptor_t dyd,
                                                                const void *dy, miopenTensorDescriptor_t wd,
                                                                const void *w, miopenConvolutionDescriptor_t c,
                                                                miopenTensorDescriptor_t dxd, void *dx, void *ws,
                                                                size_t ws_size, const unsigned long long id)
{
    INJECT("miopenConvolutionBackwardDataImmediate");
    if (!dy || !w || !dx) return miopenStatusBadParm;
    int dnn = 0;
    size_t need = 0;
    miopenStatus_t st = solution_setup(DIR_BWD_DATA, h, dxd, wd, c, dyd, id, &dnn, &need);
    if (st != miopenStatusSuccess) return st;
    if (need > ws_size || (need > 0 && !ws)) return miopenStatusBadParm;
    double one_d = 1.0, zero_d = 0.0;
    float one_f = 1.0f, zero_f = 0.0f;
    int dbl = dxd->dtype == miopenDouble;
    DNN(cudnnConvolutionBackwardData(h->dnn, dbl ? (const void *)&one_d : (const void *)&one_f, wd->f, w, dyd->t,
                                     dy, c->c, (cudnnConvolutionBwdDataAlgo_t)dnn, ws, ws_size,
                                     dbl ? (const void *)&zero_d : (const void *)&zero_f, dxd->t, dx));
    return miopenStatusSuccess;
}

/* ------------------------------------------------------------------------------------------ */
/* Pooling                                                                                    */
HOC_EXPORT miopenStatus_t miopenCreatePoolingDescriptor(miopenPoolingDescriptor_t *desc)
{
    INJECT("miopenCreatePoolingDescriptor");
    if (!desc) return miopenStatusBadParm;
    struct miopenPoolingDescriptor *d = calloc(1, sizeof *d);
    if (!d) return miopenStatusAllocFailed;
    miopenStatus_t st = map_dnn(cudnnCreatePoolingDescriptor(&d->p));
    if (st != miopenStatusSuccess) {
        free(d);
        return st;
    }
    *desc = d;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenSet2dPoolingDescriptor(miopenPoolingDescriptor_t d, int mode, int win_h,
                                                      int win_w, int pad_h, int pad_w, int stride_h,
                                                      int stride_w)
{
    INJECT("miopenSet2dPoolingDescriptor");
    if (!d) return miopenStatusBadParm;
    if (mode < miopenPoolingMax || mode > miopenPoolingAverageInclusive) return miopenStatusBadParm;
    if (win_h <= 0 || win_w <= 0 || stride_h <= 0 || stride_w <= 0 || pad_h < 0 || pad_w < 0)
        return miopenStatusBadParm;
    int dm = mode == miopenPoolingMax        ? CUDNN_POOLING_MAX
             : mode == miopenPoolingAverage  ? CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                                             : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    DNN(cudnnSetPooling2dDescriptor(d->p, (cudnnPoolingMode_t)dm, CUDNN_NOT_PROPAGATE_NAN, win_h, win_w, pad_h,
                                    pad_w, stride_h, stride_w));
    d->mode = mode;
    d->win[0] = win_h, d->win[1] = win_w;
    d->pad[0] = pad_h, d->pad[1] = pad_w;
    d->stride[0] = stride_h, d->stride[1] = stride_w;
    d->set = 1;
    return miopenStatusSuccess;
}

static miopenStatus_t pool_out_dims(const struct miopenPoolingDescriptor *p,
                                    const struct miopenTensorDescriptor *x, int out[4])
{
    if (!p || !x || !p->set || !x->set) return miopenStatusBadParm;
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    for (int i = 0; i < 2; i++) { /* fact 9 */
        ptrdiff_t o = ((ptrdiff_t)x->dims[2 + i] + 2 * (ptrdiff_t)p->pad[i] - p->win[i]) / p->stride[i] + 1;
        out[2 + i] = (int)(o < 1 ? 1 : o);
    }
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenGetPoolingForwardOutputDim(miopenPoolingDescriptor_t p, miopenTensorDescriptor_t x,
                                                          int *n, int *c, int *h, int *w)
{
    INJECT("miopenGetPoolingForwardOutputDim");
    if (!n || !c || !h || !w) return miopenStatusBadParm;
    int out[4];
    miopenStatus_t st = pool_out_dims(p, x, out);
    if (st != miopenStatusSuccess) return st;
    *n = out[0], *c = out[1], *h = out[2], *w = out[3];
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenPoolingGetWorkSpaceSize(miopenTensorDescriptor_t y, size_t *size)
{
    INJECT("miopenPoolingGetWorkSpaceSize");
    if (!y || !y->set || !size) return miopenStatusBadParm;
    *size = (size_t)y->dims[0] * y->dims[1] * y->dims[2] * y->dims[3] * sizeof(uint8_t); /* fact 10 */
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenPoolingGetWorkSpaceSizeV2(miopenPoolingDescriptor_t p, miopenTensorDescriptor_t y,
                                                         size_t *size)
{
    INJECT("miopenPoolingGetWorkSpaceSizeV2");
    if (!p || !p->set || !y || !y->set || !size) return miopenStatusBadParm;
    *size = p->mode == miopenPoolingMax
                ? (size_t)y->dims[0] * y->dims[1] * y->dims[2] * y->dims[3] * sizeof(uint8_t)
                : 0;
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenPoolingForward(miopenHandle_t h, miopenPoolingDescriptor_t p, const void *alpha,
                                              miopenTensorDescriptor_t xd, const void *x, const void *beta,
                                              miopenTensorDescriptor_t yd, void *y, bool do_backward, void *ws,
                                              size_t ws_size)
{
    INJECT("miopenPoolingForward");
    (void)ws, (void)ws_size;
    if (!h || !x || !y || !yd || !yd->set) return miopenStatusBadParm;
    int out[4];
    miopenStatus_t st = pool_out_dims(p, xd, out);
    if (st != miopenStatusSuccess) return st;
    if (xd->dtype != yd->dtype || memcmp(out, yd->dims, sizeof out) != 0) return miopenStatusBadParm;
    if (!alpha || !beta || *(const float *)alpha != 1.0f || *(const float *)beta != 0.0f)
        return miopenStatusUnknownError; /* fact 9 */
    if (do_backward) return miopenStatusNotImplemented; /* the double's limit */
    if ((st = bind(h)) != miopenStatusSuccess) return st;
    /* cuDNN reads alpha/beta as double for double data: pass its own scalars. */
    double one_d = 1.0, zero_d = 0.0;
    float one_f = 1.0f, zero_f = 0.0f;
    int dbl = xd->dtype == miopenDouble;
    DNN(cudnnPoolingForward(h->dnn, p->p, dbl ? (const void *)&one_d : (const void *)&one_f, xd->t, x,
                            dbl ? (const void *)&zero_d : (const void *)&zero_f, yd->t, y));
    return miopenStatusSuccess;
}

HOC_EXPORT miopenStatus_t miopenDestroyPoolingDescriptor(miopenPoolingDescriptor_t d)
{
    INJECT("miopenDestroyPoolingDescriptor");
    if (!d) return miopenStatusSuccess;
    cudnnStatus_t st = cudnnDestroyPoolingDescriptor(d->p);
    free(d);
    return map_dnn(st);
}
