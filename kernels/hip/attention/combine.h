// attention/combine.h - part of attention.hip: merges the splits of a split call (flash
// decoding). Row `row` of the split workspace (token and head) weighs split s's normalised
// partial output by 2^(lse_s - max) and writes the weighted mean in T (zero when no split saw a
// key). fa_combine_<T> runs it as a launch of its own, one block a row; the FMA decode kernels
// run it in their last block of a (sequence, kv head) when the call gives them counters.
#pragma once

// One row: threads t0, t0 + step, ... take its columns.
template <typename T>
__device__ __forceinline__ void fa_combine_row(const fa_params &p, uint64_t row, T *op, uint32_t t0, uint32_t step) {
    const uint32_t d = p.d;
    const uint64_t stride = (uint64_t)p.total_q * p.heads; // rows per split
    float mx = -INFINITY;
    for (uint32_t s = 0; s < p.splits; s++) mx = fmaxf(mx, p.lse_part[s * stride + row]);
    for (uint32_t col = t0; col < d; col += step) {
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

template <typename T> __device__ __forceinline__ void fa_combine(const fa_params &p) {
    const uint32_t tok = blockIdx.x, h = blockIdx.y;
    const uint64_t base = p.cu_q ? (uint64_t)tok * p.o_row
                                 : (uint64_t)(tok / p.seqlen_q) * p.o_batch + (uint64_t)(tok % p.seqlen_q) * p.o_row;
    T *const op = (T *)p.o + base + (uint64_t)h * p.o_head;
    fa_combine_row<T>(p, (uint64_t)tok * p.heads + h, op, threadIdx.x, FA_THREADS);
}
