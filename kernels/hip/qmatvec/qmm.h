// qmatvec/qmm.h - part of qmatvec.hip (see its header for layouts, work split and alignment),
// included by it in order, never on its own: the shared-memory tiled products `qmm_<T>_m<MT>`
// and `qmm_reduce`, which the 8-bit tiles share.

// =============================================================================================
// Quantized matrix-matrix products for a few to some tens of activation rows (candle-rocm's
// `qmatmul` path, between the mat-vec's row limit and the f16 GEMM), x and the math in f32:
//   qmm_<T>_m<MT>(const uint8_t *w, const float *x, float *y, unsigned n, unsigned k,
//                 unsigned m, unsigned cps)
//     Y (m, n) = X (m, k) W^T over the k range [32 cps z, min(32 cps (z + 1), k)) of slice
//     z = blockIdx.z, written to y + z m n (so with one slice, y is Y; with several, candle-rocm
//     adds the slices with qmm_reduce). w: n rows of k values as blocks of type T (2-byte
//     aligned, as qmv_dequantize_<T>_f16 reads them); x: m rows of k floats, 16-byte aligned;
//     k a multiple of 32 (of 256 for the k-quants, as the blocks need). Launch with QMM_BLOCK
//     threads and grid (ceil(n / QMM_TN), ceil(m / MT), slices).
//   qmm_reduce(const float *part, float *y, unsigned long long count, unsigned slices)
//     y[i] = part[i] + part[count + i] + ... (slices terms, in that order) for i < count; any
//     block size and grid (a grid-stride loop).
//
// Work split. A block makes a tile of QMM_TN (64) weight rows by MT (16, 32 or 64) x rows. For
// each chunk of QMM_KC (32) values of k it dequantizes the tile's weights into shared memory,
// one piece of 8 values per thread, with the qmv_dequantize_<T>_f16 piece functions above (so
// each weight is the f32 value candle-core's CPU `to_float` gives), and copies the chunk of the
// MT x rows beside them; then thread t computes weight rows t % 32 and t % 32 + 32 against x
// rows MT / 8 (t / 32) .. + MT / 8, so the 32 lanes of a row group read one x value at a time
// (a broadcast) and consecutive weight rows (padded to QMM_WSTRIDE floats: no bank conflicts
// for 16-byte reads). Each output is one f32 sum over its slice's k values in order; slices
// are added in order: the result does not depend on the schedule. Nothing here depends on the
// wave size (no shuffles), so wave 32 and wave 64 run the same code. Rows past n and x rows
// past m are computed on row n - 1 and x row m - 1 (so no load needs a branch) and not
// written. Each chunk's loads are issued before the previous chunk's products (registers
// carry them across the barrier), since a block has few chunks to overlap otherwise.
#define QMM_BLOCK 256
#define QMM_TN 64
#define QMM_KC 32
#define QMM_WSTRIDE (QMM_KC + 4)

// Piece i of the weights (see the dequantize pieces above) as two float4 (values 0-3, 4-7).
template <typename D>
__device__ __forceinline__ void qmm_piece4(const uint8_t *w, unsigned long long i, float4 &lo, float4 &hi) {
    float v[8];
    D::piece(w, i, v);
    lo = make_float4(v[0], v[1], v[2], v[3]);
    hi = make_float4(v[4], v[5], v[6], v[7]);
}

// x values a thread copies into shared memory per chunk: float4 words i = t + QMM_BLOCK j of
// the tile's MT x QMM_KC / 4 (x row i / 8, word i % 8); past the tile (MT = 16) nothing.
template <unsigned MT> struct QmmX {
    static constexpr unsigned WORDS = MT * (QMM_KC / 4);
    static constexpr unsigned PER_THREAD = (WORDS + QMM_BLOCK - 1) / QMM_BLOCK;
};

