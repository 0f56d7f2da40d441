// attention.hip - attention without the score matrix: flash attention (tiled online softmax)
// for dense, variable-length and paged calls, split over the keys when a call has too few
// query tiles to fill the GPU (flash decoding), the combine of those splits, and the write of
// new keys and values into a paged cache.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus a few AMD builtins
// behind __HIP_DEVICE_COMPILE__, so the same file builds for AMD (clang, kernels/include
// headers) and for the HIP-on-CUDA harness (nvcc with CUDA's own headers). This is the FMA
// path: every target runs it; the matrix-unit prefill tile (fa_mma_*, attention/mma.h: MFMA,
// WMMA, and mma.sync on the CUDA harness) comes on top of it where the target has matrix units.
//
// Semantics (candle-flash-attn 0.11's, flash-attention v2's): query i of a sequence with sq
// queries and sk keys sits at key position i + sk - sq; a window (left, right), -1 for
// unbounded, keeps the keys j with i + sk - sq - left <= j <= i + sk - sq + right (causal is
// (-1, 0)); the logit of (i, j) is s * q.k, or c * tanh(s * q.k / c) with a softcap c > 0,
// plus -slope[h] * |i + sk - sq - j| with ALiBi; a query and a key inside one multimodal prefix
// range [start, end) of their sequence see each other whatever the window; a row with no key
// left gets a zero output.
//
// Layouts (elements; the last dim, of length d, is contiguous in every tensor):
//   q, o: (b, i, h)   at b * q_batch + (tok0_q + i) * q_row + h * q_head
//   k, v: (b, j, hk)  at b * k_batch + (tok0_k + j) * k_row + hk * k_head, or paged:
//         block_table[b * bt_stride + j / page] * k_batch + (j % page) * k_row + hk * k_head
//   tok0 = cu[b] for variable-length calls (batch strides 0), 0 for dense ones.
// Query head h reads kv head h / group (GQA/MQA).
//
// Work split. A block of FA_THREADS (128) threads takes one kv head hk of one sequence b and a
// tile of BM rows of the packed (query, head-in-group) space: row r is query r / group of head
// hk * group + r % group, so the heads that share a kv head share every read of K and V. It
// walks the tiles of FA_BN (64) keys the mask leaves to its rows (the ones of its split, with
// several splits): S = Q K^T for the tile from shared memory in chunks of FA_DC (32) of the
// head dim, then the online softmax in registers (row max and sum over the CG lanes that hold
// a row, by xor shuffles inside the wave), P to shared memory, and O += P V from chunks of V
// in shared memory. Thread t holds rows (t / CG) * RS .. + RS - 1, keys t % CG + CG n and
// output columns t % CG + CG m, so the lanes of a row are neighbours in one wave (CG <= 32
// divides any wave size) and the row's softmax state lives in the threads that own its
// outputs. Exponentials are base 2 on logits scaled by log2(e).
//
// Kernels (T in f32, f16, bf16; DMAX the head-dim tier 64, 128, 256, 512 with d <= DMAX):
//   fa_fwd_<T>_<DMAX>(fa_params p)  BM rows per tile (64, 64, 32, 16 by tier), for prefill
//     grid (ceil(max rows / BM), kv_heads * splits, batch); block (FA_THREADS)
//   fa_dec<R>_<T>_<DMAX>(fa_params p)  R = 4, 8: calls of at most R packed rows (decoding), see
//     attention/decode.h; grid (1, kv_heads * splits, batch), splits in tiles of FA_DEC_TILE
//     (128) keys, of FA_DEC_TILE_F32 (32) for T = float
//   Both: splits == 1: o gets the output in T. splits > 1: split s of the tiles_per_split tiles
//     [s * tps, (s + 1) * tps) writes its normalised partial output to
//     o_part[((s * total_q + tok) * heads + h) * d + col] and its log2-sum-exp to
//     lse_part[(s * total_q + tok) * heads + h] (-inf when it saw no key), tok = tok0_q + i
//     (b * seqlen_q + i for dense calls).
//   fa_mma_<T>_<DMAX>(fa_params p)  T in f16, bf16; DMAX 64, 128, 256: fa_fwd_*'s contract
//     (splits included) on matrix units, BM = 64 rows a tile, grid as fa_fwd_*'s (tiers 64
//     and 128 pipelined, attention/mma_pipe.h; 256 chunked, attention/mma.h); only for
//     targets with matrix units (gfx90a, gfx94x, gfx950, gfx11, gfx12; CUDA sm_80+), and there
//     only up to the tier FA_MMA_MAX_DMAX that builds without scratch (attention/mma.h):
//     elsewhere the symbols do not exist and the host takes fa_fwd_*.
//   fa_mdec_<T>_<DMAX>(fa_params p)  T in f16, bf16; DMAX 64, 128: fa_dec*'s contract (grid,
//     splits, at most 8 packed rows) on matrix units, attention/mma_dec.h; where FA_MMA_KERNELS
//     and the tier is built (as fa_mma_*)
//   fa_mma_f32h_<DMAX>, fa_mdec_f32h_<DMAX>(fa_params p)  the f16 kernels' contracts (same
//     tiers, same targets) with q and o in f32: K and V f16, q rounded to f16 as it is staged
//     (the decoders' f32 activations over an f16 KV cache); splits merge with fa_combine_f32
//   fa_dec4_f32h_<DMAX>, fa_dec8_f32h_<DMAX>(fa_params p)  fa_dec*_f16's contract with q and o
//     in f32 (q kept in f32), on every target
//   fa_sdec<R>_<T>_<DMAX>(fa_params p)  R = 1, 4, 8; T in f32, f16, bf16, f32h (q and o in f32
//     over f16 K and V); DMAX 64, 128, 256: fa_dec*'s contract (grid, splits) for calls whose
//     blocks see few keys (a decode step early in a sequence), attention/short_dec.h
//   fa_combine_<T>(fa_params p)     grid (total_q, heads); block (FA_THREADS): merges the splits
//   fa_cache_write_<T>(...)         see attention/cache.h
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

