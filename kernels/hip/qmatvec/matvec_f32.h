// qmatvec/matvec_f32.h - part of qmatvec.hip (see its header for layouts, work split and
// alignment), included by it in order, never on its own: the f32 mat-vec kernels
// `qmatvec_<T>[_v]_m<M>` of the 32-value block types and the k-quants.

// ---------------------------------------------------------------------------------------------
// QMV_PARTS (1 by default) gives a lane that many consecutive parts of a block (a tuning knob).
#ifndef QMV_PARTS
#define QMV_PARTS 1
#endif
// A lane's share of the sums of R weight rows (`rows`, from `qmv_row`) against M x rows of k
// values over a row's nb blocks: lane part t of the blocks first, first + STEP, ... (the work
// split in qmatvec.hip's header), added into acc. Shared by `qmatvec` (the group's QMV_R
// consecutive rows) and `qmatvec_swiglu` (qmatvec/gated.h: a gate row and its up row).
template <typename Q, bool V, unsigned M, unsigned R>
__device__ __forceinline__ void qmv_accumulate(QmvRow (&rows)[R], const float *__restrict__ x, size_t k,
                                               unsigned nb, unsigned t, unsigned first,
                                               float (&acc)[R][M]) {
    constexpr unsigned L = QMV_BL / QMV_PARTS; // lanes per block
    constexpr unsigned STEP = QMV_GROUP / L;
    QMV_UNROLL_LOOP(QMV_UNROLL)
    for (unsigned b = first; b < nb; b += STEP) {
#pragma unroll
        for (unsigned pp = 0; pp < QMV_PARTS; ++pp) {
            const unsigned part = t * QMV_PARTS + pp;
            // x row j's values of this part against every weight row (the weight words are
            // the same loads for every j).
#pragma unroll
            for (unsigned j = 0; j < M; ++j) {
                float xs[QMV_BV];
                qmv_load_x8<V>(x + j * k + (size_t)b * 32 + Q::X_STEP * part, Q::X_GAP, xs);
                float xsum = 0.0f;
                if (Q::NEEDS_XSUM) {
#pragma unroll
                    for (int i = 0; i < QMV_BV; ++i) xsum += xs[i];
                }
#pragma unroll
                for (unsigned r = 0; r < R; ++r) acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
            }
        }
#pragma unroll
        for (unsigned r = 0; r < R; ++r) rows[r].p += STEP * Q::BYTES / 4;
    }
}

template <typename Q, bool V, unsigned M>
__device__ __forceinline__ void qmatvec(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                        float *__restrict__ y, unsigned n, unsigned nb) {
    static_assert(QMV_BL % QMV_PARTS == 0, "parts per lane must divide the parts of a block");
    constexpr unsigned L = QMV_BL / QMV_PARTS; // lanes per block
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned t = lane % L, first = lane / L;
    const size_t row_bytes = (size_t)nb * Q::BYTES, k = (size_t)nb * 32;
    for (size_t base = (size_t)blockIdx.x * QMV_ROWS; base < n; base += (size_t)gridDim.x * QMV_ROWS) {
        const size_t r0 = base + (size_t)group * QMV_R;
        float acc[QMV_R][M];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
            for (unsigned j = 0; j < M; ++j) acc[r][j] = 0.0f;
        }
        if (r0 < n) {
            constexpr unsigned STEP = QMV_GROUP / L;
            QmvRow rows[QMV_R];
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                rows[r] = qmv_row<Q::BYTES, STEP>(w, r0 + r < n ? r0 + r : r0, row_bytes, first);
            qmv_accumulate<Q, V, M, QMV_R>(rows, x, k, nb, t, first, acc);
        }
        qmv_store<M>(acc, lane, y, n, r0);
    }
}

