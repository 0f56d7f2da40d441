// convert.hip - dtype conversions for candle-rocm's to_dtype, with the semantics of Rust's `as`
// casts and of the `half` crate's conversions, which Candle's CPU backend uses.
//
// Written for candle-rocm (not from candle-kernels). One kernel per ordered pair of the nine
// dtypes (identity pairs included), named cast_<S>_<D>:
//   cast_<S>_<D>(size_t numel, size_t num_dims, const size_t *info, const S *inp, D *out)
// info is null (inp contiguous) or holds dims[num_dims] then strides[num_dims]; inp points at the
// layout's first element; out is contiguous with numel elements.
//
// Rules (S -> D):
//   int -> int          wraps: truncates or sign-/zero-extends (two's complement).
//   int -> f32/f64      rounds to nearest even.
//   int -> f16/bf16     through f32 (like the CPU backend's `from_f32(v as f32)`).
//   float -> int        truncates toward zero, saturating at the integer range; NaN -> 0.
//   f64 -> f32          rounds to nearest even, overflow -> inf.
//   f32 -> f16/bf16     rounds to nearest even, NaN stays NaN, overflow -> inf.
//   f64 -> f16/bf16     rounded once, to nearest even, from the f64 value (through an f32
//                       rounded to odd, which cannot double-round).
//   f16/bf16 -> *       through f32 (exact), then as from f32. bf16 NaNs are quieted the way the
//                       `half` crate does (payload kept, quiet bit set).
// Every float -> int conversion compares against exact powers of two before the C cast, so the
// cast only ever sees in-range values (out-of-range C casts are undefined behaviour).
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

// ---- strided addressing ---------------------------------------------------------------------------
__device__ __forceinline__ bool layout_contiguous(size_t num_dims, const size_t *dims,
                                                  const size_t *strides) {
    size_t acc = 1;
    for (size_t d = num_dims; d-- > 0;) {
        if (dims[d] > 1 && strides[d] != acc) return false;
        acc *= dims[d];
    }
    return true;
}

// Element offset of row-major linear index i in a (dims, strides) layout.
__device__ __forceinline__ size_t strided_offset(size_t i, size_t num_dims, const size_t *dims,
                                                 const size_t *strides) {
    size_t off = 0;
    for (size_t d = num_dims; d-- > 0;) {
        size_t n = dims[d];
        size_t q = i / n;
        off += (i - q * n) * strides[d];
        i = q;
    }
    return off;
}

// ---- integer traits ---------------------------------------------------------------------------------
template <typename T> struct IntInfo;
// lo/hi: exact powers of two bracketing the range: values v with lo < v < hi truncate into range;
// v <= lo saturates to min, v >= hi to max.
template <> struct IntInfo<uint8_t> {
    typedef uint8_t U;
    static __device__ __forceinline__ uint8_t min_v() { return 0; }
    static __device__ __forceinline__ uint8_t max_v() { return 0xffu; }
    static __device__ __forceinline__ double lo() { return 0.0; }
    static __device__ __forceinline__ double hi() { return 256.0; }
};
template <> struct IntInfo<uint32_t> {
    typedef uint32_t U;
    static __device__ __forceinline__ uint32_t min_v() { return 0; }
    static __device__ __forceinline__ uint32_t max_v() { return 0xffffffffu; }
    static __device__ __forceinline__ double lo() { return 0.0; }
    static __device__ __forceinline__ double hi() { return 4294967296.0; }
};
template <> struct IntInfo<int16_t> {
    typedef uint16_t U;
    static __device__ __forceinline__ int16_t min_v() { return (int16_t)-32768; }
    static __device__ __forceinline__ int16_t max_v() { return (int16_t)32767; }
    static __device__ __forceinline__ double lo() { return -32768.0; }
    static __device__ __forceinline__ double hi() { return 32768.0; }
};
template <> struct IntInfo<int32_t> {
    typedef uint32_t U;
    static __device__ __forceinline__ int32_t min_v() { return (int32_t)(-2147483647 - 1); }
    static __device__ __forceinline__ int32_t max_v() { return (int32_t)2147483647; }
    static __device__ __forceinline__ double lo() { return -2147483648.0; }
    static __device__ __forceinline__ double hi() { return 2147483648.0; }
};
template <> struct IntInfo<int64_t> {
    typedef uint64_t U;
    static __device__ __forceinline__ int64_t min_v() { return (int64_t)(-9223372036854775807LL - 1); }
    static __device__ __forceinline__ int64_t max_v() { return (int64_t)9223372036854775807LL; }
    static __device__ __forceinline__ double lo() { return -9223372036854775808.0; }
    static __device__ __forceinline__ double hi() { return 9223372036854775808.0; }
};