#include "mma/common.h" // FA_WAVE, fa_vec, fa_to/fa_from, fa_shfl_xor, FA_FENCE

#define FA_THREADS 128
// Launch bounds. On the CUDA path (HIP-on-CUDA harness) the decode kernels ask for
// FA_DEC_MIN_BLOCKS resident blocks an SM and the matrix-unit tile for 3 (4 at tier 64), so
// that nvcc keeps their registers down (without it they took 136 and 201 registers, 3 and 2
// blocks an SM, and stalled on memory latency with too few warps). AMD builds keep the plain bound (their second argument means
// waves per execution unit, and the static checks watch their registers).
#if defined(__HIP_DEVICE_COMPILE__)
#define FA_BOUNDS_DEC __launch_bounds__(FA_THREADS)
#define FA_BOUNDS_MDEC __launch_bounds__(FA_THREADS)
#define FA_BOUNDS_MMA(DMAX) __launch_bounds__(FA_THREADS)
#else
#ifndef FA_DEC_MIN_BLOCKS
#define FA_DEC_MIN_BLOCKS 4
#endif
#ifndef FA_MMA64_MIN_BLOCKS
#define FA_MMA64_MIN_BLOCKS 4
#endif
#define FA_BOUNDS_DEC __launch_bounds__(FA_THREADS, FA_DEC_MIN_BLOCKS)
#ifndef FA_MDEC_MIN_BLOCKS
#define FA_MDEC_MIN_BLOCKS 4
#endif
#define FA_BOUNDS_MDEC __launch_bounds__(FA_THREADS, FA_MDEC_MIN_BLOCKS)
#define FA_BOUNDS_MMA(DMAX) __launch_bounds__(FA_THREADS, (DMAX) <= 64 ? FA_MMA64_MIN_BLOCKS : 3)
#endif
#define FA_BN 64
#define FA_DC 32
#define FA_LOG2E 1.4426950408889634f

