// qmatvec/gated.h - part of qmatvec.hip (see its header for layouts, the work split and
// alignment), included by it after matvec_f32.h, never on its own: SwiGLU's gate fused into the
// decode mat-vec, `qmatvec_swiglu_<T>[_v]`.
//
// What. The weights are 2h rows stacked [gate; up] (candle-transformers' quantized llama stacks
// its w1 and w3 so), x is one f32 row of k values, and
//     y[i] = silu(g_i) * u_i,  g_i = W[i] . x,  u_i = W[h + i] . x,  i < h,
// silu(g) = g / (1 + exp(-g)) in f32 (candle's CPU silu). One launch instead of the product and
// candle-nn's `swiglu` after it, and the 2h products are never written.
//
// Work split. As qmatvec_<T> (the same lanes per block, steps, x loads and per-type `dot`, via
// `qmv_accumulate` / `qmv_accumulate_k`), except that a group's QMV_R = 2 rows are a gate row
// and its up row, i and h + i, not two neighbours: a block of QMV_BLOCK threads covers
// QMV_SWIGLU_ROWS (8) outputs, and blocks visit outputs with a block-uniform grid-stride loop.
// An output past h loads nothing (its sums stay 0) and is not stored; every lane still runs the
// butterfly (qmv_store's), as in qmatvec_<T>.
//
// Kernels (T in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K):
//   qmatvec_swiglu_<T>(const uint8_t* w, const float* x, float* y, unsigned h, unsigned nb)
//   qmatvec_swiglu_<T>_v(same; x 16-byte aligned)
//     w: 2h rows of nb blocks (super-blocks), as qmatvec_<T>'s w for n = 2h; x: k floats; y: h
//     floats. Launch with QMV_BLOCK threads (blockDim (256, 1, 1)) and any grid (candle-rocm
//     uses min(ceil(h / QMV_SWIGLU_ROWS), 2^20) blocks).

#define QMV_SWIGLU_ROWS (QMV_BLOCK / QMV_GROUP)

// The butterfly over the group's 32 lanes for the gate and up sums, then lane 0 stores
// silu(gate) * up at y[i] when i < h.
__device__ __forceinline__ void qmv_swiglu_store(float (&acc)[2][1], unsigned lane, float *__restrict__ y,
                                                 unsigned h, size_t i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int m = QMV_GROUP / 2; m > 0; m >>= 1) acc[r][0] += qmv_shfl_xor(acc[r][0], m);
    }
    if (lane == 0 && i < h) {
        const float g = acc[0][0];
        y[i] = g / (1.0f + expf(-g)) * acc[1][0];
    }
}

// KQ: a k-quant type (super-blocks of QMV_QK values, `qmv_accumulate_k`); else 32-value blocks.
template <typename Q, bool V, bool KQ>
__device__ __forceinline__ void qmatvec_swiglu(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                               float *__restrict__ y, unsigned h, unsigned nb) {
    constexpr unsigned L = KQ ? QMV_KL : QMV_BL / QMV_PARTS; // lanes per block (super-block)
    constexpr unsigned STEP = QMV_GROUP / L;                  // blocks per group step
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned t = lane % L, first = lane / L;
    const size_t row_bytes = (size_t)nb * Q::BYTES, k = (size_t)nb * (KQ ? QMV_QK : 32);
    for (size_t base = (size_t)blockIdx.x * QMV_SWIGLU_ROWS; base < h; base += (size_t)gridDim.x * QMV_SWIGLU_ROWS) {
        const size_t i = base + group;
        float acc[2][1] = {{0.0f}, {0.0f}};
        if (i < h) {
            QmvRow rows[2] = {qmv_row<Q::BYTES, STEP>(w, i, row_bytes, first),
                              qmv_row<Q::BYTES, STEP>(w, (size_t)h + i, row_bytes, first)};
            if constexpr (KQ) {
                qmv_accumulate_k<Q, V, 1, 2>(rows, x, k, nb, t, first, Q::x_start(t), acc);
            } else {
                qmv_accumulate<Q, V, 1, 2>(rows, x, k, nb, t, first, acc);
            }
        }
        qmv_swiglu_store(acc, lane, y, h, i);
    }
}

#define QMV_SWIGLU_KERNELS(T, Q, KQ)                                                               \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_swiglu_##T(const uint8_t *w, const float *x, float *y, unsigned h, unsigned nb) {  \
        qmatvec_swiglu<Q, false, KQ>(w, x, y, h, nb);                                              \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_swiglu_##T##_v(const uint8_t *w, const float *x, float *y, unsigned h, unsigned nb) { \
        qmatvec_swiglu<Q, true, KQ>(w, x, y, h, nb);                                               \
    }

QMV_SWIGLU_KERNELS(q4_0, Q4_0, false)
QMV_SWIGLU_KERNELS(q4_1, Q4_1, false)
QMV_SWIGLU_KERNELS(q8_0, Q8_0, false)
QMV_SWIGLU_KERNELS(q5_0, Q5<false>, false)
QMV_SWIGLU_KERNELS(q5_1, Q5<true>, false)
QMV_SWIGLU_KERNELS(q4_K, QK45<false>, true)
QMV_SWIGLU_KERNELS(q5_K, QK45<true>, true)
QMV_SWIGLU_KERNELS(q6_K, Q6K, true)
