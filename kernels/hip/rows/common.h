// rows/common.h - part of rows.hip (see its header for the kernels, operands and work split),
// included by it first, never on its own: element conversions and accumulation types, shuffles
// over the hardware wave, the reduction values and their combine operations, chunk loads and
// stores.

// ---------------------------------------------------------------------------------------------
// Element conversions. Acc<T> is the accumulation type: double for double, float otherwise.
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

__device__ __forceinline__ float rw_to(float x) { return x; }
__device__ __forceinline__ double rw_to(double x) { return x; }
__device__ __forceinline__ float rw_to(__half x) { return __half2float(x); }
__device__ __forceinline__ float rw_to(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T rw_from(typename Acc<T>::type x);
template <> __device__ __forceinline__ float rw_from<float>(float x) { return x; }
template <> __device__ __forceinline__ double rw_from<double>(double x) { return x; }
template <> __device__ __forceinline__ __half rw_from<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 rw_from<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

__device__ __forceinline__ float rw_exp(float x) { return expf(x); }
__device__ __forceinline__ double rw_exp(double x) { return exp(x); }
// exp inside softmax: for f16/bf16 rows the hardware's approximate exp (a couple of f32 ulps,
// far below the output's rounding; expf's range reduction made those rows compute-bound at 8
// elements per 16-byte chunk); f32 and f64 keep the library function.
template <typename T> __device__ __forceinline__ typename Acc<T>::type rw_exp_of(typename Acc<T>::type x) {
    return rw_exp(x);
}
// On NVIDIA the bare ex2.approx.ftz (one MUFU.EX2 after the multiply; __expf adds four
// instructions of denormal scaling, and results below 2^-126 are far below a 16-bit
// output's resolution next to the row's largest value, which is 1 / sum); elsewhere __expf
// (v_exp_f32 on AMD).
__device__ __forceinline__ float rw_exp_fast(float x) {
#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#else
    return __expf(x);
#endif
}
template <> __device__ __forceinline__ float rw_exp_of<__half>(float x) { return rw_exp_fast(x); }
template <> __device__ __forceinline__ float rw_exp_of<__nv_bfloat16>(float x) { return rw_exp_fast(x); }
__device__ __forceinline__ float rw_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double rw_rsqrt(double x) { return 1.0 / sqrt(x); }
__device__ __forceinline__ float rw_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double rw_max(double a, double b) { return fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// Shuffles over the whole hardware wave (RW_WAVE lanes).
__device__ __forceinline__ unsigned rw_shfl_xor_u32(unsigned v, int mask) {
#if defined(__HIP_DEVICE_COMPILE__)
    int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return (unsigned)__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, (int)v);
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}
__device__ __forceinline__ float rw_shfl_xor(float v, int mask) {
    return __uint_as_float(rw_shfl_xor_u32(__float_as_uint(v), mask));
}
__device__ __forceinline__ unsigned rw_shfl_xor(unsigned v, int mask) {
    return rw_shfl_xor_u32(v, mask);
}
__device__ __forceinline__ double rw_shfl_xor(double v, int mask) {
    unsigned long long b = (unsigned long long)__double_as_longlong(v);
    unsigned lo = rw_shfl_xor_u32((unsigned)b, mask);
    unsigned hi = rw_shfl_xor_u32((unsigned)(b >> 32), mask);
    return __longlong_as_double((long long)(((unsigned long long)hi << 32) | lo));
}

// ---------------------------------------------------------------------------------------------
// Reduction values and their combine operations (commutative and associative).
template <typename A> struct SumV {
    A s;
    __device__ __forceinline__ static SumV empty() { return SumV{(A)0}; }
    __device__ __forceinline__ void add(A x, unsigned) { s += x; }
    __device__ __forceinline__ void merge(const SumV &o) { s += o.s; }
    __device__ __forceinline__ SumV shfl(int m) const { return SumV{rw_shfl_xor(s, m)}; }
};

// Value and index of the first extreme among the non-NaN elements, starting from -inf (max) or
// +inf (min) with i == RW_NONE. A thread adds its elements in increasing index order, so a
// strict comparison keeps the first of equal values (and -0.0 vs 0.0 as the CPU does) and
// never takes a NaN (see the row-start rule in the kernels): one compare and two selects per
// element. i == RW_NONE at the end: no element beat the start value (every non-NaN one is the
// infinity itself), so v is already the answer and the index is the row's first.
template <typename A, bool MAX> struct ExtV {
    A v;
    unsigned i;
    __device__ __forceinline__ static ExtV empty() {
        return ExtV{MAX ? -(A)INFINITY : (A)INFINITY, RW_NONE};
    }
    __device__ __forceinline__ static bool before(A a, A b) { return MAX ? a < b : a > b; }
    __device__ __forceinline__ void add(A x, unsigned j) {
        if (before(v, x)) {
            v = x;
            i = j;
        }
    }
    // The earlier index wins a tie; RW_NONE (the largest unsigned) never does.
    __device__ __forceinline__ void merge(const ExtV &o) {
        if (before(v, o.v) || (!before(o.v, v) && o.i < i)) {
            v = o.v;
            i = o.i;
        }
    }
    __device__ __forceinline__ ExtV shfl(int m) const {
        return ExtV{rw_shfl_xor(v, m), rw_shfl_xor(i, m)};
    }
};

// ExtV for the middle-dim kernels, which keep the explicit NaN and "none yet" tests: there the
// single-compare form measured slower in bf16 (0.59 of copy against 0.78, H100 via
// HIP-on-CUDA, 2026-11-23). Same results as ExtV.
template <typename A, bool MAX> struct ExtCV {
    A v;
    unsigned i;
    __device__ __forceinline__ static ExtCV empty() { return ExtCV{(A)0, RW_NONE}; }
    __device__ __forceinline__ static bool before(A a, A b) { return MAX ? a < b : a > b; }
    __device__ __forceinline__ void add(A x, unsigned j) {
        if (x != x) return; // NaN: never replaces (see the row-start rule in the kernel)
        if (i == RW_NONE || before(v, x)) {
            v = x;
            i = j;
        }
    }
    __device__ __forceinline__ void merge(const ExtCV &o) {
        if (o.i == RW_NONE) return;
        if (i == RW_NONE || before(v, o.v) || (!before(o.v, v) && o.i < i)) {
            v = o.v;
            i = o.i;
        }
    }
};

// Sums of x and x * x (layer norm).
template <typename A> struct Sum2V {
    A s, q;
    __device__ __forceinline__ static Sum2V empty() { return Sum2V{(A)0, (A)0}; }
    __device__ __forceinline__ void merge(const Sum2V &o) {
        s += o.s;
        q += o.q;
    }
    __device__ __forceinline__ Sum2V shfl(int m) const {
        return Sum2V{rw_shfl_xor(s, m), rw_shfl_xor(q, m)};
    }
};

// Running max and sum of exp(x - max) (softmax, streaming path).
template <typename A> struct SoftV {
    A m, s;
    __device__ __forceinline__ static SoftV empty() { return SoftV{(A)-INFINITY, (A)0}; }
    __device__ __forceinline__ void add(A x) {
        if (x > m) {
            s = s * rw_exp(m - x) + (A)1;
            m = x;
        } else if (!(x == (A)-INFINITY && m == (A)-INFINITY)) {
            s += rw_exp(x - m); // NaN x makes the sum NaN, as on the CPU
        }
    }
    __device__ __forceinline__ void merge(const SoftV &o) {
        A M = rw_max(m, o.m);
        A a = s == (A)0 ? (A)0 : s * rw_exp(m - M);
        A b = o.s == (A)0 ? (A)0 : o.s * rw_exp(o.m - M);
        m = M;
        s = a + b;
    }
    __device__ __forceinline__ SoftV shfl(int m_) const {
        return SoftV{rw_shfl_xor(m, m_), rw_shfl_xor(s, m_)};
    }
};

template <typename A> struct MaxV {
    A m;
    __device__ __forceinline__ void merge(const MaxV &o) { m = rw_max(m, o.m); }
    __device__ __forceinline__ MaxV shfl(int k) const { return MaxV{rw_shfl_xor(m, k)}; }
};

// Reduces `v` over the row group of `tpr` lanes; every lane of the group gets the result.
// `smem` holds one V per wave of the block (used only when tpr > RW_WAVE, i.e. one row per
// block); the trailing barrier lets the caller reuse it at once.
template <typename V> __device__ __forceinline__ V group_reduce(V v, unsigned tpr, V *smem) {
    const unsigned lim = tpr < RW_WAVE ? tpr : RW_WAVE;
    for (unsigned m = lim / 2; m > 0; m >>= 1) v.merge(v.shfl((int)m));
    if (tpr > RW_WAVE) {
        const unsigned wave = threadIdx.x / RW_WAVE, nw = blockDim.x / RW_WAVE;
        if (threadIdx.x % RW_WAVE == 0) smem[wave] = v;
        __syncthreads();
        v = smem[0];
        for (unsigned w = 1; w < nw; ++w) v.merge(smem[w]);
        __syncthreads();
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// Chunk loads and stores: chunk c of a row covers elements [c * N, c * N + N).
template <typename T> struct Chunk {
    static constexpr int N = 16 / sizeof(T);
    T e[N];
};

template <typename T>
__device__ __forceinline__ Chunk<T> load_vec(const T *row, size_t c) {
    rw_vec v = reinterpret_cast<const rw_vec *>(row)[c];
    Chunk<T> out;
    __builtin_memcpy(&out, &v, sizeof(out));
    return out;
}

template <typename T>
__device__ __forceinline__ void store_vec(T *row, size_t c, const Chunk<T> &ch) {
    rw_vec v;
    __builtin_memcpy(&v, &ch, sizeof(v));
    reinterpret_cast<rw_vec *>(row)[c] = v;
}
