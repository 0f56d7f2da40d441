// elementwise.hip - bandwidth-bound elementwise kernels for candle-rocm: unary ops, affine, elu,
// powf, binary ops and float casts, with a contiguous fast path (128-bit loads and stores) and a
// strided path whose shape and strides come by value in the kernel arguments (no upload).
//
// Written for candle-rocm (not from candle-kernels); the math of every op is candle-kernels'
// (unary.cu, affine.cu, binary.cu) computed in f32 for f16/bf16 and rounded once, and the casts
// follow convert.hip's rules. Nothing here depends on the wave size (32 or 64): threads only read
// and write their own elements.
//
// Dtypes: unary/affine/elu/powf and casts for f32, f16, bf16, f64; binary ops also for u8, u32,
// i16, i32, i64. Kernels, T the element type, C its compute type (float, or double for f64;
// the integer type itself for integers):
//   <op>_<dt>(size_t n, const T *inp, T *out)                          contiguous unary
//   <op>_<dt>_strided(size_t n, EwStrided1 s, const T *inp, T *out)    strided unary
//     <op> in uneg urecip uexp ulog usin ucos utanh uerf uceil ufloor uround uabs usqr
//     usqrt ugelu ugelu_erf urelu usilu usign usigmoid
//   affine_<dt>[_strided](..., C mul, C add)     x * mul + add (the product rounded to T first)
//   uelu_<dt>[_strided](..., C alpha), upowf_<dt>[_strided](..., C e)
//   <op>_<dt>(size_t n, const T *lhs, const T *rhs, T *out)            contiguous binary
//   <op>_<dt>_strided(size_t n, EwStrided2 s, const T *lhs, const T *rhs, T *out)
//     <op> in badd bsub bmul bdiv bmaximum bminimum
//   cast_<s>_<d>[_strided](size_t n, [EwStrided1 s,] const S *inp, D *out)
//   where_<c>_<dt>(size_t n, const C *cond, const T *t, const T *f, T *out)   contiguous select
//   where_<c>_<dt>_strided(size_t n, EwStrided3 s, const C *cond, const T *t, const T *f, T *out)
//     out[i] = cond[i] != 0 ? t[i] : f[i], bits copied as they are (a pure select: NaN payloads
//     and -0.0 kept, like the CPU); C in u8 u32 i16 i32 i64, T every binary dtype; both are
//     declared as the unsigned integer of their size (the select only moves bits).
// inp/lhs/rhs/cond/t/f point at the layout's first element; out is contiguous with n elements.
// Scalars of f16/bf16 kernels are f32 values the host already rounded to T.
//
// Work split (host: candle-rocm/src/launch/elementwise.rs computes the grid from n and the vector
// width): blocks of at most EW_BLOCK threads; a block handles tiles of blockDim * EW_UNROLL
// packs of VEC = 16 / sizeof(smallest element type) elements, grid-stride (where: see SelVec). The contiguous path
// loads and stores whole 16-byte-aligned packs when every pointer is 16-byte aligned, with a
// scalar tail; otherwise (a view at an odd offset) it runs the same tiles element by element,
// still coalesced. The strided path computes each element's offsets from its linear index with
// precomputed magic-number division (EwDims, innermost dim first); with `vec` set, the host
// promises dims[0] % VEC == 0 and, per operand, stride[0] == 0 (one value broadcast over the
// pack) or stride[0] == 1 with every stride a multiple of VEC, so whole packs are loaded once
// the base pointers are 16-byte aligned (checked here): row and column broadcasts.
//
// Plain CUDA syntax, so the same file builds for AMD (clang, kernels/include headers) and for the
// HIP-on-CUDA harness (nvcc with CUDA's own headers).
#include "cuda_fp16.h"
#include <stdint.h>

#define EW_BLOCK 256
#ifndef EW_UNROLL
#define EW_UNROLL 1  // packs per thread per tile: a tuning knob
#endif
#define EW_MAX_RANK 6

// ---- dtypes: storage type S, compute type C ----------------------------------------------------
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
    unsigned int u = (unsigned int)b << 16;
    if ((b & 0x7fffu) > 0x7f80u) u |= 0x00400000u;  // NaN: quiet it, keep the payload
    return __uint_as_float(u);
}
// The same without quieting a signalling NaN: for values whose result goes back through
// f32_to_bf16_bits (which quiets every NaN), so a NaN in gives the same bits out either way.
// One shift instead of four instructions per element.
__device__ __forceinline__ float bf16_bits_to_f32_raw(uint16_t b) { return __uint_as_float((unsigned int)b << 16); }
// Round to nearest even; NaN stays NaN (quiet, sign and payload top bits kept), like `half`.
// The NaN test is a float compare and a select on the rounded word (no branch, no separate
// shift per path): five to six instructions per element instead of seven.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
    const unsigned int u = __float_as_uint(f);
    const unsigned int r = u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((f != f ? (u | 0x00400000u) : r) >> 16);
}
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) { return __half_as_ushort(__float2half(f)); }

