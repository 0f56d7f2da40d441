// rows.hip - row kernels at the memory-bandwidth limit: reductions over the last dim (sum, max,
// min, argmax, argmin), the fused softmax / RMS norm / layer norm over the last dim, and a
// tiled transpose for the contiguous copy of a transposed (last-two-dims) layout.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus a few AMD builtins
// behind __HIP_DEVICE_COMPILE__, so the same file builds for AMD (clang, kernels/include
// headers) and for the HIP-on-CUDA harness (nvcc with CUDA's own headers).
//
// Row model. A row of `cols` elements is handled by a group of `tpr` threads (threads per row):
// either tpr <= 32 (a power of two, several rows per block, reduced with wave shuffles only)
// or tpr == blockDim.x (one row per block: wave shuffles, then one shared-memory step across
// the block's waves). The wave size RW_WAVE is a compile-time constant per target (64 on
// gfx9, 32 on gfx10+ and on NVIDIA); nothing assumes 32 lanes. Rows are visited with a
// block-uniform grid-stride loop, so every lane reaches every shuffle and barrier.
//
// Vector path (template VEC): 16-byte loads/stores of N = 16 / sizeof(T) elements. The launch
// takes it only when every row starts 16-byte aligned and cols % N == 0 (checked on the host
// from the pointers and sizes); otherwise the scalar path reads the same chunks element by
// element with bounds checks. Accumulation is in f32 (f64 for double).
//
// Kernels (T in f32, f16, bf16, f64; all sizes by value, no device-side shape buffers):
//   rsum_<T>(const T* src, T* dst, size_t rows, size_t cols, unsigned tpr)
//   rmax_<T>, rmin_<T>               same signature, dst holds the extreme value
//   rargmax_<T>, rargmin_<T>          same, dst is uint32_t*
//     (+ suffix _v for the vector path). Candle's CPU semantics exactly: the first element is
//     the start value and an element replaces it only when strictly greater (smaller), so
//     NaN elements are skipped unless the row starts with NaN (then NaN, index 0), and ties
//     keep the first index.
//   csum_<T>, cmax_<T>, cmin_<T>, cargmax_<T>, cargmin_<T>(const T* src, D* dst, size_t a,
//     size_t b, size_t c): the same reductions over the middle dim of a contiguous (a, b, c)
//     tensor into (a, c), threads along c; blocks of (64, 4) threads.
//   rsoftmax_<T>_<K>(const T* x, T* dst, const T* alpha, const T* beta, size_t rows,
//                    size_t cols, unsigned tpr, float eps)
//   rrmsnorm_<T>_<K>, rlayernorm_<T>_<K>   same signature (alpha/beta unused where the op has
//     none; never null where it has them). K = 1, 2, 4 (and 8 for f32, f64): each thread
//     keeps K chunks of N elements in registers, at most 32 values (one read, one write; rows
//     up to 256 * K * N elements: 8192 for f32/f16/bf16, 4096 for f64); K = 0: two passes
//     over the row for longer rows. Suffix _v for the vector path.
//   rtranspose_<T>(const T* src, T* dst, size_t batches, unsigned r, unsigned c)
//     src is `batches` contiguous (c, r) matrices, dst the (r, c) transposes; 32x32 tiles
//     through shared memory, blocks of (32, 8) threads, a grid-stride loop over tiles (any
//     grid works; the host sizes it by 64x64 tiles for u16, whose word path uses those).
//   rrope_<T>(const T* x, const T* cos, const T* sin, T* dst, unsigned rows, unsigned t,
//             unsigned d, unsigned rows_per_b)
//   rropei_<T>(same)
//     Rotary embeddings of candle-nn's `rope` (the two halves of a row rotated) and `rope_i`
//     (adjacent pairs) on `rows` contiguous rows of d elements (a (b, h, t, d) tensor, row r at
//     time r % t), with candle-kernels' arithmetic: each product and each sum rounded to T as
//     candle's kernels and the CPU compute them in T. cos/sin hold d / 2 values per time step:
//     row r uses table row r % t, plus t (r / rows_per_b) when rows_per_b is not 0 (a table
//     per batch entry). Vector path only: each thread takes N = 16 / sizeof(T) outputs of each
//     half (rope) or N consecutive outputs (rope_i), so the host launches them only when d / 2
//     (rope) or d (rope_i) is a multiple of N and every pointer is 16-byte aligned (else
//     candle's one-pair-per-thread kernels run). Blocks of RW_BLOCK threads, grid-stride.
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

#if defined(__HIP_DEVICE_COMPILE__)
#define RW_WAVE __AMDGCN_WAVEFRONT_SIZE__
typedef unsigned int rw_vec __attribute__((ext_vector_type(4)));
#else
#define RW_WAVE 32
typedef uint4 rw_vec;
#endif

#define RW_BLOCK 256
#define RW_NONE 0xffffffffu

// ---------------------------------------------------------------------------------------------
// Element conversions. Acc<T> is the accumulation type: double for double, float otherwise.
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

