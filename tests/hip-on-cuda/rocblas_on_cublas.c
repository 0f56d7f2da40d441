/*
 * rocblas_on_cublas.c - a test double of rocBLAS (librocblas.so.5) on cuBLAS.
 *
 * Exports the entry points of rocm-sys/src/rocblas.rs. A rocblas_handle is a heap struct holding
 * a cublasHandle_t, the device it was created on, its stream and pointer mode. Enum values are
 * rocBLAS's (rocblas-types.h) and are translated to cuBLAS's below.
 */
#include "hoc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned int rocblas_status;
enum {
    rocblas_status_success = 0, rocblas_status_invalid_handle = 1,
    rocblas_status_not_implemented = 2, rocblas_status_invalid_pointer = 3,
    rocblas_status_invalid_size = 4, rocblas_status_memory_error = 5,
    rocblas_status_internal_error = 6, rocblas_status_invalid_value = 11,
    rocblas_status_arch_mismatch = 15,
};
enum { rb_op_none = 111, rb_op_transpose = 112, rb_op_conjugate_transpose = 113 };
enum { rb_f16_r = 150, rb_f32_r = 151, rb_f64_r = 152, rb_bf16_r = 168 };

struct _rocblas_handle {
    cublasHandle_t cb;
    int device;
    hipStream_t stream;
    unsigned int pointer_mode; /* 0 host, 1 device */
};
typedef struct _rocblas_handle *rocblas_handle;

static rocblas_status map_cublas(cublasStatus_t st)
{
    switch ((int)st) {
    case CUBLAS_STATUS_SUCCESS: return rocblas_status_success;
    case CUBLAS_STATUS_NOT_INITIALIZED: return rocblas_status_invalid_handle;
    case CUBLAS_STATUS_ALLOC_FAILED: return rocblas_status_memory_error;
    case CUBLAS_STATUS_INVALID_VALUE: return rocblas_status_invalid_value;
    case CUBLAS_STATUS_ARCH_MISMATCH: return rocblas_status_arch_mismatch;
    case CUBLAS_STATUS_NOT_SUPPORTED: return rocblas_status_not_implemented;
    default: return rocblas_status_internal_error; /* EXECUTION_FAILED, INTERNAL_ERROR, ... */
    }
}

HOC_EXPORT void rocblas_initialize(void) {}

HOC_EXPORT rocblas_status rocblas_create_handle(rocblas_handle *handle)
{
    if (!handle) return rocblas_status_invalid_handle; /* as rocBLAS */
    if (hoc_bind() != hipSuccess) return rocblas_status_internal_error;
    struct _rocblas_handle *h = calloc(1, sizeof *h);
    if (!h) return rocblas_status_memory_error;
    cublasStatus_t st = cublasCreate_v2(&h->cb);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(h);
        return map_cublas(st);
    }
    h->device = hoc_current_device();
    *handle = h;
    return rocblas_status_success;
}

HOC_EXPORT rocblas_status rocblas_destroy_handle(rocblas_handle h)
{
    if (!h) return rocblas_status_invalid_handle;
    if (hoc_bind_device(h->device) != hipSuccess) return rocblas_status_internal_error;
    cublasStatus_t st = cublasDestroy_v2(h->cb);
    free(h);
    return map_cublas(st);
}

HOC_EXPORT rocblas_status rocblas_set_stream(rocblas_handle h, hipStream_t stream)
{
    if (!h) return rocblas_status_invalid_handle;
    if (hoc_bind_device(h->device) != hipSuccess) return rocblas_status_internal_error;
    cublasStatus_t st = cublasSetStream_v2(h->cb, (cudaStream_t)stream);
    if (st == CUBLAS_STATUS_SUCCESS) h->stream = stream;
    return map_cublas(st);
}