// f64 -> f32 rounded to odd (see convert.hip): a second rounding to f16/bf16 then equals one
// rounding of the f64 value.
__device__ __forceinline__ float f64_to_f32_odd(double d) {
    float f = (float)d;
    if (!(d == d)) return f;
    double back = (double)f;
    if (back != d) {
        unsigned int u = __float_as_uint(f);
        if (fabs(back) > fabs(d)) u -= 1u;
        u |= 1u;
        f = __uint_as_float(u);
    }
    return f;
}

struct DF32 {
    typedef float S;
    typedef float C;
    static constexpr bool half_type = false;
    static __device__ __forceinline__ C load(S x) { return x; }
    static __device__ __forceinline__ C load_q(S x) { return x; }
    static __device__ __forceinline__ S store(C x) { return x; }
};
struct DF64 {
    typedef double S;
    typedef double C;
    static constexpr bool half_type = false;
    static __device__ __forceinline__ C load(S x) { return x; }
    static __device__ __forceinline__ C load_q(S x) { return x; }
    static __device__ __forceinline__ S store(C x) { return x; }
};
struct DF16 {
    typedef uint16_t S;
    typedef float C;
    static constexpr bool half_type = true;
    static __device__ __forceinline__ C load(S x) { return f16_bits_to_f32(x); }
    static __device__ __forceinline__ C load_q(S x) { return f16_bits_to_f32(x); }
    static __device__ __forceinline__ S store(C x) { return f32_to_f16_bits(x); }
};
struct DBF16 {
    typedef uint16_t S;
    typedef float C;
    static constexpr bool half_type = true;
    // load: the math ops (their result is stored back through store, which quiets NaN);
    // load_q: casts, where the loaded value itself is the result.
    static __device__ __forceinline__ C load(S x) { return bf16_bits_to_f32_raw(x); }
    static __device__ __forceinline__ C load_q(S x) { return bf16_bits_to_f32(x); }
    static __device__ __forceinline__ S store(C x) { return f32_to_bf16_bits(x); }
};
// Integers (binary ops only): W is the unsigned type wrapping arithmetic is done in.
template <typename T, typename W, bool SIGNED> struct DInt {
    typedef T S;
    typedef T C;
    typedef W Wide;
    static constexpr bool is_signed = SIGNED;
    static constexpr bool half_type = false;
    static __device__ __forceinline__ C load(S x) { return x; }
    static __device__ __forceinline__ C load_q(S x) { return x; }
    static __device__ __forceinline__ S store(C x) { return x; }
};
typedef DInt<uint8_t, uint32_t, false> DU8;
typedef DInt<uint32_t, uint32_t, false> DU32;
typedef DInt<int16_t, uint32_t, true> DI16;
typedef DInt<int32_t, uint32_t, true> DI32;
typedef DInt<int64_t, uint64_t, true> DI64;

