// rows/reduce.h - part of rows.hip (see its header), included by it after rows/common.h, never
// on its own: the last-dim and middle-dim reductions.

// ---------------------------------------------------------------------------------------------
// Last-dim reductions.
// One group's partial reduction of row base + threadIdx.x / tpr (empty past the last row).
template <typename T, typename V, bool VEC>
__device__ __forceinline__ V row_reduce_body(const T *src, size_t rows, size_t cols,
                                             unsigned tpr, size_t base) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    const unsigned g = threadIdx.x % tpr;
    const size_t row = base + threadIdx.x / tpr;
    V v = V::empty();
    if (row < rows) {
        const T *p = src + row * cols;
        if (VEC) {
            const size_t nc = cols / N;
            size_t c = g;
            // Four independent 16-byte loads in flight per thread.
            for (; c + 3 * (size_t)tpr < nc; c += 4 * (size_t)tpr) {
                Chunk<T> ch[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) ch[u] = load_vec(p, c + u * (size_t)tpr);
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int j = 0; j < N; ++j)
                        v.add(rw_to(ch[u].e[j]), (unsigned)((c + u * (size_t)tpr) * N + j));
            }
            for (; c < nc; c += tpr) {
                Chunk<T> ch = load_vec(p, c);
#pragma unroll
                for (int j = 0; j < N; ++j) v.add(rw_to(ch.e[j]), (unsigned)(c * N + j));
            }
        } else {
            size_t i = g;
            for (; i + 3 * (size_t)tpr < cols; i += 4 * (size_t)tpr) {
                A x[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) x[u] = rw_to(p[i + u * (size_t)tpr]);
#pragma unroll
                for (int u = 0; u < 4; ++u) v.add(x[u], (unsigned)(i + u * (size_t)tpr));
            }
            for (; i < cols; i += tpr) v.add(rw_to(p[i]), (unsigned)i);
        }
    }
    return v;
}

template <typename T, bool VEC>
__device__ __forceinline__ void row_sum(const T *src, T *dst, size_t rows, size_t cols,
                                        unsigned tpr) {
    typedef typename Acc<T>::type A;
    __shared__ SumV<A> smem[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        SumV<A> v = row_reduce_body<T, SumV<A>, VEC>(src, rows, cols, tpr, base);
        v = group_reduce(v, tpr, smem);
        const size_t row = base + threadIdx.x / tpr;
        if (row < rows && threadIdx.x % tpr == 0) dst[row] = rw_from<T>(v.s);
    }
}

template <typename T, bool MAX, bool INDEX, bool VEC, typename D>
__device__ __forceinline__ void row_ext(const T *src, D *dst, size_t rows, size_t cols,
                                        unsigned tpr) {
    typedef typename Acc<T>::type A;
    typedef ExtV<A, MAX> V;
    __shared__ V smem[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        V v = row_reduce_body<T, V, VEC>(src, rows, cols, tpr, base);
        v = group_reduce(v, tpr, smem);
        const size_t row = base + threadIdx.x / tpr;
        if (row < rows && threadIdx.x % tpr == 0) {
            const T first = src[row * cols];
            const A f = rw_to(first);
            // The CPU starts from the first element: a leading NaN is never replaced.
            const bool nan_first = f != f;
            if constexpr (INDEX) {
                dst[row] = nan_first || v.i == RW_NONE ? 0u : v.i;
            } else {
                dst[row] = nan_first ? first : rw_from<T>(v.v);
            }
        }
    }
}

#define RW_REDUCE(T, TN, VEC, SUF)                                                               \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rsum_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_sum<T, VEC>(src, dst, rows, cols, tpr);                                             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rmax_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_ext<T, true, false, VEC, T>(src, dst, rows, cols, tpr);                             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rmin_##TN##SUF(const T *src, T *dst, size_t rows, size_t cols, unsigned tpr) {          \
        row_ext<T, false, false, VEC, T>(src, dst, rows, cols, tpr);                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rargmax_##TN##SUF(const T *src, uint32_t *dst, size_t rows, size_t cols, unsigned tpr) { \
        row_ext<T, true, true, VEC, uint32_t>(src, dst, rows, cols, tpr);                       \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK)                                      \
        rargmin_##TN##SUF(const T *src, uint32_t *dst, size_t rows, size_t cols, unsigned tpr) { \
        row_ext<T, false, true, VEC, uint32_t>(src, dst, rows, cols, tpr);                      \
    }

// ---------------------------------------------------------------------------------------------
// Middle-dim reductions: src is (a, b, c) contiguous, reduced over b. Blocks of (64, 4)
// threads: x along c (coalesced), y splitting b four ways (interleaved, so each thread's b
// indices increase); the four partial results meet in shared memory. One block per 64
// outputs of one `a`, a grid-stride loop over further blocks.
#define RW_CX 64
#define RW_CY 4

template <typename T, typename V, bool EXT, bool INDEX, typename D>
__device__ __forceinline__ void col_reduce(const T *src, D *dst, size_t a, size_t b, size_t c) {
    typedef typename Acc<T>::type A;
    __shared__ V part[RW_CY][RW_CX];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const size_t per_a = (c + RW_CX - 1) / RW_CX, total = per_a * a;
    for (size_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const size_t ai = blk / per_a, ci = (blk - ai * per_a) * RW_CX + tx;
        V v = V::empty();
        if (ci < c) {
            const T *p = src + ai * b * c + ci;
            size_t bi = ty;
            for (; bi + 3 * RW_CY < b; bi += 4 * RW_CY) {
                A x[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) x[u] = rw_to(p[(bi + u * RW_CY) * c]);
#pragma unroll
                for (int u = 0; u < 4; ++u) v.add(x[u], (unsigned)(bi + u * RW_CY));
            }
            for (; bi < b; bi += RW_CY) v.add(rw_to(p[bi * c]), (unsigned)bi);
        }
        part[ty][tx] = v;
        __syncthreads();
        if (ty == 0 && ci < c) {
#pragma unroll
            for (int y = 1; y < RW_CY; ++y) v.merge(part[y][tx]);
            const size_t o = ai * c + ci;
            if constexpr (EXT) {
                const T first = src[ai * b * c + ci];
                const A f = rw_to(first);
                const bool nan_first = f != f; // as for rows: a leading NaN is never replaced
                if constexpr (INDEX) {
                    dst[o] = nan_first || v.i == RW_NONE ? 0u : v.i;
                } else {
                    dst[o] = nan_first ? first : rw_from<T>(v.v);
                }
            } else {
                dst[o] = rw_from<T>(v.s);
            }
        }
        __syncthreads();
    }
}

#define RW_COLS(T, TN)                                                                           \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        csum_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, SumV<Acc<T>::type>, false, false, T>(src, dst, a, b, c);                   \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cmax_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, ExtCV<Acc<T>::type, true>, true, false, T>(src, dst, a, b, c);              \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cmin_##TN(const T *src, T *dst, size_t a, size_t b, size_t c) {                          \
        col_reduce<T, ExtCV<Acc<T>::type, false>, true, false, T>(src, dst, a, b, c);             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cargmax_##TN(const T *src, uint32_t *dst, size_t a, size_t b, size_t c) {                \
        col_reduce<T, ExtCV<Acc<T>::type, true>, true, true, uint32_t>(src, dst, a, b, c);        \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(RW_CX * RW_CY)                                 \
        cargmin_##TN(const T *src, uint32_t *dst, size_t a, size_t b, size_t c) {                \
        col_reduce<T, ExtCV<Acc<T>::type, false>, true, true, uint32_t>(src, dst, a, b, c);       \
    }