// Integer -> integer, wrapping (through the destination's unsigned type).
template <typename D, typename S> __device__ __forceinline__ D wrap_int(S x) {
    return (D)(typename IntInfo<D>::U)x;
}

// Float (f32 or f64) -> integer, saturating, NaN -> 0. The bounds are powers of two, exact in
// both float types, so comparing in the source type is exact.
template <typename D, typename F> __device__ __forceinline__ D sat_int(F x) {
    if (!(x == x)) return (D)0;
    if (x <= (F)IntInfo<D>::lo()) return IntInfo<D>::min_v();
    if (x >= (F)IntInfo<D>::hi()) return IntInfo<D>::max_v();
    return (D)x;
}

// ---- 16-bit float helpers ---------------------------------------------------------------------------
__device__ __forceinline__ float bf16_to_f32(__nv_bfloat16 b) {
    unsigned int bits = (unsigned int)__bfloat16_as_ushort(b);
    unsigned int u = bits << 16;
    if ((bits & 0x7fffu) > 0x7f80u) u |= 0x00400000u;  // NaN: quiet it, keep the payload
    return __uint_as_float(u);
}
__device__ __forceinline__ float f16_to_f32(__half h) { return __half2float(h); }

// f64 -> f32 rounded to odd: truncate toward zero, then set the last bit if anything was lost.
// An f32 rounded to odd carries enough sticky information for a second rounding to the much
// narrower f16/bf16 to equal a single rounding of the f64 value.
__device__ __forceinline__ float f64_to_f32_odd(double d) {
    float f = (float)d;
    if (!(d == d)) return f;
    double back = (double)f;
    if (back != d) {
        unsigned int u = __float_as_uint(f);
        if (fabs(back) > fabs(d)) u -= 1u;  // rounded away from zero: step back toward zero
        u |= 1u;
        f = __uint_as_float(u);
    }
    return f;
}

