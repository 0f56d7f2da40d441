// Runs the one-row (decode) kernel families of kernels/hip/qmatvec.hip on the host through
// emu.h: the split mat-vec (qmatvec/split.h: qmatvec_split_<T>[_v], gpr groups per row group)
// and the mat-vec with SwiGLU's gate (qmatvec/gated.h: qmatvec_swiglu_<T>[_v]). The split
// kernels are checked against qmatvec_test.cpp's host reference (Candle's CPU dequantization, then a
// dot product in double, within 1e-5 of the factored terms' sizes), for every type, both
// variants (x 16-byte aligned: _v; not: plain) and gpr 1, 2, 4, 8: odd n, n below a block's
// rows at every gpr, k of one block (most slices idle) and of many (slices of uneven step
// counts), and a grid smaller than the rows need (the grid-stride loop, with its barriers).
// Every launch runs twice: the two results must be identical bits (the slices' sums are added
// in a fixed order). The launch geometry is a port of candle-rocm/src/quantized/plan.rs
// (`QmatvecSplit`, `split_groups_per_row`), checked here with the values its unit test checks.
// The gated kernels: each output against silu(g) * u of the reference's gate and up rows (the
// f32 rounding of g and u, within 1e-5 of their terms' sizes, carried through silu and the
// product), for odd and even h, h below a block's outputs, k of one block and of many, x
// aligned and not, and a grid smaller than the outputs need; outputs past h are never written.
// Built three ways by kernels/tests/kernels_on_cpu.rs: the CUDA path and the AMD path with
// wave 32 and wave 64. Prints bad=<mismatches> and exits non-zero on any mismatch.
#define QMV_TEST_NO_MAIN
#include "qmatvec_test.cpp"

typedef void (*SFn)(const uint8_t *, const float *, float *, unsigned, unsigned, unsigned);
#define QMV_SPLIT_FNS(T) {qmatvec_split_##T, qmatvec_split_##T##_v}
// KSPLIT[type][_v], in QT order.
static const SFn KSPLIT[NALL][2] = {QMV_SPLIT_FNS(q4_0), QMV_SPLIT_FNS(q4_1), QMV_SPLIT_FNS(q8_0),
                                    QMV_SPLIT_FNS(q4_K), QMV_SPLIT_FNS(q5_K), QMV_SPLIT_FNS(q6_K),
                                    QMV_SPLIT_FNS(q5_0), QMV_SPLIT_FNS(q5_1)};

