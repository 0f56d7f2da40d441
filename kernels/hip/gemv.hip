// gemv.hip - skinny matrix products at the memory-bandwidth limit: y = x w^T for up to 8 rows
// of x, the shape of every linear layer while a model decodes (one token per sequence) and of
// attention's q k^T, and (gemv_nn, below) y = x w, the shape of attention's att v. f32, f16 and
// bf16, accumulated in f32.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus a few AMD builtins
// behind __HIP_DEVICE_COMPILE__, so the same file builds for AMD (clang, kernels/include
// headers) and for the HIP-on-CUDA harness (nvcc with CUDA's own headers).
//
// Operands (one batch entry; entry z adds z * stride_* elements to each pointer):
//   w: n rows of k elements, row r at w + r * ldw (a Linear layer's weight, or k of attention);
//   x: M rows of k elements, row i at x + i * ldx;
//   y: M rows of n elements, row i at y + i * n, y[i][r] = sum_j x[i][j] * w[r][j] rounded to T.
// Every product and sum in f32, one rounding to T at the end (as rocBLAS and cuBLAS compute
// f16/bf16 products with f32 accumulation).
//
// Work split. gpr (groups per row: 1, 2, 4 or 8, chosen by the host) groups of GV_GROUP (32)
// lanes compute one output row r for all M rows of x: lane l of the row's group g takes the
// 16-byte chunks 32 g + l, 32 g + l + 32 gpr, ... of w's row (N = 16 / sizeof(T) elements each)
// and the same chunks of every x row, so neighbouring lanes read neighbouring chunks and one
// pass over w serves all M rows. Each group's M partial sums are reduced with xor shuffles
// inside its 32 lanes (ds_bpermute on AMD, so a wave of 64 holds two independent groups; the
// wave size GV_WAVE is a compile-time constant, 32 or 64, and nothing assumes either), then,
// with gpr > 1, the row's groups add their parts through shared memory in group order. A block
// of GV_BLOCK (256) threads has 8 groups, so 8 / gpr rows: more groups per row for a matrix of
// few rows (a 2048-row weight is 256 blocks at gpr 1, too few to fill a large GPU evenly).
// Blocks visit rows with a block-uniform grid-stride loop and batch entries along grid y; a row
// past n is computed from row n - 1 (so every lane reaches every shuffle and barrier) and not
// written.
//
// Vector path (suffix _v): 16-byte loads of w and x. The host takes it only when w, x, ldw,
// ldx, the batch strides and k are all multiples of N elements and both base pointers are
// 16-byte aligned; otherwise the scalar path reads one element per lane step.
//
// Kernels (T in f32, f16, bf16; M in 1..8):
//   gemv_<T>_<M>(const T* w, const T* x, T* y, uint32_t n, uint32_t k, uint32_t ldw,
//                uint32_t ldx, uint64_t stride_w, uint64_t stride_x, uint64_t stride_y,
//                uint32_t gpr)
//   gemv_<T>_<M>_v(same)
// Launch with blockDim (GV_BLOCK, 1, 1), gpr in 1, 2, 4, 8, any grid x, grid y = batch entries
// (candle-rocm: min(ceil(n gpr / 8), 65535) x batch).
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

#if defined(__HIP_DEVICE_COMPILE__)
#define GV_WAVE __AMDGCN_WAVEFRONT_SIZE__
typedef unsigned int gv_vec __attribute__((ext_vector_type(4)));
#else
#define GV_WAVE 32
typedef uint4 gv_vec;
#endif

#define GV_GROUP 32
#define GV_BLOCK 256
#define GV_ROWS (GV_BLOCK / GV_GROUP)
// 16-byte chunks of w a lane loads before using them (a tuning knob).
#ifndef GV_UNROLL
#define GV_UNROLL 4
#endif

#if GV_WAVE % GV_GROUP != 0
#error "the wave size must be a multiple of the row group"
#endif

