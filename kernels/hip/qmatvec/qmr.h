// qmatvec/qmr.h - part of qmatvec.hip (see its header for layouts, work split and alignment),
// included by it in order, never on its own: the register-tiled products `qmr_<T>_m<8|16>`.

// =============================================================================================
// Register-tiled products for a few to 16 activation rows (candle-rocm's `qmatmul` path for
// up to 16 rows a launch when the tiled path is on), x and the math in f32:
//   qmr_<T>_m<MT>(const uint8_t *w, const float *x, float *y, unsigned n, unsigned k,
//                 unsigned m)
//     Y (m, n) = X (m, k) W^T. w: n rows of k values as blocks of type T (2-byte aligned, as
//     the dequantize pieces read them); x: m rows of k floats, 16-byte aligned; k a multiple of
//     the block (so of 8), MT k below 2^32. Launch with QMR_BLOCK threads and grid (ceil(n / QMR_ROWS),
//     ceil(m / MT)).
//
// Work split. A block takes QMR_ROWS (16) weight rows as row groups of QMR_RG rows; the
// QMR_LANES lanes of a row group walk k in pieces of 8 values (lane l takes pieces l,
// l + QMR_LANES, ...). Per piece a lane dequantizes its QMR_RG rows' 8 values into registers
// once (the piece functions above: each value is the f32 the CPU's `to_float` gives) and
// multiplies them with the same 8 values of each of the block's MT x rows, read as two float4
// (from L1/L2: every block reads the same rows): 8 QMR_RG FMAs per 2 loads, and no shared
// memory or barrier in the loop (the qmm tiles above spend a shared-memory load per 4 FMAs). At
// the end each lane's QMR_RG x MT sums are added over the row group's lanes: an xor butterfly
// inside the wave, then, where a row group spans two waves, the two halves through shared
// memory, in a fixed order. Rows past n read row n - 1, x rows past m read row m - 1; neither is
// stored.
//
// The row group per target family: 64 lanes of 4 rows (QMR_LANES; QMR_RG = QMR_LANES / 16, so
// a block always holds 16 rows and candle-rocm's launch is the same everywhere). On wave64
// targets (gfx9: GCN, CDNA) a row group is one wave and its sums reduce inside it (a 64-lane
// butterfly, no shared memory); on wave32 targets (RDNA, gfx10-12) and NVIDIA's 32-lane warps
// it is two waves, whose halves add through shared memory. 32 lanes of 2 rows (one wave32 per
// row group, sums inside the wave; -DQMR_LANES=32) measured slower on the H100 via
// HIP-on-CUDA, the one 32-lane machine we have (2026-11-25 18:45Z, 4096x4096, us at 4 / 8 / 16
// rows: q4_0 24.2 / 25.0 / 42.5 against 19.6 / 19.6 / 35.2, q4_K 26.7 / 28.8 / 46.8 against
// 25.7 / 26.4 / 34.0): half the rows per x load costs more than the shared-memory add saves.
#define QMR_BLOCK 256
#ifndef QMR_LANES
#define QMR_LANES 64
#endif
// -DQMR_UNROLL=n unrolls a lane's piece loop n times (a tuning knob: more loads in flight per
// lane); unset, the compiler chooses.
#define QMR_RG (QMR_LANES / 16) // weight rows per row group
#define QMR_ROWS (QMR_BLOCK / QMR_LANES * QMR_RG)
// Lanes of a row group inside one wave, and the waves (1 or 2) a row group spans.
#define QMR_SEG (QMR_LANES < QMV_WAVE ? QMR_LANES : QMV_WAVE)
#define QMR_HALVES (QMR_LANES / QMR_SEG)

#if QMR_LANES != 32 && QMR_LANES != 64
#error "QMR_LANES must be 32 or 64"
#endif

// x rows a pass of the step loop takes: all MT on NVIDIA (as the harness measured them) and
// with 2-row groups (-DQMR_LANES=32); 8 with AMD's 4-row groups, where clang 19 hoisted
// all 16 rows' loads ahead of the FMAs and the 16-row kernels took all 256 VGPRs of a gfx9 lane
// and spilled: there a 16-row tile is two passes over k (the weights dequantized again, from
// L2), each within the registers of the 8-row kernel.
#if defined(__HIP_DEVICE_COMPILE__) && QMR_RG == 4
#define QMR_PASS_ROWS 8
#else
#define QMR_PASS_ROWS 16
#endif

