// Runs kernels/hip/qmatvec.hip on the host through emu.h and checks it against a host reference
// of Candle's CPU semantics: `dequantize` (k_quants.rs `to_float` of BlockQ4_0 / BlockQ4_1 /
// BlockQ5_0 / BlockQ5_1 / BlockQ8_0 / BlockQ4K / BlockQ5K / BlockQ6K, in f32) followed by a
// dot product (in double).
// Blocks are random bytes (so random k-quant scales, mins and high bits), with extreme f16
// scales (the largest f16, subnormals, zero, negative) and offsets; shapes cover n = 1, n not
// a multiple of the rows per block, one block per row (most lanes idle) and rows of many
// blocks per lane, blocks at both 4-byte phases, x 16-byte aligned (the _v kernels) and not,
// and a small grid (the grid-stride loop). Launch geometry: a port of candle-rocm/src/quantized/plan.rs (`QmatvecLaunch::new`). Built
// three ways by kernels/tests/kernels_on_cpu.rs: the CUDA path (wave 32, __shfl_xor_sync) and
// the AMD path (ds_bpermute) with wave 32 and wave 64.
// Prints bad=<mismatches> and exits non-zero on any mismatch.
#include "emu.h"

#include "check.h"

// emu.h declares no uint2 (the device headers do).
struct __attribute__((aligned(8))) uint2 {
    unsigned int x, y;
};

// The f32 qmm tiles are left out of the shipped objects; the emulator keeps checking them.
#define QMV_QMM_F32
#include "../../hip/qmatvec.hip"

using namespace chk;

