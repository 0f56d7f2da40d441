// attention/mma.h - part of attention.hip: the matrix-unit prefill tiles (fa_mma_<T>_<DMAX>, T
// f16 or bf16, DMAX 64, 128, 256), the FMA tile's semantics and output contract (attention.hip's
// header) with S = Q K^T and O += P V on matrix units (mma/frag.h), f32 accumulation
// and the online softmax in f32, base 2. Exists only where mma/frag.h defines FA_MMA_KERNELS.
// This file holds what both tiles share (the rows, the key range, the softmax, the store) and
// the chunked tile of tier 256; tiers 64 and 128 take the pipelined tile (attention/mma_pipe.h).
//
// Work split. A block of FA_THREADS (128) threads takes BM = 64 packed (query, head-in-group)
// rows of one kv head, split and sequence, like fa_fwd_* (grid (ceil(max rows / 64),
// kv_heads * splits, batch)). Wave w owns rows 16 FM_QT w .. + 16 FM_QT - 1: FM_QT = 1 16-row
// tile on 32-lane waves (CUDA warps, gfx11/gfx12), 2 on MFMA's 64-lane waves. Per tile of
// FA_BN (64) keys the wave holds S for its rows in 4 x FM_QT accumulators (16 x 16 f32 each),
// masks each element through fm_c_pos (its query row and key), takes the row max and sum over
// the lanes of a row (fm_row_max / fm_row_sum), rescales its O accumulators by the row's
// correction (fm_slot: which of the lane's rows an element is on) and turns S into P's
// fragments in registers (rounded to T), then O += P V.
//
// The chunked tile's shared memory (T, rows padded by 8 elements: 16-byte aligned, off the
// bank stride):
//   qs: the block's Q rows, BM x DMAX, loaded once (zeros past d and past the rows)
//   kv: one chunk of the key tile: K's head-dim chunks for S, FA_BN x KC (KC = 64), then V's
//       column chunks for O staged transposed, KC x FA_BN, so that every fragment load reads
//       consecutive elements (zeros past the keys and past d).
//   LDS: 42 KiB: under the 48 KiB static limit of CUDA.
// Registers a lane: O DMAX / 16 x FM_QT accumulators (DMAX / 2 floats on every family), S 4 x
// FM_QT accumulators (32 floats), P 4 x FM_QT fragments.
#pragma once

#if defined(FA_MMA_KERNELS)

// The largest DMAX built: the tiers that compile without scratch on the family (clang-19 -O3:
// gfx942 128 uses 448-456 unified VGPRs and no scratch, 256 spills 28-32 bytes; gfx12 64 uses
// 204 VGPRs, 128 spills; gfx11 64 already spills 32 bytes). The CPU emulator's drivers set 256
// to check every tier's logic on every family.
#ifndef FA_MMA_MAX_DMAX
#if defined(FA_MMA_SYNC)
#define FA_MMA_MAX_DMAX 256
#elif defined(FA_MFMA)
#define FA_MMA_MAX_DMAX 128
#elif defined(FA_WMMA12)
#define FA_MMA_MAX_DMAX 64
#else
#define FA_MMA_MAX_DMAX 0
#endif
#endif
// bf16 may stop a tier earlier: on MFMA its 128 tier keeps 8 VGPRs in AGPRs (spills the
// static checks refuse), so bf16 stops at 64 there.
#ifndef FA_MMA_MAX_DMAX_BF16
#if defined(FA_MFMA) && FA_MMA_MAX_DMAX == 128
#define FA_MMA_MAX_DMAX_BF16 64
#else
#define FA_MMA_MAX_DMAX_BF16 FA_MMA_MAX_DMAX
#endif
#endif

// 16 bytes (N = 8 elements) of row `src` into shared `dst`: the first `n` (<= 8) elements,
// zeros after them; one 16-byte load when `vec` and all 8 are wanted.
template <typename T> __device__ __forceinline__ void fm_stage(T *dst, const T *src, int n, bool vec) {
    FaChunk<T> c;
    if (vec && n == FaChunk<T>::N) {
        fa_vec v = *reinterpret_cast<const fa_vec *>(src);
        __builtin_memcpy(&c, &v, sizeof(c));
    } else {
#pragma unroll
        for (int u = 0; u < FaChunk<T>::N; u++) c.e[u] = u < n ? src[u] : fa_from<T>(0.0f);
    }
    fa_vec v;
    __builtin_memcpy(&v, &c, sizeof(v));
    *reinterpret_cast<fa_vec *>(dst) = v;
}

