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
//     none; never null where it has them).
//   raddrmsnorm_<T>_<K>   same signature: beta is a residual laid out as x; dst holds 2 rows
//     cols elements: x + beta rounded to T, then its RMS norm scaled by alpha (one read of
//     each operand, the residual stream's add and the next norm in one launch). K = 1, 2, 4 (and 8 for f32, f64): each thread
//     keeps K chunks of N elements in registers, at most 32 values (one read, one write; rows
//     up to 256 * K * N elements: 8192 for f32/f16/bf16, 4096 for f64); K = 0: two passes
//     over the row for longer rows. Suffix _v for the vector path.
//   rswiglu_<T>(const T* x, T* dst, size_t rows, size_t h)  SwiGLU's gate of candle-nn's
//     `swiglu`: x is `rows` contiguous rows of 2 h elements (gate, then up), dst rows of h:
//     silu(gate) * up. _v: N outputs a thread (h % N == 0, both pointers 16-byte aligned).
//     Blocks of RW_BLOCK threads, any grid (grid-stride).
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
//   rrope_cache_<T>(RopeCacheArgs a, const T* q, const T* k, const T* v, const T* cos,
//                   const T* sin, T* q_out, T* k_cache, T* v_cache)
//     One step of a decoder's attention before the scores, in one launch (flash-attention's
//     `flash_attn_with_kvcache` append): the rotary embedding of q and of the new keys, and the
//     new keys and values written into the KV caches in place. q, k and v are (batch, seq,
//     heads, d) with any batch and token strides (heads d apart, elements contiguous: views of
//     a stacked q|k|v product qualify); q_out is contiguous (batch, seq, heads, d); token t of
//     batch entry b goes to cache position pos + t (cache strides by batch, position and head,
//     elements contiguous) and uses cos/sin table row pos + t (d / 2 values a row). a.mode:
//     0 no rotation (q_out not written; k copied), 1 candle-nn's `rope` (halves), 2 `rope_i`
//     (adjacent pairs), with `rrope`'s rounding. One thread per pair of elements, blocks of
//     RW_BLOCK, grid-stride; the host keeps batch * seq * (heads + 2 kv_heads) * d / 2 below
//     2^31.
//   rgnorm_stats_<T>, rgnorm_<T>: group normalisation in two launches (see rows/group_norm.h).
//   rrope_cache_f32h(same, with __half* k_cache, __half* v_cache): T = f32 with caches in f16
//     (each cached value the f32 result rounded to f16).
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

#include "rows/common.h"
#include "rows/reduce.h"
#include "rows/fused.h"
#include "rows/group_norm.h"

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

// ---------------------------------------------------------------------------------------------
// SwiGLU's gate (see the header): out[r][i] = silu(x[r][i]) * x[r][h + i], each product
// rounded to T as candle's silu and mul round. Vector path: N consecutive outputs a thread.
template <typename T, bool VEC>
__device__ __forceinline__ void swiglu_rows(const T *x, T *dst, size_t rows, size_t h) {
    typedef typename Acc<T>::type A;
    constexpr int N = VEC ? Chunk<T>::N : 1;
    const size_t per_row = h / N, total = rows * per_row;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / per_row, j = (i - r * per_row) * N;
        const T *a = x + r * 2 * h + j, *b = a + h;
        T *o = dst + r * h + j;
        A av[N], bv[N];
        if (VEC) {
            const Chunk<T> ca = load_vec(a, 0), cb = load_vec(b, 0);
#pragma unroll
            for (int e = 0; e < N; ++e) av[e] = rw_to(ca.e[e]), bv[e] = rw_to(cb.e[e]);
        } else {
            av[0] = rw_to(a[0]);
            bv[0] = rw_to(b[0]);
        }
        Chunk<T> out;
#pragma unroll
        for (int e = 0; e < N; ++e) {
            const A g = rw_round<T>(av[e] / ((A)1 + rw_exp(-av[e])));
            out.e[e] = rw_from<T>(g * bv[e]);
        }
        if (VEC) {
            store_vec(o, 0, out);
        } else {
            o[0] = out.e[0];
        }
    }
}

#define RW_SWIGLU(T, TN)                                                                         \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rswiglu_##TN(const T *x, T *dst, size_t rows, size_t h) {                                \
        swiglu_rows<T, false>(x, dst, rows, h);                                                  \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rswiglu_##TN##_v(const T *x, T *dst, size_t rows, size_t h) {                            \
        swiglu_rows<T, true>(x, dst, rows, h);                                                   \
    }

// ---------------------------------------------------------------------------------------------
// Rotary embedding with the KV-cache append (see the header).
struct RopeCacheArgs {
    uint64_t q_b, q_t, k_b, k_t, v_b, v_t;
    uint64_t kc_b, kc_t, kc_h, vc_b, vc_t, vc_h;
    uint32_t batch, seq, heads, kv_heads, d, pos, mode, pad;
};
static_assert(sizeof(RopeCacheArgs) == 128, "RopeCacheArgs must match candle-rocm's layout");

