// elementwise/engines.h - part of elementwise.hip (see its header for the kernels and
// operands), included by it after elementwise/ops.h, never on its own: the shapes passed by
// value, the packs, and the engines that walk contiguous and strided operands.

// ---- shapes passed by value ---------------------------------------------------------------------
// Dims innermost first; entries past `rank` are unused. q = x / dims[d] is
// (mulhi(x, magic[d]) + x) >> shift[d] (computed in 64 bits: exact for every 32-bit x).
struct EwDims {
    uint32_t rank;
    uint32_t vec;
    uint32_t dims[EW_MAX_RANK];
    uint32_t magic[EW_MAX_RANK];
    uint32_t shift[EW_MAX_RANK];
};
struct EwStrided1 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
};
struct EwStrided2 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
    uint32_t s1[EW_MAX_RANK];
};

struct EwStrided3 {
    EwDims d;
    uint32_t s0[EW_MAX_RANK];
    uint32_t s1[EW_MAX_RANK];
    uint32_t s2[EW_MAX_RANK];
};

__device__ __forceinline__ uint32_t fast_div(uint32_t x, uint32_t magic, uint32_t shift) {
    uint32_t hi = (uint32_t)(((uint64_t)x * magic) >> 32);
    return (uint32_t)(((uint64_t)hi + x) >> shift);
}

// Offsets of linear index i for one or two operands.
__device__ __forceinline__ uint32_t offset1(uint32_t i, const EwDims &d, const uint32_t *s0) {
    uint32_t o = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        o += (i - q * d.dims[k]) * s0[k];
        i = q;
    }
    return o;
}
__device__ __forceinline__ void offset2(uint32_t i, const EwDims &d, const uint32_t *s0,
                                        const uint32_t *s1, uint32_t &o0, uint32_t &o1) {
    o0 = 0;
    o1 = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        uint32_t r = i - q * d.dims[k];
        o0 += r * s0[k];
        o1 += r * s1[k];
        i = q;
    }
}

__device__ __forceinline__ void offset3(uint32_t i, const EwDims &d, const uint32_t *s0, const uint32_t *s1,
                                        const uint32_t *s2, uint32_t &o0, uint32_t &o1, uint32_t &o2) {
    o0 = 0;
    o1 = 0;
    o2 = 0;
#pragma unroll
    for (int k = 0; k < EW_MAX_RANK; ++k) {
        if (k >= (int)d.rank) break;
        uint32_t q = fast_div(i, d.magic[k], d.shift[k]);
        uint32_t r = i - q * d.dims[k];
        o0 += r * s0[k];
        o1 += r * s1[k];
        o2 += r * s2[k];
        i = q;
    }
}

// ---- packs ----------------------------------------------------------------------------------
template <typename T, int N> struct alignas(16) Pack {
    T v[N];
};
__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
__device__ __forceinline__ bool aligned8(const void *p) { return ((uintptr_t)p & 7u) == 0; }
// A pack of N elements aligned to its size, at most 16 (the packs of a 16-byte-aligned base).
template <typename T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) SPack {
    T v[N];
};

// Loads pack p of a strided operand at offset o: the whole pack, or (stride 0 along dim 0)
// one value repeated.
template <typename S, int VEC>
__device__ __forceinline__ SPack<S, VEC> load_pack(const S *__restrict__ base, uint32_t o, bool bcast) {
    SPack<S, VEC> r;
    if (bcast) {
        S x = base[o];
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = x;
    } else {
        r = *reinterpret_cast<const SPack<S, VEC> *>(base + o);
    }
    return r;
}

template <int A, int B> struct MinI { static constexpr int value = A < B ? A : B; };
// Elements per pack: 16 bytes of the smaller of the two types.
template <typename SI, typename SO> struct VecOf {
    static constexpr int value = 16 / MinI<(int)sizeof(SI), (int)sizeof(SO)>::value;
};

// ---- engines --------------------------------------------------------------------------------
// One input of SI, output SO, f: SI -> SO. Contiguous.
template <typename SI, typename SO, typename F>
__device__ __forceinline__ void map1_contig(size_t n, const SI *__restrict__ in, SO *__restrict__ out, F f) {
    constexpr int VEC = VecOf<SI, SO>::value;
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(in) && aligned16(out)) {
        typedef Pack<SI, VEC> PI;
        typedef Pack<SO, VEC> PO;
        const size_t npack = n / VEC;
        const PI *pin = reinterpret_cast<const PI *>(in);
        PO *pout = reinterpret_cast<PO *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PI a[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) a[u] = pin[p];
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PO r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = f(in[i]);
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(in[i]);
        }
    }
}

