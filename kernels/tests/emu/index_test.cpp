// Runs kernels/hip/index.hip's index_select kernels on the host through emu.h and checks them
// byte for byte against a host reference of candle-rocm's semantics (an id that is negative, or
// >= the indexed dim, including the all-ones sentinels, selects a row of zeros): the row-copy
// kernels is_rows_<I>_v{16,8,4} with the launch plan of a line-for-line port of
// candle-rocm/src/ops/indexing.rs (RowsPlan::new), and the per-element is_<I>_<T> fallback with
// RocmDevice::cfg's geometry (blocks of 1024, one thread per element). Cases: u8/u32/i64 ids
// with valid, out-of-range, sentinel and negative values, strided ids, left > 1, element sizes
// 1/2/4/8 with row segments at and around every pack width, sources at misaligned offsets,
// long rows (several packs per thread) and small grids (the grid-stride loop).
// Prints bad=<mismatches> and exits non-zero on any mismatch.
#include "emu.h"

#include "check.h"

// IX_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef IX_SOURCE
#define IX_SOURCE "../../hip/index.hip"
#endif
#include IX_SOURCE

using namespace chk;

// ---- port of candle-rocm/src/ops/indexing.rs (RowsPlan) -----------------------------------------
static const size_t ROWS_BLOCK = 256, ROWS_MAX_BLOCKS = 1 << 16, CFG_BLOCK = 1024;
struct Plan {
    size_t bytes, packs;
    unsigned tpr, grid;
};
// false: no plan (the per-element kernels run).
static bool rows_plan(size_t rows, size_t row_bytes, uintptr_t src, uintptr_t out, Plan &p) {
    static const size_t widths[3] = {16, 8, 4};
    size_t bytes = 0;
    for (size_t b : widths)
        if (row_bytes % b == 0 && src % b == 0 && out % b == 0) {
            bytes = b;
            break;
        }
    if (bytes == 0) return false;
    size_t packs = row_bytes / bytes;
    if (packs == 0 || rows == 0) return false;
    size_t tpr = 1;
    while (tpr < packs) tpr <<= 1;
    tpr = std::min(tpr, ROWS_BLOCK);
    size_t per_block = ROWS_BLOCK / tpr;
    size_t grid = std::min(std::max<size_t>((rows + per_block - 1) / per_block, 1), ROWS_MAX_BLOCKS);
    p = Plan{bytes, packs, (unsigned)tpr, (unsigned)grid};
    return true;
}

// The values indexing.rs's unit test asserts.
static void test_port(Counter &c) {
    c.ctx = "port";
    Plan p;
    auto expect = [&](bool ok, size_t b, size_t packs, unsigned tpr, unsigned grid, const char *what) {
        c.checks++;
        if (!ok || p.bytes != b || p.packs != packs || p.tpr != tpr || (grid && p.grid != grid))
            c.fail("plan %s: got %zu %zu %u %u", what, p.bytes, p.packs, p.tpr, p.grid);
    };
    expect(rows_plan(32768, 4096, 256, 512, p), 16, 256, 256, 32768, "embedding");
    expect(rows_plan((size_t)1 << 30, 16, 0, 0, p), 16, 1, 1, (unsigned)ROWS_MAX_BLOCKS, "capped");
    expect(rows_plan(10, 48, 0, 0, p), 16, 3, 4, 1, "48 bytes");
    expect(rows_plan(3, 24, 0, 0, p), 8, 3, 4, 0, "24 bytes");
    expect(rows_plan(3, 32, 8, 0, p), 8, 4, 4, 0, "src 8-aligned");
    expect(rows_plan(3, 32, 0, 4, p), 4, 8, 8, 0, "out 4-aligned");
    expect(rows_plan(3, 12, 0, 0, p), 4, 3, 4, 0, "12 bytes");
    c.checks += 4;
    if (rows_plan(3, 6, 0, 0, p) || rows_plan(3, 16, 2, 0, p) || rows_plan(0, 16, 0, 0, p) ||
        rows_plan(3, 0, 0, 0, p))
        c.fail("a plan where indexing.rs has none");
}

