// index.hip - bounds-safe gather / scatter kernels for candle-rocm's index_select, gather,
// scatter (set), scatter_add and index_add.
//
// Written for candle-rocm (not from candle-kernels). Kernel names are <op>_<I>_<T> with the
// index type I in {u8, u32, i64} and the element type T in {u8, u32, i16, i32, i64, bf16, f16,
// f32, f64}; ops: is (index_select), gather, s (scatter, set), sa (scatter, add), ia
// (index_add); and is_rows_<I>_v<B>, a dtype-agnostic index_select of whole row segments in
// B-byte packs (below). Every kernel checks each index against the size of the dimension it indexes: a
// value that is negative (i64) or >= that size (including the all-ones "no index" sentinels)
// reads as 0 and skips writes. Nothing traps. All index arithmetic is 64-bit.
//
// Contracts (all tensors contiguous unless said otherwise; `left`/`right` are the products of
// the dimensions before/after the indexed one):
//   is_<I>_<T>(numel, ids, ids_stride, inp, out, left, src_dim, ids_dim, right)
//       inp (left, src_dim, right); ids 1-D, ids_dim values at stride ids_stride;
//       out (left, ids_dim, right), numel = left * ids_dim * right.
//   gather_<I>_<T>(numel, ids, inp, out, left, src_dim, ids_dim, right)
//       inp (left, src_dim, right); ids and out (left, ids_dim, right), numel their size.
//   s_<I>_<T> / sa_<I>_<T>(ids, src, dst, left, src_dim, dst_dim, right)
//       ids and src (left, src_dim, right); dst (left, dst_dim, right). One thread per (l, r)
//       walks j = 0..src_dim in order, so with duplicate indices the last write wins (s) and
//       adds happen in j order (sa); no two threads touch the same dst element.
//   ia_<I>_<T>(ids, ids_dim, src, dst, left, src_dim, dst_dim, right)
//       ids 1-D contiguous (ids_dim == src_dim); src (left, src_dim, right);
//       dst (left, dst_dim, right); same per-(l, r) ordering as sa.
//   is_rows_<I>_v<B>(rows, ids, ids_stride, inp, out, src_dim, ids_dim, packs, tpr), B in
//       {16, 8, 4}: index_select moving B-byte packs (Bytes<B>: one 128/64/32-bit load and
//       store each), whatever the element type. In packs, inp is (left, src_dim, packs) and out
//       (left, ids_dim, packs): a row segment (the `right` elements after the indexed dim) is
//       packs * B bytes, and both pointers are B-byte aligned. rows = left * ids_dim. Each
//       group of tpr threads (a power of two dividing blockDim.x) copies one (l, j) row at a
//       time, reading its id once, and the groups grid-stride over rows; an invalid id writes
//       zeros. Nothing depends on the wave size. The host (candle-rocm/src/ops/indexing.rs) runs
//       these for contiguous sources whose segments and pointers allow 4-byte packs or wider,
//       and is_<I>_<T> otherwise.
// Adds wrap for integers (done in the unsigned type of the same width) and are computed in f32
// and rounded to nearest even for f16/bf16.
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

// ---- index validity ------------------------------------------------------------------------
__device__ __forceinline__ bool idx_valid(uint8_t v, size_t n) { return (size_t)v < n; }
__device__ __forceinline__ bool idx_valid(uint32_t v, size_t n) { return (size_t)v < n; }
__device__ __forceinline__ bool idx_valid(int64_t v, size_t n) { return v >= 0 && (size_t)v < n; }

// ---- zero and wrapping add per element type --------------------------------------------------
template <typename T> __device__ __forceinline__ T zero_of() { return (T)0; }
template <> __device__ __forceinline__ __half zero_of<__half>() {
    return __ushort_as_half((unsigned short)0);
}
template <> __device__ __forceinline__ __nv_bfloat16 zero_of<__nv_bfloat16>() {
    return __ushort_as_bfloat16((unsigned short)0);
}

