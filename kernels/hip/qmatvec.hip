// qmatvec.hip - quantized matrix-vector products for GGUF decode: y = W x for one f32 row x of
// k values and weights W of n rows stored as GGML blocks (q4_0, q4_1, q5_0, q5_1, q8_0 of 32
// values; q4_K, q5_K, q6_K super-blocks of 256 values), f32 math; and, at the end of the file, the
// same products on x rounded to 8 bits (qmatvec8_*, candle-rocm's CANDLE_ROCM_QMATVEC=q8).
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus a few AMD builtins
// behind __HIP_DEVICE_COMPILE__, so the same file builds for AMD (clang, kernels/include
// headers) and for the HIP-on-CUDA harness (nvcc with CUDA's own headers).
//
// Block layouts (GGML, little endian, packed; 32 values per block, a row is k / 32 blocks):
//   q4_0 = { f16 d; u8 qs[16] }          18 bytes, value j = ((qs[j] & 15) - 8) * d,
//                                                   value j + 16 = ((qs[j] >> 4) - 8) * d
//   q4_1 = { f16 d; f16 m; u8 qs[16] }   20 bytes, value = nibble * d + m (same nibble order)
//   q8_0 = { f16 d; i8 qs[32] }          34 bytes, value j = qs[j] * d
//   q5_0 / q5_1: see Q5d (a fifth bit per value in a 32-bit qh word before the q4 nibbles)
// Super-block layouts (256 values per super-block, a row is k / 256 super-blocks):
//   q4_K = { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }             144 bytes
//   q5_K = { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }  176 bytes
//     8 sub-blocks of 32 values, each with a 6-bit scale sc[j] and min m[j] packed in scales[]:
//     j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: sc = (scales[j + 4] & 15) |
//     (scales[j - 4] >> 6) << 4, m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. Chunk c
//     (0..4) of 64 values holds sub-blocks 2c and 2c + 1: for i < 32, value 64c + i =
//     d sc[2c] q - dmin m[2c] with q = qs[32c + i] & 15 (+ 16 if bit 2c of qh[i], q5_K), value
//     64c + 32 + i = d sc[2c + 1] q - dmin m[2c + 1] with q = qs[32c + i] >> 4 (+ 16 if bit
//     2c + 1 of qh[i]).
//   q6_K = { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }            210 bytes
//     halves h (0..2) of 128 values; for l < 32, with a = ql[64h + l], b = ql[64h + 32 + l],
//     e = qh[32h + l], s = scales + 8h + l / 16: value 128h + l + 32g = d s[2g] (q - 32) with
//     q = (a & 15 | (e & 3) << 4, b & 15 | (e >> 2 & 3) << 4, a >> 4 | (e >> 4 & 3) << 4,
//     b >> 4 | (e >> 6 & 3) << 4) for g = 0, 1, 2, 3.
//
// Work split. A group of QMV_GROUP (32) lanes computes QMV_R (2) output rows. QMV_BL (4) lanes
// share a 32-value block, QMV_BV (8) values each: lane l takes part t = l % 4 of the blocks
// l / 4, l / 4 + 8, ... (QMV_BS = 8 blocks per group step), so the parts of a block read its
// quants back to back, a step's 8 blocks are adjacent, and x is read in 16-byte pieces that
// neighbouring lanes take side by side (not 128 bytes per lane at a 128-byte stride, which
// made every x load touch 32 cache lines):
//   q4_0 / q4_1 / q5_0 / q5_1 part t: the qs word t (bytes 4t .. 4t + 4): values 4t + [0, 4)
//     from the low nibbles and 16 + 4t + [0, 4) from the high ones (x runs of 4 at 4t and
//     16 + 4t; q5's fifth bits from qh);
//   q8_0 part t: qs bytes 8t .. 8t + 8: values 8t + [0, 8) (x runs of 4 at 8t and 8t + 4).
// A lane loads its x values once per step and uses them for both rows, accumulates in f32
// (q4 offsets and mins, and q8_0's +128 byte offset, applied through the sum of its x
// values), and the group's partial sums are reduced with xor shuffles inside the 32 lanes
// (ds_bpermute on AMD, so a wave of 64 holds two independent groups; the wave size QMV_WAVE
// is a compile-time constant, 32 or 64, and nothing assumes either). A block of QMV_BLOCK
// (256) threads has 8 groups, so QMV_ROWS (16) rows; blocks visit rows with a block-uniform
// grid-stride loop, so every lane reaches every shuffle; rows past n are computed as zero and
// not written.
//
// The k-quant kernels keep that split (same groups, rows per group, block and grid) but share
// a super-block among QMV_KL (16) lanes of QMV_KV (16) values each: lane l takes part
// t = l % 16 of the super-blocks l / 16, l / 16 + 2, ... (QMV_KS = 2 super-blocks per group
// step), so the parts of a super-block read its quants back to back and the 2 super-blocks of
// a step are adjacent. (QMV_KL 8, 32 values per lane, also works, but takes about 115-120
// VGPRs where 16 takes 80-95; -DQMV_KL=8 selects it.)
//   q4_K / q5_K part t: chunk c = t / 4, i0 = 8 (t % 4): the 8 bytes qs[8t .. 8t + 8) (and
//     qh[i0 .. i0 + 8) for q5_K): values 64c + i0 + [0, 8) (low nibbles, sub-block 2c) and
//     64c + 32 + i0 + [0, 8) (high nibbles, sub-block 2c + 1).
//   q6_K part t: half h = t / 8, l0 = 4 (t % 8): the 4 bytes of ql at 64h + l0, of ql at
//     64h + 32 + l0 and of qh at 32h + l0; values 128h + l0 + 32g + [0, 4) for g = 0..4 (one
//     scale each, s[2g] with s = scales + 8h + l0 / 16).
// So a part's x values are runs of 8 (4 for q6_K) contiguous floats 32 apart, 16-byte aligned
// when x is. Quants are summed as unsigned integers against x and the scales, mins and
// offsets (-32 for q6_K) applied per run: d sc sum(q x) - dmin m sum(x) and
// d s (sum(q x) - 32 sum(x)), the x sums shared by both rows.
//
// Loads. Weight blocks are read as 32-bit words from the 4-byte-aligned address at or below
// the block's start: q4_1 / q5_1 blocks (20, 24 bytes) and q4_K / q5_K super-blocks (144, 176)
// are always word aligned; q4_0 (18), q5_0 (22), q8_0 (34) and q6_K (210) blocks start at 0 or
// 2 mod 4, and the words are realigned with a funnel shift (one v_alignbit per word on AMD).
// That reads up to 2 bytes before a block (inside the previous block, never before the buffer:
// the first block is aligned) and up to 4 bytes after the last one (q4_0, q5_0 and q8_0's last
// part reads one word
// past its bytes; inside candle-rocm's MATRIX_ROW_PADDING of zeroed blocks, at least 288
// bytes). x is read as float4 in the _v kernels (x 16-byte aligned), as floats
// otherwise.
//
// Kernels (T in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K; the 8-bit ones below for all
// of them):
//   qmatvec_<T>(const uint8_t* w, const float* x, float* y, unsigned n, unsigned nb)
//   qmatvec_<T>_v(same)
//     w: n rows of nb blocks each (nb = k / 32 for q4_0, q4_1, q8_0; nb = k / 256
//     super-blocks for q4_K, q5_K, q6_K), back to back, 4-byte aligned, readable 2 bytes past
//     the end; x: k floats (16-byte aligned for _v); y: n floats. Launch with QMV_BLOCK
//     threads in x (blockDim (256, 1, 1)) and any grid (candle-rocm uses
//     min(ceil(n / QMV_ROWS), 2^20) blocks); the same for every type.
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

