// qmatvec/qmm8.h - part of qmatvec.hip (see its header for layouts, work split and alignment),
// included by it in order, never on its own: the shared-memory tiles on 8-bit activations
// `qmm8_<T>_m<MT>` (CANDLE_ROCM_QMATVEC=q8).

// ---------------------------------------------------------------------------------------------
// The same tiles on 8-bit activations (CANDLE_ROCM_QMATVEC=q8): x rounded to q8_1 by
// qmv_quantize_x8 (the x8 layout above), the weights unpacked to bytes in shared memory and
// multiplied 4 at a time with 32-bit integer sums (`__dp4a`), as the q8 mat-vec does:
//   qmm8_<T>_m<MT>(const uint8_t *w, const uint8_t *x8, float *y, unsigned n, unsigned k,
//                  unsigned m, unsigned cps)
//     as qmm_<T>_m<MT>, with x8 holding m x8 rows of k values (QMV8_ROW_BYTES(k) bytes each,
//     8-byte aligned).
// A weight piece of 8 values unpacks to 8 small integers q (q4_0 / q4_1 nibbles, q5_0 / q5_1
// 5-bit quants, q8_0 bytes, q4_K / q5_K 4- or 5-bit quants, q6_K quants less 32, all within a
// signed byte), the scale d of its 16-value half (q6_K has one per 16 values, the others one
// per 32) and the offset term mn of its 32 values (q4_0: -8 d; q5_0: -16 d; q4_1 / q5_1: m;
// q4_K / q5_K: -dmin m of the sub-block; 0 for q8_0 and q6_K). A 32-value block of a weight row
// and of an x row then adds
//   d8 (d0 sum_{j<16} q_j x_j + d1 sum_{j>=16} q_j x_j) + mn s
// where x_j are the x8 bytes and d8 their scale, and s is the block's f16 x sum for q4_0, q4_1,
// q5_0 and q5_1 (Candle CUDA's q4 / q5 dots) and d8 times the integer sum of the x bytes for the k-quants (as
// in the q8 mat-vec's k-quant dots): the q8 mat-vec's numbers up to the order of the f32 sums.
#define QMM8_WSTRIDE 12 // 32-bit words per weight row in shared memory (8 used): 48 bytes

__device__ __forceinline__ uint32_t qmm_pack4(int a, int b, int c, int d) {
    return (uint32_t)(a & 255) | (uint32_t)(b & 255) << 8 | (uint32_t)(c & 255) << 16 | (uint32_t)(d & 255) << 24;
}

struct Q4_0q {
    static constexpr bool XSUM_F16 = true, HALVES = false;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 4) * 18;
        const unsigned p = (unsigned)(i % 4);
        d = qmv_half_at(blk);
        mn = -8.0f * d;
        const uint8_t *qs = blk + 2 + 8 * (p & 1);
        int v[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) v[l] = p < 2 ? qs[l] & 15 : qs[l] >> 4;
        q[0] = qmm_pack4(v[0], v[1], v[2], v[3]);
        q[1] = qmm_pack4(v[4], v[5], v[6], v[7]);
    }
};

struct Q4_1q {
    static constexpr bool XSUM_F16 = true, HALVES = false;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 4) * 20;
        const unsigned p = (unsigned)(i % 4);
        d = qmv_half_at(blk);
        mn = qmv_half_at(blk + 2);
        const uint8_t *qs = blk + 4 + 8 * (p & 1);
        int v[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) v[l] = p < 2 ? qs[l] & 15 : qs[l] >> 4;
        q[0] = qmm_pack4(v[0], v[1], v[2], v[3]);
        q[1] = qmm_pack4(v[4], v[5], v[6], v[7]);
    }
};

struct Q8_0q {
    static constexpr bool XSUM_F16 = false, HALVES = false;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 4) * 34;
        const unsigned p = (unsigned)(i % 4);
        d = qmv_half_at(blk);
        mn = 0.0f;
        const uint8_t *qs = blk + 2 + 8 * p;
        q[0] = qmm_pack4(qs[0], qs[1], qs[2], qs[3]);
        q[1] = qmm_pack4(qs[4], qs[5], qs[6], qs[7]);
    }
};

// q5_0 (MIN false: offset -16 d) and q5_1 (MIN true: min m), the f16 x sum like q4_0 / q4_1.
template <bool MIN> struct Q5q {
    static constexpr bool XSUM_F16 = true, HALVES = false;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 4) * (MIN ? 24 : 22);
        const unsigned p = (unsigned)(i % 4), j0 = 8 * (p & 1), hi = p < 2 ? 0 : 16;
        d = qmv_half_at(blk);
        mn = MIN ? qmv_half_at(blk + 2) : -16.0f * d;
        const uint8_t *h = blk + (MIN ? 4 : 2);
        const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        const uint8_t *qs = h + 4 + j0;
        int v[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) v[l] = (p < 2 ? qs[l] & 15 : qs[l] >> 4) | (int)((qh >> (hi + j0 + l)) & 1) << 4;
        q[0] = qmm_pack4(v[0], v[1], v[2], v[3]);
        q[1] = qmm_pack4(v[4], v[5], v[6], v[7]);
    }
};