// One strided input (n <= 2^32 - 1 and every offset < 2^32: the host checks both). Without
// PACKS (the unary math ops, to keep one copy of their code) it always takes the element path.
template <bool PACKS, typename SI, typename SO, typename F>
__device__ __forceinline__ void map1_strided(size_t n_, const EwStrided1 &s, const SI *__restrict__ in,
                                             SO *__restrict__ out, F f) {
    constexpr int VEC = VecOf<SI, SO>::value;
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    if (PACKS && s.d.vec && aligned16(in) && aligned16(out)) {
        typedef Pack<SI, VEC> PI;
        typedef Pack<SO, VEC> PO;
        const size_t npack = n / VEC;
        const bool bcast = s.s0[0] == 0;
        PO *pout = reinterpret_cast<PO *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PI a[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    uint32_t o = offset1((uint32_t)(p * VEC), s.d, s.s0);
                    if (bcast) {
                        SI x = in[o];
#pragma unroll
                        for (int j = 0; j < VEC; ++j) a[u].v[j] = x;
                    } else {
                        a[u] = *reinterpret_cast<const PI *>(in + o);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PO r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(in[offset1((uint32_t)i, s.d, s.s0)]);
        }
    }
}

// Two inputs of S, f: (S, S) -> S. Contiguous.
template <typename S, typename F>
__device__ __forceinline__ void map2_contig(size_t n, const S *__restrict__ lhs, const S *__restrict__ rhs,
                                            S *__restrict__ out, F f) {
    constexpr int VEC = 16 / (int)sizeof(S);
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(lhs) && aligned16(rhs) && aligned16(out)) {
        typedef Pack<S, VEC> P;
        const size_t npack = n / VEC;
        const P *pa = reinterpret_cast<const P *>(lhs);
        const P *pb = reinterpret_cast<const P *>(rhs);
        P *pout = reinterpret_cast<P *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            P a[EW_UNROLL], b[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    a[u] = pa[p];
                    b[u] = pb[p];
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    P r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j], b[u].v[j]);
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = f(lhs[i], rhs[i]);
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = f(lhs[i], rhs[i]);
        }
    }
}

// The packed walk of map2_strided: whole packs of VEC elements (16 or 8 bytes; the host set
// `vec` 1 or 2 for them: dims[0] % VEC == 0 and each operand's stride[0] 0 or 1 with every
// stride a multiple of VEC), an operand with stride 0 along dim 0 loaded as one value repeated.
template <typename S, int VEC, typename F>
__device__ __forceinline__ void map2_packs(size_t n, const EwStrided2 &s, const S *__restrict__ lhs,
                                           const S *__restrict__ rhs, S *__restrict__ out, F f) {
    typedef SPack<S, VEC> P;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    const size_t npack = n / VEC;
    const bool bl = s.s0[0] == 0, br = s.s1[0] == 0;
    P *pout = reinterpret_cast<P *>(out);
    for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
        P a[EW_UNROLL], b[EW_UNROLL];
#pragma unroll
        for (int u = 0; u < EW_UNROLL; ++u) {
            size_t p = base + u * bd + t;
            if (p < npack) {
                uint32_t oa, ob;
                offset2((uint32_t)(p * VEC), s.d, s.s0, s.s1, oa, ob);
                a[u] = load_pack<S, VEC>(lhs, oa, bl);
                b[u] = load_pack<S, VEC>(rhs, ob, br);
            }
        }
#pragma unroll
        for (int u = 0; u < EW_UNROLL; ++u) {
            size_t p = base + u * bd + t;
            if (p < npack) {
                P r;
#pragma unroll
                for (int j = 0; j < VEC; ++j) r.v[j] = f(a[u].v[j], b[u].v[j]);
                pout[p] = r;
            }
        }
    }
}

// Two strided inputs (broadcasting gives an operand stride 0): 16-byte packs (`vec` 1), 8-byte
// packs (`vec` 2: an innermost dim that is a multiple of 8 bytes but not of 16, such as a
// per-channel operand over 14x14 or 28x28 f16 planes), else element by element.
template <typename S, typename F>
__device__ __forceinline__ void map2_strided(size_t n_, const EwStrided2 &s, const S *__restrict__ lhs,
                                             const S *__restrict__ rhs, S *__restrict__ out, F f) {
    constexpr int VEC = 16 / (int)sizeof(S);
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    if (s.d.vec == 1 && aligned16(lhs) && aligned16(rhs) && aligned16(out)) {
        map2_packs<S, VEC>(n, s, lhs, rhs, out, f);
        return;
    }
    if (VEC >= 4 && s.d.vec == 2 && aligned8(lhs) && aligned8(rhs) && aligned8(out)) {
        map2_packs<S, (VEC >= 4 ? VEC / 2 : 1)>(n, s, lhs, rhs, out, f);
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) {
                uint32_t oa, ob;
                offset2((uint32_t)i, s.d, s.s0, s.s1, oa, ob);
                out[i] = f(lhs[oa], rhs[ob]);
            }
        }
    }
}