// ---------------------------------------------------------------------------------------------
// QMV_PARTS (1 by default) gives a lane that many consecutive parts of a block (a tuning knob).
#ifndef QMV_PARTS
#define QMV_PARTS 1
#endif
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
            QMV_UNROLL_LOOP(QMV_UNROLL)
            for (unsigned b = first; b < nb; b += STEP) {
#pragma unroll
                for (unsigned pp = 0; pp < QMV_PARTS; ++pp) {
                    const unsigned part = t * QMV_PARTS + pp;
                    // x row j's values of this part against both weight rows (the weight
                    // words are the same loads for every j).
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
                        for (int r = 0; r < QMV_R; ++r)
                            acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
                    }
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += STEP * Q::BYTES / 4;
            }
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
                    for (int r = 0; r < QMV_R; ++r)
                        acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, xs, xsum);
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += QMV_KS * Q::BYTES / 4;
            }
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

// =============================================================================================
// 8-bit activations (CANDLE_ROCM_QMATVEC=q8): x is first quantized per 32-value block to
// Candle CUDA's q8_1 (candle-kernels' quantize_q8_1: d = amax / 127, q = round(x / d), d and the
// f32 sum of the block's x values kept as f16), then the kernels multiply 4 bytes at a time with
// 32-bit integer accumulation (`__dp4a`: dp4a on NVIDIA, v_dot4_i32_i8 / v_dot4_i32_iu8 on AMD
// where the target has them, 4 multiplies elsewhere) and apply the scales once per block part,
// in the f32 expressions of candle-kernels' vec_dot_*_q8_1_impl (q4_0, q4_1, q5_0 and q5_1 take
// the f16 x sum, the k-quants the integer sum of q). Against the f32 kernels above this reads a quarter
// of the x bytes and does 4 multiply-adds per instruction; the weights' math is exact in
// integers, and the result is Candle CUDA's quantized product up to the order of the f32 sums
// (for q4_0 and q4_1 rows of up to 512 values, that order too).
//
// x8 layout, for k values (k a multiple of 32, nx = k / 32 blocks): k signed bytes q, then at
// byte k nx pairs of 32-bit words (f16 d in the low half and f16 sum(x) in the high half of the
// first, as block_q8_1's ds; the i32 sum of the block's q).
// A row takes QMV8_ROW_BYTES(k) = 40 nx bytes; rows of a batch follow one another.
//
// Kernels:
//   qmv_quantize_x8(const float *x, uint8_t *x8, unsigned k): x8 row blockIdx.y from x row
//     blockIdx.y (k floats each, contiguous); blockDim (QMV_BLOCK), grid (ceil(k / QMV_BLOCK),
//     rows). Lane i of a 32-lane group takes value i of a block.
//   qmatvec8_<T>(const uint8_t *w, const uint8_t *x8, float *y, unsigned n, unsigned nb):
//     y = W x for one x8 row (k = nb * block values); w as for qmatvec_<T> (4-byte aligned,
//     16-byte aligned for q4_K and q5_K, whose super-block heads load as 16 bytes; readable 2
//     bytes before a block and 4 past the last); x8 8-byte aligned (candle-rocm allocates both
//     whole, so 256-byte aligned). Launch as qmatvec_<T>. Work split as qmatvec_<T>
//     (a part reads the same quants and its x bytes are the same runs), except that a lane
//     takes QMV8_PARTS (2) consecutive parts of a 32-value block, so 2 lanes share a block and a
//     group step covers 16 blocks (on the H100 via HIP-on-CUDA, 2026-11-23: q4_0 at 4096x32000
//     1915 GB/s against 1611 with 4 lanes), q8_0 all 4 (QMV8_PARTS_Q8_0: one lane per block,
//     2468 GB/s against 2220 with 2 parts, 2026-11-24), q5_0 / q5_1 too (QMV8_PARTS_Q5); q4_K
//     and q5_K 2 parts on NVIDIA, one on AMD (QMV8_KPARTS), q6_K one (QMV8_KPARTS_Q6K).
#define QMV8_ROW_BYTES(k) ((k) / 32 * 40)

