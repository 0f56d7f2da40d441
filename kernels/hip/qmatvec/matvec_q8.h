// qmatvec/matvec_q8.h - part of qmatvec.hip (see its header for layouts, work split and alignment),
// included by it in order, never on its own: x rounded to 8 bits as Candle CUDA's q8_1
// (`qmv_quantize_x8`) and the 8-bit mat-vec kernels `qmatvec8_<T>_m<M>`.

// =============================================================================================
// 8-bit activations (CANDLE_ROCM_QMATVEC=q8): x is first quantized per 32-value block to
// Candle CUDA's q8_1 (candle-kernels' quantize_q8_1: d = amax / 127, q = round(x / d), d and the
// f32 sum of the block's x values kept as f16), then the kernels multiply 4 bytes at a time with
// 32-bit integer accumulation (`__dp4a`: dp4a on NVIDIA, v_dot4_i32_i8 / v_dot4_i32_iu8 on AMD
// where the target has them, 4 multiplies elsewhere) and apply the scales once per block part,
// in the f32 expressions of candle-kernels' vec_dot_*_q8_1_impl (q4_0, q4_1, q5_0 and q5_1 take
// the f16 x sum, the k-quants the integer sum of q). Against the f32 kernels above this reads a quarter
// of the x bytes and does 4 multiply-adds per instruction; the weights' math is exact in
// integers, and the result is Candle CUDA's quantized product up to the order of the f32 sums
// (for q4_0 and q4_1 rows of up to 512 values, that order too).
//
// x8 layout, for k values (k a multiple of 32, nx = k / 32 blocks): k signed bytes q, then at
// byte k nx pairs of 32-bit words (f16 d in the low half and f16 sum(x) in the high half of the
// first, as block_q8_1's ds; the i32 sum of the block's q).
// A row takes QMV8_ROW_BYTES(k) = 40 nx bytes; rows of a batch follow one another.
//
// Kernels:
//   qmv_quantize_x8(const float *x, uint8_t *x8, unsigned k): x8 row blockIdx.y from x row
//     blockIdx.y (k floats each, contiguous); blockDim (QMV_BLOCK), grid (ceil(k / QMV_BLOCK),
//     rows). Lane i of a 32-lane group takes value i of a block.
//   qmatvec8_<T>(const uint8_t *w, const uint8_t *x8, float *y, unsigned n, unsigned nb):
//     y = W x for one x8 row (k = nb * block values); w as for qmatvec_<T> (4-byte aligned,
//     16-byte aligned for q4_K and q5_K, whose super-block heads load as 16 bytes; readable 2
//     bytes before a block and 4 past the last); x8 8-byte aligned (candle-rocm allocates both
//     whole, so 256-byte aligned). Launch as qmatvec_<T>. Work split as qmatvec_<T>
//     (a part reads the same quants and its x bytes are the same runs), except that a lane
//     takes QMV8_PARTS (2) consecutive parts of a 32-value block, so 2 lanes share a block and a
//     group step covers 16 blocks (on the H100 via HIP-on-CUDA, 2026-11-23: q4_0 at 4096x32000
//     1915 GB/s against 1611 with 4 lanes), q8_0 all 4 (QMV8_PARTS_Q8_0: one lane per block,
//     2468 GB/s against 2220 with 2 parts, 2026-11-24), q5_0 / q5_1 too (QMV8_PARTS_Q5); q4_K
//     and q5_K 2 parts on NVIDIA, one on AMD (QMV8_KPARTS), q6_K one (QMV8_KPARTS_Q6K).
#define QMV8_ROW_BYTES(k) ((k) / 32 * 40)

// 4 signed (or, for the weights, small unsigned) bytes of a times those of b, plus c.
__device__ __forceinline__ int qmv_dot4(uint32_t a, uint32_t b, int c) {
    return __dp4a((int)a, (int)b, c);
}

__device__ __forceinline__ float qmv_shfl_xor_max(float v, int mask) {
    return fmaxf(v, qmv_shfl_xor(v, mask));
}