__device__ __forceinline__ float rw_to(float x) { return x; }
__device__ __forceinline__ double rw_to(double x) { return x; }
__device__ __forceinline__ float rw_to(__half x) { return __half2float(x); }
__device__ __forceinline__ float rw_to(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T rw_from(typename Acc<T>::type x);
template <> __device__ __forceinline__ float rw_from<float>(float x) { return x; }
template <> __device__ __forceinline__ double rw_from<double>(double x) { return x; }
template <> __device__ __forceinline__ __half rw_from<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 rw_from<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

__device__ __forceinline__ float rw_exp(float x) { return expf(x); }
__device__ __forceinline__ double rw_exp(double x) { return exp(x); }
// exp inside softmax: for f16/bf16 rows the hardware's approximate exp (a couple of f32 ulps,
// far below the output's rounding; expf's range reduction made those rows compute-bound at 8
// elements per 16-byte chunk); f32 and f64 keep the library function.
template <typename T> __device__ __forceinline__ typename Acc<T>::type rw_exp_of(typename Acc<T>::type x) {
    return rw_exp(x);
}
// On NVIDIA the bare ex2.approx.ftz (one MUFU.EX2 after the multiply; __expf adds four
// instructions of denormal scaling, and results below 2^-126 are far below a 16-bit
// output's resolution next to the row's largest value, which is 1 / sum); elsewhere __expf
// (v_exp_f32 on AMD).
__device__ __forceinline__ float rw_exp_fast(float x) {
#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#else
    return __expf(x);
#endif
}
template <> __device__ __forceinline__ float rw_exp_of<__half>(float x) { return rw_exp_fast(x); }
template <> __device__ __forceinline__ float rw_exp_of<__nv_bfloat16>(float x) { return rw_exp_fast(x); }
__device__ __forceinline__ float rw_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double rw_rsqrt(double x) { return 1.0 / sqrt(x); }
__device__ __forceinline__ float rw_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double rw_max(double a, double b) { return fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// Shuffles over the whole hardware wave (RW_WAVE lanes).
__device__ __forceinline__ unsigned rw_shfl_xor_u32(unsigned v, int mask) {
#if defined(__HIP_DEVICE_COMPILE__)
    int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return (unsigned)__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, (int)v);
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}
__device__ __forceinline__ float rw_shfl_xor(float v, int mask) {
    return __uint_as_float(rw_shfl_xor_u32(__float_as_uint(v), mask));
}
__device__ __forceinline__ unsigned rw_shfl_xor(unsigned v, int mask) {
    return rw_shfl_xor_u32(v, mask);
}
__device__ __forceinline__ double rw_shfl_xor(double v, int mask) {
    unsigned long long b = (unsigned long long)__double_as_longlong(v);
    unsigned lo = rw_shfl_xor_u32((unsigned)b, mask);
    unsigned hi = rw_shfl_xor_u32((unsigned)(b >> 32), mask);
    return __longlong_as_double((long long)(((unsigned long long)hi << 32) | lo));
}

// ---------------------------------------------------------------------------------------------
// Reduction values and their combine operations (commutative and associative).
template <typename A> struct SumV {
    A s;
    __device__ __forceinline__ static SumV empty() { return SumV{(A)0}; }
    __device__ __forceinline__ void add(A x, unsigned) { s += x; }
    __device__ __forceinline__ void merge(const SumV &o) { s += o.s; }
    __device__ __forceinline__ SumV shfl(int m) const { return SumV{rw_shfl_xor(s, m)}; }
};

// Value and index of the first extreme among the non-NaN elements, starting from -inf (max) or
// +inf (min) with i == RW_NONE. A thread adds its elements in increasing index order, so a
// strict comparison keeps the first of equal values (and -0.0 vs 0.0 as the CPU does) and
// never takes a NaN (see the row-start rule in the kernels): one compare and two selects per
// element. i == RW_NONE at the end: no element beat the start value (every non-NaN one is the
// infinity itself), so v is already the answer and the index is the row's first.
template <typename A, bool MAX> struct ExtV {
    A v;
    unsigned i;
    __device__ __forceinline__ static ExtV empty() {
        return ExtV{MAX ? -(A)INFINITY : (A)INFINITY, RW_NONE};
    }
    __device__ __forceinline__ static bool before(A a, A b) { return MAX ? a < b : a > b; }
    __device__ __forceinline__ void add(A x, unsigned j) {
        if (before(v, x)) {
            v = x;
            i = j;
        }
    }
    // The earlier index wins a tie; RW_NONE (the largest unsigned) never does.
    __device__ __forceinline__ void merge(const ExtV &o) {
        if (before(v, o.v) || (!before(o.v, v) && o.i < i)) {
            v = o.v;
            i = o.i;
        }
    }
    __device__ __forceinline__ ExtV shfl(int m) const {
        return ExtV{rw_shfl_xor(v, m), rw_shfl_xor(i, m)};
    }
};

// ExtV for the middle-dim kernels, which keep the explicit NaN and "none yet" tests: there the
// single-compare form measured slower in bf16 (0.59 of copy against 0.78, H100 via
// HIP-on-CUDA, 2026-11-23). Same results as ExtV.
template <typename A, bool MAX> struct ExtCV {
    A v;
    unsigned i;
    __device__ __forceinline__ static ExtCV empty() { return ExtCV{(A)0, RW_NONE}; }
    __device__ __forceinline__ static bool before(A a, A b) { return MAX ? a < b : a > b; }
    __device__ __forceinline__ void add(A x, unsigned j) {
        if (x != x) return; // NaN: never replaces (see the row-start rule in the kernel)
        if (i == RW_NONE || before(v, x)) {
            v = x;
            i = j;
        }
    }
    __device__ __forceinline__ void merge(const ExtCV &o) {
        if (o.i == RW_NONE) return;
        if (i == RW_NONE || before(v, o.v) || (!before(o.v, v) && o.i < i)) {
            v = o.v;
            i = o.i;
        }
    }
};

// Sums of x and x * x (layer norm).
template <typename A> struct Sum2V {
    A s, q;
    __device__ __forceinline__ static Sum2V empty() { return Sum2V{(A)0, (A)0}; }
    __device__ __forceinline__ void merge(const Sum2V &o) {
        s += o.s;
        q += o.q;
    }
    __device__ __forceinline__ Sum2V shfl(int m) const {
        return Sum2V{rw_shfl_xor(s, m), rw_shfl_xor(q, m)};
    }
};

// Running max and sum of exp(x - max) (softmax, streaming path).
template <typename A> struct SoftV {
    A m, s;
    __device__ __forceinline__ static SoftV empty() { return SoftV{(A)-INFINITY, (A)0}; }
    __device__ __forceinline__ void add(A x) {
        if (x > m) {
            s = s * rw_exp(m - x) + (A)1;
            m = x;
        } else if (!(x == (A)-INFINITY && m == (A)-INFINITY)) {
            s += rw_exp(x - m); // NaN x makes the sum NaN, as on the CPU
        }
    }
    __device__ __forceinline__ void merge(const SoftV &o) {
        A M = rw_max(m, o.m);
        A a = s == (A)0 ? (A)0 : s * rw_exp(m - M);
        A b = o.s == (A)0 ? (A)0 : o.s * rw_exp(o.m - M);
        m = M;
        s = a + b;
    }
    __device__ __forceinline__ SoftV shfl(int m_) const {
        return SoftV{rw_shfl_xor(m, m_), rw_shfl_xor(s, m_)};
    }
};

template <typename A> struct MaxV {
    A m;
    __device__ __forceinline__ void merge(const MaxV &o) { m = rw_max(m, o.m); }
    __device__ __forceinline__ MaxV shfl(int k) const { return MaxV{rw_shfl_xor(m, k)}; }
};

// Reduces `v` over the row group of `tpr` lanes; every lane of the group gets the result.
// `smem` holds one V per wave of the block (used only when tpr > RW_WAVE, i.e. one row per
// block); the trailing barrier lets the caller reuse it at once.
template <typename V> __device__ __forceinline__ V group_reduce(V v, unsigned tpr, V *smem) {
    const unsigned lim = tpr < RW_WAVE ? tpr : RW_WAVE;
    for (unsigned m = lim / 2; m > 0; m >>= 1) v.merge(v.shfl((int)m));
    if (tpr > RW_WAVE) {
        const unsigned wave = threadIdx.x / RW_WAVE, nw = blockDim.x / RW_WAVE;
        if (threadIdx.x % RW_WAVE == 0) smem[wave] = v;
        __syncthreads();
        v = smem[0];
        for (unsigned w = 1; w < nw; ++w) v.merge(smem[w]);
        __syncthreads();
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// Chunk loads and stores: chunk c of a row covers elements [c * N, c * N + N).
template <typename T> struct Chunk {
    static constexpr int N = 16 / sizeof(T);
    T e[N];
};

template <typename T>
__device__ __forceinline__ Chunk<T> load_vec(const T *row, size_t c) {
    rw_vec v = reinterpret_cast<const rw_vec *>(row)[c];
    Chunk<T> out;
    __builtin_memcpy(&out, &v, sizeof(out));
    return out;
}

template <typename T>
__device__ __forceinline__ void store_vec(T *row, size_t c, const Chunk<T> &ch) {
    rw_vec v;
    __builtin_memcpy(&v, &ch, sizeof(v));
    reinterpret_cast<rw_vec *>(row)[c] = v;
}

// ---------------------------------------------------------------------------------------------
// Last-dim reductions.
// One group's partial reduction of row base + threadIdx.x / tpr (empty past the last row).
template <typename T, typename V, bool VEC>
__device__ __forceinline__ V row_reduce_body(const T *src, size_t rows, size_t cols,
                                             unsigned tpr, size_t base) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    const unsigned g = threadIdx.x % tpr;
    const size_t row = base + threadIdx.x / tpr;
    V v = V::empty();
    if (row < rows) {
        const T *p = src + row * cols;
        if (VEC) {
            const size_t nc = cols / N;
            size_t c = g;
            // Four independent 16-byte loads in flight per thread.
            for (; c + 3 * (size_t)tpr < nc; c += 4 * (size_t)tpr) {
                Chunk<T> ch[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) ch[u] = load_vec(p, c + u * (size_t)tpr);
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int j = 0; j < N; ++j)
                        v.add(rw_to(ch[u].e[j]), (unsigned)((c + u * (size_t)tpr) * N + j));
            }
            for (; c < nc; c += tpr) {
                Chunk<T> ch = load_vec(p, c);
#pragma unroll
                for (int j = 0; j < N; ++j) v.add(rw_to(ch.e[j]), (unsigned)(c * N + j));
            }
        } else {
            size_t i = g;
            for (; i + 3 * (size_t)tpr < cols; i += 4 * (size_t)tpr) {
                A x[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) x[u] = rw_to(p[i + u * (size_t)tpr]);
#pragma unroll
                for (int u = 0; u < 4; ++u) v.add(x[u], (unsigned)(i + u * (size_t)tpr));
            }
            for (; i < cols; i += tpr) v.add(rw_to(p[i]), (unsigned)i);
        }
    }
    return v;
}

template <typename T, bool VEC>
__device__ __forceinline__ void row_sum(const T *src, T *dst, size_t rows, size_t cols,
                                        unsigned tpr) {
    typedef typename Acc<T>::type A;
    __shared__ SumV<A> smem[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        SumV<A> v = row_reduce_body<T, SumV<A>, VEC>(src, rows, cols, tpr, base);
        v = group_reduce(v, tpr, smem);
        const size_t row = base + threadIdx.x / tpr;
        if (row < rows && threadIdx.x % tpr == 0) dst[row] = rw_from<T>(v.s);
    }
}

template <typename T, bool MAX, bool INDEX, bool VEC, typename D>
__device__ __forceinline__ void row_ext(const T *src, D *dst, size_t rows, size_t cols,
                                        unsigned tpr) {
    typedef typename Acc<T>::type A;
    typedef ExtV<A, MAX> V;
    __shared__ V smem[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        V v = row_reduce_body<T, V, VEC>(src, rows, cols, tpr, base);
        v = group_reduce(v, tpr, smem);
        const size_t row = base + threadIdx.x / tpr;
        if (row < rows && threadIdx.x % tpr == 0) {
            const T first = src[row * cols];
            const A f = rw_to(first);
            // The CPU starts from the first element: a leading NaN is never replaced.
            const bool nan_first = f != f;
            if constexpr (INDEX) {
                dst[row] = nan_first || v.i == RW_NONE ? 0u : v.i;
            } else {
                dst[row] = nan_first ? first : rw_from<T>(v.v);
            }
        }
    }
}

#define RW_REDUCE(T, TN, VEC, SUF)                                                               \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rsum_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_sum<T, VEC>(src, dst, rows, cols, tpr);                                             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rmax_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_ext<T, true, false, VEC, T>(src, dst, rows, cols, tpr);                             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rmin_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_ext<T, false, false, VEC, T>(src, dst, rows, cols, tpr);                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rargmax_##TN##SUF(const T *src, uint32_t *dst, size_t rows, size_t cols, unsigned tpr) { \
        row_ext<T, true, true, VEC, uint32_t>(src, dst, rows, cols, tpr);                       \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rargmin_##TN##SUF(const T *src, uint32_t *dst, size_t rows, size_t cols, unsigned tpr) { \
        row_ext<T, false, true, VEC, uint32_t>(src, dst, rows, cols, tpr);                      \
    }