// 4 signed (or, for the weights, small unsigned) bytes of a times those of b, plus c.
__device__ __forceinline__ int qmv_dot4(uint32_t a, uint32_t b, int c) {
    return __dp4a((int)a, (int)b, c);
}

__device__ __forceinline__ float qmv_shfl_xor_max(float v, int mask) {
    return fmaxf(v, qmv_shfl_xor(v, mask));
}

extern "C" __global__ void __launch_bounds__(QMV_BLOCK)
    qmv_quantize_x8(const float *__restrict__ x, uint8_t *__restrict__ x8, unsigned k) {
    const size_t row = blockIdx.y;
    const unsigned i = blockIdx.x * QMV_BLOCK + threadIdx.x; // k % 32 == 0: whole groups idle
    const bool live = i < k;
    const float v = live ? x[row * k + i] : 0.0f;
    // amax over the 32 lanes (fmaxf ignores a NaN) and the f32 sum of the values, both with
    // the xor butterfly of Candle's warp_reduce_max / warp_reduce_sum (masks 16, 8, 4, 2, 1).
    float amax = fabsf(v), xsum = v;
#pragma unroll
    for (int m = QMV_GROUP / 2; m > 0; m >>= 1) {
        amax = qmv_shfl_xor_max(amax, m);
        xsum += qmv_shfl_xor(xsum, m);
    }
    const float d = amax / 127.0f;
    // q = round(x / d), a true division as Candle's quantize_q8_1 (not x times 1 / d).
    const float r = amax == 0.0f ? 0.0f : roundf(v / d);
    // NaN to 0 and saturating (|r| <= 127 whenever amax is finite).
    const int q = r != r ? 0 : (int)fminf(fmaxf(r, -128.0f), 127.0f);
    float sum = (float)q; // sums of at most 32 bytes: exact in f32
#pragma unroll
    for (int m = QMV_GROUP / 2; m > 0; m >>= 1) sum += qmv_shfl_xor(sum, m);
    if (live) {
        uint8_t *base = x8 + row * (size_t)QMV8_ROW_BYTES(k);
        base[i] = (uint8_t)(int8_t)q;
        if (i % 32 == 0) {
            uint32_t *ds = reinterpret_cast<uint32_t *>(base + k) + 2 * (i / 32);
            const uint32_t dh = __half_as_ushort(__float2half_rn(d));
            const uint32_t sh = __half_as_ushort(__float2half_rn(xsum));
            ds[0] = dh | sh << 16;
            ds[1] = (uint32_t)(int)sum;
        }
    }
}

