// cuda_fp8.h - candle-rocm's stand-in for CUDA's cuda_fp8.h when Candle's CUDA kernels are
// compiled as HIP for AMD GPUs with plain clang. Provides the OCP FP8 types __nv_fp8_e4m3
// (bias 7, no infinities, NaN = S.1111.111, max 448) and __nv_fp8_e5m2 (bias 15, IEEE-like),
// the __nv_cvt_* conversion functions Candle uses, and CUDA's explicit constructors and
// conversion operators. Conversions are done in software (bit manipulation), so they behave the
// same on every AMD target; note that gfx942's hardware FP8 is the *FNUZ* variant and is not
// used here. Our own implementation.
#pragma once
#ifndef CANDLE_HIP_CUDA_FP8_H
#define CANDLE_HIP_CUDA_FP8_H

#include "candle_hip_compat.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"

#define __CH_HD __host__ __device__ inline __attribute__((always_inline))

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };

namespace candle_hip {
// float -> e4m3, round to nearest even. SATFINITE clamps overflow (and +-inf) to +-448;
// NOSAT turns it into NaN. NaN -> NaN.
__CH_HD unsigned char f32_to_e4m3(float f, __nv_saturation_t sat) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    unsigned char sign = (unsigned char)((u >> 24) & 0x80u);
    unsigned int a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7fu;
    float fa = __builtin_bit_cast(float, a);
    if (fa >= 448.0f) {
        // 448 < x < 464 rounds to 448 under RNE; beyond that (and inf) is overflow.
        if (sat == __NV_SATFINITE || fa < 464.0f) return sign | 0x7eu;
        return sign | 0x7fu;
    }
    if (fa < 0.015625f) { // below 2^-6: subnormal, step 2^-9
        unsigned int m = (unsigned int)__builtin_rintf(fa * 512.0f); // RNE, 0..8 (8 == min normal)
        return sign | (unsigned char)m;
    }
    unsigned int r = a + 0x7ffffu + ((a >> 20) & 1u); // round mantissa to 3 bits
    unsigned int e = ((r >> 23) & 0xffu) - 127u + 7u;
    unsigned int m = (r >> 20) & 7u;
    return sign | (unsigned char)((e << 3) | m);
}
__CH_HD float e4m3_to_f32(unsigned char v) {
    unsigned int sign = (unsigned int)(v & 0x80u) << 24;
    unsigned int e = (v >> 3) & 0xfu, m = v & 7u;
    if (e == 0xf && m == 7) return __builtin_bit_cast(float, sign | 0x7fc00000u);
    if (e == 0) {
        float r = (float)m * 0.001953125f; // m * 2^-9
        return sign ? -r : r;
    }
    return __builtin_bit_cast(float, sign | ((e - 7u + 127u) << 23) | (m << 20));
}
// e5m2 is the top byte of an IEEE half: convert through the half bit pattern.
__CH_HD unsigned char half_bits_to_e5m2(unsigned short h, __nv_saturation_t sat) {
    if ((h & 0x7fffu) > 0x7c00u) return (unsigned char)((h >> 8) | 0x02u); // NaN
    if ((h & 0x7fffu) == 0x7c00u) return sat == __NV_SATFINITE ? (unsigned char)((h >> 8) - 1u) : (unsigned char)(h >> 8);
    unsigned int r = (unsigned int)h + 0x7fu + ((h >> 8) & 1u);
    unsigned char out = (unsigned char)(r >> 8);
    if (sat == __NV_SATFINITE && (out & 0x7fu) == 0x7cu) out -= 1; // overflowed to inf
    return out;
}
} // namespace candle_hip

__CH_HD __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t fmt) {
    __half_raw r;
    if (fmt == __NV_E5M2) {
        r.x = (unsigned short)((unsigned short)x << 8);
    } else {
        r.x = __builtin_bit_cast(unsigned short, (_Float16)candle_hip::e4m3_to_f32(x)); // exact
    }
    return r;
}
__CH_HD __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
    if (fmt == __NV_E5M2) return candle_hip::half_bits_to_e5m2(__builtin_bit_cast(unsigned short, (_Float16)x), sat);
    return candle_hip::f32_to_e4m3(x, sat);
}
__CH_HD __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
    return __nv_cvt_float_to_fp8((float)x, sat, fmt);
}
__CH_HD __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw x, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
    if (fmt == __NV_E5M2) return candle_hip::half_bits_to_e5m2(x.x, sat);
    return candle_hip::f32_to_e4m3((float)__builtin_bit_cast(_Float16, x.x), sat);
}
__CH_HD __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw x, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
    return __nv_cvt_float_to_fp8(candle_hip::bf16_bits_to_f32(x.x), sat, fmt);
}