// Value row j (of sequence b, kv head hk), columns col .. col + 7, into shared memory
// transposed: element u at dst[u * pitch] (zeros past the keys and past d).
template <typename T>
__device__ __forceinline__ void fm_stage_vt(T *dst, int pitch, const fa_params &p, uint32_t b, const FaSeq &s,
                                            int64_t j, uint32_t col, uint32_t hk, bool vec) {
    constexpr int N = FaChunk<T>::N;
    FaChunk<T> c;
    if (j < s.sk && col < p.d) {
        const T *src = (const T *)p.v + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.v_batch, p.v_row, p.v_head) + col;
        const uint32_t n = fa_min<uint32_t>(N, p.d - col);
        if (vec && n == N) {
            const fa_vec x = *reinterpret_cast<const fa_vec *>(src);
            __builtin_memcpy(&c, &x, sizeof(c));
        } else {
#pragma unroll
            for (int u = 0; u < N; u++) c.e[u] = (uint32_t)u < n ? src[u] : fa_from<T>(0.0f);
        }
    } else {
#pragma unroll
        for (int u = 0; u < N; u++) c.e[u] = fa_from<T>(0.0f);
    }
#pragma unroll
    for (int u = 0; u < N; u++) dst[u * pitch] = c.e[u];
}

// A wave's row state: per lane, its rows (FM_RQ per 16-row tile) and their online softmax.
struct FmRows {
    int64_t qpos[FM_QT][FM_RQ]; // key position of the row's query
    float slope[FM_QT][FM_RQ];  // ALiBi slope, log2 units
    bool live[FM_QT][FM_RQ];    // a row past the sequence is masked, never written
    float m[FM_QT][FM_RQ], lsum[FM_QT][FM_RQ];
};

// The rows of the wave whose first row is `base` (packed row index).
__device__ __forceinline__ void fm_rows_init(FmRows &w, const fa_params &p, uint32_t base, uint32_t rows,
                                             uint32_t G, uint32_t hk, int64_t off, int l) {
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int r = 0; r < FM_RQ; r++) {
            const uint32_t R0 = base + qt * 16 + fm_row(l, r);
            w.live[qt][r] = R0 < rows;
            const uint32_t R = w.live[qt][r] ? R0 : rows - 1;
            w.qpos[qt][r] = (int64_t)(R / G) + off;
            w.slope[qt][r] = p.alibi ? p.alibi[hk * G + (uint32_t)(R % G)] * FA_LOG2E : 0.0f;
            w.m[qt][r] = -INFINITY;
            w.lsum[qt][r] = 0.0f;
        }
}

// A block's place: sequence b, kv head hk, split, and its packed rows [r0, r0 + BM) of the
// sequence's rows (32-bit row and head arithmetic: 64-bit division is long).
struct FmBlock {
    uint32_t b, hk, split, rows, r0;
    FaSeq s;
};
__device__ __forceinline__ FmBlock fm_block(const fa_params &p, uint32_t bm) {
    FmBlock k;
    k.b = blockIdx.z;
    k.hk = blockIdx.y % p.kv_heads;
    k.split = blockIdx.y / p.kv_heads;
    k.s = fa_seq(p, k.b);
    k.rows = k.s.sq * p.group;
    k.r0 = blockIdx.x * bm;
    return k;
}

// One chunk of a q row into shared memory as T: q of the kernel's own type as fm_stage does,
// or f32 q (the mixed kernels, *_f32h_*: f32 activations over an f16 KV cache) rounded to T on
// the way, read with two 16-byte loads where aligned.
template <typename T> __device__ __forceinline__ void fm_stage_q_chunk(T *dst, const T *src, int n, bool vec) {
    fm_stage(dst, src, n, vec);
}
template <typename T> __device__ __forceinline__ void fm_stage_q_chunk(T *dst, const float *src, int n, bool vec) {
    constexpr int N = FaChunk<T>::N;
    float f[N];
    if (n == N) {
        fa_load_f32<N>(src, vec, f);
    } else {
#pragma unroll
        for (int u = 0; u < N; u++) f[u] = u < n ? src[u] : 0.0f;
    }
    FaChunk<T> c;
#pragma unroll
    for (int u = 0; u < N; u++) c.e[u] = fa_from<T>(f[u]);
    fa_vec v;
    __builtin_memcpy(&v, &c, sizeof(v));
    *reinterpret_cast<fa_vec *>(dst) = v;
}

