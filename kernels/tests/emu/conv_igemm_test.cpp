// Runs kernels/hip/conv_igemm.hip (conv_igemm_<T>, and the taps-outer conv_igemm_taps_<T> over a
// kernel permuted as candle-rocm permutes it, on the cases with a multiple of 32 input
// channels; T f16, bf16) on the host through emu.h
// and checks every output element against a double-precision host convolution written from the
// definition (input position = output position * stride + tap * dilation - padding, zero
// outside the input), on the matrix-unit family the build emulates: the CUDA path (mma.sync
// m16n8k16, emu.h's default), -DEMU_AMD_WAVE=64 -D__gfx942__ (MFMA), -DEMU_AMD_WAVE=32
// -D__gfx1100__ or -D__gfx1200__ (WMMA). Cases: 3x3 padded (ResNet-like), channels and
// positions that are not multiples of the 64 x 128 tile or of 16 (tails in every dimension,
// K shorter than one 32-wide step and K over many steps), strided, dilated and rectangular
// kernels with every parameter different along h and w, a strided 1x1, tiny images (1x1, 2x2
// with a 3x3 kernel), conv1d (h = 1) over several position tiles, and inputs read through a
// channel slice, channels-last strides and a start offset; kernels read by 16-byte loads and,
// misaligned or with K % 8 != 0, element by element (w_vec 0). Inputs are multiples of 1/8 in
// [-1, 1] (exact in f16 and bf16; every product and partial sum exact in f32), so the output
// must equal the exact result rounded to T. Output elements must all be written, and nothing
// past the output. Prints bad=<mismatches> and exits non-zero on any.
// -DCI_EXIT_ON_BAD stops at the first failing case (the mutant tests).
#include "emu.h"

#include "check.h"

#ifndef CI_SOURCE
#define CI_SOURCE "../../hip/conv_igemm.hip"
#endif
#include CI_SOURCE

using namespace chk;

#if !defined(FA_MMA_KERNELS)
#error "conv_igemm_test.cpp: build for a matrix-unit family (the kernels exist only there)"
#endif

static Counter C;
static long launches;

