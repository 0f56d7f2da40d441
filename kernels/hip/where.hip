// where.hip - elementwise select (`cond ? t : f`) for candle-rocm's where_cond, for every
// condition dtype Candle's CPU backend accepts.
//
// Written for candle-rocm (not from candle-kernels). Kernels where_<C>_<T> with the condition
// type C in {u8, u32, i16, i32, i64} and T in {u8, u32, i16, i32, i64, bf16, f16, f32, f64}:
//   where_<C>_<T>(size_t numel, size_t num_dims, const size_t *info, const C *cond,
//                 const T *t, const T *f, T *out)
// info (never null) holds dims[num_dims], then the strides of cond, t and f (num_dims each);
// cond, t and f already point at their layouts' first elements; out is contiguous.
// out[i] = cond[i'] != 0 ? t[i'] : f[i'] with i' each operand's strided position of i. Only
// the selected operand is read. All index arithmetic is 64-bit.
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

__device__ __forceinline__ bool layout_contiguous(size_t num_dims, const size_t *dims,
                                                  const size_t *strides) {
    size_t acc = 1;
    for (size_t d = num_dims; d-- > 0;) {
        if (dims[d] > 1 && strides[d] != acc) return false;
        acc *= dims[d];
    }
    return true;
}

template <typename C, typename T>
__device__ __forceinline__ void where_body(size_t numel, size_t num_dims, const size_t *info,
                                           const C *cond, const T *t, const T *f, T *out) {
    const size_t *dims = info;
    const size_t *cs = info + num_dims;
    const size_t *ts = info + 2 * num_dims;
    const size_t *fs = info + 3 * num_dims;
    const size_t step = (size_t)blockDim.x * gridDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= numel) return;
    if (layout_contiguous(num_dims, dims, cs) && layout_contiguous(num_dims, dims, ts) &&
        layout_contiguous(num_dims, dims, fs)) {
        for (; i < numel; i += step) out[i] = cond[i] != 0 ? t[i] : f[i];
    } else {
        for (; i < numel; i += step) {
            // One pass over the dims computes all three operands' offsets.
            size_t rest = i, co = 0, to = 0, fo = 0;
            for (size_t d = num_dims; d-- > 0;) {
                size_t n = dims[d];
                size_t q = rest / n;
                size_t k = rest - q * n;
                co += k * cs[d];
                to += k * ts[d];
                fo += k * fs[d];
                rest = q;
            }
            out[i] = cond[co] != 0 ? t[to] : f[fo];
        }
    }
}

#define WHERE_OP(C, CN, T, TN)                                                                   \
    extern "C" __global__ void where_##CN##_##TN(const size_t numel, const size_t num_dims,      \
                                                 const size_t *info, const C *cond, const T *t,  \
                                                 const T *f, T *out) {                           \
        where_body(numel, num_dims, info, cond, t, f, out);                                      \
    }

#define WHERE_ALL_T(C, CN)                                                                       \
    WHERE_OP(C, CN, uint8_t, u8)                                                                 \
    WHERE_OP(C, CN, uint32_t, u32)                                                               \
    WHERE_OP(C, CN, int16_t, i16)                                                                \
    WHERE_OP(C, CN, int32_t, i32)                                                                \
    WHERE_OP(C, CN, int64_t, i64)                                                                \
    WHERE_OP(C, CN, __nv_bfloat16, bf16)                                                         \
    WHERE_OP(C, CN, __half, f16)                                                                 \
    WHERE_OP(C, CN, float, f32)                                                                  \
    WHERE_OP(C, CN, double, f64)

WHERE_ALL_T(uint8_t, u8)
WHERE_ALL_T(uint32_t, u32)
WHERE_ALL_T(int16_t, i16)
WHERE_ALL_T(int32_t, i32)
WHERE_ALL_T(int64_t, i64)
