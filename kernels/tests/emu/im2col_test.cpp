// Runs kernels/hip/copy.hip's convolution column kernels (im2col_rows_b1/2/4/8) on the host
// through emu.h and checks them element by element against a host reference written from the
// convolution's definition (input position = output position * stride + tap * dilation -
// padding, zero outside the input): 3x3 padded, strided and dilated 2-D shapes (one with every
// parameter different along h and w), a 1x1 stride-2 subsample, a 1-D shape (h = 1), an input
// read through permuted and sliced strides (a grouped convolution's channel slice), tiles of
// output positions that start inside the image (p0 > 0) and of several images, with
// candle-rocm's launch geometry (256 threads, one thread a run of columns of a plane, at most
// 65536 blocks in x) and with tiny and two-dimensional grids (the grid-stride loop); every tile
// both ways: rows per image and images stacked along the columns (`stacked`). Destination
// elements past the tile must keep their poison. Also unstack_rows_b1/2/4/8, which put a
// stacked tile's product into NCHW.
// Prints bad=<mismatches> and exits non-zero on any.
#include "emu.h"

#include "check.h"

#ifndef CP_SOURCE
#define CP_SOURCE "../../hip/copy.hip"
#endif
#include CP_SOURCE

using namespace chk;

static Counter C;
static long launches;

