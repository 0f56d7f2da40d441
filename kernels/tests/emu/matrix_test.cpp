// matrix_test.cpp - checks kernels/hip/mma/tile.h and the emulated matrix instructions of
// matrix.h on the CPU, for the family the build names: -DEMU_AMD_WAVE=64 -D__gfx942__ (MFMA),
// -DEMU_AMD_WAVE=32 -D__gfx1100__ (gfx11 WMMA) or -DEMU_AMD_WAVE=32 -D__gfx1200__ (gfx12 WMMA).
//
// mma_kernels.hip's kernels multiply tiles through tile.h (every builtin of the family: f16,
// bf16, with MFMA also f32 and the 32 x 32 x 8 tiles), K = 16..64 (8..64 for 32 x 32), one and
// two waves a block, and every element of c is compared with a double-precision host
// reference of c0 + A B: exactly for small-integer data, within f32 accumulation error for
// random values in [-1, 1]; columns past the product must keep their poison. Then each mutant
// (a fragment layout broken on purpose: A or B transposed, A's K order unlike B's, D's
// half-waves swapped, the upper half-wave's A zeroed) must be caught, by a mismatch or a failed
// launch, and the emulator's rules must hold: a matrix instruction that a lane of the wave skips,
// one in a wave that is not full, and MFMA broadcast controls all fail the launch. Prints
// bad=<count> and exits non-zero on any problem.
//
// Static check of the same kernels (not run here; the device toolchain of `cargo xtask kernels`):
//   clang++-19 -x hip -std=c++17 -O3 --cuda-device-only -nogpuinc -nogpulib -fno-gpu-rdc
//     -include candle_hip_compat.h -Ikernels/include --offload-arch=gfx942 (gfx1100, gfx1200)
//     -o /tmp/mma.co kernels/tests/emu/mma_kernels.hip
//   llvm-objdump-19 -d /tmp/mma.co | grep -E 'v_(mfma|wmma)'
#include "emu.h"

#include "check.h"

#include "mma_kernels.hip"

#if !defined(FA_HAVE_MMA)
#error "name a matrix-unit target: -D__gfx942__ (wave 64), -D__gfx1100__ or -D__gfx1200__ (wave 32)"
#endif

using namespace chk;

static Counter C;
static long launches, mutants, caught;

#if defined(FA_MFMA)
static const char *FAMILY = "gfx9 MFMA (wave64)";
#elif defined(FA_WMMA11)
static const char *FAMILY = "gfx11 WMMA (wave32)";
#else
static const char *FAMILY = "gfx12 WMMA (wave32)";
#endif

template <typename T> static DT dt_of();
template <> DT dt_of<__half>() { return F16; }
template <> DT dt_of<__nv_bfloat16>() { return BF16; }
template <> DT dt_of<float>() { return F32; }

template <typename T> using Kernel = void (*)(const T *, const T *, const float *, float *, int, int, int, int);

struct Outcome {
    bool launched;
    long mismatches;
};

// Runs `kern` for a tile x (tile * waves) product of depth K and compares c with the host
// reference. `ints`: small integers (an exact product) or random values (a tolerance).
// `report`: mismatches go to the counter (an unmutated kernel) or are only counted (a mutant).
template <typename T>
static Outcome run(const char *what, Kernel<T> kern, int tile, int waves, int K, bool ints, bool report) {
    const DT dt = dt_of<T>();
    const int M = tile, N = tile * waves, lda = K + 3, ldb = K + 5, ldc = N + 2;
    C.ctx = std::string(FAMILY) + " " + what + " " + dt_name(dt) + " " + std::to_string(tile) + "x" +
            std::to_string(N) + " K=" + std::to_string(K) + (ints ? " ints" : " random");
    std::mt19937_64 rng(K * 1000003u + tile * 131u + waves * 7u + ints + dt);
    std::uniform_int_distribution<int> small(-4, 4);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    auto draw = [&]() { return round_to(dt, ints ? (double)small(rng) : unit(rng)); };
    Buf a((size_t)M * lda, dt_size(dt)), b((size_t)N * ldb, dt_size(dt));
    Buf c0((size_t)M * ldc, 4), c((size_t)M * ldc, 4);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < lda; k++) store(dt, a.p, (size_t)i * lda + k, draw());
    for (int j = 0; j < N; j++)
        for (int k = 0; k < ldb; k++) store(dt, b.p, (size_t)j * ldb + k, draw());
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) store(F32, c0.p, (size_t)i * ldc + j, round_f32(ints ? small(rng) : unit(rng)));
    launches++;
    const bool ok = emu::launch(C.ctx.c_str(), kern, dim3(1), dim3(waves * EMU_WAVE), a.as<const T>(),
                                b.as<const T>(), c0.as<const float>(), c.as<float>(), K, lda, ldb, ldc);
    if (!ok) {
        if (report) C.fail("launch failed");
        return Outcome{false, 0};
    }
    long bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            const double got = load(F32, c.p, (size_t)i * ldc + j);
            C.checks++;
            if (j >= N) { // past the product: still the poison (all bits set)
                if (bits_of_f32((float)got) != 0xffffffffu) {
                    bad++;
                    if (report) C.fail("c[%d][%d] past the product was written", i, j);
                }
                continue;
            }
            double want = load(F32, c0.p, (size_t)i * ldc + j), mag = fabs(want);
            for (int k = 0; k < K; k++) {
                const double p = load(dt, a.p, (size_t)i * lda + k) * load(dt, b.p, (size_t)j * ldb + k);
                want += p;
                mag += fabs(p);
            }
            // f32 accumulation of K + 1 terms in any order, then nothing else.
            const double tol = ints ? 0.0 : (K + 2) * ldexp(mag, -23);
            if (!close(got, want, tol)) {
                bad++;
                if (report) C.fail("c[%d][%d] = %.9g, want %.9g (tol %.3g)", i, j, got, want, tol);
            }
        }
    return Outcome{true, bad};
}

