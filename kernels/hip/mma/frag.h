// mma/frag.h - the matrix-unit fragments of attention.hip's fa_mma_* kernels (attention/mma.h)
// and of conv_igemm.hip (S = Q K^T with Q and K both stored with k contiguous: a GEMM whose
// operands are staged k-contiguous in shared memory), one interface over three families:
//   FA_MMA_SYNC  NVIDIA sm_80+ (the HIP-on-CUDA harness, nvcc): mma.sync.aligned.m16n8k16
//                .row.col.f32.{f16,bf16} by inline PTX, two per 16 x 16 tile (wave = warp of 32).
//                Fragments come from shared memory by ldmatrix (.trans for V as it lies), tiles
//                by cp.async. The CPU emulator defines EMU_MMA_SYNC and runs
//                emu::mma::mma_sync_m16n8k16 (tests/emu/matrix.h) with the same documented
//                layouts instead of the asm, ldmatrix from the rows the other lanes name, and
//                plain copies for cp.async.
//   FA_MFMA, FA_WMMA11, FA_WMMA12 (AMD; from mma/tile.h): tile.h's 16 x 16 x 16 tiles.
// FA_MMA_KERNELS is defined when one of them is; otherwise this file declares nothing and the
// fa_mma_* kernels do not exist (gfx1030, gfx9-generic, ... and CUDA below sm_80).
//
// A wave multiplies 16 x 16 tiles of a 16-query slice of Q by 16-key tiles of K (S) and P by V
// (O). Every accumulator, S's and O's, is a 16 (queries) x 16 (keys or output columns) f32
// tile; fm_c_pos(l, e) = {query, key-or-column} of element e of lane l, for both.
//   CUDA: S = Q K^T and O = P V as written: Q and P are the A operand, K^T and V the B operand
//     (two n8 halves). PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type",
//     checked against CUTLASS cute/atom/mma_traits_sm80.hpp (SM80_16x8x16_F32F16F16F32_TN:
//     A ((4,8),(2,2,2)):((32,1),(16,8,128)), B ((4,8),(2,2)):((16,1),(8,64)), C SM80_16x8_Row
//     ((4,8),(2,2)):((32,1),(16,8)); g = l / 4, t = l % 4, element v of 16-bit pairs, low first):
//       A[i][k]: i = g + 8 ((v/2)%2), k = 2t + v%2 + 8 (v/4)     (v < 8, registers v/2)
//       B[k][n]: k = 2t + v%2 + 8 (v/2), n = g                    (v < 4)
//       C[i][n]: i = g + 8 (v/2), n = 2t + v%2                    (v < 4)
//     Our 16 x 16 accumulator: e = 4 h + v is element v of the n8 half h. S's accumulator is
//     element for element P's A fragment (FA2's register reuse), so P never leaves registers.
//     A lane holds 2 query rows (g, g + 8); the 4 lanes of a row are l ^ 1, l ^ 2.
//   AMD: transposed, S^T = K Q^T and O^T = V^T P^T: K and V^T are the A operand, Q^T and P^T
//     the B operand. C/D puts the query at l % 16 (tile.h's frag_c_pos: j = l % 16) and B puts
//     the query (j) at l % 16 too, so S^T's accumulator is P^T's B fragment when the K order of
//     the P V product follows the accumulator's keys: slot (l, e) of A and B takes key
//     fm_pk(l, e) = the key of S^T's element e in lane l (MFMA 4 (l/16) + e, gfx12 8 (l/16) + e;
//     any order shared by A and B is the same product, see tile.h). gfx11 holds 8 keys a lane
//     (2 e + l/16) but B needs all 16 (replicated in both half-waves): one xor-16 exchange.
//     A lane holds 1 query row (l % 16) of each 16-query tile; its lanes are l ^ 16 (^ 32).
#pragma once

#include "common.h"
#include "tile.h"

#if !defined(__HIP_DEVICE_COMPILE__) && ((defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(EMU_MMA_SYNC))
#define FA_MMA_SYNC 1
#endif

#if defined(FA_MMA_SYNC) || defined(FA_HAVE_MMA)
#define FA_MMA_KERNELS 1

// A position in an accumulator: query row and key (S) or output column (O).
struct fm_pos {
    int q, c;
};

#if defined(FA_MMA_SYNC)
#define FM_WAVE 32
#define FM_QT 1  // 16-query tiles per wave
#define FM_RQ 2  // query rows a lane holds per 16-query tile
#define FM_ACC_N 8

struct fm_acc {
    float v[8];
    __device__ __forceinline__ float &operator[](int i) { return v[i]; }
    __device__ __forceinline__ float operator[](int i) const { return v[i]; }
};
// Eight 16-bit elements, two per register (the lower index in the low half).
template <typename T> struct fm_frag {
    uint32_t x[4];
};