// ---- port of candle-rocm/src/quantized/plan.rs ---------------------------------------------
// QMV_PORT_ROWS: the rows per block candle-rocm launches with (QMATVEC_ROWS); a build of the
// kernels with other tuning knobs (QMV_R, QMV_KSPLIT) passes its own to check them here.
#ifndef QMV_PORT_ROWS
#define QMV_PORT_ROWS 16
#endif
static const size_t ROWS_PER_BLOCK = QMV_PORT_ROWS, THREADS = 256, MAX_GRID = 1 << 20;
static const size_t MATRIX_ROW_PADDING = 512;
static_assert(ROWS_PER_BLOCK == QMV_ROWS && THREADS == QMV_BLOCK, "constants");
struct Launch {
    unsigned grid, block;
    bool vec;
};
static Launch launch_shape(size_t n, const float *x) {
    size_t grid = std::min(std::max<size_t>((n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 1), MAX_GRID);
    return Launch{(unsigned)grid, (unsigned)THREADS, ((uintptr_t)x & 15) == 0};
}

// ---- types ---------------------------------------------------------------------------------------
// Every type has every kernel; q5_0 and q5_1 (past NQT) came last, and their f16 dequantize has
// its own case (dequant_q5_case).
enum QT { Q40, Q41, Q80, Q4K, Q5K, Q6K, NQT, Q50 = NQT, Q51, NALL };
static const char *qt_name[] = {"q4_0", "q4_1", "q8_0", "q4_K", "q5_K", "q6_K", "q5_0", "q5_1"};
static const size_t qt_bytes[] = {18, 20, 34, 144, 176, 210, 22, 24};
static const size_t qt_values[] = {32, 32, 32, 256, 256, 256, 32, 32};
typedef void (*QFn)(const uint8_t *, const float *, float *, unsigned, unsigned);
// KS[type][m - 1][_v]: the kernels for m x rows (qmatvec_<T>[_m<m>][_v]): m = 1..8 for the
// 32-value blocks, 1..QMV_K_MAX_M (4) for the k-quants (null past that).
#define QMV_FNS4(T)                                                                                \
    {qmatvec_##T, qmatvec_##T##_v}, {qmatvec_##T##_m2, qmatvec_##T##_m2_v},                        \
        {qmatvec_##T##_m3, qmatvec_##T##_m3_v}, {qmatvec_##T##_m4, qmatvec_##T##_m4_v}
#define QMV_FNS(T)                                                                                 \
    {QMV_FNS4(T), {qmatvec_##T##_m5, qmatvec_##T##_m5_v}, {qmatvec_##T##_m6, qmatvec_##T##_m6_v},  \
     {qmatvec_##T##_m7, qmatvec_##T##_m7_v}, {qmatvec_##T##_m8, qmatvec_##T##_m8_v}}
#define QMV_K_FNS(T) {QMV_FNS4(T), {}, {}, {}, {}}
static const QFn KS[NALL][8][2] = {QMV_FNS(q4_0),   QMV_FNS(q4_1),   QMV_FNS(q8_0),  QMV_K_FNS(q4_K),
                                   QMV_K_FNS(q5_K), QMV_K_FNS(q6_K), QMV_FNS(q5_0), QMV_FNS(q5_1)};

typedef void (*Q8Fn)(const uint8_t *, const uint8_t *, float *, unsigned, unsigned);
// K8[type][m - 1]: qmatvec8_<T>[_m<m>], the same m as KS.
#define QMV8_FNS4(T) qmatvec8_##T, qmatvec8_##T##_m2, qmatvec8_##T##_m3, qmatvec8_##T##_m4
#define QMV8_FNS(T) {QMV8_FNS4(T), qmatvec8_##T##_m5, qmatvec8_##T##_m6, qmatvec8_##T##_m7, qmatvec8_##T##_m8}
static const Q8Fn K8[NALL][8] = {QMV8_FNS(q4_0),    QMV8_FNS(q4_1),    QMV8_FNS(q8_0),
                                 {QMV8_FNS4(q4_K)}, {QMV8_FNS4(q5_K)}, {QMV8_FNS4(q6_K)},
                                 QMV8_FNS(q5_0),    QMV8_FNS(q5_1)};
// Most x rows of one launch per type (candle-rocm's `qmatvec_max_rows`).
static size_t max_rows(int t) { return qt_values[t] == 32 ? 8 : QMV_K_MAX_M; }

struct Ctx {
    Counter c;
    long launches = 0;
} G;
static std::mt19937_64 rng(11);
static double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// A random f16 scale: mostly ordinary, sometimes extreme (scale kind chosen per matrix).
static uint16_t rand_scale(int kind) {
    switch (kind == 0 ? 0 : (int)(rng() % 6)) {
    case 1: return rng() % 2 ? 0x7bff : 0xfbff;         // +-65504
    case 2: return (uint16_t)(1 + rng() % 0x3ff);       // subnormal
    case 3: return rng() % 2 ? 0x0000 : 0x8000;         // +-0
    case 4: return (uint16_t)(0x0400 | (rng() % 0x400)); // smallest normals
    default: return f16_bits(round_f16(uni(-0.05, 0.05)));
    }
}

static float f16f(uint16_t h) { return (float)f16_value(h); }

// Scale and min of sub-block j of a q4_K / q5_K super-block from its 12 scales bytes.
static void scale_min(int j, const uint8_t *s, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// One k-quant super-block's 256 values as Candle's CPU computes them (f32), and in `mag` the
// size of the terms the kernels sum for each (|d sc q| + |dmin m|, or |d sc| (|q| + 32)).
static void dequant_super(QT t, const uint8_t *b, float out[256], double mag[256]) {
    if (t == Q6K) {
        uint16_t d16;
        memcpy(&d16, b + 208, 2);
        const float d = f16f(d16);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int i = 0; i < 256; ++i) {
            const int h = i / 128, l = i % 32, g = (i % 128) / 32;
            const uint8_t lo = g % 2 == 0 ? ql[64 * h + l] : ql[64 * h + 32 + l];
            const int nib = g < 2 ? lo & 15 : lo >> 4;
            const int hb = (qh[32 * h + l] >> (2 * g)) & 3;
            const int q = (nib | (hb << 4)) - 32;
            const float ds = d * (float)sc[8 * h + l / 16 + 2 * g];
            out[i] = ds * (float)q;
            mag[i] = fabs((double)ds) * (abs(q + 32) + 32);
        }
        return;
    }
    uint16_t d16, m16;
    memcpy(&d16, b, 2);
    memcpy(&m16, b + 2, 2);
    const float d = f16f(d16), dmin = f16f(m16);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = t == Q5K ? b + 48 : b + 16;
    for (int i = 0; i < 256; ++i) {
        const int c = i / 64, hi = (i % 64) / 32, l = i % 32, j = 2 * c + hi;
        int sc, m;
        scale_min(j, scales, sc, m);
        int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        if (t == Q5K && ((qh[l] >> j) & 1)) q += 16;
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        out[i] = d1 * (float)q - m1;
        mag[i] = fabs((double)d1 * q) + fabs((double)m1);
    }
}

// One block's 32 values as Candle's CPU computes them (f32).
static void dequant_block(QT t, const uint8_t *b, float out[32]) {
    uint16_t d16, m16;
    memcpy(&d16, b, 2);
    const float d = f16f(d16);
    if (t == Q40) {
        for (int j = 0; j < 16; ++j) {
            out[j] = (float)((int)(b[2 + j] & 15) - 8) * d;
            out[j + 16] = (float)((int)(b[2 + j] >> 4) - 8) * d;
        }
    } else if (t == Q41) {
        memcpy(&m16, b + 2, 2);
        const float m = f16f(m16);
        for (int j = 0; j < 16; ++j) {
            out[j] = (float)(b[4 + j] & 15) * d + m;
            out[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    } else if (t == Q50 || t == Q51) {
        // BlockQ5_0: ((q | high bit << 4) - 16) d; BlockQ5_1: (q | high bit << 4) d + m.
        const bool min = t == Q51;
        memcpy(&m16, b + 2, 2);
        const float m = min ? f16f(m16) : 0.0f;
        const uint8_t *qhp = b + (min ? 4 : 2), *qs = qhp + 4;
        const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 | (uint32_t)qhp[3] << 24;
        for (int j = 0; j < 16; ++j) {
            const int x0 = (qs[j] & 15) | (int)(((qh >> j) << 4) & 16);
            const int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 16);
            out[j] = min ? (float)x0 * d + m : (float)(x0 - 16) * d;
            out[j + 16] = min ? (float)x1 * d + m : (float)(x1 - 16) * d;
        }
    } else {
        for (int j = 0; j < 32; ++j) out[j] = (float)(int8_t)b[2 + j] * d;
    }
}

// `blocks` random blocks of type t at wp (random bytes, then random f16 scales and mins of
// `scale_kind`), followed by `padding` zero bytes.
static void random_weights(QT t, uint8_t *wp, size_t blocks, size_t padding, int scale_kind) {
    const size_t bytes = qt_bytes[t], used = blocks * bytes;
    for (size_t i = 0; i < used + padding; ++i) wp[i] = i < used ? (uint8_t)rng() : 0;
    for (size_t b = 0; b < blocks; ++b) {
        uint8_t *p = wp + b * bytes;
        uint16_t d = rand_scale(scale_kind);
        memcpy(p + (t == Q6K ? 208 : 0), &d, 2);
        if (t == Q41 || t == Q51 || t == Q4K || t == Q5K) {
            uint16_t m = rand_scale(scale_kind);
            memcpy(p + 2, &m, 2);
        }
    }
}

// Row r's CPU f32 weight values (nb blocks of type t at wp) times each of the m x rows at xp
// (k floats apart), in double, added to want[i]; mag[i] gets the terms' sizes: with `factored`,
// the per-block factored terms the mat-vec sums (|value| x |x|, k-quants per sub-block), else
// |value x|.
static void f32_reference(QT t, const uint8_t *wp, size_t r, size_t nb, const float *xp, size_t k, size_t m,
                          bool factored, std::vector<double> &want, std::vector<double> &mag) {
    const size_t qk = qt_values[t], bytes = qt_bytes[t];
    for (size_t b = 0; b < nb; ++b) {
        float v[256];
        double vm[256];
        if (qk == 256) {
            dequant_super(t, wp + (r * nb + b) * bytes, v, vm);
        } else {
            dequant_block(t, wp + (r * nb + b) * bytes, v);
            for (int j = 0; j < 32; ++j) vm[j] = fabs((double)v[j]);
        }
        for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < qk; ++j) {
                const double xv = xp[i * k + b * qk + j];
                want[i] += (double)v[j] * xv;
                mag[i] += factored ? vm[j] * fabs(xv) : fabs((double)v[j] * xv);
            }
    }
}

// Checks y (m rows of n outputs) against f32_reference for every weight row, each within 1e-5
// of its terms' sizes: f32 accumulation over k products and, with `factored`, the mat-vec's
// per-block factoring (d * sum, m * sum x; for k-quants per sub-block, so `mag` counts the
// factored terms' sizes).
static void check_f32_rows(QT t, const uint8_t *wp, size_t n, size_t nb, const float *xp, size_t k, size_t m,
                           bool factored, const float *yp) {
    for (size_t r = 0; r < n; ++r) {
        std::vector<double> want(m, 0.0), mag(m, 0.0);
        f32_reference(t, wp, r, nb, xp, k, m, factored, want, mag);
        for (size_t i = 0; i < m; ++i) {
            G.c.checks++;
            const double tol = 1e-5 * mag[i] + 1e-37;
            const float got = yp[i * n + r];
            if (!close(got, want[i], tol))
                G.c.fail("x row %zu row %zu: got %.9g want %.9g (tol %.3g)", i, r, got, want[i], tol);
        }
    }
}

// n rows of k values: Y = X W^T for m x rows (the m-row kernel) against the reference, with the
// launch of `grid_cap` blocks at most (0: candle-rocm's grid) and x at `x_skew` floats past a
// 256-byte boundary.
static void qcase(QT t, size_t n, size_t k, int scale_kind, size_t x_skew, unsigned grid_cap, size_t m = 1) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t];
    const size_t used = n * nb * bytes, padding = MATRIX_ROW_PADDING / qk * bytes;
    Buf w(used + padding, 1), x(m * k, 4, x_skew), y(m * n, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, padding, scale_kind);
    float *xp = x.as<float>();
    for (size_t i = 0; i < m * k; ++i) xp[i] = (float)uni(-4, 4);
    Launch l = launch_shape(n, xp);
    if (grid_cap) l.grid = std::min(l.grid, grid_cap);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s n %zu k %zu m %zu scales %d x+%zu grid %u%s", qt_name[t], n, k, m, scale_kind,
             x_skew, l.grid, l.vec ? " _v" : "");
    G.c.ctx = ctx;
    G.launches++;
    if (!emu::launch(ctx, KS[t][m - 1][l.vec], dim3(l.grid), dim3(l.block), (const uint8_t *)wp,
                     (const float *)xp, y.as<float>(), (unsigned)n, (unsigned)nb)) {
        G.c.fail("launch failed");
        return;
    }
    check_f32_rows(t, wp, n, nb, xp, k, m, true, y.as<float>());
    if (!y.intact(m * n)) G.c.fail("wrote outside y");
}

// ---- 8-bit activations ----------------------------------------------------------------------
// x quantized per 32-value block as Candle CUDA's quantize_q8_1: amax by fmaxf (NaN ignored),
// d = amax / 127, q = round(x / d) (a true division; NaN to 0, saturating), and the f32 sum of
// the block's values added in the xor-butterfly order of a warp reduction (lane i adds lane
// i ^ m for m = 16, 8, 4, 2, 1; lane 0's sum is kept); the x8 layout of qmatvec.hip (k bytes,
// then per block (f16 d | f16 sum << 16, i32 sum of q)).
static void host_quantize_x8(const float *x, size_t k, uint8_t *out) {
    for (size_t b = 0; b < k / 32; ++b) {
        float amax = 0.0f, lanes[32];
        for (int j = 0; j < 32; ++j) {
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
            lanes[j] = x[32 * b + j];
        }
        for (int m = 16; m > 0; m >>= 1) {
            float next[32];
            for (int j = 0; j < 32; ++j) next[j] = lanes[j] + lanes[j ^ m];
            memcpy(lanes, next, sizeof next);
        }
        const float d = amax / 127.0f;
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            const float r = amax == 0.0f ? 0.0f : roundf(x[32 * b + j] / d);
            const int q = r != r ? 0 : (int)std::min(std::max(r, -128.0f), 127.0f);
            out[32 * b + j] = (uint8_t)(int8_t)q;
            sum += q;
        }
        uint32_t ds[2] = {(uint32_t)f16_bits(round_f16(d)) | (uint32_t)f16_bits(round_f16(lanes[0])) << 16,
                          (uint32_t)sum};
        memcpy(out + k + 8 * b, ds, 8);
    }
}

// The f16 d and f16 x sum of x8 block b.
static double x8_d(const uint8_t *x8, size_t k, size_t b) {
    uint32_t w;
    memcpy(&w, x8 + k + 8 * b, 4);
    return f16_value((uint16_t)(w & 0xffffu));
}
static double x8_xsum(const uint8_t *x8, size_t k, size_t b) {
    uint32_t w;
    memcpy(&w, x8 + k + 8 * b, 4);
    return f16_value((uint16_t)(w >> 16));
}

// Runs qmv_quantize_x8 on `rows` rows of x and checks every byte against host_quantize_x8.
static bool quantize_case(const float *x, size_t k, size_t rows, uint8_t *x8, const char *what) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "quantize %s k %zu rows %zu", what, k, rows);
    G.c.ctx = ctx;
    G.launches++;
    const unsigned grid = (unsigned)((k + QMV_BLOCK - 1) / QMV_BLOCK);
    if (!emu::launch(ctx, qmv_quantize_x8, dim3(grid, (unsigned)rows), dim3(QMV_BLOCK), x, x8, (unsigned)k)) {
        G.c.fail("launch failed");
        return false;
    }
    const size_t rb = QMV8_ROW_BYTES(k);
    std::vector<uint8_t> want(rb);
    for (size_t r = 0; r < rows; ++r) {
        host_quantize_x8(x + r * k, k, want.data());
        G.c.checks++;
        if (memcmp(want.data(), x8 + r * rb, rb) != 0) {
            for (size_t i = 0; i < rb; ++i)
                if (want[i] != x8[r * rb + i]) {
                    G.c.fail("row %zu byte %zu: got %u want %u", r, i, x8[r * rb + i], want[i]);
                    break;
                }
            return false;
        }
    }
    return true;
}

