// qmatvec/dequantize.h - part of qmatvec.hip (see its header for layouts, work split and
// alignment), included by it in order, never on its own: dequantizing weights: Q8_1
// (`qmv_dequantize_q8_1_*`) and the mat-vec types to f16 with 16-byte stores
// (`qmv_dequantize_<T>_f16`).

// =============================================================================================
// Q8_1 weights dequantized (Candle's BlockQ8_1 = { f16 d; f16 s; i8 qs[32] }, 36 bytes, value j
// = qs[j] * d in f32, as its `to_float`), the one GGML type candle-kernels has no dequantize
// kernel for:
//   qmv_dequantize_q8_1_f32(const uint8_t *w, float *y, unsigned long long count)
//   qmv_dequantize_q8_1_f16(const uint8_t *w, __half *y, unsigned long long count)
//     the first `count` values of the blocks at w (4-byte aligned, ceil(count / 32) whole
//     blocks) into y; one value per thread, any block size and grid (a grid-stride loop).
template <typename T> __device__ __forceinline__ T qmv_from_f32(float v);
template <> __device__ __forceinline__ float qmv_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half qmv_from_f32<__half>(float v) { return __float2half_rn(v); }

template <typename T>
__device__ __forceinline__ void qmv_dequantize_q8_1(const uint8_t *__restrict__ w, T *__restrict__ y,
                                                    unsigned long long count) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const uint8_t *blk = w + (i / 32) * 36;
        const float d = qmv_half(*reinterpret_cast<const uint32_t *>(blk));
        y[i] = qmv_from_f32<T>((float)(int8_t)blk[4 + i % 32] * d);
    }
}

extern "C" __global__ void qmv_dequantize_q8_1_f32(const uint8_t *w, float *y, unsigned long long count) {
    qmv_dequantize_q8_1<float>(w, y, count);
}
extern "C" __global__ void qmv_dequantize_q8_1_f16(const uint8_t *w, __half *y, unsigned long long count) {
    qmv_dequantize_q8_1<__half>(w, y, count);
}

// =============================================================================================
// Weights dequantized to f16 for the GEMM path of 9 or more rows (candle-rocm's `mat_mat_f16`),
// for the types of the mat-vec kernels. candle-kernels' `dequantize_block_*_f16` run 32-thread
// blocks that store 2 bytes at a time: 41 us for 4096x4096 q4_0 on the H100 via HIP-on-CUDA
// (2026-11-25, Nsight Compute), two thirds of a 16-row product. Here a thread makes a piece of 8
// consecutive values and stores them as one 16-byte word:
//   qmv_dequantize_<T>_f16(const uint8_t *w, __half *y, unsigned long long pieces)
//     values [8 i, 8 i + 8) of the blocks at w into y for every piece i < pieces (pieces =
//     values / 8, whole blocks: 4 pieces per 32-value block, 32 per super-block); w 2-byte
//     aligned, y 16-byte aligned; any block size and grid (a grid-stride loop). Each value is
//     computed in f32 as candle-core's CPU `to_float` computes it (q4_0: (q - 8) d; q4_1:
//     q d + m; q8_0: q d; q4_K / q5_K: (d sc) q - (dmin m); q6_K: (d s) (q - 32)), then rounded
//     to f16 (to nearest even).

// The f16 at p (2-byte aligned), as f32.
__device__ __forceinline__ float qmv_half_at(const uint8_t *p) {
    return qmv_half((uint32_t)p[0] | (uint32_t)p[1] << 8);
}

struct Q4_0d {
    static constexpr unsigned PIECES = 4;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * 18;
        const unsigned p = (unsigned)(i % PIECES);
        const float d = qmv_half_at(blk);
        const uint8_t *qs = blk + 2 + 8 * (p & 1);
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const int q = p < 2 ? qs[l] & 15 : qs[l] >> 4;
            v[l] = (float)(q - 8) * d;
        }
    }
};

struct Q4_1d {
    static constexpr unsigned PIECES = 4;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * 20;
        const unsigned p = (unsigned)(i % PIECES);
        const float d = qmv_half_at(blk), m = qmv_half_at(blk + 2);
        const uint8_t *qs = blk + 4 + 8 * (p & 1);
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const int q = p < 2 ? qs[l] & 15 : qs[l] >> 4;
            v[l] = (float)q * d + m;
        }
    }
};

struct Q8_0d {
    static constexpr unsigned PIECES = 4;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * 34;
        const unsigned p = (unsigned)(i % PIECES);
        const float d = qmv_half_at(blk);
#pragma unroll
        for (int l = 0; l < 8; ++l) v[l] = (float)(int8_t)blk[2 + 8 * p + l] * d;
    }
};

