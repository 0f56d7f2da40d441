// qmatvec.hip - quantized matrix-vector products for GGUF decode: y = W x for one f32 row x of
// k values and weights W of n rows stored as GGML blocks (q4_0, q4_1, q8_0), f32 math.
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
//
// Work split. A group of QMV_GROUP (32) lanes computes QMV_R (2) output rows: lane l visits the
// blocks l, l + 32, ... of those rows (consecutive lanes read consecutive blocks), loads the 32
// x values of a block once and uses them for both rows, accumulates in f32, and the group's
// partial sums are reduced with xor shuffles inside the 32 lanes (ds_bpermute on AMD, so a
// wave of 64 holds two independent groups; the wave size QMV_WAVE is a compile-time constant,
// 32 or 64, and nothing assumes either). A block of QMV_BLOCK (256) threads has 8 groups, so
// QMV_ROWS (16) rows; blocks visit rows with a block-uniform grid-stride loop, so every lane
// reaches every shuffle; rows past n are computed as zero and not written.
//
// Loads. Weight blocks are read as 32-bit words from the 4-byte-aligned address at or below
// the block's start: q4_1 blocks (20 bytes) are always word aligned; q4_0 (18) and q8_0 (34)
// blocks start at 0 or 2 mod 4, and the words are realigned with a funnel shift (one
// v_alignbit per word on AMD). That reads up to 2 bytes before a block (inside the previous
// block, never before the buffer: the first block is aligned) and up to 2 bytes after the last
// one (inside candle-rocm's MATRIX_ROW_PADDING of zeroed blocks). x is read as float4 in the
// _v kernels (x 16-byte aligned), as floats otherwise.
//
// Kernels (T in q4_0, q4_1, q8_0):
//   qmatvec_<T>(const uint8_t* w, const float* x, float* y, unsigned n, unsigned nb)
//   qmatvec_<T>_v(same)
//     w: n rows of nb blocks each, back to back, 4-byte aligned, readable 2 bytes past the
//     end; x: nb * 32 floats (16-byte aligned for _v); y: n floats. Launch with QMV_BLOCK
//     threads in x (blockDim (256, 1, 1)) and any grid (candle-rocm uses
//     min(ceil(n / QMV_ROWS), 2^20) blocks).
#include "cuda_fp16.h"
#include <stdint.h>

#if defined(__HIP_DEVICE_COMPILE__)
#define QMV_WAVE __AMDGCN_WAVEFRONT_SIZE__
#else
#define QMV_WAVE 32
#endif

#define QMV_GROUP 32
#define QMV_R 2
#define QMV_BLOCK 256
#define QMV_ROWS (QMV_BLOCK / QMV_GROUP * QMV_R)

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

__device__ __forceinline__ float qmv_half(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
}

// The 32 x values of block b (x + 32 b) into xs.
template <bool V> __device__ __forceinline__ void qmv_load_x(const float *x, size_t b, float xs[32]) {
    const float *p = x + b * 32;
    if (V) {
        const float4 *p4 = reinterpret_cast<const float4 *>(p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float4 v = p4[i];
            xs[4 * i] = v.x;
            xs[4 * i + 1] = v.y;
            xs[4 * i + 2] = v.z;
            xs[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) xs[i] = p[i];
    }
}

// ---------------------------------------------------------------------------------------------
// Per-type block dot products: the block at byte offset `off` of `w` against xs[0..32).

// Sum over the 8 nibbles of the low (HI false) or high halves of a word of qs, against
// xs[base + 0..4] (byte i of the word is qs[4 q + i], its nibble goes with value 4 q + i or
// 16 + 4 q + i).
__device__ __forceinline__ void qmv_nibbles(uint32_t q, const float *xl, const float *xh, float &s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        s += (float)((q >> (8 * i)) & 15u) * xl[i];
        s += (float)((q >> (8 * i + 4)) & 15u) * xh[i];
    }
}

