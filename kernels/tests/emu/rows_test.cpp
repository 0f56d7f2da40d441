// Runs kernels/hip/rows.hip on the host through emu.h and checks it against host references of
// Candle's CPU semantics: last-dim sum/max/min/argmax/argmin (NaN, -inf, ties), middle-dim
// reductions, fused softmax / RMS norm / layer norm (register path for every K and the two-pass
// path), the rotary-embedding vector kernels (rope and rope_i, with and without a table per
// batch entry), group norm (both launches; one block and several a group, packs and elements,
// a misaligned view), and the tiled transpose with batches and offsets. Launch shapes come from a
// line-for-line port of candle-rocm/src/launch/rows.rs (RowShape::new, fused_k, the vector-path and
// grid rules). Built three ways by kernels/tests/kernels_on_cpu.rs: the CUDA path (wave 32,
// __shfl_xor_sync) and the AMD path (ds_bpermute) with wave 32 and wave 64.
// Prints bad=<mismatches> and exits non-zero on any mismatch.
#include "emu.h"

#include "check.h"

// RW_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef RW_SOURCE
#define RW_SOURCE "../../hip/rows.hip"
#endif
#include RW_SOURCE

using namespace chk;

// ---- port of candle-rocm/src/launch/rows.rs -----------------------------------------------------
static const size_t BLOCK = 256, MAX_GROUP = 32, BLOCK_STEP = 64, MAX_BLOCKS = 1 << 20, MAX_REG_VALUES = 32;
static const size_t KS[4] = {1, 2, 4, 8};
static const size_t TILE = 32, TILE_ROWS = 8, COL_X = 64, COL_Y = 4;
static_assert(BLOCK == RW_BLOCK && TILE == RW_TILE && TILE_ROWS == RW_TROWS && COL_X == RW_CX && COL_Y == RW_CY,
              "constants");

