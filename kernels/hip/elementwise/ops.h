// elementwise/ops.h - part of elementwise.hip (see its header for the kernels and operands),
// included by it in order, never on its own: the dtypes (storage type S, compute type C), math
// on the compute type, and the unary, cast and binary ops the kernels apply.

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