struct Q4_0 {
    static constexpr uint32_t BYTES = 18;
    __device__ __forceinline__ static float dot(const uint8_t *w, size_t off, const float xs[32],
                                                float xsum) {
        const uint32_t *p = reinterpret_cast<const uint32_t *>(w + (off & ~(size_t)3));
        const uint32_t sh = (uint32_t)(off & 2) * 8; // 0 or 16
        uint32_t wd[5];
#pragma unroll
        for (int i = 0; i < 5; ++i) wd[i] = p[i];
        const float d = qmv_half(wd[0] >> sh);
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; ++q)
            qmv_nibbles(qmv_funnel(wd[q], wd[q + 1], sh + 16), xs + 4 * q, xs + 16 + 4 * q, s);
        // sum (nibble - 8) x = sum nibble x - 8 sum x
        return d * (s - 8.0f * xsum);
    }
    static constexpr bool NEEDS_XSUM = true;
};

struct Q4_1 {
    static constexpr uint32_t BYTES = 20;
    __device__ __forceinline__ static float dot(const uint8_t *w, size_t off, const float xs[32],
                                                float xsum) {
        const uint32_t *p = reinterpret_cast<const uint32_t *>(w + off);
        uint32_t wd[5];
#pragma unroll
        for (int i = 0; i < 5; ++i) wd[i] = p[i];
        const float d = qmv_half(wd[0]), m = qmv_half(wd[0] >> 16);
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; ++q) qmv_nibbles(wd[q + 1], xs + 4 * q, xs + 16 + 4 * q, s);
        return d * s + m * xsum;
    }
    static constexpr bool NEEDS_XSUM = true;
};

struct Q8_0 {
    static constexpr uint32_t BYTES = 34;
    __device__ __forceinline__ static float dot(const uint8_t *w, size_t off, const float xs[32],
                                                float) {
        const uint32_t *p = reinterpret_cast<const uint32_t *>(w + (off & ~(size_t)3));
        const uint32_t sh = (uint32_t)(off & 2) * 8; // 0 or 16
        uint32_t wd[9];
#pragma unroll
        for (int i = 0; i < 9; ++i) wd[i] = p[i];
        const float d = qmv_half(wd[0] >> sh);
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const uint32_t v = qmv_funnel(wd[q], wd[q + 1], sh + 16);
#pragma unroll
            for (int i = 0; i < 4; ++i) s += (float)((int32_t)(v << (24 - 8 * i)) >> 24) * xs[4 * q + i];
        }
        return d * s;
    }
    static constexpr bool NEEDS_XSUM = false;
};

// ---------------------------------------------------------------------------------------------
template <typename Q, bool V>
__device__ __forceinline__ void qmatvec(const uint8_t *__restrict__ w, const float *__restrict__ x,
                                        float *__restrict__ y, unsigned n, unsigned nb) {
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const size_t row_bytes = (size_t)nb * Q::BYTES;
    for (size_t base = (size_t)blockIdx.x * QMV_ROWS; base < n; base += (size_t)gridDim.x * QMV_ROWS) {
        const size_t r0 = base + (size_t)group * QMV_R;
        float acc[QMV_R];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) acc[r] = 0.0f;
        if (r0 < n) {
            for (unsigned b = lane; b < nb; b += QMV_GROUP) {
                float xs[32];
                qmv_load_x<V>(x, b, xs);
                float xsum = 0.0f;
                if (Q::NEEDS_XSUM) {
#pragma unroll
                    for (int i = 0; i < 32; ++i) xsum += xs[i];
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r)
                    if (r0 + r < n) acc[r] += Q::dot(w, (r0 + r) * row_bytes + (size_t)b * Q::BYTES, xs, xsum);
            }
        }
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
            for (int m = QMV_GROUP / 2; m > 0; m >>= 1) acc[r] += qmv_shfl_xor(acc[r], m);
        }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                if (r0 + r < n) y[r0 + r] = acc[r];
        }
    }
}

#define QMV_KERNELS(T, Q)                                                                          \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_##T(const uint8_t *w, const float *x, float *y, unsigned n, unsigned nb) {         \
        qmatvec<Q, false>(w, x, y, n, nb);                                                         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec_##T##_v(const uint8_t *w, const float *x, float *y, unsigned n, unsigned nb) {     \
        qmatvec<Q, true>(w, x, y, n, nb);                                                          \
    }

QMV_KERNELS(q4_0, Q4_0)
QMV_KERNELS(q4_1, Q4_1)
QMV_KERNELS(q8_0, Q8_0)