// qmatvec_<T>[_v] (one x row) and qmatvec_<T>_m<M>[_v] (M x rows) for the types above and below.
#define QMV_KERNEL_PAIR(T, F, Q, M, SUFFIX)                                                        \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_##T##SUFFIX(const uint8_t *w, const float *x, float *y, unsigned n, unsigned nb) { \
        F<Q, false, M>(w, x, y, n, nb);                                                            \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_##T##SUFFIX##_v(const uint8_t *w, const float *x, float *y, unsigned n,           \
                                unsigned nb) {                                                     \
        F<Q, true, M>(w, x, y, n, nb);                                                             \
    }
#define QMV_KERNELS_OF(T, F, Q)                                                                    \
    QMV_KERNEL_PAIR(T, F, Q, 1, )                                                                  \
    QMV_KERNEL_PAIR(T, F, Q, 2, _m2)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 3, _m3)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 4, _m4)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 5, _m5)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 6, _m6)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 7, _m7)                                                               \
    QMV_KERNEL_PAIR(T, F, Q, 8, _m8)
#define QMV_KERNELS(T, Q) QMV_KERNELS_OF(T, qmatvec, Q)

QMV_KERNELS(q4_0, Q4_0)
QMV_KERNELS(q4_1, Q4_1)
QMV_KERNELS(q8_0, Q8_0)
QMV_KERNELS(q5_0, Q5<false>)
QMV_KERNELS(q5_1, Q5<true>)

// ---------------------------------------------------------------------------------------------
// k-quants: super-blocks of QMV_QK values, QMV_KL lanes per super-block of QMV_KV values each
// (see the header).

#define QMV_QK 256
#ifndef QMV_KL
#define QMV_KL 16
#endif
#define QMV_KV (QMV_QK / QMV_KL)
#define QMV_KS (QMV_GROUP / QMV_KL)

#if QMV_KL != 8 && QMV_KL != 16
#error "QMV_KL must be 8 or 16"
#endif

// A lane's QMV_KV x values of a super-block: QMV_KV / L runs of L floats, run g at p + 32 g (p
// 16-byte aligned when V), into xs[L g .. L g + L).
template <bool V, int L> __device__ __forceinline__ void qmv_load_xk(const float *p, float xs[QMV_KV]) {
#pragma unroll
    for (int g = 0; g < QMV_KV / L; ++g) {
        if (V) {
            const float4 *p4 = reinterpret_cast<const float4 *>(p + 32 * g);
#pragma unroll
            for (int i = 0; i < L / 4; ++i) {
                float4 v = p4[i];
                xs[L * g + 4 * i] = v.x;
                xs[L * g + 4 * i + 1] = v.y;
                xs[L * g + 4 * i + 2] = v.z;
                xs[L * g + 4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < L; ++i) xs[L * g + i] = p[32 * g + i];
        }
    }
}

// q4_K (QH false) and q5_K (QH true): part t of a super-block, NB = QMV_KV / 2 bytes of qs
// from byte NB t (chunk c = NB t / 32, i0 = NB t % 32: values 64c + i0 + [0, NB) from the low
// nibbles, xs[0, NB), and 64c + 32 + i0 + [0, NB) from the high ones, xs[NB, 2 NB)); xsum[0]
// and xsum[1] are the sums of the two halves of xs.
template <bool QH> struct QK45 {
    static constexpr uint32_t BYTES = QH ? 176 : 144;
    static constexpr int L = QMV_KV / 2; // x run length = NB
    // Offset of part t's first x value in its super-block.
    __device__ __forceinline__ static unsigned x_start(unsigned t) {
        return 64 * (t * L / 32) + (t * L) % 32;
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_KV], const float xsum[2]) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t c = t * L / 32, i0 = (t * L) % 32;
        // The scale and min bytes of sub-blocks 2c and 2c + 1 (j & 3 = 2 (c & 1) + {0, 1}) as
        // byte pairs: j < 4 takes the low 6 bits, j >= 4 the nibbles of scales[8..12) and the
        // top 2 bits of scales[0..8) ((v >> 6) << 4 == (v >> 2) & 0x30 per byte).
        const uint32_t sh = (c & 1) * 16;
        const uint32_t a = p[1] >> sh, b = p[2] >> sh, e = p[3] >> sh;
        const uint32_t scp = c < 2 ? a & 0x3f3fu : (e & 0x0f0fu) | ((a >> 2) & 0x3030u);
        const uint32_t mnp = c < 2 ? b & 0x3f3fu : ((e >> 4) & 0x0f0fu) | ((b >> 2) & 0x3030u);
        const uint32_t qw = (QH ? 48 : 16) / 4 + t * L / 4; // word index of the lane's qs
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int i = 0; i < L / 4; ++i) {
            const uint32_t q = p[qw + i];
            uint32_t lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
            if (QH) {
                const uint32_t h = p[(16 + i0) / 4 + i];
                lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            qmv_bytes(lo, xs + 4 * i, s1);
            qmv_bytes(hi, xs + L + 4 * i, s2);
        }
        const float d = qmv_half(p[0]), dmin = qmv_half(p[0] >> 16);
        const float sc1 = (float)(scp & 255u), sc2 = (float)(scp >> 8);
        const float m1 = (float)(mnp & 255u), m2 = (float)(mnp >> 8);
        return d * (sc1 * s1 + sc2 * s2) - dmin * (m1 * xsum[0] + m2 * xsum[1]);
    }
};

