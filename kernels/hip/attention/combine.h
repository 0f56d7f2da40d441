// attention/combine.h - part of attention.hip: merges the splits of a split call (flash
// decoding). Block (tok, h) weighs split s's normalised partial output by 2^(lse_s - max) and
// writes the weighted mean in T (zero when no split saw a key).
#pragma once

template <typename T> __device__ __forceinline__ void fa_combine(const fa_params &p) {
    const uint32_t tok = blockIdx.x, h = blockIdx.y, d = p.d;
    const uint64_t base = p.cu_q ? (uint64_t)tok * p.o_row
                                 : (uint64_t)(tok / p.seqlen_q) * p.o_batch + (uint64_t)(tok % p.seqlen_q) * p.o_row;
    T *const op = (T *)p.o + base + (uint64_t)h * p.o_head;
    const uint64_t stride = (uint64_t)p.total_q * p.heads; // rows per split
    const uint64_t row = (uint64_t)tok * p.heads + h;
    float mx = -INFINITY;
    for (uint32_t s = 0; s < p.splits; s++) mx = fmaxf(mx, p.lse_part[s * stride + row]);
    for (uint32_t col = threadIdx.x; col < d; col += FA_THREADS) {
        float acc = 0.0f, w = 0.0f;
        for (uint32_t s = 0; s < p.splits; s++) {
            const float ls = p.lse_part[s * stride + row];
            if (ls == -INFINITY) continue;
            const float ws = exp2f(ls - mx);
            acc = fmaf(ws, p.o_part[(s * stride + row) * d + col], acc);
            w += ws;
        }
        op[col] = fa_from<T>(w > 0.0f ? acc / w : 0.0f);
    }
}