struct RowShape {
    unsigned tpr, block, grid;
};
static size_t next_pow2(size_t x) {
    size_t p = 1;
    while (p < x) p <<= 1;
    return p;
}
static RowShape row_shape(size_t rows, size_t units, size_t per_thread) {
    units = std::max<size_t>(units, 1);
    size_t tpr, rpb;
    if (units <= MAX_GROUP) {
        tpr = next_pow2(units);
        rpb = BLOCK / tpr;
    } else {
        size_t threads = (units + std::max<size_t>(per_thread, 1) - 1) / std::max<size_t>(per_thread, 1);
        size_t block = (threads + BLOCK_STEP - 1) / BLOCK_STEP * BLOCK_STEP;
        block = std::min(std::max(block, BLOCK_STEP), BLOCK);
        tpr = block;
        rpb = 1;
    }
    size_t block = rpb > 1 ? BLOCK : tpr;
    size_t grid = std::min(std::max<size_t>((rows + rpb - 1) / rpb, 1), MAX_BLOCKS);
    return RowShape{(unsigned)tpr, (unsigned)block, (unsigned)grid};
}
static const size_t FUSED_THREADS_16 = 128;
static long fused_k_within(size_t chunk_elems, size_t units, size_t threads) {
    for (size_t k : KS)
        if (k * chunk_elems <= MAX_REG_VALUES && (units + k - 1) / k <= threads) return (long)k;
    return -1;
}
static long fused_k(size_t chunk_elems, size_t units) {
    long narrow = chunk_elems == 8 ? fused_k_within(chunk_elems, units, FUSED_THREADS_16) : -1;
    return narrow > 0 ? narrow : fused_k_within(chunk_elems, units, BLOCK);
}
static bool aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ---- kernel tables ---------------------------------------------------------------------------
enum Red { SUM, MAX, MIN, ARGMAX, ARGMIN };
static const char *red_name[] = {"sum", "max", "min", "argmax", "argmin"};
struct DtK {
    void *r[5][2]; // last-dim reductions, [scalar, _v]
    void *c[5];    // middle-dim
    void *f[3][5][2]; // fused op, K index (0, 1, 2, 4, 8), [scalar, _v]
};
#define RK(op, TN) {(void *)&r##op##_##TN, (void *)&r##op##_##TN##_v}
#define FK(op, TN, K) {(void *)&op##_##TN##_##K, (void *)&op##_##TN##_##K##_v}
#define FK5(op, TN) {FK(op, TN, 0), FK(op, TN, 1), FK(op, TN, 2), FK(op, TN, 4), FK(op, TN, 8)}
#define FK4(op, TN) {FK(op, TN, 0), FK(op, TN, 1), FK(op, TN, 2), FK(op, TN, 4), {nullptr, nullptr}}
#define DTK(TN, FKN)                                                                                                   \
    {{RK(sum, TN), RK(max, TN), RK(min, TN), RK(argmax, TN), RK(argmin, TN)},                                          \
     {(void *)&csum_##TN, (void *)&cmax_##TN, (void *)&cmin_##TN, (void *)&cargmax_##TN, (void *)&cargmin_##TN},      \
     {FKN(rsoftmax, TN), FKN(rrmsnorm, TN), FKN(rlayernorm, TN)}}
static const DtK KT[4] = {DTK(f32, FK5), DTK(f16, FK4), DTK(bf16, FK4), DTK(f64, FK5)};
static const DT DTS[4] = {F32, F16, BF16, F64};
static int k_index(long k) { return k <= 0 ? 0 : k == 1 ? 1 : k == 2 ? 2 : k == 4 ? 3 : 4; }

struct Ctx {
    Counter c;
    long launches = 0;
} G;
static std::mt19937_64 rng(7);
static double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// Kernel pointer types (T the storage type: float, __half, __nv_bfloat16, double).
template <typename T> using RedFn = void (*)(const T *, T *, size_t, size_t, unsigned);
template <typename T> using ArgFn = void (*)(const T *, uint32_t *, size_t, size_t, unsigned);
template <typename T> using ColFn = void (*)(const T *, T *, size_t, size_t, size_t);
template <typename T> using ColArgFn = void (*)(const T *, uint32_t *, size_t, size_t, size_t);
template <typename T>
using FusedFn = void (*)(const T *, T *, const T *, const T *, size_t, size_t, unsigned, float);

// ---- row values ----------------------------------------------------------------------------------
// Row r's values by kind: plain, many ties, NaN inside, NaN first, all -inf, -inf and NaN with
// one finite value last, +inf inside, all equal.
static void fill_row(DT d, unsigned char *p, size_t start, size_t cols, int kind) {
    for (size_t j = 0; j < cols; ++j) {
        double v;
        switch (kind) {
        case 1: v = (double)((int)(rng() % 7) - 3); break;
        case 4: v = -INFINITY; break;
        case 5: v = j + 1 == cols ? 2.0 : (rng() % 2 ? -INFINITY : NAN); break;
        case 7: v = 1.5; break;
        default: v = uni(-4, 4);
        }
        if (kind == 2 && rng() % 5 == 0 && j > 0) v = NAN;
        if (kind == 3 && j == 0) v = NAN;
        if (kind == 6 && rng() % 9 == 0) v = INFINITY;
        store(d, p, start + j, v);
    }
}

// Candle's CPU rule: the first element is the start value; an element replaces it only when
// strictly greater (smaller).
static void ext_ref(const std::vector<double> &x, bool max, double &val, uint32_t &idx) {
    val = x[0];
    idx = 0;
    for (size_t i = 1; i < x.size(); ++i)
        if (max ? val < x[i] : val > x[i]) {
            val = x[i];
            idx = (uint32_t)i;
        }
}

static double sum_tol(DT d, double abs_sum, double want) {
    double r = d == F64 ? 1e-13 : 1e-5;
    double out_ulp = d == F16 ? ldexp(1.0, -10) : d == BF16 ? ldexp(1.0, -7) : 0;
    return r * abs_sum + out_ulp * fabs(want) + (d == F16 ? ldexp(1.0, -24) : 1e-300);
}

template <typename T>
static void check_reduce_out(DT d, Red op, const std::vector<std::vector<double>> &xs, const Buf &out, size_t outs) {
    for (size_t r = 0; r < outs; ++r) {
        const std::vector<double> &x = xs[r];
        G.c.checks++;
        if (op == SUM) {
            double s = 0, a = 0;
            for (double v : x) {
                s += v;
                a += fabs(v);
            }
            double got = load(d, out.p, r);
            if (!close(got, round_to(d, s), sum_tol(d, a, s)))
                G.c.fail("row %zu: sum got %.9g want %.9g", r, got, s);
            continue;
        }
        double val;
        uint32_t idx;
        ext_ref(x, op == MAX || op == ARGMAX, val, idx);
        if (op == ARGMAX || op == ARGMIN) {
            uint32_t got = ((const uint32_t *)out.p)[r];
            if (got != idx) G.c.fail("row %zu: %s got %u want %u", r, red_name[op], got, idx);
        } else {
            double got = load(d, out.p, r);
            if (!same(got, val)) G.c.fail("row %zu: %s got %.9g want %.9g", r, red_name[op], got, val);
        }
    }
}

// ---- last-dim reductions -------------------------------------------------------------------------
// grid > 0: that many blocks instead of rows.rs's (the grid-stride loop over rows, which rows.rs
// reaches past MAX_BLOCKS rows).
template <typename T> static void reduce_rows(int di, Red op, size_t rows, size_t cols, size_t start, unsigned grid = 0) {
    DT d = DTS[di];
    Buf in(start + rows * cols, dt_size(d));
    std::vector<std::vector<double>> xs(rows);
    for (size_t r = 0; r < rows; ++r) {
        fill_row(d, in.p, start + r * cols, cols, (int)(r % 8));
        for (size_t j = 0; j < cols; ++j) xs[r].push_back(load(d, in.p, start + r * cols + j));
    }
    const T *src = (const T *)in.p + start;
    // rows.rs: the _v kernel when the view starts 16-byte aligned and cols % N == 0.
    size_t n = 16 / sizeof(T);
    bool vec = aligned(src) && cols % n == 0;
    RowShape sh = row_shape(rows, vec ? cols / n : cols, 4);
    if (grid) sh.grid = grid;
    bool idx = op == ARGMAX || op == ARGMIN;
    Buf out(rows, idx ? 4 : sizeof(T));
    void *k = KT[di].r[op][vec];
    G.c.ctx = std::string("r") + red_name[op] + "_" + dt_name(d) + (vec ? "_v" : "") + " rows " +
              std::to_string(rows) + " cols " + std::to_string(cols) + " start " + std::to_string(start) + " tpr " +
              std::to_string(sh.tpr) + " block " + std::to_string(sh.block) + " grid " + std::to_string(sh.grid);
    G.launches++;
    bool ok = idx ? emu::launch("row reduce", (ArgFn<T>)k, dim3(sh.grid), dim3(sh.block), src, out.as<uint32_t>(),
                                rows, cols, sh.tpr)
                  : emu::launch("row reduce", (RedFn<T>)k, dim3(sh.grid), dim3(sh.block), src, out.as<T>(), rows,
                                cols, sh.tpr);
    if (!ok) {
        G.c.fail("launch failed");
        return;
    }
    if (!out.intact(rows)) G.c.fail("wrote outside the output");
    check_reduce_out<T>(d, op, xs, out, rows);
}

// ---- middle-dim reductions -----------------------------------------------------------------------
template <typename T> static void reduce_cols(int di, Red op, size_t a, size_t b, size_t c, unsigned grid_override = 0) {
    DT d = DTS[di];
    Buf in(a * b * c, dt_size(d));
    // Column (ai, ci) gets kind (ai * c + ci) % 8.
    std::vector<std::vector<double>> xs(a * c);
    for (size_t ai = 0; ai < a; ++ai)
        for (size_t ci = 0; ci < c; ++ci) {
            std::vector<unsigned char> tmp(b * dt_size(d));
            fill_row(d, tmp.data(), 0, b, (int)((ai * c + ci) % 8));
            for (size_t bi = 0; bi < b; ++bi) {
                memcpy(in.p + ((ai * b + bi) * c + ci) * dt_size(d), tmp.data() + bi * dt_size(d), dt_size(d));
                xs[ai * c + ci].push_back(load(d, tmp.data(), bi));
            }
        }
    bool idx = op == ARGMAX || op == ARGMIN;
    Buf out(a * c, idx ? 4 : sizeof(T));
    size_t blocks = std::min(std::max<size_t>(a * ((c + COL_X - 1) / COL_X), 1), MAX_BLOCKS);
    if (grid_override) blocks = grid_override;
    void *k = KT[di].c[op];
    G.c.ctx = std::string("c") + red_name[op] + "_" + dt_name(d) + " (" + std::to_string(a) + "," + std::to_string(b) +
              "," + std::to_string(c) + ") grid " + std::to_string(blocks);
    G.launches++;
    dim3 grid((unsigned)blocks), block((unsigned)COL_X, (unsigned)COL_Y);
    const T *src = (const T *)in.p;
    bool ok = idx ? emu::launch("col reduce", (ColArgFn<T>)k, grid, block, src, out.as<uint32_t>(), a, b, c)
                  : emu::launch("col reduce", (ColFn<T>)k, grid, block, src, out.as<T>(), a, b, c);
    if (!ok) {
        G.c.fail("launch failed");
        return;
    }
    if (!out.intact(a * c)) G.c.fail("wrote outside the output");
    check_reduce_out<T>(d, op, xs, out, a * c);
}

// ---- fused rows ------------------------------------------------------------------------------------
enum Fused { SOFTMAX, RMS, LAYER };
static const char *fused_name[] = {"rsoftmax", "rrmsnorm", "rlayernorm"};

// force_two_pass: the K = 0 kernel with RowShape(rows, units, 4) (rows.rs would keep such rows in
// registers; the two-pass kernel takes any row length).
template <typename T>
static void fused_rows_case(int di, Fused op, size_t rows, size_t cols, size_t xskew, size_t askew, bool force_two_pass,
                            unsigned grid = 0) {
    DT d = DTS[di];
    const float eps = 1e-5f;
    Buf x(rows * cols, dt_size(d), xskew), alpha(cols, dt_size(d), askew), beta(cols, dt_size(d), askew);
    std::vector<std::vector<double>> xs(rows);
    for (size_t r = 0; r < rows; ++r) {
        int kind = op == SOFTMAX ? (int)(r % 8) : (int)(r % 2); // norms: plain or small integers
        if (kind == 5 || kind == 3) kind = 0;                     // softmax rows with NaN: kind 2
        fill_row(d, x.p, r * cols, cols, kind);
        if (op == LAYER)
            for (size_t j = 0; j < cols; ++j) store(d, x.p, r * cols + j, round_to(d, load(d, x.p, r * cols + j) + 0.5));
        for (size_t j = 0; j < cols; ++j) xs[r].push_back(load(d, x.p, r * cols + j));
    }
    for (size_t j = 0; j < cols; ++j) {
        store(d, alpha.p, j, uni(0.5, 1.5));
        store(d, beta.p, j, uni(-1, 1));
    }
    Buf out(rows * cols, dt_size(d));
    const T *px = (const T *)x.p, *pa = (const T *)alpha.p, *pb = (const T *)beta.p;
    size_t n = 16 / sizeof(T);
    bool vec = cols % n == 0 && aligned(px) && aligned(out.p) && (op == SOFTMAX || aligned(pa)) &&
               (op != LAYER || aligned(pb));
    size_t units = (cols + n - 1) / n;
    long k = force_two_pass ? -1 : fused_k(n, units);
    RowShape sh = row_shape(rows, units, k > 0 ? (size_t)k : 4);
    if (grid) sh.grid = grid;
    void *kp = KT[di].f[op][k_index(k)][vec];
    if (op == SOFTMAX) pa = px;
    if (op != LAYER) pb = pa;
    G.c.ctx = std::string(fused_name[op]) + "_" + dt_name(d) + "_" + std::to_string(k > 0 ? k : 0) + (vec ? "_v" : "") +
              " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tpr " + std::to_string(sh.tpr) +
              " block " + std::to_string(sh.block) + " grid " + std::to_string(sh.grid) + " skews " + std::to_string(xskew) + "," + std::to_string(askew);
    if (!kp) {
        G.c.fail("no kernel");
        return;
    }
    G.launches++;
    if (!emu::launch(fused_name[op], (FusedFn<T>)kp, dim3(sh.grid), dim3(sh.block), px, out.as<T>(), pa, pb, rows, cols,
                     sh.tpr, eps)) {
        G.c.fail("launch failed");
        return;
    }
    if (!out.intact(rows * cols)) G.c.fail("wrote outside the output");
    const double rt = d == F64 ? 1e-12 : d == F32 ? 1e-5 : d == F16 ? ldexp(1.0, -10) + 1e-5 : ldexp(1.0, -7) + 1e-5;
    const double at = d == F16 ? ldexp(1.0, -24) : d == BF16 ? 1e-38 : 1e-37;
    for (size_t r = 0; r < rows; ++r) {
        const std::vector<double> &v = xs[r];
        double m = -INFINITY, s = 0, q = 0;
        for (double e : v) {
            if (e > m) m = e; // f32::max: NaN ignored
            s += e;
            q += e * e;
        }
        double es = 0;
        if (op == SOFTMAX)
            for (double e : v) es += exp(e - m);
        double mean = s / cols, var = q / cols - mean * mean;
        for (size_t j = 0; j < cols; ++j) {
            double want, tol;
            double a = load(d, alpha.p, j), b = load(d, beta.p, j);
            if (op == SOFTMAX) {
                want = exp(v[j] - m) / es;
                tol = rt * fabs(want) + at;
            } else if (op == RMS) {
                double sc = 1 / sqrt(q / cols + eps);
                want = v[j] * sc * a;
                tol = rt * (fabs(want) + sc * fabs(a) * 1e-3) + at;
            } else {
                double sc = 1 / sqrt(var + eps);
                want = (v[j] - mean) * sc * a + b;
                tol = rt * (fabs(want) + sc * fabs(a) * (fabs(v[j]) + fabs(mean)) * 4 + fabs(b)) + at;
            }
            double got = load(d, out.p, r * cols + j);
            G.c.checks++;
            if (!close(got, round_to(d, want), tol))
                G.c.fail("row %zu col %zu: x %.9g got %.9g want %.9g", r, j, v[j], got, want);
        }
    }
}

// ---- rotary embeddings (vector kernels) -------------------------------------------------------------
template <typename T> using RopeFn = void (*)(const T *, const T *, const T *, T *, unsigned, unsigned, unsigned, unsigned);
// rows.rs `rope`: blocks of BLOCK over rows * d / 2 / N packs (rope) or rows * d / N (rope_i).
template <typename T>
static void rope_case(int di, bool interleaved, RopeFn<T> k, size_t b, size_t h, size_t t, size_t d, bool batched) {
    DT dt = DTS[di];
    const size_t n = 16 / sizeof(T), rows = b * h * t, half = d / 2, el = rows * d;
    const size_t trows = batched ? b * t : t + 3;
    Buf x(el, sizeof(T)), c(trows * half, sizeof(T)), s(trows * half, sizeof(T)), out(el, sizeof(T));
    for (size_t i = 0; i < el; ++i) store(dt, x.p, i, uni(-2, 2));
    for (size_t i = 0; i < trows * half; ++i) {
        store(dt, c.p, i, uni(-1, 1));
        store(dt, s.p, i, uni(-1, 1));
    }
    const size_t packs = rows * (interleaved ? d / n : half / n);
    dim3 grid((unsigned)std::min(std::max<size_t>((packs + BLOCK - 1) / BLOCK, 1), MAX_BLOCKS)), block((unsigned)BLOCK);
    G.c.ctx = std::string(interleaved ? "rropei_" : "rrope_") + dt_name(dt) + " b " + std::to_string(b) + " h " +
              std::to_string(h) + " t " + std::to_string(t) + " d " + std::to_string(d) + (batched ? " batched" : "");
    G.launches++;
    if (!emu::launch("rrope", k, grid, block, (const T *)x.p, (const T *)c.p, (const T *)s.p, out.as<T>(), (unsigned)rows,
                     (unsigned)t, (unsigned)d, (unsigned)(batched ? h * t : 0))) {
        G.c.fail("launch failed");
        return;
    }
    if (!out.intact(el)) G.c.fail("wrote outside the output");
    const double ulp = dt == F64 ? ldexp(1.0, -52) : dt == F32 ? ldexp(1.0, -23) : dt == F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
    for (size_t r = 0; r < rows; ++r) {
        const size_t cs = (r % t + (batched ? (r / (h * t)) * t : 0)) * half;
        for (size_t j = 0; j < half; ++j) {
            // rope: elements j and j + d / 2 with table entry j; rope_i: 2 j and 2 j + 1.
            const size_t i1 = r * d + (interleaved ? 2 * j : j), i2 = interleaved ? i1 + 1 : i1 + half;
            const double x1 = load(dt, x.p, i1), x2 = load(dt, x.p, i2);
            const double cv = load(dt, c.p, cs + j), sv = load(dt, s.p, cs + j);
            // Each product and sum rounded to T, as candle's kernels and the CPU compute them.
            const double a = round_to(dt, x1 * cv), bb = round_to(dt, x2 * sv);
            const double e = round_to(dt, x1 * sv), f = round_to(dt, x2 * cv);
            const double w1 = round_to(dt, a - bb), w2 = round_to(dt, e + f);
            const double g1 = load(dt, out.p, i1), g2 = load(dt, out.p, i2);
            // One ulp of the products' size: a sum of two T values rounded through f32 may differ
            // from one rounding in a tie, and f32/f64 may fuse a product into the subtraction.
            const double tol1 = ulp * (fabs(a) + fabs(bb)) + 1e-300, tol2 = ulp * (fabs(e) + fabs(f)) + 1e-300;
            G.c.checks += 2;
            if (!(fabs(g1 - w1) <= tol1) || !(fabs(g2 - w2) <= tol2))
                G.c.fail("row %zu pair %zu: got %.9g %.9g want %.9g %.9g", r, j, g1, g2, w1, w2);
        }
    }
}

template <typename T> static void rope_cases(int di, RopeFn<T> rope, RopeFn<T> ropei) {
    const size_t cases[][5] = {{1, 1, 1, 16, 0}, {2, 3, 5, 16, 0}, {2, 3, 5, 16, 1}, {2, 4, 1, 64, 1}, {1, 2, 7, 128, 0},
                               {3, 2, 4, 32, 1}};
    for (auto &c : cases) {
        rope_case<T>(di, false, rope, c[0], c[1], c[2], c[3], c[4] != 0);
        rope_case<T>(di, true, ropei, c[0], c[1], c[2], c[3], c[4] != 0);
    }
}

// ---- transpose -------------------------------------------------------------------------------------
template <typename U> static void transpose_case(void (*k)(const U *, U *, size_t, unsigned, unsigned), size_t batches,
                                                 size_t r, size_t c, size_t start, size_t dst_off) {
    size_t el = batches * r * c;
    Buf src(start + el, sizeof(U)), dst(dst_off + el, sizeof(U));
    for (size_t i = 0; i < start + el; ++i) src.as<U>()[i] = (U)(rng() ^ (i * 0x9E3779B97F4A7C15ull));
    // rows.rs sizes the grid by 64x64 tiles for 2-byte elements with both dims even (the word path).
    const size_t tile = sizeof(U) == 2 && r % 2 == 0 && c % 2 == 0 ? 64 : TILE;
    size_t tiles = batches * ((r + tile - 1) / tile) * ((c + tile - 1) / tile);
    dim3 grid((unsigned)std::min(std::max<size_t>(tiles, 1), MAX_BLOCKS)), block((unsigned)TILE, (unsigned)TILE_ROWS);
    G.c.ctx = "rtranspose_u" + std::to_string(8 * sizeof(U)) + " batches " + std::to_string(batches) + " r " +
              std::to_string(r) + " c " + std::to_string(c) + " start " + std::to_string(start) + " dst_off " +
              std::to_string(dst_off);
    G.launches++;
    // rows.rs slices both buffers at their offsets; the untouched prefix of dst stays as it was.
    if (!emu::launch("rtranspose", k, grid, block, src.as<U>() + start, dst.as<U>() + dst_off, batches, (unsigned)r,
                     (unsigned)c)) {
        G.c.fail("launch failed");
        return;
    }
    if (!dst.intact(dst_off + el)) G.c.fail("wrote past the output");
    for (size_t i = 0; i < dst_off; ++i)
        if (dst.as<U>()[i] != (U)~(U)0) G.c.fail("wrote before the output at %zu", i);
    for (size_t b = 0; b < batches; ++b)
        for (size_t i = 0; i < r; ++i)
            for (size_t j = 0; j < c; ++j) {
                // src: (c, r) matrices; dst: (r, c).
                U want = src.as<U>()[start + b * r * c + j * r + i], got = dst.as<U>()[dst_off + b * r * c + i * c + j];
                G.c.checks++;
                if (want != got) G.c.fail("b %zu (%zu,%zu): got %llx want %llx", b, i, j, (unsigned long long)got,
                                          (unsigned long long)want);
            }
}

// ---- the plan port against rows.rs's unit tests ----------------------------------------------------
static void test_port() {
    G.c.ctx = "port";
    auto eq = [](RowShape s, unsigned t, unsigned b, unsigned g) { return s.tpr == t && s.block == b && s.grid == g; };
    if (!eq(row_shape(1000, 7, 4), 8, 256, 32)) G.c.fail("row_shape(1000, 7)");
    if (!eq(row_shape(3, 1, 4), 1, 256, 1)) G.c.fail("row_shape(3, 1)");
    if (!eq(row_shape(8192, 2048, 4), 256, 256, 8192)) G.c.fail("row_shape(8192, 2048)");
    if (!eq(row_shape(2, 33, 4), 64, 64, 2)) G.c.fail("row_shape(2, 33)");
    if (fused_k(4, 257) != 2 || fused_k(4, 2049) != -1 || fused_k(8, 1024) != 4 || fused_k(2, 2049) != -1 ||
        fused_k(8, 129) != 2 || fused_k(8, 512) != 4)
        G.c.fail("fused_k");
    G.c.checks += 5;
}

template <typename T> static void run_dtype(int di, const std::string &only) {
    const size_t cols_list[] = {1, 31, 32, 33, 64, 65, 1000, 4097, 9000};
    if (only.empty() || only == "reduce")
        for (int op = 0; op < 5; ++op)
            for (size_t cols : cols_list) {
                size_t rows = cols <= 65 ? 37 : 3;
                reduce_rows<T>(di, (Red)op, rows, cols, 0);
                reduce_rows<T>(di, (Red)op, rows, cols, 1); // misaligned view: scalar path
            }
    if (only.empty() || only == "grid") { // fewer blocks than rows: every block loops
        for (int op = 0; op < 5; ++op) {
            reduce_rows<T>(di, (Red)op, 9, 1000, 0, 2);
            reduce_rows<T>(di, (Red)op, 9, 65, 1, 2);
            reduce_rows<T>(di, (Red)op, 100, 7, 0, 1);
            reduce_cols<T>(di, (Red)op, 3, 9, 130, 2);
        }
        for (int op = 0; op < 3; ++op) {
            fused_rows_case<T>(di, (Fused)op, 7, 1000, 0, 0, false, 2);
            fused_rows_case<T>(di, (Fused)op, 7, 9000, 0, 0, false, 2);
            fused_rows_case<T>(di, (Fused)op, 7, 1000, 0, 0, true, 2);
            fused_rows_case<T>(di, (Fused)op, 70, 33, 0, 0, false, 1);
        }
    }
    if (only.empty() || only == "cols") {
        const size_t shapes[][3] = {{2, 7, 65}, {3, 33, 5}, {1, 1000, 3}, {4, 2, 130}, {2, 17, 64}, {1, 1, 2}};
        for (int op = 0; op < 5; ++op)
            for (auto &s : shapes) reduce_cols<T>(di, (Red)op, s[0], s[1], s[2]);
    }
    if (only.empty() || only == "fused") {
        const size_t fcols[] = {1, 3, 8, 31, 32, 33, 64, 65, 100, 1000, 1024, 1500, 2048, 4096, 4097, 8192, 9000};
        for (int op = 0; op < 3; ++op) {
            for (size_t cols : fcols) {
                size_t rows = cols <= 100 ? 19 : cols <= 2048 ? 3 : 2;
                fused_rows_case<T>(di, (Fused)op, rows, cols, 0, 0, false);
                if (cols == 1000 || cols == 33 || cols == 1500 || cols == 4096 || cols == 9000)
                    fused_rows_case<T>(di, (Fused)op, rows, cols, 1, 0, false); // misaligned x
                if (cols == 64 && op != SOFTMAX) fused_rows_case<T>(di, (Fused)op, rows, cols, 0, 1, false);
                if (cols == 1 || cols == 33 || cols == 1000) fused_rows_case<T>(di, (Fused)op, rows, cols, 0, 0, true);
            }
        }
    }
}

// ---- group norm (rows/group_norm.h) ------------------------------------------------------------
// Port of candle-rocm/src/launch/group_norm.rs `gn_args`: MIN_CHUNK, TARGET_BLOCKS.
static const size_t GN_MIN_CHUNK = 32 * BLOCK, GN_TARGET_BLOCKS = 2048;
static GnArgs gn_args(size_t b, size_t c, size_t inner, size_t groups, size_t pack) {
    const size_t cpg = c / groups, len = cpg * inner, rows = b * groups;
    const bool vec = pack > 1 && inner % pack == 0;
    const size_t unit = vec ? pack : 1;
    size_t splits = std::max<size_t>(std::min((GN_TARGET_BLOCKS + rows - 1) / rows, (len + GN_MIN_CHUNK - 1) / GN_MIN_CHUNK), 1);
    const size_t chunk = ((len + splits - 1) / splits + unit - 1) / unit * unit;
    splits = (len + chunk - 1) / chunk;
    return GnArgs{(uint32_t)len, (uint32_t)chunk, (uint32_t)rows, (uint32_t)splits, (uint32_t)inner, (uint32_t)cpg,
                  (uint32_t)groups, (uint32_t)vec};
}
template <typename T> using GnStatsFn = void (*)(GnArgs, const T *, typename Acc<T>::type *);
template <typename T>
using GnFn = void (*)(GnArgs, typename Acc<T>::type, const T *, const typename Acc<T>::type *, const T *, const T *, T *);

// x (b, c, inner) with values around `mean`, skewed by `skew` elements (the host then drops the
// packs, as group_norm.rs does for a misaligned view), against a two-pass f64 reference.
template <typename T>
static void gnorm_case(int di, GnStatsFn<T> ks, GnFn<T> ka, size_t b, size_t c, size_t inner, size_t groups, double mean,
                       size_t skew) {
    typedef typename Acc<T>::type A;
    DT dt = DTS[di];
    const size_t n = b * c * inner;
    Buf x(n, sizeof(T), skew), w(c, sizeof(T)), bb(c, sizeof(T)), out(n, sizeof(T), skew);
    for (size_t i = 0; i < n; ++i) store(dt, x.p, i, mean + uni(-3, 3));
    for (size_t i = 0; i < c; ++i) {
        store(dt, w.p, i, uni(-2, 2));
        store(dt, bb.p, i, uni(-1, 1));
    }
    GnArgs a = gn_args(b, c, inner, groups, 16 / sizeof(T));
    if (a.vec && !(aligned(x.p) && aligned(out.p))) a = gn_args(b, c, inner, groups, 0);
    std::vector<A> part(2 * (size_t)a.rows * a.splits, (A)NAN);
    const A eps = (A)1e-5;
    G.c.ctx = std::string("rgnorm_") + dt_name(dt) + " b " + std::to_string(b) + " c " + std::to_string(c) + " inner " +
              std::to_string(inner) + " groups " + std::to_string(groups) + " splits " + std::to_string(a.splits) +
              (a.vec ? " vec" : "") + (skew ? " skewed" : "");
    G.launches += 2;
    dim3 grid(a.splits, a.rows), block((unsigned)BLOCK);
    if (!emu::launch("rgnorm_stats", ks, grid, block, a, (const T *)x.p, part.data()) ||
        !emu::launch("rgnorm", ka, grid, block, a, eps, (const T *)x.p, (const A *)part.data(), (const T *)w.p,
                     (const T *)bb.p, out.as<T>())) {
        G.c.fail("launch failed");
        return;
    }
    if (!out.intact(n)) G.c.fail("wrote outside the output");
    const double ulp = dt == F64 ? 1e-12 : dt == F32 ? 4e-6 : dt == F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
    const size_t len = a.len;
    for (size_t r = 0; r < a.rows; ++r) {
        double m = 0, v = 0;
        for (size_t i = 0; i < len; ++i) m += load(dt, x.p, r * len + i);
        m /= len;
        for (size_t i = 0; i < len; ++i) v += pow(load(dt, x.p, r * len + i) - m, 2);
        v /= len;
        const double sd = sqrt(v + 1e-5);
        for (size_t i = 0; i < len; ++i) {
            const size_t ch = (r % groups) * (c / groups) + i / inner;
            const double want = (load(dt, x.p, r * len + i) - m) / sd * load(dt, w.p, ch) + load(dt, bb.p, ch);
            const double got = load(dt, out.p, r * len + i);
            G.c.checks++;
            if (!(fabs(got - want) <= 2 * ulp * (1 + fabs(want))))
                G.c.fail("group %zu element %zu: got %.9g want %.9g", r, i, got, want);
        }
    }
}

template <typename T> static void gnorm_cases(int di, GnStatsFn<T> ks, GnFn<T> ka) {
    // b, c, inner, groups, mean, skew: packs, elements (7x5 planes), several blocks a group
    // (with and without packs), a mean far from 0, a misaligned view.
    const double cases[][6] = {{1, 8, 64, 4, 0, 0},    {2, 6, 35, 3, 1, 0},     {1, 2, 12308, 1, 0, 0},
                               {3, 4, 8200, 2, 50, 0}, {1, 4, 12304, 2, -20, 0}, {1, 8, 64, 4, 0, 1}};
    for (auto &k : cases)
        gnorm_case<T>(di, ks, ka, (size_t)k[0], (size_t)k[1], (size_t)k[2], (size_t)k[3], k[4], (size_t)k[5]);
}

int main(int argc, char **argv) {
    std::string only = argc > 1 ? argv[1] : "";
    test_port();
    run_dtype<float>(0, only);
    run_dtype<__half>(1, only);
    run_dtype<__nv_bfloat16>(2, only);
    run_dtype<double>(3, only);
    if (only.empty() || only == "rope") {
        rope_cases<float>(0, &rrope_f32, &rropei_f32);
        rope_cases<__half>(1, &rrope_f16, &rropei_f16);
        rope_cases<__nv_bfloat16>(2, &rrope_bf16, &rropei_bf16);
        rope_cases<double>(3, &rrope_f64, &rropei_f64);
    }
    if (only.empty() || only == "gnorm") {
        gnorm_cases<float>(0, &rgnorm_stats_f32, &rgnorm_f32);
        gnorm_cases<__half>(1, &rgnorm_stats_f16, &rgnorm_f16);
        gnorm_cases<__nv_bfloat16>(2, &rgnorm_stats_bf16, &rgnorm_bf16);
        gnorm_cases<double>(3, &rgnorm_stats_f64, &rgnorm_f64);
    }
    if (only.empty() || only == "transpose") {
        const size_t cases[][5] = {{1, 3, 2, 0, 0},   {1, 32, 32, 0, 0}, {1, 33, 65, 1, 3}, {3, 7, 100, 5, 0},
                                   {2, 64, 31, 0, 1}, {1, 1000, 3, 2, 2}, {4, 40, 40, 0, 0},
                                   // even dims: the 16-bit word path (offsets 0 and 2 keep it
                                   // 4-byte aligned; 1 and 3 send it to the element path)
                                   {1, 64, 64, 0, 0},  {2, 66, 130, 2, 0}, {1, 130, 2, 0, 2}, {3, 128, 62, 2, 2},
                                   {1, 64, 64, 1, 0},  {1, 64, 64, 0, 3}};
        for (auto &c : cases) {
            transpose_case<uint8_t>(&rtranspose_u8, c[0], c[1], c[2], c[3], c[4]);
            transpose_case<uint16_t>(&rtranspose_u16, c[0], c[1], c[2], c[3], c[4]);
            transpose_case<uint32_t>(&rtranspose_u32, c[0], c[1], c[2], c[3], c[4]);
            transpose_case<uint64_t>(&rtranspose_u64, c[0], c[1], c[2], c[3], c[4]);
        }
    }
    // Every kernel of the tables ran at least once.
    size_t kernels = 0;
    auto covered = [&](const void *k, const char *what, int di) {
        if (!k) return;
        kernels++;
        if (!emu::S.launched.count(k)) {
            G.c.ctx = "coverage";
            G.c.fail("a %s kernel for %s never ran", what, dt_name(DTS[di]));
        }
    };
    if (only.empty())
        for (int di = 0; di < 4; ++di) {
            for (auto &r : KT[di].r)
                for (void *k : r) covered(k, "last-dim reduction", di);
            for (void *k : KT[di].c) covered(k, "middle-dim reduction", di);
            for (auto &f : KT[di].f)
                for (auto &kk : f)
                    for (void *k : kk) covered(k, "fused", di);
        }
    printf("rows: %zu kernels of the tables ran\n", kernels);
    printf("rows (wave %d, %s path): %ld launches, %ld checks, bad=%ld\n", emu::WAVE,
#ifdef EMU_AMD_WAVE
           "AMD",
#else
           "CUDA",
#endif
           G.launches, G.c.checks, G.c.bad);
    return G.c.bad != 0;
}