// q6_K: part t of a super-block, NB = QMV_KV / 4 bytes each of ql, ql + 32 and qh: half
// h = t / (QMV_KL / 2), l0 = NB (t % (QMV_KL / 2)), values 128h + l0 + 32g + [0, NB) for
// g = 0..4 in xs[NB g ..); xsum[g] is the sum of those NB x values.
struct Q6K {
    static constexpr uint32_t BYTES = 210;
    static constexpr int L = QMV_KV / 4; // x run length = NB
    static constexpr int W = L / 4;      // words of each array per lane
    // Offset of part t's first x value in its super-block.
    __device__ __forceinline__ static unsigned x_start(unsigned t) {
        return 128 * (t / (QMV_KL / 2)) + L * (t % (QMV_KL / 2));
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_KV], const float xsum[4]) {
        const uint32_t sh = phase * 8; // 0 or 16
        const uint32_t h = t / (QMV_KL / 2), l0 = L * (t % (QMV_KL / 2));
        // The block's bytes [4 i, 4 i + 4) are funnel(p[i], p[i + 1], sh).
        const uint32_t la = (64 * h + l0) / 4, lb = la + 8, lh = (128 + 32 * h + l0) / 4;
        const uint32_t ls = (192 + 8 * h) / 4;
        uint32_t wa[W + 1], wb[W + 1], wh[W + 1], ws[3];
#pragma unroll
        for (int i = 0; i <= W; ++i) {
            wa[i] = p[la + i];
            wb[i] = p[lb + i];
            wh[i] = p[lh + i];
        }
#pragma unroll
        for (int i = 0; i < 3; ++i) ws[i] = p[ls + i];
        const float d = qmv_half(p[52] >> sh); // bytes 208..210
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < W; ++i) {
            const uint32_t a = qmv_funnel(wa[i], wa[i + 1], sh), b = qmv_funnel(wb[i], wb[i + 1], sh);
            const uint32_t e = qmv_funnel(wh[i], wh[i + 1], sh);
            qmv_bytes((a & 0x0f0f0f0fu) | ((e & 0x03030303u) << 4), xs + 4 * i, s[0]);
            qmv_bytes((b & 0x0f0f0f0fu) | ((e & 0x0c0c0c0cu) << 2), xs + L + 4 * i, s[1]);
            qmv_bytes(((a >> 4) & 0x0f0f0f0fu) | (e & 0x30303030u), xs + 2 * L + 4 * i, s[2]);
            qmv_bytes(((b >> 4) & 0x0f0f0f0fu) | ((e >> 2) & 0x30303030u), xs + 3 * L + 4 * i, s[3]);
        }
        // The 4 scales s[2g] of this part: bytes is + 2g of scales[8h .. 8h + 8), is = l0 / 16.
        const uint32_t s0 = qmv_funnel(ws[0], ws[1], sh), s1 = qmv_funnel(ws[1], ws[2], sh);
        const uint32_t is8 = 8 * (l0 >> 4);
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint32_t sw = g < 2 ? s0 : s1;
            const int32_t sc = (int32_t)((sw >> (is8 + 16 * (g & 1))) << 24) >> 24;
            acc += (float)sc * (s[g] - 32.0f * xsum[g]);
        }
        return d * acc;
    }
};

