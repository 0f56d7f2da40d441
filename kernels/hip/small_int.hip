// small_int.hip - the elementwise, fill and reduction kernels candle-kernels lacks for i16 and
// i32, under candle-kernels' names and signatures, so candle-rocm only switches modules for
// these two dtypes.
//
// Written for candle-rocm (not from candle-kernels). For T in {i16, i32}:
//   ucopy_<T>(numel, num_dims, info, const T *inp, T *out)
//       info null (contiguous) or dims[num_dims] then strides[num_dims]; strided read,
//       contiguous write.
//   b{add,sub,mul,div,maximum,minimum}_<T>(numel, num_dims, info, const T *lhs, const T *rhs,
//       T *out) and {eq,ne,lt,le,gt,ge}_<T>(..., uint8_t *out)
//       info null when both operands are contiguous, else dims, lhs strides, rhs strides.
//       add/sub/mul wrap; div truncates toward zero, x / 0 = 0 and MIN / -1 = MIN (wrapping).
//       Comparisons write 1 or 0.
//   const_set_<T>(numel, num_dims, info, T value, T *out)
//       info null (contiguous) or dims then strides of out; out points at the layout's start.
//   copy2d_<T>(const T *src, T *dst, u32 d1, u32 d2, u32 src_s, u32 dst_s)
//       dst[i1 * dst_s + i2] = src[i1 * src_s + i2] for i1 < d1, i2 < d2.
//   fill_<T>(T *buf, T value, size_t numel)
//   fast_{sum,min,max}_<T>(src_numel, el_per_block, num_dims, info, const T *src, T *dst)
//   fast_arg{min,max}_<T>(..., uint32_t *dst)
//       info: dims then strides of src with the reduced dims last; block b reduces logical
//       elements [b * el_per_block, (b + 1) * el_per_block) into dst[b]. Launch: one block per
//       output, blockDim.x <= 1024 (a power of two in Candle; any size works). Sums wrap; arg
//       ops return the position within the block's run, the first one among equal extremes.
//       An empty run gives 0 (sum, arg ops), MAX (min) or MIN (max).
// All index arithmetic is 64-bit.
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include <stdint.h>

// ---- layouts ----------------------------------------------------------------------------------------
__device__ __forceinline__ bool layout_contiguous(size_t num_dims, const size_t *dims,
                                                  const size_t *strides) {
    size_t acc = 1;
    for (size_t d = num_dims; d-- > 0;) {
        if (dims[d] > 1 && strides[d] != acc) return false;
        acc *= dims[d];
    }
    return true;
}

__device__ __forceinline__ size_t strided_offset(size_t i, size_t num_dims, const size_t *dims,
                                                 const size_t *strides) {
    size_t off = 0;
    for (size_t d = num_dims; d-- > 0;) {
        size_t n = dims[d];
        size_t q = i / n;
        off += (i - q * n) * strides[d];
        i = q;
    }
    return off;
}

#define GRID_STRIDE_LOOP(i, n)                                                                   \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (size_t)blockDim.x * gridDim.x)

// ---- integer traits -----------------------------------------------------------------------------------
template <typename T> struct Int;
template <> struct Int<int16_t> {
    typedef uint16_t U;
    static __device__ __forceinline__ int16_t min_v() { return (int16_t)-32768; }
    static __device__ __forceinline__ int16_t max_v() { return (int16_t)32767; }
};
template <> struct Int<int32_t> {
    typedef uint32_t U;
    static __device__ __forceinline__ int32_t min_v() { return (int32_t)(-2147483647 - 1); }
    static __device__ __forceinline__ int32_t max_v() { return (int32_t)2147483647; }
};

// Wrapping arithmetic through unsigned int (u16 operands are widened to u32 first so that
// nothing is promoted to a signed int that could overflow).
template <typename T> __device__ __forceinline__ T wrap_add(T a, T b) {
    return (T)(typename Int<T>::U)((uint32_t)(typename Int<T>::U)a + (uint32_t)(typename Int<T>::U)b);
}
template <typename T> __device__ __forceinline__ T wrap_sub(T a, T b) {
    return (T)(typename Int<T>::U)((uint32_t)(typename Int<T>::U)a - (uint32_t)(typename Int<T>::U)b);
}
template <typename T> __device__ __forceinline__ T wrap_mul(T a, T b) {
    return (T)(typename Int<T>::U)((uint32_t)(typename Int<T>::U)a * (uint32_t)(typename Int<T>::U)b);
}
template <typename T> __device__ __forceinline__ T safe_div(T a, T b) {
    if (b == 0) return (T)0;
    if (b == -1) return wrap_sub<T>((T)0, a);  // -a, and MIN / -1 = MIN
    return (T)(a / b);
}

