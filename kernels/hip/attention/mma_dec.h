// attention/mma_dec.h - part of attention.hip: the matrix-unit decode kernel (fa_mdec_<T>_<DMAX>,
// T f16 or bf16, DMAX 64 and 128), the decode kernels' contract (attention/decode.h: one block
// per (kv head and split, sequence) takes all of at most 16 FM_QT packed rows, splits in tiles of
// FA_DEC_TILE keys) with S = Q K^T and O += P V on matrix units (mma/frag.h).
//
// Why: a decode step reads the whole KV cache for a handful of rows. On FMA units every element
// of K and V costs R multiply-adds, so at GQA 4-8 the FMA kernel (decode.h) runs out of issue
// slots before memory does. A 16-row matrix tile does the same work in a few instructions a
// key, padding the rows it does not have, so the kernel becomes a stream of K and V.
//
// Work split. Every wave holds the same rows (Q in registers, loaded once through shared
// memory) and takes every NW-th 16-key tile of the block's range: wave w the tiles t0 + w,
// t0 + w + NW, ... Each wave streams its own tiles through its own shared-memory slots, K
// and V one tile each, so the main loop has no block barrier:
//     wait K(t); S = Q K(t)^T; start K(t + NW); softmax;
//     wait V(t); O += P V(t); start V(t + NW).
// On the CUDA path the copies are cp.async (a wave waits for its own groups and syncs its
// lanes, __syncwarp), the fragments ldmatrix, V read as it lies; on AMD the copies are plain
// loads and stores and V is staged transposed for fm_load_vt. At the end the waves' running
// maxima, sums and outputs go through shared memory and wave 0 merges them (in wave order:
// deterministic) and stores the rows as the other tiles do (fm_store: T, or the split
// workspace).
//
// LDS: Q (16 FM_QT x (DMAX + 8)) plus NW x (K tile + V tile): 38.3 KiB at tier 128 on the CUDA
// path (f16 or bf16), the merge reusing the tile slots.
#pragma once

#if defined(FA_MMA_KERNELS)

#define FA_MDEC_KT 16 // keys a wave takes at a time
#ifndef FA_MDEC_Q_SMEM
#define FA_MDEC_Q_SMEM 1
#endif

// The lanes of one wave see each other's shared-memory writes (after their copies completed).
#define FM_WAVE_SYNC() __syncwarp()

template <typename T, int DMAX, typename TQ = T> __device__ __forceinline__ void fa_mma_dec(const fa_params &p) {
    constexpr int NW = FA_THREADS / FM_WAVE; // waves
    constexpr int WR = 16 * FM_QT;           // rows (every wave the same)
    constexpr int KT = FA_MDEC_KT;
    constexpr int KP = DMAX + 8; // row pitch of Q, K (and V as it lies), elements
    constexpr int DT = DMAX / 16;
    constexpr int N = FaChunk<T>::N;
    constexpr int CR = DMAX / N; // 16-byte chunks a row
#if FM_V_ROWMAJOR
    constexpr int VN = KT * KP;
#else
    constexpr int VP = KT + 8; // V^T's row pitch
    constexpr int VN = DMAX * VP;
#endif
    constexpr int SLOT = KT * KP + VN; // elements of a wave's slots
    // The merge: per lane of waves 1.., its O accumulators and its rows' max and sum.
    constexpr int MV = FM_QT * DT * FM_ACC_N + 2 * FM_QT * FM_RQ;
    static_assert(KT * CR % FM_WAVE == 0 && WR >= 8, "mdec staging, and the host's 8 rows");
    static_assert(N == 8 && DMAX <= 128 && DMAX % 16 == 0 && FA_DEC_TILE % (KT * NW) == 0, "mdec shape");
    static_assert((size_t)(NW - 1) * FM_WAVE * MV * 4 <= (size_t)NW * SLOT * sizeof(T), "mdec merge fits");
    __shared__ fa_vec qs4[WR * KP * sizeof(T) / 16];
    __shared__ fa_vec kv4[NW * SLOT * sizeof(T) / 16];
    T *const qs = reinterpret_cast<T *>(qs4);

    const uint32_t tid = threadIdx.x, wave = tid / FM_WAVE;
    const int l = (int)(tid % FM_WAVE);
    const FmBlock blk = fm_block(p, WR);
    const uint32_t b = blk.b, hk = blk.hk, split = blk.split, rows = blk.rows;
    const FaSeq &s = blk.s;
    const uint32_t d = p.d;
    if (rows == 0 || blockIdx.x != 0) return; // the whole block
    const bool vec = p.vec_ok != 0;
    T *const ks = reinterpret_cast<T *>(kv4) + wave * SLOT;
    T *const vs = ks + KT * KP;

    FmRows w;
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq;
    fm_rows_init(w, p, 0, rows, p.group, hk, off, l);

    // The keys the mask leaves to the rows, cut to the split, in 16-key tiles [t0, t1).
    int64_t t0, t1;
    {
        int64_t lo = 0, hi = s.sk;
        if (!p.mm_prefix) {
            if (p.window_left >= 0) lo = fa_max<int64_t>(lo, off - p.window_left);
            if (p.window_right >= 0)
                hi = fa_min<int64_t>(hi, (int64_t)((fa_min<uint32_t>(rows, WR) - 1) / p.group) + off + p.window_right + 1);
        }
        if (p.splits > 1) {
            const int64_t s0 = (int64_t)split * p.tiles_per_split * FA_DEC_TILE;
            lo = fa_max<int64_t>(lo, s0);
            hi = fa_min<int64_t>(hi, s0 + (int64_t)p.tiles_per_split * FA_DEC_TILE);
        }
        t0 = lo / KT;
        t1 = hi > lo ? (hi + KT - 1) / KT : t0;
    }

    // Q (rows past the call's are zeros): into registers, or (FA_MDEC_Q_SMEM) read from shared
    // memory at every tile, which saves DT x FM_QT fragments of registers.
    fm_stage_q<T, DMAX, WR, TQ>(qs, KP, p, blk);
    __syncthreads();
#if !FA_MDEC_Q_SMEM
    fm_frag<T> qf[FM_QT][DT];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int x = 0; x < DT; x++) qf[qt][x] = fm_load_q<T>(qs + qt * 16 * KP + 16 * x, KP, l);
