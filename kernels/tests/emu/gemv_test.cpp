// Runs kernels/hip/gemv.hip's skinny products (gemv_<T>_<M>, _v) on the host through emu.h and
// checks them against a double-precision host reference of y = x w^T, every M from 1 to 8 for
// f32, f16 and bf16: k a multiple of the 16-byte chunk and not (scalar path), row strides
// larger than k, batch entries with a broadcast w (stride 0, a Linear layer) and with their own
// w (attention's q k^T), n not a multiple of the 8 rows of a block, and small grids (the
// grid-stride loop). Inputs are exact in T; the tolerance is f32 accumulation plus T's final
// rounding. Every y element outside the product must keep its poison. Prints bad=<mismatches>
// and exits non-zero on any.
#include "emu.h"

#include "check.h"

// GV_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef GV_SOURCE
#define GV_SOURCE "../../hip/gemv.hip"
#endif
#include GV_SOURCE

using namespace chk;

typedef void (*Kernel)(const void *, const void *, void *, uint32_t, uint32_t, uint32_t, uint32_t,
                       uint64_t, uint64_t, uint64_t, uint32_t);

static Counter C;
static long launches;

template <typename T> static double value(T v) { return (double)gv_to(v); }
template <typename T> static T make(double v) { return gv_from<T>((float)v); }

// T's relative rounding: f32 2^-24, f16 2^-11, bf16 2^-8.
static double unit(DT d) { return d == F32 ? ldexp(1.0, -24) : d == F16 ? ldexp(1.0, -11) : ldexp(1.0, -8); }

struct Case {
    const char *what;
    uint32_t n, k, ldw, ldx, batch;
    bool bcast_w; // stride_w = 0
    unsigned grid;  // 0: ceil(n gpr / 8)
    uint32_t gpr;   // groups per row
};

template <typename T>
static void run(DT dt, const Kernel (&scalar)[8], const Kernel (&vec)[8], const Case &cs, int m) {
    C.ctx = std::string(cs.what) + " " + dt_name(dt) + " M=" + std::to_string(m) + " gpr=" + std::to_string(cs.gpr);
    const uint32_t N = 16 / sizeof(T);
    std::mt19937_64 rng(cs.n * 131 + cs.k * 7 + m);
    std::uniform_int_distribution<int> small(-8, 8);
    const uint64_t sw = cs.bcast_w ? 0 : (uint64_t)cs.n * cs.ldw;
    const uint64_t sx = (uint64_t)m * cs.ldx, sy = (uint64_t)m * cs.n;
    // Values k/8 apart in [-1, 1]: exact in every T (multiples of 1/8 up to 1).
    std::vector<T> w((cs.bcast_w ? 1 : cs.batch) * (size_t)cs.n * cs.ldw + 8);
    std::vector<T> x(cs.batch * (size_t)m * cs.ldx + 8);
    for (auto &v : w) v = make<T>(small(rng) / 8.0);
    for (auto &v : x) v = make<T>(small(rng) / 8.0);
    const T poison = make<T>(12345.0);
    std::vector<T> y(cs.batch * sy + 8, poison);
    bool v16 = cs.k % N == 0 && cs.ldw % N == 0 && cs.ldx % N == 0 && sw % N == 0 && sx % N == 0;
    Kernel kern = (v16 ? vec : scalar)[m - 1];
    const uint32_t rows_per_block = GV_ROWS / cs.gpr;
    unsigned g = cs.grid ? cs.grid : (cs.n + rows_per_block - 1) / rows_per_block;
    launches++;
    if (!emu::launch(C.ctx.c_str(), kern, dim3(g, cs.batch), dim3(GV_BLOCK), (const void *)w.data(),
                     (const void *)x.data(), (void *)y.data(), cs.n, cs.k, cs.ldw, cs.ldx, sw, sx, sy, cs.gpr)) {
        C.fail("launch failed");
        return;
    }
    for (uint32_t z = 0; z < cs.batch; z++)
        for (int i = 0; i < m; i++)
            for (uint32_t r = 0; r < cs.n; r++) {
                double want = 0, mag = 0;
                for (uint32_t j = 0; j < cs.k; j++) {
                    double p = value(w[z * sw + (size_t)r * cs.ldw + j]) * value(x[z * sx + (size_t)i * cs.ldx + j]);
                    want += p;
                    mag += fabs(p);
                }
                double got = value(y[z * sy + (size_t)i * cs.n + r]);
                double tol = mag * 1e-6 + fabs(want) * unit(dt) + 1e-12;
                C.checks++;
                if (!(fabs(got - want) <= tol)) {
                    C.fail("y[%u][%d][%u] = %.9g, want %.9g (tol %.3g)", z, i, r, got, want, tol);
                    return;
                }
            }
    for (size_t i = cs.batch * sy; i < y.size(); i++) {
        C.checks++;
        if (value(y[i]) != value(poison)) {
            C.fail("y[%zu] past the product was written", i);
            return;
        }
    }
}