// ---- math on the compute type (candle-kernels' cuda_utils.cuh functions) ------------------------
// The long polynomial and range-reduction code of sin, cos, erf and pow is called rather than
// inlined into every pack lane (it would multiply the code size by the pack width for ops no
// model runs at bandwidth).
#define EW_COLD __device__ __noinline__
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
EW_COLD float m_sin(float x) { return sinf(x); }
EW_COLD double m_sin(double x) { return sin(x); }
EW_COLD float m_cos(float x) { return cosf(x); }
EW_COLD double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
EW_COLD float m_erf(float x) { return erff(x); }
EW_COLD double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float m_round(float x) { return roundf(x); }
__device__ __forceinline__ double m_round(double x) { return round(x); }
__device__ __forceinline__ float m_normcdf(float x) { return normcdff(x); }
__device__ __forceinline__ double m_normcdf(double x) { return normcdf(x); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
EW_COLD float m_pow(float x, float e) { return powf(x, e); }
EW_COLD double m_pow(double x, double e) { return pow(x, e); }
__device__ __forceinline__ float m_fmax(float x, float y) { return fmaxf(x, y); }
__device__ __forceinline__ double m_fmax(double x, double y) { return fmax(x, y); }
__device__ __forceinline__ float m_fmin(float x, float y) { return fminf(x, y); }
__device__ __forceinline__ double m_fmin(double x, double y) { return fmin(x, y); }

// max/min as candle-kernels' maxg/ming: fmax/fmin (a number beats NaN) for f32/f64,
// __hmax_nan/__hmin_nan (NaN wins) for f16/bf16.
template <typename D> __device__ __forceinline__ typename D::C max_of(typename D::C x, typename D::C y) {
    if constexpr (D::half_type) return (x != x || y != y) ? __int_as_float(0x7fffffff) : (x > y ? x : y);
    else return m_fmax(x, y);
}
template <typename D> __device__ __forceinline__ typename D::C min_of(typename D::C x, typename D::C y) {
    if constexpr (D::half_type) return (x != x || y != y) ? __int_as_float(0x7fffffff) : (x < y ? x : y);
    else return m_fmin(x, y);
}

// exp, tanh and quotients inside silu, sigmoid and gelu for f16/bf16 results: the hardware's
// approximate exp (a couple of f32 ulps) and division, and tanh through them; their error is
// far below the half type's rounding, and the full-precision library calls made these ops
// compute-bound at 8 elements per 16-byte pack. f32 and f64 keep the library functions.
template <typename D> __device__ __forceinline__ typename D::C h_exp(typename D::C x) {
    if constexpr (D::half_type) return __expf(x);
    else return m_exp(x);
}
template <typename D> __device__ __forceinline__ typename D::C h_div(typename D::C x, typename D::C y) {
    if constexpr (D::half_type) return __fdividef(x, y);
    else return x / y;
}
// tanh y = 1 - 2 / (e^(2y) + 1): +-1 at the ends (e^(2y) overflowing to inf or going to 0),
// NaN for NaN; near 0 its absolute error is a few f32 ulps of 1, which is what gelu's 1 + tanh
// sees.
template <typename D> __device__ __forceinline__ typename D::C h_tanh(typename D::C x) {
    if constexpr (D::half_type) return 1.0f - __fdividef(2.0f, __expf(2.0f * x) + 1.0f);
    else return m_tanh(x);
}

// ---- unary ops: f(D, C x) -> C ------------------------------------------------------------------
#define EW_UNARY_FN(NAME, EXPR)                                                                  \
    struct NAME {                                                                                \
        template <typename D> __device__ __forceinline__ typename D::C f(typename D::C x) const { \
            typedef typename D::C C;                                                             \
            (void)sizeof(C);                                                                     \
            return EXPR;                                                                         \
        }                                                                                        \
    };
EW_UNARY_FN(OpNeg, -x)
EW_UNARY_FN(OpRecip, (C)1 / x)
EW_UNARY_FN(OpExp, m_exp(x))
EW_UNARY_FN(OpLog, m_log(x))
EW_UNARY_FN(OpSin, m_sin(x))
EW_UNARY_FN(OpCos, m_cos(x))
EW_UNARY_FN(OpTanh, m_tanh(x))
EW_UNARY_FN(OpErf, m_erf(x))
EW_UNARY_FN(OpCeil, m_ceil(x))
EW_UNARY_FN(OpFloor, m_floor(x))
EW_UNARY_FN(OpRound, m_round(x))
EW_UNARY_FN(OpNormcdf, m_normcdf(x))
EW_UNARY_FN(OpAbs, m_abs(x))
EW_UNARY_FN(OpSqr, x * x)
EW_UNARY_FN(OpSqrt, m_sqrt(x))
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), candle-kernels' gelu_fwd.
EW_UNARY_FN(OpGelu, (C)0.5 * x * ((C)1 + h_tanh<D>((C)0.79788456080286535588 * (x + (C)0.044715 * (x * x * x)))))
EW_UNARY_FN(OpGeluErf, x * m_normcdf(x))
EW_UNARY_FN(OpRelu, max_of<D>(x, (C)0))
EW_UNARY_FN(OpSilu, h_div<D>(x, (C)1 + h_exp<D>(-x)))
EW_UNARY_FN(OpSign, (C)(x > (C)0) - (C)(x < (C)0))
EW_UNARY_FN(OpSigmoid, h_div<D>((C)1, (C)1 + h_exp<D>(-x)))

// Unary functor with the dtype's load/store around the op.
template <typename D, typename OP> struct UnaryF {
    OP op;
    __device__ __forceinline__ typename D::S operator()(typename D::S x) const {
        return D::store(op.template f<D>(D::load(x)));
    }
};
// x * mul + add; for f16/bf16 the product is rounded to the type first, like candle-kernels'
// half-precision arithmetic and the CPU's.
template <typename D> struct AffineF {
    typename D::C mul, add;
    __device__ __forceinline__ typename D::S operator()(typename D::S x) const {
        typename D::C p = D::load(x) * mul;
        if constexpr (D::half_type) p = D::load(D::store(p));
        return D::store(p + add);
    }
};
template <typename D> struct EluF {
    typename D::C alpha;
    __device__ __forceinline__ typename D::S operator()(typename D::S x) const {
        typename D::C v = D::load(x);
        return D::store(v > (typename D::C)0 ? v : alpha * (m_exp(v) - (typename D::C)1));
    }
};
template <typename D> struct PowfF {
    typename D::C e;
    __device__ __forceinline__ typename D::S operator()(typename D::S x) const {
        return D::store(m_pow(D::load(x), e));
    }
};

