// Runs kernels/hip/collective.hip's one-shot all-reduces on the host through emu.h: two ranks on
// two host threads (EMU_RANKS) over memory both map, each making the same sequence of calls with
// candle-rocm's launch geometry (a port of candle-rocm/src/launch/collective.rs: the grids, the
// 16-byte pack rule, the Lamport rule), and checks every result against host sums and
// add_rms_norm references, and that both ranks get the same bits:
// - sums of 1 element to 128 KiB and past it, f32/f16/bf16, aligned and not, on the Lamport
//   kernels and on the flag kernels;
// - the all-reduce + add_rms_norm of 1, 3 (rows of 1001: the element path) and 8 rows, and of 9
//   rows (past the Lamport rows: the flag kernel);
// - inputs holding the Lamport kernels' empty marker (-0.0 in f16/bf16; -0.0 and the f32
//   denormal 0x80008000 in f32), and more calls than the Lamport kernels have buffers, with
//   grids of 1 to 8 blocks in turn;
// - a rank whose peer never comes: the kernel gives up after its timeout and sets the status.
// Built for the AMD path only (the CUDA path's flag and poll accesses are PTX), wave 64 and
// wave 32, by kernels/tests/kernels_on_cpu.rs. Prints bad=<mismatches>; exits non-zero on any.
#define EMU_RANKS 1
#include "emu.h"

#include "check.h"

#include <thread>

// AR_SOURCE: another copy of the kernel source (mutation tests of this driver).
#ifndef AR_SOURCE
#define AR_SOURCE "../../hip/collective.hip"
#endif
#include AR_SOURCE

using namespace chk;

// ---- port of candle-rocm/src/launch/collective.rs -----------------------------------------------
static const size_t MAX_RANKS = 8, MAX_BLOCKS = 256, THREADS = 256, PACK = 16, ONE_PACK_BLOCKS = 128;
static const size_t CTRL_BYTES = 16384, LAMPORT_BLOCKS = 8, LAMPORT_ROW = 16384, LAMPORT_BUFS = 3;
static const uint32_t LAMPORT_EMPTY = 0x80008000u;
static_assert(MAX_RANKS == AR_MAX_RANKS && MAX_BLOCKS == AR_MAX_BLOCKS && THREADS == AR_THREADS &&
                  CTRL_BYTES == AR_CTRL_BYTES && LAMPORT_BLOCKS == AR_LAMPORT_BLOCKS &&
                  LAMPORT_ROW == AR_LAMPORT_ROW && LAMPORT_BUFS == AR_LAMPORT_BUFS &&
                  LAMPORT_EMPTY == AR_EMPTY,
              "constants");
// The product's data halves are 4 MiB; a smaller cap here keeps the host memory small (the
// layout is computed from it the same way).
static const size_t CAP = 1 << 20;
static size_t lamport_at(size_t cap) { return 2 * cap + CTRL_BYTES; }
static size_t shared_bytes(size_t cap) {
    return lamport_at(cap) + LAMPORT_BUFS * MAX_RANKS * LAMPORT_BLOCKS * LAMPORT_ROW;
}
static unsigned blocks(size_t bytes) {
    size_t packs = (bytes + PACK - 1) / PACK;
    size_t one_each = (packs + THREADS - 1) / THREADS;
    size_t b = one_each <= ONE_PACK_BLOCKS
                   ? std::max<size_t>(one_each, 1)
                   : std::min(std::max((packs + 2 * THREADS - 1) / (2 * THREADS), ONE_PACK_BLOCKS), MAX_BLOCKS);
    return (unsigned)b;
}
static long lamport_sum_blocks(size_t bytes) {
    size_t b = (bytes + LAMPORT_ROW - 1) / LAMPORT_ROW;
    return b <= LAMPORT_BLOCKS ? (long)std::max<size_t>(b, 1) : -1;
}
static bool lamport_norm_takes(size_t rows, size_t cols, size_t elem) {
    return rows >= 1 && rows <= LAMPORT_BLOCKS && cols * elem <= LAMPORT_ROW;
}
static bool packs(std::initializer_list<const void *> addresses, size_t unit, size_t elem) {
    for (const void *a : addresses)
        if ((uintptr_t)a % PACK) return false;
    return (unit * elem) % PACK == 0;
}