// ---- port of candle-rocm/src/quantized/plan.rs (the split launch) ---------------------------
static const size_t SPLIT_TARGET_BLOCKS = 1024, GROUPS_PER_BLOCK = 8;
// Blocks (super-blocks) one group step covers: 8 of 32 values, 2 super-blocks.
static size_t step_blocks(QT t) { return qt_values[t] == 32 ? 8 : 2; }
static size_t split_groups_per_row(size_t n, size_t nb, size_t step) {
    size_t bound = std::min(std::max<size_t>(nb / step, 1), GROUPS_PER_BLOCK), most = 1;
    while (most * 2 <= bound) most *= 2;
    size_t gpr = 1;
    while (gpr < most && (n * gpr + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK < SPLIT_TARGET_BLOCKS) gpr *= 2;
    return gpr;
}
static unsigned split_grid(size_t n, size_t gpr) {
    const size_t rows = ROWS_PER_BLOCK / gpr;
    return (unsigned)std::min(std::max<size_t>((n + rows - 1) / rows, 1), MAX_GRID);
}

static void split_port() {
    G.c.ctx = "split port";
    // (n, nb, step) -> gpr, as candle-rocm's `split_groups_per_row_fill_the_gpu`.
    const size_t cases[][4] = {{2048, 64, 8, 8},  {256, 64, 8, 8},  {2048, 176, 8, 8}, {32000, 64, 8, 1},
                               {5632, 64, 8, 4},  {2048, 8, 2, 4},  {2048, 22, 2, 8},  {2048, 16, 8, 2},
                               {2048, 1, 8, 1},   {1, 1, 2, 1},     {16384, 64, 8, 1}, {8192, 64, 8, 2}};
    for (auto &c : cases)
        if (split_groups_per_row(c[0], c[1], c[2]) != c[3])
            G.c.fail("n %zu nb %zu step %zu: gpr %zu want %zu", c[0], c[1], c[2],
                     split_groups_per_row(c[0], c[1], c[2]), c[3]);
    if (split_grid(2048, 8) != 1024 || split_grid(1, 8) != 1 || split_grid(17, 1) != 2 || split_grid(17, 4) != 5)
        G.c.fail("split grid port");
}

// n rows of k values, one x row at `x_skew` floats past a 256-byte boundary, gpr groups per row
// group, at most `grid_cap` blocks (0: candle-rocm's grid): against the reference, twice.
static void split_case(QT t, size_t n, size_t k, unsigned gpr, int scale_kind, size_t x_skew, unsigned grid_cap) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t];
    const size_t used = n * nb * bytes, padding = MATRIX_ROW_PADDING / qk * bytes;
    Buf w(used + padding, 1), x(k, 4, x_skew), y(n, 4), y2(n, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, padding, scale_kind);
    float *xp = x.as<float>();
    for (size_t i = 0; i < k; ++i) xp[i] = (float)uni(-4, 4);
    const bool vec = ((uintptr_t)xp & 15) == 0;
    unsigned grid = split_grid(n, gpr);
    if (grid_cap) grid = std::min(grid, grid_cap);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "split %s n %zu k %zu gpr %u scales %d x+%zu grid %u%s", qt_name[t], n, k, gpr,
             scale_kind, x_skew, grid, vec ? " _v" : "");
    G.c.ctx = ctx;
    for (Buf *out : {&y, &y2}) {
        G.launches++;
        if (!emu::launch(ctx, KSPLIT[t][vec], dim3(grid), dim3((unsigned)THREADS), (const uint8_t *)wp,
                         (const float *)xp, out->as<float>(), (unsigned)n, (unsigned)nb, gpr)) {
            G.c.fail("launch failed");
            return;
        }
        if (!out->intact(n)) G.c.fail("wrote outside y");
    }
    check_f32_rows(t, wp, n, nb, xp, k, 1, true, y.as<float>());
    G.c.checks++;
    if (memcmp(y.as<float>(), y2.as<float>(), n * 4) != 0) G.c.fail("two launches differ");
}

typedef void (*GFn)(const uint8_t *, const float *, float *, unsigned, unsigned);
#define QMV_SWIGLU_FNS(T) {qmatvec_swiglu_##T, qmatvec_swiglu_##T##_v}
// KGATED[type][_v], in QT order.
static const GFn KGATED[NALL][2] = {QMV_SWIGLU_FNS(q4_0), QMV_SWIGLU_FNS(q4_1), QMV_SWIGLU_FNS(q8_0),
                                    QMV_SWIGLU_FNS(q4_K), QMV_SWIGLU_FNS(q5_K), QMV_SWIGLU_FNS(q6_K),
                                    QMV_SWIGLU_FNS(q5_0), QMV_SWIGLU_FNS(q5_1)};
// Outputs one block of the gated kernels covers (port of candle-rocm's QMATVEC_SWIGLU_ROWS).
static const size_t SWIGLU_ROWS = 8;
static_assert(SWIGLU_ROWS == QMV_SWIGLU_ROWS, "constants");

