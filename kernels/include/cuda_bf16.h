// cuda_bf16.h - candle-rocm's stand-in for CUDA's cuda_bf16.h when Candle's CUDA kernels are
// compiled as HIP for AMD GPUs with plain clang. Provides __nv_bfloat16 / __nv_bfloat162 (16-bit
// storage, arithmetic done in f32 and rounded to nearest-even), raw forms, CUDA's implicit
// conversions and operators, the bf16 overloads of the __h* intrinsics and h* math functions,
// and a CAS-based atomicAdd(__nv_bfloat16*). Our own implementation; layout matches CUDA.
#pragma once
#ifndef CANDLE_HIP_CUDA_BF16_H
#define CANDLE_HIP_CUDA_BF16_H

#include "candle_hip_compat.h"
#include "cuda_fp16.h"

#define __CH_HD __host__ __device__ inline __attribute__((always_inline))
#define __CH_D __device__ inline __attribute__((always_inline))

struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

namespace candle_hip {
// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN with its sign.
__CH_HD unsigned short f32_to_bf16_bits(float f) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__CH_HD float bf16_bits_to_f32(unsigned short b) { return __builtin_bit_cast(float, (unsigned int)b << 16); }
} // namespace candle_hip

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;

    __nv_bfloat16() = default;
    __CH_HD constexpr __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    __CH_HD __nv_bfloat16(float f) : __x(candle_hip::f32_to_bf16_bits(f)) {}
    __CH_HD __nv_bfloat16(double f) : __x(candle_hip::f32_to_bf16_bits((float)f)) {}
    __CH_HD __nv_bfloat16(short v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(unsigned short v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(int v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(unsigned int v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(long v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(unsigned long v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(long long v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}
    __CH_HD __nv_bfloat16(unsigned long long v) : __x(candle_hip::f32_to_bf16_bits((float)v)) {}

    __CH_HD __nv_bfloat16 &operator=(const __nv_bfloat16_raw &r) { __x = r.x; return *this; }
    __CH_HD __nv_bfloat16 &operator=(float f) { __x = candle_hip::f32_to_bf16_bits(f); return *this; }
    __CH_HD __nv_bfloat16 &operator=(double f) { __x = candle_hip::f32_to_bf16_bits((float)f); return *this; }
    // integer assignment (CUDA provides these, avoiding float/double ambiguity)
    __CH_HD __nv_bfloat16 &operator=(short v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(unsigned short v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(int v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(unsigned int v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(long v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(unsigned long v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(long long v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }
    __CH_HD __nv_bfloat16 &operator=(unsigned long long v) { __x = candle_hip::f32_to_bf16_bits((float)v); return *this; }

    __CH_HD float __f() const { return candle_hip::bf16_bits_to_f32(__x); }
    __CH_HD operator __nv_bfloat16_raw() const { __nv_bfloat16_raw r; r.x = __x; return r; }
    __CH_HD operator float() const { return __f(); }
    __CH_HD operator signed char() const { return (signed char)__f(); }
    __CH_HD operator unsigned char() const { return (unsigned char)__f(); }
    __CH_HD operator char() const { return (char)__f(); }
    __CH_HD operator short() const { return (short)__f(); }
    __CH_HD operator unsigned short() const { return (unsigned short)__f(); }
    __CH_HD operator int() const { return (int)__f(); }
    __CH_HD operator unsigned int() const { return (unsigned int)__f(); }
    __CH_HD operator long() const { return (long)__f(); }
    __CH_HD operator unsigned long() const { return (unsigned long)__f(); }
    __CH_HD operator long long() const { return (long long)__f(); }
    __CH_HD operator unsigned long long() const { return (unsigned long long)__f(); }
    __CH_HD operator bool() const { return (__x & 0x7fffu) != 0; }

    __CH_HD __nv_bfloat16 &operator+=(const __nv_bfloat16 &o) { *this = __nv_bfloat16(__f() + o.__f()); return *this; }
    __CH_HD __nv_bfloat16 &operator-=(const __nv_bfloat16 &o) { *this = __nv_bfloat16(__f() - o.__f()); return *this; }
    __CH_HD __nv_bfloat16 &operator*=(const __nv_bfloat16 &o) { *this = __nv_bfloat16(__f() * o.__f()); return *this; }
    __CH_HD __nv_bfloat16 &operator/=(const __nv_bfloat16 &o) { *this = __nv_bfloat16(__f() / o.__f()); return *this; }
    __CH_HD __nv_bfloat16 &operator++() { return *this += __nv_bfloat16(1.0f); }
    __CH_HD __nv_bfloat16 &operator--() { return *this -= __nv_bfloat16(1.0f); }
    __CH_HD __nv_bfloat16 operator++(int) { __nv_bfloat16 t = *this; *this += __nv_bfloat16(1.0f); return t; }
    __CH_HD __nv_bfloat16 operator--(int) { __nv_bfloat16 t = *this; *this -= __nv_bfloat16(1.0f); return t; }
};
static_assert(sizeof(__nv_bfloat16) == 2, "__nv_bfloat16 must be 2 bytes");

__CH_HD __nv_bfloat16 operator+(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __nv_bfloat16(a.__f() + b.__f()); }
__CH_HD __nv_bfloat16 operator-(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __nv_bfloat16(a.__f() - b.__f()); }
__CH_HD __nv_bfloat16 operator*(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __nv_bfloat16(a.__f() * b.__f()); }
__CH_HD __nv_bfloat16 operator/(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __nv_bfloat16(a.__f() / b.__f()); }
__CH_HD __nv_bfloat16 operator-(const __nv_bfloat16 &a) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)(a.__x ^ 0x8000u)}); }
__CH_HD __nv_bfloat16 operator+(const __nv_bfloat16 &a) { return a; }
__CH_HD bool operator==(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() == b.__f(); }
__CH_HD bool operator!=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() != b.__f(); }
__CH_HD bool operator<(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() < b.__f(); }
__CH_HD bool operator<=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() <= b.__f(); }
__CH_HD bool operator>(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() > b.__f(); }
__CH_HD bool operator>=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return a.__f() >= b.__f(); }

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __CH_HD constexpr __nv_bfloat162(const __nv_bfloat16 &a, const __nv_bfloat16 &b) : x(a), y(b) {}
    __CH_HD __nv_bfloat162(const __nv_bfloat162_raw &r) : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
    __CH_HD operator __nv_bfloat162_raw() const { __nv_bfloat162_raw r; r.x = x.__x; r.y = y.__x; return r; }
};
__CH_HD __nv_bfloat162 operator+(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __nv_bfloat162(a.x + b.x, a.y + b.y); }
__CH_HD __nv_bfloat162 operator-(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __nv_bfloat162(a.x - b.x, a.y - b.y); }
__CH_HD __nv_bfloat162 operator*(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __nv_bfloat162(a.x * b.x, a.y * b.y); }
__CH_HD __nv_bfloat162 operator/(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __nv_bfloat162(a.x / b.x, a.y / b.y); }

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---- conversions -------------------------------------------------------------------------------
__CH_HD __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
__CH_HD __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
__CH_HD __nv_bfloat16 __double2bfloat16(double f) { return __nv_bfloat16(f); }
__CH_HD float __bfloat162float(__nv_bfloat16 b) { return b.__f(); }
__CH_HD unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
__CH_HD short __bfloat16_as_short(__nv_bfloat16 b) { return (short)b.__x; }
__CH_HD __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
__CH_HD __nv_bfloat16 __short_as_bfloat16(short u) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)u}); }
__CH_HD __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16(i); }
__CH_HD int __bfloat162int_rz(__nv_bfloat16 b) { return (int)b.__f(); }
__CH_HD __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
__CH_HD __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
__CH_HD __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
__CH_HD __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
__CH_HD __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(__nv_bfloat16(f.x), __nv_bfloat16(f.y)); }
__CH_HD float2 __bfloat1622float2(__nv_bfloat162 b) { return make_float2(b.x.__f(), b.y.__f()); }
__CH_HD __nv_bfloat16 __low2bfloat16(__nv_bfloat162 b) { return b.x; }
__CH_HD __nv_bfloat16 __high2bfloat16(__nv_bfloat162 b) { return b.y; }
__CH_HD float __low2float(__nv_bfloat162 b) { return b.x.__f(); }
__CH_HD float __high2float(__nv_bfloat162 b) { return b.y.__f(); }