// ---------------------------------------------------------------------------------------------
// Middle-dim reductions: src is (a, b, c) contiguous, reduced over b. Blocks of (64, 4)
// threads: x along c (coalesced), y splitting b four ways (interleaved, so each thread's b
// indices increase); the four partial results meet in shared memory. One block per 64
// outputs of one `a`, a grid-stride loop over further blocks.
#define RW_CX 64
#define RW_CY 4

template <typename T, typename V, bool EXT, bool INDEX, typename D>
__device__ __forceinline__ void col_reduce(const T *src, D *dst, size_t a, size_t b, size_t c) {
    typedef typename Acc<T>::type A;
    __shared__ V part[RW_CY][RW_CX];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const size_t per_a = (c + RW_CX - 1) / RW_CX, total = per_a * a;
    for (size_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const size_t ai = blk / per_a, ci = (blk - ai * per_a) * RW_CX + tx;
        V v = V::empty();
        if (ci < c) {
            const T *p = src + ai * b * c + ci;
            size_t bi = ty;
            for (; bi + 3 * RW_CY < b; bi += 4 * RW_CY) {
                A x[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) x[u] = rw_to(p[(bi + u * RW_CY) * c]);
#pragma unroll
                for (int u = 0; u < 4; ++u) v.add(x[u], (unsigned)(bi + u * RW_CY));
            }
            for (; bi < b; bi += RW_CY) v.add(rw_to(p[bi * c]), (unsigned)bi);
        }
        part[ty][tx] = v;
        __syncthreads();
        if (ty == 0 && ci < c) {
#pragma unroll
            for (int y = 1; y < RW_CY; ++y) v.merge(part[y][tx]);
            const size_t o = ai * c + ci;
            if constexpr (EXT) {
                const T first = src[ai * b * c + ci];
                const A f = rw_to(first);
                const bool nan_first = f != f; // as for rows: a leading NaN is never replaced
                if constexpr (INDEX) {
                    dst[o] = nan_first || v.i == RW_NONE ? 0u : v.i;
                } else {
                    dst[o] = nan_first ? first : rw_from<T>(v.v);
                }
            } else {
                dst[o] = rw_from<T>(v.s);
            }
        }
        __syncthreads();
    }
}