// One convolution's geometry; the input is read at element offset
// b * s_b + c * s_c + y * s_h + x * s_w of a buffer of `len` elements.
struct Geo {
    uint32_t b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
    uint64_t s_b, s_c, s_h, s_w, len;
    uint32_t out_h() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
    uint32_t out_w() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// Runs the tile (images img0 .. img0 + imgs, positions p0 .. p0 + cols) with `grid`
// (0, 0: candle-rocm's geometry), its images stacked along the columns or not, and checks it.
template <typename T>
static void run_tile1(const char *what, void (*kernel)(Im2colArgs, const T *, T *), const Geo &g, uint32_t img0,
                      uint32_t imgs, uint32_t p0, uint32_t cols, dim3 grid, bool stacked) {
    C.ctx = std::string(what) + " b" + std::to_string(sizeof(T)) + " p0=" + std::to_string(p0) +
            (stacked ? " stacked" : "");
    std::mt19937_64 rng(0x1c01 + p0 * 3 + sizeof(T) + img0);
    std::vector<T> src(g.len);
    for (auto &v : src) v = (T)(rng() | 1); // never zero, so a zero is always padding
    const uint32_t taps = g.kh * g.kw, rows = imgs * g.c * taps, wo = g.out_w();
    const size_t n = (size_t)rows * cols;
    const T poison = (T)0xa5a5a5a5a5a5a5a5ull;
    std::vector<T> dst(n + 17, poison), want(n + 17, poison);
    for (uint32_t i = 0; i < imgs; i++)
        for (uint32_t c = 0; c < g.c; c++)
            for (uint32_t ky = 0; ky < g.kh; ky++)
                for (uint32_t kx = 0; kx < g.kw; kx++) {
                    size_t r = (((size_t)i * g.c + c) * g.kh + ky) * g.kw + kx;
                    // Stacked: row (c, ky, kx) of imgs * cols columns, image i's block at i * cols.
                    size_t rs = ((size_t)c * g.kh + ky) * g.kw + kx;
                    for (uint32_t q = 0; q < cols; q++) {
                        long oy = (p0 + q) / wo, ox = (p0 + q) % wo;
                        long y = oy * (long)g.sh + (long)ky * g.dh - (long)g.ph;
                        long x = ox * (long)g.sw + (long)kx * g.dw - (long)g.pw;
                        T v = 0;
                        if (y >= 0 && y < (long)g.h && x >= 0 && x < (long)g.w)
                            v = src[(img0 + i) * g.s_b + c * g.s_c + y * g.s_h + x * g.s_w];
                        want[stacked ? rs * imgs * cols + (size_t)i * cols + q : r * cols + q] = v;
                    }
                }
    Im2colArgs a;
    memset(&a, 0, sizeof a);
    a.s_b = g.s_b, a.s_c = g.s_c, a.s_h = g.s_h, a.s_w = g.s_w;
    a.c_in = g.c, a.h_in = g.h, a.w_in = g.w, a.w_out = wo;
    a.k_h = g.kh, a.k_w = g.kw, a.stride_h = g.sh, a.stride_w = g.sw;
    a.pad_h = g.ph, a.pad_w = g.pw, a.dil_h = g.dh, a.dil_w = g.dw;
    a.rows = rows, a.cols = cols, a.p0 = p0, a.stacked = stacked ? 1 : 0;
    if (grid.x == 0) {
        size_t run = g.kh * g.kw == 1 ? 4 : 1;
        size_t blocks = ((size_t)imgs * g.c * ((cols + run - 1) / run) + 255) / 256;
        grid = dim3(blocks < 65536 ? (unsigned)blocks : 65536u, 1);
    }
    launches++;
    // The host passes the tile's first image as the source pointer.
    if (!emu::launch(what, kernel, grid, dim3(256), a, src.data() + img0 * g.s_b, dst.data())) {
        C.fail("launch failed");
        return;
    }
    const size_t ld = stacked ? (size_t)imgs * cols : cols;
    for (size_t i = 0; i < dst.size(); i++) {
        C.checks++;
        if (dst[i] != want[i]) {
            C.fail("element %zu of %zu (row %zu col %zu): got %llx want %llx", i, n, i / ld, i % ld,
                   (unsigned long long)dst[i], (unsigned long long)want[i]);
            return;
        }
    }
}

// `run_tile1` both ways.
template <typename T>
static void run_tile(const char *what, void (*kernel)(Im2colArgs, const T *, T *), const Geo &g, uint32_t img0,
                     uint32_t imgs, uint32_t p0, uint32_t cols, dim3 grid) {
    run_tile1<T>(what, kernel, g, img0, imgs, p0, cols, grid, false);
    run_tile1<T>(what, kernel, g, img0, imgs, p0, cols, grid, true);
}

// A contiguous (b, c, h, w) input.
static Geo dense(uint32_t b, uint32_t c, uint32_t h, uint32_t w, uint32_t k, uint32_t s, uint32_t p, uint32_t d) {
    uint64_t hw = (uint64_t)h * w;
    return Geo{b, c, h, w, k, k, s, s, p, p, d, d, c * hw, hw, w, 1, b * c * hw};
}

template <typename T> static void run_all(void (*kernel)(Im2colArgs, const T *, T *)) {
    for (dim3 grid : {dim3(0, 0), dim3(1, 1), dim3(2, 3)}) {
        Geo g = dense(2, 3, 5, 6, 3, 1, 1, 1); // ResNet's 3x3, padded
        run_tile<T>("3x3 pad 1", kernel, g, 0, 2, 0, g.out_h() * g.out_w(), grid);
        run_tile<T>("3x3 pad 1, second image, positions 7..", kernel, g, 1, 1, 7, 20, grid);
        g = dense(2, 2, 9, 7, 3, 2, 2, 2); // strided, dilated, padded past the reach
        run_tile<T>("3x3 s2 p2 d2", kernel, g, 0, 2, 0, g.out_h() * g.out_w(), grid);
        // Every parameter different along h and w (candle-rocm passes equal ones today).
        Geo r = Geo{2, 3, 9, 8, 3, 2, 2, 1, 1, 2, 2, 1, 216, 72, 8, 1, 432};
        run_tile<T>("3x2 sh2 sw1 ph1 pw2 dh2 dw1", kernel, r, 0, 2, 0, r.out_h() * r.out_w(), grid);
        g = dense(3, 4, 6, 6, 1, 2, 0, 1); // ResNet's 1x1 stride-2 downsample
        run_tile<T>("1x1 s2", kernel, g, 1, 2, 0, g.out_h() * g.out_w(), grid);
        // 1-D (conv1d as h = 1): Whisper's k = 3, padding 1, over 300 positions.
        Geo l = Geo{2, 5, 1, 300, 1, 3, 1, 1, 0, 1, 1, 1, 1500, 300, 300, 1, 3000};
        run_tile<T>("conv1d k3", kernel, l, 0, 2, 0, 300, grid);
        run_tile<T>("conv1d k3, positions 290..", kernel, l, 1, 1, 290, 10, grid);
        // Channels 0..3 of a (2, 8, 4, 5) tensor stored as (b, h, w, c): a grouped
        // convolution's slice of a channels-last input, with a 2x3 kernel.
        Geo s = Geo{2, 3, 4, 5, 2, 3, 1, 1, 1, 0, 1, 1, 160, 1, 40, 8, 320};
        run_tile<T>("sliced channels-last", kernel, s, 0, 2, 0, 5 * 3, grid);
        // ResNet's last stage in small: 49 positions an image, so a block spans planes.
        g = dense(4, 20, 7, 7, 3, 1, 1, 1);
        run_tile<T>("7x7 images, 4 of 20 channels", kernel, g, 0, 4, 0, 49, grid);
    }
    // More than one block of columns, and pairs past a small grid's reach.
    Geo big = dense(1, 40, 20, 30, 3, 1, 1, 1);
    run_tile<T>("600 positions, 40 planes", kernel, big, 0, 1, 0, 600, dim3(0, 0));
    run_tile<T>("600 positions, 40 planes, small grid", kernel, big, 0, 1, 0, 600, dim3(2, 7));
}

// unstack_rows_b<W>: (c_out, images, cols) rows into (images, c_out, cols), with candle-rocm's
// launch shape (256 threads, one thread a run of 4 elements) and small grids; elements past the
// output keep their poison.
template <typename T>
static void run_unstack(void (*kernel)(const T *, T *, uint32_t, uint32_t, uint32_t), uint32_t images,
                        uint32_t c_out, uint32_t cols, dim3 grid) {
    C.ctx = "unstack b" + std::to_string(sizeof(T)) + " " + std::to_string(images) + "x" + std::to_string(c_out) +
            "x" + std::to_string(cols);
    const size_t n = (size_t)images * c_out * cols;
    std::mt19937_64 rng(0x57ac + n + sizeof(T));
    std::vector<T> src(n);
    for (auto &v : src) v = (T)rng();
    const T poison = (T)0xa5a5a5a5a5a5a5a5ull;
    std::vector<T> dst(n + 9, poison), want(n + 9, poison);
    for (uint32_t img = 0; img < images; img++)
        for (uint32_t co = 0; co < c_out; co++)
            for (uint32_t q = 0; q < cols; q++)
                want[((size_t)img * c_out + co) * cols + q] = src[((size_t)co * images + img) * cols + q];
    if (grid.x == 0) {
        size_t blocks = ((size_t)images * c_out * ((cols + 3) / 4) + 255) / 256;
        grid = dim3(blocks < 65536 ? (unsigned)blocks : 65536u, 1);
    }
    launches++;
    if (!emu::launch("unstack", kernel, grid, dim3(256), (const T *)src.data(), dst.data(), images, c_out, cols)) {
        C.fail("launch failed");
        return;
    }
    for (size_t i = 0; i < dst.size(); i++) {
        C.checks++;
        if (dst[i] != want[i]) {
            C.fail("element %zu of %zu: got %llx want %llx", i, n, (unsigned long long)dst[i],
                   (unsigned long long)want[i]);
            return;
        }
    }
}

template <typename T> static void unstack_all(void (*kernel)(const T *, T *, uint32_t, uint32_t, uint32_t)) {
    for (dim3 grid : {dim3(0, 0), dim3(1, 1), dim3(3, 2)}) {
        run_unstack<T>(kernel, 4, 6, 49, grid);  // ResNet's 7x7 (runs of 4 and a last one of 1)
        run_unstack<T>(kernel, 3, 5, 196, grid); // its 14x14
        run_unstack<T>(kernel, 2, 3, 3, grid);   // rows shorter than a run
        run_unstack<T>(kernel, 1, 7, 10, grid);  // one image: a plain copy
    }
}

int main() {
    run_all<uint8_t>(im2col_rows_b1);
    run_all<uint16_t>(im2col_rows_b2);
    run_all<uint32_t>(im2col_rows_b4);
    run_all<uint64_t>(im2col_rows_b8);
    unstack_all<uint8_t>(unstack_rows_b1);
    unstack_all<uint16_t>(unstack_rows_b2);
    unstack_all<uint32_t>(unstack_rows_b4);
    unstack_all<uint64_t>(unstack_rows_b8);
    printf("im2col: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
}