// The x side of a block part, loaded once per step and shared by the rows: the bytes of the
// part's runs and per-run scale terms.
struct Q8x {
    uint32_t q[8]; // up to 32 bytes
    float d[4];    // d of the run's x block
    float o[4];    // per-type offset term (see the dots)
    int c[4];      // per-type integer start of the run's dot
};

__device__ __forceinline__ const uint32_t *qmv8_ds(const uint8_t *x8, unsigned k, unsigned blk) {
    return reinterpret_cast<const uint32_t *>(x8 + k) + 2 * blk;
}

// The block's d (an f16 value) and the f16-rounded f32 sum of its x values.
__device__ __forceinline__ float qmv8_d(const uint32_t *ds) { return qmv_half(ds[0]); }
__device__ __forceinline__ float qmv8_xsum(const uint32_t *ds) { return qmv_half(ds[0] >> 16); }

// q4_0 and q4_1 take a lane's P consecutive parts t0 .. t0 + P of a block together (JOINT), as
// one of Candle's CUDA mat-vec threads takes VDR_Q4_*_Q8_1_MMVQ (2) ints of a block: one
// integer dot over the P parts, then the scales in the f32 expression of candle-kernels'
// vec_dot_q4_0_q8_1_impl / vec_dot_q4_1_q8_1_impl, so that with P = 2 every partial sum and
// the lanes' xor reduction match Candle CUDA's for k up to 512 (bit for bit, before the
// reduction over more than one warp that its kernel makes for longer rows).
struct Q4_0x8 {
    static constexpr uint32_t BYTES = 18;
    static constexpr bool JOINT = true;
    // Parts t0 .. t0 + P: x words t0 + i (low nibbles) and 4 + t0 + i (high nibbles) of block b.
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        const uint32_t *xq = reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)b);
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            x.q[i] = xq[t0 + i];
            x.q[P + i] = xq[4 + t0 + i];
        }
        const uint32_t *ds = qmv8_ds(x8, k, b);
        x.d[0] = qmv8_d(ds);
        x.o[0] = qmv8_xsum(ds);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        const float d = qmv_half(p[0] >> (phase * 8));
        const uint32_t sh = 16 - phase * 8;
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            const uint32_t w = t0 + i + phase / 2;
            const uint32_t q = qmv_funnel(p[w], p[w + 1], sh);
            s = qmv_dot4(q & 0x0f0f0f0fu, x.q[i], s);
            s = qmv_dot4((q >> 4) & 0x0f0f0f0fu, x.q[P + i], s);
        }
        // sum (nibble - 8) x = d8 sum nibble q - 8 sum x, P / 4 of the offset per call.
        return d * ((float)s * x.d[0] - (float)(8 * P / 4) * x.o[0]);
    }
};

