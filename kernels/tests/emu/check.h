// check.h - host references and comparison helpers shared by the emulator drivers: f16/bf16
// encodings computed independently of the kernels (direct round-to-nearest-even from double),
// buffers with a chosen misalignment, and a mismatch counter that prints the first few.
#pragma once
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

namespace chk {

enum DT { F32, F16, BF16, F64, U8, U32, I16, I32, I64 };
inline const char *dt_name(DT d) {
    static const char *n[] = {"f32", "f16", "bf16", "f64", "u8", "u32", "i16", "i32", "i64"};
    return n[d];
}
inline size_t dt_size(DT d) {
    static const size_t s[] = {4, 2, 2, 8, 1, 4, 2, 4, 8};
    return s[d];
}
inline bool is_float(DT d) { return d <= F64; }

// x rounded to nearest even with p significand bits, minimum normal exponent emin and largest
// finite value maxf (infinity beyond it). Exact: scaling by powers of two and nearbyint only.
inline double round_fmt(double x, int p, int emin, double maxf) {
    if (x != x || x == 0 || isinf(x)) return x;
    int e;
    frexp(fabs(x), &e);
    int q = (e - 1 > emin ? e - 1 : emin) - (p - 1);
    double r = ldexp(nearbyint(ldexp(x, -q)), q);
    if (fabs(r) > maxf) return copysign(INFINITY, x);
    return r;
}
inline double round_f16(double x) { return round_fmt(x, 11, -14, 65504.0); }
inline double round_bf16(double x) { return round_fmt(x, 8, -126, ldexp(255.0, 120)); }
inline double round_f32(double x) { return round_fmt(x, 24, -126, ldexp(16777215.0, 104)); }

// Bits of an exactly representable value (NaN: the canonical quiet NaN with x's sign).
inline uint16_t f16_bits(double v) {
    if (v != v) return signbit(v) ? 0xfe00 : 0x7e00;
    uint16_t s = signbit(v) ? 0x8000 : 0;
    v = fabs(v);
    if (isinf(v)) return s | 0x7c00;
    if (v == 0) return s;
    int e;
    frexp(v, &e); // v = m 2^e, m in [0.5, 1)
    int ex = e - 1;
    if (ex < -14) return s | (uint16_t)ldexp(v, 24); // subnormal
    uint16_t m = (uint16_t)(ldexp(v, 10 - ex) - 1024);
    return s | (uint16_t)((ex + 15) << 10) | m;
}
inline double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}
inline uint16_t bf16_bits(double v) {
    if (v != v) return signbit(v) ? 0xffc0 : 0x7fc0;
    float f = (float)v; // exact: v is a bf16 value
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
inline double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float f32_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t bits_of_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// A float-typed buffer element as a double, and a double (already representable) stored.
inline double load(DT d, const void *p, size_t i) {
    switch (d) {
    case F32: return ((const float *)p)[i];
    case F64: return ((const double *)p)[i];
    case F16: return f16_value(((const uint16_t *)p)[i]);
    case BF16: return bf16_value(((const uint16_t *)p)[i]);
    default: abort();
    }
}
inline double round_to(DT d, double v) {
    switch (d) {
    case F32: return round_f32(v);
    case F64: return v;
    case F16: return round_f16(v);
    case BF16: return round_bf16(v);
    default: abort();
    }
}
inline void store(DT d, void *p, size_t i, double v) {
    switch (d) {
    case F32: ((float *)p)[i] = (float)v; break;
    case F64: ((double *)p)[i] = v; break;
    case F16: ((uint16_t *)p)[i] = f16_bits(round_f16(v)); break;
    case BF16: ((uint16_t *)p)[i] = bf16_bits(round_bf16(v)); break;
    default: abort();
    }
}

// A device-like buffer: `n` elements of `esize` bytes starting `skew` elements past a 256-byte
// aligned address (skew 1: the misaligned view of an offset tensor). Every byte starts as 0xFF,
// a NaN in every float type: an element a kernel fails to write does not match a finite
// reference, and a value read from outside the data poisons sums and norms. `intact` checks
// that nothing outside the first `used` elements was written.
struct Buf {
    std::vector<unsigned char> mem;
    unsigned char *p = nullptr;
    size_t es = 1;
    Buf() = default;
    Buf(size_t n, size_t esize, size_t skew = 0) : es(esize) {
        mem.assign((n + skew) * esize + 512, 0xFF);
        uintptr_t a = ((uintptr_t)mem.data() + 255) & ~(uintptr_t)255;
        p = (unsigned char *)a + skew * esize;
    }
    template <typename T> T *as() { return (T *)p; }
    bool intact(size_t used) const {
        for (const unsigned char *q = mem.data(); q < p; ++q)
            if (*q != 0xFF) return false;
        for (const unsigned char *q = p + used * es; q < mem.data() + mem.size(); ++q)
            if (*q != 0xFF) return false;
        return true;
    }
};

struct Counter {
    long bad = 0, checks = 0;
    std::string ctx;
    void fail(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
};
inline void Counter::fail(const char *fmt, ...) {
    if (bad < 40) {
        va_list ap;
        va_start(ap, fmt);
        printf("MISMATCH [%s] ", ctx.c_str());
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
    bad++;
}

// |got - want| <= tol, NaN matching NaN, infinities equal.
inline bool close(double got, double want, double tol) {
    if (want != want) return got != got;
    if (got != got) return false;
    if (isinf(want) || isinf(got)) return got == want;
    return fabs(got - want) <= tol;
}
// Exact equality of values, NaN matching any NaN, and the sign of zero.
inline bool same(double got, double want) {
    if (want != want) return got != got;
    return got == want && signbit(got) == signbit(want);
}

} // namespace chk
