// rows/fused.h - part of rows.hip (see its header), included by it after rows/reduce.h, never
// on its own: the fused softmax, RMS norm and layer norm over the last dim, the residual add
// fused with an RMS norm, and the gated linear unit of a SwiGLU MLP.

// ---------------------------------------------------------------------------------------------
// Fused softmax / RMS norm / layer norm over the last dim.
#define RW_SOFTMAX 0
#define RW_RMS 1
#define RW_LAYER 2
// x + beta (the residual, same layout as x) rounded to T, written to dst's first rows * cols
// elements, and its RMS norm scaled by alpha to the next rows * cols.
#define RW_ADD_RMS 3

// Loads chunk c of a row into vals[0..N) (the op's neutral value past the row's end).
template <typename T, bool VEC>
__device__ __forceinline__ void load_chunk(const T *p, size_t c, size_t cols,
                                           typename Acc<T>::type *vals,
                                           typename Acc<T>::type pad) {
    constexpr int N = Chunk<T>::N;
    if (VEC) {
        if ((c + 1) * N <= cols) {
            Chunk<T> ch = load_vec(p, c);
#pragma unroll
            for (int j = 0; j < N; ++j) vals[j] = rw_to(ch.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) vals[j] = pad;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const size_t i = c * N + j;
            vals[j] = i < cols ? rw_to(p[i]) : pad;
        }
    }
}

// Writes out[j] = f(vals[j], j-th element index) for chunk c (only inside the row).
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void store_chunk(T *p, size_t c, size_t cols,
                                            const typename Acc<T>::type *vals, F f) {
    constexpr int N = Chunk<T>::N;
    if (VEC) {
        if ((c + 1) * N <= cols) {
            Chunk<T> ch;
#pragma unroll
            for (int j = 0; j < N; ++j) ch.e[j] = rw_from<T>(f(vals[j], c * N + j, j));
            store_vec(p, c, ch);
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const size_t i = c * N + j;
            if (i < cols) p[i] = rw_from<T>(f(vals[j], i, j));
        }
    }
}

// The per-element parameters of chunk c (alpha or beta), VEC-aligned like the rows.
template <typename T, bool VEC>
__device__ __forceinline__ void load_param(const T *p, size_t c, size_t cols,
                                           typename Acc<T>::type *vals) {
    load_chunk<T, VEC>(p, c, cols, vals, (typename Acc<T>::type)0);
}

// The output of the norms for one element: (v - mean) * scale * alpha (+ beta).
template <typename A, int OP> struct NormOut {
    A mean, scale;
    const A *a, *b;
    __device__ __forceinline__ A operator()(A v, size_t, int j) const {
        const A y = (v - mean) * scale * a[j];
        return OP == RW_LAYER ? y + b[j] : y;
    }
};