__device__ __forceinline__ uint8_t add_elem(uint8_t a, uint8_t b) { return (uint8_t)(a + b); }
__device__ __forceinline__ uint32_t add_elem(uint32_t a, uint32_t b) { return a + b; }
__device__ __forceinline__ int16_t add_elem(int16_t a, int16_t b) {
    return (int16_t)(uint16_t)((uint32_t)(uint16_t)a + (uint32_t)(uint16_t)b);
}
__device__ __forceinline__ int32_t add_elem(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
__device__ __forceinline__ int64_t add_elem(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
__device__ __forceinline__ float add_elem(float a, float b) { return a + b; }
__device__ __forceinline__ double add_elem(double a, double b) { return a + b; }
__device__ __forceinline__ __half add_elem(__half a, __half b) {
    return __float2half(__half2float(a) + __half2float(b));
}
__device__ __forceinline__ __nv_bfloat16 add_elem(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}

#define GRID_STRIDE_LOOP(i, n)                                                                   \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (size_t)blockDim.x * gridDim.x)

// ---- bodies --------------------------------------------------------------------------------------
template <typename I, typename T>
__device__ __forceinline__ void index_select(size_t numel, const I *ids, size_t ids_stride,
                                             const T *inp, T *out, size_t src_dim, size_t ids_dim,
                                             size_t right) {
    GRID_STRIDE_LOOP(i, numel) {
        size_t q = i / right;
        size_t r = i - q * right;
        size_t l = q / ids_dim;
        size_t j = q - l * ids_dim;
        I v = ids[j * ids_stride];
        out[i] = idx_valid(v, src_dim) ? inp[(l * src_dim + (size_t)v) * right + r] : zero_of<T>();
    }
}

template <typename I, typename T>
__device__ __forceinline__ void gather(size_t numel, const I *ids, const T *inp, T *out,
                                       size_t src_dim, size_t ids_dim, size_t right) {
    GRID_STRIDE_LOOP(i, numel) {
        size_t q = i / right;
        size_t r = i - q * right;
        size_t l = q / ids_dim;
        I v = ids[i];
        out[i] = idx_valid(v, src_dim) ? inp[(l * src_dim + (size_t)v) * right + r] : zero_of<T>();
    }
}

// Scatter along a dim: ids and src share the layout (left, src_dim, right).
template <bool ADD, typename I, typename T>
__device__ __forceinline__ void scatter(const I *ids, const T *src, T *dst, size_t left,
                                        size_t src_dim, size_t dst_dim, size_t right) {
    const size_t pairs = left * right;
    GRID_STRIDE_LOOP(p, pairs) {
        size_t l = p / right;
        size_t r = p - l * right;
        size_t in_base = l * src_dim * right + r;
        T *d = dst + (l * dst_dim * right + r);
        for (size_t j = 0; j < src_dim; ++j) {
            size_t k = in_base + j * right;
            I v = ids[k];
            if (idx_valid(v, dst_dim)) {
                size_t o = (size_t)v * right;
                if (ADD) {
                    d[o] = add_elem(d[o], src[k]);
                } else {
                    d[o] = src[k];
                }
            }
        }
    }
}

// index_add along a dim: one 1-D index vector for every (l, r).
template <typename I, typename T>
__device__ __forceinline__ void index_add(const I *ids, size_t ids_dim, const T *src, T *dst,
                                          size_t left, size_t src_dim, size_t dst_dim,
                                          size_t right) {
    const size_t pairs = left * right;
    GRID_STRIDE_LOOP(p, pairs) {
        size_t l = p / right;
        size_t r = p - l * right;
        const T *s = src + (l * src_dim * right + r);
        T *d = dst + (l * dst_dim * right + r);
        for (size_t j = 0; j < ids_dim; ++j) {
            I v = ids[j];
            if (idx_valid(v, dst_dim)) {
                size_t o = (size_t)v * right;
                d[o] = add_elem(d[o], s[j * right]);
            }
        }
    }
}

// B bytes moved as one load / store (B in 4, 8, 16): words with the pack's alignment.
template <int B> struct alignas(B) Bytes {
    uint32_t w[B / 4];
};

// index_select of whole rows in packs P: a group of tpr threads per (l, j) row.
template <typename I, typename P>
__device__ __forceinline__ void index_select_rows(size_t rows, const I *ids, size_t ids_stride,
                                                  const P *inp, P *out, size_t src_dim,
                                                  size_t ids_dim, size_t packs, unsigned tpr) {
    const unsigned lane = threadIdx.x % tpr;
    const size_t per_block = blockDim.x / tpr;
    const size_t step = per_block * gridDim.x;
    for (size_t row = blockIdx.x * per_block + threadIdx.x / tpr; row < rows; row += step) {
        const size_t l = row / ids_dim;
        const size_t j = row - l * ids_dim;
        const I v = ids[j * ids_stride];
        P *o = out + row * packs;
        if (idx_valid(v, src_dim)) {
            const P *s = inp + (l * src_dim + (size_t)v) * packs;
#pragma unroll 4
            for (size_t p = lane; p < packs; p += tpr) o[p] = s[p];
        } else {
            const P z = {};
            for (size_t p = lane; p < packs; p += tpr) o[p] = z;
        }
    }
}

// ---- kernels --------------------------------------------------------------------------------------
#define INDEX_OPS(I, IN, T, TN)                                                                  \
    extern "C" __global__ void is_##IN##_##TN(                                                   \
        const size_t numel, const I *ids, const size_t ids_stride, const T *inp, T *out,         \
        const size_t left, const size_t src_dim, const size_t ids_dim, const size_t right) {     \
        (void)left;                                                                              \
        index_select(numel, ids, ids_stride, inp, out, src_dim, ids_dim, right);                 \
    }                                                                                            \
    extern "C" __global__ void gather_##IN##_##TN(                                               \
        const size_t numel, const I *ids, const T *inp, T *out, const size_t left,               \
        const size_t src_dim, const size_t ids_dim, const size_t right) {                        \
        (void)left;                                                                              \
        gather(numel, ids, inp, out, src_dim, ids_dim, right);                                   \
    }                                                                                            \
    extern "C" __global__ void s_##IN##_##TN(const I *ids, const T *src, T *dst,                 \
                                             const size_t left, const size_t src_dim,            \
                                             const size_t dst_dim, const size_t right) {         \
        scatter<false>(ids, src, dst, left, src_dim, dst_dim, right);                            \
    }                                                                                            \
    extern "C" __global__ void sa_##IN##_##TN(const I *ids, const T *src, T *dst,                \
                                              const size_t left, const size_t src_dim,           \
                                              const size_t dst_dim, const size_t right) {        \
        scatter<true>(ids, src, dst, left, src_dim, dst_dim, right);                             \
    }                                                                                            \
    extern "C" __global__ void ia_##IN##_##TN(const I *ids, const size_t ids_dim, const T *src,  \
                                              T *dst, const size_t left, const size_t src_dim,   \
                                              const size_t dst_dim, const size_t right) {        \
        index_add(ids, ids_dim, src, dst, left, src_dim, dst_dim, right);                        \
    }

