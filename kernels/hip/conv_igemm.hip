// conv_igemm.hip - forward convolution (conv2d; conv1d as height 1) as an implicit GEMM on
// matrix units, f16 and bf16 with f32 accumulation: no column matrix in memory, each block
// gathers its tiles of input patches into shared memory itself and multiplies them by the
// kernel's tiles there.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus AMD builtins behind
// __HIP_DEVICE_COMPILE__ (through mma/), so the same file builds for AMD (clang, kernels/include
// headers), for the HIP-on-CUDA harness (nvcc, CUDA's headers) and on the CPU emulator
// (kernels/tests/emu/conv_igemm_test.cpp). The kernels exist only where mma/frag.h defines
// FA_MMA_KERNELS (gfx90a, gfx94x, gfx950, gfx11, gfx12; CUDA sm_80+): elsewhere the module is
// empty and candle-rocm keeps the convolution on its im2col-tile GEMM path.
//
// The GEMM (rows of A = output channels, columns of B = output positions of every image):
//   C[co][n] = sum_k W[co][k] B[k][n],  k = (ci, ky, kx) = (ci k_h + ky) k_w + kx < K = c_in k_h k_w
//   W: the kernel (c_out, c_in, k_h, k_w), contiguous: W[co][k] = w[co K + k]
//   n = img P + oy w_out + ox < N = batch P, P = h_out w_out
//   B[k][n] = x[img s_b + ci s_c + iy s_h + ix s_w], iy = oy stride_h + ky dil_h - pad_h,
//             ix = ox stride_w + kx dil_w - pad_w; 0 when (iy, ix) lies outside the input
//   y[(img c_out + co) P + oy w_out + ox] = C[co][n] rounded to T (NCHW, contiguous)
// x may have any strides (a channel slice, channels last); w must be contiguous; y is new.
// Two orders of K:
//   channels outer (conv_igemm_<T>): k = (ci, ky, kx), W as it lies; any c_in;
//   taps outer (conv_igemm_taps_<T>): k = (ky, kx, ci) =
//     (ky k_w + kx) c_in + ci, for c_in % 32 == 0: W[co][k] = w[co K + k] with w permuted by the
//     host to (c_out, k_h, k_w, c_in). Each 32-wide step of K is then one tap over 32 channels,
//     so a thread tests its column's tap against the input once a step and reads 32 elements
//     one channel stride apart (about a quarter of the per-element work of the other order).
//
// Work split. A block of CI_THREADS (128) threads computes a CI_BM x CI_BN (64 channels x 128
// positions) tile of C, walking K in steps of CI_BK (32):
//   - staging: thread t gathers B's column n0 + t (one output position: its image and input
//     corner computed once) for the step's 32 k, 32 element loads (zeros outside the input,
//     past K and past N): channels outer, at offsets read from the step's tap table in shared
//     memory (the 32 taps (ci, ky, kx) as input offsets and row/column shifts, computed by
//     threads 0..31 a step ahead, one division pair each, instead of by every thread); taps
//     outer, from the step's one tap and first channel (kept by every thread, no division).
//     And 16 k of W's row t / 2 (two 16-byte loads when every row of w is 16-byte aligned and
//     the 16 lie inside K, else element
//     loads with zeros past c_out and K); both go to shared memory with k contiguous (B as its
//     transpose, one row per position), rows padded to CI_PITCH (40) elements: 16-byte aligned,
//     off the bank stride;
//   - the next step is loaded into registers before the matrix work on this one, and stored
//     into the other of two shared buffers after it (one barrier a step), or on MFMA into the
//     one buffer after a second barrier (CI_STAGES: LDS bounds occupancy there);
//   - math: wave w (of 4 on 32-lane waves, 2 on MFMA's 64-lane waves) owns channel rows
//     32 (w % 2) .. + 31 and position columns (w / 2) WN .. + WN - 1 (WN = 64 or 128): TM x TN
//     = 2 x (WN / 16) accumulators of 16 x 16 f32, each step 2 x 16 k of mma/frag.h's
//     S = Q K^T with Q = W's rows and K = B^T's rows (fm_load_q / fm_load_k / fm_mma_s);
//   - the store: fm_c_pos names each accumulator element's channel and position.
// Shared memory: CI_STAGES x (64 + 128) x 40 elements of T = 30 KiB (15 KiB on MFMA), and the
// taps of two steps (1 KiB).
//
// Kernels (ConvIgemmArgs a, const T *x, const T *w, T *y), T in f16, bf16: conv_igemm_<T>
//   (channels outer) and conv_igemm_taps_<T> (taps outer: c_in % 32 == 0, w permuted),
//   grid (ceil(N / 128), ceil(c_out / 64)), block (128). Sizes: K, N < 2^31 (so every index of
//   B, the n of a block and k0 + 2 CI_BK stay in 32 bits); h_in, w_in and every input corner
//   and tap shift below 2^28 in magnitude (32-bit row/column arithmetic); input offsets in 64 bits.
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