// q4_K (QH false) and q5_K (QH true): piece t of a super-block is values 8t .. 8t + 8 of
// sub-block j = t / 4 (see QK45d).
template <bool QH> struct QK45q {
    static constexpr bool XSUM_F16 = false, HALVES = false;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 32) * (QH ? 176 : 144);
        const unsigned t = (unsigned)(i % 32), c = t / 8, i0 = 8 * t % 64, l0 = i0 % 32;
        const unsigned j = 2 * c + (i0 >= 32 ? 1 : 0);
        const uint8_t *s = blk + 4;
        const unsigned sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        const unsigned mm = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        d = qmv_half_at(blk) * (float)sc;
        mn = -(qmv_half_at(blk + 2) * (float)mm);
        const uint8_t *qs = blk + (QH ? 48 : 16) + 32 * c + l0;
        int v[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            int b = i0 < 32 ? qs[l] & 15 : qs[l] >> 4;
            if (QH) b += ((blk[16 + l0 + l] >> j) & 1) << 4;
            v[l] = b;
        }
        q[0] = qmm_pack4(v[0], v[1], v[2], v[3]);
        q[1] = qmm_pack4(v[4], v[5], v[6], v[7]);
    }
};

// q6_K: piece t is values 8t .. 8t + 8 (half h = t / 16, group g = t / 4 % 4, l0 = 8 (t % 4)),
// with the scale of its 16 values.
struct Q6Kq {
    static constexpr bool XSUM_F16 = false, HALVES = true;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, uint32_t q[2], float &d,
                                                 float &mn) {
        const uint8_t *blk = w + (i / 32) * 210;
        const unsigned t = (unsigned)(i % 32), h = t / 16, g = t / 4 % 4, l0 = 8 * (t % 4);
        d = qmv_half_at(blk + 208) * (float)(int8_t)blk[192 + 8 * h + l0 / 16 + 2 * g];
        mn = 0.0f;
        const uint8_t *ql = blk + 64 * h + 32 * (g & 1) + l0, *qh = blk + 128 + 32 * h + l0;
        int v[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) v[l] = ((g < 2 ? ql[l] & 15 : ql[l] >> 4) | ((qh[l] >> (2 * g)) & 3) << 4) - 32;
        q[0] = qmm_pack4(v[0], v[1], v[2], v[3]);
        q[1] = qmm_pack4(v[4], v[5], v[6], v[7]);
    }
};

