// rows/group_norm.h - part of rows.hip (see its header), included by it after rows/common.h,
// never on its own: group normalisation (candle-nn's `GroupNorm`, the fused op `GroupNorm`) in
// two launches over a contiguous x of dims (b, c, inner..): `rows` = b * groups groups of
// `len` = cpg * inner contiguous elements (cpg = c / groups channels of `inner` elements).
//
//   rgnorm_stats_<T>(GnArgs a, const T *x, A *part)
//     grid (a.splits, a.rows), blocks of RW_BLOCK threads. Block (j, r) covers elements
//     [j chunk, min((j + 1) chunk, len)) of group r and writes part[2 (r splits + j)] = the sum
//     of d and part[.. + 1] = the sum of d^2 over them, d = x - x0 with x0 the group's first
//     element: shifted sums, so the variance s2 / len - (s1 / len)^2 does not lose its digits
//     to a mean far from 0 (x0 is a sample of the group, so |mean - x0| is of the order of
//     the deviation).
//   rgnorm_<T>(GnArgs a, A eps, const T *x, const A *part, const T *w, const T *b, T *y)
//     same grid. Every block first sums its group's `splits` partials in one fixed order (the
//     same bits in every block of the group and on every run), mean = x0 + s1 / len,
//     var = max(s2 / len - (s1 / len)^2, 0), then y = (x - mean) / sqrt(var + eps) * w[ch] +
//     b[ch] over its chunk, computed in A (f32 for f16/bf16, f64 for f64) and rounded once;
//     ch = (r % groups) cpg + i / inner for element i of the group.
//
// A is Acc<T>. With a.vec the host promises inner % N == 0 and chunk % N == 0 (N = 16 /
// sizeof(T), so len and every chunk start are whole chunks, and a chunk lies in one channel)
// and 16-byte aligned x and y: 16-byte loads and stores; else element by element. len < 2^32.
struct GnArgs {
    uint32_t len, chunk, rows, splits;
    uint32_t inner, cpg, groups, vec;
};

__device__ __forceinline__ float gn_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double gn_sqrt(double x) { return sqrt(x); }

// The end of chunk j: min((j + 1) chunk, len).
__device__ __forceinline__ uint32_t gn_end(const GnArgs &a, uint32_t lo) {
    return a.len - lo < a.chunk ? a.len : lo + a.chunk;
}

template <typename T>
__device__ __forceinline__ void gnorm_stats(const GnArgs &a, const T *__restrict__ x,
                                            typename Acc<T>::type *__restrict__ part) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    __shared__ Sum2V<A> smem[RW_BLOCK / 32];
    const uint32_t r = blockIdx.y, j = blockIdx.x;
    const T *g = x + (size_t)r * a.len;
    const A x0 = rw_to(g[0]);
    const uint32_t lo = j * a.chunk, hi = gn_end(a, lo);
    Sum2V<A> v = Sum2V<A>::empty();
    if (a.vec) {
        for (uint32_t c = lo / N + threadIdx.x; c < hi / N; c += blockDim.x) {
            const Chunk<T> k = load_vec(g, c);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const A d = rw_to(k.e[e]) - x0;
                v.s += d;
                v.q += d * d;
            }
        }
    } else {
        for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            const A d = rw_to(g[i]) - x0;
            v.s += d;
            v.q += d * d;
        }
    }
    v = group_reduce(v, blockDim.x, smem);
    if (threadIdx.x == 0) {
        const size_t at = 2 * ((size_t)r * a.splits + j);
        part[at] = v.s;
        part[at + 1] = v.q;
    }
}

template <typename T>
__device__ __forceinline__ void gnorm_apply(const GnArgs &a, typename Acc<T>::type eps,
                                            const T *__restrict__ x,
                                            const typename Acc<T>::type *__restrict__ part,
                                            const T *__restrict__ w, const T *__restrict__ b,
                                            T *__restrict__ y) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    __shared__ Sum2V<A> smem[RW_BLOCK / 32];
    const uint32_t r = blockIdx.y, j = blockIdx.x;
    const size_t base = (size_t)r * a.len;
    Sum2V<A> v = Sum2V<A>::empty();
    for (uint32_t s = threadIdx.x; s < a.splits; s += blockDim.x) {
        const size_t at = 2 * ((size_t)r * a.splits + s);
        v.s += part[at];
        v.q += part[at + 1];
    }
    v = group_reduce(v, blockDim.x, smem);
    const A n = (A)a.len, m1 = v.s / n;
    const A var = rw_max(v.q / n - m1 * m1, (A)0);
    const A mean = rw_to(x[base]) + m1, std = gn_sqrt(var + eps);
    const uint32_t ch0 = (r % a.groups) * a.cpg;
    const uint32_t lo = j * a.chunk, hi = gn_end(a, lo);
    const T *g = x + base;
    T *o = y + base;
    if (a.vec) {
        for (uint32_t c = lo / N + threadIdx.x; c < hi / N; c += blockDim.x) {
            const uint32_t ch = ch0 + c * N / a.inner;
            const A wc = rw_to(w[ch]), bc = rw_to(b[ch]);
            const Chunk<T> k = load_vec(g, c);
            Chunk<T> out;
#pragma unroll
            for (int e = 0; e < N; ++e) out.e[e] = rw_from<T>((rw_to(k.e[e]) - mean) / std * wc + bc);
            store_vec(o, c, out);
        }
    } else {
        for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            const uint32_t ch = ch0 + i / a.inner;
            o[i] = rw_from<T>((rw_to(g[i]) - mean) / std * rw_to(w[ch]) + rw_to(b[ch]));
        }
    }
}

#define RW_GNORM(T, TN)                                                                          \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rgnorm_stats_##TN(GnArgs a, const T *x, Acc<T>::type *part) {                           \
        gnorm_stats<T>(a, x, part);                                                              \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rgnorm_##TN(GnArgs a, Acc<T>::type eps, const T *x, const Acc<T>::type *part,           \
                    const T *w, const T *b, T *y) {                                              \
        gnorm_apply<T>(a, eps, x, part, w, b, y);                                                \
    }