// Select, out = cond != 0 ? a : b, with C and T unsigned integers of the operands' sizes (the
// select moves bits). A pack is 16 bytes of the smaller type, capped at 64 bytes of the larger
// (u8 conditions with 8-byte values, 8-byte conditions with u8 values: 8 elements, so one
// thread's registers hold at most three 64-byte packs; the smaller operand then moves in 8-byte
// pieces). Contiguous: whole packs when every pointer is 16-byte aligned, else elements.
template <typename C, typename T> struct SelVec {
    static constexpr int small = MinI<(int)sizeof(C), (int)sizeof(T)>::value;
    static constexpr int large = (int)(sizeof(C) + sizeof(T)) - small;
    static constexpr int value = MinI<16 / small, 64 / large>::value;
};

template <typename C, typename T>
__device__ __forceinline__ void select_contig(size_t n, const C *__restrict__ cond, const T *__restrict__ a,
                                              const T *__restrict__ b, T *__restrict__ out) {
    constexpr int VEC = SelVec<C, T>::value;
    const size_t bd = blockDim.x;
    const size_t tile = bd * EW_UNROLL * VEC;
    const size_t t = threadIdx.x;
    if (aligned16(cond) && aligned16(a) && aligned16(b) && aligned16(out)) {
        typedef SPack<C, VEC> PC;
        typedef SPack<T, VEC> PT;
        const size_t npack = n / VEC;
        const PC *pc = reinterpret_cast<const PC *>(cond);
        const PT *pa = reinterpret_cast<const PT *>(a);
        const PT *pb = reinterpret_cast<const PT *>(b);
        PT *pout = reinterpret_cast<PT *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PC c[EW_UNROLL];
            PT x[EW_UNROLL], y[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    c[u] = pc[p];
                    x[u] = pa[p];
                    y[u] = pb[p];
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PT r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = c[u].v[j] != 0 ? x[u].v[j] : y[u].v[j];
                    pout[p] = r;
                }
            }
        }
        size_t i = npack * VEC + (size_t)blockIdx.x * bd + t;
        if (i < n) out[i] = cond[i] != 0 ? a[i] : b[i];
        return;
    }
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) out[i] = cond[i] != 0 ? a[i] : b[i];
        }
    }
}

// Select with three strided operands (a broadcast condition is the common case). With `vec`
// a broadcast operand (stride 0 along dim 0) is read one value per pack and needs no alignment.
template <typename C, typename T>
__device__ __forceinline__ void select_strided(size_t n_, const EwStrided3 &s, const C *__restrict__ cond,
                                               const T *__restrict__ a, const T *__restrict__ b,
                                               T *__restrict__ out) {
    constexpr int VEC = SelVec<C, T>::value;
    const size_t n = n_;
    const size_t bd = blockDim.x;
    const size_t t = threadIdx.x;
    const bool bc = s.s0[0] == 0, ba = s.s1[0] == 0, bb = s.s2[0] == 0;
    if (s.d.vec && (bc || aligned16(cond)) && (ba || aligned16(a)) && (bb || aligned16(b)) && aligned16(out)) {
        typedef SPack<C, VEC> PC;
        typedef SPack<T, VEC> PT;
        const size_t npack = n / VEC;
        PT *pout = reinterpret_cast<PT *>(out);
        for (size_t base = (size_t)blockIdx.x * bd * EW_UNROLL; base < npack; base += (size_t)gridDim.x * bd * EW_UNROLL) {
            PC c[EW_UNROLL];
            PT x[EW_UNROLL], y[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    uint32_t oc, oa, ob;
                    offset3((uint32_t)(p * VEC), s.d, s.s0, s.s1, s.s2, oc, oa, ob);
                    c[u] = load_pack<C, VEC>(cond, oc, bc);
                    x[u] = load_pack<T, VEC>(a, oa, ba);
                    y[u] = load_pack<T, VEC>(b, ob, bb);
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; ++u) {
                size_t p = base + u * bd + t;
                if (p < npack) {
                    PT r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = c[u].v[j] != 0 ? x[u].v[j] : y[u].v[j];
                    pout[p] = r;
                }
            }
        }
        return;
    }
    const size_t tile = bd * EW_UNROLL * VEC;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
#pragma unroll 1
        for (int j = 0; j < EW_UNROLL * VEC; ++j) {
            size_t i = base + j * bd + t;
            if (i < n) {
                uint32_t oc, oa, ob;
                offset3((uint32_t)i, s.d, s.s0, s.s1, s.s2, oc, oa, ob);
                out[i] = cond[oc] != 0 ? a[oa] : b[ob];
            }
        }
    }
}