// The block's BM rows of Q (of type TQ: T, or f32 for the mixed kernels) into shared `dst` as
// T (row pitch `pitch` elements, DMAX columns): zeros past d and past the sequence's rows.
template <typename T, int DMAX, int BM, typename TQ = T>
__device__ __forceinline__ void fm_stage_q(T *dst, int pitch, const fa_params &p, const FmBlock &k) {
    constexpr int N = FaChunk<T>::N, CR = DMAX / N;
    const TQ *const q = (const TQ *)p.q;
    for (uint32_t x = threadIdx.x; x < BM * CR; x += FA_THREADS) {
        const uint32_t row = x / CR, col = (x % CR) * N;
        const uint32_t R = k.r0 + row;
        const TQ *src = q;
        int n = 0;
        if (R < k.rows && col < p.d) {
            const uint64_t i = R / p.group, h = k.hk * p.group + R % p.group;
            src = q + (uint64_t)k.b * p.q_batch + (k.s.tok0_q + i) * p.q_row + h * p.q_head + col;
            n = (int)fa_min<uint32_t>(N, p.d - col);
        }
        fm_stage_q_chunk(dst + row * pitch + col, src, n, p.vec_ok != 0);
    }
}

// The key tile at j0 once S is in `sa`: logits (log2 units), the mask, the online softmax; P
// into fragments `pf` (rounded to T); O rescaled by each row's correction. Per row, the tile's
// keys jj = j - j0 it keeps are [lo, hi] (the window and the keys' end; empty for a dead row),
// plus, with prefix ranges, those of [0, hk] fa_mm_allowed lets in.
template <typename T, int NT, int DT>
__device__ __forceinline__ void fm_softmax(const fa_params &p, uint32_t b, const FaSeq &s, int64_t j0, int l,
                                           FmRows &w, fm_acc (&sa)[FM_QT][NT], fm_frag<T> (&pf)[FM_QT][NT],
                                           fm_acc (&o)[FM_QT][DT]) {
    const int64_t wl = p.window_left, wr = p.window_right;
    float tmax[FM_QT][FM_RQ], qrel[FM_QT][FM_RQ];
    int lo[FM_QT][FM_RQ], hi[FM_QT][FM_RQ], hk_[FM_QT][FM_RQ];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int r = 0; r < FM_RQ; r++) {
            tmax[qt][r] = -INFINITY;
            const int64_t qp = w.qpos[qt][r], kend = (int64_t)s.sk - 1 - j0;
            const int64_t a = wl >= 0 ? qp - wl - j0 : 0, z = wr >= 0 ? fa_min<int64_t>(qp + wr - j0, kend) : kend;
            lo[qt][r] = w.live[qt][r] ? (int)fa_min<int64_t>(fa_max<int64_t>(a, 0), FA_BN) : FA_BN;
            hi[qt][r] = w.live[qt][r] ? (int)fa_max<int64_t>(fa_min<int64_t>(z, FA_BN - 1), -1) : -1;
            hk_[qt][r] = w.live[qt][r] ? (int)fa_min<int64_t>(kend, FA_BN - 1) : -1;
            qrel[qt][r] = (float)(qp - j0);
        }
    const float sl2 = p.scale * FA_LOG2E, cs = p.softcap > 0.0f ? p.scale / p.softcap : 0.0f;
    const float cl2 = p.softcap * FA_LOG2E;
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++) {
#pragma unroll
        for (int kt = 0; kt < NT; kt++)
#pragma unroll
            for (int e = 0; e < FM_ACC_N; e++) {
                const int r = fm_slot(e);
                const int jj = kt * 16 + fm_c_pos(l, e).c;
                float x = sa[qt][kt][e];
                // c tanh(s x / c) as c (1 - 2 / (e^(2 s x / c) + 1)), in log2 units.
                x = p.softcap > 0.0f ? cl2 * (1.0f - 2.0f / (exp2f(2.0f * FA_LOG2E * cs * x) + 1.0f)) : x * sl2;
                bool keep = jj >= lo[qt][r] && jj <= hi[qt][r];
                if (!keep && p.mm_prefix && jj <= hk_[qt][r]) keep = fa_mm_allowed(p, b, w.qpos[qt][r], j0 + jj);
                if (p.alibi) x -= w.slope[qt][r] * fabsf(qrel[qt][r] - (float)jj);
                sa[qt][kt][e] = keep ? x : -INFINITY;
                tmax[qt][r] = fmaxf(tmax[qt][r], sa[qt][kt][e]);
            }
    }
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++) {
        float mu[FM_RQ], corr[FM_RQ], rsum[FM_RQ];
#pragma unroll
        for (int r = 0; r < FM_RQ; r++) {
            const float mnew = fmaxf(w.m[qt][r], fm_row_max(tmax[qt][r]));
            mu[r] = mnew == -INFINITY ? 0.0f : mnew;
            corr[r] = exp2f(w.m[qt][r] - mu[r]);
            w.m[qt][r] = mnew;
            rsum[r] = 0.0f;
        }
#pragma unroll
        for (int kt = 0; kt < NT; kt++) {
#pragma unroll
            for (int e = 0; e < FM_ACC_N; e++) {
                const float pv = exp2f(sa[qt][kt][e] - mu[fm_slot(e)]);
                rsum[fm_slot(e)] += pv;
                sa[qt][kt][e] = pv;
            }
            pf[qt][kt] = fm_p<T>(sa[qt][kt], l);
        }
#pragma unroll
        for (int r = 0; r < FM_RQ; r++) w.lsum[qt][r] = w.lsum[qt][r] * corr[r] + fm_row_sum(rsum[r]);
#pragma unroll
        for (int x = 0; x < DT; x++)
#pragma unroll
            for (int e = 0; e < FM_ACC_N; e++) o[qt][x][e] *= corr[fm_slot(e)];
    }
}