// A mutant must be caught: a mismatch or a launch the emulator refused.
template <typename T> static void mutant(const char *what, Kernel<T> kern, int tile) {
    printf("mutant %s %s %dx%d (the emulator may refuse its launch):\n", what, dt_name(dt_of<T>()), tile, tile);
    const Outcome o = run<T>(what, kern, tile, 1, 32, true, false);
    mutants++;
    if (!o.launched || o.mismatches > 0) {
        caught++;
        printf("  caught: %s\n", o.launched ? (std::to_string(o.mismatches) + " mismatches").c_str() : "launch failed");
    } else {
        C.fail("mutant %s not caught (the emulator accepted a wrong layout)", what);
    }
}

template <typename T> static void family16() {
    for (int K : {16, 32, 48, 64})
        for (int waves : {1, 2})
            for (bool ints : {true, false}) run<T>("mma_gemm16", &mma_gemm16<T, MUT_NONE>, 16, waves, K, ints, true);
    mutant<T>("A transposed", &mma_gemm16<T, MUT_A_TRANSPOSED>, 16);
    mutant<T>("B transposed", &mma_gemm16<T, MUT_B_TRANSPOSED>, 16);
    mutant<T>("A's K order unlike B's", &mma_gemm16<T, MUT_A_K_ORDER>, 16);
    mutant<T>("D half-waves swapped", &mma_gemm16<T, MUT_D_HALVES_SWAPPED>, 16);
    mutant<T>("upper half-wave's A zero", &mma_gemm16<T, MUT_A_UPPER_ZERO>, 16);
}

#if defined(FA_MFMA)
template <typename T> static void family32() {
    for (int K : {8, 16, 40, 64})
        for (bool ints : {true, false}) run<T>("mma_gemm32", &mma_gemm32<T, MUT_NONE>, 32, 1, K, ints, true);
    mutant<T>("A transposed", &mma_gemm32<T, MUT_A_TRANSPOSED>, 32);
    mutant<T>("A's K order unlike B's", &mma_gemm32<T, MUT_A_K_ORDER>, 32);
    mutant<T>("D half-waves swapped", &mma_gemm32<T, MUT_D_HALVES_SWAPPED>, 32);
}
#endif

// ---- The emulator's rules: launches that must fail.

// Lane 5 skips the instruction (on the GPU: undefined, the wave runs it with lane 5 off).
__global__ void skip_lane(const __half *a, float *c) {
    const mma_frag<__half> f = mma_load_a<__half>(a, 16, 1);
    if (mma_lane() == 5) return;
    mma_store_c(c, 16, 1, mma_tile_16x16x16<__half>(f, f, mma_zero()));
}
// Every lane takes part (run in a block whose second wave is not full).
__global__ void all_lanes(const __half *a, float *c) {
    const mma_frag<__half> f = mma_load_a<__half>(a, 16, 1);
    mma_store_c(c, 16, 1, mma_tile_16x16x16<__half>(f, f, mma_zero()));
}
#if defined(FA_MFMA)
// cbsz / abid: broadcast controls the emulator does not model.
__global__ void broadcast(const __half *a, float *c) {
    const mma_frag<__half> f = mma_load_a<__half>(a, 16, 1);
    mma_store_c(c, 16, 1, __builtin_amdgcn_mfma_f32_16x16x16f16(f, f, mma_zero(), 1, 0, 0));
}
#endif

static void must_fail(const char *what, void (*kern)(const __half *, float *), unsigned threads) {
    std::vector<__half> a(16 * 16, __half(1.0f));
    std::vector<float> c(16 * 16);
    printf("rule: %s (a failed launch below is expected):\n", what);
    launches++;
    C.ctx = std::string(FAMILY) + " rule: " + what;
    if (emu::launch(what, kern, dim3(1), dim3(threads), (const __half *)a.data(), c.data()))
        C.fail("the launch was accepted");
}

int main() {
    printf("matrix: %s\n", FAMILY);
    family16<__half>();
    family16<__nv_bfloat16>();
#if defined(FA_MFMA)
    family16<float>();
    family32<__half>();
    family32<__nv_bfloat16>();
#endif
    must_fail("a lane skips the matrix instruction", skip_lane, EMU_WAVE);
    must_fail("a matrix instruction in a wave of 16 lanes too few", all_lanes, 2 * EMU_WAVE - 16);
#if defined(FA_MFMA)
    must_fail("MFMA with cbsz = 1", broadcast, EMU_WAVE);
#endif
    if (caught != mutants) C.fail("%ld of %ld mutants caught", caught, mutants);
    printf("matrix %s: %ld launches, %ld checks, %ld/%ld mutants caught, bad=%ld\n", FAMILY, launches, C.checks,
           caught, mutants, C.bad);
    return C.bad != 0;
}
