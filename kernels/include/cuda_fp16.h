// cuda_fp16.h - candle-rocm's stand-in for CUDA's cuda_fp16.h when Candle's CUDA kernels are
// compiled as HIP for AMD GPUs with plain clang. Provides __half / __half2 (storage and native
// arithmetic via clang's _Float16), their raw forms, the conversions and operators CUDA defines
// for them, the __h* intrinsics and h* math functions Candle uses, and a CAS-based
// atomicAdd(__half*). Our own implementation; layout matches CUDA (2 and 4 bytes).
#pragma once
#ifndef CANDLE_HIP_CUDA_FP16_H
#define CANDLE_HIP_CUDA_FP16_H

#include "candle_hip_compat.h"

#define __CH_HD __host__ __device__ inline __attribute__((always_inline))
#define __CH_D __device__ inline __attribute__((always_inline))

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct __attribute__((aligned(2))) __half {
    _Float16 __x;

    __half() = default;
    __CH_HD constexpr __half(const __half_raw &r) : __x(__builtin_bit_cast(_Float16, r.x)) {}
    __CH_HD constexpr __half(_Float16 v) : __x(v) {}
    __CH_HD __half(float f) : __x((_Float16)f) {}
    __CH_HD __half(double f) : __x((_Float16)f) {}
    __CH_HD __half(short v) : __x((_Float16)v) {}
    __CH_HD __half(unsigned short v) : __x((_Float16)v) {}
    __CH_HD __half(int v) : __x((_Float16)v) {}
    __CH_HD __half(unsigned int v) : __x((_Float16)v) {}
    __CH_HD __half(long v) : __x((_Float16)v) {}
    __CH_HD __half(unsigned long v) : __x((_Float16)v) {}
    __CH_HD __half(long long v) : __x((_Float16)v) {}
    __CH_HD __half(unsigned long long v) : __x((_Float16)v) {}

    __CH_HD __half &operator=(const __half_raw &r) { __x = __builtin_bit_cast(_Float16, r.x); return *this; }
    __CH_HD __half &operator=(float f) { __x = (_Float16)f; return *this; }
    __CH_HD __half &operator=(double f) { __x = (_Float16)f; return *this; }
    // integer assignment (CUDA provides these, avoiding float/double ambiguity)
    __CH_HD __half &operator=(short v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(unsigned short v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(int v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(unsigned int v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(long v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(unsigned long v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(long long v) { __x = (_Float16)v; return *this; }
    __CH_HD __half &operator=(unsigned long long v) { __x = (_Float16)v; return *this; }

    __CH_HD operator __half_raw() const { __half_raw r; r.x = __builtin_bit_cast(unsigned short, __x); return r; }
    __CH_HD operator float() const { return (float)__x; }
    // CUDA allows implicit conversion to every integer type (round toward zero).
    __CH_HD operator signed char() const { return (signed char)(float)__x; }
    __CH_HD operator unsigned char() const { return (unsigned char)(float)__x; }
    __CH_HD operator char() const { return (char)(float)__x; }
    __CH_HD operator short() const { return (short)(float)__x; }
    __CH_HD operator unsigned short() const { return (unsigned short)(float)__x; }
    __CH_HD operator int() const { return (int)(float)__x; }
    __CH_HD operator unsigned int() const { return (unsigned int)(float)__x; }
    __CH_HD operator long() const { return (long)(float)__x; }
    __CH_HD operator unsigned long() const { return (unsigned long)(float)__x; }
    __CH_HD operator long long() const { return (long long)(float)__x; }
    __CH_HD operator unsigned long long() const { return (unsigned long long)(float)__x; }
    __CH_HD operator bool() const { return __x != (_Float16)0; }

    __CH_HD __half &operator+=(const __half &o) { __x += o.__x; return *this; }
    __CH_HD __half &operator-=(const __half &o) { __x -= o.__x; return *this; }
    __CH_HD __half &operator*=(const __half &o) { __x *= o.__x; return *this; }
    __CH_HD __half &operator/=(const __half &o) { __x /= o.__x; return *this; }
    __CH_HD __half &operator++() { __x += (_Float16)1; return *this; }
    __CH_HD __half &operator--() { __x -= (_Float16)1; return *this; }
    __CH_HD __half operator++(int) { __half t = *this; __x += (_Float16)1; return t; }
    __CH_HD __half operator--(int) { __half t = *this; __x -= (_Float16)1; return t; }
};
static_assert(sizeof(__half) == 2, "__half must be 2 bytes");

__CH_HD __half operator+(const __half &a, const __half &b) { return __half(a.__x + b.__x); }
__CH_HD __half operator-(const __half &a, const __half &b) { return __half(a.__x - b.__x); }
__CH_HD __half operator*(const __half &a, const __half &b) { return __half(a.__x * b.__x); }
__CH_HD __half operator/(const __half &a, const __half &b) { return __half(a.__x / b.__x); }
__CH_HD __half operator-(const __half &a) { return __half(-a.__x); }
__CH_HD __half operator+(const __half &a) { return a; }
__CH_HD bool operator==(const __half &a, const __half &b) { return a.__x == b.__x; }
__CH_HD bool operator!=(const __half &a, const __half &b) { return a.__x != b.__x; }
__CH_HD bool operator<(const __half &a, const __half &b) { return a.__x < b.__x; }
__CH_HD bool operator<=(const __half &a, const __half &b) { return a.__x <= b.__x; }
__CH_HD bool operator>(const __half &a, const __half &b) { return a.__x > b.__x; }
__CH_HD bool operator>=(const __half &a, const __half &b) { return a.__x >= b.__x; }

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    __CH_HD constexpr __half2(const __half &a, const __half &b) : x(a), y(b) {}
    __CH_HD __half2(const __half2_raw &r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    __CH_HD operator __half2_raw() const {
        __half2_raw r;
        r.x = __builtin_bit_cast(unsigned short, x.__x);
        r.y = __builtin_bit_cast(unsigned short, y.__x);
        return r;
    }
    __CH_HD __half2 &operator+=(const __half2 &o) { x += o.x; y += o.y; return *this; }
    __CH_HD __half2 &operator-=(const __half2 &o) { x -= o.x; y -= o.y; return *this; }
    __CH_HD __half2 &operator*=(const __half2 &o) { x *= o.x; y *= o.y; return *this; }
    __CH_HD __half2 &operator/=(const __half2 &o) { x /= o.x; y /= o.y; return *this; }
};
static_assert(sizeof(__half2) == 4, "__half2 must be 4 bytes");
__CH_HD __half2 operator+(const __half2 &a, const __half2 &b) { return __half2(a.x + b.x, a.y + b.y); }
__CH_HD __half2 operator-(const __half2 &a, const __half2 &b) { return __half2(a.x - b.x, a.y - b.y); }
__CH_HD __half2 operator*(const __half2 &a, const __half2 &b) { return __half2(a.x * b.x, a.y * b.y); }
__CH_HD __half2 operator/(const __half2 &a, const __half2 &b) { return __half2(a.x / b.x, a.y / b.y); }
__CH_HD __half2 operator-(const __half2 &a) { return __half2(-a.x, -a.y); }
__CH_HD bool operator==(const __half2 &a, const __half2 &b) { return a.x == b.x && a.y == b.y; }
__CH_HD bool operator!=(const __half2 &a, const __half2 &b) { return !(a == b); }

typedef __half half;
typedef __half2 half2;

// ---- conversions -------------------------------------------------------------------------
__CH_HD __half __float2half(float f) { return __half(f); }
__CH_HD __half __float2half_rn(float f) { return __half(f); }
__CH_HD __half __double2half(double f) { return __half(f); }
__CH_HD float __half2float(__half h) { return (float)h.__x; }
__CH_HD __half __int2half_rn(int i) { return __half(i); }
__CH_HD __half __uint2half_rn(unsigned int i) { return __half(i); }
__CH_HD __half __ll2half_rn(long long i) { return __half(i); }
__CH_HD int __half2int_rz(__half h) { return (int)h; }
__CH_HD unsigned int __half2uint_rz(__half h) { return (unsigned int)h; }
__CH_HD long long __half2ll_rz(__half h) { return (long long)h; }
__CH_HD unsigned short __half_as_ushort(__half h) { return __builtin_bit_cast(unsigned short, h.__x); }
__CH_HD short __half_as_short(__half h) { return __builtin_bit_cast(short, h.__x); }
__CH_HD __half __ushort_as_half(unsigned short u) { return __half(__builtin_bit_cast(_Float16, u)); }
__CH_HD __half __short_as_half(short u) { return __half(__builtin_bit_cast(_Float16, u)); }

__CH_HD __half2 make_half2(__half a, __half b) { return __half2(a, b); }
__CH_HD __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
__CH_HD __half2 __half2half2(__half a) { return __half2(a, a); }
__CH_HD __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
__CH_HD __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
__CH_HD __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
__CH_HD float2 __half22float2(__half2 h) { return make_float2((float)h.x.__x, (float)h.y.__x); }
__CH_HD __half __low2half(__half2 h) { return h.x; }
__CH_HD __half __high2half(__half2 h) { return h.y; }
__CH_HD float __low2float(__half2 h) { return (float)h.x.__x; }
__CH_HD float __high2float(__half2 h) { return (float)h.y.__x; }
__CH_HD __half2 __low2half2(__half2 h) { return __half2(h.x, h.x); }
__CH_HD __half2 __high2half2(__half2 h) { return __half2(h.y, h.y); }
__CH_HD __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
__CH_HD __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }

// ---- arithmetic / comparison intrinsics -----------------------------------------------------
__CH_HD __half __hadd(__half a, __half b) { return a + b; }
__CH_HD __half __hsub(__half a, __half b) { return a - b; }
__CH_HD __half __hmul(__half a, __half b) { return a * b; }
__CH_HD __half __hdiv(__half a, __half b) { return a / b; }
__CH_HD __half __hfma(__half a, __half b, __half c) { return __half((_Float16)__builtin_fmaf((float)a.__x, (float)b.__x, (float)c.__x)); }
__CH_HD __half __hneg(__half a) { return -a; }
__CH_HD bool __hisnan(__half a) { return a.__x != a.__x; }
__CH_HD int __hisinf(__half a) { return __builtin_isinf((float)a.__x) ? ((float)a.__x < 0 ? -1 : 1) : 0; }
__CH_HD __half __habs(__half a) { return __ushort_as_half(__half_as_ushort(a) & 0x7fffu); }
// __hmax/__hmin: IEEE maxNum/minNum (a NaN operand is ignored).
__CH_HD __half __hmax(__half a, __half b) { return __half((_Float16)__builtin_fmaxf((float)a.__x, (float)b.__x)); }
__CH_HD __half __hmin(__half a, __half b) { return __half((_Float16)__builtin_fminf((float)a.__x, (float)b.__x)); }
// *_nan variants propagate NaN (canonical NaN like CUDA).
__CH_HD __half __hmax_nan(__half a, __half b) {
    return (__hisnan(a) || __hisnan(b)) ? __ushort_as_half(0x7fffu) : (a > b ? a : b);
}
__CH_HD __half __hmin_nan(__half a, __half b) {
    return (__hisnan(a) || __hisnan(b)) ? __ushort_as_half(0x7fffu) : (a < b ? a : b);
}
__CH_HD bool __heq(__half a, __half b) { return a == b; }
__CH_HD bool __hne(__half a, __half b) { return a != b; }
__CH_HD bool __hlt(__half a, __half b) { return a < b; }
__CH_HD bool __hle(__half a, __half b) { return a <= b; }
__CH_HD bool __hgt(__half a, __half b) { return a > b; }
__CH_HD bool __hge(__half a, __half b) { return a >= b; }

__CH_HD __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
__CH_HD __half2 __hsub2(__half2 a, __half2 b) { return a - b; }
__CH_HD __half2 __hmul2(__half2 a, __half2 b) { return a * b; }
__CH_HD __half2 __hdiv2(__half2 a, __half2 b) { return a / b; }
__CH_HD __half2 __h2div(__half2 a, __half2 b) { return a / b; }
__CH_HD __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
__CH_HD __half2 __hneg2(__half2 a) { return -a; }
__CH_HD __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
__CH_HD __half2 __hmax2(__half2 a, __half2 b) { return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
__CH_HD __half2 __hmin2(__half2 a, __half2 b) { return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
__CH_HD __half2 __hmax2_nan(__half2 a, __half2 b) { return __half2(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); }
__CH_HD __half2 __hmin2_nan(__half2 a, __half2 b) { return __half2(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); }

// ---- math (evaluated in f32 through ocml, rounded once to f16) ---------------------------------
__CH_D __half hexp(__half a) { return __half(expf((float)a.__x)); }
__CH_D __half hexp2(__half a) { return __half(exp2f((float)a.__x)); }
__CH_D __half hexp10(__half a) { return __half(exp10f((float)a.__x)); }
__CH_D __half hlog(__half a) { return __half(logf((float)a.__x)); }
__CH_D __half hlog2(__half a) { return __half(log2f((float)a.__x)); }
__CH_D __half hlog10(__half a) { return __half(log10f((float)a.__x)); }
__CH_D __half hsqrt(__half a) { return __half(sqrtf((float)a.__x)); }
__CH_D __half hrsqrt(__half a) { return __half(rsqrtf((float)a.__x)); }
__CH_D __half hrcp(__half a) { return __half(1.0f / (float)a.__x); }
__CH_D __half hsin(__half a) { return __half(sinf((float)a.__x)); }
__CH_D __half hcos(__half a) { return __half(cosf((float)a.__x)); }
__CH_D __half htanh(__half a) { return __half(tanhf((float)a.__x)); }
__CH_D __half hceil(__half a) { return __half(ceilf((float)a.__x)); }
__CH_D __half hfloor(__half a) { return __half(floorf((float)a.__x)); }
__CH_D __half hrint(__half a) { return __half(rintf((float)a.__x)); }
__CH_D __half htrunc(__half a) { return __half(truncf((float)a.__x)); }
__CH_D __half2 h2exp(__half2 a) { return __half2(hexp(a.x), hexp(a.y)); }
__CH_D __half2 h2sqrt(__half2 a) { return __half2(hsqrt(a.x), hsqrt(a.y)); }

// ---- atomics ------------------------------------------------------------------------------------
#ifndef CANDLE_HIP_HAVE_HALF_ATOMICS
#define CANDLE_HIP_HAVE_HALF_ATOMICS 1
__CH_D __half atomicAdd(__half *addr, __half val) {
    unsigned short old = candle_hip::atomic_update_u16((unsigned short *)addr, [=](unsigned short cur, unsigned short &nv) {
        nv = __half_as_ushort(__ushort_as_half(cur) + val);
        return true;
    });
    return __ushort_as_half(old);
}
#endif

#undef __CH_HD
#undef __CH_D
#endif // CANDLE_HIP_CUDA_FP16_H