// T: q, k, v, the tables and q_out; C: the caches (T, or f16 under f32 activations: each
// value rounded to T first, as an f32 rotation followed by a cast computes it).
template <typename T, typename C>
__device__ __forceinline__ void rope_cache(const RopeCacheArgs &a, const T *q, const T *k, const T *v,
                                           const T *cos, const T *sin, T *q_out, C *k_cache, C *v_cache) {
    typedef typename Acc<T>::type A;
    const unsigned half = a.d / 2, slots = a.heads + 2 * a.kv_heads;
    const unsigned per_token = slots * half, total = a.batch * a.seq * per_token;
    for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < total; p += gridDim.x * blockDim.x) {
        const unsigned bt = p / per_token, rem = p - bt * per_token;
        const unsigned hs = rem / half, i = rem - hs * half;
        const unsigned b = bt / a.seq, t = bt - b * a.seq;
        const T *src;
        T *qdst = nullptr;
        C *cdst = nullptr;
        bool rotate = a.mode != 0;
        if (hs < a.heads) {
            if (!rotate) continue;
            src = q + b * a.q_b + t * a.q_t + (size_t)hs * a.d;
            qdst = q_out + ((size_t)bt * a.heads + hs) * a.d;
        } else if (hs < a.heads + a.kv_heads) {
            const unsigned h = hs - a.heads;
            src = k + b * a.k_b + t * a.k_t + (size_t)h * a.d;
            cdst = k_cache + b * a.kc_b + (uint64_t)(a.pos + t) * a.kc_t + h * a.kc_h;
        } else {
            const unsigned h = hs - a.heads - a.kv_heads;
            src = v + b * a.v_b + t * a.v_t + (size_t)h * a.d;
            cdst = v_cache + b * a.vc_b + (uint64_t)(a.pos + t) * a.vc_t + h * a.vc_h;
            rotate = false;
        }
        // The pair: (i, i + d / 2) for rope, (2 i, 2 i + 1) for rope_i and plain copies.
        const unsigned e1 = a.mode == 1 ? i : 2 * i, e2 = a.mode == 1 ? i + half : 2 * i + 1;
        T y1 = src[e1], y2 = src[e2];
        if (rotate) {
            const size_t row = (size_t)(a.pos + t) * half + i;
            const A x1 = rw_to(y1), x2 = rw_to(y2), cv = rw_to(cos[row]), sv = rw_to(sin[row]);
            y1 = rw_from<T>(rw_round<T>(x1 * cv) - rw_round<T>(x2 * sv));
            y2 = rw_from<T>(rw_round<T>(x1 * sv) + rw_round<T>(x2 * cv));
        }
        if (qdst) {
            qdst[e1] = y1;
            qdst[e2] = y2;
        } else {
            cdst[e1] = rw_from<C>(rw_to(y1));
            cdst[e2] = rw_from<C>(rw_to(y2));
        }
    }
}

#define RW_ROPE_CACHE(T, TN)                                                                     \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rrope_cache_##TN(RopeCacheArgs a, const T *q, const T *k, const T *v, const T *cos,     \
                         const T *sin, T *q_out, T *k_cache, T *v_cache) {                       \
        rope_cache<T, T>(a, q, k, v, cos, sin, q_out, k_cache, v_cache);                         \
    }

#define RW_ALL(T, TN, KMAX)                                                                      \
    RW_COLS(T, TN)                                                                               \
    RW_REDUCE(T, TN, false, )                                                                    \
    RW_REDUCE(T, TN, true, _v)                                                                   \
    RW_FUSED_##KMAX(T, TN, false, )                                                              \
    RW_FUSED_##KMAX(T, TN, true, _v)                                                             \
    RW_ROPE(T, TN)                                                                               \
    RW_ROPE_CACHE(T, TN)                                                                         \
    RW_SWIGLU(T, TN)                                                                             \
    RW_GNORM(T, TN)

RW_ALL(float, f32, 8)
RW_ALL(double, f64, 8)
RW_ALL(__half, f16, 4)
RW_ALL(__nv_bfloat16, bf16, 4)

// f32 activations over an f16 KV cache (the GGUF decoders' flash path).
extern "C" __global__ void __launch_bounds__(RW_BLOCK)
    rrope_cache_f32h(RopeCacheArgs a, const float *q, const float *k, const float *v, const float *cos,
                     const float *sin, float *q_out, __half *k_cache, __half *v_cache) {
    rope_cache<float, __half>(a, q, k, v, cos, sin, q_out, k_cache, v_cache);
}

RW_TRANSPOSE(uint8_t, u8)
RW_TRANSPOSE(uint32_t, u32)
RW_TRANSPOSE(uint64_t, u64)