// The k-quant form of `qmv_accumulate`: QMV_KL lanes per super-block, lane part `part` of the
// super-blocks first, first + QMV_KS, ... (its x values start xoff into each).
template <typename Q, bool V, unsigned M, unsigned R>
__device__ __forceinline__ void qmv_accumulate_k(QmvRow (&rows)[R], const float *__restrict__ x, size_t k,
                                                 unsigned nb, unsigned part, unsigned first, unsigned xoff,
                                                 float (&acc)[R][M]) {
    QMV_UNROLL_LOOP(QMV_UNROLL)
    for (unsigned b = first; b < nb; b += QMV_KS) {
#pragma unroll
        for (unsigned j = 0; j < M; ++j) {
            float xs[QMV_KV];
            qmv_load_xk<V, Q::L>(x + j * k + (size_t)b * QMV_QK + xoff, xs);
            float xsum[QMV_KV / Q::L];
#pragma unroll
            for (int g = 0; g < QMV_KV / Q::L; ++g) {
                xsum[g] = 0.0f;
#pragma unroll
                for (int i = 0; i < Q::L; ++i) xsum[g] += xs[Q::L * g + i];
            }
#pragma unroll
            for (unsigned r = 0; r < R; ++r) acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
        }
#pragma unroll
        for (unsigned r = 0; r < R; ++r) rows[r].p += QMV_KS * Q::BYTES / 4;
    }
}

// The k-quant mat-vec: the work split of `qmatvec` with QMV_KL lanes per super-block.
template <typename Q, bool V, unsigned M>
__device__ __forceinline__ void qmatvec_k(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                          float *__restrict__ y, unsigned n, unsigned nb) {
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned part = lane % QMV_KL, first = lane / QMV_KL;
    const unsigned xoff = Q::x_start(part);
    const size_t row_bytes = (size_t)nb * Q::BYTES, k = (size_t)nb * QMV_QK;
    for (size_t base = (size_t)blockIdx.x * QMV_ROWS; base < n; base += (size_t)gridDim.x * QMV_ROWS) {
        const size_t r0 = base + (size_t)group * QMV_R;
        float acc[QMV_R][M];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
            for (unsigned j = 0; j < M; ++j) acc[r][j] = 0.0f;
        }
        if (r0 < n) {
            QmvRow rows[QMV_R];
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                rows[r] = qmv_row<Q::BYTES, QMV_KS>(w, r0 + r < n ? r0 + r : r0, row_bytes, first);
            qmv_accumulate_k<Q, V, M, QMV_R>(rows, x, k, nb, part, first, xoff, acc);
        }
        qmv_store<M>(acc, lane, y, n, r0);
    }
}

// qmatvec_<T>[_v] and qmatvec_<T>_m<M>[_v] for a k-quant type, M up to QMV_K_MAX_M (4): each
// x row adds 20-30 VGPRs on AMD (the compiler issues every row's x loads up front), and at
// M = 7 and 8 the q5_K kernel spilled on RDNA and took AGPRs on CDNA (clang 19, 2026-11-25).
#define QMV_K_MAX_M 4
#define QMV_K_KERNELS(T, Q)                                                                        \
    QMV_KERNEL_PAIR(T, qmatvec_k, Q, 1, )                                                          \
    QMV_KERNEL_PAIR(T, qmatvec_k, Q, 2, _m2)                                                       \
    QMV_KERNEL_PAIR(T, qmatvec_k, Q, 3, _m3)                                                       \
    QMV_KERNEL_PAIR(T, qmatvec_k, Q, 4, _m4)

QMV_K_KERNELS(q4_K, QK45<false>)
QMV_K_KERNELS(q5_K, QK45<true>)
QMV_K_KERNELS(q6_K, Q6K)
