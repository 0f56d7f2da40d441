// attention/short_dec.h - part of attention.hip: the short decode kernels (fa_sdec<R>_*), the
// decode kernels' contract (attention/decode.h: one block per (kv head and split, sequence)
// takes all of at most R packed rows; splits in tiles of FA_DEC_TILE keys) built for a short
// key range: a decode step's attention early in a sequence, when the whole step is a few
// microseconds of work.
//
// Why: at a short context the decode kernels are latency-bound, not bandwidth-bound. A block
// there is one kv head's few rows over a few dozen keys, one block an SM, and its time is the
// chain of dependent instructions its waves run (the staging of every sub-tile in shared
// memory, three barriers a sub-tile, the key groups' sums one barrier each). This kernel
// keeps that chain short: no staging of K or V, the chunk's K and V loads issued together
// into registers (one memory round trip a chunk), a barrier for Q, two a chunk and one for the
// final sum, and R = 1 for calls of one row a kv head (no GQA), so that no work is spent on
// rows that do not exist. The next chunk's loads are not issued ahead, so every chunk costs a
// round trip and the kernel is for short key ranges only (candle-rocm takes it up to
// CANDLE_ROCM_SHORT_DECODE_KEYS keys); it stays correct for any range and any split.
//
// Work split, per chunk of KC keys (KC = FA_THREADS / TPK):
//   - S = Q K^T: TPK adjacent threads take one key, each every TPK-th 16-byte chunk of its row
//     (the TPK threads of a key read adjacent chunks), against Q in shared memory (f32); the
//     parts are added by xor shuffles; the first thread of a key writes its R logits (scale,
//     softcap, ALiBi, mask; base 2) to shared memory.
//   - Softmax: wave w owns rows w, w + NW, ...; its lanes take the chunk's keys, the row max and
//     sum by xor shuffles, P back in place of the logits and the rescale of O to shared memory.
//   - O += P V: thread (g, c) owns 16-byte column chunk c of every row and adds keys g, g + KG,
//     ... of the chunk.
// Logits, P and the rescale are double-buffered, so a chunk needs two barriers. At the end the
// key groups' partial outputs go to shared memory and are added in group order (deterministic),
// then written as the other decode kernels write them (T, or the split workspace).
#pragma once

// Threads a key in S = Q K^T: every thread takes at most 8 chunks of a key row (PC), at most 4
// with 8 rows of 16-bit types (PC chunks of K and of V, the 8 rows' outputs and the unpacked
// chunks took gfx9's VGPRs past 256 at tiers 128 and 256).
template <int CT, int R, int SIZE> struct FaShortTpk {
    static constexpr int PCMAX = R >= 8 && SIZE == 2 ? 4 : 8;
    static constexpr int V = CT / PCMAX > 2 ? CT / PCMAX : 2;
};