__device__ __forceinline__ float gv_to(float v) { return v; }
__device__ __forceinline__ float gv_to(__half v) { return __half2float(v); }
__device__ __forceinline__ float gv_to(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T gv_from(float v);
template <> __device__ __forceinline__ float gv_from<float>(float v) { return v; }
template <> __device__ __forceinline__ __half gv_from<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 gv_from<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

// xor shuffle inside the wave (masks below GV_GROUP keep it inside the 32-lane group).
__device__ __forceinline__ float gv_shfl_xor(float v, int mask) {
#if defined(__HIP_DEVICE_COMPILE__)
    int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return __int_as_float(__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __float_as_int(v)));
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

template <typename T> struct GvChunk {
    static constexpr int N = 16 / sizeof(T);
    T e[N];
};

template <typename T> __device__ __forceinline__ GvChunk<T> gv_load(const T *p) {
    gv_vec v = *reinterpret_cast<const gv_vec *>(p);
    GvChunk<T> out;
    __builtin_memcpy(&out, &v, sizeof(out));
    return out;
}

// acc[i] += chunk c of x's row i times the w chunk `wc`, for the M rows.
template <typename T, int M>
__device__ __forceinline__ void gv_chunk_fma(const GvChunk<T> &wc, const T *x, uint32_t ldx,
                                             uint32_t c, float (&acc)[M]) {
    constexpr int N = GvChunk<T>::N;
    float wf[N];
#pragma unroll
    for (int e = 0; e < N; e++) wf[e] = gv_to(wc.e[e]);
#pragma unroll
    for (int i = 0; i < M; i++) {
        const GvChunk<T> xc = gv_load(x + (uint64_t)i * ldx + (uint64_t)c * N);
#pragma unroll
        for (int e = 0; e < N; e++) acc[i] = fmaf(gv_to(xc.e[e]), wf[e], acc[i]);
    }
}

template <typename T, int M, bool VEC>
__device__ __forceinline__ void gemv(const T *w, const T *x, T *y, uint32_t n, uint32_t k,
                                     uint32_t ldw, uint32_t ldx, uint64_t stride_w,
                                     uint64_t stride_x, uint64_t stride_y, uint32_t gpr) {
    __shared__ float part[GV_BLOCK / GV_GROUP][M];
    const uint64_t z = blockIdx.y;
    w += z * stride_w;
    x += z * stride_x;
    y += z * stride_y;
    const uint32_t lane = threadIdx.x % GV_GROUP;
    const uint32_t group = threadIdx.x / GV_GROUP;
    const uint32_t rows_per_block = GV_BLOCK / GV_GROUP / gpr;
    const uint32_t slice = group % gpr;             // which part of the row's k this group takes
    const uint32_t first = slice * GV_GROUP + lane; // its first chunk (element on the scalar path)
    const uint32_t stride = gpr * GV_GROUP;
    for (uint32_t base = blockIdx.x * rows_per_block; base < n; base += gridDim.x * rows_per_block) {
        const uint32_t r = base + group / gpr;
        const uint32_t row = r < n ? r : n - 1;
        const T *wr = w + (uint64_t)row * ldw;
        float acc[M];
#pragma unroll
        for (int i = 0; i < M; i++) acc[i] = 0.0f;
        if (VEC) {
            const uint32_t chunks = k / GvChunk<T>::N;
            uint32_t c = first;
            // GV_UNROLL chunks of w in flight per lane, loaded before any is used.
            for (; c + (GV_UNROLL - 1) * stride < chunks; c += GV_UNROLL * stride) {
                GvChunk<T> wc[GV_UNROLL];
#pragma unroll
                for (int u = 0; u < GV_UNROLL; u++) wc[u] = gv_load(wr + (uint64_t)(c + u * stride) * GvChunk<T>::N);
#pragma unroll
                for (int u = 0; u < GV_UNROLL; u++) gv_chunk_fma<T, M>(wc[u], x, ldx, c + u * stride, acc);
            }
            for (; c < chunks; c += stride) gv_chunk_fma<T, M>(gv_load(wr + (uint64_t)c * GvChunk<T>::N), x, ldx, c, acc);
        } else {
#pragma unroll 4
            for (uint32_t j = first; j < k; j += stride) {
                const float wf = gv_to(wr[j]);
#pragma unroll
                for (int i = 0; i < M; i++) acc[i] = fmaf(gv_to(x[(uint64_t)i * ldx + j]), wf, acc[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < M; i++) {
#pragma unroll
            for (int mask = GV_GROUP / 2; mask > 0; mask >>= 1) acc[i] += gv_shfl_xor(acc[i], mask);
        }
        if (gpr == 1) {
            if (lane == 0 && r < n) {
#pragma unroll
                for (int i = 0; i < M; i++) y[(uint64_t)i * n + r] = gv_from<T>(acc[i]);
            }
        } else {
            // The row's gpr groups meet in shared memory; its first group adds the parts in
            // slice order (the same order on every run).
            if (lane == 0) {
#pragma unroll
                for (int i = 0; i < M; i++) part[group][i] = acc[i];
            }
            __syncthreads();
            if (slice == 0 && lane == 0 && r < n) {
#pragma unroll
                for (int i = 0; i < M; i++) {
                    float s = part[group][i];
                    for (uint32_t g = 1; g < gpr; g++) s += part[group + g][i];
                    y[(uint64_t)i * n + r] = gv_from<T>(s);
                }
            }
            __syncthreads();
        }
    }
}

#define GV_ONE(T, TN, M, VEC, SUF)                                                               \
    extern "C" __global__ void __launch_bounds__(GV_BLOCK)                                       \
        gemv_##TN##_##M##SUF(const T *w, const T *x, T *y, uint32_t n, uint32_t k, uint32_t ldw, \
                             uint32_t ldx, uint64_t stride_w, uint64_t stride_x,                 \
                             uint64_t stride_y, uint32_t gpr) {                                  \
        gemv<T, M, VEC>(w, x, y, n, k, ldw, ldx, stride_w, stride_x, stride_y, gpr);             \
    }
#define GV_M(T, TN, VEC, SUF)                                                                    \
    GV_ONE(T, TN, 1, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 2, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 3, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 4, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 5, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 6, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 7, VEC, SUF)                                                                   \
    GV_ONE(T, TN, 8, VEC, SUF)
#define GV_T(T, TN)                                                                              \
    GV_M(T, TN, false, )                                                                         \
    GV_M(T, TN, true, _v)

GV_T(float, f32)
GV_T(__half, f16)
GV_T(__nv_bfloat16, bf16)

// ---------------------------------------------------------------------------------------------
// gemv_nn - the other orientation: y = x w for up to 8 rows of x, with w row-major (k, n): the
// shape of attention's att v while a model decodes (att: the softmax weights over k = the
// sequence, v: k rows of n = head_dim elements), and of any product whose rhs is not transposed.
//
// Operands (one batch entry; entry z adds z * stride_* elements to each pointer):
//   w: k rows of n elements, row j at w + j * ldw (attention's v, one head per batch entry);
//   x: M rows of k elements, row i at x + i * ldx;
//   y: M rows of n elements, row i at y + i * n, y[i][c] = sum_j x[i][j] * w[j][c] rounded to T.
// Every product and sum in f32, one rounding to T at the end.
//
// Work split. A block of GV_BLOCK (256) threads computes a tile of columns for all M rows of x:
// `lanes` (1, 2, 4, ..., 256, chosen by the host) lanes along n, each owning E consecutive
// columns (E = 16 / sizeof(T) on the vector path, 1 on the scalar path), and GV_BLOCK / lanes
// groups along k: group g sums the rows j = g, g + groups, g + 2 groups, ... of w, so one step
// of the block reads `groups` consecutive rows of the tile (contiguous memory when ldw = n) and
// neighbouring lanes read neighbouring columns. x[i][j] is one broadcast load per group. The
// groups' partial sums then meet in shared memory, one row of x at a time, and are added in
// group order (the same order on every run and for either wave size: nothing here depends on
// the wave, which may be 32 or 64). Blocks visit tiles with a block-uniform grid-stride loop and
// batch entries along grid y; a lane past n computes nothing and writes nothing, but reaches
// every barrier.
//
// Vector path (suffix _v): 16-byte loads of w. The host takes it only when w, ldw and stride_w
// are multiples of E elements from a 16-byte aligned base; a lane whose E columns run past n
// (n not a multiple of E) loads its columns one at a time. x is read element by element on
// both paths (no alignment needed), y written element by element.
//
// Kernels (T in f32, f16, bf16; M in 1..8):
//   gemv_nn_<T>_<M>(const T* w, const T* x, T* y, uint32_t n, uint32_t k, uint32_t ldw,
//                   uint32_t ldx, uint64_t stride_w, uint64_t stride_x, uint64_t stride_y,
//                   uint32_t lanes)
//   gemv_nn_<T>_<M>_v(same)
// Launch with blockDim (GV_BLOCK, 1, 1), lanes a power of two up to GV_BLOCK, any grid x, grid
// y = batch entries (candle-rocm: min(ceil(ceil(n / E) / lanes), 65535) x batch).

// The E columns of w's row at p, as floats: one 16-byte load when VEC and all E are inside the
// row (`valid` = E), otherwise one element at a time, zeros past `valid`.
template <typename T, int E, bool VEC>
__device__ __forceinline__ void gn_load(const T *p, uint32_t valid, float (&wf)[E]) {
    if (VEC && valid >= (uint32_t)E) {
        const GvChunk<T> c = gv_load(p);
#pragma unroll
        for (int e = 0; e < E; e++) wf[e] = gv_to(c.e[e]);
    } else {
#pragma unroll
        for (int e = 0; e < E; e++) wf[e] = (uint32_t)e < valid ? gv_to(p[e]) : 0.0f;
    }
}

// acc[i][e] += x[i][j] * wf[e] for the M rows of x.
template <typename T, int M, int E>
__device__ __forceinline__ void gn_fma(const float (&wf)[E], const T *x, uint32_t ldx, uint64_t j,
                                       float (&acc)[M][E]) {
#pragma unroll
    for (int i = 0; i < M; i++) {
        const float xv = gv_to(x[(uint64_t)i * ldx + j]);
#pragma unroll
        for (int e = 0; e < E; e++) acc[i][e] = fmaf(xv, wf[e], acc[i][e]);
    }
}

template <typename T, int M, bool VEC>
__device__ __forceinline__ void gemv_nn(const T *w, const T *x, T *y, uint32_t n, uint32_t k,
                                        uint32_t ldw, uint32_t ldx, uint64_t stride_w,
                                        uint64_t stride_x, uint64_t stride_y, uint32_t lanes) {
    constexpr int E = VEC ? GvChunk<T>::N : 1;
    __shared__ float part[GV_BLOCK * E];
    const uint64_t z = blockIdx.y;
    w += z * stride_w;
    x += z * stride_x;
    y += z * stride_y;
    const uint32_t lane = threadIdx.x % lanes;
    const uint32_t group = threadIdx.x / lanes;
    const uint32_t groups = GV_BLOCK / lanes;
    const uint64_t units = ((uint64_t)n + E - 1) / E; // E-column units of a row
    for (uint64_t tile = blockIdx.x; tile * lanes < units; tile += gridDim.x) {
        const uint64_t col = (tile * lanes + lane) * E; // this lane's first column
        const uint32_t valid = col < n ? (uint32_t)((uint64_t)n - col < (uint64_t)E ? n - col : E) : 0;
        float acc[M][E];
#pragma unroll
        for (int i = 0; i < M; i++)
#pragma unroll
            for (int e = 0; e < E; e++) acc[i][e] = 0.0f;
        if (valid > 0) {
            const T *wc = w + col;
            uint64_t j = group;
            // GV_UNROLL rows of w in flight per lane, loaded before any is used.
            for (; j + (uint64_t)(GV_UNROLL - 1) * groups < k; j += (uint64_t)GV_UNROLL * groups) {
                float wf[GV_UNROLL][E];
#pragma unroll
                for (int u = 0; u < GV_UNROLL; u++)
                    gn_load<T, E, VEC>(wc + (j + (uint64_t)u * groups) * ldw, valid, wf[u]);
#pragma unroll
                for (int u = 0; u < GV_UNROLL; u++) gn_fma<T, M, E>(wf[u], x, ldx, j + (uint64_t)u * groups, acc);
            }
            for (; j < k; j += groups) {
                float wf[E];
                gn_load<T, E, VEC>(wc + j * ldw, valid, wf);
                gn_fma<T, M, E>(wf, x, ldx, j, acc);
            }
        }
        // The groups' sums for one row of x at a time: thread t's E values at part[t E ..],
        // (t = group * lanes + lane), then output o of the tile (lane o / E, column o % E of
        // it) adds groups 0, 1, ... in order.
        const uint64_t tile_col = tile * lanes * E;
#pragma unroll
        for (int i = 0; i < M; i++) {
#pragma unroll
            for (int e = 0; e < E; e++) part[threadIdx.x * E + e] = acc[i][e];
            __syncthreads();
            for (uint32_t o = threadIdx.x; o < lanes * E; o += GV_BLOCK) {
                const uint64_t c = tile_col + o;
                if (c < n) {
                    float s = part[o];
                    for (uint32_t g = 1; g < groups; g++) s += part[g * lanes * E + o];
                    y[(uint64_t)i * n + c] = gv_from<T>(s);
                }
            }
            __syncthreads();
        }
    }
}

#define GN_ONE(T, TN, M, VEC, SUF)                                                                  \
    extern "C" __global__ void __launch_bounds__(GV_BLOCK)                                          \
        gemv_nn_##TN##_##M##SUF(const T *w, const T *x, T *y, uint32_t n, uint32_t k, uint32_t ldw, \
                                uint32_t ldx, uint64_t stride_w, uint64_t stride_x,                 \
                                uint64_t stride_y, uint32_t lanes) {                                \
        gemv_nn<T, M, VEC>(w, x, y, n, k, ldw, ldx, stride_w, stride_x, stride_y, lanes);           \
    }
#define GN_M(T, TN, VEC, SUF)                                                                       \
    GN_ONE(T, TN, 1, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 2, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 3, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 4, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 5, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 6, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 7, VEC, SUF)                                                                      \
    GN_ONE(T, TN, 8, VEC, SUF)
#define GN_T(T, TN)                                                                                 \
    GN_M(T, TN, false, )                                                                            \
    GN_M(T, TN, true, _v)

GN_T(float, f32)
GN_T(__half, f16)
GN_T(__nv_bfloat16, bf16)