#include "mma/common.h"
#include "mma/tile.h"
#include "mma/frag.h"

#define CI_THREADS 128
#define CI_BM 64
#define CI_BN 128
#define CI_BK 32
#define CI_PITCH (CI_BK + 8)
// Shared buffers: two (one barrier a step) where LDS does not bound occupancy; one on MFMA
// (gfx90a/gfx94x: 64 KiB of LDS a CU, where two 30 KiB blocks would leave one wave a SIMD;
// 15 KiB lets the registers' two), with a second barrier before each store.
#if defined(FA_MFMA)
#define CI_STAGES 1
#else
#define CI_STAGES 2
#endif

// The kernels' first argument (candle-rocm's launch/conv_igemm.rs mirrors it field by field):
// 64-bit input strides, then 32-bit fields, no padding (112 bytes).
struct ConvIgemmArgs {
    uint64_t s_b, s_c, s_h, s_w; // input strides in elements (image, channel, row, column)
    uint32_t batch, c_in, h_in, w_in;
    uint32_t c_out, h_out, w_out, k_h;
    uint32_t k_w, stride_h, stride_w, pad_h;
    uint32_t pad_w, dil_h, dil_w, w_vec; // w_vec: w 16-byte aligned and K % 8 == 0
    uint32_t k, n, p, unused;            // K = c_in k_h k_w, N = batch P, P = h_out w_out
};
static_assert(sizeof(ConvIgemmArgs) == 112, "ConvIgemmArgs layout");

#if defined(FA_MMA_KERNELS)

// One thread's output position (B's column): its input element at the kernel's tap (0, 0) of
// channel 0, as an offset from x (may lie outside the input: only read when inside).
struct CiColumn {
    int64_t base;   // img s_b + y0 s_h + x0 s_w
    int32_t y0, x0; // oy stride_h - pad_h, ox stride_w - pad_w (|.| < 2^30: host-checked)
    bool live;      // n < N
};

__device__ __forceinline__ CiColumn ci_column(const ConvIgemmArgs &a, uint32_t n) {
    CiColumn c;
    c.live = n < a.n;
    const uint32_t nn = c.live ? n : 0;
    const uint32_t img = nn / a.p, pos = nn % a.p;
    const uint32_t oy = pos / a.w_out, ox = pos % a.w_out;
    c.y0 = (int32_t)(oy * a.stride_h) - (int32_t)a.pad_h;
    c.x0 = (int32_t)(ox * a.stride_w) - (int32_t)a.pad_w;
    c.base = (int64_t)img * (int64_t)a.s_b + (int64_t)c.y0 * (int64_t)a.s_h +
             (int64_t)c.x0 * (int64_t)a.s_w;
    return c;
}

