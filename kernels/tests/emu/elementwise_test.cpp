// Runs kernels/hip/elementwise.hip on the host through emu.h and checks every result against a
// host reference of the documented semantics: unary ops, affine, elu, powf, the six binary ops
// (floats and integers), all float casts and where_cond (every condition and value dtype, bits
// compared exactly), contiguous (aligned and misaligned) and strided
// (transposed, narrowed, row and column broadcasts, offsets), at sizes around the pack width.
// Launches use candle-rocm/src/launch/elementwise.rs's geometry and its by-value structs, built here
// by a line-for-line port of its `plan`, `magic_divisor` and `launch_config`.
// Prints bad=<mismatches> and exits non-zero on any mismatch (kernels/tests/kernels_on_cpu.rs).
#include "emu.h"

// EW_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef EW_SOURCE
#define EW_SOURCE "../../hip/elementwise.hip"
#endif
#include EW_SOURCE

#include "check.h"

using namespace chk;

// ---- port of candle-rocm/src/launch/elementwise.rs ----------------------------------------------
static const size_t BLOCK = 256, UNROLL = 1, MAX_RANK = 6, PACK_BYTES = 16, MAX_GRID = 1 << 20;
static_assert(BLOCK == EW_BLOCK && UNROLL == EW_UNROLL && MAX_RANK == EW_MAX_RANK, "constants");
// The Rust structs, as the u32 words they are (Dims: rank, vec, dims, magic, shift; then
// each operand's strides), copied byte for byte into the kernel's structs.
static_assert(sizeof(EwDims) == 4 * (2 + 3 * MAX_RANK), "EwDims layout");
static_assert(sizeof(EwStrided1) == 4 * (2 + 4 * MAX_RANK), "EwStrided1 layout");
static_assert(sizeof(EwStrided2) == 4 * (2 + 5 * MAX_RANK), "EwStrided2 layout");
static_assert(sizeof(EwStrided3) == 4 * (2 + 6 * MAX_RANK), "EwStrided3 layout");

static size_t pack_elems(size_t in, size_t out) { return PACK_BYTES / std::max<size_t>(std::min(in, out), 1); }
static const size_t MAX_SELECT_PACK_BYTES = 64;
static size_t select_pack_elems(size_t c, size_t t) {
    return std::min(PACK_BYTES / std::min(c, t), MAX_SELECT_PACK_BYTES / std::max(c, t));
}

static dim3 launch_config(size_t n, size_t vec) {
    size_t per_block = BLOCK * UNROLL * vec;
    size_t blocks = std::min((n + per_block - 1) / per_block, MAX_GRID);
    return dim3((unsigned)blocks);
}

static bool magic_divisor(uint32_t d, uint32_t &magic, uint32_t &shift) {
    if (d == 0) return false;
    shift = d == 1 ? 0 : 32 - __builtin_clz(d - 1);
    unsigned __int128 m = (((unsigned __int128)1 << 32) * (((unsigned __int128)1 << shift) - d)) / d + 1;
    if (m > 0xffffffffu) return false;
    magic = (uint32_t)m;
    return true;
}

enum PlanKind { CONTIGUOUS, STRIDED, FALLBACK };
struct Plan {
    PlanKind kind;
    uint32_t w[2 + 6 * MAX_RANK]; // Strided<N> words (N <= 3)
};

static Plan plan(const std::vector<size_t> &dims, const std::vector<std::vector<size_t>> &strides, size_t vec) {
    const size_t N = strides.size();
    Plan out{};
    out.kind = FALLBACK;
    for (auto &s : strides)
        if (s.size() != dims.size()) return out;
    size_t sizes[MAX_RANK];
    for (auto &s : sizes) s = 1;
    std::vector<std::vector<size_t>> st(N, std::vector<size_t>(MAX_RANK, 0));
    size_t rank = 0;
    for (size_t d = dims.size(); d-- > 0;) {
        size_t size = dims[d];
        if (size == 1) continue;
        if (rank > 0) {
            size_t inner = sizes[rank - 1], i = rank - 1;
            bool merges = true;
            for (size_t k = 0; k < N; ++k) {
                size_t p;
                if (__builtin_mul_overflow(st[k][i], inner, &p) || p != strides[k][d]) merges = false;
            }
            if (merges) {
                size_t v;
                if (__builtin_mul_overflow(inner, size, &v)) return out;
                sizes[i] = v;
                continue;
            }
        }
        if (rank == MAX_RANK) return out;
        sizes[rank] = size;
        for (size_t k = 0; k < N; ++k) st[k][rank] = strides[k][d];
        rank++;
    }
    bool all1 = true;
    for (size_t k = 0; k < N; ++k) all1 &= st[k][0] == 1;
    if (rank == 0 || (rank == 1 && all1)) {
        out.kind = CONTIGUOUS;
        return out;
    }
    size_t n = 1;
    for (size_t i = 0; i < rank; ++i)
        if (__builtin_mul_overflow(n, sizes[i], &n)) return out;
    if (n > 0xffffffffu) return out;
    for (size_t k = 0; k < N; ++k) {
        size_t reach = 0;
        for (size_t i = 0; i < rank; ++i) reach += (sizes[i] - 1) * st[k][i];
        if (reach > 0xffffffffu) return out;
    }
    uint32_t *w = out.w;
    w[0] = (uint32_t)rank;
    for (size_t i = 0; i < MAX_RANK; ++i) {
        w[2 + i] = 1;
        w[2 + MAX_RANK + i] = 1;
        w[2 + 2 * MAX_RANK + i] = 0;
    }
    for (size_t i = 0; i < rank; ++i) {
        uint32_t magic, shift;
        if (!magic_divisor((uint32_t)sizes[i], magic, shift)) return out;
        w[2 + i] = (uint32_t)sizes[i];
        w[2 + MAX_RANK + i] = magic;
        w[2 + 2 * MAX_RANK + i] = shift;
        for (size_t k = 0; k < N; ++k) w[2 + 3 * MAX_RANK + k * MAX_RANK + i] = (uint32_t)st[k][i];
    }
    bool packs = vec > 0 && sizes[0] % vec == 0;
    for (size_t k = 0; k < N; ++k) {
        bool ok = st[k][0] == 0;
        if (st[k][0] == 1) {
            ok = true;
            for (size_t i = 1; i < rank; ++i) ok &= st[k][i] % vec == 0;
        }
        packs &= ok;
    }
    w[1] = packs;
    out.kind = STRIDED;
    return out;
}