template <typename T, int OP, int K, bool VEC>
__device__ __forceinline__ void fused_rows(const T *x, T *dst, const T *alpha, const T *beta,
                                           size_t rows, size_t cols, unsigned tpr, float eps_f) {
    typedef typename Acc<T>::type A;
    constexpr int N = Chunk<T>::N;
    constexpr int KK = K > 0 ? K : 1;
    const A eps = (A)eps_f;
    const A n = (A)cols;
    const A pad = OP == RW_SOFTMAX ? (A)-INFINITY : (A)0;
    __shared__ Sum2V<A> sm_sum2[RW_BLOCK / 32];
    __shared__ SumV<A> sm_sum[RW_BLOCK / 32];
    __shared__ SoftV<A> sm_soft[RW_BLOCK / 32];
    __shared__ MaxV<A> sm_max[RW_BLOCK / 32];
    const size_t rpb = blockDim.x / tpr;
    const unsigned g = threadIdx.x % tpr;
    const size_t nc = (cols + N - 1) / N;
    for (size_t base = blockIdx.x * rpb; base < rows; base += (size_t)gridDim.x * rpb) {
        const size_t row = base + threadIdx.x / tpr;
        const bool valid = row < rows;
        const T *p = x + (valid ? row : 0) * cols;
        T *q = dst + (valid ? row : 0) * cols;
        // RW_ADD_RMS: the residual row, and where the norm goes (q holds the sum).
        const T *res = beta + (valid ? row : 0) * cols;
        T *qn = OP == RW_ADD_RMS ? q + rows * cols : q;
        // Single pass (K > 0): the row stays in registers between the reduction and the write.
        A vals[KK][N];
        if (K > 0) {
#pragma unroll
            for (int k = 0; k < KK; ++k) {
                const size_t c = g + (size_t)k * tpr;
                if (valid && c < nc) {
                    load_chunk<T, VEC>(p, c, cols, vals[k], pad);
                    if (OP == RW_ADD_RMS) {
                        A r[N];
                        load_chunk<T, VEC>(res, c, cols, r, (A)0);
#pragma unroll
                        for (int j = 0; j < N; ++j) vals[k][j] = rw_to(rw_from<T>(vals[k][j] + r[j]));
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) vals[k][j] = pad;
                }
            }
        }
        if (OP == RW_SOFTMAX) {
            A m, inv;
            if (K > 0) {
                MaxV<A> mv{(A)-INFINITY};
#pragma unroll
                for (int k = 0; k < KK; ++k)
#pragma unroll
                    for (int j = 0; j < N; ++j) mv.m = rw_max(mv.m, vals[k][j]);
                m = group_reduce(mv, tpr, sm_max).m;
                SumV<A> sv = SumV<A>::empty();
#pragma unroll
                for (int k = 0; k < KK; ++k) {
                    const size_t c = g + (size_t)k * tpr;
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        // Padding adds nothing (when m == -inf the row is NaN anyway). On the
                        // vector path padding is whole chunks of -inf, whose exp(-inf - m) is
                        // already 0 (or NaN when m is -inf), so no per-element index test.
                        const A e = VEC || c * N + j < cols ? rw_exp_of<T>(vals[k][j] - m) : (A)0;
                        vals[k][j] = e;
                        sv.s += e;
                    }
                }
                inv = (A)1 / group_reduce(sv, tpr, sm_sum).s;
            } else {
                SoftV<A> sv = SoftV<A>::empty();
                if (valid) {
                    for (size_t c = g; c < nc; c += tpr) {
                        A t[N];
                        load_chunk<T, VEC>(p, c, cols, t, (A)-INFINITY);
#pragma unroll
                        for (int j = 0; j < N; ++j)
                            if (c * N + j < cols) sv.add(t[j]);
                    }
                }
                sv = group_reduce(sv, tpr, sm_soft);
                m = sv.m;
                // With +inf in the row, exp(inf - inf) makes the CPU's sum NaN; the running
                // sum counted that element as exp(0).
                inv = m == (A)INFINITY ? (A)NAN : (A)1 / sv.s;
            }
            if (valid) {
                if (K > 0) {
#pragma unroll
                    for (int k = 0; k < KK; ++k) {
                        const size_t c = g + (size_t)k * tpr;
                        if (c < nc)
                            store_chunk<T, VEC>(q, c, cols, vals[k],
                                                [&](A e, size_t, int) { return e * inv; });
                    }
                } else {
                    for (size_t c = g; c < nc; c += tpr) {
                        A t[N];
                        load_chunk<T, VEC>(p, c, cols, t, (A)-INFINITY);
                        store_chunk<T, VEC>(q, c, cols, t,
                                            [&](A v, size_t, int) { return rw_exp_of<T>(v - m) * inv; });
                    }
                }
            }
        } else {
            Sum2V<A> sv = Sum2V<A>::empty();
            // Single pass: alpha's chunks are loaded before the reduction, so their latency
            // overlaps it instead of following it.
            A pa[KK][N];
            if (K > 0) {
#pragma unroll
                for (int k = 0; k < KK; ++k) {
                    const size_t c = g + (size_t)k * tpr;
                    if (valid && c < nc) load_param<T, VEC>(alpha, c, cols, pa[k]);
                }
                if (OP == RW_ADD_RMS && valid) {
#pragma unroll
                    for (int k = 0; k < KK; ++k) {
                        const size_t c = g + (size_t)k * tpr;
                        if (c < nc) store_chunk<T, VEC>(q, c, cols, vals[k], [](A v, size_t, int) { return v; });
                    }
                }
#pragma unroll
                for (int k = 0; k < KK; ++k)
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        sv.s += vals[k][j];
                        sv.q += vals[k][j] * vals[k][j];
                    }
            } else if (valid) {
                for (size_t c = g; c < nc; c += tpr) {
                    A t[N];
                    load_chunk<T, VEC>(p, c, cols, t, (A)0);
                    if (OP == RW_ADD_RMS) {
                        // The sum is written here and read back by this same thread below.
                        A r[N];
                        load_chunk<T, VEC>(res, c, cols, r, (A)0);
#pragma unroll
                        for (int j = 0; j < N; ++j) t[j] = rw_to(rw_from<T>(t[j] + r[j]));
                        store_chunk<T, VEC>(q, c, cols, t, [](A v, size_t, int) { return v; });
                    }
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        sv.s += t[j];
                        sv.q += t[j] * t[j];
                    }
                }
            }
            sv = group_reduce(sv, tpr, sm_sum2);
            NormOut<A, OP> f;
            if (OP == RW_RMS || OP == RW_ADD_RMS) {
                f.mean = (A)0;
                f.scale = rw_rsqrt(sv.q / n + eps);
            } else {
                f.mean = sv.s / n;
                f.scale = rw_rsqrt(sv.q / n - f.mean * f.mean + eps);
            }
            A a[N], b[N];
            f.a = a;
            f.b = b;
            if (valid && K > 0) {
#pragma unroll
                for (int k = 0; k < KK; ++k) {
                    const size_t c = g + (size_t)k * tpr;
                    if (c < nc) {
#pragma unroll
                        for (int j = 0; j < N; ++j) a[j] = pa[k][j];
                        if (OP == RW_LAYER) load_param<T, VEC>(beta, c, cols, b);
                        store_chunk<T, VEC>(qn, c, cols, vals[k], f);
                    }
                }
            } else if (valid) {
                // Two passes: walk the row again (RW_ADD_RMS: the sum this thread wrote).
                const T *src = OP == RW_ADD_RMS ? q : p;
                for (size_t c = g; c < nc; c += tpr) {
                    A t[N];
                    load_chunk<T, VEC>(src, c, cols, t, (A)0);
                    load_param<T, VEC>(alpha, c, cols, a);
                    if (OP == RW_LAYER) load_param<T, VEC>(beta, c, cols, b);
                    store_chunk<T, VEC>(qn, c, cols, t, f);
                }
            }
        }
    }
}

