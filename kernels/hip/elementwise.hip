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
//   bnorm_<dt>(EwBnArgs a, C eps, const T *x, const T *p, T *y)   batch norm, running statistics
//     (f32, f16, bf16, f64; see the kernel)
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
// the base pointers are 16-byte aligned (checked here): row and column broadcasts. The binary
// ops also take `vec` 2: the same promise for packs of 8 bytes (VEC / 2 elements, 8-byte
// aligned bases), for an innermost dim that 16-byte packs do not divide.
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

#include "elementwise/ops.h"
#include "elementwise/engines.h"

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

// Batch normalisation with running statistics (candle-nn's `BatchNorm` in eval mode, the fused
// op `BatchNormEval`): x contiguous, `c` channels of `inner` elements each, repeated over the
// outer dims; p the (4, c) stack of mean, var, weight and bias (same dtype); y = (x - mean) /
// sqrt(var + eps) * weight + bias computed in D::C (f32 for f16/bf16), rounded once. Element
// i's channel is (i / inner) % c (magic-number divisions, i < 2^32). `vec` bit 0: inner is a
// multiple of the pack and x, y are 16-byte aligned (checked here): whole packs, one channel a
// pack; else element by element. Bit 1: ReLU after, y > 0 ? y : 0 (NaN gives 0, as candle's
// CPU relu). One launch and one pass over x instead of the four whole-tensor broadcast ops of
// candle-nn's eval path (and the ReLU's pass after them).
struct EwBnArgs {
    uint32_t n, inner, inner_magic, inner_shift;
    uint32_t c, c_magic, c_shift, vec;
};

template <typename D> struct BnCoef {
    typename D::C mean, std, w, b;
    bool relu;
    __device__ __forceinline__ typename D::S apply(typename D::S x) const {
        const typename D::C y = (D::load(x) - mean) / std * w + b;
        return D::store(relu && !(y > (typename D::C)0) ? (typename D::C)0 : y);
    }
};

template <typename D>
__device__ __forceinline__ BnCoef<D> bn_coef(const EwBnArgs &a, typename D::C eps, const typename D::S *__restrict__ p,
                                            uint32_t i) {
    const uint32_t r = fast_div(i, a.inner_magic, a.inner_shift);
    const uint32_t ch = r - fast_div(r, a.c_magic, a.c_shift) * a.c;
    BnCoef<D> k;
    k.mean = D::load(p[ch]);
    k.std = m_sqrt(D::load(p[a.c + ch]) + eps);
    k.w = D::load(p[2 * a.c + ch]);
    k.b = D::load(p[3 * a.c + ch]);
    k.relu = (a.vec & 2) != 0;
    return k;
}

template <typename D>
__device__ __forceinline__ void bnorm(const EwBnArgs &a, typename D::C eps, const typename D::S *__restrict__ x,
                                      const typename D::S *__restrict__ p, typename D::S *__restrict__ y) {
    typedef typename D::S S;
    constexpr int VEC = 16 / (int)sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((a.vec & 1) && aligned16(x) && aligned16(y)) {
        typedef Pack<S, VEC> P;
        const size_t npack = a.n / VEC;
        for (size_t q = first; q < npack; q += stride) {
            const BnCoef<D> k = bn_coef<D>(a, eps, p, (uint32_t)(q * VEC));
            const P v = reinterpret_cast<const P *>(x)[q];
            P r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r.v[j] = k.apply(v.v[j]);
            reinterpret_cast<P *>(y)[q] = r;
        }
        return;
    }
    for (size_t i = first; i < a.n; i += stride) y[i] = bn_coef<D>(a, eps, p, (uint32_t)i).apply(x[i]);
}

#define BNORM(D, DN)                                                                              \
    EW_KERNEL bnorm_##DN(const EwBnArgs a, const D::C eps, const D::S *x, const D::S *p, D::S *y) { \
        bnorm<D>(a, eps, x, p, y);                                                                \
    }
BNORM(DF32, f32)
BNORM(DF16, f16)
BNORM(DBF16, bf16)
BNORM(DF64, f64)