#define INDEX_OPS_ALL_T(I, IN)                                                                   \
    INDEX_OPS(I, IN, uint8_t, u8)                                                                \
    INDEX_OPS(I, IN, uint32_t, u32)                                                              \
    INDEX_OPS(I, IN, int16_t, i16)                                                               \
    INDEX_OPS(I, IN, int32_t, i32)                                                               \
    INDEX_OPS(I, IN, int64_t, i64)                                                               \
    INDEX_OPS(I, IN, __nv_bfloat16, bf16)                                                        \
    INDEX_OPS(I, IN, __half, f16)                                                                \
    INDEX_OPS(I, IN, float, f32)                                                                 \
    INDEX_OPS(I, IN, double, f64)

INDEX_OPS_ALL_T(uint8_t, u8)
INDEX_OPS_ALL_T(uint32_t, u32)
INDEX_OPS_ALL_T(int64_t, i64)

#define INDEX_ROWS(I, IN, B)                                                                     \
    extern "C" __global__ void is_rows_##IN##_v##B(                                              \
        const size_t rows, const I *ids, const size_t ids_stride, const Bytes<B> *inp,           \
        Bytes<B> *out, const size_t src_dim, const size_t ids_dim, const size_t packs,           \
        const unsigned tpr) {                                                                    \
        index_select_rows(rows, ids, ids_stride, inp, out, src_dim, ids_dim, packs, tpr);        \
    }
#define INDEX_ROWS_ALL_B(I, IN)                                                                  \
    INDEX_ROWS(I, IN, 16)                                                                        \
    INDEX_ROWS(I, IN, 8)                                                                         \
    INDEX_ROWS(I, IN, 4)

INDEX_ROWS_ALL_B(uint8_t, u8)
INDEX_ROWS_ALL_B(uint32_t, u32)
INDEX_ROWS_ALL_B(int64_t, i64)