// 2h rows of k values (h gate rows, then h up rows), one x row at `x_skew` floats past a
// 256-byte boundary, at most `grid_cap` blocks (0: candle-rocm's grid).
static void swiglu_case(QT t, size_t h, size_t k, int scale_kind, size_t x_skew, unsigned grid_cap) {
    const size_t qk = qt_values[t], nb = k / qk, bytes = qt_bytes[t], n = 2 * h;
    const size_t used = n * nb * bytes, padding = MATRIX_ROW_PADDING / qk * bytes;
    Buf w(used + padding, 1), x(k, 4, x_skew), y(h, 4);
    uint8_t *wp = w.as<uint8_t>();
    random_weights(t, wp, n * nb, padding, scale_kind);
    float *xp = x.as<float>();
    for (size_t i = 0; i < k; ++i) xp[i] = (float)uni(-1, 1);
    const bool vec = ((uintptr_t)xp & 15) == 0;
    unsigned grid = (unsigned)std::min(std::max<size_t>((h + SWIGLU_ROWS - 1) / SWIGLU_ROWS, 1), MAX_GRID);
    if (grid_cap) grid = std::min(grid, grid_cap);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "swiglu %s h %zu k %zu scales %d x+%zu grid %u%s", qt_name[t], h, k, scale_kind,
             x_skew, grid, vec ? " _v" : "");
    G.c.ctx = ctx;
    G.launches++;
    if (!emu::launch(ctx, KGATED[t][vec], dim3(grid), dim3((unsigned)THREADS), (const uint8_t *)wp,
                     (const float *)xp, y.as<float>(), (unsigned)h, (unsigned)nb)) {
        G.c.fail("launch failed");
        return;
    }
    if (!y.intact(h)) G.c.fail("wrote outside y");
    const float *yp = y.as<float>();
    for (size_t i = 0; i < h; ++i) {
        std::vector<double> g(1, 0.0), gm(1, 0.0), u(1, 0.0), um(1, 0.0);
        f32_reference(t, wp, i, nb, xp, k, 1, true, g, gm);
        f32_reference(t, wp, h + i, nb, xp, k, 1, true, u, um);
        const double sg = 1.0 / (1.0 + exp(-g[0])), silu = g[0] * sg;
        // d silu / d g = s (1 + g (1 - s)), at most 1.1 in size.
        const double tol = 1.1 * 1e-5 * gm[0] * fabs(u[0]) + fabs(silu) * 1e-5 * um[0] +
                           4 * FLT_EPSILON * fabs(silu * u[0]) + 1e-37;
        G.c.checks++;
        if (!close(yp[i], silu * u[0], tol))
            G.c.fail("output %zu: got %.9g want %.9g (tol %.3g)", i, yp[i], silu * u[0], tol);
    }
}

int main() {
    split_port();
    for (int ti = 0; ti < NALL; ++ti) {
        const QT t = (QT)ti;
        const size_t qk = qt_values[t], step = step_blocks(t);
        // h below, at and past a block's outputs, odd and even; k of one block and of several
        // steps plus a partial one.
        for (size_t h : {1, 3, 8, 13})
            for (size_t nb : {(size_t)1, 2 * step + 1})
                swiglu_case(t, h, qk * nb, (int)((h + nb) % 2), h % 3 == 0 ? 1 + h % 2 : 0, 0);
        // The grid-stride loop: fewer blocks than the outputs need.
        swiglu_case(t, 29, qk * (step + 1), 1, 0, 2);
    }
    for (int ti = 0; ti < NALL; ++ti) {
        const QT t = (QT)ti;
        const size_t qk = qt_values[t], step = step_blocks(t);
        for (unsigned gpr : {1u, 2u, 4u, 8u}) {
            // n below a block's rows at this gpr (16 / gpr), odd and not; k of one block, of
            // one step per slice plus a partial one, and of many steps (slices 1 step apart).
            const size_t nbs[] = {1, gpr * step + 1, 3 * gpr * step + step / 2 + 1};
            const size_t ns[] = {1, 2, 3, 17};
            for (size_t n : ns)
                for (size_t nb : nbs) {
                    if (n * nb * qk > 17 * 32 * 30) continue;
                    split_case(t, n, qk * nb, gpr, (int)((n + nb) % 2), (n + gpr) % 3 == 0 ? 1 + n % 3 : 0, 0);
                }
            // The grid-stride loop: fewer blocks than rows need (the barriers run per pass),
            // x aligned and not.
            split_case(t, 37, qk * (gpr * step + 3), gpr, 1, 0, 2);
            split_case(t, 33, qk * 3, gpr, 0, 2, 1);
        }
    }
    // Every kernel ran.
    for (int t = 0; t < NALL; ++t)
        for (int v = 0; v < 2; ++v)
            if (!emu::S.launched.count((const void *)KSPLIT[t][v])) {
                G.c.ctx = "coverage";
                G.c.fail("split %s%s never ran", qt_name[t], v ? "_v" : "");
            }
    for (int t = 0; t < NALL; ++t)
        for (int v = 0; v < 2; ++v)
            if (!emu::S.launched.count((const void *)KGATED[t][v])) {
                G.c.ctx = "coverage";
                G.c.fail("swiglu %s%s never ran", qt_name[t], v ? "_v" : "");
            }
    printf("qmatvec decode (split, swiglu): %ld launches, %ld checks, bad=%ld\n", G.launches, G.c.checks, G.c.bad);
    return G.c.bad != 0;
}