struct Q4_1x8 {
    static constexpr uint32_t BYTES = 20;
    static constexpr bool JOINT = true;
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        Q4_0x8::load_xn<P>(x8, k, b, t0, x);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t dm = p[0];
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            const uint32_t q = p[1 + t0 + i];
            s = qmv_dot4(q & 0x0f0f0f0fu, x.q[i], s);
            s = qmv_dot4((q >> 4) & 0x0f0f0f0fu, x.q[P + i], s);
        }
        // d d8 and m sum(x) in f32 (candle-kernels builds without GGML_CUDA_F16); P / 4 of the
        // min term per call.
        const float dd = qmv_half(dm) * x.d[0], ms = qmv_half(dm >> 16) * x.o[0];
        return (float)s * dd + ms / (float)(4 / P);
    }
};

// q5_0 (MIN false) and q5_1 (MIN true), parts t0 .. t0 + P like Q4_0x8 / Q4_1x8 (the same x
// words): each part's quants as Q5 above reads them (Q5::quants), one integer dot
// over the P parts, then the f32 expressions of candle-kernels' vec_dot_q5_0_q8_1_impl
// (d (d8 sum q x - 16 P / 4 sum x)) and vec_dot_q5_1_q8_1_impl (d d8 sum q x + m sum x P / 4).
template <bool MIN> struct Q5x8 {
    static constexpr uint32_t BYTES = MIN ? 24 : 22;
    static constexpr bool JOINT = true;
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        Q4_0x8::load_xn<P>(x8, k, b, t0, x);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        const uint32_t qh = Q5<MIN>::high_bits(p, phase);
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            uint32_t lo, hi;
            Q5<MIN>::quants(p, phase, qh, t0 + i, lo, hi);
            s = qmv_dot4(lo, x.q[i], s);
            s = qmv_dot4(hi, x.q[P + i], s);
        }
        if (MIN) {
            const float dd = qmv_half(p[0]) * x.d[0], ms = qmv_half(p[0] >> 16) * x.o[0];
            return (float)s * dd + ms / (float)(4 / P);
        }
        const float d = qmv_half(p[0] >> (phase * 8));
        return d * ((float)s * x.d[0] - (float)(16 * P / 4) * x.o[0]);
    }
};

struct Q8_0x8 {
    static constexpr uint32_t BYTES = 34;
    static constexpr bool JOINT = false;
    // Part t: bytes 8t .. 8t + 8 of x block b.
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const uint32_t *xq = reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)b);
        x.q[0] = xq[2 * t];
        x.q[1] = xq[2 * t + 1];
        x.d[0] = qmv8_d(qmv8_ds(x8, k, b));
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        const float d = qmv_half(p[0] >> (phase * 8));
        const uint32_t i = 2 * t + phase / 2, sh = 16 - phase * 8;
        const uint32_t a = p[i], b = p[i + 1], c = p[i + 2];
        int s = qmv_dot4(qmv_funnel(a, b, sh), x.q[0], 0);
        s = qmv_dot4(qmv_funnel(b, c, sh), x.q[1], s);
        return d * x.d[0] * (float)s;
    }
};

