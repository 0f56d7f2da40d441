// tile.h - matrix-unit tiles for our AMD kernels: a wave multiplies a 16 x 16 tile of A by a
// 16 x 16 tile of B into a 16 x 16 f32 accumulator with MFMA (gfx90a, gfx94x, gfx950: wave64)
// or WMMA (gfx11, gfx12: wave32) behind one interface, and says where each lane's fragment
// elements sit in the tiles, so a kernel loads and stores fragments without repeating the
// layout formulas. Device code for clang -x hip (kernels/include headers); the CPU emulator
// (kernels/tests/emu/matrix.h) runs this same file, and kernels/tests/emu/matrix_test.cpp
// checks it there for every family.
//
// Family, derived from the target (a kernel tests these, never the processor):
//   FA_MFMA    gfx90a, gfx940/941/942, gfx950 (CDNA2/3, wave64)
//   FA_WMMA11  gfx11 built for wave32 (RDNA3; the default)
//   FA_WMMA12  gfx12 built for wave32 (RDNA4)
//   FA_HAVE_MMA one of them. Other targets (gfx1030, gfx9-generic, ...) get none, and this file
//   declares nothing: the kernel takes its path without matrix units.
//
// Interface (T: __half or __nv_bfloat16; with FA_MFMA also float, as 4 x v_mfma_f32_16x16x4):
//   mma_frag<T>            a lane's share of a 16 x 16 A or B tile (mma_traits<T>::N elements)
//   mma_acc                a lane's share of a 16 x 16 f32 C/D tile (MMA_ACC_N floats)
//   frag_a_pos<T>(l, e)    {row, col} = {i, k} of element e of lane l's A fragment
//   frag_b_pos<T>(l, e)    {k, j} of B;   frag_c_pos(l, e): {i, j} of C/D
//   mma_load_a<T>(p, si, sk)   A[i][k] = p[i * si + k * sk];  mma_load_b<T>(p, sk, sj): B[k][j]
//   mma_load_c(p, si, sj), mma_store_c(p, si, sj, acc), mma_zero()   f32 C/D[i][j]
//   mma_tile_16x16x16<T>(a, b, c) = c + A B. Every lane of the wave must call it (it is one
//   wave-wide instruction), with the whole wave active.
// With FA_MFMA also 32 x 32 x 8 tiles (T: __half, __nv_bfloat16): mma32_frag<T>, mma32_acc,
// frag32_{a,b,c}_pos, mma32_load_a/_b/_c, mma32_store_c, mma32_zero, mma_tile_32x32x8<T>.
// mma_lane() is the lane's index in its wave.
//
// Layouts (lane l, element e; 16-bit elements two per VGPR, e = 2 vgpr + half). AMD Matrix
// Instruction Calculator 1.3.2 (github.com/ROCm/amd_matrix_instruction_calculator, "Register to
// matrix element mapping" of each instruction, CDNA3 / RDNA3 wave32 / RDNA4 wave32), also in
// kernels/tests/emu/matrix.h in the other direction:
//   MFMA v_mfma_f32_16x16x16_{f16,bf16}: A: i = l%16, k = 4 (l/16) + e   B: j = l%16, same k
//        C/D: i = 4 (l/16) + e, j = l%16                                  (e < 4)
//   MFMA float (call s of 4 v_mfma_f32_16x16x4_f32 takes k in [4s, 4s + 4)):
//        A: i = l%16, k = 4 e + l/16 (e = s)   B: j = l%16, same k   C/D as above
//   MFMA v_mfma_f32_32x32x8_{f16,bf16}: A: i = l%32, k = 4 (l/32) + e   B: j = l%32, same k
//        C/D: i = 8 (e/4) + 4 (l/32) + e%4, j = l%32                      (e < 16)
//   WMMA gfx11 v_wmma_f32_16x16x16_{f16,bf16}: A: i = l%16, k = e  B: j = l%16, k = e (e < 16;
//        lanes l and l + 16 hold the same row / column)   C/D: i = 2 e + l/16, j = l%16 (e < 8)
//   WMMA gfx12: A: i = l%16, k = 8 (e/4) + 4 (l/16) + e%4   B: j = l%16, same k   (e < 8)
//        C/D: i = 8 (l/16) + e, j = l%16
// A and B share one k per (lane / 16, e) in every layout, so a product does not depend on the
// K order as long as A and B use the same one; the order here is AMD's. The C/D maps are what
// a kernel reusing an accumulator as an operand (attention's P V) must follow.
#pragma once

#include "cuda_fp16.h"
#include "cuda_bf16.h"

#if defined(FA_MFMA) || defined(FA_WMMA11) || defined(FA_WMMA12) || defined(FA_HAVE_MMA)
#error "FA_MFMA / FA_WMMA11 / FA_WMMA12 are derived from the target by mma/tile.h"
#endif
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) ||         \
    defined(__gfx950__)
#define FA_MFMA 1
#elif defined(__GFX11__) && __AMDGCN_WAVEFRONT_SIZE__ == 32
#define FA_WMMA11 1
#elif defined(__GFX12__) && __AMDGCN_WAVEFRONT_SIZE__ == 32
#define FA_WMMA12 1
#endif