// ---- conversions into each destination type ---------------------------------------------------------
// to_int<D>(x): any source -> integer D.
template <typename D> __device__ __forceinline__ D to_int(uint8_t x) { return wrap_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(uint32_t x) { return wrap_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(int16_t x) { return wrap_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(int32_t x) { return wrap_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(int64_t x) { return wrap_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(float x) { return sat_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(double x) { return sat_int<D>(x); }
template <typename D> __device__ __forceinline__ D to_int(__half x) { return sat_int<D>(f16_to_f32(x)); }
template <typename D> __device__ __forceinline__ D to_int(__nv_bfloat16 x) {
    return sat_int<D>(bf16_to_f32(x));
}

__device__ __forceinline__ float to_f32(uint8_t x) { return (float)x; }
__device__ __forceinline__ float to_f32(uint32_t x) { return (float)x; }
__device__ __forceinline__ float to_f32(int16_t x) { return (float)x; }
__device__ __forceinline__ float to_f32(int32_t x) { return (float)x; }
__device__ __forceinline__ float to_f32(int64_t x) { return (float)x; }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(double x) { return (float)x; }
__device__ __forceinline__ float to_f32(__half x) { return f16_to_f32(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return bf16_to_f32(x); }

__device__ __forceinline__ double to_f64(uint8_t x) { return (double)x; }
__device__ __forceinline__ double to_f64(uint32_t x) { return (double)x; }
__device__ __forceinline__ double to_f64(int16_t x) { return (double)x; }
__device__ __forceinline__ double to_f64(int32_t x) { return (double)x; }
__device__ __forceinline__ double to_f64(int64_t x) { return (double)x; }
__device__ __forceinline__ double to_f64(float x) { return (double)x; }
__device__ __forceinline__ double to_f64(double x) { return x; }
__device__ __forceinline__ double to_f64(__half x) { return (double)f16_to_f32(x); }
__device__ __forceinline__ double to_f64(__nv_bfloat16 x) { return (double)bf16_to_f32(x); }

// f16/bf16: from f32 by one RNE rounding; f64 via the round-to-odd f32; integers via `as f32`.
template <typename S> __device__ __forceinline__ __half to_f16(S x) { return __float2half(to_f32(x)); }
template <> __device__ __forceinline__ __half to_f16<double>(double x) {
    return __float2half(f64_to_f32_odd(x));
}
template <> __device__ __forceinline__ __half to_f16<__half>(__half x) { return x; }

template <typename S> __device__ __forceinline__ __nv_bfloat16 to_bf16(S x) {
    return __float2bfloat16(to_f32(x));
}
template <> __device__ __forceinline__ __nv_bfloat16 to_bf16<double>(double x) {
    return __float2bfloat16(f64_to_f32_odd(x));
}
template <> __device__ __forceinline__ __nv_bfloat16 to_bf16<__nv_bfloat16>(__nv_bfloat16 x) {
    return x;
}

// ---- kernels ------------------------------------------------------------------------------------
template <typename S, typename D, D (*CONV)(S)>
__device__ __forceinline__ void cast_body(size_t numel, size_t num_dims, const size_t *info,
                                          const S *inp, D *out) {
    const size_t *dims = info;
    const size_t *strides = info + num_dims;
    const size_t step = (size_t)blockDim.x * gridDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (info == nullptr || layout_contiguous(num_dims, dims, strides)) {
        for (; i < numel; i += step) out[i] = CONV(inp[i]);
    } else {
        for (; i < numel; i += step) out[i] = CONV(inp[strided_offset(i, num_dims, dims, strides)]);
    }
}

#define CAST(S, SN, D, DN, CONV)                                                                 \
    extern "C" __global__ void cast_##SN##_##DN(const size_t numel, const size_t num_dims,       \
                                                const size_t *info, const S *inp, D *out) {      \
        cast_body<S, D, CONV>(numel, num_dims, info, inp, out);                                  \
    }

#define CAST_FROM(S, SN)                                                                         \
    CAST(S, SN, uint8_t, u8, to_int<uint8_t>)                                                    \
    CAST(S, SN, uint32_t, u32, to_int<uint32_t>)                                                 \
    CAST(S, SN, int16_t, i16, to_int<int16_t>)                                                   \
    CAST(S, SN, int32_t, i32, to_int<int32_t>)                                                   \
    CAST(S, SN, int64_t, i64, to_int<int64_t>)                                                   \
    CAST(S, SN, __nv_bfloat16, bf16, to_bf16<S>)                                                 \
    CAST(S, SN, __half, f16, to_f16<S>)                                                          \
    CAST(S, SN, float, f32, to_f32)                                                              \
    CAST(S, SN, double, f64, to_f64)

CAST_FROM(uint8_t, u8)
CAST_FROM(uint32_t, u32)
CAST_FROM(int16_t, i16)
CAST_FROM(int32_t, i32)
CAST_FROM(int64_t, i64)
CAST_FROM(__nv_bfloat16, bf16)
CAST_FROM(__half, f16)
CAST_FROM(float, f32)
CAST_FROM(double, f64)
