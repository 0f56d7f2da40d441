// qmatvec/common.h - part of qmatvec.hip (see its header for layouts, work split and alignment),
// included by it in order, never on its own: the configuration (wave size, row groups, tuning
// knobs) and the helpers every family uses: shuffles, x loads, weight-word reads, the per-type
// block dot products.

#include "cuda_fp16.h"
#include <stdint.h>

#if defined(__HIP_DEVICE_COMPILE__)
#define QMV_WAVE __AMDGCN_WAVEFRONT_SIZE__
#else
#define QMV_WAVE 32
#endif

#define QMV_GROUP 32
// Rows per group and the unroll of the block loop: tuning knobs (candle-rocm's launch assumes
// QMV_ROWS = 16, so another QMV_R only changes how the grid-stride loop splits the rows).
#ifndef QMV_R
#define QMV_R 2
#endif
#ifndef QMV_UNROLL
#define QMV_UNROLL 1
#endif
#define QMV_PRAGMA(x) _Pragma(#x)
#define QMV_UNROLL_LOOP(n) QMV_PRAGMA(unroll n)
#define QMV_BLOCK 256
#define QMV_ROWS (QMV_BLOCK / QMV_GROUP * QMV_R)
#define QMV_BL 4                      // lanes per 32-value block
#define QMV_BV (32 / QMV_BL)          // values per lane
#define QMV_BS (QMV_GROUP / QMV_BL)   // blocks per group step

#if QMV_WAVE % QMV_GROUP != 0
#error "the wave size must be a multiple of the row group"
#endif

// ---------------------------------------------------------------------------------------------
// Helpers.

// xor shuffle inside the wave (masks below QMV_GROUP keep it inside the 32-lane group).
__device__ __forceinline__ float qmv_shfl_xor(float v, int mask) {
#if defined(__HIP_DEVICE_COMPILE__)
    int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return __int_as_float(__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __float_as_int(v)));
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// The 32 bits at byte offset `shift / 8` of the little-endian pair (lo, hi); shift in 0..32.
__device__ __forceinline__ uint32_t qmv_funnel(uint32_t lo, uint32_t hi, uint32_t shift) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> shift);
}

// Where a lane's blocks of one row are read: the 4-byte-aligned word at or below the block's
// start and the block's offset from it (0 or 2 bytes). The blocks of one group step span
// STEP * BYTES bytes, a multiple of 4 for every type and step here, so the offset is the same
// at every step and the word pointer advances by a constant: the address and realignment
// arithmetic stays out of the block loop (it took about a quarter of the loop's instructions).
// A row past n reads row `first_row` instead (the callers pass the group's first row, which
// exists), so the loop has no per-row branch; its sum is never stored.
struct QmvRow {
    const uint32_t *p;
    uint32_t phase;
};
template <uint32_t BYTES, uint32_t STEP>
__device__ __forceinline__ QmvRow qmv_row(const uint8_t *w, size_t row, size_t row_bytes, unsigned first) {
    static_assert(STEP * BYTES % 4 == 0, "a step must cover whole words");
    const size_t off = row * row_bytes + (size_t)first * BYTES;
    const uint32_t phase = (uint32_t)(off & 2);
    return QmvRow{reinterpret_cast<const uint32_t *>(w + (off - phase)), phase};
}

__device__ __forceinline__ float qmv_half(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
}

// The end of a row-group step: each of the QMV_R x M sums, spread over the group's 32 lanes,
// is reduced with the xor butterfly (every lane ends with every sum, each added in the same
// order whatever M is) and lane 0 stores sum (r, j) at y[j n + r0 + r]; rows past n are not
// stored.
template <unsigned M>
__device__ __forceinline__ void qmv_store(float (&acc)[QMV_R][M], unsigned lane, float *__restrict__ y,
                                          unsigned n, size_t r0) {
#pragma unroll
    for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
        for (unsigned j = 0; j < M; ++j) {
#pragma unroll
            for (int m = QMV_GROUP / 2; m > 0; m >>= 1) acc[r][j] += qmv_shfl_xor(acc[r][j], m);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
            for (unsigned j = 0; j < M; ++j)
                if (r0 + r < n) y[(size_t)j * n + r0 + r] = acc[r][j];
        }
    }
}

