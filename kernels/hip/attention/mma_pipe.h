// attention/mma_pipe.h - part of attention.hip: the pipelined matrix-unit prefill tile
// (fa_mma_<T>_<DMAX> for DMAX 64 and 128), where a whole key tile and its values fit in shared
// memory beside each other. The contract and the row/key split are fa_mma_chunked's
// (attention/mma.h): 64 packed rows a block, 16 FM_QT a wave, tiles of FA_BN (64) keys.
//
// What it adds:
//   - Q lives in registers (DT x FM_QT fragments a lane), loaded once through shared memory.
//   - K and V each have a buffer of a whole tile (FA_BN x DMAX, rows padded by 8 elements), and
//     their loads overlap the matrix work, flash-attention-2 style, two barriers a tile:
//       wait K(t), barrier; start V(t); S = Q K(t)^T and the softmax;
//       wait V(t), barrier; start K(t + 1); O += P V(t).
//     On the CUDA path the loads are cp.async (mma/frag.h's fm_cp16) and the fragments come
//     by ldmatrix, V read as it lies by the transposing ldmatrix; on AMD the copies are plain
//     loads and stores (the overlap is between the blocks of a compute unit) and V is staged
//     transposed for fm_load_vt.
//   LDS: 2 x 64 x (DMAX + 8) elements: 18 KiB (64), 34 KiB (128).
#pragma once

#if defined(FA_MMA_KERNELS)

template <typename T, int DMAX, typename TQ = T> __device__ __forceinline__ void fa_mma_pipe(const fa_params &p) {
    constexpr int NW = FA_THREADS / FM_WAVE; // waves
    constexpr int WR = 16 * FM_QT;           // rows a wave
    constexpr int BM = NW * WR;              // rows a block
    constexpr int KP = DMAX + 8;             // row pitch of Q, K (and V as it lies), elements
    constexpr int NT = FA_BN / 16;           // 16-key tiles of S
    constexpr int DT = DMAX / 16;            // 16-column tiles of Q and O
    constexpr int N = FaChunk<T>::N;
    constexpr int CR = DMAX / N;             // 16-byte chunks a row
#if FM_V_ROWMAJOR
    constexpr int VN = FA_BN * KP;
#else
    constexpr int VP = FA_BN + 8; // V^T's row pitch
    constexpr int VN = DMAX * VP;
#endif
    static_assert(BM == 64 && BM == FA_BN && N == 8 && DMAX <= 128 && DMAX % 16 == 0, "pipelined tile shape");
    __shared__ fa_vec ks4[FA_BN * KP * sizeof(T) / 16];
    __shared__ fa_vec vs4[VN * sizeof(T) / 16];
    T *const ks = reinterpret_cast<T *>(ks4);
    T *const vs = reinterpret_cast<T *>(vs4);

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

    // Q through K's buffer (BM == FA_BN rows) into registers.
    fm_stage_q<T, DMAX, BM, TQ>(ks, KP, p, blk);
    __syncthreads();
    fm_frag<T> qf[FM_QT][DT];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int x = 0; x < DT; x++) qf[qt][x] = fm_load_q<T>(ks + (wave * WR + qt * 16) * KP + 16 * x, KP, l);
    __syncthreads(); // every wave has its Q before K's first tile lands there

    // Row `row` of a tile of K (or of V as it lies) into `dst`: asynchronous where whole and
    // aligned, zeros past the keys and past d.
    auto stage = [&](T *dst, const T *base, uint64_t bs, uint64_t rs, uint64_t hs, int64_t j0) {
        for (uint32_t x = tid; x < FA_BN * CR; x += FA_THREADS) {
            const uint32_t row = x / CR, col = (x % CR) * N;
            const int64_t j = j0 + row;
            T *const to = dst + row * KP + col;
            if (j < s.sk && col < d) {
                const T *src = base + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, bs, rs, hs) + col;
                const uint32_t n = fa_min<uint32_t>(N, d - col);
                if (vec && n == N)
                    fm_cp16(to, src);
                else
                    fm_stage(to, src, (int)n, false);
            } else {
                fm_stage(to, base, 0, false);
            }
        }
    };
    auto stage_v = [&](int64_t j0) {
#if FM_V_ROWMAJOR
        stage(vs, (const T *)p.v, p.v_batch, p.v_row, p.v_head, j0);
#else
        for (uint32_t x = tid; x < FA_BN * CR; x += FA_THREADS) {
            const uint32_t row = x / CR, col = (x % CR) * N;
            fm_stage_vt<T>(vs + col * VP + row, VP, p, b, s, j0 + row, col, hk, vec);
        }
#endif
    };

    fm_acc o[FM_QT][DT];
#pragma unroll
    for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
        for (int x = 0; x < DT; x++) o[qt][x] = fm_zero();

    if (t0 < t1) stage(ks, k, p.k_batch, p.k_row, p.k_head, t0 * FA_BN);
    fm_cp_commit();
    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = t * FA_BN;
        fm_cp_wait();
        __syncthreads(); // K(t) is in ks; every wave is done with V(t - 1)
        stage_v(j0);
        fm_cp_commit();

        // S = Q K^T (16-column steps past d skipped: zeros in Q and K).
        fm_acc sa[FM_QT][NT];
#pragma unroll
        for (int qt = 0; qt < FM_QT; qt++)
#pragma unroll
            for (int kt = 0; kt < NT; kt++) sa[qt][kt] = fm_zero();
#pragma unroll
        for (int x = 0; x < DT; x++) {
            if ((uint32_t)(16 * x) >= d) break; // the same for the whole block
#pragma unroll
            for (int kt = 0; kt < NT; kt++) {
                const fm_frag<T> kf = fm_load_k<T>(ks + kt * 16 * KP + 16 * x, KP, l);
#pragma unroll
                for (int qt = 0; qt < FM_QT; qt++) sa[qt][kt] = fm_mma_s<T>(qf[qt][x], kf, sa[qt][kt]);
            }
            FM_FENCE();
        }
        fm_frag<T> pf[FM_QT][NT];
        fm_softmax<T, NT, DT>(p, b, s, j0, l, w, sa, pf, o);

        fm_cp_wait();
        __syncthreads(); // V(t) is in vs; every wave is done with K(t)
        if (t + 1 < t1) stage(ks, k, p.k_batch, p.k_row, p.k_head, j0 + FA_BN);
        fm_cp_commit();

        // O += P V.
#pragma unroll
        for (int x = 0; x < DT; x++) {
            if ((uint32_t)(16 * x) >= d) break;
#pragma unroll
            for (int kt = 0; kt < NT; kt++) {
#if FM_V_ROWMAJOR
                const fm_frag<T> vf = fm_load_vr<T>(vs + kt * 16 * KP + 16 * x, KP, l);
#else
                const fm_frag<T> vf = fm_load_vt<T>(vs + 16 * x * VP + kt * 16, VP, l);
#endif
#pragma unroll
                for (int qt = 0; qt < FM_QT; qt++) o[qt][x] = fm_mma_o<T>(pf[qt][kt], vf, o[qt][x]);
            }
            FM_FENCE();
        }
    }
    fm_store<T, DT, TQ>(p, w, o, r0 + wave * WR, rows, hk, b, s, split, l);
}

#endif // FA_MMA_KERNELS