#define TABLE(TN, SUF)                                                                                   \
    {(Kernel)&gemv_##TN##_1##SUF, (Kernel)&gemv_##TN##_2##SUF, (Kernel)&gemv_##TN##_3##SUF,                 \
     (Kernel)&gemv_##TN##_4##SUF, (Kernel)&gemv_##TN##_5##SUF, (Kernel)&gemv_##TN##_6##SUF,                 \
     (Kernel)&gemv_##TN##_7##SUF, (Kernel)&gemv_##TN##_8##SUF}

static const Case CASES[] = {
    {"linear", 20, 256, 256, 256, 1, true, 0, 1},
    {"linear split k", 20, 256, 256, 256, 1, true, 0, 4},
    {"odd k", 13, 37, 37, 37, 1, true, 0, 1},
    {"odd k split", 13, 37, 37, 37, 1, true, 0, 2},
    {"padded rows", 9, 64, 72, 80, 1, true, 0, 8},
    {"batched bcast w", 5, 32, 32, 40, 3, true, 0, 2},
    {"batched own w (q k^T)", 7, 64, 64, 64, 4, false, 0, 1},
    {"grid-stride", 40, 48, 48, 48, 1, true, 2, 1},
    {"grid-stride split", 40, 48, 48, 48, 1, true, 3, 4},
    {"long k (unrolled loads)", 3, 2312, 2312, 2312, 1, true, 0, 1},
    {"long k split", 5, 2312, 2320, 2312, 2, true, 0, 2},
    {"one row", 1, 8, 8, 8, 1, true, 0, 1},
    {"one row, 8 groups", 1, 8, 8, 8, 1, true, 0, 8},
};

template <typename T> static void run_type(DT dt, const Kernel (&s)[8], const Kernel (&v)[8]) {
    for (const Case &cs : CASES)
        for (int m = 1; m <= 8; m++) {
            // Long cases only at a few M (the emulator runs every lane).
            if (cs.k >= 256 && m != 1 && m != 3 && m != 8) continue;
            run<T>(dt, s, v, cs, m);
        }
}

int main() {
    static const Kernel f32s[8] = TABLE(f32, ), f32v[8] = TABLE(f32, _v);
    static const Kernel f16s[8] = TABLE(f16, ), f16v[8] = TABLE(f16, _v);
    static const Kernel bf16s[8] = TABLE(bf16, ), bf16v[8] = TABLE(bf16, _v);
    run_type<float>(F32, f32s, f32v);
    run_type<__half>(F16, f16s, f16v);
    run_type<__nv_bfloat16>(BF16, bf16s, bf16v);
    // Every kernel ran at least once.
    long missing = 0;
    for (const Kernel *t : {f32s, f32v, f16s, f16v, bf16s, bf16v})
        for (int i = 0; i < 8; i++) missing += !emu::S.launched.count((const void *)t[i]);
    if (missing) {
        C.ctx = "coverage";
        C.fail("%ld kernels never ran", missing);
    }
    printf("gemv: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
}