#define RW_COLS(T, TN)                                                                           \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        csum_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, SumV<Acc<T>::type>, false, false, T>(src, dst, a, b, c);                   \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cmax_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, ExtCV<Acc<T>::type, true>, true, false, T>(src, dst, a, b, c);              \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cmin_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, ExtCV<Acc<T>::type, false>, true, false, T>(src, dst, a, b, c);             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cargmax_##TN(const T *src, uint32_t *dst, size_t a, size_t b, size_t c) {                \
        col_reduce<T, ExtCV<Acc<T>::type, true>, true, true, uint32_t>(src, dst, a, b, c);        \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cargmin_##TN(const T *src, uint32_t *dst, size_t a, size_t b, size_t c) {                \
        col_reduce<T, ExtCV<Acc<T>::type, false>, true, true, uint32_t>(src, dst, a, b, c);       \
    }

// ---------------------------------------------------------------------------------------------
// Fused softmax / RMS norm / layer norm over the last dim.
#define RW_SOFTMAX 0
#define RW_RMS 1
#define RW_LAYER 2

// Loads chunk c of a row into vals[0..N) (the op's neutral value past the row's end).
template <typename T, bool VEC>
__device__ __forceinline__ void load_chunk(const T *p, size_t c, size_t cols,
                                           typename Acc<T>::type *vals,
                                           typename Acc<T>::type pad) {
    constexpr int N = Chunk<T>::N;
    if (VEC) {
        if ((c + 1) * N <= cols) {
            Chunk<T> ch = load_vec(p, c);
#pragma unroll
            for (int j = 0; j < N; ++j) vals[j] = rw_to(ch.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) vals[j] = pad;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const size_t i = c * N + j;
            vals[j] = i < cols ? rw_to(p[i]) : pad;
        }
    }
}

