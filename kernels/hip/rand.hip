// rand.hip - counter-based random numbers for candle-rocm's rand_uniform / rand_normal.
//
// Written for candle-rocm (not from candle-kernels, which relies on cuRAND). Philox4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): element i of a call
// with (seed, offset) is a pure function of (seed, offset, i), so the same seed gives the same
// numbers on every run, every GPU and every launch shape, and the host can reproduce them
// (candle-rocm's tests do). Each thread evaluates one Philox block of four 32-bit words:
//   f32/f16/bf16 uniform: 4 values per block, 24-bit mantissa  u = (w >> 8) * 2^-24 in [0, 1)
//   f64 uniform:          2 values per block, 53 bits          u = ((w0 << 21) ^ (w1 >> 11)) * 2^-53
//   normal:               Box-Muller on pairs (u1 in (0, 1], u2 in [0, 1)), 4 or 2 values per block
// Scaling is one explicit fused multiply-add (lo + (hi - lo) * u), so the result does not
// depend on the compiler's contraction settings and the host can reproduce it bit for bit.
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include "cuda_fp16.h"
#include "cuda_bf16.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

struct philox_out {
    unsigned int w[4];
};

__device__ __forceinline__ philox_out philox4x32_10(unsigned long long block,
                                                     unsigned long long offset,
                                                     unsigned long long seed) {
    unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
    unsigned int c2 = (unsigned int)offset, c3 = (unsigned int)(offset >> 32);
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        unsigned long long p0 = (unsigned long long)PHILOX_M0 * c0;
        unsigned long long p1 = (unsigned long long)PHILOX_M1 * c2;
        unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
        unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    philox_out r = {{c0, c1, c2, c3}};
    return r;
}

__device__ __forceinline__ float u24(unsigned int w) {
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ double u53(unsigned int a, unsigned int b) {
    unsigned long long v = ((unsigned long long)a << 21) ^ (unsigned long long)(b >> 11);
    return (double)v * (1.0 / 9007199254740992.0);
}

#define RAND_UNIFORM_4(NAME, T, CONVERT)                                                        \
    extern "C" __global__ void NAME(T *out, unsigned long long n, unsigned long long seed,      \
                                    unsigned long long offset, float lo, float hi) {            \
        unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;   \
        unsigned long long base = block * 4;                                                    \
        if (base >= n) return;                                                                  \
        philox_out r = philox4x32_10(block, offset, seed);                                      \
        for (int j = 0; j < 4 && base + j < n; j++) {                                           \
            out[base + j] = CONVERT(fmaf(hi - lo, u24(r.w[j]), lo));                              \
        }                                                                                       \
    }

#define RAND_NORMAL_4(NAME, T, CONVERT)                                                         \
    extern "C" __global__ void NAME(T *out, unsigned long long n, unsigned long long seed,      \
                                    unsigned long long offset, float mean, float std) {         \
        unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;   \
        unsigned long long base = block * 4;                                                    \
        if (base >= n) return;                                                                  \
        philox_out r = philox4x32_10(block, offset, seed);                                      \
        for (int p = 0; p < 2; p++) {                                                           \
            float u1 = ((float)(r.w[2 * p] >> 8) + 1.0f) * (1.0f / 16777216.0f);                \
            float u2 = u24(r.w[2 * p + 1]);                                                     \
            float rad = sqrtf(-2.0f * logf(u1));                                                \
            float z0 = rad * cosf(6.283185307179586f * u2);                                     \
            float z1 = rad * sinf(6.283185307179586f * u2);                                     \
            if (base + 2 * p < n) out[base + 2 * p] = CONVERT(mean + std * z0);                 \
            if (base + 2 * p + 1 < n) out[base + 2 * p + 1] = CONVERT(mean + std * z1);         \
        }                                                                                       \
    }

#define AS_F32(x) (x)
RAND_UNIFORM_4(rand_uniform_f32, float, AS_F32)
RAND_UNIFORM_4(rand_uniform_f16, __half, __float2half)
RAND_UNIFORM_4(rand_uniform_bf16, __nv_bfloat16, __float2bfloat16)
RAND_NORMAL_4(rand_normal_f32, float, AS_F32)
RAND_NORMAL_4(rand_normal_f16, __half, __float2half)
RAND_NORMAL_4(rand_normal_bf16, __nv_bfloat16, __float2bfloat16)

extern "C" __global__ void rand_uniform_f64(double *out, unsigned long long n,
                                            unsigned long long seed, unsigned long long offset,
                                            double lo, double hi) {
    unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long base = block * 2;
    if (base >= n) return;
    philox_out r = philox4x32_10(block, offset, seed);
    out[base] = fma(hi - lo, u53(r.w[0], r.w[1]), lo);
    if (base + 1 < n) out[base + 1] = fma(hi - lo, u53(r.w[2], r.w[3]), lo);
}

extern "C" __global__ void rand_normal_f64(double *out, unsigned long long n,
                                           unsigned long long seed, unsigned long long offset,
                                           double mean, double std) {
    unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long base = block * 2;
    if (base >= n) return;
    philox_out r = philox4x32_10(block, offset, seed);
    double u1 = 1.0 - u53(r.w[0], r.w[1]);  // (0, 1]
    double u2 = u53(r.w[2], r.w[3]);
    double rad = sqrt(-2.0 * log(u1));
    out[base] = mean + std * rad * cos(6.283185307179586 * u2);
    if (base + 1 < n) out[base + 1] = mean + std * rad * sin(6.283185307179586 * u2);
}