// The kernels' one argument (264 bytes; candle-rocm's launch/attention.rs mirrors it field by
// field). Pointers are null when absent: cu_q/cu_k (dense call), block_table (not paged),
// alibi, mm_prefix, o_part/lse_part (one split).
struct fa_params {
    const void *q, *k, *v;
    void *o;
    float *o_part, *lse_part;
    const uint32_t *cu_q, *cu_k;
    const uint32_t *block_table;
    const float *alibi;
    const int32_t *mm_prefix; // (batch, mm_ranges, 2), batch stride mm_stride
    uint64_t q_batch, q_row, q_head;
    uint64_t k_batch, k_row, k_head;
    uint64_t v_batch, v_row, v_head;
    uint64_t o_batch, o_row, o_head;
    uint32_t heads, kv_heads, group, d;
    uint32_t seqlen_q, seqlen_k; // dense: every sequence's; variable-length: the longest
    uint32_t batch, splits;
    uint32_t page, bt_stride, tiles_per_split, total_q;
    uint32_t mm_ranges, mm_stride;
    uint32_t vec_ok; // every row of q, k, v starts 16-byte aligned: 16-byte loads
    uint32_t pad_;
    int32_t window_left, window_right;
    float scale, softcap;
};

#include "attention/common.h"
#include "attention/tile.h"
#include "attention/decode.h"
#include "attention/short_dec.h"
#include "attention/combine.h"
#include "attention/cache.h"
#include "mma/tile.h"
#include "mma/frag.h"
#include "attention/mma.h"
#include "attention/mma_pipe.h"
#include "attention/mma_dec.h"

#define FA_TIER(T, TN, DMAX, BM, RS)                                                               \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) fa_fwd_##TN##_##DMAX(fa_params p) { \
        fa_tile<T, DMAX, BM, RS>(p);                                                               \
    }                                                                                              \
    extern "C" __global__ void FA_BOUNDS_DEC fa_dec4_##TN##_##DMAX(fa_params p) {                 \
        fa_decode<T, DMAX, 4>(p);                                                                  \
    }                                                                                              \
    extern "C" __global__ void FA_BOUNDS_DEC fa_dec8_##TN##_##DMAX(fa_params p) {                 \
        fa_decode<T, DMAX, 8>(p);                                                                  \
    }
#define FA_TYPE(T, TN)                                                                             \
    FA_TIER(T, TN, 64, 64, 4)                                                                      \
    FA_TIER(T, TN, 128, 64, 4)                                                                     \
    FA_TIER(T, TN, 256, 32, 2)                                                                     \
    FA_TIER(T, TN, 512, 16, 1)                                                                     \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) fa_combine_##TN(fa_params p) {      \
        fa_combine<T>(p);                                                                          \
    }                                                                                              \
    FA_CACHE_WRITE(T, TN)

FA_TYPE(float, f32)
FA_TYPE(__half, f16)
FA_TYPE(__nv_bfloat16, bf16)

// The mixed FMA decode kernels: f32 q and output over f16 keys and values (every target).
#define FA_MIXED_DEC_TIER(DMAX)                                                                    \
    extern "C" __global__ void FA_BOUNDS_DEC fa_dec4_f32h_##DMAX(fa_params p) {                   \
        fa_decode<__half, DMAX, 4, float>(p);                                                      \
    }                                                                                              \
    extern "C" __global__ void FA_BOUNDS_DEC fa_dec8_f32h_##DMAX(fa_params p) {                   \
        fa_decode<__half, DMAX, 8, float>(p);                                                      \
    }
FA_MIXED_DEC_TIER(64)
FA_MIXED_DEC_TIER(128)
FA_MIXED_DEC_TIER(256)
FA_MIXED_DEC_TIER(512)

// The short decode kernels (attention/short_dec.h): R = 1, 4, 8 rows, tiers 64, 128, 256, every
// dtype and the mixed f32-over-f16 form (suffix f32h), every target.
#define FA_SDEC_R(T, TN, DMAX, R, TQ)                                                              \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) fa_sdec##R##_##TN##_##DMAX(fa_params p) { \
        fa_short_decode<T, DMAX, R, TQ>(p);                                                        \
    }
