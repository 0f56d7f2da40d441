// attention/decode.h - part of attention.hip: the decode kernels (fa_dec<R>_*), for calls of at
// most R packed (query, head-in-group) rows: one block per (kv head and split, sequence) takes
// all the rows, so each key and value row is read once for every query head that shares it.
//
// Built to keep memory busy: decoding reads the whole KV cache for a handful of rows, so the
// kernel is a stream of K and V through shared memory with little arithmetic per byte.
//   - Keys come in sub-tiles of KT keys, FA_DEC_BYTES (8 KiB; 4 KiB on AMD) of K and as much
//     of V: every thread loads 4 + 4 (2 + 2) of the sub-tile's 16-byte chunks, coalesced
//     (consecutive threads read consecutive chunks of a row), into registers. The loads of
//     sub-tile n + 1 are issued before sub-tile n is computed, so they are in flight while it
//     is (software pipelining through registers), and stored to shared memory at the top of
//     the next step.
//   - S = Q K^T: thread t takes key t % KT and a part t / KT of the row, 4 (2) chunks for every
//     shape, against the R rows of Q in shared memory (broadcast reads); the parts go to
//     shared memory.
//   - Softmax: wave w owns rows w, w + NW, ...: its lanes add a key's parts, apply scale,
//     softcap, ALiBi and the mask, and take the row max and sum by xor shuffles; the row's
//     running max and sum live in the owning wave's registers; P and the rescale factor go to
//     shared memory.
//   - O += P V: thread (g, c) owns 16-byte column chunk c of every row and adds keys g, g + KG,
//     ... of the sub-tile (4, or 2) from shared memory.
// Three barriers a sub-tile. Shared-memory rows are padded by one chunk so the lanes reading
// different rows at the same column hit different banks. At the end the key groups' partial
// outputs are added in group order in shared memory (deterministic), and the rows are
// normalised and written as the tile kernels write them (T, or the split workspace).
//
// Splits count in tiles of FA_DEC_TILE (128) keys (the host's DECODE_KEY_TILE), f32 ones in
// tiles of FA_DEC_TILE_F32 (32, DECODE_KEY_TILE_F32): an f32 decode (the GGUF models' f32 KV
// cache) over a short or middling context then still spreads over many blocks. Sub-tiles of
// KT keys divide them (KT <= 32 for f32 at every tier on every target).
#pragma once

#define FA_DEC_TILE 128
#define FA_DEC_TILE_F32 32
// Bytes of K (and of V) a sub-tile: 8 KiB on the CUDA path (228 KiB of shared memory an SM:
// about 9 blocks), 4 KiB on AMD (64 KiB of LDS a compute unit: 5 blocks of about 12 KiB).
#ifndef FA_DEC_BYTES
#if defined(__HIP_DEVICE_COMPILE__)
#define FA_DEC_BYTES 4096
#else
#define FA_DEC_BYTES 8192
#endif
#endif

// A chunk of 16 bytes of T, as raw bits: one 16-byte load when `vec`, else element loads.
template <typename T> __device__ __forceinline__ fa_vec fa_load_raw(const T *p, bool vec) {
    if (vec) return *reinterpret_cast<const fa_vec *>(p);
    FaChunk<T> c;
#pragma unroll
    for (int e = 0; e < FaChunk<T>::N; e++) c.e[e] = p[e];
    fa_vec v;
    __builtin_memcpy(&v, &c, sizeof(v));
    return v;
}

template <typename T> __device__ __forceinline__ void fa_unpack(const fa_vec &v, float (&out)[FaChunk<T>::N]) {
    FaChunk<T> c;
    __builtin_memcpy(&c, &v, sizeof(c));
#pragma unroll
    for (int e = 0; e < FaChunk<T>::N; e++) out[e] = fa_to(c.e[e]);
}

// What the decode kernels (fa_dec*, and fa_sdec* in attention/short_dec.h) share: the queries
// staged in f32, the key range of a block, a logit, a row's online softmax over a wave, the
// output store.

// The block's R packed rows of q (kv head hk of sequence b) into qo (R x DMAX floats), zero
// past d and for rows past the call's `rows`.
template <typename T, int DMAX, int R, typename TQ>
__device__ __forceinline__ void fa_dec_stage_q(float *qo, const fa_params &p, const FaSeq &s, uint32_t b,
                                               uint32_t hk, uint32_t rows, bool vec) {
    constexpr int N = FaChunk<T>::N;
    constexpr int CT = DMAX / N;
    const uint32_t G = p.group, d = p.d;
    for (uint32_t x = threadIdx.x; x < (uint32_t)(R * CT); x += FA_THREADS) {
        const uint32_t r = x / CT, col = (x % CT) * N;
        float e[N];
#pragma unroll
        for (int u = 0; u < N; u++) e[u] = 0.0f;
        if (r < rows && col < d) {
            const uint64_t i = r / G, h = (uint64_t)hk * G + r % G;
            const TQ *at = (const TQ *)p.q + (uint64_t)b * p.q_batch + (s.tok0_q + i) * p.q_row + h * p.q_head + col;
            if constexpr (sizeof(TQ) == sizeof(T))
                fa_load(at, vec, e);
            else
                fa_load_f32<N>(reinterpret_cast<const float *>(at), vec, e);
        }
#pragma unroll
        for (int u = 0; u < N; u++) qo[r * DMAX + col + u] = e[u];
    }
}