// q4_K (QH false) and q5_K (QH true) with QMV_KL = 16 lanes per super-block: part t, chunk
// c = t / 4, i0 = 8 (t % 4): 8 quants bytes (low nibbles: x block 2c of the super-block,
// bytes i0 .. i0 + 8; high nibbles: x block 2c + 1, same bytes).
template <bool QH> struct QK45x8 {
    static constexpr uint32_t BYTES = QH ? 176 : 144;
    static constexpr bool JOINT = false;
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const unsigned c = t / 4, i0 = 8 * (t % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned blk = 8 * b + 2 * c + h;
            // 8-byte loads: the quants at 8 (t % 4) of a 32-byte block, the (ds, sum) pair.
            const uint2 xq = *reinterpret_cast<const uint2 *>(x8 + 32 * (size_t)blk + i0);
            x.q[2 * h] = xq.x;
            x.q[2 * h + 1] = xq.y;
            const uint2 ds = *reinterpret_cast<const uint2 *>(qmv8_ds(x8, k, blk));
            x.d[h] = qmv_half(ds.x);
            // dmin m sum(x) over the block's 4 parts: a quarter of d sum(q) per part.
            x.o[h] = 0.25f * x.d[h] * (float)(int)ds.y;
        }
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t c = t / 4, i0 = 8 * (t % 4);
        const uint32_t sh = (c & 1) * 16;
        // The 16-byte head (d, dmin, scales) in one load, the lane's 8 quant bytes (and 8 high
        // bits, q5_K) in one each: super-blocks of 144 and 176 bytes start 16-byte aligned.
        const uint4 head = *reinterpret_cast<const uint4 *>(p);
        const uint32_t a = head.y >> sh, b = head.z >> sh, e = head.w >> sh;
        const uint32_t scp = c < 2 ? a & 0x3f3fu : (e & 0x0f0fu) | ((a >> 2) & 0x3030u);
        const uint32_t mnp = c < 2 ? b & 0x3f3fu : ((e >> 4) & 0x0f0fu) | ((b >> 2) & 0x3030u);
        const uint32_t qw = (QH ? 48 : 16) / 4 + 2 * t; // word index of the lane's 8 qs bytes
        const uint2 qs = *reinterpret_cast<const uint2 *>(p + qw);
        uint2 qh = {0u, 0u};
        if (QH) qh = *reinterpret_cast<const uint2 *>(p + (16 + i0) / 4);
        int s1 = 0, s2 = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t q = i ? qs.y : qs.x;
            uint32_t lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
            if (QH) {
                const uint32_t h = i ? qh.y : qh.x;
                lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            s1 = qmv_dot4(lo, x.q[i], s1);
            s2 = qmv_dot4(hi, x.q[2 + i], s2);
        }
        const float d = qmv_half(head.x), dmin = qmv_half(head.x >> 16);
        const float sc1 = (float)(scp & 255u), sc2 = (float)(scp >> 8);
        const float m1 = (float)(mnp & 255u), m2 = (float)(mnp >> 8);
        return d * (sc1 * x.d[0] * (float)s1 + sc2 * x.d[1] * (float)s2) - dmin * (m1 * x.o[0] + m2 * x.o[1]);
    }
};

