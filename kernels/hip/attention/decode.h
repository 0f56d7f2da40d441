// attention/decode.h - part of attention.hip: the decode kernels (fa_dec<R>_*), for calls of at
// most R packed (query, head-in-group) rows: one block per (kv head and split, sequence) takes
// all the rows, so each key and value row is read once for every query head that shares it.
//
// Work split. Keys come in tiles of FA_THREADS (128), one per thread: thread t computes the
// logits of key j0 + t against the R query rows (its key row in 16-byte loads from global
// memory, the queries from shared memory as broadcast float4 reads). The tile's row max and
// row sum go through xor shuffles inside each wave and one shared slot per wave (two barriers a
// tile); P goes to shared memory. For O += P V the threads are DMAX / N column chunks (N
// elements, 16 bytes) times KG key groups: thread (g, c) adds keys g, g + KG, ... of the tile
// into R x N accumulators from one 16-byte load of V each. At the end the key groups' partial
// outputs are added in group order in shared memory (deterministic), and the rows are
// normalised and written as the tile kernels write them (T, or the split workspace).
#pragma once

template <typename T, int DMAX, int R>
__device__ __forceinline__ void fa_decode(const fa_params &p) {
    constexpr int N = FaChunk<T>::N;          // elements per 16-byte load
    constexpr int KT = FA_THREADS;            // keys per tile, one per thread
    constexpr int CT = DMAX / N;              // 16-byte chunks per row at the tier's width
    constexpr int KG = FA_THREADS / CT;       // key groups of O += P V
    constexpr int NW = FA_THREADS / FA_WAVE;  // waves per block
    static_assert(CT * KG == FA_THREADS && KG >= 1 && N % 4 == 0, "decode shape");
    __shared__ float4 qo4[R * DMAX / 4];      // the queries, then the output rows
    __shared__ float ps[R * KT];              // P of the tile
    __shared__ float red[2][R][NW];           // per-wave row max and row sum
    __shared__ float fin[2][R];               // per row: 1 / sum, log2-sum-exp
    float *const qo = reinterpret_cast<float *>(qo4);

    const uint32_t tid = threadIdx.x;
    const uint32_t wave = tid / FA_WAVE;
    const uint32_t b = blockIdx.z, hk = blockIdx.y % p.kv_heads, split = blockIdx.y / p.kv_heads;
    const FaSeq s = fa_seq(p, b);
    const uint32_t G = p.group, d = p.d;
    const uint32_t rows = s.sq * G;
    if (rows == 0 || blockIdx.x != 0) return; // the whole block
    const bool vec = p.vec_ok != 0;
    const T *const q = (const T *)p.q;
    const T *const k = (const T *)p.k;
    const T *const v = (const T *)p.v;
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq;
    const int64_t wl = p.window_left, wr = p.window_right;

    // The queries, zero past d and for rows past the call's.
    for (uint32_t x = tid; x < R * CT; x += FA_THREADS) {
        const uint32_t r = x / CT, col = (x % CT) * N;
        float e[N];
#pragma unroll
        for (int u = 0; u < N; u++) e[u] = 0.0f;
        if (r < rows && col < d) {
            const uint64_t i = r / G, h = (uint64_t)hk * G + r % G;
            fa_load(q + (uint64_t)b * p.q_batch + (s.tok0_q + i) * p.q_row + h * p.q_head + col, vec, e);
        }
#pragma unroll
        for (int u = 0; u < N; u++) qo[r * DMAX + col + u] = e[u];
    }
    int64_t qpos[R];
    float slope[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint32_t rr = (uint32_t)r < rows ? r : rows - 1;
        qpos[r] = (int64_t)(rr / G) + off;
        slope[r] = p.alibi ? p.alibi[hk * G + rr % G] * FA_LOG2E : 0.0f;
    }

    // The key tiles the mask leaves to the rows, cut to the split.
    int64_t t0, t1;
    {
        int64_t lo = 0, hi = s.sk;
        if (!p.mm_prefix) {
            if (wl >= 0) lo = fa_max<int64_t>(lo, off - wl);
            if (wr >= 0) hi = fa_min<int64_t>(hi, (int64_t)((rows - 1) / G) + off + wr + 1);
        }
        t0 = lo / KT;
        t1 = hi > lo ? (hi + KT - 1) / KT : t0;
        if (p.splits > 1) {
            const int64_t s0 = (int64_t)split * p.tiles_per_split;
            t0 = fa_max<int64_t>(t0, s0);
            t1 = fa_min<int64_t>(t1, s0 + (int64_t)p.tiles_per_split);
        }
    }

    const uint32_t g = tid / CT, cc = tid % CT; // O += P V: key group, column chunk
    float m[R], l[R], o[R][N];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int u = 0; u < N; u++) o[r][u] = 0.0f;
    }
    __syncthreads(); // the queries are in shared memory

    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = t * KT;
        // Logits of key j against every row.
        const int64_t j = j0 + tid;
        float x[R];