// ---- casts between f32, f16, bf16, f64 (convert.hip's rules) ------------------------------------
template <typename F, typename T> struct CastF {
    __device__ __forceinline__ typename T::S operator()(typename F::S x) const {
        return T::store((typename T::C)F::load_q(x));  // widening or f32 -> f16/bf16: one rounding
    }
};
template <typename T> struct CastF<T, T> {
    __device__ __forceinline__ typename T::S operator()(typename T::S x) const { return x; }
};
template <> struct CastF<DF64, DF32> {
    __device__ __forceinline__ float operator()(double x) const { return (float)x; }
};
template <> struct CastF<DF64, DF16> {
    __device__ __forceinline__ uint16_t operator()(double x) const { return f32_to_f16_bits(f64_to_f32_odd(x)); }
};
template <> struct CastF<DF64, DBF16> {
    __device__ __forceinline__ uint16_t operator()(double x) const { return f32_to_bf16_bits(f64_to_f32_odd(x)); }
};

// ---- binary ops: f(D, C x, C y) -> C ------------------------------------------------------------
template <typename D, bool INT> struct Arith;
template <typename D> struct Arith<D, false> {
    typedef typename D::C C;
    static __device__ __forceinline__ C add(C x, C y) { return x + y; }
    static __device__ __forceinline__ C sub(C x, C y) { return x - y; }
    static __device__ __forceinline__ C mul(C x, C y) { return x * y; }
    static __device__ __forceinline__ C div(C x, C y) { return x / y; }
};
// Integers wrap (two's complement) like a release-mode CPU build; division by zero gives 0 and
// MIN / -1 wraps to MIN (the CPU panics on both): no undefined behaviour on any input.
template <typename D> struct Arith<D, true> {
    typedef typename D::C C;
    typedef typename D::Wide W;
    static __device__ __forceinline__ C add(C x, C y) { return (C)((W)x + (W)y); }
    static __device__ __forceinline__ C sub(C x, C y) { return (C)((W)x - (W)y); }
    static __device__ __forceinline__ C mul(C x, C y) { return (C)((W)x * (W)y); }
    static __device__ __forceinline__ C div(C x, C y) {
        if (y == (C)0) return (C)0;
        if constexpr (D::is_signed) {
            if (y == (C)-1) return (C)((W)0 - (W)x);
        }
        return (C)(x / y);
    }
};
template <typename D> struct IsInt { static constexpr bool value = false; };
template <typename T, typename W, bool S> struct IsInt<DInt<T, W, S> > { static constexpr bool value = true; };

#define EW_BINARY_FN(NAME, BODY)                                                                 \
    struct NAME {                                                                                \
        template <typename D>                                                                    \
        __device__ __forceinline__ typename D::C f(typename D::C x, typename D::C y) const {     \
            typedef Arith<D, IsInt<D>::value> A;                                                 \
            (void)sizeof(A);                                                                     \
            BODY;                                                                                \
        }                                                                                        \
    };
EW_BINARY_FN(OpAdd, return A::add(x, y))
EW_BINARY_FN(OpSub, return A::sub(x, y))
EW_BINARY_FN(OpMul, return A::mul(x, y))
EW_BINARY_FN(OpDiv, return A::div(x, y))
EW_BINARY_FN(OpMax, if constexpr (IsInt<D>::value) return x > y ? x : y; else return max_of<D>(x, y))
EW_BINARY_FN(OpMin, if constexpr (IsInt<D>::value) return x < y ? x : y; else return min_of<D>(x, y))

template <typename D, typename OP> struct BinaryF {
    OP op;
    __device__ __forceinline__ typename D::S operator()(typename D::S x, typename D::S y) const {
        return D::store(op.template f<D>(D::load(x), D::load(y)));
    }
};

// ---- shapes passed by value ---------------------------------------------------------------------
// Dims innermost first; entries past `rank` are unused. q = x / dims[d] is
// (mulhi(x, magic[d]) + x) >> shift[d] (computed in 64 bits: exact for every 32-bit x).
struct EwDims {
    uint32_t rank;
    uint32_t vec;
    uint32_t dims[EW_MAX_RANK];
    uint32_t magic[EW_MAX_RANK];
    uint32_t shift[EW_MAX_RANK];
};
struct EwStrided1 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
};
struct EwStrided2 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
    uint32_t s1[EW_MAX_RANK];
};