#define FA_SDEC_TIER(T, TN, DMAX, TQ)                                                              \
    FA_SDEC_R(T, TN, DMAX, 1, TQ)                                                                  \
    FA_SDEC_R(T, TN, DMAX, 4, TQ)                                                                  \
    FA_SDEC_R(T, TN, DMAX, 8, TQ)
#define FA_SDEC_TYPE(T, TN, TQ)                                                                    \
    FA_SDEC_TIER(T, TN, 64, TQ)                                                                    \
    FA_SDEC_TIER(T, TN, 128, TQ)                                                                   \
    FA_SDEC_TIER(T, TN, 256, TQ)
FA_SDEC_TYPE(float, f32, float)
FA_SDEC_TYPE(__half, f16, __half)
FA_SDEC_TYPE(__nv_bfloat16, bf16, __nv_bfloat16)
FA_SDEC_TYPE(__half, f32h, float)

#if defined(FA_MMA_KERNELS)
#define FA_MMA_TIER(T, TN, DMAX)                                                                   \
    extern "C" __global__ void FA_BOUNDS_MMA(DMAX) fa_mma_##TN##_##DMAX(fa_params p) {            \
        if constexpr (DMAX <= 128)                                                                 \
            fa_mma_pipe<T, DMAX>(p);                                                               \
        else                                                                                       \
            fa_mma_chunked<T, DMAX>(p);                                                            \
    }
// The matrix-unit decode kernel: tiers 64 and 128 (attention/mma_dec.h).
#define FA_MDEC_TIER(T, TN, DMAX)                                                                  \
    extern "C" __global__ void FA_BOUNDS_MDEC fa_mdec_##TN##_##DMAX(fa_params p) {                \
        fa_mma_dec<T, DMAX>(p);                                                                    \
    }
// The mixed kernels (suffix f32h): q and o in f32, K and V in f16 (f32 activations over an f16
// KV cache, as llama.cpp keeps it), q rounded to f16 as it is staged; the splits' workspace
// and fa_combine_f32 as for any f32 call.
#define FA_MIXED_TIER(DMAX)                                                                        \
    extern "C" __global__ void FA_BOUNDS_MMA(DMAX) fa_mma_f32h_##DMAX(fa_params p) {              \
        if constexpr (DMAX <= 128)                                                                 \
            fa_mma_pipe<__half, DMAX, float>(p);                                                   \
        else                                                                                       \
            fa_mma_chunked<__half, DMAX, float>(p);                                                \
    }
#define FA_MIXED_MDEC_TIER(DMAX)                                                                   \
    extern "C" __global__ void FA_BOUNDS_MDEC fa_mdec_f32h_##DMAX(fa_params p) {                  \
        fa_mma_dec<__half, DMAX, float>(p);                                                        \
    }
#if FA_MMA_MAX_DMAX >= 64
FA_MMA_TIER(__half, f16, 64)
FA_MDEC_TIER(__half, f16, 64)
FA_MIXED_TIER(64)
FA_MIXED_MDEC_TIER(64)
#endif
#if FA_MMA_MAX_DMAX >= 128
FA_MMA_TIER(__half, f16, 128)
FA_MDEC_TIER(__half, f16, 128)
FA_MIXED_TIER(128)
FA_MIXED_MDEC_TIER(128)
#endif
#if FA_MMA_MAX_DMAX >= 256
FA_MMA_TIER(__half, f16, 256)
FA_MIXED_TIER(256)
#endif
#if FA_MMA_MAX_DMAX_BF16 >= 64
FA_MMA_TIER(__nv_bfloat16, bf16, 64)
FA_MDEC_TIER(__nv_bfloat16, bf16, 64)
#endif
#if FA_MMA_MAX_DMAX_BF16 >= 128
FA_MMA_TIER(__nv_bfloat16, bf16, 128)
FA_MDEC_TIER(__nv_bfloat16, bf16, 128)
#endif
#if FA_MMA_MAX_DMAX_BF16 >= 256
FA_MMA_TIER(__nv_bfloat16, bf16, 256)
#endif
#endif