#define __CH_FP8_TYPE(NAME, FMT)                                                                  \
    struct __attribute__((aligned(1))) NAME {                                                     \
        __nv_fp8_storage_t __x;                                                                   \
        NAME() = default;                                                                         \
        __CH_HD explicit NAME(float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, FMT)) {}    \
        __CH_HD explicit NAME(double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, FMT)) {}  \
        __CH_HD explicit NAME(__half h) : __x(__nv_cvt_halfraw_to_fp8(h, __NV_SATFINITE, FMT)) {} \
        __CH_HD explicit NAME(__nv_bfloat16 b)                                                     \
            : __x(__nv_cvt_bfloat16raw_to_fp8(b, __NV_SATFINITE, FMT)) {}                          \
        __CH_HD explicit NAME(int v) : NAME((float)v) {}                                          \
        __CH_HD explicit NAME(unsigned int v) : NAME((float)v) {}                                 \
        __CH_HD explicit NAME(long v) : NAME((float)v) {}                                         \
        __CH_HD explicit NAME(unsigned long v) : NAME((float)v) {}                                \
        __CH_HD explicit NAME(long long v) : NAME((float)v) {}                                    \
        __CH_HD explicit NAME(unsigned long long v) : NAME((float)v) {}                           \
        __CH_HD explicit NAME(short v) : NAME((float)v) {}                                        \
        __CH_HD explicit NAME(unsigned short v) : NAME((float)v) {}                               \
        __CH_HD float __f() const { return (float)__half(__nv_cvt_fp8_to_halfraw(__x, FMT)); }   \
        __CH_HD explicit operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, FMT)); } \
        __CH_HD explicit operator float() const { return __f(); }                                 \
        __CH_HD explicit operator double() const { return (double)__f(); }                        \
        __CH_HD explicit operator __nv_bfloat16() const { return __nv_bfloat16(__f()); }          \
        __CH_HD explicit operator unsigned char() const {                                          \
            float f = __f();                                                                       \
            return f != f ? 0 : (f <= 0.0f ? 0 : (f >= 255.0f ? 255 : (unsigned char)f));          \
        }                                                                                          \
        __CH_HD explicit operator signed char() const {                                            \
            float f = __f();                                                                       \
            return f != f ? 0 : (f <= -128.0f ? -128 : (f >= 127.0f ? 127 : (signed char)f));      \
        }                                                                                          \
        __CH_HD explicit operator short() const { float f = __f(); return f != f ? 0 : (short)f; } \
        __CH_HD explicit operator unsigned short() const { float f = __f(); return f != f || f < 0 ? 0 : (unsigned short)f; } \
        __CH_HD explicit operator int() const { float f = __f(); return f != f ? 0 : (int)f; }     \
        __CH_HD explicit operator unsigned int() const { float f = __f(); return f != f || f < 0 ? 0 : (unsigned int)f; } \
        __CH_HD explicit operator long() const { float f = __f(); return f != f ? 0 : (long)f; }   \
        __CH_HD explicit operator unsigned long() const { float f = __f(); return f != f || f < 0 ? 0 : (unsigned long)f; } \
        __CH_HD explicit operator long long() const { float f = __f(); return f != f ? 0 : (long long)f; } \
        __CH_HD explicit operator unsigned long long() const { float f = __f(); return f != f || f < 0 ? 0 : (unsigned long long)f; } \
        __CH_HD explicit operator bool() const { return (__x & 0x7fu) != 0; }                      \
    };

__CH_FP8_TYPE(__nv_fp8_e4m3, __NV_E4M3)
__CH_FP8_TYPE(__nv_fp8_e5m2, __NV_E5M2)
#undef __CH_FP8_TYPE
static_assert(sizeof(__nv_fp8_e4m3) == 1, "__nv_fp8_e4m3 must be 1 byte");

#undef __CH_HD
#endif // CANDLE_HIP_CUDA_FP8_H