// q6_K with 16 lanes per super-block: part t, half h = t / 8, l0 = 4 (t % 8): for g = 0..4,
// the 4 values 128h + l0 + 32g + [0, 4): x block 4h + g of the super-block, bytes l0 .. l0 + 4.
struct Q6Kx8 {
    static constexpr uint32_t BYTES = 210;
    static constexpr bool JOINT = false;
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const unsigned h = t / 8, l0 = 4 * (t % 8);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const unsigned blk = 8 * b + 4 * h + g;
            x.q[g] = *reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)blk + l0);
            x.d[g] = qmv8_d(qmv8_ds(x8, k, blk));
            // (q - 32) x = q x - 32 x over the run's 4 bytes.
            x.c[g] = -32 * qmv_dot4(0x01010101u, x.q[g], 0);
        }
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        const uint32_t sh = phase * 8;
        const uint32_t h = t / 8, l0 = 4 * (t % 8);
        const uint32_t la = (64 * h + l0) / 4, lb = la + 8, lh = (128 + 32 * h + l0) / 4;
        const uint32_t ls = (192 + 8 * h) / 4;
        const uint32_t a = qmv_funnel(p[la], p[la + 1], sh), b = qmv_funnel(p[lb], p[lb + 1], sh);
        const uint32_t e = qmv_funnel(p[lh], p[lh + 1], sh);
        const uint32_t ws0 = p[ls], ws1 = p[ls + 1], ws2 = p[ls + 2];
        const float d = qmv_half(p[52] >> sh);
        int s[4];
        s[0] = qmv_dot4((a & 0x0f0f0f0fu) | ((e & 0x03030303u) << 4), x.q[0], x.c[0]);
        s[1] = qmv_dot4((b & 0x0f0f0f0fu) | ((e & 0x0c0c0c0cu) << 2), x.q[1], x.c[1]);
        s[2] = qmv_dot4(((a >> 4) & 0x0f0f0f0fu) | (e & 0x30303030u), x.q[2], x.c[2]);
        s[3] = qmv_dot4(((b >> 4) & 0x0f0f0f0fu) | ((e >> 2) & 0x30303030u), x.q[3], x.c[3]);
        const uint32_t s0 = qmv_funnel(ws0, ws1, sh), s1 = qmv_funnel(ws1, ws2, sh);
        const uint32_t is8 = 8 * (l0 >> 4);
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint32_t sw = g < 2 ? s0 : s1;
            const int32_t sc = (int32_t)((sw >> (is8 + 16 * (g & 1))) << 24) >> 24;
            acc += (float)sc * x.d[g] * (float)s[g];
        }
        return d * acc;
    }
};

// The 8-bit-activation mat-vec: `qmatvec`'s groups, rows and grid; LANES lanes per block (4
// for 32-value blocks, 16 for super-blocks), QK values per block.
//
// PARTS (QMV8_PARTS for q4_0 and q4_1, QMV8_PARTS_Q5 for q5_0 and q5_1, QMV8_PARTS_Q8_0 for
// q8_0, QMV8_KPARTS for q4_K and q5_K, QMV8_KPARTS_Q6K for q6_K) gives a lane that many
// consecutive parts of a block: fewer lanes per block, so a group step covers more blocks and
// each lane more bytes of a row.
#ifndef QMV8_PARTS
#define QMV8_PARTS 2
#endif
#ifndef QMV8_PARTS_Q8_0
#define QMV8_PARTS_Q8_0 4
#endif
// q5_0 / q5_1: 4 parts, one lane per block (4096x32000 q5_0 on the H100 via HIP-on-CUDA,
// 2026-11-25 19:20Z: 2225 GB/s against 1884 with 2 parts and 2013 with 1).
#ifndef QMV8_PARTS_Q5
#define QMV8_PARTS_Q5 4
#endif
// q4_K / q5_K (QMV8_KPARTS): on NVIDIA 2 parts (a lane takes 16 quants of a chunk: 4096x32000
// q4_K on the H100 via HIP-on-CUDA, 2026-11-25 18:26Z, 2171 GB/s against 2041 with 1 part); on
// AMD 1, unmeasured there: 2 parts take 79-86 VGPRs against 58-64 for one row (gfx942,
// gfx1100) and up to 253 for q5_K's 4 rows on gfx9-generic (near a spill). q6_K keeps 1
// (QMV8_KPARTS_Q6K).
#ifndef QMV8_KPARTS
#if defined(__HIP_DEVICE_COMPILE__)
#define QMV8_KPARTS 1
#else
#define QMV8_KPARTS 2
#endif
#endif
#ifndef QMV8_KPARTS_Q6K
#define QMV8_KPARTS_Q6K 1
#endif
template <typename Q, unsigned LANES, unsigned QK, unsigned PARTS, unsigned M>
__device__ __forceinline__ void qmatvec8(const uint8_t *__restrict__ w, const uint8_t *__restrict__ x8,
                                         float *__restrict__ y, unsigned n, unsigned nb) {
    static_assert(LANES % PARTS == 0, "parts per lane must divide the parts of a block");
    constexpr unsigned L = LANES / PARTS; // lanes per block
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned t = lane % L, first = lane / L;
    const unsigned k = nb * QK;
    const size_t row_bytes = (size_t)nb * Q::BYTES, x8_bytes = QMV8_ROW_BYTES((size_t)k);
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
            QMV_UNROLL_LOOP(QMV_UNROLL)
            for (unsigned b = first; b < nb; b += STEP) {
                if constexpr (Q::JOINT) {
#pragma unroll
                    for (unsigned j = 0; j < M; ++j) {
                        Q8x x;
                        Q::template load_xn<PARTS>(x8 + j * x8_bytes, k, b, t * PARTS, x);
#pragma unroll
                        for (int r = 0; r < QMV_R; ++r)
                            acc[r][j] += Q::template dotn<PARTS>(rows[r].p, rows[r].phase, t * PARTS, x);
                    }
                } else {
#pragma unroll
                    for (unsigned pp = 0; pp < PARTS; ++pp) {
                        const unsigned part = t * PARTS + pp;
#pragma unroll
                        for (unsigned j = 0; j < M; ++j) {
                                Q8x x;
                            Q::load_x(x8 + j * x8_bytes, k, b, part, x);
#pragma unroll
                            for (int r = 0; r < QMV_R; ++r)
                                acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, x);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += STEP * Q::BYTES / 4;
            }
        }
        qmv_store<M>(acc, lane, y, n, r0);
    }
}