// Candle CUDA's quantized product of weight row r (n rows of nb blocks of type t at wp) and the
// x8 row xr (the weights dequantized as the CPU does, times the dequantized x8 values xd; the
// q4 / q5 offsets and min terms use the block's f16 x sum), in double, and the sum of the terms'
// magnitudes.
static void x8_reference(QT t, const uint8_t *wp, size_t r, size_t nb, const uint8_t *xr, size_t k,
                         const std::vector<double> &xd, double &want, double &mag) {
    const size_t qk = qt_values[t], bytes = qt_bytes[t];
    want = 0;
    mag = 0;
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t *blk = wp + (r * nb + b) * bytes;
        float v[256];
        double vm[256];
        if (qk == 256) {
            dequant_super(t, blk, v, vm);
        } else {
            dequant_block(t, blk, v);
            for (int j = 0; j < 32; ++j) vm[j] = fabs((double)v[j]);
        }
        if (t == Q40 || t == Q41 || t == Q50 || t == Q51) {
            // Candle CUDA's q4 / q5 dots: d d8 sum(q) - 8 d sum(x) (q4_0), - 16 d sum(x)
            // (q5_0) or + m sum(x) (q4_1, q5_1), sum(x) being the block's f16 x sum, not
            // d8 sum(q); q the nibble, with its fifth bit from qh for q5.
            const bool min = t == Q41 || t == Q51, q5 = t == Q50 || t == Q51;
            uint16_t d16, m16 = 0;
            memcpy(&d16, blk, 2);
            if (min) memcpy(&m16, blk + 2, 2);
            const double d = f16f(d16), xs = x8_xsum(xr, k, b);
            const double off = min ? f16f(m16) * xs : (q5 ? -16.0 : -8.0) * d * xs;
            uint32_t qh = 0;
            if (q5) memcpy(&qh, blk + (min ? 4 : 2), 4);
            const uint8_t *qs = blk + (min ? 4 : 2) + (q5 ? 4 : 0);
            for (int j = 0; j < 32; ++j) {
                const int nib = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
                want += d * nib * xd[b * qk + j];
                mag += fabs(d * nib * xd[b * qk + j]);
            }
            want += off;
            mag += fabs(off);
            continue;
        }
        for (size_t j = 0; j < qk; ++j) {
            want += (double)v[j] * xd[b * qk + j];
            mag += vm[j] * fabs(xd[b * qk + j]);
        }
    }
}