template <typename D, unsigned MT>
__device__ __forceinline__ void qmm_f32(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                        float *__restrict__ y, unsigned n, unsigned k, unsigned m,
                                        unsigned cps) {
    static_assert(MT % 8 == 0 && MT <= 64, "x rows per tile");
    constexpr unsigned MR = MT / 8, XW = QmmX<MT>::WORDS, XN = QmmX<MT>::PER_THREAD;
    __shared__ __attribute__((aligned(16))) float ws[QMM_TN * QMM_WSTRIDE];
    __shared__ __attribute__((aligned(16))) float xs[MT * QMM_KC];
    const unsigned t = threadIdx.x, nl = t % 32, mg = t / 32;
    const size_t n0 = (size_t)blockIdx.x * QMM_TN, m0 = (size_t)blockIdx.y * MT;
    const unsigned chunks = k / QMM_KC;
    const unsigned c0 = blockIdx.z * cps, c1 = c0 + cps < chunks ? c0 + cps : chunks;
    // This thread's piece of the weight tile: row t / 4 of the tile, values 8 (t % 4) .. + 8.
    // A row past n reads row n - 1 instead (never stored), so the loads need no branch.
    const unsigned wr = t / 4, wp = t % 4;
    const size_t w_row = n0 + wr < n ? n0 + wr : n - 1;
    const unsigned long long w_piece0 = ((unsigned long long)w_row * k) / 8 + wp;
    // Its x words: x row m - 1 stands in for rows past m (never stored), likewise.
    const float *x_src[XN];
#pragma unroll
    for (unsigned j = 0; j < XN; ++j) {
        const unsigned i = (t + QMM_BLOCK * j) % XW;
        const size_t xr = m0 + i / (QMM_KC / 4) < m ? m0 + i / (QMM_KC / 4) : m - 1;
        x_src[j] = x + xr * k + 4 * (i % (QMM_KC / 4));
    }
    float acc[2][MR];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (unsigned j = 0; j < MR; ++j) acc[r][j] = 0.0f;
    // The loads of chunk c + 1 are issued before chunk c's products (software pipelining: a
    // block has few chunks in flight, so each would otherwise wait a full memory latency).
    float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
    // (xv starts defined: left undefined on the path that skips the loop, clang 19 put it in
    // scratch.)
    float4 xv[XN];
#pragma unroll
    for (unsigned j = 0; j < XN; ++j) xv[j] = v0;
    if (c0 < c1) {
        qmm_piece4<D>(w, w_piece0 + (unsigned long long)c0 * (QMM_KC / 8), v0, v1);
#pragma unroll
        for (unsigned j = 0; j < XN; ++j) xv[j] = *reinterpret_cast<const float4 *>(x_src[j] + (size_t)c0 * QMM_KC);
    }
    for (unsigned c = c0; c < c1; ++c) {
        float4 *wdst = reinterpret_cast<float4 *>(ws + wr * QMM_WSTRIDE + 8 * wp);
        wdst[0] = v0;
        wdst[1] = v1;
#pragma unroll
        for (unsigned j = 0; j < XN; ++j)
            if (XW % QMM_BLOCK == 0 || t + QMM_BLOCK * j < XW) reinterpret_cast<float4 *>(xs)[t + QMM_BLOCK * j] = xv[j];
        __syncthreads();
        // The next chunk (the last one again at the end: harmless, and no branch).
        const unsigned cn = c + 1 < c1 ? c + 1 : c;
        qmm_piece4<D>(w, w_piece0 + (unsigned long long)cn * (QMM_KC / 8), v0, v1);
#pragma unroll
        for (unsigned j = 0; j < XN; ++j) xv[j] = *reinterpret_cast<const float4 *>(x_src[j] + (size_t)cn * QMM_KC);
#pragma unroll
        for (unsigned kk = 0; kk < QMM_KC; kk += 4) {
            const float4 a0 = *reinterpret_cast<const float4 *>(ws + nl * QMM_WSTRIDE + kk);
            const float4 a1 = *reinterpret_cast<const float4 *>(ws + (nl + 32) * QMM_WSTRIDE + kk);
#pragma unroll
            for (unsigned j = 0; j < MR; ++j) {
                const float4 b = *reinterpret_cast<const float4 *>(xs + (mg * MR + j) * QMM_KC + kk);
                acc[0][j] = fmaf(a0.x, b.x, acc[0][j]);
                acc[0][j] = fmaf(a0.y, b.y, acc[0][j]);
                acc[0][j] = fmaf(a0.z, b.z, acc[0][j]);
                acc[0][j] = fmaf(a0.w, b.w, acc[0][j]);
                acc[1][j] = fmaf(a1.x, b.x, acc[1][j]);
                acc[1][j] = fmaf(a1.y, b.y, acc[1][j]);
                acc[1][j] = fmaf(a1.z, b.z, acc[1][j]);
                acc[1][j] = fmaf(a1.w, b.w, acc[1][j]);
            }
        }
        __syncthreads();
    }
    float *out = y + (size_t)blockIdx.z * m * n;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const size_t row = n0 + nl + 32 * r;
#pragma unroll
        for (unsigned j = 0; j < MR; ++j) {
            const size_t xr = m0 + mg * MR + j;
            if (row < n && xr < m) out[xr * n + row] = acc[r][j];
        }
    }
}

#define QMM_KERNEL(T, D, MT)                                                                       \
    extern "C" __global__ void __launch_bounds__(QMM_BLOCK)                                        \
        qmm_##T##_m##MT(const uint8_t *w, const float *x, float *y, unsigned n, unsigned k,        \
                        unsigned m, unsigned cps) {                                                \
        qmm_f32<D, MT>(w, x, y, n, k, m, cps);                                                     \
    }
#define QMM_KERNELS(T, D) QMM_KERNEL(T, D, 16) QMM_KERNEL(T, D, 32) QMM_KERNEL(T, D, 64)
// The f32 tiles measured slower than the f16 GEMM at every size (H100 via HIP-on-CUDA,
// bench/results 2026-11-25), so the shipped objects leave them out and candle-rocm sends those
// products to the GEMM; define QMV_QMM_F32 to build them (the CPU emulator's tests do, so the
// code stays checked).
#ifdef QMV_QMM_F32
QMM_KERNELS(q4_0, Q4_0d)
QMM_KERNELS(q4_1, Q4_1d)
QMM_KERNELS(q8_0, Q8_0d)
QMM_KERNELS(q4_K, QK45d<false>)
QMM_KERNELS(q5_K, QK45d<true>)
QMM_KERNELS(q6_K, Q6Kd)
QMM_KERNELS(q5_0, Q5d<false>)
QMM_KERNELS(q5_1, Q5d<true>)
#endif

extern "C" __global__ void qmm_reduce(const float *part, float *y, unsigned long long count, unsigned slices) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float s = part[i];
        for (unsigned z = 1; z < slices; ++z) s += part[(unsigned long long)z * count + i];
        y[i] = s;
    }
}