// ---- values ----------------------------------------------------------------------------------------
// Element bits of value v in dt (v exact in dt), and back.
static uint32_t bits_of(DT dt, double v) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    if (dt == F32) return b;
    if (dt == BF16) return b >> 16;
    return f16_bits(v);
}
static double value_of(DT dt, uint32_t b) {
    if (dt == F16) return f16_value((uint16_t)b);
    if (dt == BF16) b <<= 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
// Rank r's element i: eighths below 5 in magnitude (exact in every dtype, sums of two exact in
// f32), and every few elements a marker value.
static uint32_t element_bits(DT dt, int rank, size_t i) {
    switch ((i + rank) % 5) {
    case 0: return dt == F32 ? 0x80000000u : 0x8000u; // -0.0
    case 1: if (dt == F32) return 0x80008000u;         // the f32 marker, a denormal
    default: return bits_of(dt, (double)((i * 7 + rank * 13) % 37) / 8.0 - 2.0);
    }
}
static double rounded(DT dt, double v) { return dt == F32 ? round_f32(v) : dt == F16 ? round_f16(v) : round_bf16(v); }

// Element i of a buffer of dt, as bits.
static uint32_t get_bits(const Buf &b, size_t i) {
    uint32_t v = 0;
    memcpy(&v, b.p + i * b.es, b.es);
    return v;
}
static void set_bits(Buf &b, size_t i, uint32_t v) { memcpy(b.p + i * b.es, &v, b.es); }

// ---- calls ------------------------------------------------------------------------------------------
struct Call {
    bool norm;
    DT dt;
    size_t rows, cols; // a sum: rows == 1, cols == n
    size_t shift;      // input misalignment in elements (0: 16-byte aligned)
    bool lamport;      // the communicator agreed to the Lamport forms
};

struct Result {
    std::vector<uint32_t> out;
    uint32_t status = 0;
    bool launched = false;
};

// How long a kernel waits for its peer (a mutant that loses data times out sooner with a smaller
// AR_EMU_TIMEOUT_MS).
#ifndef AR_EMU_TIMEOUT_MS
#define AR_EMU_TIMEOUT_MS 20000
#endif
static const uint64_t TIMEOUT_NS = (uint64_t)AR_EMU_TIMEOUT_MS * 1000 * 1000;

// Rank `rank`'s side of call c (every rank runs the same calls in the same order).
static Result run_call(const Call &c, ArBases bases, int rank, uint64_t timeout_ns) {
    Result r;
    const size_t n = c.rows * c.cols, es = dt_size(c.dt);
    const size_t nout = c.norm ? 2 * n : n;
    Buf in(n, es, c.shift), res(n, es), alpha(c.cols, es), out(nout, es);
    for (size_t i = 0; i < n; ++i) {
        set_bits(in, i, element_bits(c.dt, rank, i));
        set_bits(res, i, bits_of(c.dt, (double)((i * 3) % 11) / 4.0 - 1.0));
    }
    for (size_t i = 0; i < c.cols; ++i) set_bits(alpha, i, bits_of(c.dt, 0.5 + (double)(i % 7) / 8.0));
    uint32_t status = 0;
    const uint32_t rk = (uint32_t)rank, world = 2;
    const uint64_t cap = CAP;
    const dim3 block((unsigned)THREADS);
#define AR_LAUNCH(NAME, GRID, ...)                                                                 \
    do {                                                                                           \
        if (c.dt == F32) r.launched = emu::launch(#NAME "_f32", NAME##_f32, dim3(GRID), block, __VA_ARGS__); \
        if (c.dt == F16) r.launched = emu::launch(#NAME "_f16", NAME##_f16, dim3(GRID), block, __VA_ARGS__); \
        if (c.dt == BF16) r.launched = emu::launch(#NAME "_bf16", NAME##_bf16, dim3(GRID), block, __VA_ARGS__); \
    } while (0)
    if (!c.norm) {
        const uint32_t vec = packs({(void *)in.p, (void *)out.p}, n, es);
        const long lam = c.lamport ? lamport_sum_blocks(n * es) : -1;
        if (lam > 0)
            AR_LAUNCH(allreduce_sum_lamport, (unsigned)lam, bases, (void *)in.p, (void *)out.p, (uint32_t)n,
                      vec, rk, world, cap, timeout_ns, &status);
        else
            AR_LAUNCH(allreduce_sum_oneshot, blocks(n * es), bases, (void *)in.p, (void *)out.p, (uint32_t)n,
                      vec, rk, world, cap, timeout_ns, &status);
    } else {
        const uint32_t vec = packs({(void *)in.p, (void *)res.p, (void *)alpha.p, (void *)out.p}, c.cols, es);
        const bool lam = c.lamport && lamport_norm_takes(c.rows, c.cols, es);
        const unsigned grid = (unsigned)std::min(c.rows, MAX_BLOCKS);
        const float eps = 1e-5f;
        if (lam)
            AR_LAUNCH(allreduce_add_rmsnorm_lamport, grid, bases, (void *)in.p, (void *)res.p,
                      (void *)alpha.p, (void *)out.p, (uint32_t)c.rows, (uint32_t)c.cols, eps, vec, rk,
                      world, cap, timeout_ns, &status);
        else
            AR_LAUNCH(allreduce_add_rmsnorm_oneshot, grid, bases, (void *)in.p, (void *)res.p,
                      (void *)alpha.p, (void *)out.p, (uint32_t)c.rows, (uint32_t)c.cols, eps, vec, rk,
                      world, cap, timeout_ns, &status);
    }
#undef AR_LAUNCH
    r.status = __atomic_load_n(&status, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < nout; ++i) r.out.push_back(get_bits(out, i));
    if (!out.intact(nout)) r.launched = false;
    return r;
}

// Checks both ranks' results of call c against the host.
static void check_call(const Call &c, const Result (&r)[2], Counter &bad, const std::string &what) {
    for (int k = 0; k < 2; ++k) {
        if (!r[k].launched) bad.fail("%s: rank %d's launch broke an emulator rule", what.c_str(), k);
        if (r[k].status) bad.fail("%s: rank %d timed out waiting for its peer", what.c_str(), k);
    }
    if (r[0].out != r[1].out) bad.fail("%s: the ranks' results differ", what.c_str());
    const size_t n = c.rows * c.cols;
    // The sums (a norm's first half): exact, but for the markers' signs of zero and the f32
    // denormal (the Lamport kernels send -0.0 for it).
    std::vector<double> sums(n);
    for (size_t i = 0; i < n; ++i) {
        double s = rounded(c.dt, value_of(c.dt, element_bits(c.dt, 0, i)) + value_of(c.dt, element_bits(c.dt, 1, i)));
        if (c.norm) {
            const double res = value_of(c.dt, bits_of(c.dt, (double)((i * 3) % 11) / 4.0 - 1.0));
            s = rounded(c.dt, s + res);
        }
        sums[i] = s;
        const double got = value_of(c.dt, r[0].out[i]);
        if (!(got == s || fabs(got - s) < 1e-39))
            bad.fail("%s: element %zu: %g, want %g", what.c_str(), i, got, s);
    }
    if (!c.norm) return;
    const double tol = c.dt == F32 ? 1e-5 : 1e-2;
    for (size_t row = 0; row < c.rows; ++row) {
        double sq = 0;
        for (size_t j = 0; j < c.cols; ++j) sq += sums[row * c.cols + j] * sums[row * c.cols + j];
        const double scale = 1.0 / sqrt(sq / (double)c.cols + 1e-5);
        for (size_t j = 0; j < c.cols; ++j) {
            const size_t i = row * c.cols + j;
            const double a = value_of(c.dt, bits_of(c.dt, 0.5 + (double)(j % 7) / 8.0));
            const double want = sums[i] * scale * a;
            const double got = value_of(c.dt, r[0].out[n + i]);
            if (fabs(got - want) > tol * std::max(1.0, fabs(want)))
                bad.fail("%s: norm %zu: %g, want %g", what.c_str(), i, got, want);
        }
    }
}

// Two ranks' shared allocations, laid out as the product's (ops::peer_reduce): zeroed, the
// Lamport buffers holding the empty marker.
struct World {
    std::vector<uint64_t> mem[2];
    ArBases bases{};
    World() {
        for (int k = 0; k < 2; ++k) {
            mem[k].assign(shared_bytes(CAP) / 8, 0);
            uint32_t *w = (uint32_t *)((char *)mem[k].data() + lamport_at(CAP));
            for (size_t i = 0; i < (shared_bytes(CAP) - lamport_at(CAP)) / 4; ++i) w[i] = LAMPORT_EMPTY;
            bases.base[k] = (uint64_t)(uintptr_t)mem[k].data();
        }
    }
};

int main() {
    Counter bad;
    std::vector<Call> calls;
    for (int round = 0; round < 4; ++round) {
        const bool lamport = round < 3; // the last round: the flag kernels for everything
        for (DT dt : {F32, F16, BF16}) {
            const size_t es = dt_size(dt);
            for (size_t n : {(size_t)1, (size_t)5, 16384 / es, 16384 / es + 1, 100 * 1024 / es, 128 * 1024 / es,
                             128 * 1024 / es + 8})
                calls.push_back(Call{false, dt, 1, n, 0, lamport});
            calls.push_back(Call{false, dt, 1, 4096, 1, lamport}); // misaligned: the element path
            calls.push_back(Call{true, dt, 1, 4096, 0, lamport});
            calls.push_back(Call{true, dt, 3, 1001, 0, lamport});
            calls.push_back(Call{true, dt, 8, 4096, 0, lamport});
            calls.push_back(Call{true, dt, 9, 64, 0, lamport});
        }
    }
    World world;
    std::vector<Result> results[2];
    std::thread ranks[2];
    for (int k = 0; k < 2; ++k)
        ranks[k] = std::thread([&, k]() {
            for (const Call &c : calls) results[k].push_back(run_call(c, world.bases, k, TIMEOUT_NS));
        });
    for (auto &t : ranks) t.join();
    for (size_t i = 0; i < calls.size(); ++i) {
        const Call &c = calls[i];
        char what[160];
        snprintf(what, sizeof what, "call %zu (%s %s %zux%zu shift %zu, %s)", i, c.norm ? "norm" : "sum", dt_name(c.dt),
                 c.rows, c.cols, c.shift, c.lamport ? "lamport" : "flags");
        const Result r[2] = {results[0][i], results[1][i]};
        check_call(c, r, bad, what);
    }
    // A peer that never comes: each kernel gives up after its timeout and sets the status.
    for (bool lamport : {true, false}) {
        World alone;
        const Call c{false, F32, 1, 64, 0, lamport};
        const Result r = run_call(c, alone.bases, 0, 20ull * 1000 * 1000);
        if (!r.launched || r.status != 1)
            bad.fail("absent peer (%s): launched %d, status %u (want 1)", lamport ? "lamport" : "flags", r.launched,
                    r.status);
    }
    printf("collective: %zu calls on each of 2 ranks + 2 absent-peer launches, bad=%ld\n", calls.size(), bad.bad);
    return bad.bad ? 1 : 0;
}
