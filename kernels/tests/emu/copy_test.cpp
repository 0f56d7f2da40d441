// Runs kernels/hip/copy.hip's batched 2-D copies (copy2d_many_b1/2/4/8) on the host through
// emu.h and checks them byte for byte against a host reference of candle's copy2d, copy by
// copy: batches of 1 to 8 copies (a `repeat_kv` of one source 8 times, a KV-cache append,
// narrowed sources with row strides and start offsets), empty copies left out of a batch as
// candle-rocm leaves them out, blocks of 256 with candle-rocm's grid (one thread per element)
// and small grids (the grid-stride loop), and element sizes 1, 2, 4 and 8. Every destination
// byte no copy covers must keep its poison. Also the nearest-neighbour upsampling
// (upsample_nearest_b1/2/4/8) against candle-kernels' index rule (f64 products, clamped): 2x,
// 3x, non-integer ratios up and down, rows of whole runs (one store a run) and not, small grids.
// Prints bad=<mismatches> and exits non-zero on any.
#include "emu.h"

#include "check.h"

// CP_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef CP_SOURCE
#define CP_SOURCE "../../hip/copy.hip"
#endif
#include CP_SOURCE

using namespace chk;

struct Copy {
    size_t src; // index of the source buffer
    uint32_t d1, d2, src_s, dst_s;
    uint64_t src_o, dst_o;
};

static Counter C;
static long launches;

// One case: `srcs` buffers of `src_len` elements, a destination of `dst_len`, the copies; runs
// the kernel of element type T with `grid` blocks (0: one thread per element) and checks.
template <typename T>
static void run_case(const char *what, void (*kernel)(CopyBatch, T *), size_t nsrc, size_t src_len,
                     size_t dst_len, const std::vector<Copy> &copies, unsigned grid) {
    C.ctx = std::string(what) + " b" + std::to_string(sizeof(T));
    std::mt19937_64 rng(0x5eed + copies.size() * 7 + sizeof(T));
    std::vector<std::vector<T>> src(nsrc, std::vector<T>(src_len));
    for (auto &s : src)
        for (auto &v : s) v = (T)rng();
    const T poison = (T)0xa5a5a5a5a5a5a5a5ull;
    std::vector<T> dst(dst_len, poison), want(dst_len, poison);
    std::vector<bool> covered(dst_len, false);
    for (const Copy &c : copies)
        for (uint32_t r = 0; r < c.d1; r++)
            for (uint32_t k = 0; k < c.d2; k++) {
                size_t o = c.dst_o + (size_t)r * c.dst_s + k;
                want[o] = src[c.src][c.src_o + (size_t)r * c.src_s + k];
                covered[o] = true;
            }
    // The batch as candle-rocm's copy.rs builds it: empty copies left out, prefix sums.
    CopyBatch b;
    memset(&b, 0, sizeof b);
    uint32_t total = 0, n = 0;
    for (const Copy &c : copies) {
        if (c.d1 == 0 || c.d2 == 0) continue;
        b.src[n] = (uint64_t)(uintptr_t)(src[c.src].data() + c.src_o);
        b.dst_o[n] = c.dst_o;
        b.d1[n] = c.d1;
        b.d2[n] = c.d2;
        b.src_s[n] = c.src_s;
        b.dst_s[n] = c.dst_s;
        b.start[n] = total;
        total += c.d1 * c.d2;
        n++;
    }
    if (n == 0) return;
    b.start[n] = total;
    b.n = n;
    unsigned g = grid ? grid : (total + 255) / 256;
    launches++;
    if (!emu::launch(what, kernel, dim3(g), dim3(256), b, dst.data())) {
        C.fail("launch failed");
        return;
    }
    for (size_t i = 0; i < dst_len; i++) {
        C.checks++;
        if (dst[i] != want[i]) {
            C.fail("element %zu (%s): got %llx want %llx", i, covered[i] ? "copied" : "untouched",
                   (unsigned long long)dst[i], (unsigned long long)want[i]);
            return;
        }
    }
}