#define FA_MDEC_Q(qt, x) qf[qt][x]
#else
#define FA_MDEC_Q(qt, x) fm_load_q<T>(qs + (qt) * 16 * KP + 16 * (x), KP, l)
#endif

    // Unpaged calls: key j of this sequence and head is at j * row past `base`.
    const bool paged = p.block_table != nullptr;
    const uint64_t kbase = (uint64_t)b * p.k_batch + (uint64_t)s.tok0_k * p.k_row + (uint64_t)hk * p.k_head;
    const uint64_t vbase = (uint64_t)b * p.v_batch + (uint64_t)s.tok0_k * p.v_row + (uint64_t)hk * p.v_head;
    const bool full_d = d == (uint32_t)DMAX && vec;
    // Tile t of K (or of V as it lies) into `dst` by this wave's lanes: asynchronous where
    // whole and aligned, zeros past the keys and past d.
    auto stage = [&](T *dst, const T *src0, uint64_t base, uint64_t bs, uint64_t rs, uint64_t hs, int64_t t) {
        const int64_t j0 = t * KT;
        const bool whole = full_d && !paged && j0 + KT <= (int64_t)s.sk;
#pragma unroll
        for (int n = 0; n < KT * CR / FM_WAVE; n++) {
            const uint32_t x = (uint32_t)l + FM_WAVE * n, row = x / CR, col = (x % CR) * N;
            T *const to = dst + row * KP + col;
            const int64_t j = j0 + row;
            if (whole) {
                fm_cp16(to, src0 + base + (uint64_t)j * rs + col);
            } else if (j < s.sk && col < d) {
                const T *src = src0 + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, bs, rs, hs) + col;
                const uint32_t m = fa_min<uint32_t>(N, d - col);
                if (vec && m == N)
                    fm_cp16(to, src);
                else
                    fm_stage(to, src, (int)m, false);
            } else {
                fm_stage(to, src0, 0, false);
            }
        }
    };
    auto stage_k = [&](int64_t t) { stage(ks, (const T *)p.k, kbase, p.k_batch, p.k_row, p.k_head, t); };
    auto stage_v = [&](int64_t t) {
#if FM_V_ROWMAJOR
        stage(vs, (const T *)p.v, vbase, p.v_batch, p.v_row, p.v_head, t);
#else
        (void)vbase;
        for (uint32_t x = (uint32_t)l; x < (uint32_t)(KT * CR); x += FM_WAVE) {
            const uint32_t row = x / CR, col = (x % CR) * N;
            fm_stage_vt<T>(vs + col * VP + row, VP, p, b, s, t * KT + row, col, hk, vec);
        }
#endif
    };

    fm_acc o[FM_QT][DT];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int x = 0; x < DT; x++) o[qt][x] = fm_zero();

    // Copy groups in flight at the top of an iteration: K(t), V(t). Each wait leaves the latest
    // group pending (fm_cp_wait_1), so a tile's copy overlaps the work on the other matrix.
    const int64_t tw = t0 + wave;
    if (tw < t1) stage_k(tw);
    fm_cp_commit();
    if (tw < t1) stage_v(tw);
    fm_cp_commit();
    for (int64_t t = tw; t < t1; t += NW) {
        fm_cp_wait_1();
        FM_WAVE_SYNC(); // K(t) is in ks for every lane

        // S = Q K^T (16-column steps past d skipped: zeros in Q and K).
        fm_acc sa[FM_QT][1];
#pragma unroll
        for (int qt = 0; qt < FM_QT; qt++) sa[qt][0] = fm_zero();
#pragma unroll
        for (int x = 0; x < DT; x++) {
            if ((uint32_t)(16 * x) >= d) break; // the same for the whole block
            const fm_frag<T> kf = fm_load_k<T>(ks + 16 * x, KP, l);
#pragma unroll
            for (int qt = 0; qt < FM_QT; qt++) sa[qt][0] = fm_mma_s<T>(FA_MDEC_Q(qt, x), kf, sa[qt][0]);
            FM_FENCE();
        }
        FM_WAVE_SYNC(); // every lane has read K(t)
        if (t + NW < t1) stage_k(t + NW);
        fm_cp_commit();

        fm_frag<T> pf[FM_QT][1];
        fm_softmax<T, 1, DT>(p, b, s, t * KT, l, w, sa, pf, o);

        fm_cp_wait_1();
        FM_WAVE_SYNC(); // V(t) is in vs for every lane

        // O += P V.
#pragma unroll
        for (int x = 0; x < DT; x++) {
            if ((uint32_t)(16 * x) >= d) break;
#if FM_V_ROWMAJOR
            const fm_frag<T> vf = fm_load_vr<T>(vs + 16 * x, KP, l);
#else
            const fm_frag<T> vf = fm_load_vt<T>(vs + 16 * x * VP, VP, l);
#endif
#pragma unroll
            for (int qt = 0; qt < FM_QT; qt++) o[qt][x] = fm_mma_o<T>(pf[qt][0], vf, o[qt][x]);
            FM_FENCE();
        }
        FM_WAVE_SYNC(); // every lane has read V(t)
        if (t + NW < t1) stage_v(t + NW);
        fm_cp_commit();
    }
    fm_cp_wait();

    // The merge: waves 1.. publish their state, wave 0 folds it in, in wave order.
    __syncthreads(); // every wave is done with its slots
    float *const red = reinterpret_cast<float *>(kv4);
    if (wave > 0) {
        float *const mine = red + ((size_t)(wave - 1) * FM_WAVE + (size_t)l) * MV;
#pragma unroll
        for (int qt = 0; qt < FM_QT; qt++) {
#pragma unroll
            for (int x = 0; x < DT; x++)
#pragma unroll
                for (int e = 0; e < FM_ACC_N; e++) mine[(qt * DT + x) * FM_ACC_N + e] = o[qt][x][e];
#pragma unroll
            for (int r = 0; r < FM_RQ; r++) {
                mine[FM_QT * DT * FM_ACC_N + 2 * (qt * FM_RQ + r)] = w.m[qt][r];
                mine[FM_QT * DT * FM_ACC_N + 2 * (qt * FM_RQ + r) + 1] = w.lsum[qt][r];
            }
        }
    }
    __syncthreads();
    if (wave != 0) return;
    for (int v = 1; v < NW; v++) {
        const float *const theirs = red + ((size_t)(v - 1) * FM_WAVE + (size_t)l) * MV;
#pragma unroll
        for (int qt = 0; qt < FM_QT; qt++) {
            float ca[FM_RQ], cb[FM_RQ];
#pragma unroll
            for (int r = 0; r < FM_RQ; r++) {
                const int at = FM_QT * DT * FM_ACC_N + 2 * (qt * FM_RQ + r);
                const float mb = theirs[at], lb = theirs[at + 1];
                const float mn = fmaxf(w.m[qt][r], mb);
                ca[r] = w.m[qt][r] == -INFINITY ? 0.0f : exp2f(w.m[qt][r] - mn);
                cb[r] = mb == -INFINITY ? 0.0f : exp2f(mb - mn);
                w.m[qt][r] = mn;
                w.lsum[qt][r] = w.lsum[qt][r] * ca[r] + lb * cb[r];
            }
#pragma unroll
            for (int x = 0; x < DT; x++)
#pragma unroll
                for (int e = 0; e < FM_ACC_N; e++) {
                    const int r = fm_slot(e);
                    o[qt][x][e] = o[qt][x][e] * ca[r] + theirs[(qt * DT + x) * FM_ACC_N + e] * cb[r];
                }
        }
    }
    fm_store<T, DT, TQ>(p, w, o, 0, rows, hk, b, s, split, l);
#undef FA_MDEC_Q
}

#endif // FA_MMA_KERNELS