// ---- layouts ---------------------------------------------------------------------------------
struct Layout {
    std::vector<size_t> dims, strides;
    size_t start = 0; // start offset in elements (the buffer itself is 256-byte aligned)
    size_t elems() const {
        size_t n = 1;
        for (size_t d : dims) n *= d;
        return n;
    }
    size_t reach() const { // elements the view spans from `start`
        size_t r = 0;
        for (size_t i = 0; i < dims.size(); ++i) r += (dims[i] - 1) * strides[i];
        return r + 1;
    }
    size_t offset(size_t i) const { // of the i-th element in row-major order
        size_t o = 0;
        for (size_t d = dims.size(); d-- > 0;) {
            o += (i % dims[d]) * strides[d];
            i /= dims[d];
        }
        return o;
    }
    std::string str() const {
        std::string s = "dims [";
        for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
        s += "] strides [";
        for (size_t i = 0; i < strides.size(); ++i) s += (i ? "," : "") + std::to_string(strides[i]);
        return s + "] start " + std::to_string(start);
    }
};
static Layout contiguous(std::vector<size_t> dims, size_t start = 0) {
    Layout l;
    l.dims = dims;
    l.strides.assign(dims.size(), 1);
    for (size_t i = dims.size(); i-- > 1;) l.strides[i - 1] = l.strides[i] * dims[i];
    l.start = start;
    return l;
}
static Layout strided(std::vector<size_t> dims, std::vector<size_t> strides, size_t start = 0) {
    Layout l;
    l.dims = dims;
    l.strides = strides;
    l.start = start;
    return l;
}

// Unary-op layouts: contiguous at sizes around the pack width (aligned and at start 1), and the
// strided cases (transposed, narrowed rows with and without pack-aligned strides, row and
// column broadcasts, a 3-d permutation, offsets).
static std::vector<Layout> unary_layouts() {
    std::vector<Layout> ls;
    for (size_t n : {1, 3, 4, 7, 8, 9, 16, 33, 1023, 4097}) ls.push_back(contiguous({n}));
    for (size_t n : {1, 7, 33, 4097}) ls.push_back(contiguous({n}, 1));
    ls.push_back(contiguous({3, 1, 11}, 1));
    ls.push_back(strided({7, 33}, {1, 7}));          // transposed
    ls.push_back(strided({33, 7}, {1, 33}, 1));      // transposed, offset
    ls.push_back(strided({5, 32}, {48, 1}));         // narrowed rows, pack-aligned
    ls.push_back(strided({5, 32}, {48, 1}, 1));      // same, misaligned start
    ls.push_back(strided({5, 32}, {48, 1}, 16));     // same, aligned start 16
    ls.push_back(strided({5, 30}, {35, 1}));         // narrowed rows, no packs
    ls.push_back(strided({6, 32}, {0, 1}));          // row broadcast
    ls.push_back(strided({6, 32}, {1, 0}));          // column broadcast
    ls.push_back(strided({2, 3, 5}, {1, 2, 6}));     // permuted (5,3,2)
    ls.push_back(strided({4, 1, 9, 16}, {0, 7, 16, 1}, 3)); // broadcast outer dim
    ls.push_back(strided({300, 20}, {1, 300}));      // several blocks, strided
    return ls;
}

// ---- values ----------------------------------------------------------------------------------
static std::mt19937_64 rng(42);
static double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// A random value representable in `d`: mostly in [-lo, hi], with specials mixed in.
static double gen(DT d, double lo, double hi, bool specials) {
    static const double sp[] = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.5, 1e-3, -7.0, 1e-6, 100.0};
    int r = (int)(rng() % 100);
    double v;
    if (specials && r < 3) {
        static const double nsp[] = {NAN, INFINITY, -INFINITY};
        v = nsp[rng() % 3];
    } else if (r < 15) {
        v = sp[rng() % (sizeof sp / sizeof sp[0])];
    } else {
        v = uni(lo, hi);
    }
    return round_to(d, v);
}

struct Ctx {
    Counter c;
    long launches = 0;
    long half_packs = 0; // binary launches on 8-byte packs (candle-rocm's half_packs)
} G;

// ---- unary ops ---------------------------------------------------------------------------------
enum UOp { NEG, RECIP, EXP, LOG, SIN, COS, TANH, ERF, CEIL, FLOOR, ROUND, ABS, SQR, SQRT, GELU, GELU_ERF, RELU, SILU,
           SIGN, SIGMOID, N_UOPS };
static const char *uop_name[] = {"uneg",  "urecip", "uexp", "ulog",  "usin",  "ucos",      "utanh",
                                 "uerf",  "uceil",  "ufloor", "uround", "uabs", "usqr",    "usqrt",
                                 "ugelu", "ugelu_erf", "urelu", "usilu", "usign", "usigmoid"};
static bool uop_exact(UOp o) {
    return o == NEG || o == RECIP || o == CEIL || o == FLOOR || o == ROUND || o == ABS || o == SQR || o == SQRT ||
           o == RELU || o == SIGN;
}
static double uop_ref(UOp o, double x, bool half_type) {
    switch (o) {
    case NEG: return -x;
    case RECIP: return 1.0 / x;
    case EXP: return exp(x);
    case LOG: return log(x);
    case SIN: return sin(x);
    case COS: return cos(x);
    case TANH: return tanh(x);
    case ERF: return erf(x);
    case CEIL: return ceil(x);
    case FLOOR: return floor(x);
    case ROUND: return round(x);
    case ABS: return fabs(x);
    case SQR: return x * x;
    case SQRT: return sqrt(x);
    case GELU: return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case GELU_ERF: return x * 0.5 * erfc(-x / sqrt(2.0));
    case RELU: // candle-kernels' maxg: fmax for f32/f64 (NaN -> 0), NaN wins for f16/bf16
        if (x != x) return half_type ? x : 0.0;
        return x > 0 ? x : 0.0;
    case SILU: return x / (1.0 + exp(-x));
    case SIGN: return (double)((x > 0) - (x < 0));
    case SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: abort();
    }
}
// Ops whose float evaluation loses accuracy relative to |x| (cancellation, range reduction).
static bool uop_x_scaled(UOp o) { return o == GELU || o == GELU_ERF || o == SILU || o == SIN || o == COS; }

static double rtol_of(DT d) {
    switch (d) {
    case F32: return 2e-6;
    case F64: return 1e-13;
    case F16: return ldexp(1.0, -10) * 1.01;
    case BF16: return ldexp(1.0, -7) * 1.01;
    default: return 0;
    }
}
static double atol_of(DT d) {
    switch (d) {
    case F32: return 1e-37;
    case F64: return 1e-300;
    case F16: return ldexp(1.0, -24);
    case BF16: return 1e-39;
    default: return 0;
    }
}