__host__ __device__ __forceinline__ fm_pos fm_c_pos(int l, int e) {
    const int v = e % 4;
    return fm_pos{l / 4 + 8 * (v / 2), 8 * (e / 4) + 2 * (l % 4) + v % 2};
}
__host__ __device__ __forceinline__ constexpr int fm_slot(int e) { return (e / 2) % 2; }
__host__ __device__ __forceinline__ int fm_row(int l, int r) { return l / 4 + 8 * r; }
__host__ __device__ __forceinline__ bool fm_row_leader(int l) { return l % 4 == 0; }
__device__ __forceinline__ float fm_row_max(float x) {
    x = fmaxf(x, fa_shfl_xor(x, 1));
    return fmaxf(x, fa_shfl_xor(x, 2));
}
__device__ __forceinline__ float fm_row_sum(float x) {
    x += fa_shfl_xor(x, 1);
    return x + fa_shfl_xor(x, 2);
}

template <typename T> __device__ __forceinline__ uint32_t fm_ld32(const T *p) {
    uint32_t r;
    __builtin_memcpy(&r, p, 4);
    return r;
}
template <typename T> __device__ __forceinline__ uint32_t fm_pack(T lo, T hi) {
    // (two elements of P, rounded to T, into one register)
    uint16_t a, b;
    __builtin_memcpy(&a, &lo, 2);
    __builtin_memcpy(&b, &hi, 2);
    return (uint32_t)a | ((uint32_t)b << 16);
}

// d = c + A B for one m16n8k16 (c and d: 4 floats at c).
template <typename T> __device__ __forceinline__ void fm_mma_sync(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c);
#if defined(EMU_MMA_SYNC)
template <> __device__ __forceinline__ void fm_mma_sync<__half>(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c) {
    emu::mma::mma_sync_m16n8k16(false, a, b0, b1, c);
}
template <>
__device__ __forceinline__ void fm_mma_sync<__nv_bfloat16>(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c) {
    emu::mma::mma_sync_m16n8k16(true, a, b0, b1, c);
}
#else
template <> __device__ __forceinline__ void fm_mma_sync<__half>(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void fm_mma_sync<__nv_bfloat16>(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// ldmatrix .x4 (.trans with TR): four 8 x 8 matrices of 16-bit elements from shared memory,
// matrix m into register m. Lane i names row i % 8 of matrix i / 8: the 16 bytes at
// p + row(i) * ld + col(i), with (KPAT) row = 8 (i / 16) + i % 8, col = 8 ((i / 8) % 2), else
// row = 8 ((i / 8) % 2) + i % 8, col = 8 (i / 16). Lane l receives, of matrix m, elements
// 2 (l % 4) and 2 (l % 4) + 1 of row l / 4, or with TR element l / 4 of rows 2 (l % 4) and
// 2 (l % 4) + 1 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"). Every row address
// is 16-byte aligned (pitches and column offsets are multiples of 8 elements). The CPU
// emulator reads what each lane receives from the addresses the other lanes would name.
template <bool KPAT> __device__ __forceinline__ int fm_ldsm_row(int i) {
    return KPAT ? 8 * (i / 16) + i % 8 : 8 * ((i / 8) % 2) + i % 8;
}
template <bool KPAT> __device__ __forceinline__ int fm_ldsm_col(int i) { return KPAT ? 8 * ((i / 8) % 2) : 8 * (i / 16); }
template <typename T, bool TR, bool KPAT> __device__ __forceinline__ fm_frag<T> fm_ldsm(const T *p, int ld, int l) {
    fm_frag<T> f;
#if defined(EMU_MMA_SYNC)
#pragma unroll
    for (int m = 0; m < 4; m++) {
        if (!TR) {
            const int i = 8 * m + l / 4;
            f.x[m] = fm_ld32(p + fm_ldsm_row<KPAT>(i) * ld + fm_ldsm_col<KPAT>(i) + 2 * (l % 4));
        } else {
            const int i0 = 8 * m + 2 * (l % 4), i1 = i0 + 1;
            f.x[m] = fm_pack(p[fm_ldsm_row<KPAT>(i0) * ld + fm_ldsm_col<KPAT>(i0) + l / 4],
                             p[fm_ldsm_row<KPAT>(i1) * ld + fm_ldsm_col<KPAT>(i1) + l / 4]);
        }
    }
#else
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p + fm_ldsm_row<KPAT>(l) * ld + fm_ldsm_col<KPAT>(l));
    if (TR)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                     : "r"(a));
#endif
    return f;
}