template <typename D, unsigned MT>
__device__ __forceinline__ void qmr_f32(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                        float *__restrict__ y, unsigned n, unsigned k, unsigned m) {
    constexpr unsigned MP = MT < QMR_PASS_ROWS ? MT : QMR_PASS_ROWS;
    static_assert(MT % MP == 0, "whole passes");
    static_assert(QMR_ROWS * MP <= QMR_BLOCK, "one output per thread");
    static_assert(QMR_ROWS == 16, "candle-rocm launches 16 rows a block");
    __shared__ float red[QMR_BLOCK / QMR_LANES][QMR_HALVES][QMR_RG][MP];
    const unsigned t = threadIdx.x, rg = t / QMR_LANES, lane = t % QMR_LANES;
    const size_t row0 = (size_t)blockIdx.x * QMR_ROWS + (size_t)rg * QMR_RG;
    const size_t m0 = (size_t)blockIdx.y * MT;
    const unsigned pieces = k / 8;
    unsigned long long wp[QMR_RG];
#pragma unroll
    for (int r = 0; r < QMR_RG; ++r) {
        const size_t row = row0 + r < n ? row0 + r : n - 1;
        wp[r] = (unsigned long long)row * pieces;
    }
    // x row j of the tile at xt + min(j, last) k (32-bit offsets: MT k < 2^32, checked by
    // candle-rocm; computed per use, which keeps the offsets out of the registers).
    const float *xt = x + m0 * k;
    const unsigned last = (unsigned)(m - 1 - m0);
#pragma unroll 1
    for (unsigned p0 = 0; p0 < MT; p0 += MP) {
        float acc[QMR_RG][MP];
#pragma unroll
        for (int r = 0; r < QMR_RG; ++r)
#pragma unroll
            for (unsigned j = 0; j < MP; ++j) acc[r][j] = 0.0f;
#ifdef QMR_UNROLL
        QMV_UNROLL_LOOP(QMR_UNROLL)
#endif
        for (unsigned pc = lane; pc < pieces; pc += QMR_LANES) {
            float v[QMR_RG][8];
#pragma unroll
            for (int r = 0; r < QMR_RG; ++r) D::piece(w, wp[r] + pc, v[r]);
#pragma unroll
            for (unsigned j = 0; j < MP; ++j) {
                const unsigned jj = p0 + j;
                const float *xp = xt + (jj < last ? jj : last) * k + 8 * pc;
                const float4 a = *reinterpret_cast<const float4 *>(xp);
                const float4 b = *reinterpret_cast<const float4 *>(xp + 4);
#pragma unroll
                for (int r = 0; r < QMR_RG; ++r) {
                    float s = acc[r][j];
                    s = fmaf(v[r][0], a.x, s);
                    s = fmaf(v[r][1], a.y, s);
                    s = fmaf(v[r][2], a.z, s);
                    s = fmaf(v[r][3], a.w, s);
                    s = fmaf(v[r][4], b.x, s);
                    s = fmaf(v[r][5], b.y, s);
                    s = fmaf(v[r][6], b.z, s);
                    s = fmaf(v[r][7], b.w, s);
                    acc[r][j] = s;
                }
            }
        }
        const unsigned half = lane / QMR_SEG;
#pragma unroll
        for (int r = 0; r < QMR_RG; ++r)
#pragma unroll
            for (unsigned j = 0; j < MP; ++j) {
                float s = acc[r][j];
#pragma unroll
                for (int mask = QMR_SEG / 2; mask > 0; mask >>= 1) s += qmv_shfl_xor(s, mask);
                if (lane % QMR_SEG == 0) red[rg][half][r][j] = s;
            }
        __syncthreads();
        // Thread t stores output (row t % QMR_ROWS, x row p0 + t / QMR_ROWS) of the tile.
        if (t < QMR_ROWS * MP) {
            const unsigned lr = t % QMR_ROWS, j = t / QMR_ROWS;
            const size_t row = (size_t)blockIdx.x * QMR_ROWS + lr, xrow = m0 + p0 + j;
            if (row < n && xrow < m) {
                float sum = red[lr / QMR_RG][0][lr % QMR_RG][j];
#pragma unroll
                for (unsigned h = 1; h < QMR_HALVES; ++h) sum += red[lr / QMR_RG][h][lr % QMR_RG][j];
                y[xrow * n + row] = sum;
            }
        }
        __syncthreads(); // the next pass writes red again
    }
}

#define QMR_KERNEL(T, D, MT)                                                                       \
    extern "C" __global__ void __launch_bounds__(QMR_BLOCK)                                        \
        qmr_##T##_m##MT(const uint8_t *w, const float *x, float *y, unsigned n, unsigned k,        \
                        unsigned m) {                                                              \
        qmr_f32<D, MT>(w, x, y, n, k, m);                                                          \
    }
#define QMR_KERNELS(T, D) QMR_KERNEL(T, D, 8) QMR_KERNEL(T, D, 16)
QMR_KERNELS(q4_0, Q4_0d)
QMR_KERNELS(q4_1, Q4_1d)
QMR_KERNELS(q8_0, Q8_0d)
QMR_KERNELS(q4_K, QK45d<false>)
QMR_KERNELS(q5_K, QK45d<true>)
QMR_KERNELS(q6_K, Q6Kd)
QMR_KERNELS(q5_0, Q5d<false>)
QMR_KERNELS(q5_1, Q5d<true>)