// The keys [lo, hi) the mask leaves to the block's `rows` packed rows, cut to split `split` of
// p.tiles_per_split tiles of `tile` keys.
__device__ __forceinline__ void fa_dec_keys(const fa_params &p, const FaSeq &s, uint32_t rows, uint32_t split,
                                            int64_t tile, int64_t &lo, int64_t &hi) {
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq;
    lo = 0;
    hi = s.sk;
    if (!p.mm_prefix) {
        if (p.window_left >= 0) lo = fa_max<int64_t>(lo, off - p.window_left);
        if (p.window_right >= 0) hi = fa_min<int64_t>(hi, (int64_t)((rows - 1) / p.group) + off + p.window_right + 1);
    }
    if (p.splits > 1) {
        const int64_t s0 = (int64_t)split * p.tiles_per_split * tile;
        lo = fa_max<int64_t>(lo, s0);
        hi = fa_min<int64_t>(hi, s0 + (int64_t)p.tiles_per_split * tile);
    }
}

// The base-2 logit of q.k = `dot` for key j of a row at key position qpos with ALiBi slope
// `slope` (log2 units): scale, softcap, ALiBi; -inf where the mask drops the key.
__device__ __forceinline__ float fa_dec_logit(const fa_params &p, uint32_t b, float dot, int64_t j, int64_t qpos,
                                              float slope) {
    const int64_t wl = p.window_left, wr = p.window_right;
    float y = p.softcap > 0.0f ? p.softcap * tanhf(dot * p.scale / p.softcap) : dot * p.scale;
    y *= FA_LOG2E;
    bool keep = true;
    if (wl >= 0 || wr >= 0) {
        keep = (wl < 0 || j >= qpos - wl) && (wr < 0 || j <= qpos + wr);
        if (!keep && p.mm_prefix) keep = fa_mm_allowed(p, b, qpos, j);
    }
    if (p.alibi) y -= slope * fabsf((float)(qpos - j));
    return keep ? y : -INFINITY;
}

// One row's online softmax step over KT keys, by the lanes of one wave: lane l holds the
// logits of keys l + FA_WAVE n in xs (-inf for none). Takes the row max and sum over the wave,
// writes P (base 2) to prow[kk] for kk < KT, updates the running max m and sum l, and returns
// the rescale of the row's output.
template <int LK, int KT>
__device__ __forceinline__ float fa_dec_softmax(const float (&xs)[LK], float *prow, float &m, float &l,
                                                uint32_t lane) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < LK; n++) mx = fmaxf(mx, xs[n]);
#pragma unroll
    for (int mask = FA_WAVE / 2; mask > 0; mask >>= 1) mx = fmaxf(mx, fa_shfl_xor(mx, mask));
    const float mnew = fmaxf(m, mx);
    const float mu = mnew == -INFINITY ? 0.0f : mnew;
    const float corr = exp2f(m - mu);
    m = mnew;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < LK; n++) {
        const uint32_t kk = lane + FA_WAVE * n;
        const float pv = exp2f(xs[n] - mu);
        if (kk < (uint32_t)KT) prow[kk] = pv;
        sum += pv;
    }
#pragma unroll
    for (int mask = FA_WAVE / 2; mask > 0; mask >>= 1) sum += fa_shfl_xor(sum, mask);
    l = l * corr + sum;
    return corr;
}

// Writes output element x (row x / DMAX, column x % DMAX) of the block's rows for x = tid,
// tid + FA_THREADS, ...: val(x, r) times fin[0][r] (1 / sum), into o as TQ, or with several
// splits into the split workspace with the row's log2-sum-exp fin[1][r].
template <int R, int DMAX, typename TQ, typename F>
__device__ __forceinline__ void fa_dec_store(const fa_params &p, const FaSeq &s, uint32_t b, uint32_t hk,
                                             uint32_t split, uint32_t rows, const float (&fin)[2][R], F val) {
    const uint32_t G = p.group, d = p.d;
    for (uint32_t x = threadIdx.x; x < (uint32_t)(R * DMAX); x += FA_THREADS) {
        const uint32_t r = x / DMAX, col = x % DMAX;
        if (r >= rows || col >= d) continue;
        const uint64_t i = r / G, h = (uint64_t)hk * G + r % G;
        const float v = val(x, r) * fin[0][r];
        if (p.splits > 1) {
            const uint64_t row = ((uint64_t)split * p.total_q + s.ws_tok0 + i) * p.heads + h;
            p.o_part[row * d + col] = v;
            if (col == 0) p.lse_part[row] = fin[1][r];
        } else {
            TQ *const op = (TQ *)p.o + (uint64_t)b * p.o_batch + (s.tok0_q + i) * p.o_row + h * p.o_head;
            op[col] = fa_from<TQ>(v);
        }
    }
}

