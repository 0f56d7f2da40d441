// Runs kernels/hip/gemv.hip's y = x w products (gemv_nn_<T>_<M>, _v) on the host through emu.h
// and checks them against a double-precision host reference, every M from 1 to 8 for f32, f16
// and bf16: attention's att v (one w per batch entry), a w broadcast over the batch, odd n and
// odd k, n not a multiple of the 16-byte chunk on the vector path (padded rows: a lane's tail
// columns loaded one at a time) and on the scalar path, a w base off the 16-byte boundary
// (scalar), padded x rows, long k (the unrolled loads), 1 to 256 lanes along n (one column, all
// 256 threads on k), and small grids (the grid-stride loop over column tiles). Inputs are exact
// in T; the tolerance is f32 accumulation plus T's final rounding. Every y element outside the
// product must keep its poison. Prints bad=<mismatches> and exits non-zero on any.
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
    bool bcast_w;   // stride_w = 0
    uint32_t w_off; // elements w starts past an aligned base (1: the scalar path)
    unsigned grid;  // 0: ceil(ceil(n / E) / lanes)
    uint32_t lanes; // 0: the power of two covering n / E, at most 64
};

// Lanes along n as launch/gemv_nn.rs first picks them: the smallest power of two covering the
// row's E-column units, at most 64 (it then narrows tiles for more blocks: the cases with
// explicit lanes).
static uint32_t host_lanes(uint32_t n, uint32_t e) {
    uint32_t units = (n + e - 1) / e, l = 1;
    while (l < units && l < 64) l *= 2;
    return l;
}

template <typename T>
static void run(DT dt, const Kernel (&scalar)[8], const Kernel (&vec)[8], const Case &cs, int m) {
    const uint32_t N = 16 / sizeof(T);
    const uint64_t sw = cs.bcast_w ? 0 : (uint64_t)cs.k * cs.ldw;
    const uint64_t sx = (uint64_t)m * cs.ldx, sy = (uint64_t)m * cs.n;
    const bool v16 = cs.ldw % N == 0 && sw % N == 0 && cs.w_off % N == 0;
    const uint32_t e = v16 ? N : 1;
    const uint32_t lanes = cs.lanes ? cs.lanes : host_lanes(cs.n, e);
    C.ctx = std::string(cs.what) + " " + dt_name(dt) + " M=" + std::to_string(m) + (v16 ? " vec" : " scalar") +
            " lanes=" + std::to_string(lanes);
    std::mt19937_64 rng(cs.n * 131 + cs.k * 7 + m);
    std::uniform_int_distribution<int> small(-8, 8);
    // Values k/8 apart in [-1, 1]: exact in every T (multiples of 1/8 up to 1).
    std::vector<T> wbuf(cs.w_off + (cs.bcast_w ? 1 : cs.batch) * (size_t)cs.k * cs.ldw + 8);
    std::vector<T> x(cs.batch * (size_t)m * cs.ldx + 8);
    for (auto &v : wbuf) v = make<T>(small(rng) / 8.0);
    for (auto &v : x) v = make<T>(small(rng) / 8.0);
    const T *w = wbuf.data() + cs.w_off;
    const T poison = make<T>(12345.0);
    std::vector<T> y(cs.batch * sy + 8, poison);
    Kernel kern = (v16 ? vec : scalar)[m - 1];
    const uint32_t tiles = ((cs.n + e - 1) / e + lanes - 1) / lanes;
    const unsigned g = cs.grid ? cs.grid : tiles;
    launches++;
    if (!emu::launch(C.ctx.c_str(), kern, dim3(g, cs.batch), dim3(GV_BLOCK), (const void *)w,
                     (const void *)x.data(), (void *)y.data(), cs.n, cs.k, cs.ldw, cs.ldx, sw, sx, sy, lanes)) {
        C.fail("launch failed");
        return;
    }
    for (uint32_t z = 0; z < cs.batch; z++)
        for (int i = 0; i < m; i++)
            for (uint32_t c = 0; c < cs.n; c++) {
                double want = 0, mag = 0;
                for (uint32_t j = 0; j < cs.k; j++) {
                    double p = value(w[z * sw + (size_t)j * cs.ldw + c]) * value(x[z * sx + (size_t)i * cs.ldx + j]);
                    want += p;
                    mag += fabs(p);
                }
                double got = value(y[z * sy + (size_t)i * cs.n + c]);
                double tol = mag * 1e-6 + fabs(want) * unit(dt) + 1e-12;
                C.checks++;
                if (!(fabs(got - want) <= tol)) {
                    C.fail("y[%u][%d][%u] = %.9g, want %.9g (tol %.3g)", z, i, c, got, want, tol);
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
    {(Kernel)&gemv_nn_##TN##_1##SUF, (Kernel)&gemv_nn_##TN##_2##SUF, (Kernel)&gemv_nn_##TN##_3##SUF,     \
     (Kernel)&gemv_nn_##TN##_4##SUF, (Kernel)&gemv_nn_##TN##_5##SUF, (Kernel)&gemv_nn_##TN##_6##SUF,     \
     (Kernel)&gemv_nn_##TN##_7##SUF, (Kernel)&gemv_nn_##TN##_8##SUF}

static const Case CASES[] = {
    // what, n, k, ldw, ldx, batch, bcast_w, w_off, grid, lanes
    {"att v (heads)", 64, 17, 64, 17, 3, false, 0, 0, 0},
    {"att v, one position", 64, 1, 64, 1, 2, false, 0, 0, 0},
    {"att v, narrowed tiles", 64, 33, 64, 33, 2, false, 0, 0, 8},
    {"odd n (scalar)", 13, 9, 13, 9, 2, false, 0, 0, 0},
    {"odd n, padded rows (vector tail)", 13, 7, 16, 7, 2, false, 0, 0, 0},
    {"n past a chunk (scalar)", 70, 20, 71, 21, 1, true, 0, 0, 0},
    {"odd k", 40, 37, 40, 37, 1, true, 0, 0, 0},
    {"w off the 16-byte boundary", 32, 11, 32, 11, 2, false, 1, 0, 0},
    {"batched bcast w, padded x", 24, 10, 24, 12, 3, true, 0, 0, 0},
    {"wide n, grid-stride", 520, 5, 520, 5, 1, true, 0, 2, 16},
    {"256 lanes", 300, 3, 304, 3, 1, true, 0, 0, 256},
    {"one column, one lane", 1, 50, 1, 50, 2, false, 0, 0, 1},
    {"long k (unrolled loads)", 8, 1000, 8, 1000, 1, true, 0, 0, 0},
    {"long k, head_dim 64", 64, 700, 64, 700, 2, false, 0, 0, 0},
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
    printf("gemv_nn: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
}