extern "C" __global__ void __launch_bounds__(QMV_BLOCK)
    qmv_quantize_x8(const float *__restrict__ x, uint8_t *__restrict__ x8, unsigned k) {
    const size_t row = blockIdx.y;
    const unsigned i = blockIdx.x * QMV_BLOCK + threadIdx.x; // k % 32 == 0: whole groups idle
    const bool live = i < k;
    const float v = live ? x[row * k + i] : 0.0f;
    // amax over the 32 lanes (fmaxf ignores a NaN) and the f32 sum of the values, both with
    // the xor butterfly of Candle's warp_reduce_max / warp_reduce_sum (masks 16, 8, 4, 2, 1).
    float amax = fabsf(v), xsum = v;
#pragma unroll
    for (int m = QMV_GROUP / 2; m > 0; m >>= 1) {
        amax = qmv_shfl_xor_max(amax, m);
        xsum += qmv_shfl_xor(xsum, m);
    }
    const float d = amax / 127.0f;
    // q = round(x / d), a true division as Candle's quantize_q8_1 (not x times 1 / d).
    const float r = amax == 0.0f ? 0.0f : roundf(v / d);
    // NaN to 0 and saturating (|r| <= 127 whenever amax is finite).
    const int q = r != r ? 0 : (int)fminf(fmaxf(r, -128.0f), 127.0f);
    float sum = (float)q; // sums of at most 32 bytes: exact in f32
#pragma unroll
    for (int m = QMV_GROUP / 2; m > 0; m >>= 1) sum += qmv_shfl_xor(sum, m);
    if (live) {
        uint8_t *base = x8 + row * (size_t)QMV8_ROW_BYTES(k);
        base[i] = (uint8_t)(int8_t)q;
        if (i % 32 == 0) {
            uint32_t *ds = reinterpret_cast<uint32_t *>(base + k) + 2 * (i / 32);
            const uint32_t dh = __half_as_ushort(__float2half_rn(d));
            const uint32_t sh = __half_as_ushort(__float2half_rn(xsum));
            ds[0] = dh | sh << 16;
            ds[1] = (uint32_t)(int)sum;
        }
    }
}

// The x side of a block part, loaded once per step and shared by the rows: the bytes of the
// part's runs and per-run scale terms.
struct Q8x {
    uint32_t q[8]; // up to 32 bytes
    float d[4];    // d of the run's x block
    float o[4];    // per-type offset term (see the dots)
    int c[4];      // per-type integer start of the run's dot
};

__device__ __forceinline__ const uint32_t *qmv8_ds(const uint8_t *x8, unsigned k, unsigned blk) {
    return reinterpret_cast<const uint32_t *>(x8 + k) + 2 * blk;
}

// The block's d (an f16 value) and the f16-rounded f32 sum of its x values.
__device__ __forceinline__ float qmv8_d(const uint32_t *ds) { return qmv_half(ds[0]); }
__device__ __forceinline__ float qmv8_xsum(const uint32_t *ds) { return qmv_half(ds[0] >> 16); }

// q4_0 and q4_1 take a lane's P consecutive parts t0 .. t0 + P of a block together (JOINT), as
// one of Candle's CUDA mat-vec threads takes VDR_Q4_*_Q8_1_MMVQ (2) ints of a block: one
// integer dot over the P parts, then the scales in the f32 expression of candle-kernels'
// vec_dot_q4_0_q8_1_impl / vec_dot_q4_1_q8_1_impl, so that with P = 2 every partial sum and
// the lanes' xor reduction match Candle CUDA's for k up to 512 (bit for bit, before the
// reduction over more than one warp that its kernel makes for longer rows).
struct Q4_0x8 {
    static constexpr uint32_t BYTES = 18;
    static constexpr bool JOINT = true;
    // Parts t0 .. t0 + P: x words t0 + i (low nibbles) and 4 + t0 + i (high nibbles) of block b.
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        const uint32_t *xq = reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)b);
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            x.q[i] = xq[t0 + i];
            x.q[P + i] = xq[4 + t0 + i];
        }
        const uint32_t *ds = qmv8_ds(x8, k, b);
        x.d[0] = qmv8_d(ds);
        x.o[0] = qmv8_xsum(ds);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        const float d = qmv_half(p[0] >> (phase * 8));
        const uint32_t sh = 16 - phase * 8;
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            const uint32_t w = t0 + i + phase / 2;
            const uint32_t q = qmv_funnel(p[w], p[w + 1], sh);
            s = qmv_dot4(q & 0x0f0f0f0fu, x.q[i], s);
            s = qmv_dot4((q >> 4) & 0x0f0f0f0fu, x.q[P + i], s);
        }
        // sum (nibble - 8) x = d8 sum nibble q - 8 sum x, P / 4 of the offset per call.
        return d * ((float)s * x.d[0] - (float)(8 * P / 4) * x.o[0]);
    }
};

