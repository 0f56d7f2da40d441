// mma_kernels.hip - test kernels for kernels/hip/mma/tile.h, written like our kernel modules
// (plain HIP behind the same FA_* macros a real kernel uses): matrix_test.cpp runs them on the
// CPU emulator for each family, and the same file compiles for gfx942 / gfx1100 / gfx1200 to
// check the generated matrix instructions (see matrix_test.cpp's header). Not a kernel module.
//
// mma_gemm16<T, MUT>: wave w of the block computes the 16 x 16 tile of columns 16w..16w+15 of
//   c[i][j] = c0[i][j] + sum_{k < K} a[i][k] b[k][j]   (K a multiple of 16)
// with a row-major (a[i * lda + k]), b stored by columns (b[j * ldb + k], as attention's K
// rows) and c0, c row-major f32 (ldc). mma_gemm32<T, MUT>: one wave, one 32 x 32 tile, K a
// multiple of 8 (FA_MFMA only). MUT != MUT_NONE breaks the fragment handling on purpose (the
// driver requires every such mutant to be caught).
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "../../hip/mma/tile.h"

#if defined(FA_HAVE_MMA)

enum MmaMutant {
    MUT_NONE,
    MUT_A_TRANSPOSED,     // A loaded as A^T
    MUT_B_TRANSPOSED,     // B loaded as B^T
    MUT_A_K_ORDER,        // A's k in another order than B's (gfx12: ck_tile's, lanes 0-15 k 0-7)
    MUT_D_HALVES_SWAPPED, // D stored by the row map of lane ^ 16 (lane ^ 32 for 32 x 32 tiles)
    MUT_A_UPPER_ZERO,     // lanes 16 and up load zeros for A (gfx11: copies that differ)
    MUT_COUNT
};

// A fragment with mutant M's handling (frag_a_pos everywhere but where M changes it).
template <typename T, int MUT> __device__ __forceinline__ mma_frag<T> mutant_load_a(const T *p, int ld) {
    const int l = mma_lane();
    mma_frag<T> f;
#pragma unroll
    for (int e = 0; e < mma_traits<T>::N; e++) {
        mma_pos q = frag_a_pos<T>(l, e);
        if (MUT == MUT_A_K_ORDER) {
#if defined(FA_WMMA12)
            q.c = 8 * (l / 16) + e;
#else
            q.c ^= 1;
#endif
        }
        f[e] = mma_traits<T>::elem(p[q.r * ld + q.c]);
        if (MUT == MUT_A_UPPER_ZERO && l >= 16) f[e] = mma_traits<T>::elem(T(0.0f));
    }
    return f;
}

template <typename T, int MUT>
__device__ void mma_gemm16(const T *a, const T *b, const float *c0, float *c, int K, int lda, int ldb, int ldc) {
    const int w = threadIdx.x / MMA_WAVE;
    b += w * 16 * ldb;
    c0 += w * 16;
    c += w * 16;
    mma_acc acc = mma_load_c(c0, ldc, 1);
    for (int k0 = 0; k0 < K; k0 += 16) {
        const mma_frag<T> fa = MUT == MUT_A_TRANSPOSED ? mma_load_a<T>(a + k0, 1, lda)
                               : MUT == MUT_A_K_ORDER || MUT == MUT_A_UPPER_ZERO ? mutant_load_a<T, MUT>(a + k0, lda)
                                                                                  : mma_load_a<T>(a + k0, lda, 1);
        const mma_frag<T> fb = MUT == MUT_B_TRANSPOSED ? mma_load_b<T>(b + k0, ldb, 1) : mma_load_b<T>(b + k0, 1, ldb);
        acc = mma_tile_16x16x16<T>(fa, fb, acc);
    }
    if (MUT == MUT_D_HALVES_SWAPPED) {
        const int l = mma_lane();
#pragma unroll
        for (int e = 0; e < MMA_ACC_N; e++) {
            const mma_pos q = frag_c_pos(l ^ 16, e);
            c[q.r * ldc + q.c] = acc[e];
        }
    } else {
        mma_store_c(c, ldc, 1, acc);
    }
}

#if defined(FA_MFMA)
template <typename T, int MUT>
__device__ void mma_gemm32(const T *a, const T *b, const float *c0, float *c, int K, int lda, int ldb, int ldc) {
    mma32_acc acc = mma32_load_c(c0, ldc, 1);
    for (int k0 = 0; k0 < K; k0 += 8) {
        mma32_frag<T> fa;
        if (MUT == MUT_A_TRANSPOSED) {
            // A^T's 32 x 8 slice: a[k][i] read as A[i][k] (i < 32, k < 8).
            const int l = mma_lane();
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const mma_pos q = frag32_a_pos(l, e);
                fa[e] = mma_traits<T>::elem(a[q.c * lda + q.r + k0]);
            }
        } else if (MUT == MUT_A_K_ORDER) {
            const int l = mma_lane();
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const mma_pos q = frag32_a_pos(l, e);
                fa[e] = mma_traits<T>::elem(a[q.r * lda + (q.c ^ 1) + k0]);
            }
        } else {
            fa = mma32_load_a<T>(a + k0, lda, 1);
        }
        const mma32_frag<T> fb = mma32_load_b<T>(b + k0, 1, ldb);
        acc = mma_tile_32x32x8<T>(fa, fb, acc);
    }
    if (MUT == MUT_D_HALVES_SWAPPED) {
        const int l = mma_lane();
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const mma_pos q = frag32_c_pos(l ^ 32, e);
            c[q.r * ldc + q.c] = acc[e];
        }
    } else {
        mma32_store_c(c, ldc, 1, acc);
    }
}
#endif

// The unmutated kernels as a module would export them (what the static check disassembles).
#define MMA_TEST_KERNEL(NAME, IMPL, T)                                                                             \
    extern "C" __global__ void NAME(const T *a, const T *b, const float *c0, float *c, int K, int lda, int ldb,    \
                                    int ldc) {                                                                     \
        IMPL<T, MUT_NONE>(a, b, c0, c, K, lda, ldb, ldc);                                                          \
    }
MMA_TEST_KERNEL(mma_gemm16_f16, mma_gemm16, __half)
MMA_TEST_KERNEL(mma_gemm16_bf16, mma_gemm16, __nv_bfloat16)
#if defined(FA_MFMA)
MMA_TEST_KERNEL(mma_gemm16_f32, mma_gemm16, float)
MMA_TEST_KERNEL(mma_gemm32_f16, mma_gemm32, __half)
MMA_TEST_KERNEL(mma_gemm32_bf16, mma_gemm32, __nv_bfloat16)
#endif

#endif // FA_HAVE_MMA