struct OpAdd { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return wrap_add(a, b); } };
struct OpSub { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return wrap_sub(a, b); } };
struct OpMul { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return wrap_mul(a, b); } };
struct OpDiv { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return safe_div(a, b); } };
struct OpMax { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a < b ? b : a; } };
struct OpMin { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; } };
struct OpEq { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a == b; } };
struct OpNe { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a != b; } };
struct OpLt { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a < b; } };
struct OpLe { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a <= b; } };
struct OpGt { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a > b; } };
struct OpGe { template <typename T> __device__ __forceinline__ uint8_t operator()(T a, T b) const { return a >= b; } };

// ---- elementwise -----------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ void ucopy_body(size_t numel, size_t num_dims, const size_t *info,
                                           const T *inp, T *out) {
    const size_t *dims = info;
    const size_t *strides = info + num_dims;
    if (info == nullptr || layout_contiguous(num_dims, dims, strides)) {
        GRID_STRIDE_LOOP(i, numel) out[i] = inp[i];
    } else {
        GRID_STRIDE_LOOP(i, numel) out[i] = inp[strided_offset(i, num_dims, dims, strides)];
    }
}

template <typename T, typename O, typename Op>
__device__ __forceinline__ void binary_body(size_t numel, size_t num_dims, const size_t *info,
                                            const T *lhs, const T *rhs, O *out) {
    const Op op;
    const size_t *dims = info;
    const size_t *ls = info + num_dims;
    const size_t *rs = info + 2 * num_dims;
    bool lc = info == nullptr || layout_contiguous(num_dims, dims, ls);
    bool rc = info == nullptr || layout_contiguous(num_dims, dims, rs);
    if (lc && rc) {
        GRID_STRIDE_LOOP(i, numel) out[i] = op(lhs[i], rhs[i]);
    } else if (lc) {
        GRID_STRIDE_LOOP(i, numel) out[i] = op(lhs[i], rhs[strided_offset(i, num_dims, dims, rs)]);
    } else if (rc) {
        GRID_STRIDE_LOOP(i, numel) out[i] = op(lhs[strided_offset(i, num_dims, dims, ls)], rhs[i]);
    } else {
        GRID_STRIDE_LOOP(i, numel) {
            size_t rest = i, lo = 0, ro = 0;
            for (size_t d = num_dims; d-- > 0;) {
                size_t n = dims[d];
                size_t q = rest / n;
                size_t k = rest - q * n;
                lo += k * ls[d];
                ro += k * rs[d];
                rest = q;
            }
            out[i] = op(lhs[lo], rhs[ro]);
        }
    }
}

template <typename T>
__device__ __forceinline__ void const_set_body(size_t numel, size_t num_dims, const size_t *info,
                                               T value, T *out) {
    const size_t *dims = info;
    const size_t *strides = info + num_dims;
    if (info == nullptr || layout_contiguous(num_dims, dims, strides)) {
        GRID_STRIDE_LOOP(i, numel) out[i] = value;
    } else {
        GRID_STRIDE_LOOP(i, numel) out[strided_offset(i, num_dims, dims, strides)] = value;
    }
}

template <typename T>
__device__ __forceinline__ void copy2d_body(const T *src, T *dst, uint32_t d1, uint32_t d2,
                                            uint32_t src_s, uint32_t dst_s) {
    const size_t n = (size_t)d1 * d2;
    GRID_STRIDE_LOOP(i, n) {
        size_t i1 = i / d2;
        size_t i2 = i - i1 * d2;
        dst[i1 * dst_s + i2] = src[i1 * src_s + i2];
    }
}

// ---- reductions -------------------------------------------------------------------------------------------
// Block b reduces logical elements [b * el_per_block, (b + 1) * el_per_block) of src (bounded by
// src_numel). Threads first fold a strided share each, then a shared-memory tree folds the
// blockDim.x partials; `width` below handles any block size, not only powers of two.
#define RED_MAX_THREADS 1024

// Whether this block has an output to write (a larger grid than outputs writes nothing extra).
__device__ __forceinline__ bool reduce_block_in_range(size_t src_numel, size_t el_per_block) {
    return el_per_block == 0 || blockIdx.x < src_numel / el_per_block;
}