// The QMV_BV x values of a part: runs of 4 at p and p + gap (p 16-byte aligned when V).
template <bool V> __device__ __forceinline__ void qmv_load_x8(const float *p, unsigned gap, float xs[QMV_BV]) {
    if (V) {
        const float4 a = *reinterpret_cast<const float4 *>(p);
        const float4 b = *reinterpret_cast<const float4 *>(p + gap);
        xs[0] = a.x; xs[1] = a.y; xs[2] = a.z; xs[3] = a.w;
        xs[4] = b.x; xs[5] = b.y; xs[6] = b.z; xs[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            xs[i] = p[i];
            xs[4 + i] = p[gap + i];
        }
    }
}

// Byte I of q as a float (0..255, exact). On AMD the shift-and-convert is one
// v_cvt_f32_ubyte<I>. On NVIDIA integer-to-float conversions issue at a quarter of the FP32
// rate (16 per SM clock on sm_90) and bound the mat-vec kernels, so the byte is placed in the
// mantissa of 2^23 instead (one byte permute) and 2^23 subtracted: 2^23 + b is exact for
// b < 2^23.
template <int I> __device__ __forceinline__ float qmv_byte(uint32_t q) {
#if defined(__HIP_DEVICE_COMPILE__)
    return (float)((q >> (8 * I)) & 255u);
#else
    return __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7540u + I)) - 8388608.0f;
#endif
}

// s += sum over the 4 bytes of q (unsigned) times xs[0..4) (byte i with xs[i]).
__device__ __forceinline__ void qmv_bytes(uint32_t q, const float *xs, float &s) {
    s += qmv_byte<0>(q) * xs[0];
    s += qmv_byte<1>(q) * xs[1];
    s += qmv_byte<2>(q) * xs[2];
    s += qmv_byte<3>(q) * xs[3];
}

// s += the low nibbles of the 4 bytes of q times xl[0..4) plus their high nibbles times
// xh[0..4) (byte i with xl[i] and xh[i]).
__device__ __forceinline__ void qmv_nibbles(uint32_t q, const float *xl, const float *xh, float &s) {
    qmv_bytes(q & 0x0f0f0f0fu, xl, s);
    qmv_bytes((q >> 4) & 0x0f0f0f0fu, xh, s);
}

// Per-type block dot products: part t (0..QMV_BL) of the block at byte offset `off` of `w`
// against that part's QMV_BV x values xs (first run of 4 at X_STEP t of the block, the second
// X_GAP further) whose sum is xsum.

struct Q4_0 {
    static constexpr uint32_t BYTES = 18, X_STEP = 4, X_GAP = 16;
    static constexpr bool NEEDS_XSUM = true;
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_BV], float xsum) {
        const float d = qmv_half(p[0] >> (phase * 8));
        // qs word t sits at byte phase + 2 + 4t of p: word t at bit 16, or word t + 1 whole.
        const uint32_t i = t + phase / 2, sh = 16 - phase * 8;
        const uint32_t q = qmv_funnel(p[i], p[i + 1], sh);
        float s = 0.0f;
        qmv_nibbles(q, xs, xs + 4, s);
        // sum (nibble - 8) x = sum nibble x - 8 sum x
        return d * (s - 8.0f * xsum);
    }
};

struct Q4_1 {
    static constexpr uint32_t BYTES = 20, X_STEP = 4, X_GAP = 16;
    static constexpr bool NEEDS_XSUM = true;
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_BV], float xsum) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t dm = p[0], q = p[1 + t];
        float s = 0.0f;
        qmv_nibbles(q, xs, xs + 4, s);
        return qmv_half(dm) * s + qmv_half(dm >> 16) * xsum;
    }
};