template <typename T, int DMAX, int R, typename TQ = T>
__device__ __forceinline__ void fa_short_decode(const fa_params &p) {
    constexpr int N = FaChunk<T>::N;               // elements per chunk
    constexpr int CT = DMAX / N;                   // chunks per row at the tier
    constexpr int TPK = FaShortTpk<CT, R, (int)sizeof(T)>::V; // threads per key in S
    constexpr int KC = FA_THREADS / TPK;           // keys per chunk
    constexpr int PC = CT / TPK;                   // chunks a thread loads, of K and of V
    constexpr int KG = FA_THREADS / CT;            // key groups of O += P V
    constexpr int NW = FA_THREADS / FA_WAVE;       // waves per block
    constexpr int RW = (R + NW - 1) / NW;          // rows per wave in the softmax
    constexpr int LK = (KC + FA_WAVE - 1) / FA_WAVE; // keys per lane in the softmax
    static_assert(TPK * KC == FA_THREADS && PC * TPK == CT && KG * CT == FA_THREADS, "short decode split");
    static_assert(KC / KG == PC && PC <= 8 && TPK <= FA_WAVE && N % 4 == 0, "short decode loads");
    __shared__ float4 q4[R * DMAX / 4];   // the queries (f32)
    __shared__ float sc[2][R][KC];        // logits, then P, of a chunk (double-buffered)
    __shared__ float cs[2][R];            // per row: the rescale of O for the chunk
    __shared__ float fin[2][R];           // per row: 1 / sum, log2-sum-exp
    __shared__ float4 red4[KG * R * DMAX / 4]; // the key groups' partial outputs
    float *const qs = reinterpret_cast<float *>(q4);
    float *const red = reinterpret_cast<float *>(red4);

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

    // The queries, and the keys the mask leaves to the rows, cut to the split.
    fa_dec_stage_q<T, DMAX, R, TQ>(qs, p, s, b, hk, rows, vec);
    __syncthreads(); // Q
    int64_t j_lo, j_hi;
    fa_dec_keys(p, s, rows, split, FA_DEC_TILE, j_lo, j_hi);

    // Each owned row's running max and sum, in its owning wave.
    float m[RW], l[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const uint32_t sk_ = tid / TPK, part = tid % TPK; // S: key, part
    const uint32_t g = tid / CT, cc = tid % CT;       // O += P V: key group, column chunk
    float o[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < N; u++) o[r][u] = 0.0f;

    int buf = 0;
    for (int64_t j0 = j_lo; j0 < j_hi; j0 += KC, buf ^= 1) {
        // The chunk's K (this thread's key, every TPK-th chunk) and V (keys g + KG n, column
        // chunk cc), all loads in flight together; zeros past the keys and past d.
        fa_vec kr[PC], vr[PC];
        {
            const int64_t j = j0 + sk_;
            const bool in = j < j_hi;
            const T *const krow = in ? k + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.k_batch, p.k_row, p.k_head) : k;
#pragma unroll
            for (int n = 0; n < PC; n++) {
                const uint32_t col = (part + TPK * n) * N;
                kr[n] = fa_vec{0u, 0u, 0u, 0u};
                if (in && col < d) kr[n] = fa_load_raw(krow + col, vec);
            }
        }
#pragma unroll
        for (int n = 0; n < PC; n++) {
            const int64_t j = j0 + g + KG * n;
            const uint32_t col = cc * N;
            vr[n] = fa_vec{0u, 0u, 0u, 0u};
            if (j < j_hi && col < d)
                vr[n] = fa_load_raw(v + fa_kv_offset(p, b, s.tok0_k, (uint32_t)j, hk, p.v_batch, p.v_row, p.v_head) + col, vec);
        }

        // S = Q K^T for this thread's key, its part of the row; then the parts added.
        float x[R];
#pragma unroll
        for (int r = 0; r < R; r++) x[r] = 0.0f;
#pragma unroll
        for (int n = 0; n < PC; n++) {
            const uint32_t ch = part + TPK * n;
            float e[N];
            fa_unpack<T>(kr[n], e);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float4 *qv = q4 + (r * DMAX + ch * N) / 4;
#pragma unroll
                for (int u = 0; u < N / 4; u++) {
                    const float4 qq = qv[u];
                    x[r] = fmaf(qq.x, e[4 * u], x[r]);
                    x[r] = fmaf(qq.y, e[4 * u + 1], x[r]);
                    x[r] = fmaf(qq.z, e[4 * u + 2], x[r]);
                    x[r] = fmaf(qq.w, e[4 * u + 3], x[r]);
                }
            }
            FA_FENCE(); // AMD: a chunk's Q reads stay with its FMAs (else hoisted: VGPR spills)
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int mask = TPK / 2; mask > 0; mask >>= 1) x[r] += fa_shfl_xor(x[r], mask);
        if (part == 0) {
            const int64_t j = j0 + sk_;
#pragma unroll
            for (int r = 0; r < R; r++) {
                // The row's query position and ALiBi slope here, not kept in registers (R = 8
                // rows of them took gfx9's VGPRs past 256).
                float y = -INFINITY;
                if ((uint32_t)r < rows && j < j_hi) {
                    const int64_t qpos = (int64_t)((uint32_t)r / G) + off;
                    const float slope = p.alibi ? p.alibi[hk * G + (uint32_t)r % G] * FA_LOG2E : 0.0f;
                    y = fa_dec_logit(p, b, x[r], j, qpos, slope);
                }
                sc[buf][r][sk_] = y;
            }
        }
        __syncthreads(); // A: the chunk's logits

        // Softmax of the rows this wave owns: P in place of the logits, the rescale of O.
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const uint32_t r = wave + NW * i;
            if (r >= (uint32_t)R) break; // the same for the whole wave
            float xs[LK];
#pragma unroll
            for (int n = 0; n < LK; n++) {
                const uint32_t kk = lane + FA_WAVE * n;
                xs[n] = kk < (uint32_t)KC ? sc[buf][r][kk] : -INFINITY;
            }
            const float corr = fa_dec_softmax<LK, KC>(xs, sc[buf][r], m[i], l[i], lane);
            if (lane == 0) cs[buf][r] = corr;
        }
        __syncthreads(); // B: P and the rescale factors

        // O += P V.
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float c = cs[buf][r];
#pragma unroll
            for (int u = 0; u < N; u++) o[r][u] *= c;
        }
#pragma unroll
        for (int n = 0; n < PC; n++) {
            const uint32_t kk = g + KG * n;
            float e[N];
            fa_unpack<T>(vr[n], e);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float pr = sc[buf][r][kk];
#pragma unroll
                for (int u = 0; u < N; u++) o[r][u] = fmaf(pr, e[u], o[r][u]);
            }
            FA_FENCE();
        }
    }

    // The key groups' parts to shared memory, each row's 1 / sum and log2-sum-exp from its
    // owning wave; then every output element adds the groups in order.
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < N; u += 4)
            red4[((g * R + r) * DMAX + cc * N + u) / 4] = make_float4(o[r][u], o[r][u + 1], o[r][u + 2], o[r][u + 3]);
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const uint32_t r = wave + NW * i;
            if (r >= (uint32_t)R) break;
            fin[0][r] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            fin[1][r] = l[i] > 0.0f ? m[i] + log2f(l[i]) : -INFINITY;
        }
    __syncthreads();
    fa_dec_store<R, DMAX, TQ>(p, s, b, hk, split, rows, fin, [&](uint32_t x, uint32_t r) {
        const uint32_t col = x % DMAX;
        float acc = 0.0f;
#pragma unroll
        for (int gg = 0; gg < KG; gg++) acc += red[(gg * R + r) * DMAX + col];
        return acc;
    });
}