#if defined(FA_MFMA) || defined(FA_WMMA11) || defined(FA_WMMA12)
#define FA_HAVE_MMA 1

#if defined(FA_MFMA)
#define MMA_WAVE 64
#define MMA_AB_N 4  // 16-bit operand elements per lane (16 x 16 tiles)
#define MMA_ACC_N 4 // f32 accumulator elements per lane
#elif defined(FA_WMMA11)
#define MMA_WAVE 32
#define MMA_AB_N 16
#define MMA_ACC_N 8
#else
#define MMA_WAVE 32
#define MMA_AB_N 8
#define MMA_ACC_N 8
#endif
#if __AMDGCN_WAVEFRONT_SIZE__ != MMA_WAVE
#error "mma/tile.h: wave size does not match the matrix-unit family"
#endif

typedef float mma_acc __attribute__((ext_vector_type(MMA_ACC_N)));

// A position in a tile: row and column of A (i, k), B (k, j) or C/D (i, j).
struct mma_pos {
    int r, c;
};

// Per element type: the fragment vector, its length and the bits one element loads as.
template <typename T> struct mma_traits;
template <> struct mma_traits<__half> {
    static constexpr int N = MMA_AB_N;
    typedef _Float16 frag __attribute__((ext_vector_type(MMA_AB_N)));
    static __device__ __forceinline__ _Float16 elem(__half v) { return __builtin_bit_cast(_Float16, v); }
};
template <> struct mma_traits<__nv_bfloat16> {
    static constexpr int N = MMA_AB_N;
    typedef short frag __attribute__((ext_vector_type(MMA_AB_N)));
    static __device__ __forceinline__ short elem(__nv_bfloat16 v) { return __builtin_bit_cast(short, v); }
};
#if defined(FA_MFMA)
template <> struct mma_traits<float> {
    static constexpr int N = 4; // one per v_mfma_f32_16x16x4_f32
    typedef float frag __attribute__((ext_vector_type(4)));
    static __device__ __forceinline__ float elem(float v) { return v; }
};
#endif
template <typename T> using mma_frag = typename mma_traits<T>::frag;

__device__ __forceinline__ int mma_lane() {
    return (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}

template <typename T> __host__ __device__ __forceinline__ mma_pos frag_a_pos(int l, int e) {
#if defined(FA_MFMA)
    if (sizeof(T) == 4) return mma_pos{l % 16, 4 * e + l / 16};
    return mma_pos{l % 16, 4 * (l / 16) + e};
#elif defined(FA_WMMA11)
    return mma_pos{l % 16, e};
#else
    return mma_pos{l % 16, 8 * (e / 4) + 4 * (l / 16) + e % 4};
#endif
}
template <typename T> __host__ __device__ __forceinline__ mma_pos frag_b_pos(int l, int e) {
    const mma_pos a = frag_a_pos<T>(l, e); // B's k is A's, its column is A's row
    return mma_pos{a.c, a.r};
}
__host__ __device__ __forceinline__ mma_pos frag_c_pos(int l, int e) {
#if defined(FA_MFMA)
    return mma_pos{4 * (l / 16) + e, l % 16};
#elif defined(FA_WMMA11)
    return mma_pos{2 * e + l / 16, l % 16};
#else
    return mma_pos{8 * (l / 16) + e, l % 16};
#endif
}

template <typename T> __device__ __forceinline__ mma_frag<T> mma_load_a(const T *p, int si, int sk) {
    const int l = mma_lane();
    mma_frag<T> f;
#pragma unroll
    for (int e = 0; e < mma_traits<T>::N; e++) {
        const mma_pos q = frag_a_pos<T>(l, e);
        f[e] = mma_traits<T>::elem(p[q.r * si + q.c * sk]);
    }
    return f;
}
template <typename T> __device__ __forceinline__ mma_frag<T> mma_load_b(const T *p, int sk, int sj) {
    const int l = mma_lane();
    mma_frag<T> f;
#pragma unroll
    for (int e = 0; e < mma_traits<T>::N; e++) {
        const mma_pos q = frag_b_pos<T>(l, e);
        f[e] = mma_traits<T>::elem(p[q.r * sk + q.c * sj]);
    }
    return f;
}
__device__ __forceinline__ mma_acc mma_zero() {
    mma_acc c;
#pragma unroll
    for (int e = 0; e < MMA_ACC_N; e++) c[e] = 0.0f;
    return c;
}
__device__ __forceinline__ mma_acc mma_load_c(const float *p, int si, int sj) {
    const int l = mma_lane();
    mma_acc c;
#pragma unroll
    for (int e = 0; e < MMA_ACC_N; e++) {
        const mma_pos q = frag_c_pos(l, e);
        c[e] = p[q.r * si + q.c * sj];
    }
    return c;
}
__device__ __forceinline__ void mma_store_c(float *p, int si, int sj, mma_acc c) {
    const int l = mma_lane();
#pragma unroll
    for (int e = 0; e < MMA_ACC_N; e++) {
        const mma_pos q = frag_c_pos(l, e);
        p[q.r * si + q.c * sj] = c[e];
    }
}

// c + A B for one 16 x 16 x 16 tile: one matrix instruction (four for float).
template <typename T> __device__ mma_acc mma_tile_16x16x16(mma_frag<T> a, mma_frag<T> b, mma_acc c);
template <>
__device__ __forceinline__ mma_acc mma_tile_16x16x16<__half>(mma_frag<__half> a, mma_frag<__half> b, mma_acc c) {
#if defined(FA_MFMA)
    return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
#elif defined(FA_WMMA11)
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c);
#else
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c);
#endif
}
template <>
__device__ __forceinline__ mma_acc mma_tile_16x16x16<__nv_bfloat16>(mma_frag<__nv_bfloat16> a,
                                                                    mma_frag<__nv_bfloat16> b, mma_acc c) {
#if defined(FA_MFMA)
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
#elif defined(FA_WMMA11)
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c);
#else
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c);
#endif
}
#if defined(FA_MFMA)
template <>
__device__ __forceinline__ mma_acc mma_tile_16x16x16<float>(mma_frag<float> a, mma_frag<float> b, mma_acc c) {
    c = __builtin_amdgcn_mfma_f32_16x16x4f32(a[0], b[0], c, 0, 0, 0);
    c = __builtin_amdgcn_mfma_f32_16x16x4f32(a[1], b[1], c, 0, 0, 0);
    c = __builtin_amdgcn_mfma_f32_16x16x4f32(a[2], b[2], c, 0, 0, 0);
    return __builtin_amdgcn_mfma_f32_16x16x4f32(a[3], b[3], c, 0, 0, 0);
}