// Q[query][dim] = p[query * ld + dim] (16 x 16) as the A operand: register r holds query
// l / 4 + 8 (r % 2), dims 2 (l % 4) + 8 (r / 2) and the next.
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_q(const T *p, int ld, int l) {
    return fm_ldsm<T, false, false>(p, ld, l);
}
// K[key][dim] = p[key * ld + dim] as the B operand K^T: registers 0-1 keys 0-7, 2-3 keys 8-15
// (register r: key 8 (r / 2) + l / 4, dims 2 (l % 4) + 8 (r % 2) and the next).
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_k(const T *p, int ld, int l) {
    return fm_ldsm<T, false, true>(p, ld, l);
}
// V[key][col] = p[col * ld + key] (V staged transposed) as the B operand: registers 0-1
// columns 0-7, 2-3 columns 8-15 (K's loader: V^T's rows are what K's are to K^T).
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_vt(const T *p, int ld, int l) {
    return fm_load_k<T>(p, ld, l);
}
// V[key][col] = p[key * ld + col] (V staged as it lies) as the B operand, by the transposing
// load: register r holds column 8 (r / 2) + l / 4, keys 2 (l % 4) + 8 (r % 2) and the next.
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_vr(const T *p, int ld, int l) {
    return fm_ldsm<T, true, false>(p, ld, l);
}
#define FM_V_ROWMAJOR 1