struct EwStrided3 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
    uint32_t s1[EW_MAX_RANK];
    uint32_t s2[EW_MAX_RANK];
};

__device__ __forceinline__ uint32_t fast_div(uint32_t x, uint32_t magic, uint32_t shift) {
    uint32_t hi = (uint32_t)(((uint64_t)x * magic) >> 32);
    return (uint32_t)(((uint64_t)hi + x) >> shift);
}

// Offsets of linear index i for one or two operands.
__device__ __forceinline__ uint32_t offset1(uint32_t i, const EwDims &d, const uint32_t *s0) {
    uint32_t o = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        o += (i - q * d.dims[k]) * s0[k];
        i = q;
    }
    return o;
}
__device__ __forceinline__ void offset2(uint32_t i, const EwDims &d, const uint32_t *s0,
                                        const uint32_t *s1, uint32_t &o0, uint32_t &o1) {
    o0 = 0;
    o1 = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        uint32_t r = i - q * d.dims[k];
        o0 += r * s0[k];
        o1 += r * s1[k];
        i = q;
    }
}

__device__ __forceinline__ void offset3(uint32_t i, const EwDims &d, const uint32_t *s0, const uint32_t *s1,
                                        const uint32_t *s2, uint32_t &o0, uint32_t &o1, uint32_t &o2) {
    o0 = 0;
    o1 = 0;
    o2 = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        uint32_t r = i - q * d.dims[k];
        o0 += r * s0[k];
        o1 += r * s1[k];
        o2 += r * s2[k];
        i = q;
    }
}

// ---- packs ----------------------------------------------------------------------------------
template <typename T, int N> struct alignas(16) Pack {
    T v[N];
};
__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <int A, int B> struct MinI { static constexpr int value = A < B ? A : B; };
// Elements per pack: 16 bytes of the smaller of the two types.
template <typename SI, typename SO> struct VecOf {
    static constexpr int value = 16 / MinI<(int)sizeof(SI), (int)sizeof(SO)>::value;
};

// ---- engines --------------------------------------------------------------------------------
// One input of SI, output SO, f: SI -> SO. Contiguous.
template <typename SI, typename SO, typename F>
__device__ __forceinline__ void map1_contig(size_t n, const SI *__restrict__ in, SO *__restrict__ out, F f) {
    constexpr int VEC = VecOf<SI, SO>::value;
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(in) && aligned16(out)) {
        typedef Pack<SI, VEC> PI;
        typedef Pack<SO, VEC> PO;
        const size_t npack = n / VEC;
        const PI *pin = reinterpret_cast<const PI *>(in);
        PO *pout = reinterpret_cast<PO *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PI a[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) a[u] = pin[p];
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PO r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = f(in[i]);
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(in[i]);
        }
    }
}

// One strided input (n <= 2^32 - 1 and every offset < 2^32: the host checks both). Without
// PACKS (the unary math ops, to keep one copy of their code) it always takes the element path.
template <bool PACKS, typename SI, typename SO, typename F>
__device__ __forceinline__ void map1_strided(size_t n_, const EwStrided1 &s, const SI *__restrict__ in,
                                             SO *__restrict__ out, F f) {
    constexpr int VEC = VecOf<SI, SO>::value;
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    if (PACKS && s.d.vec && aligned16(in) && aligned16(out)) {
        typedef Pack<SI, VEC> PI;
        typedef Pack<SO, VEC> PO;
        const size_t npack = n / VEC;
        const bool bcast = s.s0[0] == 0;
        PO *pout = reinterpret_cast<PO *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PI a[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    uint32_t o = offset1((uint32_t)(p * VEC), s.d, s.s0);
                    if (bcast) {
                        SI x = in[o];
#pragma unroll
                        for (int j = 0; j < VEC; ++j) a[u].v[j] = x;
                    } else {
                        a[u] = *reinterpret_cast<const PI *>(in + o);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PO r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(in[offset1((uint32_t)i, s.d, s.s0)]);
        }
    }
}

// Two inputs of S, f: (S, S) -> S. Contiguous.
template <typename S, typename F>
__device__ __forceinline__ void map2_contig(size_t n, const S *__restrict__ lhs, const S *__restrict__ rhs,
                                            S *__restrict__ out, F f) {
    constexpr int VEC = 16 / (int)sizeof(S);
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(lhs) && aligned16(rhs) && aligned16(out)) {
        typedef Pack<S, VEC> P;
        const size_t npack = n / VEC;
        const P *pa = reinterpret_cast<const P *>(lhs);
        const P *pb = reinterpret_cast<const P *>(rhs);
        P *pout = reinterpret_cast<P *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            P a[EW_UNROLL], b[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    a[u] = pa[p];
                    b[u] = pb[p];
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    P r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j], b[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = f(lhs[i], rhs[i]);
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(lhs[i], rhs[i]);
        }
    }
}