// ---- 32 x 32 x 8 tiles (MFMA only): 4 16-bit elements of A and B, 16 floats of C/D a lane.
template <typename T> using mma32_frag = mma_frag<T>;
typedef float mma32_acc __attribute__((ext_vector_type(16)));

__host__ __device__ __forceinline__ mma_pos frag32_a_pos(int l, int e) { return mma_pos{l % 32, 4 * (l / 32) + e}; }
__host__ __device__ __forceinline__ mma_pos frag32_b_pos(int l, int e) { return mma_pos{4 * (l / 32) + e, l % 32}; }
__host__ __device__ __forceinline__ mma_pos frag32_c_pos(int l, int e) {
    return mma_pos{8 * (e / 4) + 4 * (l / 32) + e % 4, l % 32};
}

template <typename T> __device__ __forceinline__ mma32_frag<T> mma32_load_a(const T *p, int si, int sk) {
    static_assert(sizeof(T) == 2, "32 x 32 x 8 tiles are f16 or bf16");
    const int l = mma_lane();
    mma32_frag<T> f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const mma_pos q = frag32_a_pos(l, e);
        f[e] = mma_traits<T>::elem(p[q.r * si + q.c * sk]);
    }
    return f;
}
template <typename T> __device__ __forceinline__ mma32_frag<T> mma32_load_b(const T *p, int sk, int sj) {
    static_assert(sizeof(T) == 2, "32 x 32 x 8 tiles are f16 or bf16");
    const int l = mma_lane();
    mma32_frag<T> f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const mma_pos q = frag32_b_pos(l, e);
        f[e] = mma_traits<T>::elem(p[q.r * sk + q.c * sj]);
    }
    return f;
}
__device__ __forceinline__ mma32_acc mma32_zero() {
    mma32_acc c;
#pragma unroll
    for (int e = 0; e < 16; e++) c[e] = 0.0f;
    return c;
}
__device__ __forceinline__ mma32_acc mma32_load_c(const float *p, int si, int sj) {
    const int l = mma_lane();
    mma32_acc c;
#pragma unroll
    for (int e = 0; e < 16; e++) {
        const mma_pos q = frag32_c_pos(l, e);
        c[e] = p[q.r * si + q.c * sj];
    }
    return c;
}
__device__ __forceinline__ void mma32_store_c(float *p, int si, int sj, mma32_acc c) {
    const int l = mma_lane();
#pragma unroll
    for (int e = 0; e < 16; e++) {
        const mma_pos q = frag32_c_pos(l, e);
        p[q.r * si + q.c * sj] = c[e];
    }
}

template <typename T> __device__ mma32_acc mma_tile_32x32x8(mma32_frag<T> a, mma32_frag<T> b, mma32_acc c);
template <>
__device__ __forceinline__ mma32_acc mma_tile_32x32x8<__half>(mma32_frag<__half> a, mma32_frag<__half> b,
                                                             mma32_acc c) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
}
template <>
__device__ __forceinline__ mma32_acc mma_tile_32x32x8<__nv_bfloat16>(mma32_frag<__nv_bfloat16> a,
                                                                    mma32_frag<__nv_bfloat16> b, mma32_acc c) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
}
#endif // FA_MFMA

#endif // FA_MFMA || FA_WMMA11 || FA_WMMA12
