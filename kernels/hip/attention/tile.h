// attention/tile.h - part of attention.hip: the FMA tile kernel (fa_fwd_*, fa_dec_*), one
// block per (query-row tile, kv head and split, sequence); see attention.hip's header.
#pragma once

template <typename T, int DMAX, int BM, int RS>
__device__ __forceinline__ void fa_tile(const fa_params &p) {
    constexpr int RG = BM / RS;         // row groups
    constexpr int CG = FA_THREADS / RG; // lanes per row group
    constexpr int CS = FA_BN / CG;      // keys per thread
    constexpr int OC = DMAX / CG;       // output columns per thread
    constexpr int VK = 4096 / DMAX;     // rows of V per shared chunk (16 KB of f32)
    constexpr int N = FaChunk<T>::N;    // elements per 16-byte load
    constexpr int QS = FA_DC + 1;       // row pitch of the Q and K chunks (no bank conflicts)
    constexpr int PS = FA_BN + 1;       // row pitch of P
    constexpr int SA = (BM + FA_BN) * QS > VK * DMAX ? (BM + FA_BN) * QS : VK * DMAX;
    static_assert(RG * RS == BM && CG * RG == FA_THREADS && CG <= 32 && CS * CG == FA_BN &&
                      OC * CG == DMAX && FA_BN % VK == 0 && FA_DC % N == 0 && DMAX % N == 0,
                  "tile shape");
    __shared__ float sa[SA];      // the Q and K chunks of S, then the V chunks of O
    __shared__ float sp[BM * PS]; // P of the key tile
    float *const qs = sa;
    float *const ks = sa + BM * QS;

    const uint32_t tid = threadIdx.x, rg = tid / CG, c = tid % CG;
    const uint32_t b = blockIdx.z, hk = blockIdx.y % p.kv_heads, split = blockIdx.y / p.kv_heads;
    const FaSeq s = fa_seq(p, b);
    const uint32_t G = p.group, d = p.d;
    const uint64_t rows = (uint64_t)s.sq * G;
    const uint64_t r0 = (uint64_t)blockIdx.x * BM;
    if (r0 >= rows) return; // the whole block: no barrier is skipped by part of it
    const bool vec = p.vec_ok != 0;
    const T *const q = (const T *)p.q;
    const T *const k = (const T *)p.k;
    const T *const v = (const T *)p.v;
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq; // key position of query 0
    const int64_t wl = p.window_left, wr = p.window_right;

    // This thread's rows: a row past the sequence computes from its last row, never written.
    int64_t qpos[RS];
    float slope[RS];
    bool live[RS];
#pragma unroll
    for (int r = 0; r < RS; r++) {
        const uint64_t R0 = r0 + rg * RS + r;
        live[r] = R0 < rows;
        const uint64_t R = live[r] ? R0 : rows - 1;
        qpos[r] = (int64_t)(R / G) + off;
        slope[r] = p.alibi ? p.alibi[hk * G + (uint32_t)(R % G)] * FA_LOG2E : 0.0f;
    }

    // The key tiles the mask leaves to the block's rows, cut to its split.
    int64_t t0, t1;
    fa_key_tiles(p, s, r0, BM, rows, split, t0, t1);

    float m[RS], l[RS], o[RS][OC];
#pragma unroll
    for (int r = 0; r < RS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int x = 0; x < OC; x++) o[r][x] = 0.0f;
    }

    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = t * FA_BN;
        // S = Q K^T over the head dim, FA_DC at a time (zeros past d).
        float acc[RS][CS];
#pragma unroll
        for (int r = 0; r < RS; r++)
#pragma unroll
            for (int n = 0; n < CS; n++) acc[r][n] = 0.0f;
#pragma unroll 1
        for (uint32_t dc = 0; dc < d; dc += FA_DC) {
            __syncthreads(); // the previous chunk (or V chunk) is no longer read
            for (uint32_t x = tid; x < BM * (FA_DC / N); x += FA_THREADS) {
                const uint32_t row = x / (FA_DC / N), col = (x % (FA_DC / N)) * N;
                float e[N];
#pragma unroll
                for (int u = 0; u < N; u++) e[u] = 0.0f;
                const uint64_t R = r0 + row;
                if (R < rows && dc + col < d) {
                    const uint64_t i = R / G, h = (uint64_t)hk * G + R % G;
                    fa_load(q + (uint64_t)b * p.q_batch + (s.tok0_q + i) * p.q_row + h * p.q_head + dc + col,
                            vec, e);
                }
#pragma unroll
                for (int u = 0; u < N; u++) qs[row * QS + col + u] = e[u];
            }
            for (uint32_t x = tid; x < FA_BN * (FA_DC / N); x += FA_THREADS) {
                const uint32_t row = x / (FA_DC / N), col = (x % (FA_DC / N)) * N;
                float e[N];
#pragma unroll
                for (int u = 0; u < N; u++) e[u] = 0.0f;
                const int64_t j = j0 + row;
                if (j < s.sk && dc + col < d)
                    fa_load(k + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.k_batch, p.k_row, p.k_head) + dc + col,
                            vec, e);
#pragma unroll
                for (int u = 0; u < N; u++) ks[row * QS + col + u] = e[u];
            }
            __syncthreads();