// Y = X W^T for m x rows with the x8 kernels against Candle CUDA's quantized product (the
// weights dequantized as the CPU does, times the dequantized x8 values; the q4 / q5 offsets and
// min terms use the block's f16 x sum). With m > 1, every x row's results must also be
// bit-identical to the one-row kernel's on that row alone (the order of the sums is the same).
static void q8case(QT t, size_t n, size_t k, int scale_kind, unsigned grid_cap, size_t m = 1) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t], rb = QMV8_ROW_BYTES(k);
    const size_t used = n * nb * bytes, padding = MATRIX_ROW_PADDING / qk * bytes;
    Buf w(used + padding, 1), x(m * k, 4), x8(m * rb, 1), y(m * n, 4), y1(n, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, padding, scale_kind);
    float *xp = x.as<float>();
    for (size_t i = 0; i < m * k; ++i) xp[i] = (float)uni(-4, 4) * (i % k % 96 < 32 ? 1e-3f : 1.0f);
    if (!quantize_case(xp, k, m, x8.as<uint8_t>(), qt_name[t])) return;
    if (!x8.intact(m * rb)) G.c.fail("quantize wrote outside x8");
    const uint8_t *x8p = x8.as<uint8_t>();
    Launch l = launch_shape(n, xp);
    if (grid_cap) l.grid = std::min(l.grid, grid_cap);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "x8 %s n %zu k %zu m %zu scales %d grid %u", qt_name[t], n, k, m, scale_kind, l.grid);
    G.c.ctx = ctx;
    G.launches++;
    if (!emu::launch(ctx, K8[t][m - 1], dim3(l.grid), dim3(l.block), (const uint8_t *)wp, x8p, y.as<float>(),
                     (unsigned)n, (unsigned)nb)) {
        G.c.fail("launch failed");
        return;
    }
    const float *yp = y.as<float>();
    for (size_t i = 0; i < m; ++i) {
        const uint8_t *xr = x8p + i * rb;
        if (m > 1) {
            // The same row alone through the one-row kernel: identical bits.
            G.launches++;
            if (!emu::launch(ctx, K8[t][0], dim3(l.grid), dim3(l.block), (const uint8_t *)wp, xr, y1.as<float>(),
                             (unsigned)n, (unsigned)nb)) {
                G.c.fail("launch failed");
                return;
            }
            G.c.checks++;
            if (memcmp(y1.as<float>(), yp + i * n, n * 4) != 0) G.c.fail("x row %zu differs from the one-row kernel", i);
        }
        std::vector<double> xd(k);
        for (size_t j = 0; j < k; ++j) xd[j] = x8_d(xr, k, j / 32) * (int8_t)xr[j];
        for (size_t r = 0; r < n; ++r) {
            double want = 0, mag = 0;
            x8_reference(t, wp, r, nb, xr, k, xd, want, mag);
            G.c.checks++;
            const double tol = 1e-5 * mag + 1e-37;
            const float got = yp[i * n + r];
            if (!close(got, want, tol))
                G.c.fail("x row %zu row %zu: got %.9g want %.9g (tol %.3g)", i, r, got, want, tol);
        }
    }
    if (!y.intact(m * n)) G.c.fail("wrote outside y");
}