struct Q8_0 {
    static constexpr uint32_t BYTES = 34, X_STEP = 8, X_GAP = 4;
    static constexpr bool NEEDS_XSUM = true;
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_BV], float xsum) {
        const float d = qmv_half(p[0] >> (phase * 8));
        // qs bytes 8t .. 8t + 8 sit at byte phase + 2 + 8t of p.
        const uint32_t i = 2 * t + phase / 2, sh = 16 - phase * 8;
        const uint32_t a = p[i], b = p[i + 1], c = p[i + 2];
        const uint32_t v[2] = {qmv_funnel(a, b, sh), qmv_funnel(b, c, sh)};
        // The signed bytes offset by 128 (bit 7 flipped) are unsigned: sum q x = sum (q + 128)
        // x - 128 sum x.
        float s = 0.0f;
        qmv_bytes(v[0] ^ 0x80808080u, xs, s);
        qmv_bytes(v[1] ^ 0x80808080u, xs + 4, s);
        return d * (s - 128.0f * xsum);
    }
};

// The 4 bits h (bit i for byte i) as bit 4 of each byte: the fifth bit of 4 q5 quants. The
// multiplier's terms (h, h << 7, h << 14, h << 21) do not overlap, so bit i lands at bit 8i.
__device__ __forceinline__ uint32_t qmv_high4(uint32_t h) { return ((h * 0x00204081u) & 0x01010101u) << 4; }

// q5_0 and q5_1 (see Q5d below for the layouts): part t takes qs word t like q4_0 / q4_1, the
// fifth bits of its low-nibble values from bits 4t .. 4t + 4 of qh and of its high-nibble
// values from bits 16 + 4t .. 16 + 4t + 4. q5_0 blocks (22 bytes) start at 0 or 2 mod 4 like
// q4_0's: qh at byte phase + 2 of p, qs word t at phase + 6 + 4t; the last part reads up to
// 4 bytes past its block (inside the MATRIX_ROW_PADDING after the last one).
template <bool MIN> struct Q5 {
    static constexpr uint32_t BYTES = MIN ? 24 : 22, X_STEP = 4, X_GAP = 16;
    static constexpr bool NEEDS_XSUM = true;
    // The block's qh word (its fifth bits).
    __device__ __forceinline__ static uint32_t high_bits(const uint32_t *p, uint32_t phase) {
        if (MIN) {
            (void)phase; // word-aligned blocks: always 0
            return p[1];
        }
        return qmv_funnel(p[0], p[1], 16 + phase * 8);
    }
    // Part t's 4 low-nibble and 4 high-nibble quants as bytes, their fifth bits from qh added.
    __device__ __forceinline__ static void quants(const uint32_t *p, uint32_t phase, uint32_t qh, unsigned t,
                                                  uint32_t &lo, uint32_t &hi) {
        uint32_t q;
        if (MIN) {
            q = p[2 + t];
        } else {
            const uint32_t i = 1 + t + phase / 2, sh = 16 - phase * 8;
            q = qmv_funnel(p[i], p[i + 1], sh);
        }
        lo = (q & 0x0f0f0f0fu) | qmv_high4((qh >> (4 * t)) & 15u);
        hi = ((q >> 4) & 0x0f0f0f0fu) | qmv_high4((qh >> (16 + 4 * t)) & 15u);
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t,
                                                const float xs[QMV_BV], float xsum) {
        uint32_t lo, hi;
        quants(p, phase, high_bits(p, phase), t, lo, hi);
        float s = 0.0f;
        qmv_bytes(lo, xs, s);
        qmv_bytes(hi, xs + 4, s);
        if (MIN) return qmv_half(p[0]) * s + qmv_half(p[0] >> 16) * xsum;
        // sum (q - 16) x = sum q x - 16 sum x
        return qmv_half(p[0] >> (phase * 8)) * (s - 16.0f * xsum);
    }
};