// One convolution: input (b, c, h, w) read at off + b s_b + c s_c + y s_h + x s_w of a buffer of
// len elements; kernel (co, c, kh, kw).
struct Geo {
    const char *what;
    uint32_t b, c, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw;
    int layout; // 0 contiguous, 1 channel slice of c + 3 channels, 2 channels last, 3 offset 5
    uint32_t out_h() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
    uint32_t out_w() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// The kernels' K orders and block widths.
enum Kind { CHANNELS, TAPS };
static const char *const KIND_NAME[] = {"channels outer", "taps outer"};

template <typename T>
static void run(DT dt, void (*kernel)(ConvIgemmArgs, const T *, const T *, T *), const Geo &g, bool w_skew,
                Kind kind = CHANNELS) {
    C.ctx = std::string(g.what) + " " + dt_name(dt) + " layout " + std::to_string(g.layout) +
            (w_skew ? " w misaligned " : " ") + KIND_NAME[kind];
    std::mt19937_64 rng(g.b * 7919 + g.c * 104729 + g.co * 31 + g.h * 17 + g.layout + (w_skew ? 3 : 0));
    auto small = [&] { return ((double)(rng() % 17) - 8.0) / 8.0; };
    const uint64_t hw = (uint64_t)g.h * g.w;
    uint64_t s_b, s_c, s_h, s_w, off = 0, len;
    switch (g.layout) {
    case 1: s_b = (g.c + 3) * hw, s_c = hw, s_h = g.w, s_w = 1, off = hw, len = g.b * (g.c + 3) * hw; break;
    case 2: s_b = hw * g.c, s_c = 1, s_h = (uint64_t)g.w * g.c, s_w = g.c, len = g.b * g.c * hw; break;
    case 3: s_b = g.c * hw, s_c = hw, s_h = g.w, s_w = 1, off = 5, len = g.b * g.c * hw + 5; break;
    default: s_b = g.c * hw, s_c = hw, s_h = g.w, s_w = 1, len = g.b * g.c * hw;
    }
    const uint32_t K = g.c * g.kh * g.kw, ho = g.out_h(), wo = g.out_w(), P = ho * wo, N = g.b * P;
    std::vector<double> x(len), w((size_t)g.co * K);
    for (auto &v : x) v = small();
    for (auto &v : w) v = small();
    Buf xb(len, 2), wb(w.size(), 2, w_skew ? 1 : 0), yb((size_t)N * g.co, 2);
    for (size_t i = 0; i < len; i++) store(dt, xb.p, i, x[i]);
    // Taps outer: the kernel as (co, ky, kx, ci), as candle-rocm's transpose writes it.
    const uint32_t taps = g.kh * g.kw;
    for (size_t i = 0; i < w.size(); i++) {
        const size_t co = i / K, ci = i % K / taps, r = i % taps;
        store(dt, wb.p, kind == CHANNELS ? i : co * K + r * g.c + ci, w[i]);
    }

    ConvIgemmArgs a;
    memset(&a, 0, sizeof a);
    a.s_b = s_b, a.s_c = s_c, a.s_h = s_h, a.s_w = s_w;
    a.batch = g.b, a.c_in = g.c, a.h_in = g.h, a.w_in = g.w;
    a.c_out = g.co, a.h_out = ho, a.w_out = wo, a.k_h = g.kh;
    a.k_w = g.kw, a.stride_h = g.sh, a.stride_w = g.sw, a.pad_h = g.ph;
    a.pad_w = g.pw, a.dil_h = g.dh, a.dil_w = g.dw;
    a.w_vec = K % 8 == 0 && ((uintptr_t)wb.p % 16) == 0; // candle-rocm's rule
    a.k = K, a.n = N, a.p = P;
    const dim3 grid((N + CI_BN - 1) / CI_BN, (g.co + CI_BM - 1) / CI_BM);
    launches++;
    if (!emu::launch(C.ctx.c_str(), kernel, grid, dim3(CI_THREADS), a, (const T *)(xb.as<T>() + off),
                     (const T *)wb.as<T>(), yb.as<T>())) {
        C.fail("launch failed");
        return;
    }
    if (!yb.intact((size_t)N * g.co)) C.fail("wrote outside the output");
    for (uint32_t img = 0; img < g.b; img++)
        for (uint32_t co = 0; co < g.co; co++)
            for (uint32_t oy = 0; oy < ho; oy++)
                for (uint32_t ox = 0; ox < wo; ox++) {
                    double acc = 0;
                    for (uint32_t ci = 0; ci < g.c; ci++)
                        for (uint32_t ky = 0; ky < g.kh; ky++)
                            for (uint32_t kx = 0; kx < g.kw; kx++) {
                                const long y = (long)oy * g.sh + (long)ky * g.dh - (long)g.ph;
                                const long xx = (long)ox * g.sw + (long)kx * g.dw - (long)g.pw;
                                if (y < 0 || xx < 0 || y >= (long)g.h || xx >= (long)g.w) continue;
                                acc += x[off + img * s_b + ci * s_c + y * s_h + xx * s_w] *
                                       w[(((size_t)co * g.c + ci) * g.kh + ky) * g.kw + kx];
                            }
                    const size_t i = (((size_t)img * g.co + co) * ho + oy) * wo + ox;
                    const double got = load(dt, yb.p, i), want = round_to(dt, acc);
                    C.checks++;
                    if (!same(got, want)) {
                        C.fail("img %u co %u (%u, %u): got %g want %g", img, co, oy, ox, got, want);
#if defined(CI_EXIT_ON_BAD)
                        printf("bad=%ld\n", C.bad);
                        exit(1);
#endif
                        return;
                    }
                }
}

static const Geo CASES[] = {
    // what, b, c, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, layout
    {"3x3 pad 1 (ResNet-like)", 2, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"3x3 c_in 64 (K 576, 18 steps, 16-byte kernel loads)", 1, 64, 5, 6, 20, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"odd channels, K 27 < one step", 2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"c_out 70 (two channel tiles), stride 2", 1, 19, 6, 11, 70, 3, 3, 2, 2, 1, 1, 1, 1, 0},
    {"dilation 2, padding 2", 1, 9, 13, 10, 17, 3, 3, 1, 1, 2, 2, 2, 2, 0},
    {"every parameter different along h and w", 2, 3, 13, 11, 4, 3, 2, 2, 1, 1, 2, 2, 1, 0},
    {"2x5 kernel", 2, 5, 9, 12, 6, 2, 5, 1, 1, 1, 1, 1, 1, 0},
    {"1x1 stride 2", 3, 16, 9, 7, 8, 1, 1, 2, 2, 0, 0, 1, 1, 0},
    {"1x1 image, 3x3 kernel pad 1", 3, 7, 1, 1, 9, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"2x2 image, 3x3 kernel pad 1", 2, 8, 2, 2, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"390 positions (4 position tiles, the last partial)", 3, 6, 10, 13, 12, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"conv1d k3 (Whisper-like), 600 positions", 2, 20, 1, 300, 24, 1, 3, 1, 1, 0, 1, 1, 1, 0},
    {"conv1d k4 s2 d3", 3, 5, 1, 41, 6, 1, 4, 1, 2, 0, 2, 1, 3, 0},
    {"channel slice", 2, 7, 9, 8, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"channels last", 2, 8, 7, 9, 10, 3, 3, 1, 1, 1, 1, 1, 1, 2},
    {"start offset 5", 2, 8, 7, 9, 10, 3, 3, 1, 1, 1, 1, 1, 1, 3},
    // Multiples of 32 input channels (also run taps outer), with CASES[1].
    {"c_in 32, 3x3", 2, 32, 6, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"c_in 64, c_out 130 (three channel tiles), stride 2", 1, 64, 9, 11, 130, 3, 3, 2, 2, 1, 1, 1, 1, 0},
    {"c_in 32, 2x3 kernel dilated, padding 2 / 1", 1, 32, 8, 9, 17, 2, 3, 1, 1, 2, 1, 2, 2, 0},
    {"c_in 32, channels last", 2, 32, 5, 6, 12, 3, 3, 1, 1, 1, 1, 1, 1, 2},
    {"c_in 32, channel slice", 1, 32, 5, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"c_in 32, conv1d k3, 300 positions", 2, 32, 1, 150, 24, 1, 3, 1, 1, 0, 1, 1, 1, 0},
    {"c_in 64, 1x1, c_out 140, start offset 5", 2, 64, 5, 5, 140, 1, 1, 1, 1, 0, 0, 1, 1, 3},
};

int main() {
    for (const Geo &g : CASES) {
        run<__half>(F16, conv_igemm_f16, g, false);
        run<__nv_bfloat16>(BF16, conv_igemm_bf16, g, false);
    }
    for (const Geo &g : CASES) {
        if (g.c % 32 != 0) continue;
        run<__half>(F16, conv_igemm_taps_f16, g, false, TAPS);
        run<__nv_bfloat16>(BF16, conv_igemm_taps_bf16, g, false, TAPS);
    }
    // The kernel's element loads where its 16-byte loads would otherwise run.
    run<__half>(F16, conv_igemm_f16, CASES[1], true);
    run<__nv_bfloat16>(BF16, conv_igemm_bf16, CASES[0], true);
    run<__nv_bfloat16>(BF16, conv_igemm_taps_bf16, CASES[1], true, TAPS);
    printf("conv_igemm: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
}