// Two strided inputs (broadcasting gives an operand stride 0).
template <typename S, typename F>
__device__ __forceinline__ void map2_strided(size_t n_, const EwStrided2 &s, const S *__restrict__ lhs,
                                             const S *__restrict__ rhs, S *__restrict__ out, F f) {
    constexpr int VEC = 16 / (int)sizeof(S);
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    if (s.d.vec && aligned16(lhs) && aligned16(rhs) && aligned16(out)) {
        typedef Pack<S, VEC> P;
        const size_t npack = n / VEC;
        const bool bl = s.s0[0] == 0, br = s.s1[0] == 0;
        P *pout = reinterpret_cast<P *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            P a[EW_UNROLL], b[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    uint32_t oa, ob;
                    offset2((uint32_t)(p * VEC), s.d, s.s0, s.s1, oa, ob);
                    if (bl) {
                        S x = lhs[oa];
#pragma unroll
                        for (int j = 0; j < VEC; ++j) a[u].v[j] = x;
                    } else {
                        a[u] = *reinterpret_cast<const P *>(lhs + oa);
                    }
                    if (br) {
                        S y = rhs[ob];
#pragma unroll
                        for (int j = 0; j < VEC; ++j) b[u].v[j] = y;
                    } else {
                        b[u] = *reinterpret_cast<const P *>(rhs + ob);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    P r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j], b[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) {
                uint32_t oa, ob;
                offset2((uint32_t)i, s.d, s.s0, s.s1, oa, ob);
                out[i] = f(lhs[oa], rhs[ob]);
            }
        }
    }
}

// Select, out = cond != 0 ? a : b, with C and T unsigned integers of the operands' sizes (the
// select moves bits). A pack is 16 bytes of the smaller type, capped at 64 bytes of the larger
// (u8 conditions with 8-byte values, 8-byte conditions with u8 values: 8 elements, so one
// thread's registers hold at most three 64-byte packs; the smaller operand then moves in 8-byte
// pieces). Contiguous: whole packs when every pointer is 16-byte aligned, else elements.
template <typename C, typename T> struct SelVec {
    static constexpr int small = MinI<(int)sizeof(C), (int)sizeof(T)>::value;
    static constexpr int large = (int)(sizeof(C) + sizeof(T)) - small;
    static constexpr int value = MinI<16 / small, 64 / large>::value;
};
// A pack of N elements aligned to its size, at most 16 (the packs of a 16-byte-aligned base).
template <typename T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) SPack {
    T v[N];
};

template <typename C, typename T>
__device__ __forceinline__ void select_contig(size_t n, const C *__restrict__ cond, const T *__restrict__ a,
                                              const T *__restrict__ b, T *__restrict__ out) {
    constexpr int VEC = SelVec<C, T>::value;
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(cond) && aligned16(a) && aligned16(b) && aligned16(out)) {
        typedef SPack<C, VEC> PC;
        typedef SPack<T, VEC> PT;
        const size_t npack = n / VEC;
        const PC *pc = reinterpret_cast<const PC *>(cond);
        const PT *pa = reinterpret_cast<const PT *>(a);
        const PT *pb = reinterpret_cast<const PT *>(b);
        PT *pout = reinterpret_cast<PT *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PC c[EW_UNROLL];
            PT x[EW_UNROLL], y[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    c[u] = pc[p];
                    x[u] = pa[p];
                    y[u] = pb[p];
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PT r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = c[u].v[j] != 0 ? x[u].v[j] : y[u].v[j];
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = cond[i] != 0 ? a[i] : b[i];
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = cond[i] != 0 ? a[i] : b[i];
        }
    }
}

// Loads pack p of a strided operand at offset o: the whole pack, or (stride 0 along dim 0)
// one value repeated.
template <typename S, int VEC>
__device__ __forceinline__ SPack<S, VEC> load_pack(const S *__restrict__ base, uint32_t o, bool bcast) {
    SPack<S, VEC> r;
    if (bcast) {
        S x = base[o];
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = x;
    } else {
        r = *reinterpret_cast<const SPack<S, VEC> *>(base + o);
    }
    return r;
}