// The quantizer on special values: zero blocks, signed zeros, NaN, infinities, subnormals,
// huge values, exact halves (rounding away from zero), several rows.
static void quantize_specials() {
    const size_t k = 32 * 12, rows = 3;
    Buf x(k * rows, 4), x8(QMV8_ROW_BYTES(k) * rows, 1);
    float *xp = x.as<float>();
    for (size_t i = 0; i < k * rows; ++i) xp[i] = (float)uni(-2, 2);
    for (int j = 0; j < 32; ++j) xp[j] = 0.0f;                   // block 0: zeros
    for (int j = 0; j < 32; ++j) xp[32 + j] = j % 2 ? -0.0f : 0.0f;
    xp[64 + 3] = NAN;                                          // block 2: a NaN
    xp[96 + 5] = INFINITY;                                     // block 3: +inf
    xp[128 + 7] = -INFINITY;                                   // block 4: -inf
    for (int j = 0; j < 32; ++j) xp[160 + j] = 1e-40f * (j - 16); // block 5: subnormals
    for (int j = 0; j < 32; ++j) xp[192 + j] = 3e38f * (j % 2 ? 1 : -1) / (1 + j);
    // halves: amax 127, so d = 1 and q = round(x): 2.5 to 3 and -2.5 to -3, away from zero.
    for (int j = 0; j < 32; ++j) xp[224 + j] = j == 0 ? 127.0f : (float)(j - 16) + 0.5f;
    quantize_case(xp, k, rows, x8.as<uint8_t>(), "specials");
    if (!x8.intact(QMV8_ROW_BYTES(k) * rows)) G.c.fail("quantize wrote outside x8");
}

// Q8_1 weights dequantized (qmv_dequantize_q8_1_*): random blocks (random d, including the
// extreme f16 scales, and quants), `count` values of them (not always whole blocks), a grid
// smaller than the values (the grid-stride loop); every value against qs[j] * d in f32 (and
// that rounded to f16), nothing written past `count`.
static void dequant_q8_1_case(size_t count, unsigned grid) {
    const size_t nb = (count + 31) / 32;
    Buf w(nb * 36, 1), y32(count, 4), y16(count, 2);
    uint8_t *wp = w.as<uint8_t>();
    for (size_t b = 0; b < nb; ++b) {
        const uint16_t d = rand_scale(1);
        memcpy(wp + 36 * b, &d, 2);
        const uint16_t s = (uint16_t)rng();
        memcpy(wp + 36 * b + 2, &s, 2);
        for (int j = 0; j < 32; ++j) wp[36 * b + 4 + j] = (uint8_t)rng();
    }
    char ctx[96];
    snprintf(ctx, sizeof ctx, "dequantize q8_1 count %zu grid %u", count, grid);
    G.c.ctx = ctx;
    G.launches += 2;
    const unsigned long long n = count;
    if (!emu::launch(ctx, qmv_dequantize_q8_1_f32, dim3(grid), dim3(QMV_BLOCK), (const uint8_t *)wp,
                     y32.as<float>(), n) ||
        !emu::launch(ctx, qmv_dequantize_q8_1_f16, dim3(grid), dim3(QMV_BLOCK), (const uint8_t *)wp,
                     y16.as<__half>(), n)) {
        G.c.fail("launch failed");
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        uint16_t d;
        memcpy(&d, wp + 36 * (i / 32), 2);
        const float want = (float)(int8_t)wp[36 * (i / 32) + 4 + i % 32] * f16f(d);
        uint16_t got16;
        memcpy(&got16, y16.as<uint16_t>() + i, 2);
        G.c.checks += 2;
        if (memcmp(&want, y32.as<float>() + i, 4) != 0) G.c.fail("f32 value %zu: got %.9g want %.9g", i, y32.as<float>()[i], want);
        if (got16 != f16_bits(round_f16(want))) G.c.fail("f16 value %zu: got %04x want %04x", i, got16, f16_bits(round_f16(want)));
    }
    if (!y32.intact(count) || !y16.intact(count)) G.c.fail("wrote past count");
}

// qmv_dequantize_<T>_f16 on `blocks` random blocks (extreme scales when scale_kind is 1)
// against the CPU's f32 values rounded to f16: equal, or one f16 step apart where the f32 value
// sits at a rounding boundary (the kernel may fuse d1 q - m1 into one operation).
typedef void (*DFn)(const uint8_t *, __half *, unsigned long long);
static const DFn KD[NQT] = {qmv_dequantize_q4_0_f16, qmv_dequantize_q4_1_f16, qmv_dequantize_q8_0_f16,
                            qmv_dequantize_q4_K_f16, qmv_dequantize_q5_K_f16, qmv_dequantize_q6_K_f16};
static void dequant_f16_case(QT t, size_t blocks, int scale_kind, unsigned grid) {
    const size_t qk = qt_values[t], bytes = qt_bytes[t], count = blocks * qk;
    Buf w(blocks * bytes, 1), y(count, 2);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, blocks, 0, scale_kind);
    char ctx[96];
    snprintf(ctx, sizeof ctx, "dequantize %s f16 blocks %zu grid %u", qt_name[t], blocks, grid);
    G.c.ctx = ctx;
    G.launches++;
    if (!emu::launch(ctx, KD[t], dim3(grid), dim3(QMV_BLOCK), (const uint8_t *)wp, y.as<__half>(),
                     (unsigned long long)(count / 8))) {
        G.c.fail("launch failed");
        return;
    }
    for (size_t b = 0; b < blocks; ++b) {
        float v[256];
        double mag[256];
        if (qk == 256)
            dequant_super(t, wp + b * bytes, v, mag);
        else
            dequant_block(t, wp + b * bytes, v);
        for (size_t j = 0; j < qk; ++j) {
            uint16_t got;
            memcpy(&got, y.as<uint16_t>() + b * qk + j, 2);
            const uint16_t want = f16_bits(round_f16(v[j]));
            G.c.checks++;
            if (got == want) continue;
            const double g = f16_value(got), wv = f16_value(want);
            if (!(fabs(g - wv) <= fabs(wv) * 0x1p-10 + 0x1p-24))
                G.c.fail("value %zu: got %04x (%.6g) want %04x (%.6g)", b * qk + j, got, g, want, wv);
        }
    }
    if (!y.intact(count)) G.c.fail("wrote outside y");
}