__device__ __forceinline__ unsigned int tree_start() {
    unsigned int n = blockDim.x, s = 1;
    while (s < n) s <<= 1;
    return s >> 1;
}

// Sum (wrapping: accumulated in u32, exact modulo 2^16 and 2^32) and min / max (in int, which
// holds every i16 and i32 value).
template <typename T, int KIND>  // KIND: 0 sum, 1 min, 2 max
__device__ __forceinline__ void reduce_body(size_t src_numel, size_t el_per_block, size_t num_dims,
                                            const size_t *info, const T *src, T *dst,
                                            int *shr) {
    if (!reduce_block_in_range(src_numel, el_per_block)) return;
    const size_t *dims = info;
    const size_t *strides = info + num_dims;
    const bool cont = layout_contiguous(num_dims, dims, strides);
    const unsigned int tid = threadIdx.x;
    const size_t start = (size_t)blockIdx.x * el_per_block;
    size_t stop = start + el_per_block;
    if (stop > src_numel) stop = src_numel;
    uint32_t acc_sum = 0;
    int acc = KIND == 1 ? (int)Int<T>::max_v() : (int)Int<T>::min_v();
    for (size_t idx = start + tid; idx < stop; idx += blockDim.x) {
        T v = src[cont ? idx : strided_offset(idx, num_dims, dims, strides)];
        if (KIND == 0) acc_sum += (uint32_t)(int)v;
        else if (KIND == 1) acc = (int)v < acc ? (int)v : acc;
        else acc = (int)v > acc ? (int)v : acc;
    }
    shr[tid] = KIND == 0 ? (int)acc_sum : acc;
    const unsigned int width = blockDim.x;
    for (unsigned int s = tree_start(); s > 0; s >>= 1) {
        __syncthreads();
        if (tid < s && tid + s < width) {
            int a = shr[tid], b = shr[tid + s];
            if (KIND == 0) shr[tid] = (int)((uint32_t)a + (uint32_t)b);
            else if (KIND == 1) shr[tid] = b < a ? b : a;
            else shr[tid] = b > a ? b : a;
        }
    }
    if (tid == 0) dst[blockIdx.x] = (T)(typename Int<T>::U)(uint32_t)shr[0];
}

// argmin (MAX == false) / argmax (MAX == true): value and position within the run; ties keep
// the smaller position. Empty partials carry position SIZE_MAX and lose every comparison.
template <typename T, bool MAX>
__device__ __forceinline__ void arg_reduce_body(size_t src_numel, size_t el_per_block,
                                                size_t num_dims, const size_t *info, const T *src,
                                                uint32_t *dst, int *shr, size_t *shr_idx) {
    if (!reduce_block_in_range(src_numel, el_per_block)) return;
    const size_t *dims = info;
    const size_t *strides = info + num_dims;
    const bool cont = layout_contiguous(num_dims, dims, strides);
    const unsigned int tid = threadIdx.x;
    const size_t start = (size_t)blockIdx.x * el_per_block;
    size_t stop = start + el_per_block;
    if (stop > src_numel) stop = src_numel;
    int best = MAX ? (int)Int<T>::min_v() : (int)Int<T>::max_v();
    size_t best_idx = (size_t)-1;
    for (size_t idx = start + tid; idx < stop; idx += blockDim.x) {
        int v = (int)src[cont ? idx : strided_offset(idx, num_dims, dims, strides)];
        // Positions grow along the loop: strict comparison keeps the first extreme, and the
        // first element always replaces the empty marker.
        if (best_idx == (size_t)-1 || (MAX ? v > best : v < best)) {
            best = v;
            best_idx = idx - start;
        }
    }
    shr[tid] = best;
    shr_idx[tid] = best_idx;
    const unsigned int width = blockDim.x;
    for (unsigned int s = tree_start(); s > 0; s >>= 1) {
        __syncthreads();
        if (tid < s && tid + s < width) {
            int a = shr[tid], b = shr[tid + s];
            size_t ai = shr_idx[tid], bi = shr_idx[tid + s];
            bool take;
            if (bi == (size_t)-1) take = false;
            else if (ai == (size_t)-1) take = true;
            else take = (MAX ? b > a : b < a) || (b == a && bi < ai);
            if (take) {
                shr[tid] = b;
                shr_idx[tid] = bi;
            }
        }
    }
    if (tid == 0) {
        size_t r = shr_idx[0];
        dst[blockIdx.x] = r == (size_t)-1 ? 0u : (uint32_t)r;
    }
}