// Writes out[j] = f(vals[j], j-th element index) for chunk c (only inside the row).
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void store_chunk(T *p, size_t c, size_t cols,
                                            const typename Acc<T>::type *vals, F f) {
    constexpr int N = Chunk<T>::N;
    if (VEC) {
        if ((c + 1) * N <= cols) {
            Chunk<T> ch;
#pragma unroll
            for (int j = 0; j < N; ++j) ch.e[j] = rw_from<T>(f(vals[j], c * N + j, j));
            store_vec(p, c, ch);
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const size_t i = c * N + j;
            if (i < cols) p[i] = rw_from<T>(f(vals[j], i, j));
        }
    }
}

// The per-element parameters of chunk c (alpha or beta), VEC-aligned like the rows.
template <typename T, bool VEC>
__device__ __forceinline__ void load_param(const T *p, size_t c, size_t cols,
                                           typename Acc<T>::type *vals) {
    load_chunk<T, VEC>(p, c, cols, vals, (typename Acc<T>::type)0);
}

// The output of the norms for one element: (v - mean) * scale * alpha (+ beta).
template <typename A, int OP> struct NormOut {
    A mean, scale;
    const A *a, *b;
    __device__ __forceinline__ A operator()(A v, size_t, int j) const {
        const A y = (v - mean) * scale * a[j];
        return OP == RW_LAYER ? y + b[j] : y;
    }
};

