// qmatvec/split.h - part of qmatvec.hip (see its header for layouts, the per-block work split
// and alignment), included by it after matvec_f32.h, never on its own: the f32 mat-vec of one x
// row (decode) with k split across groups, `qmatvec_split_<T>[_v]` (candle-rocm takes them for
// weights of too few rows to fill the GPU; CANDLE_ROCM_QMATVEC_SPLIT).
//
// Why. `qmatvec_<T>` gives each group of 32 lanes QMV_R (2) rows and walks all of k serially
// (nb / 8 dependent steps of 8 blocks, nb / 2 of 2 super-blocks): a 2048 x 2048 q4_0 weight is
// 128 blocks of 16 rows, each group 8 steps long, and runs latency-bound at a fraction of the
// memory bandwidth (issue 27). Here gpr groups share a row group's k, as gemv.hip's gemv does.
//
// Operands: as qmatvec_<T>[_v] (w: n rows of nb blocks or super-blocks, 4-byte aligned,
// readable 2 bytes before a block and 4 past the last; x: k floats, 16-byte aligned for _v;
// y: n floats), plus gpr in 1, 2, 4, 8.
//
// Work split. A block's QMV_BLOCK / QMV_GROUP (8) groups of 32 lanes form 8 / gpr row groups
// of gpr groups each (groups g gpr .. g gpr + gpr - 1), so a block covers 8 QMV_R / gpr rows
// (16, 8, 4, 2). Inside a group the lanes split a step of blocks exactly as qmatvec_<T> does
// (the same per-type `dot`, `qmv_load_x8` / `qmv_load_xk` and `qmv_row` row pointers, so the
// arithmetic per block is shared code). The gpr groups of a row group take the row group's
// steps interleaved: slice s (= group % gpr) takes steps s, s + gpr, s + 2 gpr, ... (blocks
// first + STEP (s + gpr i)). Interleaved rather than contiguous ranges: at any moment a row
// group's gpr groups read gpr adjacent steps of the row (one contiguous stretch, as gemv's
// groups do), every slice's loop is qmatvec_<T>'s loop with a gpr times longer constant stride
// (no per-slice bounds to compute, and the row pointers advance by a constant), and the
// slices' shares differ by at most one step whatever nb is.
//
// Reduction. Each group reduces its lanes' QMV_R sums with the xor butterfly (qmv_shfl_xor, as
// qmv_store does); with gpr 1 lane 0 stores them; otherwise lane 0 of each group writes its
// sums to shared memory, and after a barrier lane 0 of the row group's slice 0 adds slices 0,
// 1, ..., gpr - 1 in that order and stores (the same order on every run: deterministic, though
// not the bits of qmatvec_<T>, whose one group adds the blocks in another order). A second
// barrier guards the shared sums before the next row group. Blocks visit rows with a
// block-uniform grid-stride loop and gpr is the same for the whole launch, so every lane
// reaches every shuffle and barrier; a row group wholly past n computes nothing, a row past n
// inside one reads the row group's first row; neither is stored.
//
// Kernels (T in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K):
//   qmatvec_split_<T>(const uint8_t* w, const float* x, float* y, unsigned n, unsigned nb,
//                     unsigned gpr)
//   qmatvec_split_<T>_v(same)
// Launch with QMV_BLOCK threads in x (blockDim (256, 1, 1)), gpr in 1, 2, 4, 8, and any grid
// (candle-rocm uses min(ceil(n gpr / QMV_ROWS), 2^20) blocks, gpr the fewest giving 1024
// blocks while each group keeps at least one step of blocks).

// The end of a row group's pass: the butterfly inside each group, then the gpr groups' sums
// added in slice order (see above) and stored at y[r0 + r] for rows r0 + r < n.
__device__ __forceinline__ void qmv_split_store(float (&acc)[QMV_R], unsigned lane, unsigned group, unsigned gpr,
                                                float *__restrict__ y, unsigned n, size_t r0) {
    __shared__ float part[QMV_BLOCK / QMV_GROUP][QMV_R];
#pragma unroll
    for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
        for (int m = QMV_GROUP / 2; m > 0; m >>= 1) acc[r] += qmv_shfl_xor(acc[r], m);
    }
    if (gpr == 1) {
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                if (r0 + r < n) y[r0 + r] = acc[r];
        }
        return;
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) part[group][r] = acc[r];
    }
    __syncthreads();
    if (group % gpr == 0 && lane == 0) {
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
            float s = part[group][r];
            for (unsigned g = 1; g < gpr; ++g) s += part[group + g][r];
            if (r0 + r < n) y[r0 + r] = s;
        }
    }
    __syncthreads();
}