#define RW_FUSED_ONE(NAME, OPC, T, TN, K, VEC, SUF)                                              \
    extern "C" __global__ void __launch_bounds__(RW_BLOCK) NAME##_##TN##_##K##SUF(              \
        const T *x, T *dst, const T *alpha, const T *beta, size_t rows, size_t cols,            \
        unsigned tpr, float eps) {                                                               \
        fused_rows<T, OPC, K, VEC>(x, dst, alpha, beta, rows, cols, tpr, eps);                  \
    }

#define RW_FUSED_K(T, TN, K, VEC, SUF)                                                           \
    RW_FUSED_ONE(rsoftmax, RW_SOFTMAX, T, TN, K, VEC, SUF)                                       \
    RW_FUSED_ONE(rrmsnorm, RW_RMS, T, TN, K, VEC, SUF)                                           \
    RW_FUSED_ONE(rlayernorm, RW_LAYER, T, TN, K, VEC, SUF)                                       \
    RW_FUSED_ONE(raddrmsnorm, RW_ADD_RMS, T, TN, K, VEC, SUF)

// K * N <= 32 values per thread: K up to 8 for f32 and f64, up to 4 for f16 and bf16.
#define RW_FUSED_4(T, TN, VEC, SUF)                                                              \
    RW_FUSED_K(T, TN, 0, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 1, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 2, VEC, SUF)                                                               \
    RW_FUSED_K(T, TN, 4, VEC, SUF)
#define RW_FUSED_8(T, TN, VEC, SUF)                                                              \
    RW_FUSED_4(T, TN, VEC, SUF)                                                                  \
    RW_FUSED_K(T, TN, 8, VEC, SUF)