// One k of B (a tap (ci, ky, kx)), the same for every column: the input offset from a column's
// base, and the tap's row and column offsets dy = ky dil_h, dx = kx dil_w. Past K, dy is
// CI_PAST_K, which puts every column's row outside the input (so it reads a zero).
struct CiTap {
    int64_t off;
    int32_t dy, dx;
};
#define CI_PAST_K (-(1 << 29))

// The tap of k (the step's table: thread t < CI_BK writes entry t; every thread reads them all).
__device__ __forceinline__ CiTap ci_tap(const ConvIgemmArgs &a, uint32_t k) {
    CiTap t;
    if (k >= a.k) {
        t.off = 0;
        t.dy = CI_PAST_K;
        t.dx = 0;
        return t;
    }
    const uint32_t taps = a.k_h * a.k_w;
    const uint32_t ci = k / taps, r = k % taps;
    const uint32_t ky = r / a.k_w, kx = r % a.k_w;
    t.dy = (int32_t)(ky * a.dil_h);
    t.dx = (int32_t)(kx * a.dil_w);
    t.off = (int64_t)ci * (int64_t)a.s_c + (int64_t)t.dy * (int64_t)a.s_h + (int64_t)t.dx * (int64_t)a.s_w;
    return t;
}

// B[k0 .. k0 + CI_BK)[n] of the thread's column into v, from the step's taps (zeros outside the
// input and past K).
template <typename T>
__device__ __forceinline__ void ci_load_b(const ConvIgemmArgs &a, const T *__restrict__ x, const CiColumn &c,
                                          const CiTap *tab, T (&v)[CI_BK]) {
#pragma unroll
    for (int kk = 0; kk < CI_BK; kk++) {
        const CiTap t = tab[kk];
        const uint32_t iy = (uint32_t)(c.y0 + t.dy), ix = (uint32_t)(c.x0 + t.dx);
        const bool in = c.live && iy < a.h_in && ix < a.w_in;
        v[kk] = in ? x[c.base + t.off] : fa_from<T>(0.0f);
    }
}

// The taps-outer step: its tap (ky, kx) and first channel ci (every k of the step shares the
// tap: c_in % CI_BK == 0). Every thread keeps the same one.
struct CiStep {
    uint32_t ky, kx, ci;
};

// The step after s: the next 32 channels, or the next tap's first.
__device__ __forceinline__ void ci_next(const ConvIgemmArgs &a, CiStep &s) {
    s.ci += CI_BK;
    if (s.ci == a.c_in) {
        s.ci = 0;
        if (++s.kx == a.k_w) {
            s.kx = 0;
            s.ky++;
        }
    }
}

// B[k0 .. k0 + CI_BK)[n] of the thread's column into v, taps outer: the step's one tap is
// inside the input or not for all 32 channels (zeros), which lie one channel stride apart.
template <typename T>
__device__ __forceinline__ void ci_load_b_taps(const ConvIgemmArgs &a, const T *__restrict__ x, const CiColumn &c,
                                               const CiStep &s, T (&v)[CI_BK]) {
    const int32_t dy = (int32_t)(s.ky * a.dil_h), dx = (int32_t)(s.kx * a.dil_w);
    const uint32_t iy = (uint32_t)(c.y0 + dy), ix = (uint32_t)(c.x0 + dx);
    if (c.live && iy < a.h_in && ix < a.w_in) {
        const T *q = x + c.base + (int64_t)s.ci * (int64_t)a.s_c + (int64_t)dy * (int64_t)a.s_h +
                     (int64_t)dx * (int64_t)a.s_w;
#pragma unroll
        for (int kk = 0; kk < CI_BK; kk++, q += a.s_c) v[kk] = *q;
    } else {
#pragma unroll
        for (int kk = 0; kk < CI_BK; kk++) v[kk] = fa_from<T>(0.0f);
    }
}