struct Q4_1x8 {
    static constexpr uint32_t BYTES = 20;
    static constexpr bool JOINT = true;
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        Q4_0x8::load_xn<P>(x8, k, b, t0, x);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t dm = p[0];
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            const uint32_t q = p[1 + t0 + i];
            s = qmv_dot4(q & 0x0f0f0f0fu, x.q[i], s);
            s = qmv_dot4((q >> 4) & 0x0f0f0f0fu, x.q[P + i], s);
        }
        // d d8 and m sum(x) in f32 (candle-kernels builds without GGML_CUDA_F16); P / 4 of the
        // min term per call.
        const float dd = qmv_half(dm) * x.d[0], ms = qmv_half(dm >> 16) * x.o[0];
        return (float)s * dd + ms / (float)(4 / P);
    }
};

// q5_0 (MIN false) and q5_1 (MIN true), parts t0 .. t0 + P like Q4_0x8 / Q4_1x8 (the same x
// words): each part's quants as Q5 above reads them (Q5::quants), one integer dot
// over the P parts, then the f32 expressions of candle-kernels' vec_dot_q5_0_q8_1_impl
// (d (d8 sum q x - 16 P / 4 sum x)) and vec_dot_q5_1_q8_1_impl (d d8 sum q x + m sum x P / 4).
template <bool MIN> struct Q5x8 {
    static constexpr uint32_t BYTES = MIN ? 24 : 22;
    static constexpr bool JOINT = true;
    template <unsigned P>
    __device__ __forceinline__ static void load_xn(const uint8_t *x8, unsigned k, unsigned b, unsigned t0, Q8x &x) {
        Q4_0x8::load_xn<P>(x8, k, b, t0, x);
    }
    template <unsigned P>
    __device__ __forceinline__ static float dotn(const uint32_t *p, uint32_t phase, unsigned t0, const Q8x &x) {
        const uint32_t qh = Q5<MIN>::high_bits(p, phase);
        int s = 0;
#pragma unroll
        for (unsigned i = 0; i < P; ++i) {
            uint32_t lo, hi;
            Q5<MIN>::quants(p, phase, qh, t0 + i, lo, hi);
            s = qmv_dot4(lo, x.q[i], s);
            s = qmv_dot4(hi, x.q[P + i], s);
        }
        if (MIN) {
            const float dd = qmv_half(p[0]) * x.d[0], ms = qmv_half(p[0] >> 16) * x.o[0];
            return (float)s * dd + ms / (float)(4 / P);
        }
        const float d = qmv_half(p[0] >> (phase * 8));
        return d * ((float)s * x.d[0] - (float)(16 * P / 4) * x.o[0]);
    }
};

struct Q8_0x8 {
    static constexpr uint32_t BYTES = 34;
    static constexpr bool JOINT = false;
    // Part t: bytes 8t .. 8t + 8 of x block b.
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const uint32_t *xq = reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)b);
        x.q[0] = xq[2 * t];
        x.q[1] = xq[2 * t + 1];
        x.d[0] = qmv8_d(qmv8_ds(x8, k, b));
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        const float d = qmv_half(p[0] >> (phase * 8));
        const uint32_t i = 2 * t + phase / 2, sh = 16 - phase * 8;
        const uint32_t a = p[i], b = p[i + 1], c = p[i + 2];
        int s = qmv_dot4(qmv_funnel(a, b, sh), x.q[0], 0);
        s = qmv_dot4(qmv_funnel(b, c, sh), x.q[1], s);
        return d * x.d[0] * (float)s;
    }
};