// The 32-value block types (QMV_PARTS consecutive parts of a block per lane, as qmatvec).
template <typename Q, bool V>
__device__ __forceinline__ void qmatvec_split(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                              float *__restrict__ y, unsigned n, unsigned nb, unsigned gpr) {
    constexpr unsigned L = QMV_BL / QMV_PARTS; // lanes per block
    constexpr unsigned STEP = QMV_GROUP / L;   // blocks per group step
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned t = lane % L, slice = group % gpr;
    const unsigned first = lane / L + slice * STEP, stride = gpr * STEP;
    const unsigned rows_per_block = QMV_ROWS / gpr;
    const size_t row_bytes = (size_t)nb * Q::BYTES;
    for (size_t base = (size_t)blockIdx.x * rows_per_block; base < n; base += (size_t)gridDim.x * rows_per_block) {
        const size_t r0 = base + (size_t)(group / gpr) * QMV_R;
        float acc[QMV_R];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) acc[r] = 0.0f;
        if (r0 < n) {
            QmvRow rows[QMV_R];
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                rows[r] = qmv_row<Q::BYTES, STEP>(w, r0 + r < n ? r0 + r : r0, row_bytes, first);
            // The stride is gpr steps, each of whole words (qmv_row's static_assert).
            const unsigned advance = stride * Q::BYTES / 4;
            QMV_UNROLL_LOOP(QMV_UNROLL)
            for (unsigned b = first; b < nb; b += stride) {
#pragma unroll
                for (unsigned pp = 0; pp < QMV_PARTS; ++pp) {
                    const unsigned part = t * QMV_PARTS + pp;
                    float xs[QMV_BV];
                    qmv_load_x8<V>(x + (size_t)b * 32 + Q::X_STEP * part, Q::X_GAP, xs);
                    float xsum = 0.0f;
                    if (Q::NEEDS_XSUM) {
#pragma unroll
                        for (int i = 0; i < QMV_BV; ++i) xsum += xs[i];
                    }
#pragma unroll
                    for (int r = 0; r < QMV_R; ++r) acc[r] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += advance;
            }
        }
        qmv_split_store(acc, lane, group, gpr, y, n, r0);
    }
}

// The k-quants (QMV_KL lanes per super-block, QMV_KS super-blocks per group step, as
// qmatvec_k).
template <typename Q, bool V>
__device__ __forceinline__ void qmatvec_split_k(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                                float *__restrict__ y, unsigned n, unsigned nb, unsigned gpr) {
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned part = lane % QMV_KL, slice = group % gpr;
    const unsigned first = lane / QMV_KL + slice * QMV_KS, stride = gpr * QMV_KS;
    const unsigned xoff = Q::x_start(part);
    const unsigned rows_per_block = QMV_ROWS / gpr;
    const size_t row_bytes = (size_t)nb * Q::BYTES;
    for (size_t base = (size_t)blockIdx.x * rows_per_block; base < n; base += (size_t)gridDim.x * rows_per_block) {
        const size_t r0 = base + (size_t)(group / gpr) * QMV_R;
        float acc[QMV_R];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) acc[r] = 0.0f;
        if (r0 < n) {
            QmvRow rows[QMV_R];
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                rows[r] = qmv_row<Q::BYTES, QMV_KS>(w, r0 + r < n ? r0 + r : r0, row_bytes, first);
            const unsigned advance = stride * Q::BYTES / 4;
            QMV_UNROLL_LOOP(QMV_UNROLL)
            for (unsigned b = first; b < nb; b += stride) {
                float xs[QMV_KV];
                qmv_load_xk<V, Q::L>(x + (size_t)b * QMV_QK + xoff, xs);
                float xsum[QMV_KV / Q::L];
#pragma unroll
                for (int g = 0; g < QMV_KV / Q::L; ++g) {
                    xsum[g] = 0.0f;
#pragma unroll
                    for (int i = 0; i < Q::L; ++i) xsum[g] += xs[Q::L * g + i];
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) acc[r] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += advance;
            }
        }
        qmv_split_store(acc, lane, group, gpr, y, n, r0);
    }
}

#define QMV_SPLIT_KERNELS(T, F, Q)                                                                 \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_split_##T(const uint8_t *w, const float *x, float *y, unsigned n, unsigned nb,     \
                          unsigned gpr) {                                                          \
        F<Q, false>(w, x, y, n, nb, gpr);                                                          \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_split_##T##_v(const uint8_t *w, const float *x, float *y, unsigned n, unsigned nb, \
                              unsigned gpr) {                                                      \
        F<Q, true>(w, x, y, n, nb, gpr);                                                           \
    }

QMV_SPLIT_KERNELS(q4_0, qmatvec_split, Q4_0)
QMV_SPLIT_KERNELS(q4_1, qmatvec_split, Q4_1)
QMV_SPLIT_KERNELS(q8_0, qmatvec_split, Q8_0)
QMV_SPLIT_KERNELS(q5_0, qmatvec_split, Q5<false>)
QMV_SPLIT_KERNELS(q5_1, qmatvec_split, Q5<true>)
QMV_SPLIT_KERNELS(q4_K, qmatvec_split_k, QK45<false>)
QMV_SPLIT_KERNELS(q5_K, qmatvec_split_k, QK45<true>)
QMV_SPLIT_KERNELS(q6_K, qmatvec_split_k, Q6K)