// The kernel table: contiguous and strided entry points of one op for each float dtype.
struct K2 {
    void *c, *s;
};
#define KF(root) {{(void *)&root##_f32, (void *)&root##_f32_strided}, {(void *)&root##_f16, (void *)&root##_f16_strided}, \
                  {(void *)&root##_bf16, (void *)&root##_bf16_strided}, {(void *)&root##_f64, (void *)&root##_f64_strided}}
static const K2 UNARY_K[N_UOPS][4] = {KF(uneg),  KF(urecip), KF(uexp),   KF(ulog),      KF(usin),  KF(ucos),  KF(utanh),
                                      KF(uerf),  KF(uceil),  KF(ufloor), KF(uround),    KF(uabs),  KF(usqr),  KF(usqrt),
                                      KF(ugelu), KF(ugelu_erf), KF(urelu), KF(usilu),   KF(usign), KF(usigmoid)};
static const K2 AFFINE_K[4] = KF(affine);
static const K2 ELU_K[4] = KF(uelu);
static const K2 POWF_K[4] = KF(upowf);

// Launches a one-input kernel as elementwise.rs's launch_map1 does. `sc` holds the scalars
// (already rounded to the dtype), passed as f64 for f64 kernels and f32 otherwise.
template <typename SI, typename SO, typename C>
static bool launch_map1(const char *name, K2 k, const Layout &l, const void *base, void *out, size_t vec,
                        std::vector<double> sc) {
    size_t n = l.elems();
    Plan p = plan(l.dims, {l.strides}, vec);
    if (p.kind == FALLBACK) {
        G.c.fail("%s: unexpected fallback plan", name);
        return false;
    }
    const SI *in = (const SI *)base + l.start;
    dim3 grid = launch_config(n, vec), block((unsigned)BLOCK);
    G.launches++;
    if (p.kind == CONTIGUOUS) {
        if (sc.empty()) return emu::launch(name, (void (*)(size_t, const SI *, SO *))k.c, grid, block, n, in, (SO *)out);
        if (sc.size() == 1)
            return emu::launch(name, (void (*)(size_t, const SI *, SO *, C))k.c, grid, block, n, in, (SO *)out, (C)sc[0]);
        return emu::launch(name, (void (*)(size_t, const SI *, SO *, C, C))k.c, grid, block, n, in, (SO *)out,
                           (C)sc[0], (C)sc[1]);
    }
    EwStrided1 s;
    memcpy(&s, p.w, sizeof s);
    if (sc.empty())
        return emu::launch(name, (void (*)(size_t, EwStrided1, const SI *, SO *))k.s, grid, block, n, s, in, (SO *)out);
    if (sc.size() == 1)
        return emu::launch(name, (void (*)(size_t, EwStrided1, const SI *, SO *, C))k.s, grid, block, n, s, in,
                           (SO *)out, (C)sc[0]);
    return emu::launch(name, (void (*)(size_t, EwStrided1, const SI *, SO *, C, C))k.s, grid, block, n, s, in,
                       (SO *)out, (C)sc[0], (C)sc[1]);
}

static bool run_map1(DT di, DT dout, K2 k, const char *name, const Layout &l, const void *base, void *out,
                     std::vector<double> sc) {
    size_t vec = pack_elems(dt_size(di), dt_size(dout));
#define M1(SI, SO)                                                                                                     \
    return di == F64 ? launch_map1<SI, SO, double>(name, k, l, base, out, vec, sc)                                     \
                     : launch_map1<SI, SO, float>(name, k, l, base, out, vec, sc)
    auto s = [](DT d) { return d == F32 ? 0 : d == F64 ? 1 : 2; };
    switch (s(di) * 3 + s(dout)) {
    case 0: M1(float, float);
    case 1: M1(float, double);
    case 2: M1(float, uint16_t);
    case 3: M1(double, float);
    case 4: M1(double, double);
    case 5: M1(double, uint16_t);
    case 6: M1(uint16_t, float);
    case 7: M1(uint16_t, double);
    default: M1(uint16_t, uint16_t);
    }
#undef M1
}

// Fills a buffer for layout l of dtype d with generated values.
template <typename F> static Buf make_input(DT d, const Layout &l, F gen_one) {
    size_t len = l.start + l.reach();
    Buf b(len, dt_size(d));
    for (size_t i = 0; i < len; ++i) store(d, b.p, i, gen_one());
    return b;
}

static void test_unary() {
    const DT dts[] = {F32, F16, BF16, F64};
    for (int di = 0; di < 4; ++di) {
        DT d = dts[di];
        for (int o = 0; o < N_UOPS; ++o) {
            UOp op = (UOp)o;
            for (const Layout &l : unary_layouts()) {
                G.c.ctx = std::string(uop_name[o]) + "_" + dt_name(d) + " " + l.str();
                Buf in = make_input(d, l, [&] { return gen(d, -8, 8, true); });
                size_t n = l.elems();
                Buf out(n, dt_size(d));
                if (!run_map1(d, d, UNARY_K[o][di], uop_name[o], l, in.p, out.p, {})) {
                    G.c.fail("launch failed");
                    continue;
                }
                if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
                bool half = d == F16 || d == BF16;
                for (size_t i = 0; i < n; ++i) {
                    double x = load(d, in.p, l.start + l.offset(i));
                    double want = round_to(d, uop_ref(op, x, half)), got = load(d, out.p, i);
                    G.c.checks++;
                    bool ok;
                    if (uop_exact(op)) ok = close(got, want, 0) || (op == RELU && got == 0 && want == 0);
                    else
                        ok = close(got, want,
                                   rtol_of(d) * (fabs(want) + (uop_x_scaled(op) ? fabs(x) + 1 : 0)) + atol_of(d));
                    if (!ok) G.c.fail("i=%zu x=%.17g got %.17g want %.17g", i, x, got, want);
                }
            }
        }
    }
}

// affine (x * mul + add, product rounded to the dtype first for f16/bf16), elu and powf.
static void test_scalar_ops() {
    const DT dts[] = {F32, F16, BF16, F64};
    for (int di = 0; di < 4; ++di) {
        DT d = dts[di];
        bool half = d == F16 || d == BF16;
        for (int which = 0; which < 3; ++which) {
            const char *name = which == 0 ? "affine" : which == 1 ? "uelu" : "upowf";
            std::vector<double> sc;
            if (which == 0) sc = {round_to(d, 0.3), round_to(d, -1.7)};
            else if (which == 1) sc = {round_to(d, 0.7)};
            else sc = {round_to(d, 2.5)};
            K2 k = (which == 0 ? AFFINE_K : which == 1 ? ELU_K : POWF_K)[di];
            for (const Layout &l : unary_layouts()) {
                G.c.ctx = std::string(name) + "_" + dt_name(d) + " " + l.str();
                Buf in = make_input(d, l, [&] { return which == 2 ? gen(d, 0, 4, false) : gen(d, -8, 8, true); });
                size_t n = l.elems();
                Buf out(n, dt_size(d));
                if (!run_map1(d, d, k, name, l, in.p, out.p, sc)) {
                    G.c.fail("launch failed");
                    continue;
                }
                if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
                for (size_t i = 0; i < n; ++i) {
                    double x = load(d, in.p, l.start + l.offset(i)), got = load(d, out.p, i);
                    G.c.checks++;
                    bool ok;
                    double want;
                    if (which == 0) {
                        if (d == F32) want = (double)((float)x * (float)sc[0] + (float)sc[1]);
                        else if (d == F64) want = x * sc[0] + sc[1];
                        else want = round_to(d, (double)((float)round_to(d, x * sc[0]) + (float)sc[1]));
                        ok = same(got, want);
                    } else if (which == 1) {
                        want = round_to(d, x > 0 ? x : sc[0] * (exp(x) - 1));
                        ok = close(got, want, rtol_of(d) * (fabs(want) + fabs(sc[0])) + atol_of(d));
                    } else {
                        want = round_to(d, pow(x, sc[0]));
                        ok = close(got, want, rtol_of(d) * fabs(want) + atol_of(d));
                    }
                    (void)half;
                    if (!ok) G.c.fail("i=%zu x=%.17g got %.17g want %.17g", i, x, got, want);
                }
            }
        }
    }
}

// ---- casts -------------------------------------------------------------------------------------
#define KC(F)                                                                                                          \
    {{(void *)&cast_##F##_f32, (void *)&cast_##F##_f32_strided},                                                       \
     {(void *)&cast_##F##_f16, (void *)&cast_##F##_f16_strided},                                                       \
     {(void *)&cast_##F##_bf16, (void *)&cast_##F##_bf16_strided},                                                     \
     {(void *)&cast_##F##_f64, (void *)&cast_##F##_f64_strided}}
static const K2 CAST_K[4][4] = {KC(f32), KC(f16), KC(bf16), KC(f64)};

// A source value for casts: random bit patterns (every class), rounding ties of the narrower
// types and values just off them (which a double rounding through f32 would get wrong).
static double gen_cast(DT d) {
    int r = (int)(rng() % 8);
    switch (d) {
    case F16: return f16_value((uint16_t)rng());
    case BF16: return bf16_value((uint16_t)rng());
    case F32:
        if (r < 3) return f32_of_bits((uint32_t)rng());
        if (r < 5) return (float)(f16_value((uint16_t)rng()) + ldexp(1.0, -25 + (int)(rng() % 20)));
        return (float)uni(-70000, 70000);
    case F64: {
        if (r < 2) {
            uint64_t u = rng();
            double v;
            memcpy(&v, &u, 8);
            return v;
        }
        // a f16 or bf16 tie, exactly or nudged by far less than a f32 ulp
        double a = r < 5 ? f16_value((uint16_t)(rng() & 0x7bff)) : bf16_value((uint16_t)(rng() & 0x7f7f));
        double ulp = r < 5 ? ldexp(fabs(a) < ldexp(1.0, -14) ? 1.0 : fabs(a), -11) : ldexp(fabs(a) < 1e-38 ? 1.0 : fabs(a), -8);
        if (fabs(a) < ldexp(1.0, -14) && r < 5) ulp = ldexp(1.0, -25);
        double t = a + ulp; // (approximately) half way to the next value
        int nudge = (int)(rng() % 3) - 1;
        return t + nudge * ldexp(fabs(t), -40);
    }
    default: abort();
    }
}

static void test_casts() {
    const DT dts[] = {F32, F16, BF16, F64};
    std::vector<Layout> ls = unary_layouts();
    ls.push_back(contiguous({65536}));
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
            DT from = dts[a], to = dts[b];
            for (const Layout &l : ls) {
                G.c.ctx = std::string("cast_") + dt_name(from) + "_" + dt_name(to) + " " + l.str();
                Buf in;
                if (l.elems() == 65536 && from != F16 && from != BF16) continue;
                if (l.elems() == 65536) { // every f16 / bf16 value
                    in = Buf(65536, 2);
                    for (size_t i = 0; i < 65536; ++i) in.as<uint16_t>()[i] = (uint16_t)i;
                } else {
                    in = make_input(from, l, [&] { return gen_cast(from); });
                }
                size_t n = l.elems();
                Buf out(n, dt_size(to));
                char name[64];
                snprintf(name, sizeof name, "cast_%s_%s", dt_name(from), dt_name(to));
                if (!run_map1(from, to, CAST_K[a][b], name, l, in.p, out.p, {})) {
                    G.c.fail("launch failed");
                    continue;
                }
                if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
                for (size_t i = 0; i < n; ++i) {
                    size_t o = l.start + l.offset(i);
                    double x = load(from, in.p, o);
                    double want = round_to(to, x), got = load(to, out.p, i);
                    bool ok = same(got, want);
                    // bf16 NaN keeps sign and top payload bits (quieted), like `half`.
                    if (ok && x != x && to == BF16 && from == F32) {
                        uint32_t u = bits_of_f32((float)((const float *)in.p)[o]);
                        ok = ((const uint16_t *)out.p)[i] == (uint16_t)((u >> 16) | 0x40);
                    }
                    if (ok && x != x && to == BF16 && from == BF16)
                        ok = ((const uint16_t *)out.p)[i] == ((const uint16_t *)in.p)[o];
                    G.c.checks++;
                    if (!ok) G.c.fail("i=%zu x=%.17g got %.17g want %.17g", i, x, got, want);
                }
            }
        }
}

// ---- binary ops --------------------------------------------------------------------------------
enum BOp { ADD, SUB, MUL, DIV, MAX, MIN };
static const char *bop_name[] = {"badd", "bsub", "bmul", "bdiv", "bmaximum", "bminimum"};
#define KB(root)                                                                                                       \
    {{(void *)&root##_f32, (void *)&root##_f32_strided},   {(void *)&root##_f16, (void *)&root##_f16_strided},         \
     {(void *)&root##_bf16, (void *)&root##_bf16_strided}, {(void *)&root##_f64, (void *)&root##_f64_strided},         \
     {(void *)&root##_u8, (void *)&root##_u8_strided},     {(void *)&root##_u32, (void *)&root##_u32_strided},         \
     {(void *)&root##_i16, (void *)&root##_i16_strided},   {(void *)&root##_i32, (void *)&root##_i32_strided},         \
     {(void *)&root##_i64, (void *)&root##_i64_strided}}
static const K2 BIN_K[6][9] = {KB(badd), KB(bsub), KB(bmul), KB(bdiv), KB(bmaximum), KB(bminimum)};

static double bin_ref_float(BOp o, DT d, double x, double y) {
    bool half = d == F16 || d == BF16;
    if (d == F64) {
        switch (o) {
        case ADD: return x + y;
        case SUB: return x - y;
        case MUL: return x * y;
        case DIV: return x / y;
        case MAX: return fmax(x, y);
        case MIN: return fmin(x, y);
        }
    }
    float a = (float)x, b = (float)y, r = 0;
    switch (o) {
    case ADD: r = a + b; break;
    case SUB: r = a - b; break;
    case MUL: r = a * b; break;
    case DIV: r = a / b; break;
    case MAX: r = half ? ((a != a || b != b) ? NAN : (a > b ? a : b)) : fmaxf(a, b); break;
    case MIN: r = half ? ((a != a || b != b) ? NAN : (a < b ? a : b)) : fminf(a, b); break;
    }
    return round_to(d, r);
}

template <typename T, typename W> static T bin_ref_int(BOp o, T x, T y) {
    switch (o) {
    case ADD: return (T)((W)x + (W)y);
    case SUB: return (T)((W)x - (W)y);
    case MUL: return (T)((W)x * (W)y);
    case DIV:
        if (y == 0) return 0;
        if (std::is_signed<T>::value && y == (T)-1) return (T)((W)0 - (W)x);
        return (T)(x / y);
    case MAX: return x > y ? x : y;
    case MIN: return x < y ? x : y;
    }
    abort();
}

struct BinCase {
    std::vector<size_t> dims;
    std::vector<size_t> sl, sr; // strides; empty: contiguous
    size_t startl = 0, startr = 0;
};
static std::vector<BinCase> bin_cases() {
    std::vector<BinCase> cs;
    for (size_t n : {1, 3, 4, 7, 8, 9, 16, 33, 1023, 4097}) cs.push_back({{n}, {}, {}, 0, 0});
    cs.push_back({{33}, {}, {}, 1, 0});
    cs.push_back({{4097}, {}, {}, 0, 1});
    cs.push_back({{1023}, {}, {}, 1, 1});
    cs.push_back({{4, 3, 32}, {}, {0, 0, 1}});       // row broadcast, packs
    cs.push_back({{4, 3, 32}, {}, {3, 1, 0}});       // column broadcast, packs
    cs.push_back({{4, 3, 32}, {0, 0, 1}, {}});       // lhs broadcast
    cs.push_back({{4, 3, 32}, {}, {0, 0, 1}, 0, 1}); // row broadcast, misaligned rhs
    cs.push_back({{4, 3, 32}, {}, {3, 1, 0}, 1, 5}); // column broadcast, misaligned
    cs.push_back({{5, 7}, {}, {0, 1}});              // row broadcast, no packs
    cs.push_back({{5, 7}, {}, {1, 0}});              // column broadcast, no packs
    cs.push_back({{9, 33}, {}, {1, 9}});             // transposed rhs
    cs.push_back({{33, 9}, {1, 33}, {}, 1, 0});      // transposed lhs, offset
    cs.push_back({{32, 48}, {1, 32}, {1, 0}});       // transposed lhs, column broadcast rhs
    cs.push_back({{2, 3, 4, 5}, {60, 20, 5, 1}, {0, 1, 0, 4}}); // mixed broadcast
    cs.push_back({{64, 80}, {96, 1}, {0, 1}});       // narrowed lhs rows (packs), row broadcast
    cs.push_back({{3, 5, 12}, {}, {0, 1, 0}});       // per-channel operand, 12 columns: half packs
    cs.push_back({{2, 3, 4, 6}, {}, {0, 1, 0, 0}});  // per-channel over 4x6 planes (merged: 24)
    cs.push_back({{3, 4, 20}, {0, 1, 0}, {}});       // lhs per-channel, 20 columns
    cs.push_back({{3, 5, 12}, {}, {0, 1, 0}, 4, 1}); // lhs offset of 4 elements (8 bytes for f16)
    cs.push_back({{3, 5, 12}, {}, {0, 1, 0}, 1, 0}); // misaligned lhs: elements
    return cs;
}
static Layout bin_layout(const std::vector<size_t> &dims, const std::vector<size_t> &s, size_t start) {
    return s.empty() ? contiguous(dims, start) : strided(dims, s, start);
}

static uint64_t gen_int_bits() {
    static const int64_t sp[] = {0, 1, -1, 2, -2, 127, -128, 255, 32767, -32768, 2147483647, (-2147483647 - 1),
                                 INT64_MAX, INT64_MIN};
    int r = (int)(rng() % 10);
    if (r < 3) return (uint64_t)sp[rng() % 14];
    if (r < 6) return (uint64_t)(int64_t)((int)(rng() % 21) - 10);
    return rng();
}

template <typename S> static bool launch_bin(const char *name, K2 k, const Layout &a, const Layout &b,
                                             const void *pa, const void *pb, void *out) {
    size_t vec = pack_elems(sizeof(S), sizeof(S)), n = a.elems();
    Plan p = plan(a.dims, {a.strides, b.strides}, vec);
    if (p.kind == FALLBACK) {
        G.c.fail("%s: unexpected fallback plan", name);
        return false;
    }
    // candle-rocm's half_packs: 8-byte packs (vec word 2) where 16-byte ones do not fit.
    if (p.kind == STRIDED && p.w[1] == 0 && vec >= 4) {
        Plan h = plan(a.dims, {a.strides, b.strides}, vec / 2);
        if (h.kind == STRIDED && h.w[1] == 1) {
            h.w[1] = 2;
            p = h;
            vec /= 2;
            G.half_packs++;
        }
    }
    const S *l = (const S *)pa + a.start, *r = (const S *)pb + b.start;
    dim3 grid = launch_config(n, vec), block((unsigned)BLOCK);
    G.launches++;
    if (p.kind == CONTIGUOUS)
        return emu::launch(name, (void (*)(size_t, const S *, const S *, S *))k.c, grid, block, n, l, r, (S *)out);
    EwStrided2 s;
    memcpy(&s, p.w, sizeof s);
    return emu::launch(name, (void (*)(size_t, EwStrided2, const S *, const S *, S *))k.s, grid, block, n, s, l, r,
                       (S *)out);
}

template <typename T, typename W> static void check_int(BOp o, const Layout &a, const Layout &b, Buf &pa, Buf &pb,
                                                        Buf &out) {
    for (size_t i = 0; i < a.elems(); ++i) {
        T x = pa.as<T>()[a.start + a.offset(i)], y = pb.as<T>()[b.start + b.offset(i)];
        T want = bin_ref_int<T, W>(o, x, y), got = out.as<T>()[i];
        G.c.checks++;
        if (got != want) G.c.fail("i=%zu x=%lld y=%lld got %lld want %lld", i, (long long)x, (long long)y,
                                  (long long)got, (long long)want);
    }
}

static void test_binary() {
    const DT dts[] = {F32, F16, BF16, F64, U8, U32, I16, I32, I64};
    for (int di = 0; di < 9; ++di) {
        DT d = dts[di];
        for (int o = 0; o < 6; ++o) {
            for (const BinCase &bc : bin_cases()) {
                Layout a = bin_layout(bc.dims, bc.sl, bc.startl), b = bin_layout(bc.dims, bc.sr, bc.startr);
                G.c.ctx = std::string(bop_name[o]) + "_" + dt_name(d) + " lhs " + a.str() + " rhs " + b.str();
                size_t es = dt_size(d), n = a.elems();
                Buf pa(a.start + a.reach(), es), pb(b.start + b.reach(), es), out(n, es);
                if (is_float(d)) {
                    for (size_t i = 0; i < a.start + a.reach(); ++i) store(d, pa.p, i, gen(d, -8, 8, true));
                    for (size_t i = 0; i < b.start + b.reach(); ++i) store(d, pb.p, i, gen(d, -8, 8, true));
                } else {
                    for (size_t i = 0; i < (a.start + a.reach()) * es; i += es) {
                        uint64_t v = gen_int_bits();
                        memcpy(pa.p + i, &v, es);
                    }
                    for (size_t i = 0; i < (b.start + b.reach()) * es; i += es) {
                        uint64_t v = gen_int_bits();
                        memcpy(pb.p + i, &v, es);
                    }
                }
                bool ok;
                switch (d) {
                case F32: ok = launch_bin<float>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case F64: ok = launch_bin<double>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case F16:
                case BF16: ok = launch_bin<uint16_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case U8: ok = launch_bin<uint8_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case U32: ok = launch_bin<uint32_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case I16: ok = launch_bin<int16_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                case I32: ok = launch_bin<int32_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                default: ok = launch_bin<int64_t>(bop_name[o], BIN_K[o][di], a, b, pa.p, pb.p, out.p); break;
                }
                if (!ok) {
                    G.c.fail("launch failed");
                    continue;
                }
                if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
                BOp op = (BOp)o;
                switch (d) {
                case U8: check_int<uint8_t, uint32_t>(op, a, b, pa, pb, out); continue;
                case U32: check_int<uint32_t, uint32_t>(op, a, b, pa, pb, out); continue;
                case I16: check_int<int16_t, uint32_t>(op, a, b, pa, pb, out); continue;
                case I32: check_int<int32_t, uint32_t>(op, a, b, pa, pb, out); continue;
                case I64: check_int<int64_t, uint64_t>(op, a, b, pa, pb, out); continue;
                default: break;
                }
                for (size_t i = 0; i < n; ++i) {
                    double x = load(d, pa.p, a.start + a.offset(i)), y = load(d, pb.p, b.start + b.offset(i));
                    double want = bin_ref_float(op, d, x, y), got = load(d, out.p, i);
                    bool good = (op == MAX || op == MIN) ? close(got, want, 0) : same(got, want);
                    G.c.checks++;
                    if (!good) G.c.fail("i=%zu x=%.17g y=%.17g got %.17g want %.17g", i, x, y, got, want);
                }
            }
        }
    }
}

// ---- where_cond -------------------------------------------------------------------------------
// Conditions u8, u32, i16, i32, i64 and values of all nine dtypes; the kernels take the unsigned
// integers of those sizes and move bits, so values are random bit patterns (NaN payloads
// included) compared bit for bit, and conditions are zero or a nonzero pattern (sometimes only
// in the top byte, which a narrower comparison would miss).
static const DT WHERE_CONDS[5] = {U8, U32, I16, I32, I64};
static const DT WHERE_VALS[9] = {F32, F16, BF16, F64, U8, U32, I16, I32, I64};
#define KW(c)                                                                                                          \
    {{(void *)&where_##c##_f32, (void *)&where_##c##_f32_strided},                                                    \
     {(void *)&where_##c##_f16, (void *)&where_##c##_f16_strided},                                                    \
     {(void *)&where_##c##_bf16, (void *)&where_##c##_bf16_strided},                                                  \
     {(void *)&where_##c##_f64, (void *)&where_##c##_f64_strided},                                                    \
     {(void *)&where_##c##_u8, (void *)&where_##c##_u8_strided},                                                      \
     {(void *)&where_##c##_u32, (void *)&where_##c##_u32_strided},                                                    \
     {(void *)&where_##c##_i16, (void *)&where_##c##_i16_strided},                                                    \
     {(void *)&where_##c##_i32, (void *)&where_##c##_i32_strided},                                                    \
     {(void *)&where_##c##_i64, (void *)&where_##c##_i64_strided}}
static const K2 WHERE_K[5][9] = {KW(u8), KW(u32), KW(i16), KW(i32), KW(i64)};

struct WhereCase {
    std::vector<size_t> dims;
    std::vector<size_t> sc, st, sf; // strides of cond, t, f; empty: contiguous
    size_t startc = 0, startt = 0, startf = 0;
    unsigned blocks = 0; // 0: elementwise.rs's grid; else fewer blocks (grid-stride loops)
};
static std::vector<WhereCase> where_cases() {
    std::vector<WhereCase> cs;
    for (size_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1023, 4097}) cs.push_back({{n}});
    // Misaligned views: each operand alone, then all three.
    cs.push_back({{33}, {}, {}, {}, 1, 0, 0});
    cs.push_back({{1023}, {}, {}, {}, 0, 1, 0});
    cs.push_back({{4097}, {}, {}, {}, 0, 0, 3});
    cs.push_back({{17}, {}, {}, {}, 2, 1, 5});
    cs.push_back({{3, 1, 11}, {}, {}, {}, 1, 1, 1});
    // Broadcast conditions: rows (an attention mask over batch and heads), columns, a scalar.
    cs.push_back({{2, 3, 4, 32}, {0, 0, 32, 1}, {}, {}});
    cs.push_back({{2, 3, 4, 32}, {0, 0, 32, 1}, {}, {0, 0, 0, 0}});  // and a scalar f
    cs.push_back({{2, 3, 4, 32}, {0, 0, 32, 1}, {}, {}, 1, 0, 0});   // misaligned cond: elements
    cs.push_back({{4, 3, 32}, {3, 1, 0}, {}, {}});                    // column
    cs.push_back({{4, 3, 32}, {0, 0, 0}, {}, {}, 3, 0, 0});           // scalar cond, odd start
    cs.push_back({{4, 3, 32}, {}, {0, 0, 0}, {0, 0, 1}, 0, 5, 1});    // scalar t, row f
    cs.push_back({{6, 48}, {0, 1}, {}, {0, 1}, 0, 1, 0});             // misaligned t: elements
    cs.push_back({{5, 7}, {0, 1}, {}, {}});                           // no packs
    cs.push_back({{5, 7}, {1, 0}, {0, 1}, {}});
    // Transposed and narrowed operands, a permutation, a fully broadcast case.
    cs.push_back({{9, 33}, {}, {1, 9}, {}});
    cs.push_back({{33, 9}, {1, 33}, {}, {1, 33}, 1, 0, 2});
    cs.push_back({{32, 48}, {64, 1}, {1, 32}, {48, 1}, 0, 0, 16});
    cs.push_back({{2, 3, 5}, {1, 2, 6}, {15, 5, 1}, {0, 1, 0}});
    cs.push_back({{4, 8}, {0, 0}, {0, 0}, {0, 0}});
    cs.push_back({{300, 20}, {1, 300}, {}, {}});                      // several blocks
    cs.push_back({{64, 80}, {96, 1}, {0, 1}, {}});                    // narrowed cond rows, packs
    // Grid-stride loops: the contiguous and strided kernels with fewer blocks than the work.
    cs.push_back({{9000}, {}, {}, {}, 0, 0, 0, 2});
    cs.push_back({{9000}, {}, {}, {}, 1, 0, 0, 2});
    cs.push_back({{250, 64}, {0, 1}, {}, {}, 0, 0, 0, 3});
    cs.push_back({{250, 36}, {1, 250}, {}, {}, 0, 0, 0, 3});
    return cs;
}

template <typename C, typename T>
static bool launch_where(const char *name, K2 k, const WhereCase &wc, const Layout &lc, const Layout &lt,
                         const Layout &lf, const void *pc, const void *pt, const void *pf, void *out) {
    size_t vec = select_pack_elems(sizeof(C), sizeof(T)), n = lc.elems();
    if (vec != (size_t)SelVec<C, T>::value) G.c.fail("%s: pack of %zu, kernel's %d", name, vec, SelVec<C, T>::value);
    Plan p = plan(lc.dims, {lc.strides, lt.strides, lf.strides}, vec);
    if (p.kind == FALLBACK) {
        G.c.fail("%s: unexpected fallback plan", name);
        return false;
    }
    const C *c = (const C *)pc + lc.start;
    const T *a = (const T *)pt + lt.start, *b = (const T *)pf + lf.start;
    dim3 grid = wc.blocks ? dim3(wc.blocks) : launch_config(n, vec), block((unsigned)BLOCK);
    G.launches++;
    if (p.kind == CONTIGUOUS)
        return emu::launch(name, (void (*)(size_t, const C *, const T *, const T *, T *))k.c, grid, block, n, c, a, b,
                           (T *)out);
    EwStrided3 s;
    memcpy(&s, p.w, sizeof s);
    return emu::launch(name, (void (*)(size_t, EwStrided3, const C *, const T *, const T *, T *))k.s, grid, block, n,
                       s, c, a, b, (T *)out);
}

template <typename C>
static bool launch_where_c(const char *name, K2 k, size_t vsize, const WhereCase &wc, const Layout &lc,
                           const Layout &lt, const Layout &lf, const void *pc, const void *pt, const void *pf,
                           void *out) {
    switch (vsize) {
    case 1: return launch_where<C, uint8_t>(name, k, wc, lc, lt, lf, pc, pt, pf, out);
    case 2: return launch_where<C, uint16_t>(name, k, wc, lc, lt, lf, pc, pt, pf, out);
    case 4: return launch_where<C, uint32_t>(name, k, wc, lc, lt, lf, pc, pt, pf, out);
    default: return launch_where<C, uint64_t>(name, k, wc, lc, lt, lf, pc, pt, pf, out);
    }
}

static void test_where() {
    for (int ci = 0; ci < 5; ++ci) {
        DT cd = WHERE_CONDS[ci];
        size_t cs = dt_size(cd);
        for (int vi = 0; vi < 9; ++vi) {
            DT vd = WHERE_VALS[vi];
            size_t vs = dt_size(vd);
            char name[64];
            snprintf(name, sizeof name, "where_%s_%s", dt_name(cd), dt_name(vd));
            for (const WhereCase &wc : where_cases()) {
                Layout lc = bin_layout(wc.dims, wc.sc, wc.startc), lt = bin_layout(wc.dims, wc.st, wc.startt),
                       lf = bin_layout(wc.dims, wc.sf, wc.startf);
                G.c.ctx = std::string(name) + " cond " + lc.str() + " t " + lt.str() + " f " + lf.str() +
                          (wc.blocks ? " blocks " + std::to_string(wc.blocks) : "");
                size_t n = lc.elems();
                size_t lenc = lc.start + lc.reach(), lent = lt.start + lt.reach(), lenf = lf.start + lf.reach();
                Buf bc(lenc, cs), bt(lent, vs), bf(lenf, vs), out(n, vs);
                for (size_t i = 0; i < lenc; ++i) {
                    // About half zero; nonzero values sometimes only in the top byte.
                    uint64_t v = 0;
                    int r = (int)(rng() % 8);
                    if (r >= 4) v = rng();
                    if (r == 7) v = (uint64_t)1 << (8 * cs - 1 - rng() % 8);
                    if (v != 0 && (v & (~(uint64_t)0 >> (64 - 8 * cs))) == 0) v = 1;
                    memcpy(bc.p + i * cs, &v, cs);
                }
                for (size_t i = 0; i < lent * vs; i += 8) {
                    uint64_t v = rng();
                    memcpy(bt.p + i, &v, std::min<size_t>(8, lent * vs - i));
                }
                for (size_t i = 0; i < lenf * vs; i += 8) {
                    uint64_t v = rng();
                    memcpy(bf.p + i, &v, std::min<size_t>(8, lenf * vs - i));
                }
                bool ok;
                switch (cs) {
                case 1: ok = launch_where_c<uint8_t>(name, WHERE_K[ci][vi], vs, wc, lc, lt, lf, bc.p, bt.p, bf.p, out.p); break;
                case 2: ok = launch_where_c<uint16_t>(name, WHERE_K[ci][vi], vs, wc, lc, lt, lf, bc.p, bt.p, bf.p, out.p); break;
                case 4: ok = launch_where_c<uint32_t>(name, WHERE_K[ci][vi], vs, wc, lc, lt, lf, bc.p, bt.p, bf.p, out.p); break;
                default: ok = launch_where_c<uint64_t>(name, WHERE_K[ci][vi], vs, wc, lc, lt, lf, bc.p, bt.p, bf.p, out.p); break;
                }
                if (!ok) {
                    G.c.fail("launch failed");
                    continue;
                }
                if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
                for (size_t i = 0; i < n; ++i) {
                    const unsigned char *c = bc.p + (lc.start + lc.offset(i)) * cs;
                    bool nz = false;
                    for (size_t j = 0; j < cs; ++j) nz |= c[j] != 0;
                    const unsigned char *want = nz ? bt.p + (lt.start + lt.offset(i)) * vs
                                                   : bf.p + (lf.start + lf.offset(i)) * vs;
                    G.c.checks++;
                    if (memcmp(out.p + i * vs, want, vs) != 0) {
                        uint64_t g = 0, w = 0;
                        memcpy(&g, out.p + i * vs, vs);
                        memcpy(&w, want, vs);
                        G.c.fail("i=%zu cond %s got %#llx want %#llx", i, nz ? "!= 0" : "== 0",
                                 (unsigned long long)g, (unsigned long long)w);
                    }
                }
            }
        }
    }
}

// The grid-stride loops past the first grid (elementwise.rs caps the grid at MAX_GRID blocks,
// which only huge tensors reach): the same kernels with fewer blocks than the work needs.
static void test_grid_stride() {
    for (size_t n : {4097, 9000}) {
        for (int strided_case = 0; strided_case < 3; ++strided_case) {
            Layout l = strided_case == 0 ? contiguous({n}) : strided_case == 1 ? strided({n / 9, 9}, {1, n / 9})
                                                                                : strided({n / 32, 32}, {0, 1});
            G.c.ctx = "grid-stride affine_f32 " + l.str();
            Buf in = make_input(F32, l, [&] { return gen(F32, -8, 8, false); });
            size_t m = l.elems();
            Buf out(m, 4);
            Plan p = plan(l.dims, {l.strides}, 4);
            const float *src = in.as<float>() + l.start;
            bool ok;
            G.launches++;
            if (p.kind == CONTIGUOUS) {
                ok = emu::launch("affine_f32 (2 blocks)", &affine_f32, dim3(2), dim3(256), m, src, out.as<float>(), 2.0f,
                                 1.0f);
            } else {
                EwStrided1 s;
                memcpy(&s, p.w, sizeof s);
                ok = emu::launch("affine_f32_strided (2 blocks)", &affine_f32_strided, dim3(2), dim3(256), m, s, src,
                                 out.as<float>(), 2.0f, 1.0f);
            }
            if (!ok) {
                G.c.fail("launch failed");
                continue;
            }
            for (size_t i = 0; i < m; ++i) {
                float x = src[l.offset(i)], want = x * 2.0f + 1.0f, got = out.as<float>()[i];
                G.c.checks++;
                if (!same(got, want)) G.c.fail("i=%zu got %g want %g", i, got, want);
            }
        }
    }
}

// The plan port itself against the expectations of elementwise.rs's unit tests.
static void test_plan_port() {
    G.c.ctx = "plan";
    Plan p = plan({2, 3, 8}, {{24, 8, 1}, {0, 0, 1}}, 4);
    if (!(p.kind == STRIDED && p.w[0] == 2 && p.w[1] == 1 && p.w[2] == 8 && p.w[3] == 6 &&
          p.w[2 + 3 * MAX_RANK] == 1 && p.w[3 + 3 * MAX_RANK] == 8 && p.w[2 + 4 * MAX_RANK] == 1 &&
          p.w[3 + 4 * MAX_RANK] == 0))
        G.c.fail("row broadcast plan");
    if (plan({4, 5, 6}, {{30, 6, 1}}, 4).kind != CONTIGUOUS) G.c.fail("contiguous plan");
    if (plan({2, 2, 2, 2, 2, 2, 2}, {{64, 32, 16, 8, 4, 2, 1}, {0, 16, 0, 4, 0, 1, 0}}, 4).kind != FALLBACK)
        G.c.fail("rank-7 plan");
    p = plan({5, 8}, {{10, 1}}, 4);
    if (!(p.kind == STRIDED && p.w[1] == 0)) G.c.fail("narrow plan");
    p = plan({2, 3, 4, 8}, {{0, 0, 8, 1}, {96, 32, 8, 1}, {0, 0, 0, 0}}, 16);
    if (!(p.kind == STRIDED && p.w[0] == 2 && p.w[1] == 1 && p.w[2] == 32 && p.w[3] == 6 &&
          p.w[2 + 3 * MAX_RANK] == 1 && p.w[3 + 3 * MAX_RANK] == 0 && p.w[2 + 4 * MAX_RANK] == 1 &&
          p.w[3 + 4 * MAX_RANK] == 32 && p.w[2 + 5 * MAX_RANK] == 0 && p.w[3 + 5 * MAX_RANK] == 0))
        G.c.fail("where mask plan");
    G.c.checks += 5;
}

// ---- batch norm ------------------------------------------------------------------------------
// bnorm_<dt> against (x - mean) / sqrt(var + eps) * w + b in double rounded to the dtype, over
// planes that take whole packs (inner a multiple of the pack) and elements, misaligned x too;
// each case also with the ReLU after it (`vec` bit 1).
typedef void (*BnK)(EwBnArgs, float, const void *, const void *, void *);
typedef void (*BnK64)(EwBnArgs, double, const void *, const void *, void *);
static void test_bnorm() {
    const DT dts[] = {F32, F16, BF16, F64};
    void *ks[] = {(void *)bnorm_f32, (void *)bnorm_f16, (void *)bnorm_bf16, (void *)bnorm_f64};
    struct BnCase {
        size_t b, c, inner, start;
    };
    const BnCase cases[] = {{2, 3, 16, 0}, {3, 5, 7, 0}, {2, 4, 24, 0}, {1, 3, 1, 0}, {2, 3, 16, 1}, {4, 70, 9, 0}};
    const double eps = 1e-5;
    for (int di = 0; di < 8; ++di) {
        DT d = dts[di % 4];
        const bool relu = di >= 4;
        for (const BnCase &bc : cases) {
            const size_t n = bc.b * bc.c * bc.inner, vec = pack_elems(dt_size(d), dt_size(d));
            G.c.ctx = std::string("bnorm_") + dt_name(d) + " " + std::to_string(bc.b) + "x" + std::to_string(bc.c) +
                      "x" + std::to_string(bc.inner) + " start " + std::to_string(bc.start) + (relu ? " relu" : "");
            Buf x(bc.start + n, dt_size(d)), p(4 * bc.c, dt_size(d)), out(n, dt_size(d));
            for (size_t i = 0; i < bc.start + n; ++i) store(d, x.p, i, gen(d, -8, 8, false));
            for (size_t k = 0; k < 4 * bc.c; ++k) {
                double v = gen(d, -2, 2, false);
                store(d, p.p, k, k / bc.c == 1 ? fabs(v) + 0.25 : v); // var > 0
            }
            EwBnArgs a;
            a.n = (uint32_t)n, a.inner = (uint32_t)bc.inner, a.c = (uint32_t)bc.c;
            magic_divisor(a.inner, a.inner_magic, a.inner_shift);
            magic_divisor(a.c, a.c_magic, a.c_shift);
            const bool packs = bc.inner % vec == 0;
            a.vec = (packs ? 1u : 0u) | (relu ? 2u : 0u);
            dim3 grid = launch_config(n, packs ? vec : 1), block((unsigned)BLOCK);
            const char *xp = (const char *)x.p + bc.start * dt_size(d);
            G.launches++;
            bool ok = d == F64 ? emu::launch("bnorm", (BnK64)ks[di % 4], grid, block, a, eps, (const void *)xp,
                                             (const void *)p.p, out.p)
                               : emu::launch("bnorm", (BnK)ks[di % 4], grid, block, a, (float)eps, (const void *)xp,
                                             (const void *)p.p, out.p);
            if (!ok) {
                G.c.fail("launch failed");
                continue;
            }
            if (!out.intact(n)) G.c.fail("wrote outside the output's %zu elements", n);
            for (size_t i = 0; i < n; ++i) {
                size_t ch = i / bc.inner % bc.c;
                double xv = load(d, x.p, bc.start + i), m = load(d, p.p, ch), v = load(d, p.p, bc.c + ch),
                       w = load(d, p.p, 2 * bc.c + ch), b = load(d, p.p, 3 * bc.c + ch);
                double s = sqrt(v + (d == F64 ? eps : (double)(float)eps));
                const double y = (xv - m) / s * w + b;
                double want = round_to(d, relu && !(y > 0) ? 0.0 : y), got = load(d, out.p, i);
                G.c.checks++;
                double tol = rtol_of(d) * 4 * (fabs(want) + fabs((xv - m) / s * w) + fabs(b)) + atol_of(d);
                if (!close(got, want, tol)) G.c.fail("i=%zu x=%.17g got %.17g want %.17g", i, xv, got, want);
            }
        }
    }
}

int main(int argc, char **argv) {
    std::string only = argc > 1 ? argv[1] : "";
    auto want = [&](const char *s) { return only.empty() || only == s; };
    test_plan_port();
    if (want("unary")) test_unary();
    if (want("scalar")) test_scalar_ops();
    if (want("cast")) test_casts();
    if (want("binary")) test_binary();
    if (want("grid")) test_grid_stride();
    if (want("where")) test_where();
    if (want("bnorm")) test_bnorm();
    // Every kernel of the tables ran at least once.
    size_t kernels = 0;
    auto covered = [&](K2 k) {
        for (void *f : {k.c, k.s}) {
            kernels++;
            if (!emu::S.launched.count(f)) {
                G.c.ctx = "coverage";
                G.c.fail("kernel %p never ran", f);
            }
        }
    };
    if (only.empty()) {
        for (int di = 0; di < 4; ++di) {
            for (auto &u : UNARY_K) covered(u[di]);
            covered(AFFINE_K[di]);
            covered(ELU_K[di]);
            covered(POWF_K[di]);
            for (auto &c : CAST_K[di]) covered(c);
        }
        for (auto &b : BIN_K)
            for (K2 k : b) covered(k);
        for (auto &w : WHERE_K)
            for (K2 k : w) covered(k);
    }
    printf("elementwise: %zu kernels of the tables ran\n", kernels);
    if (want("binary") && G.half_packs == 0) G.c.fail("no binary launch took 8-byte packs");
    printf("elementwise: %ld launches (%ld on 8-byte packs), %ld checks, bad=%ld\n", G.launches, G.half_packs,
           G.c.checks, G.c.bad);
    return G.c.bad != 0;
}