// q4_K (QH false) and q5_K (QH true) with QMV_KL = 16 lanes per super-block: part t, chunk
// c = t / 4, i0 = 8 (t % 4): 8 quants bytes (low nibbles: x block 2c of the super-block,
// bytes i0 .. i0 + 8; high nibbles: x block 2c + 1, same bytes).
template <bool QH> struct QK45x8 {
    static constexpr uint32_t BYTES = QH ? 176 : 144;
    static constexpr bool JOINT = false;
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const unsigned c = t / 4, i0 = 8 * (t % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned blk = 8 * b + 2 * c + h;
            // 8-byte loads: the quants at 8 (t % 4) of a 32-byte block, the (ds, sum) pair.
            const uint2 xq = *reinterpret_cast<const uint2 *>(x8 + 32 * (size_t)blk + i0);
            x.q[2 * h] = xq.x;
            x.q[2 * h + 1] = xq.y;
            const uint2 ds = *reinterpret_cast<const uint2 *>(qmv8_ds(x8, k, blk));
            x.d[h] = qmv_half(ds.x);
            // dmin m sum(x) over the block's 4 parts: a quarter of d sum(q) per part.
            x.o[h] = 0.25f * x.d[h] * (float)(int)ds.y;
        }
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        (void)phase; // word-aligned blocks: always 0
        const uint32_t c = t / 4, i0 = 8 * (t % 4);
        const uint32_t sh = (c & 1) * 16;
        // The 16-byte head (d, dmin, scales) in one load, the lane's 8 quant bytes (and 8 high
        // bits, q5_K) in one each: super-blocks of 144 and 176 bytes start 16-byte aligned.
        const uint4 head = *reinterpret_cast<const uint4 *>(p);
        const uint32_t a = head.y >> sh, b = head.z >> sh, e = head.w >> sh;
        const uint32_t scp = c < 2 ? a & 0x3f3fu : (e & 0x0f0fu) | ((a >> 2) & 0x3030u);
        const uint32_t mnp = c < 2 ? b & 0x3f3fu : ((e >> 4) & 0x0f0fu) | ((b >> 2) & 0x3030u);
        const uint32_t qw = (QH ? 48 : 16) / 4 + 2 * t; // word index of the lane's 8 qs bytes
        const uint2 qs = *reinterpret_cast<const uint2 *>(p + qw);
        uint2 qh = {0u, 0u};
        if (QH) qh = *reinterpret_cast<const uint2 *>(p + (16 + i0) / 4);
        int s1 = 0, s2 = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t q = i ? qs.y : qs.x;
            uint32_t lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
            if (QH) {
                const uint32_t h = i ? qh.y : qh.x;
                lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            s1 = qmv_dot4(lo, x.q[i], s1);
            s2 = qmv_dot4(hi, x.q[2 + i], s2);
        }
        const float d = qmv_half(head.x), dmin = qmv_half(head.x >> 16);
        const float sc1 = (float)(scp & 255u), sc2 = (float)(scp >> 8);
        const float m1 = (float)(mnp & 255u), m2 = (float)(mnp >> 8);
        return d * (sc1 * x.d[0] * (float)s1 + sc2 * x.d[1] * (float)s2) - dmin * (m1 * x.o[0] + m2 * x.o[1]);
    }
};