// Select with three strided operands (a broadcast condition is the common case). With `vec`
// a broadcast operand (stride 0 along dim 0) is read one value per pack and needs no alignment.
template <typename C, typename T>
__device__ __forceinline__ void select_strided(size_t n_, const EwStrided3 &s, const C *__restrict__ cond,
                                               const T *__restrict__ a, const T *__restrict__ b,
                                               T *__restrict__ out) {
    constexpr int VEC = SelVec<C, T>::value;
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    const bool bc = s.s0[0] == 0, ba = s.s1[0] == 0, bb = s.s2[0] == 0;
    if (s.d.vec && (bc || aligned16(cond)) && (ba || aligned16(a)) && (bb || aligned16(b)) && aligned16(out)) {
        typedef SPack<C, VEC> PC;
        typedef SPack<T, VEC> PT;
        const size_t npack = n / VEC;
        PT *pout = reinterpret_cast<PT *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PC c[EW_UNROLL];
            PT x[EW_UNROLL], y[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    uint32_t oc, oa, ob;
                    offset3((uint32_t)(p * VEC), s.d, s.s0, s.s1, s.s2, oc, oa, ob);
                    c[u] = load_pack<C, VEC>(cond, oc, bc);
                    x[u] = load_pack<T, VEC>(a, oa, ba);
                    y[u] = load_pack<T, VEC>(b, ob, bb);
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PT r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = c[u].v[j] != 0 ? x[u].v[j] : y[u].v[j];
                    pout[p] = r;
                }
            }
        }
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) {
                uint32_t oc, oa, ob;
                offset3((uint32_t)i, s.d, s.s0, s.s1, s.s2, oc, oa, ob);
                out[i] = cond[oc] != 0 ? a[oa] : b[ob];
            }
        }
    }
}

// ---- kernels --------------------------------------------------------------------------------
#define EW_KERNEL extern "C" __global__ void __launch_bounds__(EW_BLOCK)

#define UNARY(NAME, OP, D, DN)                                                                    \
    EW_KERNEL NAME##_##DN(const size_t n, const D::S *inp, D::S *out) {                           \
        map1_contig(n, inp, out, UnaryF<D, OP>());                                                \
    }                                                                                             \
    EW_KERNEL NAME##_##DN##_strided(const size_t n, const EwStrided1 s, const D::S *inp, D::S *out) { \
        map1_strided<false>(n, s, inp, out, UnaryF<D, OP>());                                            \
    }

#define AFFINE(D, DN)                                                                             \
    EW_KERNEL affine_##DN(const size_t n, const D::S *inp, D::S *out, const D::C mul, const D::C add) { \
        AffineF<D> f;                                                                             \
        f.mul = mul;                                                                              \
        f.add = add;                                                                              \
        map1_contig(n, inp, out, f);                                                              \
    }                                                                                             \
    EW_KERNEL affine_##DN##_strided(const size_t n, const EwStrided1 s, const D::S *inp, D::S *out, \
                                    const D::C mul, const D::C add) {                             \
        AffineF<D> f;                                                                             \
        f.mul = mul;                                                                              \
        f.add = add;                                                                              \
        map1_strided<true>(n, s, inp, out, f);                                                          \
    }

#define UNARY1(NAME, FUNCTOR, FIELD, D, DN)                                                       \
    EW_KERNEL NAME##_##DN(const size_t n, const D::S *inp, D::S *out, const D::C p) {             \
        FUNCTOR<D> f;                                                                             \
        f.FIELD = p;                                                                              \
        map1_contig(n, inp, out, f);                                                              \
    }                                                                                             \
    EW_KERNEL NAME##_##DN##_strided(const size_t n, const EwStrided1 s, const D::S *inp, D::S *out, \
                                    const D::C p) {                                               \
        FUNCTOR<D> f;                                                                             \
        f.FIELD = p;                                                                              \
        map1_strided<true>(n, s, inp, out, f);                                                          \
    }

#define BINARY(NAME, OP, D, DN)                                                                   \
    EW_KERNEL NAME##_##DN(const size_t n, const D::S *lhs, const D::S *rhs, D::S *out) {          \
        map2_contig(n, lhs, rhs, out, BinaryF<D, OP>());                                          \
    }                                                                                             \
    EW_KERNEL NAME##_##DN##_strided(const size_t n, const EwStrided2 s, const D::S *lhs,          \
                                    const D::S *rhs, D::S *out) {                                 \
        map2_strided(n, s, lhs, rhs, out, BinaryF<D, OP>());                                      \
    }

#define CAST(F, FN, T, TN)                                                                        \
    EW_KERNEL cast_##FN##_##TN(const size_t n, const F::S *inp, T::S *out) {                      \
        map1_contig(n, inp, out, CastF<F, T>());                                                  \
    }                                                                                             \
    EW_KERNEL cast_##FN##_##TN##_strided(const size_t n, const EwStrided1 s, const F::S *inp, T::S *out) { \
        map1_strided<true>(n, s, inp, out, CastF<F, T>());                                              \
    }