template <typename T, int OP, int K, bool VEC>
__device__ __forceinline__ void fused_rows(const T *x, T *dst, const T *alpha, const T *beta,
                                           size_t rows, size_t cols, unsigned tpr, float eps_f) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    constexpr int KK = K > 0 ? K : 1;
    const A eps = (A)eps_f;
    const A n = (A)cols;
    const A pad = OP == RW_SOFTMAX ? (A)-INFINITY : (A)0;
    __shared__ Sum2V<A> sm_sum2[RW_BLOCK / 32];
    __shared__ SumV<A> sm_sum[RW_BLOCK / 32];
    __shared__ SoftV<A> sm_soft[RW_BLOCK / 32];
    __shared__ MaxV<A> sm_max[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    const unsigned g = threadIdx.x % tpr;
    const size_t nc = (cols + N - 1) / N;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        const size_t row = base + threadIdx.x / tpr;
        const bool valid = row < rows;
        const T *p = x + (valid ? row : 0) * cols;
        T *q = dst + (valid ? row : 0) * cols;
        // Single pass (K > 0): the row stays in registers between the reduction and the write.
        A vals[KK][N];
        if (K > 0) {
#pragma unroll
            for (int k = 0; k < KK; ++k) {
                const size_t c = g + (size_t)k * tpr;
                if (valid && c < nc) {
                    load_chunk<T, VEC>(p, c, cols, vals[k], pad);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) vals[k][j] = pad;
                }
            }
        }
        if (OP == RW_SOFTMAX) {
            A m, inv;
            if (K > 0) {
                MaxV<A> mv{(A)-INFINITY};
#pragma unroll
                for (int k = 0; k < KK; ++k)
#pragma unroll
                    for (int j = 0; j < N; ++j) mv.m = rw_max(mv.m, vals[k][j]);
                m = group_reduce(mv, tpr, sm_max).m;
                SumV<A> sv = SumV<A>::empty();
#pragma unroll
                for (int k = 0; k < KK; ++k) {
                    const size_t c = g + (size_t)k * tpr;
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        // Padding adds nothing (when m == -inf the row is NaN anyway). On the
                        // vector path padding is whole chunks of -inf, whose exp(-inf - m) is
                        // already 0 (or NaN when m is -inf), so no per-element index test.
                        const A e = VEC || c * N + j < cols ? rw_exp_of<T>(vals[k][j] - m) : (A)0;
                        vals[k][j] = e;
                        sv.s += e;
                    }
                }
                inv = (A)1 / group_reduce(sv, tpr, sm_sum).s;
            } else {
                SoftV<A> sv = SoftV<A>::empty();
                if (valid) {
                    for (size_t c = g; c < nc; c += tpr) {
                        A t[N];
                        load_chunk<T, VEC>(p, c, cols, t, (A)-INFINITY);
#pragma unroll
                        for (int j = 0; j < N; ++j)
                            if (c * N + j < cols) sv.add(t[j]);
                    }
                }
                sv = group_reduce(sv, tpr, sm_soft);
                m = sv.m;
                // With +inf in the row, exp(inf - inf) makes the CPU's sum NaN; the running
                // sum counted that element as exp(0).
                inv = m == (A)INFINITY ? (A)NAN : (A)1 / sv.s;
            }
            if (valid) {
                if (K > 0) {
#pragma unroll
                    for (int k = 0; k < KK; ++k) {
                        const size_t c = g + (size_t)k * tpr;
                        if (c < nc)
                            store_chunk<T, VEC>(q, c, cols, vals[k],
                                                [&](A e, size_t, int) { return e * inv; });
                    }
                } else {
                    for (size_t c = g; c < nc; c += tpr) {
                        A t[N];
                        load_chunk<T, VEC>(p, c, cols, t, (A)-INFINITY);
                        store_chunk<T, VEC>(q, c, cols, t,
                                            [&](A v, size_t, int) { return rw_exp_of<T>(v - m) * inv; });
                    }
                }
            }
        } else {
            Sum2V<A> sv = Sum2V<A>::empty();
            if (K > 0) {
#pragma unroll
                for (int k = 0; k < KK; ++k)
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        sv.s += vals[k][j];
                        sv.q += vals[k][j] * vals[k][j];
                    }
            } else if (valid) {
                for (size_t c = g; c < nc; c += tpr) {
                    A t[N];
                    load_chunk<T, VEC>(p, c, cols, t, (A)0);
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        sv.s += t[j];
                        sv.q += t[j] * t[j];
                    }
                }
            }
            sv = group_reduce(sv, tpr, sm_sum2);
            NormOut<A, OP> f;
            if (OP == RW_RMS) {
                f.mean = (A)0;
                f.scale = rw_rsqrt(sv.q / n + eps);
            } else {
                f.mean = sv.s / n;
                f.scale = rw_rsqrt(sv.q / n - f.mean * f.mean + eps);
            }
            A a[N], b[N];
            f.a = a;
            f.b = b;
            if (valid && K > 0) {
#pragma unroll
                for (int k = 0; k < KK; ++k) {
                    const size_t c = g + (size_t)k * tpr;
                    if (c < nc) {
                        load_param<T, VEC>(alpha, c, cols, a);
                        if (OP == RW_LAYER) load_param<T, VEC>(beta, c, cols, b);
                        store_chunk<T, VEC>(q, c, cols, vals[k], f);
                    }
                }
            } else if (valid) {
                // Two passes: walk the row again.
                for (size_t c = g; c < nc; c += tpr) {
                    A t[N];
                    load_chunk<T, VEC>(p, c, cols, t, (A)0);
                    load_param<T, VEC>(alpha, c, cols, a);
                    if (OP == RW_LAYER) load_param<T, VEC>(beta, c, cols, b);
                    store_chunk<T, VEC>(q, c, cols, t, f);
                }
            }
        }
    }
}

#define RW_FUSED_ONE(NAME, OPC, T, TN, K, VEC, SUF)                                              \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK) NAME##_##TN##_##K##SUF(              \
        const T *x, T *dst, const T *alpha, const T *beta, size_t rows, size_t cols,            \
        unsigned tpr, float eps) {                                                               \
        fused_rows<T, OPC, K, VEC>(x, dst, alpha, beta, rows, cols, tpr, eps);                  \
    }

#define RW_FUSED_K(T, TN, K, VEC, SUF)                                                           \
    RW_FUSED_ONE(rsoftmax, RW_SOFTMAX, T, TN, K, VEC, SUF)                                       \
    RW_FUSED_ONE(rrmsnorm, RW_RMS, T, TN, K, VEC, SUF)                                           \
    RW_FUSED_ONE(rlayernorm, RW_LAYER, T, TN, K, VEC, SUF)

// K * N <= 32 values per thread: K up to 8 for f32 and f64, up to 4 for f16 and bf16.
#define RW_FUSED_4(T, TN, VEC, SUF)                                                              \
    RW_FUSED_K(T, TN, 0, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 1, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 2, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 4, VEC, SUF)