// q6_K with 16 lanes per super-block: part t, half h = t / 8, l0 = 4 (t % 8): for g = 0..4,
// the 4 values 128h + l0 + 32g + [0, 4): x block 4h + g of the super-block, bytes l0 .. l0 + 4.
struct Q6Kx8 {
    static constexpr uint32_t BYTES = 210;
    static constexpr bool JOINT = false;
    __device__ __forceinline__ static void load_x(const uint8_t *x8, unsigned k, unsigned b, unsigned t, Q8x &x) {
        const unsigned h = t / 8, l0 = 4 * (t % 8);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const unsigned blk = 8 * b + 4 * h + g;
            x.q[g] = *reinterpret_cast<const uint32_t *>(x8 + 32 * (size_t)blk + l0);
            x.d[g] = qmv8_d(qmv8_ds(x8, k, blk));
            // (q - 32) x = q x - 32 x over the run's 4 bytes.
            x.c[g] = -32 * qmv_dot4(0x01010101u, x.q[g], 0);
        }
    }
    __device__ __forceinline__ static float dot(const uint32_t *p, uint32_t phase, unsigned t, const Q8x &x) {
        const uint32_t sh = phase * 8;
        const uint32_t h = t / 8, l0 = 4 * (t % 8);
        const uint32_t la = (64 * h + l0) / 4, lb = la + 8, lh = (128 + 32 * h + l0) / 4;
        const uint32_t ls = (192 + 8 * h) / 4;
        const uint32_t a = qmv_funnel(p[la], p[la + 1], sh), b = qmv_funnel(p[lb], p[lb + 1], sh);
        const uint32_t e = qmv_funnel(p[lh], p[lh + 1], sh);
        const uint32_t ws0 = p[ls], ws1 = p[ls + 1], ws2 = p[ls + 2];
        const float d = qmv_half(p[52] >> sh);
        int s[4];
        s[0] = qmv_dot4((a & 0x0f0f0f0fu) | ((e & 0x03030303u) << 4), x.q[0], x.c[0]);
        s[1] = qmv_dot4((b & 0x0f0f0f0fu) | ((e & 0x0c0c0c0cu) << 2), x.q[1], x.c[1]);
        s[2] = qmv_dot4(((a >> 4) & 0x0f0f0f0fu) | (e & 0x30303030u), x.q[2], x.c[2]);
        s[3] = qmv_dot4(((b >> 4) & 0x0f0f0f0fu) | ((e >> 2) & 0x30303030u), x.q[3], x.c[3]);
        const uint32_t s0 = qmv_funnel(ws0, ws1, sh), s1 = qmv_funnel(ws1, ws2, sh);
        const uint32_t is8 = 8 * (l0 >> 4);
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint32_t sw = g < 2 ? s0 : s1;
            const int32_t sc = (int32_t)((sw >> (is8 + 16 * (g & 1))) << 24) >> 24;
            acc += (float)sc * x.d[g] * (float)s[g];
        }
        return d * acc;
    }
};