// qmatvec8_<T> (one x8 row) and qmatvec8_<T>_m<M> (M x8 rows).
#define QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, M, SUFFIX)                                           \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec8_##T##SUFFIX(const uint8_t *w, const uint8_t *x8, float *y, unsigned n,            \
                             unsigned nb) {                                                        \
        qmatvec8<Q, LANES, QK, PARTS, M>(w, x8, y, n, nb);                                         \
    }
#define QMV8_KERNEL(T, Q, LANES, QK, PARTS)                                                        \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 1, )                                                     \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 2, _m2)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 3, _m3)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 4, _m4)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 5, _m5)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 6, _m6)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 7, _m7)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 8, _m8)

QMV8_KERNEL(q4_0, Q4_0x8, 4, 32, QMV8_PARTS)
QMV8_KERNEL(q4_1, Q4_1x8, 4, 32, QMV8_PARTS)
QMV8_KERNEL(q8_0, Q8_0x8, 4, 32, QMV8_PARTS_Q8_0)
QMV8_KERNEL(q5_0, Q5x8<false>, 4, 32, QMV8_PARTS_Q5)
QMV8_KERNEL(q5_1, Q5x8<true>, 4, 32, QMV8_PARTS_Q5)
// The k-quants up to QMV_K_MAX_M rows (their registers grow as the f32 kernels' do).
#define QMV8_K_KERNEL(T, Q, PARTS)                                                                 \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 1, )                                                       \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 2, _m2)                                                    \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 3, _m3)                                                    \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 4, _m4)
QMV8_K_KERNEL(q4_K, QK45x8<false>, QMV8_KPARTS)
QMV8_K_KERNEL(q5_K, QK45x8<true>, QMV8_KPARTS)
QMV8_K_KERNEL(q6_K, Q6Kx8, QMV8_KPARTS_Q6K)

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
QMM_KERNELS(q4_0, Q4_0d)
QMM_KERNELS(q4_1, Q4_1d)
QMM_KERNELS(q8_0, Q8_0d)
QMM_KERNELS(q4_K, QK45d<false>)
QMM_KERNELS(q5_K, QK45d<true>)
QMM_KERNELS(q6_K, Q6Kd)
QMM_KERNELS(q5_0, Q5d<false>)
QMM_KERNELS(q5_1, Q5d<true>)

extern "C" __global__ void qmm_reduce(const float *part, float *y, unsigned long long count, unsigned slices) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float s = part[i];
        for (unsigned z = 1; z < slices; ++z) s += part[(unsigned long long)z * count + i];
        y[i] = s;
    }
}

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
