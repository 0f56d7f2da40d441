// attention/common.h - part of attention.hip: 16-byte loads and where a sequence's rows lie
// (element conversions, the xor shuffle and the scheduling fence are mma/common.h's).
#pragma once

template <typename X> __device__ __forceinline__ X fa_min(X a, X b) { return b < a ? b : a; }
template <typename X> __device__ __forceinline__ X fa_max(X a, X b) { return a < b ? b : a; }

// 16 bytes of T: FaChunk<T>::N elements.
template <typename T> struct FaChunk {
    static constexpr int N = 16 / sizeof(T);
    T e[N];
};

// The N elements at p as floats: one 16-byte load when `vec` (p 16-byte aligned), else N
// element loads.
template <typename T>
__device__ __forceinline__ void fa_load(const T *p, bool vec, float (&out)[FaChunk<T>::N]) {
    constexpr int N = FaChunk<T>::N;
    if (vec) {
        fa_vec v = *reinterpret_cast<const fa_vec *>(p);
        FaChunk<T> c;
        __builtin_memcpy(&c, &v, sizeof(c));
#pragma unroll
        for (int e = 0; e < N; e++) out[e] = fa_to(c.e[e]);
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) out[e] = fa_to(p[e]);
    }
}

// N f32 values at p as floats (the mixed kernels' f32 q: N = 8 for an f16 KV cache): N / 4
// 16-byte loads when `vec` (p 16-byte aligned), else N element loads.
template <int N> __device__ __forceinline__ void fa_load_f32(const float *p, bool vec, float (&out)[N]) {
    if (vec) {
#pragma unroll
        for (int h = 0; h < N / 4; h++) {
            const fa_vec v = reinterpret_cast<const fa_vec *>(p)[h];
            __builtin_memcpy(out + 4 * h, &v, sizeof(v));
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) out[e] = p[e];
    }
}

// One sequence of a call: its lengths and where its tokens start.
struct FaSeq {
    uint32_t sq, sk;        // queries, keys
    uint32_t tok0_q;        // first query token (variable-length), else 0
    uint32_t tok0_k;        // first key token (variable-length, not paged), else 0
    uint32_t ws_tok0;       // first row of the sequence in the split workspace
};

__device__ __forceinline__ FaSeq fa_seq(const fa_params &p, uint32_t b) {
    FaSeq s;
    if (p.cu_q) {
        s.tok0_q = p.cu_q[b];
        s.sq = fa_min(p.cu_q[b + 1] - s.tok0_q, p.seqlen_q);
        s.ws_tok0 = s.tok0_q;
    } else {
        s.tok0_q = 0;
        s.sq = p.seqlen_q;
        s.ws_tok0 = b * p.seqlen_q;
    }
    if (p.cu_k) {
        const uint32_t k0 = p.cu_k[b];
        s.sk = fa_min(p.cu_k[b + 1] - k0, p.seqlen_k);
        s.tok0_k = p.block_table ? 0 : k0;
    } else {
        s.tok0_k = 0;
        s.sk = p.seqlen_k;
    }
    return s;
}

// Element offset of key/value row j of sequence b, kv head hk (strides of k or v).
__device__ __forceinline__ uint64_t fa_kv_offset(const fa_params &p, uint32_t b, uint32_t tok0,
                                                 uint32_t j, uint32_t hk, uint64_t batch,
                                                 uint64_t row, uint64_t head) {
    if (p.block_table) {
        const uint64_t blk = p.block_table[(uint64_t)b * p.bt_stride + j / p.page];
        return blk * batch + (uint64_t)(j % p.page) * row + (uint64_t)hk * head;
    }
    return (uint64_t)b * batch + (uint64_t)(tok0 + j) * row + (uint64_t)hk * head;
}

// Whether the multimodal prefix ranges of sequence b let key position `qpos` see key j.
__device__ __forceinline__ bool fa_mm_allowed(const fa_params &p, uint32_t b, int64_t qpos, int64_t j) {
    const int32_t *r = p.mm_prefix + (uint64_t)b * p.mm_stride;
    for (uint32_t n = 0; n < p.mm_ranges; n++) {
        const int64_t lo = r[2 * n], hi = r[2 * n + 1];
        if (lo < hi && qpos >= lo && qpos < hi && j >= lo && j < hi) return true;
    }
    return false;
}

// The tiles of FA_BN keys [t0, t1) the mask leaves to the packed rows [r0, r0 + bm) of sequence
// s (rows of them in all), cut to split `split` of p.tiles_per_split tiles: the prefill tiles'
// key range (fa_tile, fa_mma_*).
__device__ __forceinline__ void fa_key_tiles(const fa_params &p, const FaSeq &s, uint64_t r0, uint64_t bm,
                                             uint64_t rows, uint32_t split, int64_t &t0, int64_t &t1) {
    const uint32_t G = p.group;
    const int64_t off = (int64_t)s.sk - (int64_t)s.sq;
    const int64_t wl = p.window_left, wr = p.window_right;
    const int64_t ilo = (int64_t)(r0 / G), ihi = (int64_t)((fa_min<uint64_t>(r0 + bm, rows) - 1) / G);
    int64_t lo = 0, hi = s.sk;
    if (!p.mm_prefix) {
        if (wl >= 0) lo = fa_max<int64_t>(lo, ilo + off - wl);
        if (wr >= 0) hi = fa_min<int64_t>(hi, ihi + off + wr + 1);
    }
    t0 = lo / FA_BN;
    t1 = hi > lo ? (hi + FA_BN - 1) / FA_BN : t0;
    if (p.splits > 1) {
        const int64_t s0 = (int64_t)split * p.tiles_per_split;
        t0 = fa_max<int64_t>(t0, s0);
        t1 = fa_min<int64_t>(t1, s0 + (int64_t)p.tiles_per_split);
    }
}