// q5_0 = { f16 d; u8 qh[4]; u8 qs[16] } (22 bytes; value j < 16 = ((qs[j] & 15) | (bit j of
// qh) << 4) - 16) d, value j + 16 likewise from qs[j] >> 4 and bit j + 16 of qh, qh little
// endian) and q5_1 = { f16 d; f16 m; u8 qh[4]; u8 qs[16] } (24 bytes; value = q d + m, no
// offset), as candle-core's CPU `to_float` computes them: the f16 GEMM path's dequantize and
// the tiled kernels' pieces (the mat-vec reads them with Q5 above).
template <bool MIN> struct Q5d {
    static constexpr unsigned PIECES = 4;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * (MIN ? 24 : 22);
        const unsigned p = (unsigned)(i % PIECES), j0 = 8 * (p & 1), hi = p < 2 ? 0 : 16;
        const float d = qmv_half_at(blk), m = MIN ? qmv_half_at(blk + 2) : 0.0f;
        const uint8_t *h = blk + (MIN ? 4 : 2);
        const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        const uint8_t *qs = h + 4 + j0;
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const int q = (p < 2 ? qs[l] & 15 : qs[l] >> 4) | (int)((qh >> (hi + j0 + l)) & 1) << 4;
            v[l] = MIN ? (float)q * d + m : (float)(q - 16) * d;
        }
    }
};

// q4_K (QH false) and q5_K (QH true): piece t of a super-block holds values 8t .. 8t + 8, all
// in sub-block j = 2c + (i0 >= 32) for c = 8t / 64, i0 = 8t % 64 (see the header's layouts).
template <bool QH> struct QK45d {
    static constexpr unsigned PIECES = 32;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * (QH ? 176 : 144);
        const unsigned t = (unsigned)(i % PIECES), c = t / 8, i0 = 8 * t % 64, l0 = i0 % 32;
        const unsigned j = 2 * c + (i0 >= 32 ? 1 : 0);
        const uint8_t *s = blk + 4;
        const unsigned sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        const unsigned mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        const float d1 = qmv_half_at(blk) * (float)sc, m1 = qmv_half_at(blk + 2) * (float)mn;
        const uint8_t *qs = blk + (QH ? 48 : 16) + 32 * c + l0;
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            unsigned q = i0 < 32 ? qs[l] & 15 : qs[l] >> 4;
            if (QH) q += ((blk[16 + l0 + l] >> j) & 1) << 4;
            v[l] = d1 * (float)q - m1;
        }
    }
};

// q6_K: piece t holds values 8t .. 8t + 8: half h = t / 16, group g = t / 4 % 4, l0 = 8 (t % 4).
struct Q6Kd {
    static constexpr unsigned PIECES = 32;
    __device__ __forceinline__ static void piece(const uint8_t *w, unsigned long long i, float v[8]) {
        const uint8_t *blk = w + (i / PIECES) * 210;
        const unsigned t = (unsigned)(i % PIECES), h = t / 16, g = t / 4 % 4, l0 = 8 * (t % 4);
        const float d = qmv_half_at(blk + 208);
        const float ds = d * (float)(int8_t)blk[192 + 8 * h + l0 / 16 + 2 * g];
        const uint8_t *ql = blk + 64 * h + 32 * (g & 1) + l0, *qh = blk + 128 + 32 * h + l0;
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const int q = (g < 2 ? ql[l] & 15 : ql[l] >> 4) | ((qh[l] >> (2 * g)) & 3) << 4;
            v[l] = ds * (float)(q - 32);
        }
    }
};

template <typename D>
__device__ __forceinline__ void qmv_dequantize_f16(const uint8_t *__restrict__ w, __half *__restrict__ y,
                                                   unsigned long long pieces) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < pieces; i += stride) {
        float v[8];
        D::piece(w, i, v);
        uint32_t h[8];
#pragma unroll
        for (int l = 0; l < 8; ++l) h[l] = __half_as_ushort(__float2half_rn(v[l]));
        uint4 out;
        out.x = h[0] | h[1] << 16;
        out.y = h[2] | h[3] << 16;
        out.z = h[4] | h[5] << 16;
        out.w = h[6] | h[7] << 16;
        *reinterpret_cast<uint4 *>(y + 8 * i) = out;
    }
}

#define QMV_DEQUANTIZE_F16(T, D)                                                                   \
    extern "C" __global__ void qmv_dequantize_##T##_f16(const uint8_t *w, __half *y,               \
                                                        unsigned long long pieces) {               \
        qmv_dequantize_f16<D>(w, y, pieces);                                                       \
    }
QMV_DEQUANTIZE_F16(q4_0, Q4_0d)
QMV_DEQUANTIZE_F16(q4_1, Q4_1d)
QMV_DEQUANTIZE_F16(q8_0, Q8_0d)
QMV_DEQUANTIZE_F16(q4_K, QK45d<false>)
QMV_DEQUANTIZE_F16(q5_K, QK45d<true>)
QMV_DEQUANTIZE_F16(q6_K, Q6Kd)
QMV_DEQUANTIZE_F16(q5_0, Q5d<false>)
QMV_DEQUANTIZE_F16(q5_1, Q5d<true>)