HOC_EXPORT rocblas_status rocblas_get_stream(rocblas_handle h, hipStream_t *stream)
{
    if (!h) return rocblas_status_invalid_handle;
    if (!stream) return rocblas_status_invalid_pointer;
    *stream = h->stream;
    return rocblas_status_success;
}

HOC_EXPORT rocblas_status rocblas_set_pointer_mode(rocblas_handle h, unsigned int mode)
{
    if (!h) return rocblas_status_invalid_handle;
    if (mode > 1) return rocblas_status_invalid_value;
    if (hoc_bind_device(h->device) != hipSuccess) return rocblas_status_internal_error;
    cublasStatus_t st = cublasSetPointerMode_v2(
        h->cb, mode ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST);
    if (st == CUBLAS_STATUS_SUCCESS) h->pointer_mode = mode;
    return map_cublas(st);
}

static const char *version_string(void)
{
    static char buf[96];
    static int done;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        int v = 0;
        /* cuBLAS ignores the handle here; a failure just leaves "unknown". */
        if (cublasGetVersion_v2(NULL, &v) == CUBLAS_STATUS_SUCCESS && v > 0)
            snprintf(buf, sizeof buf, "hip-on-cuda rocBLAS double (cuBLAS %d)", v);
        else
            snprintf(buf, sizeof buf, "hip-on-cuda rocBLAS double (cuBLAS unknown)");
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE); /* racing writers write the same bytes */
    }
    return buf;
}

HOC_EXPORT rocblas_status rocblas_get_version_string_size(size_t *len)
{
    if (!len) return rocblas_status_invalid_pointer;
    *len = strlen(version_string()) + 1;
    return rocblas_status_success;
}

HOC_EXPORT rocblas_status rocblas_get_version_string(char *buf, size_t len)
{
    if (!buf) return rocblas_status_invalid_pointer;
    const char *v = version_string();
    if (len < strlen(v) + 1) return rocblas_status_invalid_size;
    memcpy(buf, v, strlen(v) + 1);
    return rocblas_status_success;
}

HOC_EXPORT const char *rocblas_status_to_string(rocblas_status s)
{
    static const char *const names[] = {
        "rocblas_status_success", "rocblas_status_invalid_handle", "rocblas_status_not_implemented",
        "rocblas_status_invalid_pointer", "rocblas_status_invalid_size", "rocblas_status_memory_error",
        "rocblas_status_internal_error", "rocblas_status_perf_degraded",
        "rocblas_status_size_query_mismatch", "rocblas_status_size_increased",
        "rocblas_status_size_unchanged", "rocblas_status_invalid_value", "rocblas_status_continue",
        "rocblas_status_check_numerics_fail", "rocblas_status_excluded_from_build",
        "rocblas_status_arch_mismatch",
    };
    return s < sizeof names / sizeof names[0] ? names[s] : "Invalid status";
}

/* rocblas_operation 111/112/113 -> CUBLAS_OP_N/T/C; -1 if unknown. */
static int map_op(unsigned int op)
{
    switch (op) {
    case rb_op_none: return CUBLAS_OP_N;
    case rb_op_transpose: return CUBLAS_OP_T;
    case rb_op_conjugate_transpose: return CUBLAS_OP_C;
    default: return -1;
    }
}

/* Real rocblas_datatype -> cudaDataType; -1 for values rocBLAS does not define, -2 for ones it
 * defines (complex, integer) that this double does not carry. */
static int map_type(unsigned int t)
{
    switch (t) {
    case rb_f16_r: return CUDA_R_16F;
    case rb_f32_r: return CUDA_R_32F;
    case rb_f64_r: return CUDA_R_64F;
    case rb_bf16_r: return CUDA_R_16BF;
    default: return ((t >= 153 && t <= 155) || (t >= 160 && t <= 167) || t == 169) ? -2 : -1;
    }
}