#pragma unroll
        for (int r = 0; r < R; r++) x[r] = 0.0f;
        if (j < s.sk) {
            const T *kr = k + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.k_batch, p.k_row, p.k_head);
#pragma unroll 2
            for (uint32_t col = 0; col < d; col += N) {
                float e[N];
                fa_load(kr + col, vec, e);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 *qv = qo4 + (r * DMAX + col) / 4;
#pragma unroll
                    for (int u = 0; u < N / 4; u++) {
                        const float4 qq = qv[u];
                        x[r] = fmaf(qq.x, e[4 * u], x[r]);
                        x[r] = fmaf(qq.y, e[4 * u + 1], x[r]);
                        x[r] = fmaf(qq.z, e[4 * u + 2], x[r]);
                        x[r] = fmaf(qq.w, e[4 * u + 3], x[r]);
                    }
                }
            }
        }
        float tmax[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float y = x[r];
            y = p.softcap > 0.0f ? p.softcap * tanhf(y * p.scale / p.softcap) : y * p.scale;
            y *= FA_LOG2E;
            bool keep = (uint32_t)r < rows && j < s.sk;
            if (keep && (wl >= 0 || wr >= 0)) {
                bool in = (wl < 0 || j >= qpos[r] - wl) && (wr < 0 || j <= qpos[r] + wr);
                if (!in && p.mm_prefix) in = fa_mm_allowed(p, b, qpos[r], j);
                keep = in;
            }
            if (p.alibi) y -= slope[r] * fabsf((float)(qpos[r] - j));
            x[r] = keep ? y : -INFINITY;
            tmax[r] = x[r];
#pragma unroll
            for (int mask = FA_WAVE / 2; mask > 0; mask >>= 1) tmax[r] = fmaxf(tmax[r], fa_shfl_xor(tmax[r], mask));
        }
        if (tid % FA_WAVE == 0)
#pragma unroll
            for (int r = 0; r < R; r++) red[0][r][wave] = tmax[r];
        __syncthreads(); // A: the waves' maxima (and the last tile's P is read)
        float corr[R], psum[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float mx = red[0][r][0];
#pragma unroll
            for (int w = 1; w < NW; w++) mx = fmaxf(mx, red[0][r][w]);
            const float mnew = fmaxf(m[r], mx);
            const float mu = mnew == -INFINITY ? 0.0f : mnew;
            corr[r] = exp2f(m[r] - mu);
            m[r] = mnew;
            const float pv = exp2f(x[r] - mu);
            ps[r * KT + tid] = pv;
            psum[r] = pv;
#pragma unroll
            for (int mask = FA_WAVE / 2; mask > 0; mask >>= 1) psum[r] += fa_shfl_xor(psum[r], mask);
        }
        if (tid % FA_WAVE == 0)
#pragma unroll
            for (int r = 0; r < R; r++) red[1][r][wave] = psum[r];
        __syncthreads(); // B: P and the waves' sums
#pragma unroll
        for (int r = 0; r < R; r++) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < NW; w++) sum += red[1][r][w];
            l[r] = l[r] * corr[r] + sum;
#pragma unroll
            for (int u = 0; u < N; u++) o[r][u] *= corr[r];
        }
        const uint32_t col = cc * N;
        if (col < d) {
            for (uint32_t kk = g; kk < KT; kk += KG) {
                const int64_t jj = j0 + kk;
                if (jj >= s.sk) break;
                float e[N];
                fa_load(v + fa_kv_offset(p, b, s.tok0_k, (uint32_t)jj, hk, p.v_batch, p.v_row, p.v_head) + col, vec, e);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float pr = ps[r * KT + kk];
#pragma unroll
                    for (int u = 0; u < N; u++) o[r][u] = fmaf(pr, e[u], o[r][u]);
                }
            }
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
    // Every thread holds the same m and l; thread 0 publishes them by row.
    if (tid == 0)
#pragma unroll
        for (int r = 0; r < R; r++) {
            fin[0][r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            fin[1][r] = l[r] > 0.0f ? m[r] + log2f(l[r]) : -INFINITY;
        }
    __syncthreads();
    for (uint32_t x = tid; x < R * (uint32_t)DMAX; x += FA_THREADS) {
        const uint32_t r = x / DMAX, col = x % DMAX;
        if (r >= rows || col >= d) continue;
        const uint64_t i = r / G, h = (uint64_t)hk * G + r % G;
        const float val = qo[x] * fin[0][r];
        if (p.splits > 1) {
            const uint64_t row = ((uint64_t)split * p.total_q + s.ws_tok0 + i) * p.heads + h;
            p.o_part[row * d + col] = val;
            if (col == 0) p.lse_part[row] = fin[1][r];
        } else {
            T *const op = (T *)p.o + (uint64_t)b * p.o_batch + (s.tok0_q + i) * p.o_row + h * p.o_head;
            op[col] = fa_from<T>(val);
        }
    }
}