#define RW_FUSED_8(T, TN, VEC, SUF)                                                              \
    RW_FUSED_4(T, TN, VEC, SUF)                                                                  \
    RW_FUSED_K(T, TN, 8, VEC, SUF)

// ---------------------------------------------------------------------------------------------
// Tiled transpose.
#define RW_TILE 32
#define RW_TROWS 8

template <typename T>
__device__ __forceinline__ void transpose(const T *src, T *dst, size_t batches, unsigned r,
                                          unsigned c) {
    __shared__ T tile[RW_TILE][RW_TILE + 1];
    const size_t tr = (r + RW_TILE - 1) / RW_TILE, tc = (c + RW_TILE - 1) / RW_TILE;
    const size_t per = tr * tc, total = per * batches, mat = (size_t)r * c;
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    for (size_t t = blockIdx.x; t < total; t += gridDim.x) {
        const size_t b = t / per, rem = t - b * per;
        const size_t r0 = (rem % tr) * RW_TILE, c0 = (rem / tr) * RW_TILE;
        const T *s = src + b * mat;
        T *d = dst + b * mat;
        // Read: src rows (index c) are contiguous along r.
#pragma unroll
        for (int j = 0; j < RW_TILE; j += RW_TROWS) {
            const size_t cc = c0 + ty + j, rr = r0 + tx;
            if (cc < c && rr < r) tile[ty + j][tx] = s[cc * r + rr];
        }
        __syncthreads();
        // Write: dst rows (index r) are contiguous along c.
#pragma unroll
        for (int j = 0; j < RW_TILE; j += RW_TROWS) {
            const size_t rr = r0 + ty + j, cc = c0 + tx;
            if (cc < c && rr < r) d[rr * c + cc] = tile[tx][ty + j];
        }
        __syncthreads();
    }
}

// 16-bit elements, both dims even and both pointers 4-byte aligned: 64x64 tiles moved as
// 32-bit words (two elements), so a wave's global access is 128 contiguous bytes as in the
// 32-bit transpose instead of 64 (2-byte elements took about 0.6 of the copy bandwidth that
// 4-byte ones reach). Shared memory holds elements with a row pitch of 65: a word read from
// global memory is stored as its two halves, and a word written back is gathered from two
// rows, both without bank conflicts (element 2 t of row y sits in bank t + y / 2).
#define RW_WTILE 64
__device__ __forceinline__ void transpose16_wide(const uint16_t *src, uint16_t *dst, size_t batches,
                                                 unsigned r, unsigned c) {
    __shared__ uint16_t tile[RW_WTILE][RW_WTILE + 1];
    const size_t tr = (r + RW_WTILE - 1) / RW_WTILE, tc = (c + RW_WTILE - 1) / RW_WTILE;
    const size_t per = tr * tc, total = per * batches, mat = (size_t)r * c;
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    for (size_t t = blockIdx.x; t < total; t += gridDim.x) {
        const size_t b = t / per, rem = t - b * per;
        const size_t r0 = (rem % tr) * RW_WTILE, c0 = (rem / tr) * RW_WTILE;
        const uint16_t *s = src + b * mat;
        uint16_t *d = dst + b * mat;
        // Read: src row cc holds elements rr, rr + 1 in one word (r even, so rr < r covers
        // both, and cc * r + rr is even).
#pragma unroll
        for (int j = 0; j < RW_WTILE; j += RW_TROWS) {
            const size_t cc = c0 + ty + j, rr = r0 + 2 * tx;
            if (cc < c && rr < r) {
                const uint32_t w = *reinterpret_cast<const uint32_t *>(s + cc * r + rr);
                tile[ty + j][2 * tx] = (uint16_t)(w & 0xffffu);
                tile[ty + j][2 * tx + 1] = (uint16_t)(w >> 16);
            }
        }
        __syncthreads();
        // Write: dst row rr takes elements cc, cc + 1 from tile rows 2 tx and 2 tx + 1.
#pragma unroll
        for (int j = 0; j < RW_WTILE; j += RW_TROWS) {
            const size_t rr = r0 + ty + j, cc = c0 + 2 * tx;
            if (rr < r && cc < c) {
                const uint32_t w = (uint32_t)tile[2 * tx][ty + j] | ((uint32_t)tile[2 * tx + 1][ty + j] << 16);
                *reinterpret_cast<uint32_t *>(d + rr * c + cc) = w;
            }
        }
        __syncthreads();
    }
}

#define RW_TRANSPOSE(T, TN)                                                                      \
    extern "C" __global__ void __launch_bounds__(RW_TILE * RW_TROWS)                            \
        rtranspose_##TN(const T *src, T *dst, size_t batches, unsigned r, unsigned c) {         \
        transpose<T>(src, dst, batches, r, c);                                                   \
    }