/* Is *alpha zero (host pointer mode only)? Decides whether A and B may be NULL. */
static int host_scalar_is_zero(const void *p, unsigned int compute_type)
{
    if (compute_type == rb_f32_r) return *(const float *)p == 0.0f;
    if (compute_type == rb_f64_r) return *(const double *)p == 0.0;
    if (compute_type == rb_f16_r) return (*(const uint16_t *)p & 0x7fffu) == 0;
    return 0;
}

/*
 * D = alpha * op(A) op(B) + beta * C, batched with strides. cuBLAS writes C in place, so only
 * the in-place form (c == d, ldc == ldd, stride_c == stride_d, c_type == d_type) is supported;
 * anything else is rocblas_status_not_implemented. algo/solution_index/flags are validated and
 * otherwise ignored (cuBLAS picks with CUBLAS_GEMM_DEFAULT).
 */
HOC_EXPORT rocblas_status rocblas_gemm_strided_batched_ex(
    rocblas_handle h, unsigned int trans_a, unsigned int trans_b, int m, int n, int k,
    const void *alpha, const void *a, unsigned int a_type, int lda, int64_t stride_a,
    const void *b, unsigned int b_type, int ldb, int64_t stride_b, const void *beta,
    const void *c, unsigned int c_type, int ldc, int64_t stride_c, void *d, unsigned int d_type,
    int ldd, int64_t stride_d, int batch_count, unsigned int compute_type, unsigned int algo,
    int32_t solution_index, uint32_t flags)
{
    (void)solution_index;
    (void)flags;
    if (!h) return rocblas_status_invalid_handle;
    int op_a = map_op(trans_a), op_b = map_op(trans_b);
    int ta = map_type(a_type), tb = map_type(b_type), tc = map_type(c_type), td = map_type(d_type);
    int tcomp = map_type(compute_type);
    if (op_a < 0 || op_b < 0 || ta == -1 || tb == -1 || tc == -1 || td == -1 || tcomp == -1 || algo > 1)
        return rocblas_status_invalid_value;
    /* Sizes, as rocBLAS checks them (column-major, lda >= rows of the stored matrix). */
    int a_rows = op_a == CUBLAS_OP_N ? m : k, b_rows = op_b == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch_count < 0 || lda < a_rows || ldb < b_rows || ldc < m ||
        ldd < m)
        return rocblas_status_invalid_size;
    if (m == 0 || n == 0 || batch_count == 0) return rocblas_status_success; /* quick return */
    if (!alpha || !beta || !d || !c) return rocblas_status_invalid_pointer;
    int ab_needed = k > 0 && !(h->pointer_mode == 0 && host_scalar_is_zero(alpha, compute_type));
    if (ab_needed && (!a || !b)) return rocblas_status_invalid_pointer;
    if (ta < 0 || tb < 0 || tc < 0 || td < 0 || tcomp < 0) return rocblas_status_not_implemented;
    if (c != d || ldc != ldd || stride_c != stride_d || c_type != d_type)
        return rocblas_status_not_implemented; /* cuBLAS has no out-of-place D */
    int cublas_compute;
    switch (compute_type) {
    case rb_f32_r: cublas_compute = CUBLAS_COMPUTE_32F; break;
    case rb_f64_r: cublas_compute = CUBLAS_COMPUTE_64F; break;
    case rb_f16_r: cublas_compute = CUBLAS_COMPUTE_16F; break;
    default: return rocblas_status_not_implemented; /* bf16 compute: rocBLAS has none either */
    }
    if (hoc_bind_device(h->device) != hipSuccess) return rocblas_status_internal_error;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h->cb, (cublasOperation_t)op_a, (cublasOperation_t)op_b, m, n, k, alpha, a,
        (cudaDataType)ta, lda, stride_a, b, (cudaDataType)tb, ldb, stride_b, beta, d,
        (cudaDataType)tc, ldc, stride_c, batch_count, (cublasComputeType_t)cublas_compute,
        CUBLAS_GEMM_DEFAULT);
    return map_cublas(st);
}