#pragma unroll 4
            for (int dd = 0; dd < FA_DC; dd++) {
                float qv[RS], kv[CS];
#pragma unroll
                for (int r = 0; r < RS; r++) qv[r] = qs[(rg * RS + r) * QS + dd];
#pragma unroll
                for (int n = 0; n < CS; n++) kv[n] = ks[(c + CG * n) * QS + dd];
#pragma unroll
                for (int r = 0; r < RS; r++)
#pragma unroll
                    for (int n = 0; n < CS; n++) acc[r][n] = fmaf(qv[r], kv[n], acc[r][n]);
            }
        }

        // Logits (log2 units), the mask, and the online softmax.
        float tmax[RS];
#pragma unroll
        for (int r = 0; r < RS; r++) {
            tmax[r] = -INFINITY;
#pragma unroll
            for (int n = 0; n < CS; n++) {
                const int64_t j = j0 + c + CG * n;
                float x = acc[r][n];
                x = p.softcap > 0.0f ? p.softcap * tanhf(x * p.scale / p.softcap) : x * p.scale;
                x *= FA_LOG2E;
                bool keep = live[r] && j < s.sk;
                if (keep && (wl >= 0 || wr >= 0)) {
                    bool in = (wl < 0 || j >= qpos[r] - wl) && (wr < 0 || j <= qpos[r] + wr);
                    if (!in && p.mm_prefix) in = fa_mm_allowed(p, b, qpos[r], j);
                    keep = in;
                }
                if (p.alibi) x -= slope[r] * fabsf((float)(qpos[r] - j));
                acc[r][n] = keep ? x : -INFINITY;
                tmax[r] = fmaxf(tmax[r], acc[r][n]);
            }
        }
#pragma unroll
        for (int r = 0; r < RS; r++)
#pragma unroll
            for (int mask = CG / 2; mask > 0; mask >>= 1) tmax[r] = fmaxf(tmax[r], fa_shfl_xor(tmax[r], mask));
        float rsum[RS], corr[RS];
#pragma unroll
        for (int r = 0; r < RS; r++) {
            const float mnew = fmaxf(m[r], tmax[r]);
            const float mu = mnew == -INFINITY ? 0.0f : mnew;
            corr[r] = exp2f(m[r] - mu);
            m[r] = mnew;
            rsum[r] = 0.0f;
#pragma unroll
            for (int n = 0; n < CS; n++) {
                const float pv = exp2f(acc[r][n] - mu);
                rsum[r] += pv;
                sp[(rg * RS + r) * PS + c + CG * n] = pv;
            }
        }
#pragma unroll
        for (int r = 0; r < RS; r++) {
#pragma unroll
            for (int mask = CG / 2; mask > 0; mask >>= 1) rsum[r] += fa_shfl_xor(rsum[r], mask);
            l[r] = l[r] * corr[r] + rsum[r];
#pragma unroll
            for (int x = 0; x < OC; x++) o[r][x] *= corr[r];
        }

        // O += P V, VK rows of V at a time (zeros past the keys and past d).
#pragma unroll 1
        for (int kc = 0; kc < FA_BN; kc += VK) {
            if (j0 + kc >= s.sk) break; // the same for the whole block
            __syncthreads();            // P is written; S's chunks (or the last V chunk) are read
            for (uint32_t x = tid; x < VK * (DMAX / N); x += FA_THREADS) {
                const uint32_t row = x / (DMAX / N), col = (x % (DMAX / N)) * N;
                float e[N];
#pragma unroll
                for (int u = 0; u < N; u++) e[u] = 0.0f;
                const int64_t j = j0 + kc + row;
                if (j < s.sk && col < d)
                    fa_load(v + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.v_batch, p.v_row, p.v_head) + col,
                            vec, e);
#pragma unroll
                for (int u = 0; u < N; u++) sa[row * DMAX + col + u] = e[u];
            }
            __syncthreads();
#pragma unroll 4
            for (int kk = 0; kk < VK; kk++) {
                float pr[RS];
#pragma unroll
                for (int r = 0; r < RS; r++) pr[r] = sp[(rg * RS + r) * PS + kc + kk];
#pragma unroll
                for (int x = 0; x < OC; x++) {
                    const float vv = sa[kk * DMAX + c + CG * x];
#pragma unroll
                    for (int r = 0; r < RS; r++) o[r][x] = fmaf(pr[r], vv, o[r][x]);
                }
            }
        }
    }

    // The rows' outputs: in T (one split), or normalised partials and log2-sum-exps.
#pragma unroll
    for (int r = 0; r < RS; r++) {
        if (!live[r]) continue;
        const uint64_t R = r0 + rg * RS + r;
        const uint64_t i = R / G, h = (uint64_t)hk * G + R % G;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        if (p.splits > 1) {
            const uint64_t row = ((uint64_t)split * p.total_q + s.ws_tok0 + i) * p.heads + h;
            float *const op = p.o_part + row * d;
#pragma unroll
            for (int x = 0; x < OC; x++) {
                const uint32_t col = c + CG * x;
                if (col < d) op[col] = o[r][x] * inv;
            }
            if (c == 0) p.lse_part[row] = l[r] > 0.0f ? m[r] + log2f(l[r]) : -INFINITY;
        } else {
            T *const op = (T *)p.o + (uint64_t)b * p.o_batch + (s.tok0_q + i) * p.o_row + h * p.o_head;
#pragma unroll
            for (int x = 0; x < OC; x++) {
                const uint32_t col = c + CG * x;
                if (col < d) op[col] = fa_from<T>(o[r][x] * inv);
            }
        }
    }
}