// ---- kernel tables ---------------------------------------------------------------------------------
template <typename I> struct IK {
    void *rows[3];  // v16, v8, v4
    void *is[4];    // element size 1, 2, 4, 8: u8, bf16, f32, f64
};
#define IKT(IN)                                                                                                        \
    {{(void *)&is_rows_##IN##_v16, (void *)&is_rows_##IN##_v8, (void *)&is_rows_##IN##_v4},                           \
     {(void *)&is_##IN##_u8, (void *)&is_##IN##_bf16, (void *)&is_##IN##_f32, (void *)&is_##IN##_f64}}
static const IK<uint8_t> K_U8 = IKT(u8);
static const IK<uint32_t> K_U32 = IKT(u32);
static const IK<int64_t> K_I64 = IKT(i64);
template <typename I> static const IK<I> &kt();
template <> const IK<uint8_t> &kt<uint8_t>() { return K_U8; }
template <> const IK<uint32_t> &kt<uint32_t>() { return K_U32; }
template <> const IK<int64_t> &kt<int64_t>() { return K_I64; }
template <typename I> static const char *iname();
template <> const char *iname<uint8_t>() { return "u8"; }
template <> const char *iname<uint32_t>() { return "u32"; }
template <> const char *iname<int64_t>() { return "i64"; }

template <typename I, int B>
using RowsFn = void (*)(size_t, const I *, size_t, const Bytes<B> *, Bytes<B> *, size_t, size_t, size_t, unsigned);
template <typename I, typename T>
using IsFn = void (*)(size_t, const I *, size_t, const T *, T *, size_t, size_t, size_t, size_t);

struct Ctx {
    Counter c;
    long launches = 0, fast = 0;
} G;
static std::mt19937_64 rng(11);

// An id: mostly valid; else one past the end, far out of range, the all-ones sentinel, and for
// i64 negative values.
template <typename I> static I make_id(size_t src_dim) {
    const unsigned k = (unsigned)(rng() % 10);
    const uint64_t maxv = (uint64_t)(I)~(I)0 > 0 ? (uint64_t)(I)~(I)0 : (uint64_t)INT64_MAX;
    uint64_t v;
    switch (k) {
    case 6: v = src_dim; break;
    case 7: v = src_dim + 1 + rng() % 1000; break;
    case 8: return (I)~(I)0; // 0xFF.., -1 for i64
    case 9:
        if ((I)-1 < (I)0) return (I)(rng() % 2 ? INT64_MIN : -(int64_t)(1 + rng() % 5));
        v = maxv - 1;
        break;
    default: v = rng() % src_dim;
    }
    return (I)std::min<uint64_t>(v, maxv);
}
template <typename I> static bool valid(I v, size_t n) { return v >= (I)0 && (uint64_t)v < (uint64_t)n; }

template <typename T, typename I>
static bool run_is(const IK<I> &k, int ei, size_t numel, const I *ids, size_t ids_stride, const unsigned char *src,
                   unsigned char *out, size_t left, size_t src_dim, size_t n_ids, size_t right) {
    unsigned grid = (unsigned)((numel + CFG_BLOCK - 1) / CFG_BLOCK);
    return emu::launch("is", (IsFn<I, T>)k.is[ei], dim3(grid), dim3((unsigned)CFG_BLOCK), numel, ids, ids_stride,
                       (const T *)src, (T *)out, left, src_dim, n_ids, right);
}

template <typename I, int B>
static bool run_rows(const IK<I> &k, int pi, const Plan &p, size_t rows, const I *ids, size_t ids_stride,
                     const unsigned char *src, unsigned char *out, size_t src_dim, size_t n_ids) {
    return emu::launch("is_rows", (RowsFn<I, B>)k.rows[pi], dim3(p.grid), dim3((unsigned)ROWS_BLOCK), rows, ids,
                       ids_stride, (const Bytes<B> *)src, (Bytes<B> *)out, src_dim, n_ids, p.packs, p.tpr);
}

// One index_select: src (left, src_dim, right) of `es`-byte elements starting `skew` elements
// past an aligned address; n_ids ids `ids_stride` apart. Runs the path indexing.rs picks (with
// `grid` blocks instead of the plan's when non-zero) and, when `also_general`, the per-element
// kernel too; checks both byte for byte and that nothing outside the output was written.
template <typename I>
static void select_case(size_t es, size_t left, size_t src_dim, size_t n_ids, size_t right, size_t skew,
                        size_t ids_stride, unsigned grid, bool also_general) {
    const IK<I> &k = kt<I>();
    const int ei = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
    const size_t src_n = left * src_dim * right, rows = left * n_ids, numel = rows * right;
    Buf in(src_n, es, skew);
    for (size_t i = 0; i < src_n * es; ++i) in.p[i] = (unsigned char)rng();
    std::vector<I> ids((n_ids - 1) * ids_stride + 1, (I)0);
    for (size_t j = 0; j < n_ids; ++j) ids[j * ids_stride] = make_id<I>(src_dim);
    // Host reference.
    std::vector<unsigned char> want(numel * es, 0);
    const size_t seg = right * es;
    for (size_t r = 0; r < rows; ++r) {
        size_t l = r / n_ids, j = r % n_ids;
        I v = ids[j * ids_stride];
        if (valid(v, src_dim)) memcpy(&want[r * seg], in.p + (l * src_dim + (size_t)v) * seg, seg);
    }
    char ctx[256];
    snprintf(ctx, sizeof ctx, "ids %s es %zu left %zu src_dim %zu n_ids %zu right %zu skew %zu stride %zu grid %u",
             iname<I>(), es, left, src_dim, n_ids, right, skew, ids_stride, grid);
    auto check = [&](const char *path, Buf &out, bool ok) {
        G.c.ctx = std::string(ctx) + " " + path;
        G.launches++;
        G.c.checks++;
        if (!ok) {
            G.c.fail("launch failed");
            return;
        }
        if (!out.intact(numel)) G.c.fail("wrote outside the output");
        for (size_t i = 0; i < numel * es; ++i)
            if (out.p[i] != want[i]) {
                size_t r = i / seg;
                G.c.fail("row %zu (id %lld) byte %zu: got %u want %u", r, (long long)ids[(r % n_ids) * ids_stride],
                         i % seg, out.p[i], want[i]);
                return;
            }
    };
    Buf out(numel, es);
    Plan p;
    if (rows_plan(rows, seg, (uintptr_t)in.p, (uintptr_t)out.p, p)) {
        if (grid) p.grid = grid;
        bool ok = false;
        char path[64];
        snprintf(path, sizeof path, "is_rows_%s_v%zu packs %zu tpr %u grid %u", iname<I>(), p.bytes, p.packs, p.tpr,
                 p.grid);
        switch (p.bytes) {
        case 16: ok = run_rows<I, 16>(k, 0, p, rows, ids.data(), ids_stride, in.p, out.p, src_dim, n_ids); break;
        case 8: ok = run_rows<I, 8>(k, 1, p, rows, ids.data(), ids_stride, in.p, out.p, src_dim, n_ids); break;
        case 4: ok = run_rows<I, 4>(k, 2, p, rows, ids.data(), ids_stride, in.p, out.p, src_dim, n_ids); break;
        }
        G.fast++;
        check(path, out, ok);
        if (!also_general) return;
    }
    Buf out2(numel, es);
    bool ok = false;
    switch (es) {
    case 1: ok = run_is<uint8_t>(k, ei, numel, ids.data(), ids_stride, in.p, out2.p, left, src_dim, n_ids, right); break;
    case 2:
        ok = run_is<__nv_bfloat16>(k, ei, numel, ids.data(), ids_stride, in.p, out2.p, left, src_dim, n_ids, right);
        break;
    case 4: ok = run_is<float>(k, ei, numel, ids.data(), ids_stride, in.p, out2.p, left, src_dim, n_ids, right); break;
    case 8: ok = run_is<double>(k, ei, numel, ids.data(), ids_stride, in.p, out2.p, left, src_dim, n_ids, right); break;
    }
    check("is_ (per element)", out2, ok);
}

template <typename I> static void run_ids() {
    static const size_t ES[4] = {1, 2, 4, 8};
    for (size_t es : ES) {
        // Row segments of 1..=9 elements, and at / around each pack width (4, 8, 16 bytes) and
        // twice 16.
        std::vector<size_t> rights;
        for (size_t r = 1; r <= 9; ++r) rights.push_back(r);
        for (size_t b : {4, 8, 16, 32})
            for (long d = -1; d <= 1; ++d) {
                long r = (long)(b / es) + d;
                if (r >= 1 && std::find(rights.begin(), rights.end(), (size_t)r) == rights.end())
                    rights.push_back((size_t)r);
            }
        for (size_t right : rights)
            for (int rep = 0; rep < 3; ++rep) {
                size_t left = rep == 0 ? 1 : 1 + rng() % 4;
                size_t src_dim = rep == 2 ? 300 : 1 + rng() % 12;
                size_t n_ids = 1 + rng() % (rep == 1 ? 80 : 20);
                size_t skew = rng() % 3;
                size_t stride = 1 + rng() % 2;
                select_case<I>(es, left, src_dim, n_ids, right, skew, stride, 0, rep == 0);
            }
        // Long rows: more packs than threads per row (each thread several packs, the unrolled
        // loop and its remainder).
        select_case<I>(es, 2, 5, 3, 16 * 300 / es, 0, 1, 0, false);
        select_case<I>(es, 1, 4, 2, 16 * 259 / es + (es <= 4 ? 4 / es : 0), 0, 1, 0, false);
        // More rows than the grid covers: the grid-stride loop, one and several rows per block.
        select_case<I>(es, 3, 7, 50, 16 / es, 0, 1, 1, false);
        select_case<I>(es, 2, 9, 40, 64 / es, 0, 2, 2, false);
        select_case<I>(es, 2, 9, 40, 16 * 300 / es, 0, 1, 3, false);
    }
}

int main() {
    test_port(G.c);
    run_ids<uint8_t>();
    run_ids<uint32_t>();
    run_ids<int64_t>();
    // Every kernel of the tables ran at least once.
    size_t kernels = 0;
    auto covered = [&](const void *k) {
        kernels++;
        if (!emu::S.launched.count(k)) {
            G.c.ctx = "coverage";
            G.c.fail("kernel %zu of the tables never ran", kernels);
        }
    };
    for (void *k : K_U8.rows) covered(k);
    for (void *k : K_U32.rows) covered(k);
    for (void *k : K_I64.rows) covered(k);
    for (void *k : K_U8.is) covered(k);
    for (void *k : K_U32.is) covered(k);
    for (void *k : K_I64.is) covered(k);
    printf("index: %zu kernels of the tables ran\n", kernels);
    printf("index: %ld launches (%ld row-copy), %ld checks, bad=%ld\n", G.launches, G.fast, G.c.checks, G.c.bad);
    return G.c.bad != 0;
}