// ---- kernels -------------------------------------------------------------------------------------------------
#define BINARY_KERNEL(T, TN, O, NAME, OP)                                                        \
    extern "C" __global__ void NAME##_##TN(const size_t numel, const size_t num_dims,            \
                                           const size_t *dims_and_strides, const T *lhs,         \
                                           const T *rhs, O *out) {                               \
        binary_body<T, O, OP>(numel, num_dims, dims_and_strides, lhs, rhs, out);                 \
    }

#define REDUCE_KERNEL(T, TN, NAME, KIND)                                                         \
    extern "C" __global__ void NAME##_##TN(const size_t src_numel, const size_t el_per_block,    \
                                           const size_t num_dims, const size_t *info,            \
                                           const T *src, T *dst) {                               \
        __shared__ int shr[RED_MAX_THREADS];                                                     \
        reduce_body<T, KIND>(src_numel, el_per_block, num_dims, info, src, dst, shr);            \
    }

#define ARG_REDUCE_KERNEL(T, TN, NAME, MAX)                                                      \
    extern "C" __global__ void NAME##_##TN(const size_t src_numel, const size_t el_per_block,    \
                                           const size_t num_dims, const size_t *info,            \
                                           const T *src, uint32_t *dst) {                        \
        __shared__ int shr[RED_MAX_THREADS];                                                     \
        __shared__ size_t shr_idx[RED_MAX_THREADS];                                              \
        arg_reduce_body<T, MAX>(src_numel, el_per_block, num_dims, info, src, dst, shr,          \
                                shr_idx);                                                        \
    }

#define SMALL_INT_OPS(T, TN)                                                                     \
    extern "C" __global__ void ucopy_##TN(const size_t numel, const size_t num_dims,             \
                                          const size_t *info, const T *inp, T *out) {            \
        ucopy_body(numel, num_dims, info, inp, out);                                             \
    }                                                                                            \
    BINARY_KERNEL(T, TN, T, badd, OpAdd)                                                         \
    BINARY_KERNEL(T, TN, T, bsub, OpSub)                                                         \
    BINARY_KERNEL(T, TN, T, bmul, OpMul)                                                         \
    BINARY_KERNEL(T, TN, T, bdiv, OpDiv)                                                         \
    BINARY_KERNEL(T, TN, T, bmaximum, OpMax)                                                     \
    BINARY_KERNEL(T, TN, T, bminimum, OpMin)                                                     \
    BINARY_KERNEL(T, TN, uint8_t, eq, OpEq)                                                      \
    BINARY_KERNEL(T, TN, uint8_t, ne, OpNe)                                                      \
    BINARY_KERNEL(T, TN, uint8_t, lt, OpLt)                                                      \
    BINARY_KERNEL(T, TN, uint8_t, le, OpLe)                                                      \
    BINARY_KERNEL(T, TN, uint8_t, gt, OpGt)                                                      \
    BINARY_KERNEL(T, TN, uint8_t, ge, OpGe)                                                      \
    extern "C" __global__ void const_set_##TN(const size_t numel, const size_t num_dims,         \
                                              const size_t *info, const T value, T *out) {       \
        const_set_body(numel, num_dims, info, value, out);                                       \
    }                                                                                            \
    extern "C" __global__ void copy2d_##TN(const T *src, T *dst, uint32_t d1, uint32_t d2,       \
                                           uint32_t src_s, uint32_t dst_s) {                     \
        copy2d_body(src, dst, d1, d2, src_s, dst_s);                                             \
    }                                                                                            \
    extern "C" __global__ void fill_##TN(T *buf, const T value, const size_t numel) {            \
        GRID_STRIDE_LOOP(i, numel) buf[i] = value;                                               \
    }                                                                                            \
    REDUCE_KERNEL(T, TN, fast_sum, 0)                                                            \
    REDUCE_KERNEL(T, TN, fast_min, 1)                                                            \
    REDUCE_KERNEL(T, TN, fast_max, 2)                                                            \
    ARG_REDUCE_KERNEL(T, TN, fast_argmin, false)                                                 \
    ARG_REDUCE_KERNEL(T, TN, fast_argmax, true)

SMALL_INT_OPS(int16_t, i16)
SMALL_INT_OPS(int32_t, i32)