// C, T: the unsigned integer types of the condition's and the values' sizes.
#define WHERE(C, CN, T, TN)                                                                       \
    EW_KERNEL where_##CN##_##TN(const size_t n, const C *cond, const T *t, const T *f, T *out) {   \
        select_contig(n, cond, t, f, out);                                                        \
    }                                                                                             \
    EW_KERNEL where_##CN##_##TN##_strided(const size_t n, const EwStrided3 s, const C *cond,      \
                                          const T *t, const T *f, T *out) {                       \
        select_strided(n, s, cond, t, f, out);                                                    \
    }

#define FLOAT_UNARY(D, DN)                                                                        \
    UNARY(uneg, OpNeg, D, DN)                                                                     \
    UNARY(urecip, OpRecip, D, DN)                                                                 \
    UNARY(uexp, OpExp, D, DN)                                                                     \
    UNARY(ulog, OpLog, D, DN)                                                                     \
    UNARY(usin, OpSin, D, DN)                                                                     \
    UNARY(ucos, OpCos, D, DN)                                                                     \
    UNARY(utanh, OpTanh, D, DN)                                                                   \
    UNARY(uerf, OpErf, D, DN)                                                                     \
    UNARY(uceil, OpCeil, D, DN)                                                                   \
    UNARY(ufloor, OpFloor, D, DN)                                                                 \
    UNARY(uround, OpRound, D, DN)                                                                 \
    UNARY(uabs, OpAbs, D, DN)                                                                     \
    UNARY(usqr, OpSqr, D, DN)                                                                     \
    UNARY(usqrt, OpSqrt, D, DN)                                                                   \
    UNARY(ugelu, OpGelu, D, DN)                                                                   \
    UNARY(ugelu_erf, OpGeluErf, D, DN)                                                            \
    UNARY(urelu, OpRelu, D, DN)                                                                   \
    UNARY(usilu, OpSilu, D, DN)                                                                   \
    UNARY(usign, OpSign, D, DN)                                                                   \
    UNARY(usigmoid, OpSigmoid, D, DN)                                                             \
    AFFINE(D, DN)                                                                                 \
    UNARY1(uelu, EluF, alpha, D, DN)                                                              \
    UNARY1(upowf, PowfF, e, D, DN)

#define ALL_BINARY(D, DN)                                                                         \
    BINARY(badd, OpAdd, D, DN)                                                                    \
    BINARY(bsub, OpSub, D, DN)                                                                    \
    BINARY(bmul, OpMul, D, DN)                                                                    \
    BINARY(bdiv, OpDiv, D, DN)                                                                    \
    BINARY(bmaximum, OpMax, D, DN)                                                                \
    BINARY(bminimum, OpMin, D, DN)

#define CAST_FROM(F, FN)                                                                          \
    CAST(F, FN, DF32, f32)                                                                        \
    CAST(F, FN, DF16, f16)                                                                        \
    CAST(F, FN, DBF16, bf16)                                                                      \
    CAST(F, FN, DF64, f64)

FLOAT_UNARY(DF32, f32)
FLOAT_UNARY(DF16, f16)
FLOAT_UNARY(DBF16, bf16)
FLOAT_UNARY(DF64, f64)

ALL_BINARY(DF32, f32)
ALL_BINARY(DF16, f16)
ALL_BINARY(DBF16, bf16)
ALL_BINARY(DF64, f64)
ALL_BINARY(DU8, u8)
ALL_BINARY(DU32, u32)
ALL_BINARY(DI16, i16)
ALL_BINARY(DI32, i32)
ALL_BINARY(DI64, i64)

CAST_FROM(DF32, f32)
CAST_FROM(DF16, f16)
CAST_FROM(DBF16, bf16)
CAST_FROM(DF64, f64)

#define WHERE_ALL_T(C, CN)                                                                        \
    WHERE(C, CN, uint32_t, f32)                                                                   \
    WHERE(C, CN, uint16_t, f16)                                                                   \
    WHERE(C, CN, uint16_t, bf16)                                                                  \
    WHERE(C, CN, uint64_t, f64)                                                                   \
    WHERE(C, CN, uint8_t, u8)                                                                     \
    WHERE(C, CN, uint32_t, u32)                                                                   \
    WHERE(C, CN, uint16_t, i16)                                                                   \
    WHERE(C, CN, uint32_t, i32)                                                                   \
    WHERE(C, CN, uint64_t, i64)

WHERE_ALL_T(uint8_t, u8)
WHERE_ALL_T(uint32_t, u32)
WHERE_ALL_T(uint16_t, i16)
WHERE_ALL_T(uint32_t, i32)
WHERE_ALL_T(uint64_t, i64)