// qmm_<T>_m<MT> (x8 false) or qmm8_<T>_m<MT> (x8 true: the x rows first rounded by
// qmv_quantize_x8, checked against the host's quantizer): Y = X W^T for m x rows over `slices`
// k slices of `cps` chunks (candle-rocm's `qmm_slices`), then qmm_reduce when there are several,
// against the references of `qcase` (f32) or `q8case` (`x8_reference`); the slices' partial
// buffer and y are poisoned first, so an unwritten output shows.
typedef void (*QmmFn)(const uint8_t *, const float *, float *, unsigned, unsigned, unsigned, unsigned);
typedef void (*Qmm8Fn)(const uint8_t *, const uint8_t *, float *, unsigned, unsigned, unsigned, unsigned);
#define QMM_FNS(T) {qmm_##T##_m16, qmm_##T##_m32, qmm_##T##_m64}
#define QMM8_FNS(T) {qmm8_##T##_m16, qmm8_##T##_m32, qmm8_##T##_m64}
static const QmmFn KM[NALL][3] = {QMM_FNS(q4_0), QMM_FNS(q4_1), QMM_FNS(q8_0), QMM_FNS(q4_K),
                                  QMM_FNS(q5_K), QMM_FNS(q6_K), QMM_FNS(q5_0), QMM_FNS(q5_1)};
static const Qmm8Fn KM8[NALL][3] = {QMM8_FNS(q4_0), QMM8_FNS(q4_1), QMM8_FNS(q8_0), QMM8_FNS(q4_K),
                                    QMM8_FNS(q5_K), QMM8_FNS(q6_K), QMM8_FNS(q5_0), QMM8_FNS(q5_1)};
static void qmm_case(QT t, size_t n, size_t k, size_t m, int mt_index, size_t cps, int scale_kind, bool x8) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t], mt = 16u << mt_index;
    const size_t rb = QMV8_ROW_BYTES(k), chunks = k / 32, slices = (chunks + cps - 1) / cps;
    Buf w(n * nb * bytes, 1), x(m * k, 4), x8b(m * rb, 1), part(slices * m * n, 4), y(m * n, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, 0, scale_kind);
    float *xp = x.as<float>();
    // For 8-bit rows, some blocks of small values (their scales far from the others').
    for (size_t i = 0; i < m * k; ++i) xp[i] = (float)uni(-4, 4) * (x8 && i % k % 96 < 32 ? 1e-3f : 1.0f);
    if (x8 && !quantize_case(xp, k, m, x8b.as<uint8_t>(), qt_name[t])) return;
    const uint8_t *x8p = x8b.as<uint8_t>();
    float *pp = part.as<float>(), *yp = y.as<float>();
    for (size_t i = 0; i < slices * m * n; ++i) pp[i] = NAN;
    for (size_t i = 0; i < m * n; ++i) yp[i] = NAN;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s %s n %zu k %zu m %zu mt %zu cps %zu scales %d", x8 ? "qmm8" : "qmm", qt_name[t], n,
             k, m, mt, cps, scale_kind);
    G.c.ctx = ctx;
    G.launches++;
    float *dst = slices == 1 ? yp : pp;
    dim3 grid((unsigned)((n + QMM_TN - 1) / QMM_TN), (unsigned)((m + mt - 1) / mt), (unsigned)slices);
    const bool ok = x8 ? emu::launch(ctx, KM8[t][mt_index], grid, dim3(QMM_BLOCK), (const uint8_t *)wp, x8p, dst,
                                     (unsigned)n, (unsigned)k, (unsigned)m, (unsigned)cps)
                       : emu::launch(ctx, KM[t][mt_index], grid, dim3(QMM_BLOCK), (const uint8_t *)wp,
                                     (const float *)xp, dst, (unsigned)n, (unsigned)k, (unsigned)m, (unsigned)cps);
    if (!ok) {
        G.c.fail("launch failed");
        return;
    }
    if (slices > 1) {
        G.launches++;
        if (!emu::launch(ctx, qmm_reduce, dim3(3), dim3(64), (const float *)pp, yp, (unsigned long long)(m * n),
                         (unsigned)slices)) {
            G.c.fail("reduce launch failed");
            return;
        }
    }
    for (size_t i = 0; i < m; ++i) {
        std::vector<double> xd(k);
        if (x8)
            for (size_t j = 0; j < k; ++j) xd[j] = x8_d(x8p + i * rb, k, j / 32) * (int8_t)x8p[i * rb + j];
        for (size_t r = 0; r < n; ++r) {
            double want = 0, mag = 0;
            if (x8) {
                x8_reference(t, wp, r, nb, x8p + i * rb, k, xd, want, mag);
            } else {
                // The CPU's f32 weight values times x, in double.
                std::vector<double> w1(1, 0.0), m1(1, 0.0);
                f32_reference(t, wp, r, nb, xp + i * k, k, 1, false, w1, m1);
                want = w1[0];
                mag = m1[0];
            }
            G.c.checks++;
            // One f32 chain per slice of exact products (f32) or per-block terms (x8).
            const double tol = 1e-5 * mag + 1e-37;
            const float got = yp[i * n + r];
            if (!close(got, want, tol))
                G.c.fail("x row %zu row %zu: got %.9g want %.9g (tol %.3g)", i, r, got, want, tol);
        }
    }
    if (!y.intact(m * n) || !part.intact(slices * m * n)) G.c.fail("wrote outside y");
}