// rtranspose_u16 takes the word path when it can (the test is uniform over the grid).
extern "C" __global__ void __launch_bounds__(RW_TILE * RW_TROWS)
    rtranspose_u16(const uint16_t *src, uint16_t *dst, size_t batches, unsigned r, unsigned c) {
    if (((r | c) & 1u) == 0 && (((uintptr_t)src | (uintptr_t)dst) & 3u) == 0)
        transpose16_wide(src, dst, batches, r, c);
    else
        transpose<uint16_t>(src, dst, batches, r, c);
}

// ---------------------------------------------------------------------------------------------
// Rotary embeddings (vector path; see the header).

// a op b rounded to T (exact for f32 and f64 apart from their own rounding).
template <typename T> __device__ __forceinline__ typename Acc<T>::type rw_round(typename Acc<T>::type v) {
    return rw_to(rw_from<T>(v));
}

template <typename T, bool INTERLEAVED>
__device__ __forceinline__ void rope_vec(const T *x, const T *cos, const T *sin, T *dst, unsigned rows,
                                         unsigned t, unsigned d, unsigned rows_per_b) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    const unsigned half = d / 2;
    // Packs per row: N outputs of each half (rope) or N consecutive outputs (rope_i). 32-bit
    // indices: the host launches these only when rows * d < 2^31 (candle's kernels index
    // with int), so p plus the grid's stride (at most 2^28) does not wrap.
    const unsigned ppr = INTERLEAVED ? d / N : half / N;
    const unsigned total = rows * ppr;
    for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < total; p += gridDim.x * blockDim.x) {
        const unsigned row = p / ppr, q = p - row * ppr;
        unsigned cs_row = row % t;
        if (rows_per_b != 0) cs_row += (row / rows_per_b) * t;
        const T *xr = x + (size_t)row * d;
        T *dr = dst + (size_t)row * d;
        const T *cr = cos + (size_t)cs_row * half, *sr = sin + (size_t)cs_row * half;
        if (!INTERLEAVED) {
            // Outputs j .. j + N of both halves, j = q N: cos/sin entries j .. j + N.
            const unsigned j = q * N;
            const Chunk<T> a = load_vec(xr + j, 0), b = load_vec(xr + half + j, 0);
            const Chunk<T> c = load_vec(cr + j, 0), s = load_vec(sr + j, 0);
            Chunk<T> o1, o2;
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const A x1 = rw_to(a.e[e]), x2 = rw_to(b.e[e]), cv = rw_to(c.e[e]), sv = rw_to(s.e[e]);
                o1.e[e] = rw_from<T>(rw_round<T>(x1 * cv) - rw_round<T>(x2 * sv));
                o2.e[e] = rw_from<T>(rw_round<T>(x1 * sv) + rw_round<T>(x2 * cv));
            }
            store_vec(dr + j, 0, o1);
            store_vec(dr + half + j, 0, o2);
        } else {
            // Outputs q N .. q N + N: pairs q N / 2 .. + N / 2, whose cos/sin entries are half a
            // chunk (8-byte aligned: N / 2 entries of sizeof(T) = 8 bytes).
            const unsigned j = q * N;
            const Chunk<T> a = load_vec(xr + j, 0);
            T c[N / 2], s[N / 2];
            __builtin_memcpy(c, cr + j / 2, sizeof(c));
            __builtin_memcpy(s, sr + j / 2, sizeof(s));
            Chunk<T> o;
#pragma unroll
            for (int e = 0; e < N / 2; ++e) {
                const A x1 = rw_to(a.e[2 * e]), x2 = rw_to(a.e[2 * e + 1]);
                const A cv = rw_to(c[e]), sv = rw_to(s[e]);
                o.e[2 * e] = rw_from<T>(rw_round<T>(x1 * cv) - rw_round<T>(x2 * sv));
                o.e[2 * e + 1] = rw_from<T>(rw_round<T>(x1 * sv) + rw_round<T>(x2 * cv));
            }
            store_vec(dr + j, 0, o);
        }
    }
}

#define RW_ROPE(T, TN)                                                                           \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rrope_##TN(const T *x, const T *cos, const T *sin, T *dst, unsigned rows, unsigned t,   \
                   unsigned d, unsigned rows_per_b) {                                            \
        rope_vec<T, false>(x, cos, sin, dst, rows, t, d, rows_per_b);                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rropei_##TN(const T *x, const T *cos, const T *sin, T *dst, unsigned rows, unsigned t,  \
                    unsigned d, unsigned rows_per_b) {                                           \
        rope_vec<T, true>(x, cos, sin, dst, rows, t, d, rows_per_b);                             \
    }

#define RW_ALL(T, TN, KMAX)                                                                      \
    RW_COLS(T, TN)                                                                               \
    RW_REDUCE(T, TN, false, )                                                                    \
    RW_REDUCE(T, TN, true, _v)                                                                   \
    RW_FUSED_##KMAX(T, TN, false, )                                                              \
    RW_FUSED_##KMAX(T, TN, true, _v)                                                             \
    RW_ROPE(T, TN)

RW_ALL(float, f32, 8)
RW_ALL(double, f64, 8)
RW_ALL(__half, f16, 4)
RW_ALL(__nv_bfloat16, bf16, 4)

RW_TRANSPOSE(uint8_t, u8)
RW_TRANSPOSE(uint32_t, u32)
RW_TRANSPOSE(uint64_t, u64)