// ---- intrinsics (bf16 overloads of the __h* names) -------------------------------------------------
__CH_HD __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
__CH_HD __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
__CH_HD __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
__CH_HD __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return a / b; }
__CH_HD __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) { return __nv_bfloat16(__builtin_fmaf(a.__f(), b.__f(), c.__f())); }
__CH_HD __nv_bfloat16 __hneg(__nv_bfloat16 a) { return -a; }
__CH_HD bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
__CH_HD int __hisinf(__nv_bfloat16 a) { return (a.__x & 0x7fffu) == 0x7f80u ? ((a.__x & 0x8000u) ? -1 : 1) : 0; }
__CH_HD __nv_bfloat16 __habs(__nv_bfloat16 a) { return __ushort_as_bfloat16(a.__x & 0x7fffu); }
__CH_HD __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(__builtin_fmaxf(a.__f(), b.__f())); }
__CH_HD __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(__builtin_fminf(a.__f(), b.__f())); }
__CH_HD __nv_bfloat16 __hmax_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
    return (__hisnan(a) || __hisnan(b)) ? __ushort_as_bfloat16(0x7fffu) : (a > b ? a : b);
}
__CH_HD __nv_bfloat16 __hmin_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
    return (__hisnan(a) || __hisnan(b)) ? __ushort_as_bfloat16(0x7fffu) : (a < b ? a : b);
}
__CH_HD bool __heq(__nv_bfloat16 a, __nv_bfloat16 b) { return a == b; }
__CH_HD bool __hne(__nv_bfloat16 a, __nv_bfloat16 b) { return a != b; }
__CH_HD bool __hlt(__nv_bfloat16 a, __nv_bfloat16 b) { return a < b; }
__CH_HD bool __hle(__nv_bfloat16 a, __nv_bfloat16 b) { return a <= b; }
__CH_HD bool __hgt(__nv_bfloat16 a, __nv_bfloat16 b) { return a > b; }
__CH_HD bool __hge(__nv_bfloat16 a, __nv_bfloat16 b) { return a >= b; }
__CH_HD __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return a + b; }
__CH_HD __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) { return a - b; }
__CH_HD __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return a * b; }
__CH_HD __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
__CH_HD __nv_bfloat162 __hmin2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmin(a.x, b.x), __hmin(a.y, b.y)); }