// 16 bytes from global to shared memory, asynchronously (cp.async.cg, sm_80): complete after
// fm_cp_wait() in the same thread, visible to the block after a barrier that follows it.
__device__ __forceinline__ void fm_cp16(void *dst, const void *src) {
#if defined(EMU_MMA_SYNC)
    *reinterpret_cast<fa_vec *>(dst) = *reinterpret_cast<const fa_vec *>(src);
#else
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void fm_cp_commit() {
#if !defined(EMU_MMA_SYNC)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fm_cp_wait() {
#if !defined(EMU_MMA_SYNC)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}
// Waits for all but the latest committed group of this thread's copies.
__device__ __forceinline__ void fm_cp_wait_1() {
#if !defined(EMU_MMA_SYNC)
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}
// P (S's accumulator, rounded to T) as the A operand of P V.
template <typename T> __device__ __forceinline__ fm_frag<T> fm_p(const fm_acc &s, int) {
    fm_frag<T> f;
#pragma unroll
    for (int r = 0; r < 4; r++) f.x[r] = fm_pack(fa_from<T>(s[2 * r]), fa_from<T>(s[2 * r + 1]));
    return f;
}
template <typename T> __device__ __forceinline__ fm_acc fm_mma_s(const fm_frag<T> &q, const fm_frag<T> &k, fm_acc c) {
    fm_mma_sync<T>(q.x, k.x[0], k.x[1], c.v);
    fm_mma_sync<T>(q.x, k.x[2], k.x[3], c.v + 4);
    return c;
}
template <typename T> __device__ __forceinline__ fm_acc fm_mma_o(const fm_frag<T> &pf, const fm_frag<T> &v, fm_acc c) {
    fm_mma_sync<T>(pf.x, v.x[0], v.x[1], c.v);
    fm_mma_sync<T>(pf.x, v.x[2], v.x[3], c.v + 4);
    return c;
}

#else // AMD: mma/tile.h

#define FM_WAVE MMA_WAVE
#if defined(FA_MFMA)
#define FM_QT 2
#else
#define FM_QT 1
#endif
#define FM_RQ 1
#define FM_ACC_N MMA_ACC_N
typedef mma_acc fm_acc;
template <typename T> using fm_frag = mma_frag<T>;

__host__ __device__ __forceinline__ fm_pos fm_c_pos(int l, int e) {
    const mma_pos c = frag_c_pos(l, e); // C^T: i is the key or column, j the query
    return fm_pos{c.c, c.r};
}
__host__ __device__ __forceinline__ constexpr int fm_slot(int) { return 0; }
__host__ __device__ __forceinline__ int fm_row(int l, int) { return l % 16; }
__host__ __device__ __forceinline__ bool fm_row_leader(int l) { return l < 16; }
__device__ __forceinline__ float fm_row_max(float x) {
    x = fmaxf(x, fa_shfl_xor(x, 16));
#if MMA_WAVE == 64
    x = fmaxf(x, fa_shfl_xor(x, 32));
#endif
    return x;
}
__device__ __forceinline__ float fm_row_sum(float x) {
    x += fa_shfl_xor(x, 16);
#if MMA_WAVE == 64
    x += fa_shfl_xor(x, 32);
#endif
    return x;
}
// The key of slot (l, e) of P V's A and B operands (S^T's accumulator keys).
__host__ __device__ __forceinline__ int fm_pk(int l, int e) {
#if defined(FA_MFMA)
    return 4 * (l / 16) + e;
#elif defined(FA_WMMA11)
    (void)l;
    return e;
#else
    return 8 * (l / 16) + e;
#endif
}

// Four raw elements (8 bytes) of T.
template <typename T> struct fm_raw4;
template <> struct fm_raw4<__half> {
    typedef _Float16 v __attribute__((ext_vector_type(4)));
};
template <> struct fm_raw4<__nv_bfloat16> {
    typedef short v __attribute__((ext_vector_type(4)));
};
// Row l % 16 of a 16 x 16 tile at p (row pitch ld) as an A fragment (or B's, whose column is
// A's row): in every AMD layout elements 4m .. 4m + 3 are 4 consecutive k, so 8-byte loads
// (p and ld keep them 8-byte aligned). `pk`: the K order of P V (fm_pk) instead of AMD's.
template <typename T, bool PK> __device__ __forceinline__ fm_frag<T> fm_load_row(const T *p, int ld, int l) {
    fm_frag<T> f;
    const T *row = p + (l % 16) * ld;
#pragma unroll
    for (int m = 0; m < mma_traits<T>::N / 4; m++) {
        const int k0 = PK ? fm_pk(l, 4 * m) : frag_a_pos<T>(l, 4 * m).c;
        const typename fm_raw4<T>::v x = *reinterpret_cast<const typename fm_raw4<T>::v *>(row + k0);
#pragma unroll
        for (int u = 0; u < 4; u++) f[4 * m + u] = x[u];
    }
    return f;
}
// Q[query][dim] = p[query * ld + dim] as the B operand Q^T (B[dim][query]).
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_q(const T *p, int ld, int l) {
    return fm_load_row<T, false>(p, ld, l);
}
// K[key][dim] = p[key * ld + dim] as the A operand (A[key][dim]).
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_k(const T *p, int ld, int l) {
    return fm_load_row<T, false>(p, ld, l);
}
// V[key][col] = p[col * ld + key] (V staged transposed) as the A operand V^T (A[col][key]),
// keys in fm_pk's order.
template <typename T> __device__ __forceinline__ fm_frag<T> fm_load_vt(const T *p, int ld, int l) {
    return fm_load_row<T, true>(p, ld, l);
}
#define FM_V_ROWMAJOR 0
// 16 bytes from global to shared memory: a load and a store (no asynchronous copy used here).
__device__ __forceinline__ void fm_cp16(void *dst, const void *src) {
    *reinterpret_cast<fa_vec *>(dst) = *reinterpret_cast<const fa_vec *>(src);
}
__device__ __forceinline__ void fm_cp_commit() {}
__device__ __forceinline__ void fm_cp_wait() {}
__device__ __forceinline__ void fm_cp_wait_1() {}
// P^T (S^T's accumulator, rounded to T) as the B operand of O^T = V^T P^T.
template <typename T> __device__ __forceinline__ fm_frag<T> fm_p(const fm_acc &s, int l) {
    fm_frag<T> f;
#if defined(FA_WMMA11)
    // Lane l holds keys 2 e + l/16; B wants key e' at element e' in both half-waves.
    const bool hi = (l / 16) != 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float mine = s[e], other = fa_shfl_xor(mine, 16);
        f[2 * e] = mma_traits<T>::elem(fa_from<T>(hi ? other : mine));
        f[2 * e + 1] = mma_traits<T>::elem(fa_from<T>(hi ? mine : other));
    }
#else
    (void)l;
#pragma unroll
    for (int e = 0; e < MMA_ACC_N; e++) f[e] = mma_traits<T>::elem(fa_from<T>(s[e]));
#endif
    return f;
}
template <typename T> __device__ __forceinline__ fm_acc fm_mma_s(const fm_frag<T> &q, const fm_frag<T> &k, fm_acc c) {
    return mma_tile_16x16x16<T>(k, q, c);
}
template <typename T> __device__ __forceinline__ fm_acc fm_mma_o(const fm_frag<T> &pf, const fm_frag<T> &v, fm_acc c) {
    return mma_tile_16x16x16<T>(v, pf, c);
}
#endif // family

// common.h's scheduling fence: without it the scheduler hoists every fragment load of the
// unrolled loops ahead of the matrix instructions and spills (gfx11: 256 VGPRs and scratch).
#define FM_FENCE() FA_FENCE()

__device__ __forceinline__ fm_acc fm_zero() {
    fm_acc c;
#pragma unroll
    for (int e = 0; e < FM_ACC_N; e++) c[e] = 0.0f;
    return c;
}
#if FM_WAVE != FA_WAVE
#error "mma/frag.h: the family's wave is not the build's"
#endif

#endif // FA_MMA_SYNC || FA_HAVE_MMA