// W[co][k0 + h .. + 16) of row co into v (zeros past c_out and K).
template <typename T>
__device__ __forceinline__ void ci_load_a(const ConvIgemmArgs &a, const T *__restrict__ w, uint32_t co, uint32_t k,
                                          T (&v)[16]) {
    if (a.w_vec && co < a.c_out && k + 16 <= a.k) {
        const fa_vec *p = reinterpret_cast<const fa_vec *>(w + (uint64_t)co * a.k + k);
        const fa_vec lo = p[0], hi = p[1];
        __builtin_memcpy(&v[0], &lo, 16);
        __builtin_memcpy(&v[8], &hi, 16);
        return;
    }
#pragma unroll
    for (int u = 0; u < 16; u++)
        v[u] = co < a.c_out && k + u < a.k ? w[(uint64_t)co * a.k + k + u] : fa_from<T>(0.0f);
}

// n 16-bit elements from registers to shared memory, 16 bytes at a time (dst 16-byte aligned).
template <typename T, int N> __device__ __forceinline__ void ci_store(T *dst, const T (&v)[N]) {
#pragma unroll
    for (int u = 0; u < N; u += 8) {
        fa_vec q;
        __builtin_memcpy(&q, &v[u], 16);
        *reinterpret_cast<fa_vec *>(dst + u) = q;
    }
}

// TAPS: K's order (taps outer, else channels outer).
template <typename T, bool TAPS>
__device__ __forceinline__ void conv_igemm(const ConvIgemmArgs &a, const T *__restrict__ x, const T *__restrict__ w,
                                           T *__restrict__ y) {
    static_assert(sizeof(T) == 2, "f16 or bf16");
    constexpr int NW = CI_THREADS / FM_WAVE; // waves a block: 4 (32 lanes) or 2 (64 lanes)
    constexpr int WN = CI_BN / (NW / 2);     // positions a wave
    constexpr int TM = CI_BM / 2 / 16, TN = WN / 16;
    constexpr int AS = CI_BM * CI_PITCH * 2 / 16, BS = CI_BN * CI_PITCH * 2 / 16; // in fa_vec
    static_assert(NW >= 2 && NW % 2 == 0 && CI_BN == CI_THREADS && CI_BM * 2 == CI_THREADS, "tile shape");
    __shared__ fa_vec as4[CI_STAGES * AS];
    __shared__ fa_vec bs4[CI_STAGES * BS];
    // Channels outer: the taps of two steps, the one being staged and the next (written a step
    // ahead).
    __shared__ CiTap tab[2][CI_BK];

    const uint32_t tid = threadIdx.x;
    const int wave = (int)(tid / FM_WAVE), lane = (int)(tid % FM_WAVE);
    const uint32_t m0 = blockIdx.y * CI_BM, n0 = blockIdx.x * CI_BN;
    const CiColumn col = ci_column(a, n0 + tid);
    const uint32_t a_row = m0 + tid / 2, a_k = (tid % 2) * 16;

    fm_acc acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = fm_zero();

    T av[16], bv[CI_BK];
    CiStep ld = {0, 0, 0}; // taps outer: the step loaded next
    if constexpr (TAPS) {
        ci_load_b_taps<T>(a, x, col, ld, bv);
        ci_next(a, ld);
    } else {
        if (tid < CI_BK) tab[0][tid] = ci_tap(a, tid);
        __syncthreads();
        ci_load_b<T>(a, x, col, tab[0], bv);
    }
    ci_load_a<T>(a, w, a_row, a_k, av);
    ci_store<T, 16>(reinterpret_cast<T *>(as4) + (tid / 2) * CI_PITCH + a_k, av);
    ci_store<T, CI_BK>(reinterpret_cast<T *>(bs4) + tid * CI_PITCH, bv);
    if constexpr (!TAPS) {
        if (tid < CI_BK) tab[1][tid] = ci_tap(a, CI_BK + tid);
    }
    __syncthreads();

    int buf = 0;
    int step = 0; // tab[step & 1] holds this step's taps, tab[(step + 1) & 1] the next one's
    for (uint32_t k0 = 0; k0 < a.k; k0 += CI_BK, step++) {
        const bool more = k0 + CI_BK < a.k;
        if (more) {
            ci_load_a<T>(a, w, a_row, k0 + CI_BK + a_k, av);
            if constexpr (TAPS) {
                ci_load_b_taps<T>(a, x, col, ld, bv);
                ci_next(a, ld);
            } else {
                ci_load_b<T>(a, x, col, tab[(step + 1) & 1], bv);
            }
        }
        const T *As = reinterpret_cast<const T *>(as4 + buf * AS) + (wave % 2) * (CI_BM / 2) * CI_PITCH;
        const T *Bs = reinterpret_cast<const T *>(bs4 + buf * BS) + (wave / 2) * WN * CI_PITCH;
#pragma unroll
        for (int kk = 0; kk < CI_BK; kk += 16) {
            fm_frag<T> af[TM];
#pragma unroll
            for (int i = 0; i < TM; i++) af[i] = fm_load_q<T>(As + i * 16 * CI_PITCH + kk, CI_PITCH, lane);
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const fm_frag<T> bf = fm_load_k<T>(Bs + j * 16 * CI_PITCH + kk, CI_PITCH, lane);
#pragma unroll
                for (int i = 0; i < TM; i++) acc[i][j] = fm_mma_s<T>(af[i], bf, acc[i][j]);
            }
        }
        if (more) {
            // Two buffers: the other one, which every wave finished reading before the last
            // barrier. One: this one, once every wave has read it.
            const int next = CI_STAGES == 2 ? buf ^ 1 : buf;
            if (CI_STAGES == 1) __syncthreads(); // this step's tiles are read
            ci_store<T, 16>(reinterpret_cast<T *>(as4 + next * AS) + (tid / 2) * CI_PITCH + a_k, av);
            ci_store<T, CI_BK>(reinterpret_cast<T *>(bs4 + next * BS) + tid * CI_PITCH, bv);
            buf = next;
            // The step after next: this step's taps were last read before the last barrier.
            if constexpr (!TAPS) {
                if (tid < CI_BK) tab[step & 1][tid] = ci_tap(a, k0 + 2 * CI_BK + tid);
            }
        }
        __syncthreads(); // the next step's tiles are in place; this step's are read
    }

    // The store: element e of accumulator (i, j) is C[co][n] with {co, n} from fm_c_pos.
    const uint32_t cm = m0 + (wave % 2) * (CI_BM / 2), cn = n0 + (wave / 2) * WN;