// qmv_dequantize_q5_0_f16 / _q5_1_f16 on `blocks` random blocks against candle-core's CPU
// `to_float` (BlockQ5_0: ((q | high bit << 4) - 16) d; BlockQ5_1: (q | high bit << 4) d + m),
// rounded to f16: equal, or one f16 step apart where a fused multiply-add rounds differently.
static void dequant_q5_case(bool q5_1, size_t blocks, int scale_kind, unsigned grid) {
    const size_t bytes = q5_1 ? 24 : 22, count = blocks * 32;
    Buf w(blocks * bytes, 1), y(count, 2);
    uint8_t *wp = w.as<uint8_t>();
    for (size_t i = 0; i < blocks * bytes; ++i) wp[i] = (uint8_t)rng();
    for (size_t b = 0; b < blocks; ++b) {
        const uint16_t d = rand_scale(scale_kind), m = rand_scale(scale_kind);
        memcpy(wp + b * bytes, &d, 2);
        if (q5_1) memcpy(wp + b * bytes + 2, &m, 2);
    }
    char ctx[96];
    snprintf(ctx, sizeof ctx, "dequantize %s f16 blocks %zu grid %u", q5_1 ? "q5_1" : "q5_0", blocks, grid);
    G.c.ctx = ctx;
    G.launches++;
    if (!emu::launch(ctx, q5_1 ? qmv_dequantize_q5_1_f16 : qmv_dequantize_q5_0_f16, dim3(grid), dim3(QMV_BLOCK),
                     (const uint8_t *)wp, y.as<__half>(), (unsigned long long)(count / 8))) {
        G.c.fail("launch failed");
        return;
    }
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t *blk = wp + b * bytes;
        uint16_t d16, m16 = 0;
        memcpy(&d16, blk, 2);
        if (q5_1) memcpy(&m16, blk + 2, 2);
        const uint8_t *qhp = blk + (q5_1 ? 4 : 2), *qs = qhp + 4;
        const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 | (uint32_t)qhp[3] << 24;
        for (int j = 0; j < 16; ++j) {
            const int x0 = (qs[j] & 15) | (int)(((qh >> j) << 4) & 16);
            const int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 16);
            const float d = f16f(d16), m = f16f(m16);
            const float v0 = q5_1 ? (float)x0 * d + m : (float)(x0 - 16) * d;
            const float v1 = q5_1 ? (float)x1 * d + m : (float)(x1 - 16) * d;
            const int idx[2] = {j, j + 16};
            const float want_f[2] = {v0, v1};
            for (int h = 0; h < 2; ++h) {
                uint16_t got;
                memcpy(&got, y.as<uint16_t>() + b * 32 + idx[h], 2);
                const uint16_t want = f16_bits(round_f16(want_f[h]));
                G.c.checks++;
                if (got == want) continue;
                const double g = f16_value(got), wv = f16_value(want);
                if (!(fabs(g - wv) <= fabs(wv) * 0x1p-10 + 0x1p-24))
                    G.c.fail("value %zu: got %04x (%.6g) want %04x (%.6g)", b * 32 + idx[h], got, g, want, wv);
            }
        }
    }
    if (!y.intact(count)) G.c.fail("wrote outside y");
}

// qmr_<T>_m<MT>: Y = X W^T for m x rows in tiles of MT, against the CPU's f32 weight values
// times x (in double); y poisoned first, so an unwritten output shows.
typedef void (*QmrFn)(const uint8_t *, const float *, float *, unsigned, unsigned, unsigned);
#define QMR_FNS(T) {qmr_##T##_m8, qmr_##T##_m16}
static const QmrFn KR[NALL][2] = {QMR_FNS(q4_0), QMR_FNS(q4_1), QMR_FNS(q8_0), QMR_FNS(q4_K),
                                  QMR_FNS(q5_K), QMR_FNS(q6_K), QMR_FNS(q5_0), QMR_FNS(q5_1)};
static void qmr_case(QT t, size_t n, size_t k, size_t m, int mt_index, int scale_kind) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t], mt = 8u << mt_index;
    Buf w(n * nb * bytes, 1), x(m * k, 4), y(m * n, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, 0, scale_kind);
    float *xp = x.as<float>(), *yp = y.as<float>();
    for (size_t i = 0; i < m * k; ++i) xp[i] = (float)uni(-4, 4);
    for (size_t i = 0; i < m * n; ++i) yp[i] = NAN;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "qmr %s n %zu k %zu m %zu mt %zu scales %d", qt_name[t], n, k, m, mt, scale_kind);
    G.c.ctx = ctx;
    G.launches++;
    dim3 grid((unsigned)((n + QMR_ROWS - 1) / QMR_ROWS), (unsigned)((m + mt - 1) / mt));
    if (!emu::launch(ctx, KR[t][mt_index], grid, dim3(QMR_BLOCK), (const uint8_t *)wp, (const float *)xp, yp,
                     (unsigned)n, (unsigned)k, (unsigned)m)) {
        G.c.fail("launch failed");
        return;
    }
    check_f32_rows(t, wp, n, nb, xp, k, m, false, yp);
    if (!y.intact(m * n)) G.c.fail("wrote outside y");
}