template <typename D, unsigned MT>
__device__ __forceinline__ void qmm_x8(const uint8_t *__restrict__ w, const uint8_t *__restrict__ x8,
                                       float *__restrict__ y, unsigned n, unsigned k, unsigned m, unsigned cps) {
    static_assert(MT % 8 == 0 && MT <= 64, "x rows per tile");
    constexpr unsigned MR = MT / 8, XW = MT * 8, XN = (XW + QMM_BLOCK - 1) / QMM_BLOCK;
    __shared__ __attribute__((aligned(16))) uint32_t wq[QMM_TN * QMM8_WSTRIDE];
    __shared__ float wd[QMM_TN * 2], wm[QMM_TN];
    __shared__ __attribute__((aligned(16))) uint32_t xq[MT * 8];
    __shared__ float xd[MT], xs[MT];
    const unsigned t = threadIdx.x, nl = t % 32, mg = t / 32;
    const size_t n0 = (size_t)blockIdx.x * QMM_TN, m0 = (size_t)blockIdx.y * MT;
    const size_t row_bytes = QMV8_ROW_BYTES((size_t)k);
    const unsigned chunks = k / QMM_KC;
    const unsigned c0 = blockIdx.z * cps, c1 = c0 + cps < chunks ? c0 + cps : chunks;
    // As qmm_f32: rows past n read row n - 1, x rows past m read x row m - 1 (never stored).
    const unsigned wr = t / 4, wp = t % 4;
    const size_t w_row = n0 + wr < n ? n0 + wr : n - 1;
    const unsigned long long w_piece0 = ((unsigned long long)w_row * k) / 8 + wp;
    const uint8_t *x_src[XN];
#pragma unroll
    for (unsigned j = 0; j < XN; ++j) {
        const unsigned i = (t + QMM_BLOCK * j) % XW;
        const size_t xr = m0 + i / 8 < m ? m0 + i / 8 : m - 1;
        x_src[j] = x8 + xr * row_bytes + 4 * (i % 8);
    }
    // Thread t < MT also copies x row t's block scale and sum term.
    const uint8_t *x_row = x8 + (m0 + t % MT < m ? m0 + t % MT : m - 1) * row_bytes;
    float acc[2][MR];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (unsigned j = 0; j < MR; ++j) acc[r][j] = 0.0f;
    // Chunk c + 1's loads are issued before chunk c's products, as in qmm_f32.
    uint32_t q[2] = {0u, 0u}, xw[XN];
    uint32_t xds[2] = {0u, 0u};
    float d = 0.0f, mn = 0.0f;
    if (c0 < c1) {
        D::piece(w, w_piece0 + (unsigned long long)c0 * (QMM_KC / 8), q, d, mn);
#pragma unroll
        for (unsigned j = 0; j < XN; ++j) xw[j] = *reinterpret_cast<const uint32_t *>(x_src[j] + (size_t)c0 * QMM_KC);
        const uint32_t *ds = qmv8_ds(x_row, k, c0);
        xds[0] = ds[0];
        xds[1] = ds[1];
    }
    for (unsigned c = c0; c < c1; ++c) {
        wq[wr * QMM8_WSTRIDE + 2 * wp] = q[0];
        wq[wr * QMM8_WSTRIDE + 2 * wp + 1] = q[1];
        if (wp % 2 == 0) wd[2 * wr + wp / 2] = d;
        if (wp == 0) wm[wr] = mn;
#pragma unroll
        for (unsigned j = 0; j < XN; ++j)
            if (XW % QMM_BLOCK == 0 || t + QMM_BLOCK * j < XW) xq[t + QMM_BLOCK * j] = xw[j];
        if (t < MT) {
            const float dx = qmv_half(xds[0]);
            xd[t] = dx;
            xs[t] = D::XSUM_F16 ? qmv_half(xds[0] >> 16) : dx * (float)(int)xds[1];
        }
        __syncthreads();
        const unsigned cn = c + 1 < c1 ? c + 1 : c;
        D::piece(w, w_piece0 + (unsigned long long)cn * (QMM_KC / 8), q, d, mn);
#pragma unroll
        for (unsigned j = 0; j < XN; ++j) xw[j] = *reinterpret_cast<const uint32_t *>(x_src[j] + (size_t)cn * QMM_KC);
        {
            const uint32_t *ds = qmv8_ds(x_row, k, cn);
            xds[0] = ds[0];
            xds[1] = ds[1];
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const unsigned row = nl + 32 * r;
            const uint4 a0 = *reinterpret_cast<const uint4 *>(wq + row * QMM8_WSTRIDE);
            const uint4 a1 = *reinterpret_cast<const uint4 *>(wq + row * QMM8_WSTRIDE + 4);
            const float d0 = wd[2 * row], d1 = wd[2 * row + 1], wmn = wm[row];
#pragma unroll
            for (unsigned j = 0; j < MR; ++j) {
                const unsigned xr = mg * MR + j;
                const uint4 b0 = *reinterpret_cast<const uint4 *>(xq + 8 * xr);
                const uint4 b1 = *reinterpret_cast<const uint4 *>(xq + 8 * xr + 4);
                int s0 = qmv_dot4(a0.x, b0.x, 0);
                s0 = qmv_dot4(a0.y, b0.y, s0);
                s0 = qmv_dot4(a0.z, b0.z, s0);
                s0 = qmv_dot4(a0.w, b0.w, s0);
                int s1 = D::HALVES ? 0 : s0;
                s1 = qmv_dot4(a1.x, b1.x, s1);
                s1 = qmv_dot4(a1.y, b1.y, s1);
                s1 = qmv_dot4(a1.z, b1.z, s1);
                s1 = qmv_dot4(a1.w, b1.w, s1);
                const float dot = D::HALVES ? fmaf(d0, (float)s0, d1 * (float)s1) : d0 * (float)s1;
                acc[r][j] = fmaf(wmn, xs[xr], fmaf(xd[xr], dot, acc[r][j]));
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

#define QMM8_KERNEL(T, D, MT)                                                                      \
    extern "C" __global__ void __launch_bounds__(QMM_BLOCK)                                        \
        qmm8_##T##_m##MT(const uint8_t *w, const uint8_t *x8, float *y, unsigned n, unsigned k,    \
                         unsigned m, unsigned cps) {                                               \
        qmm_x8<D, MT>(w, x8, y, n, k, m, cps);                                                     \
    }
#define QMM8_KERNELS(T, D) QMM8_KERNEL(T, D, 16) QMM8_KERNEL(T, D, 32) QMM8_KERNEL(T, D, 64)
QMM8_KERNELS(q4_0, Q4_0q)
QMM8_KERNELS(q4_1, Q4_1q)
QMM8_KERNELS(q8_0, Q8_0q)
QMM8_KERNELS(q4_K, QK45q<false>)
QMM8_KERNELS(q5_K, QK45q<true>)
QMM8_KERNELS(q6_K, Q6Kq)
QMM8_KERNELS(q5_0, Q5q<false>)
QMM8_KERNELS(q5_1, Q5q<true>)