// The wave's rows (first packed row `base`): in T (one split), or normalised partials and
// log2-sum-exps. Element e of a lane is on its row fm_slot(e) (fm_c_pos(l, e).q ==
// fm_row(l, fm_slot(e))).
template <typename T, int DT, typename TO = T>
__device__ __forceinline__ void fm_store(const fa_params &p, const FmRows &w, const fm_acc (&o)[FM_QT][DT],
                                         uint32_t base, uint32_t rows, uint32_t hk, uint32_t b, const FaSeq &s,
                                         uint32_t split, int l) {
    const uint32_t G = p.group, d = p.d;
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++) {
        float inv[FM_RQ];
        uint64_t at[FM_RQ]; // the row's first element in o, or in o_part
#pragma unroll
        for (int r = 0; r < FM_RQ; r++) {
            inv[r] = w.lsum[qt][r] > 0.0f ? 1.0f / w.lsum[qt][r] : 0.0f;
            const uint32_t R = fa_min(base + qt * 16 + fm_row(l, r), rows - 1);
            const uint64_t i = R / G, h = hk * G + R % G;
            if (p.splits > 1) {
                const uint64_t prow = ((uint64_t)split * p.total_q + s.ws_tok0 + i) * p.heads + h;
                at[r] = prow * d;
                if (w.live[qt][r] && fm_row_leader(l))
                    p.lse_part[prow] = w.lsum[qt][r] > 0.0f ? w.m[qt][r] + log2f(w.lsum[qt][r]) : -INFINITY;
            } else {
                at[r] = (uint64_t)b * p.o_batch + (s.tok0_q + i) * p.o_row + h * p.o_head;
            }
        }
#pragma unroll
        for (int x = 0; x < DT; x++)
#pragma unroll
            for (int e = 0; e < FM_ACC_N; e++) {
                const int r = fm_slot(e);
                const uint32_t col = 16 * x + fm_c_pos(l, e).c;
                if (!w.live[qt][r] || col >= d) continue;
                const float val = o[qt][x][e] * inv[r];
                if (p.splits > 1)
                    p.o_part[at[r] + col] = val;
                else
                    ((TO *)p.o)[at[r] + col] = fa_from<TO>(val);
            }
    }
}