// The 8-bit-activation mat-vec: `qmatvec`'s groups, rows and grid; LANES lanes per block (4
// for 32-value blocks, 16 for super-blocks), QK values per block.
//
// PARTS (QMV8_PARTS for q4_0 and q4_1, QMV8_PARTS_Q5 for q5_0 and q5_1, QMV8_PARTS_Q8_0 for
// q8_0, QMV8_KPARTS for q4_K and q5_K, QMV8_KPARTS_Q6K for q6_K) gives a lane that many
// consecutive parts of a block: fewer lanes per block, so a group step covers more blocks and
// each lane more bytes of a row.
#ifndef QMV8_PARTS
#define QMV8_PARTS 2
#endif
#ifndef QMV8_PARTS_Q8_0
#define QMV8_PARTS_Q8_0 4
#endif
// q5_0 / q5_1: 4 parts, one lane per block (4096x32000 q5_0 on the H100 via HIP-on-CUDA,
// 2026-11-25 19:20Z: 2225 GB/s against 1884 with 2 parts and 2013 with 1).
#ifndef QMV8_PARTS_Q5
#define QMV8_PARTS_Q5 4
#endif
// q4_K / q5_K (QMV8_KPARTS): on NVIDIA 2 parts (a lane takes 16 quants of a chunk: 4096x32000
// q4_K on the H100 via HIP-on-CUDA, 2026-11-25 18:26Z, 2171 GB/s against 2041 with 1 part); on
// AMD 1, unmeasured there: 2 parts take 79-86 VGPRs against 58-64 for one row (gfx942,
// gfx1100) and up to 253 for q5_K's 4 rows on gfx9-generic (near a spill). q6_K keeps 1
// (QMV8_KPARTS_Q6K).
#ifndef QMV8_KPARTS
#if defined(__HIP_DEVICE_COMPILE__)
#define QMV8_KPARTS 1
#else
#define QMV8_KPARTS 2
#endif
#endif
#ifndef QMV8_KPARTS_Q6K
#define QMV8_KPARTS_Q6K 1
#endif
template <typename Q, unsigned LANES, unsigned QK, unsigned PARTS, unsigned M>
__device__ __forceinline__ void qmatvec8(const uint8_t *__restrict__ w, const uint8_t *__restrict__ x8,
                                         float *__restrict__ y, unsigned n, unsigned nb) {
    static_assert(LANES % PARTS == 0, "parts per lane must divide the parts of a block");
    constexpr unsigned L = LANES / PARTS; // lanes per block
    const unsigned lane = threadIdx.x % QMV_GROUP, group = threadIdx.x / QMV_GROUP;
    const unsigned t = lane % L, first = lane / L;
    const unsigned k = nb * QK;
    const size_t row_bytes = (size_t)nb * Q::BYTES, x8_bytes = QMV8_ROW_BYTES((size_t)k);
    for (size_t base = (size_t)blockIdx.x * QMV_ROWS; base < n; base += (size_t)gridDim.x * QMV_ROWS) {
        const size_t r0 = base + (size_t)group * QMV_R;
        float acc[QMV_R][M];
#pragma unroll
        for (int r = 0; r < QMV_R; ++r) {
#pragma unroll
            for (unsigned j = 0; j < M; ++j) acc[r][j] = 0.0f;
        }
        if (r0 < n) {
            constexpr unsigned STEP = QMV_GROUP / L;
            QmvRow rows[QMV_R];
#pragma unroll
            for (int r = 0; r < QMV_R; ++r)
                rows[r] = qmv_row<Q::BYTES, STEP>(w, r0 + r < n ? r0 + r : r0, row_bytes, first);
            QMV_UNROLL_LOOP(QMV_UNROLL)
            for (unsigned b = first; b < nb; b += STEP) {
                if constexpr (Q::JOINT) {
#pragma unroll
                    for (unsigned j = 0; j < M; ++j) {
                        Q8x x;
                        Q::template load_xn<PARTS>(x8 + j * x8_bytes, k, b, t * PARTS, x);
#pragma unroll
                        for (int r = 0; r < QMV_R; ++r)
                            acc[r][j] += Q::template dotn<PARTS>(rows[r].p, rows[r].phase, t * PARTS, x);
                    }
                } else {
#pragma unroll
                    for (unsigned pp = 0; pp < PARTS; ++pp) {
                        const unsigned part = t * PARTS + pp;
#pragma unroll
                        for (unsigned j = 0; j < M; ++j) {
                                Q8x x;
                            Q::load_x(x8 + j * x8_bytes, k, b, part, x);
#pragma unroll
                            for (int r = 0; r < QMV_R; ++r)
                                acc[r][j] += Q::dot(rows[r].p, rows[r].phase, part, x);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < QMV_R; ++r) rows[r].p += STEP * Q::BYTES / 4;
            }
        }
        qmv_store<M>(acc, lane, y, n, r0);
    }
}

// qmatvec8_<T> (one x8 row) and qmatvec8_<T>_m<M> (M x8 rows).
#define QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, M, SUFFIX)                                           \
    extern "C" __global__ void __launch_bounds__(QMV_BLOCK)                                        \
        qmatvec8_##T##SUFFIX(const uint8_t *w, const uint8_t *x8, float *y, unsigned n,            \
                             unsigned nb) {                                                        \
        qmatvec8<Q, LANES, QK, PARTS, M>(w, x8, y, n, nb);                                         \
    }
#define QMV8_KERNEL(T, Q, LANES, QK, PARTS)                                                        \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 1, )                                                     \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 2, _m2)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 3, _m3)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 4, _m4)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 5, _m5)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 6, _m6)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 7, _m7)                                                  \
    QMV8_KERNEL_M(T, Q, LANES, QK, PARTS, 8, _m8)

QMV8_KERNEL(q4_0, Q4_0x8, 4, 32, QMV8_PARTS)
QMV8_KERNEL(q4_1, Q4_1x8, 4, 32, QMV8_PARTS)
QMV8_KERNEL(q8_0, Q8_0x8, 4, 32, QMV8_PARTS_Q8_0)
QMV8_KERNEL(q5_0, Q5x8<false>, 4, 32, QMV8_PARTS_Q5)
QMV8_KERNEL(q5_1, Q5x8<true>, 4, 32, QMV8_PARTS_Q5)
// The k-quants up to QMV_K_MAX_M rows (their registers grow as the f32 kernels' do).
#define QMV8_K_KERNEL(T, Q, PARTS)                                                                 \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 1, )                                                       \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 2, _m2)                                                    \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 3, _m3)                                                    \
    QMV8_KERNEL_M(T, Q, 16, 256, PARTS, 4, _m4)
QMV8_K_KERNEL(q4_K, QK45x8<false>, QMV8_KPARTS)
QMV8_K_KERNEL(q5_K, QK45x8<true>, QMV8_KPARTS)
QMV8_K_KERNEL(q6_K, Q6Kx8, QMV8_KPARTS_Q6K)