static void test_port() {
    G.c.ctx = "port";
    float *aligned = (float *)(uintptr_t)256, *skewed = (float *)(uintptr_t)260;
    Launch a = launch_shape(1, aligned), b = launch_shape(17, skewed), c = launch_shape((size_t)1 << 30, aligned);
    if (a.grid != 1 || !a.vec || b.grid != (17 + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK || b.vec || c.grid != MAX_GRID)
        G.c.fail("launch shape port");
}

// qmatvec_decode_test.cpp includes this driver for its references, with a main of its own.
#ifndef QMV_TEST_NO_MAIN
int main() {
    test_port();
    for (int t : {Q40, Q41, Q80, Q50, Q51}) {
        const QT q = (QT)t;
        // Small shapes: every n around the rows per block, k = 32 (one block per row: 31 idle
        // lanes) up to a few blocks per lane; ordinary and extreme scales; x aligned or not.
        const size_t ns[] = {1, 2, 3, 15, 16, 17, 33};
        const size_t ks[] = {32, 64, 96, 1024, 32 * 33, 32 * 70};
        for (size_t n : ns)
            for (size_t k : ks) {
                if (n * k > 33 * 1024) continue;
                qcase(q, n, k, (int)(rng() % 2), rng() % 3 == 0 ? 1 + rng() % 3 : 0, 0);
            }
        // Long rows and more rows: several blocks per lane, blocks at both 4-byte phases.
        qcase(q, 5, 32 * 200, 1, 0, 0);
        qcase(q, 37, 256, 1, 2, 0);
        // The grid-stride loop: fewer blocks than rows need.
        qcase(q, 70, 128, 1, 0, 2);
        qcase(q, 49, 96, 0, 3, 1);
    }
    for (int t = Q4K; t < NQT; ++t) {
        const QT q = (QT)t;
        // nb 1 (most lanes of a group idle), 2, 16 (several super-blocks per lane) and 21
        // (lanes with uneven counts), n around the rows per block; with nb odd, q6_K rows
        // start at both 4-byte phases.
        const size_t ns[] = {1, 2, 3, 15, 16, 17, 33};
        const size_t nbs[] = {1, 2, 16, 21};
        for (size_t n : ns)
            for (size_t nb : nbs) {
                if (n * nb > 17 * 21) continue;
                qcase(q, n, 256 * nb, (int)(rng() % 2), rng() % 3 == 0 ? 1 + rng() % 3 : 0, 0);
            }
        // Many rows (several blocks), a long row, and the grid-stride loop.
        qcase(q, 300, 256, 1, 0, 0);
        qcase(q, 131, 512, 0, 2, 0);
        qcase(q, 3, 256 * 64, 1, 0, 0);
        qcase(q, 70, 768, 1, 0, 2);
        qcase(q, 49, 256, 0, 3, 1);
    }
    // The 8-bit-activation kernels: the same shapes' kinds (n around the rows per block, one
    // block per row, many blocks per lane, both 4-byte phases, the grid-stride loop).
    quantize_specials();
    for (int t = 0; t < NALL; ++t) {
        const QT q = (QT)t;
        const size_t qk = qt_values[t];
        const size_t ns[] = {1, 2, 3, 15, 16, 17, 33};
        const size_t nbs[] = {1, 2, 3, 21};
        for (size_t n : ns)
            for (size_t nb : nbs)
                if (n * nb * qk <= 33 * 1024) q8case(q, n, qk * nb, (int)(rng() % 2), 0);
        q8case(q, 5, qk * 70, 1, 0);
        q8case(q, 37, qk * 3, 1, 0);
        q8case(q, 70, qk * 4, 1, 2);
        q8case(q, 49, qk * 3, 0, 1);
    }
    // Several x rows per launch (m = 2..8): every kernel, n around the rows per block, one
    // block per row and several per lane, x aligned or not, the grid-stride loop.
    for (int t = 0; t < NALL; ++t) {
        const QT q = (QT)t;
        const size_t qk = qt_values[t];
        for (size_t m = 2; m <= max_rows(t); ++m) {
            const size_t n = m % 3 == 0 ? 17 : m % 3 == 1 ? 3 : 33;
            const size_t nb = qk == 32 ? (m % 2 ? 70 : 1) : (m % 2 ? 5 : 1);
            // x 16-byte aligned (the _v kernel) and not.
            qcase(q, n, qk * nb, (int)(m % 2), 0, m == 7 ? 1 : 0, m);
            qcase(q, m + 1, qk * 2, 1, 1 + m % 3, 0, m);
            q8case(q, n, qk * (nb > 1 ? 3 : 1), (int)(m % 2), m == 7 ? 1 : 0, m);
        }
    }
    // Dequantize to f16: one block, many blocks over a small grid (the stride loop), extreme
    // scales.
    for (int t = 0; t < NQT; ++t) {
        dequant_f16_case((QT)t, 1, 0, 1);
        dequant_f16_case((QT)t, 37, 1, 2);
        dequant_f16_case((QT)t, 300, 0, 64);
    }
    for (bool q5_1 : {false, true}) {
        dequant_q5_case(q5_1, 1, 0, 1);
        dequant_q5_case(q5_1, 37, 1, 2);
        dequant_q5_case(q5_1, 300, 0, 64);
    }
    dequant_q8_1_case(32 * 40, 3);
    dequant_q8_1_case(32 * 7 + 5, 1);
    dequant_q8_1_case(1, 1);
    // The matrix-matrix kernels: every type and x-row tile; n around the 64-row tile (one row,
    // a partial tile, several); m below, at and past the tile (several y tiles); one slice
    // (y written directly) and several (the reduce), a last slice shorter than the others.
    for (int t = 0; t < NALL; ++t) {
        const QT q = (QT)t;
        const size_t qk = qt_values[t];
        for (int mi = 0; mi < 3; ++mi) {
            const size_t mt = 16u << mi;
            for (bool x8 : {false, true}) {
                qmm_case(q, 1, qk, 1, mi, 1, 0, x8);
                qmm_case(q, 65, qk * (qk == 32 ? 5 : 2), mt - 7, mi, qk == 32 ? 2 : 3, (int)(mi % 2), x8);
                qmm_case(q, 64, qk * (qk == 32 ? 4 : 1), mt + 3, mi, qk == 32 ? 4 : 8, 1, x8);
                qmm_case(q, 130, qk * (qk == 32 ? 3 : 1), 9 + mi, mi, 1, 0, x8);
            }
        }
    }
    // The register-tiled kernels: every type and tile; n around the 16-row block (one row, a
    // partial block, several), m below, at and past the tile, k of one block up to several
    // pieces per lane (k / 8 past 64).
    for (int t = 0; t < NALL; ++t) {
        const QT q = (QT)t;
        const size_t qk = qt_values[t];
        for (int mi = 0; mi < 2; ++mi) {
            const size_t mt = 8u << mi;
            qmr_case(q, 1, qk, 1, mi, 0);
            qmr_case(q, 17, qk * (qk == 32 ? 19 : 3), mt - 3, mi, 1);
            qmr_case(q, 40, qk * (qk == 32 ? 4 : 1), mt + 5, mi, (int)(t % 2));
            qmr_case(q, 16, qk * 2, 2 * mt, mi, 0);
        }
    }
    // Every kernel ran at least once.
    for (int t = 0; t < NALL; ++t)
        for (int v = 0; v < 2; ++v)
            for (int m = 0; m < (int)max_rows(t); ++m)
                if (!emu::S.launched.count((const void *)KS[t][m][v]) ||
                    !emu::S.launched.count((const void *)K8[t][m])) {
                    G.c.ctx = "coverage";
                    G.c.fail("%s m %d%s never ran", qt_name[t], m + 1, v ? "_v" : "");
                }
    for (int t = 0; t < NALL; ++t)
        for (int mi = 0; mi < 3; ++mi)
            if (!emu::S.launched.count((const void *)KM[t][mi]) ||
                !emu::S.launched.count((const void *)KM8[t][mi])) {
                G.c.ctx = "coverage";
                G.c.fail("qmm/qmm8 %s m%d never ran", qt_name[t], 16 << mi);
            }
    for (int t = 0; t < NALL; ++t)
        for (int mi = 0; mi < 2; ++mi)
            if (!emu::S.launched.count((const void *)KR[t][mi])) {
                G.c.ctx = "coverage";
                G.c.fail("qmr %s m%d never ran", qt_name[t], 8 << mi);
            }
    printf("qmatvec: %ld launches, %ld checks, bad=%ld\n", G.launches, G.c.checks, G.c.bad);
    return G.c.bad != 0;
}
#endif