// The chunked tile (tier 256, where a whole key tile and its values do not fit shared memory
// beside each other): K in chunks of KC head-dim columns for S, V in chunks of KC columns for
// O; Q stays in shared memory. Loads and matrix work take turns.
template <typename T, int DMAX, typename TQ = T> __device__ __forceinline__ void fa_mma_chunked(const fa_params &p) {
    constexpr int NW = FA_THREADS / FM_WAVE; // waves
    constexpr int WR = 16 * FM_QT;           // rows a wave
    constexpr int BM = NW * WR;              // rows a block
    constexpr int KC = DMAX <= 128 ? DMAX : 64;
    constexpr int QP = DMAX + 8, KP = KC + 8, VP = FA_BN + 8; // row pitches (elements)
    constexpr int KVN = FA_BN * KP > KC * VP ? FA_BN * KP : KC * VP;
    constexpr int NT = FA_BN / 16;            // 16-key tiles of S
    constexpr int DT = DMAX / 16;             // 16-column tiles of O
    constexpr int N = FaChunk<T>::N;
    static_assert(BM == 64 && N == 8 && DMAX % KC == 0 && KC % 16 == 0, "mma tile shape");
    __shared__ fa_vec qs4[BM * QP * sizeof(T) / 16];
    __shared__ fa_vec kv4[KVN * sizeof(T) / 16];
    T *const qs = reinterpret_cast<T *>(qs4);
    T *const kv = reinterpret_cast<T *>(kv4);

    const uint32_t tid = threadIdx.x, wave = tid / FM_WAVE;
    const int l = (int)(tid % FM_WAVE);
    const FmBlock blk = fm_block(p, BM);
    const uint32_t b = blk.b, hk = blk.hk, split = blk.split, rows = blk.rows, r0 = blk.r0;
    const FaSeq &s = blk.s;
    const uint32_t d = p.d;
    if (r0 >= rows) return; // the whole block
    const bool vec = p.vec_ok != 0;
    const T *const k = (const T *)p.k;

    FmRows w;
    fm_rows_init(w, p, r0 + wave * WR, rows, p.group, hk, (int64_t)s.sk - (int64_t)s.sq, l);
    int64_t t0, t1;
    fa_key_tiles(p, s, r0, BM, rows, split, t0, t1);

    // Q, once.
    fm_stage_q<T, DMAX, BM, TQ>(qs, QP, p, blk);

    fm_acc o[FM_QT][DT];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int x = 0; x < DT; x++) o[qt][x] = fm_zero();
    const T *const qw = qs + wave * WR * QP;

    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = t * FA_BN;
        // S = Q K^T, KC columns of the head dim at a time (16-column steps past d skipped).
        fm_acc sa[FM_QT][NT];
#pragma unroll
        for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
            for (int kt = 0; kt < NT; kt++) sa[qt][kt] = fm_zero();
        for (uint32_t dc = 0; dc < d; dc += KC) {
            __syncthreads(); // Q is staged; the previous chunk (or V chunk) is read
            for (uint32_t x = tid; x < FA_BN * (KC / N); x += FA_THREADS) {
                const uint32_t row = x / (KC / N), col = dc + (x % (KC / N)) * N;
                const int64_t j = j0 + row;
                const T *src = k;
                int n = 0;
                if (j < s.sk && col < d) {
                    src = k + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.k_batch, p.k_row, p.k_head) + col;
                    n = (int)fa_min<uint32_t>(N, d - col);
                }
                fm_stage(kv + row * KP + (col - dc), src, n, vec);
            }
            __syncthreads();
            for (uint32_t ks = 0; ks < KC && dc + ks < d; ks += 16) {
                fm_frag<T> qf[FM_QT];
#pragma unroll
                for (int qt = 0; qt < FM_QT; qt++) qf[qt] = fm_load_q<T>(qw + qt * 16 * QP + dc + ks, QP, l);
#pragma unroll
                for (int kt = 0; kt < NT; kt++) {
                    const fm_frag<T> kf = fm_load_k<T>(kv + kt * 16 * KP + ks, KP, l);
#pragma unroll
                    for (int qt = 0; qt < FM_QT; qt++) sa[qt][kt] = fm_mma_s<T>(qf[qt], kf, sa[qt][kt]);
                }
                FM_FENCE();
            }
        }

        fm_frag<T> pf[FM_QT][NT];
        fm_softmax<T, NT, DT>(p, b, s, j0, l, w, sa, pf, o);

        // O += P V, KC columns of V at a time.
#pragma unroll
        for (int dc = 0; dc < DMAX; dc += KC) {
            if ((uint32_t)dc >= d) break; // the same for the whole block
            __syncthreads();              // S's K chunk (or the previous V chunk) is read
            for (uint32_t x = tid; x < FA_BN * (KC / N); x += FA_THREADS) {
                const uint32_t row = x / (KC / N), col = dc + (x % (KC / N)) * N;
                fm_stage_vt<T>(kv + (col - dc) * VP + row, VP, p, b, s, j0 + row, col, hk, vec);
            }
            __syncthreads();
#pragma unroll
            for (int ct = 0; ct < KC / 16; ct++) {
                if ((uint32_t)(dc + 16 * ct) >= d) break;
#pragma unroll
                for (int kt = 0; kt < NT; kt++) {
                    const fm_frag<T> vf = fm_load_vt<T>(kv + 16 * ct * VP + kt * 16, VP, l);
#pragma unroll
                    for (int qt = 0; qt < FM_QT; qt++)
                        o[qt][dc / 16 + ct] = fm_mma_o<T>(pf[qt][kt], vf, o[qt][dc / 16 + ct]);
                }
                FM_FENCE();
            }
        }
    }
    fm_store<T, DT, TQ>(p, w, o, r0 + wave * WR, rows, hk, b, s, split, l);
}

#endif // FA_MMA_KERNELS