#pragma unroll
    for (int j = 0; j < TN; j++)
#pragma unroll
        for (int e = 0; e < FM_ACC_N; e++) {
            const fm_pos q = fm_c_pos(lane, e);
            const uint32_t n = cn + j * 16 + q.c;
            if (n >= a.n) continue;
            const uint32_t img = n / a.p, pos = n % a.p;
            T *const out = y + ((uint64_t)img * a.c_out) * a.p + pos;
#pragma unroll
            for (int i = 0; i < TM; i++) {
                const uint32_t co = cm + i * 16 + q.q;
                if (co < a.c_out) out[(uint64_t)co * a.p] = fa_from<T>(acc[i][j][e]);
            }
        }
}

#define CI_KERNEL(T, NAME, TAPS)                                                                   \
    extern "C" __global__ void __launch_bounds__(CI_THREADS)                                       \
        NAME(ConvIgemmArgs a, const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y) { \
        conv_igemm<T, TAPS>(a, x, w, y);                                                           \
    }
CI_KERNEL(__half, conv_igemm_f16, false)
CI_KERNEL(__nv_bfloat16, conv_igemm_bf16, false)
CI_KERNEL(__half, conv_igemm_taps_f16, true)
CI_KERNEL(__nv_bfloat16, conv_igemm_taps_bf16, true)

#endif // FA_MMA_KERNELS