// ---- math (f32 through ocml, rounded once to bf16) -------------------------------------------------
__CH_D __nv_bfloat16 hexp(__nv_bfloat16 a) { return __nv_bfloat16(expf(a.__f())); }
__CH_D __nv_bfloat16 hexp2(__nv_bfloat16 a) { return __nv_bfloat16(exp2f(a.__f())); }
__CH_D __nv_bfloat16 hlog(__nv_bfloat16 a) { return __nv_bfloat16(logf(a.__f())); }
__CH_D __nv_bfloat16 hlog2(__nv_bfloat16 a) { return __nv_bfloat16(log2f(a.__f())); }
__CH_D __nv_bfloat16 hlog10(__nv_bfloat16 a) { return __nv_bfloat16(log10f(a.__f())); }
__CH_D __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __nv_bfloat16(sqrtf(a.__f())); }
__CH_D __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __nv_bfloat16(rsqrtf(a.__f())); }
__CH_D __nv_bfloat16 hrcp(__nv_bfloat16 a) { return __nv_bfloat16(1.0f / a.__f()); }
__CH_D __nv_bfloat16 hsin(__nv_bfloat16 a) { return __nv_bfloat16(sinf(a.__f())); }
__CH_D __nv_bfloat16 hcos(__nv_bfloat16 a) { return __nv_bfloat16(cosf(a.__f())); }
__CH_D __nv_bfloat16 htanh(__nv_bfloat16 a) { return __nv_bfloat16(tanhf(a.__f())); }
__CH_D __nv_bfloat16 hceil(__nv_bfloat16 a) { return __nv_bfloat16(ceilf(a.__f())); }
__CH_D __nv_bfloat16 hfloor(__nv_bfloat16 a) { return __nv_bfloat16(floorf(a.__f())); }
__CH_D __nv_bfloat16 hrint(__nv_bfloat16 a) { return __nv_bfloat16(rintf(a.__f())); }
__CH_D __nv_bfloat16 htrunc(__nv_bfloat16 a) { return __nv_bfloat16(truncf(a.__f())); }

// ---- atomics ----------------------------------------------------------------------------------------
#ifndef CANDLE_HIP_HAVE_BF16_ATOMICS
#define CANDLE_HIP_HAVE_BF16_ATOMICS 1
__CH_D __nv_bfloat16 atomicAdd(__nv_bfloat16 *addr, __nv_bfloat16 val) {
    unsigned short old = candle_hip::atomic_update_u16((unsigned short *)addr, [=](unsigned short cur, unsigned short &nv) {
        nv = __bfloat16_as_ushort(__ushort_as_bfloat16(cur) + val);
        return true;
    });
    return __ushort_as_bfloat16(old);
}
#endif

#undef __CH_HD
#undef __CH_D
#endif // CANDLE_HIP_CUDA_BF16_H