template <typename T> static void run_all(void (*kernel)(CopyBatch, T *)) {
    for (unsigned grid : {0u, 1u, 3u}) {
        // repeat_kv: (1, 4, 5, 16) concatenated 8 times along dim 2: d1 = 4 rows of 80.
        std::vector<Copy> rep;
        for (uint32_t i = 0; i < 8; i++) rep.push_back({0, 4, 80, 80, 640, 0, (uint64_t)i * 80});
        run_case<T>("repeat_kv", kernel, 1, 320, 2560, rep, grid);
        // KV-cache append: (1, 4, 5, 16) + (1, 4, 1, 16) along dim 2.
        run_case<T>("kv append", kernel, 2, 320, 384, {{0, 4, 80, 80, 96, 0, 0}, {1, 4, 16, 16, 96, 0, 80}},
                    grid);
        // Narrowed sources (row stride 70, start offsets) into a destination with a gap left
        // untouched (dst_s larger than the copies' rows): poison must survive there.
        run_case<T>("strided", kernel, 3, 300, 200,
                    {{0, 3, 35, 70, 40, 14, 0}, {1, 3, 3, 70, 40, 0, 35}, {2, 2, 1, 7, 40, 9, 138}}, grid);
        // Empty copies among real ones, a single copy, and odd sizes.
        run_case<T>("empties", kernel, 3, 64, 64,
                    {{0, 0, 5, 5, 5, 0, 0}, {1, 7, 3, 9, 9, 1, 0}, {2, 5, 0, 5, 5, 0, 3}, {2, 1, 2, 2, 9, 60, 5}},
                    grid);
        run_case<T>("one", kernel, 1, 1000, 1000, {{0, 1, 999, 999, 999, 1, 0}}, grid);
    }
}

// Port of candle-rocm/src/launch/upsample.rs `up_args` (RUN = UP_RUN).
static UpArgs up_args(size_t planes, size_t h_in, size_t w_in, size_t h_out, size_t w_out) {
    const size_t rpr = (w_out + UP_RUN - 1) / UP_RUN;
    return UpArgs{planes * h_out * rpr, (double)h_in / h_out, (double)w_in / w_out, (uint32_t)h_in, (uint32_t)w_in,
                  (uint32_t)h_out, (uint32_t)w_out, (uint32_t)rpr, (uint32_t)(w_out % UP_RUN == 0)};
}

template <typename T>
static void up_case(void (*kernel)(UpArgs, const T *, T *), size_t planes, size_t h_in, size_t w_in, size_t h_out,
                    size_t w_out, unsigned grid) {
    const size_t n_in = planes * h_in * w_in, n_out = planes * h_out * w_out;
    std::vector<T> src(n_in);
    for (size_t i = 0; i < n_in; i++) src[i] = (T)(i * 2654435761u + 1);
    // Poison past the end: the kernel must write n_out elements, no more.
    std::vector<T> dst(n_out + 64, (T)0x5a);
    const UpArgs a = up_args(planes, h_in, w_in, h_out, w_out);
    const unsigned g = grid ? grid : (unsigned)std::max<uint64_t>((a.runs + 255) / 256, 1);
    launches++;
    C.ctx = "upsample " + std::to_string(sizeof(T)) + "B " + std::to_string(planes) + "x(" + std::to_string(h_in) +
            "," + std::to_string(w_in) + ")->(" + std::to_string(h_out) + "," + std::to_string(w_out) + ") grid " +
            std::to_string(g);
    if (!emu::launch("upsample", kernel, dim3(g), dim3(256), a, (const T *)src.data(), dst.data())) {
        C.fail("launch failed");
        return;
    }
    for (size_t p = 0; p < planes; p++)
        for (size_t oh = 0; oh < h_out; oh++)
            for (size_t ow = 0; ow < w_out; ow++) {
                size_t ih = (size_t)(oh * ((double)h_in / h_out)), iw = (size_t)(ow * ((double)w_in / w_out));
                ih = std::min(ih, h_in - 1);
                iw = std::min(iw, w_in - 1);
                C.checks++;
                const T want = src[(p * h_in + ih) * w_in + iw], got = dst[(p * h_out + oh) * w_out + ow];
                if (got != want) C.fail("plane %zu (%zu, %zu)", p, oh, ow);
            }
    for (size_t i = n_out; i < dst.size(); i++)
        if (dst[i] != (T)0x5a) C.fail("wrote past the output at %zu", i);
}

template <typename T> static void up_all(void (*kernel)(UpArgs, const T *, T *)) {
    for (unsigned grid : {0u, 1u, 3u}) {
        up_case<T>(kernel, 3, 8, 8, 16, 16, grid);   // 2x, whole runs
        up_case<T>(kernel, 2, 5, 7, 15, 21, grid);   // 3x, rows of 21 (a short last run)
        up_case<T>(kernel, 1, 5, 7, 9, 15, grid);    // non-integer ratios
        up_case<T>(kernel, 2, 9, 12, 4, 8, grid);    // down
        up_case<T>(kernel, 4, 1, 1, 3, 4, grid);     // one element a plane
    }
}

int main() {
    up_all<uint8_t>(upsample_nearest_b1);
    up_all<uint16_t>(upsample_nearest_b2);
    up_all<uint32_t>(upsample_nearest_b4);
    up_all<uint64_t>(upsample_nearest_b8);
    run_all<uint8_t>(copy2d_many_b1);
    run_all<uint16_t>(copy2d_many_b2);
    run_all<uint32_t>(copy2d_many_b4);
    run_all<uint64_t>(copy2d_many_b8);
    printf("copy: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
}