// TQ: q's and the output's type (T, or f32 over an f16 cache: the mixed fa_dec*_f32h_*).
template <typename T, int DMAX, int R, typename TQ = T>
__device__ __forceinline__ void fa_decode(const fa_params &p) {
    constexpr int N = FaChunk<T>::N;                             // elements per chunk
    constexpr int CT = DMAX / N;                                 // chunks per row at the tier
    constexpr int KT = FA_DEC_BYTES / (DMAX * (int)sizeof(T));   // keys per sub-tile
    constexpr int NL = KT * CT / FA_THREADS;                     // chunks a thread loads, per matrix
    constexpr int NP = FA_THREADS / KT;                          // parts of a row in S = Q K^T
    constexpr int PC = CT / NP;                                  // chunks per part
    constexpr int KG = FA_THREADS / CT;                          // key groups of O += P V
    constexpr int NW = FA_THREADS / FA_WAVE;                     // waves per block
    constexpr int RW = R / NW;                                   // rows per wave in the softmax
    constexpr int LK = (KT + FA_WAVE - 1) / FA_WAVE;             // keys per lane in the softmax
    constexpr int TILE = sizeof(T) == 4 ? FA_DEC_TILE_F32 : FA_DEC_TILE; // keys per split unit
    static_assert(KT >= 1 && TILE % KT == 0 && NL * FA_THREADS == KT * CT, "decode sub-tile");
    static_assert(NP * KT == FA_THREADS && PC * NP == CT && KG * CT == FA_THREADS, "decode split");
    static_assert(RW * NW == R && N % 4 == 0, "decode rows");
    __shared__ fa_vec ks[KT][CT + 1];
    __shared__ fa_vec vs[KT][CT + 1];
    __shared__ float4 qo4[R * DMAX / 4];      // the queries, then the output rows
    __shared__ float sp[NP][R][KT];           // parts of S
    __shared__ float ps[R][KT];               // P of the sub-tile
    __shared__ float cs[R];                   // per row: the rescale of O for this sub-tile
    __shared__ float fin[2][R];               // per row: 1 / sum, log2-sum-exp
    float *const qo = reinterpret_cast<float *>(qo4);

    const uint32_t tid = threadIdx.x;
    const uint32_t wave = tid / FA_WAVE, lane = tid % FA_WAVE;
    const uint32_t b = blockIdx.z, hk = blockIdx.y % p.kv_heads, split = blockIdx.y / p.kv_heads;
    const FaSeq s = fa_seq(p, b);
    const uint32_t G = p.group, d = p.d;
    const uint32_t rows = s.sq * G;
    if (rows == 0 || blockIdx.x != 0) return; // the whole block
    const bool vec = p.vec_ok != 0;
    const T *const k = (const T *)p.k;
    const T *const v = (const T *)p.v;
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq;

    // The queries (read after barrier B), and the keys the mask leaves to the rows, cut to the
    // split, in whole sub-tiles.
    fa_dec_stage_q<T, DMAX, R, TQ>(qo, p, s, b, hk, rows, vec);
    int64_t j_lo, j_hi;
    fa_dec_keys(p, s, rows, split, TILE, j_lo, j_hi);
    j_lo = j_lo / KT * KT;

    // Sub-tile loads: chunk x = tid + FA_THREADS n is column chunk x % CT of key x / CT; zero
    // past d and past the keys of the block.
    fa_vec kr[NL], vr[NL];
    auto fetch = [&](int64_t j0) {
#pragma unroll
        for (int n = 0; n < NL; n++) {
            const uint32_t x = tid + FA_THREADS * n, kk = x / CT, col = (x % CT) * N;
            const int64_t j = j0 + kk;
            fa_vec a = {0u, 0u, 0u, 0u}, c = {0u, 0u, 0u, 0u};
            if (j < j_hi && col < d) {
                a = fa_load_raw(k + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.k_batch, p.k_row, p.k_head) + col, vec);
                c = fa_load_raw(v + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.v_batch, p.v_row, p.v_head) + col, vec);
            }
            kr[n] = a;
            vr[n] = c;
        }
    };

    int64_t qpos[RW];
    float slope[RW], m[RW], l[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) {
        const uint32_t r = wave + NW * i;
        const uint32_t rr = r < rows ? r : rows - 1;
        qpos[i] = (int64_t)(rr / G) + off;
        slope[i] = p.alibi ? p.alibi[hk * G + rr % G] * FA_LOG2E : 0.0f;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const uint32_t g = tid / CT, cc = tid % CT; // O += P V: key group, column chunk
    const uint32_t sj = tid % KT, sc = tid / KT; // S = Q K^T: key, part
    float o[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < N; u++) o[r][u] = 0.0f;

    if (j_lo < j_hi) fetch(j_lo);
    for (int64_t j0 = j_lo; j0 < j_hi; j0 += KT) {
        // No barrier before these stores: every thread passed D after the last reads of ks
        // (in S) and of ps and cs, and in O += P V each thread reads only the V chunks it
        // stores itself (chunk tid + FA_THREADS n is key g + KG n, column chunk cc).
#pragma unroll
        for (int n = 0; n < NL; n++) {
            const uint32_t x = tid + FA_THREADS * n;
            ks[x / CT][x % CT] = kr[n];
            vs[x / CT][x % CT] = vr[n];
        }
        if (j0 + KT < j_hi) fetch(j0 + KT); // in flight while this sub-tile is computed
        __syncthreads(); // B: the sub-tile is in shared memory (and Q, the first time)

        // S = Q K^T, part sc of key sj.
        {
            float x[R];
#pragma unroll
            for (int r = 0; r < R; r++) x[r] = 0.0f;
#pragma unroll
            for (int n = 0; n < PC; n++) {
                const uint32_t ch = sc * PC + n;
                float e[N];
                fa_unpack<T>(ks[sj][ch], e);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 *qv = qo4 + (r * DMAX + ch * N) / 4;
#pragma unroll
                    for (int u = 0; u < N / 4; u++) {
                        const float4 qq = qv[u];
                        x[r] = fmaf(qq.x, e[4 * u], x[r]);
                        x[r] = fmaf(qq.y, e[4 * u + 1], x[r]);
                        x[r] = fmaf(qq.z, e[4 * u + 2], x[r]);
                        x[r] = fmaf(qq.w, e[4 * u + 3], x[r]);
                    }
                }
                FA_FENCE();
            }
#pragma unroll
            for (int r = 0; r < R; r++) sp[sc][r][sj] = x[r];
        }
        __syncthreads(); // C: the parts of S

        // Softmax of the rows this wave owns.
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const uint32_t r = wave + NW * i;
            float xs[LK];
#pragma unroll
            for (int n = 0; n < LK; n++) {
                const uint32_t kk = lane + FA_WAVE * n;
                const int64_t j = j0 + kk;
                xs[n] = -INFINITY;
                if (kk < (uint32_t)KT && r < rows && j < j_hi) {
                    float acc = 0.0f;
#pragma unroll
                    for (int c = 0; c < NP; c++) acc += sp[c][r][kk];
                    xs[n] = fa_dec_logit(p, b, acc, j, qpos[i], slope[i]);
                }
            }
            const float corr = fa_dec_softmax<LK, KT>(xs, ps[r], m[i], l[i], lane);
            if (lane == 0) cs[r] = corr;
        }
        __syncthreads(); // D: P and the rescale factors

        // O += P V.
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float c = cs[r];
#pragma unroll
            for (int u = 0; u < N; u++) o[r][u] *= c;
        }
#pragma unroll
        for (int n = 0; n < KT / KG; n++) {
            const uint32_t kk = g + KG * n;
            float e[N];
            fa_unpack<T>(vs[kk][cc], e);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float pr = ps[r][kk];
#pragma unroll
                for (int u = 0; u < N; u++) o[r][u] = fmaf(pr, e[u], o[r][u]);
            }
            FA_FENCE();
        }
    }

    // The key groups' parts, added in group order.
    for (uint32_t gg = 0; gg < (uint32_t)KG; gg++) {
        __syncthreads(); // the previous group's adds (or every read of the queries) are done
        if (g == gg)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < N; u++) {
                    float *dst = &qo[r * DMAX + cc * N + u];
                    *dst = gg == 0 ? o[r][u] : *dst + o[r][u];
                }
    }
    // The owning waves publish each row's 1 / sum and log2-sum-exp.
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const uint32_t r = wave + NW * i;
            fin[0][r] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            fin[1][r] = l[i] > 0.0f ? m[i] + log2f(l[i]) : -INFINITY;
        }
    __syncthreads();
    fa_dec_store<R, DMAX, TQ>(p, s, b, hk, split, rows, fin, [&](uint32_t x, uint32_t) { return qo[x]; });
}
