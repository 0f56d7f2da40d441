// matrix.h - emu.h's AMD matrix-unit builtins: MFMA (gfx90a/gfx94x/gfx950, wave64) and WMMA
// (gfx11 and gfx12, wave32), executed as wave operations with the operand and result lane
// layouts AMD documents, so kernels/hip/mma/tile.h and the kernels built on it run on the CPU;
// and, for the CUDA path (EMU_MMA_SYNC, which emu.h defines when EMU_AMD_WAVE is not set),
// NVIDIA's mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32 as the function
// emu::mma::mma_sync_m16n8k16 that kernels call instead of the inline PTX (mma/frag.h).
//
// Included by emu.h. The target is the processor a driver names with
// a define, as clang's device compile would: -D__gfx942__ (or __gfx90a__, __gfx940__,
// __gfx941__, __gfx950__; with EMU_AMD_WAVE=64), -D__gfx1100__ (..., __gfx1153__; wave 32) or
// -D__gfx1200__ / -D__gfx1201__ (wave 32). This file then defines __GFX9__ / __GFX11__ /
// __GFX12__ like the compiler and only that family's builtins; without such a define it
// defines none. Each builtin has clang's signature (BuiltinsAMDGPU.def, checked against
// clang-19's device compile for gfx942/gfx1100/gfx1200):
//   gfx9:  v4f  mfma_f32_16x16x16f16(v4h a, v4h b, v4f c, int cbsz, int abid, int blgp)
//          v4f  mfma_f32_16x16x16bf16_1k(v4s, v4s, v4f, ...)   (bf16 as raw 16-bit shorts)
//          v4f  mfma_f32_16x16x4f32(float, float, v4f, ...)
//          v16f mfma_f32_32x32x8f16(v4h, v4h, v16f, ...), mfma_f32_32x32x8bf16_1k(v4s, ...)
//   gfx11: v8f  wmma_f32_16x16x16_f16_w32(v16h, v16h, v8f), ..._bf16_w32(v16s, v16s, v8f)
//   gfx12: v8f  wmma_f32_16x16x16_f16_w32_gfx12(v8h, v8h, v8f), ..._bf16_w32_gfx12(v8s, ...)
// cbsz/abid/blgp (MFMA broadcast controls) are not emulated: anything but 0 fails the launch.
//
// Layouts. Lane l, element e of an operand vector; 16-bit elements sit two per VGPR, element
// e in VGPR e / 2, bits [16 (e % 2) + 15 : 16 (e % 2)]. Stated here from the matrix element
// to its (lane, element), the direction of the calculator's "Matrix element to register
// mapping" (tile.h states the inverse; the drivers' products check that the two agree):
//   MFMA 16x16x16 f16/bf16: A[i][k] at (16 (k/4) + i, k%4); B[k][j] at (16 (k/4) + j, k%4);
//                           C/D[i][j] at (16 (i/4) + j, i%4).
//   MFMA 16x16x4 f32:       A[i][k] at (16 k + i, 0); B[k][j] at (16 k + j, 0); C/D as above.
//   MFMA 32x32x8 f16/bf16:  A[i][k] at (32 (k/4) + i, k%4); B[k][j] at (32 (k/4) + j, k%4);
//                           C/D[i][j] at ((32 (i/4)) % 64 + j, 4 (i/8) + i%4).
//   WMMA gfx11 (w32):       A[i][k] at (i, k) and (i + 16, k): the two half-waves hold the same
//                           A (B: (j, k) and (j + 16, k)); C/D[i][j] at ((16 i) % 32 + j, i/2).
//                           Copies that differ fail the launch (the documented input is the
//                           replicated one; what the hardware does otherwise is not documented).
//   WMMA gfx12 (w32):       A[i][k] at (16 ((k/4) % 2) + i, 4 (k/8) + k%4); B[k][j] likewise
//                           with j; C/D[i][j] at (16 (i/8) + j, i%8). No replication.
//   mma.sync m16n8k16 (warp of 32; g = lane / 4, t = lane % 4; A 8 elements in 4 registers,
//                           B 4 in 2, C/D 4 floats; 16-bit elements two per register, low first):
//                           A[i][k] at (4 (i%8) + (k%8)/2, k%2 + 2 (i/8) + 4 (k/8));
//                           B[k][j] at (4 j + (k%8)/2, k%2 + 2 (k/8)) (j < 8);
//                           C/D[i][j] at (4 (i%8) + j/2, j%2 + 2 (i/8)).
//                           PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
//                           type"; the same as CUTLASS cute/atom/mma_traits_sm80.hpp's
//                           SM80_16x8x16_F32F16F16F32_TN (ALayout ((4,8),(2,2,2)):((32,1),
//                           (16,8,128)), BLayout ((4,8),(2,2)):((16,1),(8,64)), CLayout
//                           SM80_16x8_Row ((4,8),(2,2)):((32,1),(16,8)), column-major (M,K),
//                           (N,K), (M,N) indices).
// Sources: AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator,
// matrix_calculator.py 1.3.2, commit 2ef9189), `-a CDNA3 -i v_mfma_f32_16x16x16_f16 -d` and
// likewise for v_mfma_f32_16x16x16_bf16, v_mfma_f32_16x16x4_f32, v_mfma_f32_32x32x8_f16 (CDNA3;
// CDNA2 lists the same for the _1k bf16 forms), `-a RDNA3 -i v_wmma_f32_16x16x16_{f16,bf16} -d`
// (wave32) and `-a RDNA4 -i v_wmma_f32_16x16x16_{f16,bf16} -d` (wave32); every (lane, element)
// of every operand was compared with the calculator's --register-layout tables. Cross-checked
// against composable_kernel's lane traits (ROCm/composable_kernel, include/ck_tile/ops/gemm/
// warp/warp_gemm_attribute_mfma_impl.hpp and warp_gemm_attribute_wmma_impl_base_traits.hpp):
// same rows, columns and C/D layout; for gfx12 ck_tile orders K differently within A and B
// (lanes 0-15 k 0-7, lanes 16-31 k 8-15), which is the same product: A and B share one k per
// (half-wave, element) slot in every layout here, so any K order used for both is equivalent,
// and only a K order that differs between A and B is wrong (tile.h keeps AMD's).
//
// Arithmetic: D = C + sum_k A[i][k] B[k][j], the products and sum in double and rounded to f32
// once. The hardware accumulates in f32 in an undocumented order: exact for the drivers'
// small-integer data, within f32 accumulation error otherwise. Denormals are kept (no flush).
#pragma once

// The host build passes the wide operand vectors by value between inline functions of one
// translation unit: the x86 vector-ABI note (-Wpsabi) does not apply.
#pragma clang diagnostic ignored "-Wpsabi"

#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) ||         \
    defined(__gfx950__)
#define EMU_MMA_GFX9 1
#ifndef __GFX9__
#define __GFX9__ 1
#endif
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) ||   \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1152__) || defined(__gfx1153__)
#ifndef __GFX11__
#define __GFX11__ 1
#endif
#elif defined(__gfx1200__) || defined(__gfx1201__)
#ifndef __GFX12__
#define __GFX12__ 1
#endif
#endif
#if defined(__GFX11__)
#define EMU_MMA_GFX11 1
#elif defined(__GFX12__)
#define EMU_MMA_GFX12 1
#endif

#if defined(EMU_MMA_GFX9) && EMU_AMD_WAVE != 64
#error "gfx9 MFMA runs in wave64: build with -DEMU_AMD_WAVE=64"
#endif
#if (defined(EMU_MMA_GFX11) || defined(EMU_MMA_GFX12)) && EMU_AMD_WAVE != 32
#error "the _w32 WMMA builtins need wave32: build with -DEMU_AMD_WAVE=32"
#endif

namespace emu {
namespace mma {

typedef _Float16 v4h __attribute__((ext_vector_type(4)));
typedef _Float16 v8h __attribute__((ext_vector_type(8)));
typedef _Float16 v16h __attribute__((ext_vector_type(16)));
typedef short v4s __attribute__((ext_vector_type(4)));
typedef short v8s __attribute__((ext_vector_type(8)));
typedef short v16s __attribute__((ext_vector_type(16)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef float v8f __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));

// Where one matrix element lives: lane and element of that lane's operand vector.
struct Slot {
    int lane, e;
};

// One instruction: its shape, operand elements per lane (A's nab; B's nb, 0: as A; C and D
// alike), how many copies of A and B the wave holds (2: gfx11's half-waves) and the element ->
// slot maps (`rep` picks the copy).
struct Layout {
    const char *name;
    int M, N, K, nab, ncd, reps;
    Slot (*a)(int i, int k, int rep);
    Slot (*b)(int k, int j, int rep);
    Slot (*d)(int i, int j);
    int nb = 0;
    int nbs() const { return nb ? nb : nab; }
};

inline const Layout MFMA_16x16x16{"v_mfma_f32_16x16x16 (f16/bf16)", 16, 16, 16, 4, 4, 1,
                                  [](int i, int k, int) { return Slot{16 * (k / 4) + i, k % 4}; },
                                  [](int k, int j, int) { return Slot{16 * (k / 4) + j, k % 4}; },
                                  [](int i, int j) { return Slot{16 * (i / 4) + j, i % 4}; }};
inline const Layout MFMA_16x16x4_F32{"v_mfma_f32_16x16x4_f32", 16, 16, 4, 1, 4, 1,
                                     [](int i, int k, int) { return Slot{16 * k + i, 0}; },
                                     [](int k, int j, int) { return Slot{16 * k + j, 0}; },
                                     [](int i, int j) { return Slot{16 * (i / 4) + j, i % 4}; }};
inline const Layout MFMA_32x32x8{"v_mfma_f32_32x32x8 (f16/bf16)", 32, 32, 8, 4, 16, 1,
                                 [](int i, int k, int) { return Slot{32 * (k / 4) + i, k % 4}; },
                                 [](int k, int j, int) { return Slot{32 * (k / 4) + j, k % 4}; },
                                 [](int i, int j) { return Slot{(32 * (i / 4)) % 64 + j, 4 * (i / 8) + i % 4}; }};
inline const Layout WMMA11{"v_wmma_f32_16x16x16 gfx11 (f16/bf16)", 16, 16, 16, 16, 8, 2,
                           [](int i, int k, int rep) { return Slot{i + 16 * rep, k}; },
                           [](int k, int j, int rep) { return Slot{j + 16 * rep, k}; },
                           [](int i, int j) { return Slot{(16 * i) % 32 + j, i / 2}; }};
inline const Layout WMMA12{"v_wmma_f32_16x16x16 gfx12 (f16/bf16)", 16, 16, 16, 8, 8, 1,
                           [](int i, int k, int) { return Slot{16 * ((k / 4) % 2) + i, 4 * (k / 8) + k % 4}; },
                           [](int k, int j, int) { return Slot{16 * ((k / 4) % 2) + j, 4 * (k / 8) + k % 4}; },
                           [](int i, int j) { return Slot{16 * (i / 8) + j, i % 8}; }};
inline const Layout MMA_SYNC_16x8x16{"mma.sync.m16n8k16 (f16/bf16)", 16, 8, 16, 8, 4, 1,
                                     [](int i, int k, int) { return Slot{4 * (i % 8) + (k % 8) / 2, k % 2 + 2 * (i / 8) + 4 * (k / 8)}; },
                                     [](int k, int j, int) { return Slot{4 * j + (k % 8) / 2, k % 2 + 2 * (k / 8)}; },
                                     [](int i, int j) { return Slot{4 * (i % 8) + j / 2, j % 2 + 2 * (i / 8)}; },
                                     4};

enum Ty { F16, BF16, F32 };

inline double value(Ty t, uint32_t bits) {
    switch (t) {
    case F16: return (double)__builtin_bit_cast(_Float16, (uint16_t)bits);
    case BF16: return (double)__builtin_bit_cast(float, bits << 16);
    default: return (double)__builtin_bit_cast(float, bits);
    }
}
inline uint32_t bits_of(_Float16 v) { return __builtin_bit_cast(uint16_t, v); }
inline uint32_t bits_of(short v) { return (uint16_t)v; }
inline uint32_t bits_of(float v) { return __builtin_bit_cast(uint32_t, v); }

// Checks once per layout that its maps are what a layout must be: every (lane, element) of
// the wave's A, B and C/D registers holds exactly one matrix element (one copy of it).
inline bool layout_ok(const Layout &L) {
    static std::set<const Layout *> good;
    if (good.count(&L)) return true;
    std::vector<int> a(WAVE * L.nab, 0), b(WAVE * L.nbs(), 0), d(WAVE * L.ncd, 0);
    auto hit = [&](std::vector<int> &v, Slot s, int n) {
        if (s.lane < 0 || s.lane >= WAVE || s.e < 0 || s.e >= n) return false;
        v[s.lane * n + s.e]++;
        return true;
    };
    bool ok = L.M * L.K * L.reps == WAVE * L.nab && L.K * L.N * L.reps == WAVE * L.nbs() &&
              L.M * L.N == WAVE * L.ncd;
    for (int r = 0; r < L.reps; r++)
        for (int k = 0; k < L.K; k++) {
            for (int i = 0; i < L.M; i++) ok = ok && hit(a, L.a(i, k, r), L.nab);
            for (int j = 0; j < L.N; j++) ok = ok && hit(b, L.b(k, j, r), L.nbs());
        }
    for (int i = 0; i < L.M; i++)
        for (int j = 0; j < L.N; j++) ok = ok && hit(d, L.d(i, j), L.ncd);
    for (int c : a) ok = ok && c == 1;
    for (int c : b) ok = ok && c == 1;
    for (int c : d) ok = ok && c == 1;
    if (!ok) {
        fail(std::string("matrix.h: the layout table of ") + L.name + " does not map each register to one element");
        return false;
    }
    good.insert(&L);
    return true;
}

// The wave operation: gathers every lane's A and B, rebuilds the matrices through L and
// returns this lane's D elements (c holds its C elements, same layout).
template <int NAB, int NCD, int NB = NAB>
inline void run(const Layout &L, Ty ty, const uint32_t (&a)[NAB], const uint32_t (&b)[NB], const float (&c)[NCD],
                float (&d)[NCD]) {
    static_assert(NAB > 0 && NB > 0 && NCD > 0, "operand sizes");
    struct Regs {
        uint32_t a[NAB], b[NB];
    };
    Regs mine, all[WAVE];
    memcpy(mine.a, a, sizeof(a));
    memcpy(mine.b, b, sizeof(b));
    wave_gather(L.name, &mine, all, sizeof(Regs));
    for (int e = 0; e < NCD; e++) d[e] = NAN;
    if (L.nab != NAB || L.nbs() != NB || L.ncd != NCD) {
        fail(std::string("matrix.h: operand sizes of ") + L.name + " do not match its layout");
        return;
    }
    if (!layout_ok(L)) return;
    const int me = (int)lane();
    // One operand element's bits, after checking that its copies (gfx11) agree.
    auto element = [&](bool is_a, int r0, int c0) -> uint32_t {
        const Slot s = is_a ? L.a(r0, c0, 0) : L.b(r0, c0, 0);
        const uint32_t v = is_a ? all[s.lane].a[s.e] : all[s.lane].b[s.e];
        for (int rep = 1; rep < L.reps; rep++) {
            const Slot t = is_a ? L.a(r0, c0, rep) : L.b(r0, c0, rep);
            if ((is_a ? all[t.lane].a[t.e] : all[t.lane].b[t.e]) != v) {
                char m[256];
                snprintf(m, sizeof m,
                         "%s: %s[%d][%d] differs between lane %d and lane %d (element %d): the half-waves must "
                         "hold the same A and B",
                         L.name, is_a ? "A" : "B", r0, c0, s.lane, t.lane, s.e);
                fail(m);
            }
        }
        return v;
    };
    std::vector<double> A(L.M * L.K), B(L.K * L.N);
    for (int k = 0; k < L.K; k++) {
        for (int i = 0; i < L.M; i++) A[i * L.K + k] = value(ty, element(true, i, k));
        for (int j = 0; j < L.N; j++) B[k * L.N + j] = value(ty, element(false, k, j));
    }
    if (!S.error.empty()) return;
    for (int i = 0; i < L.M; i++)
        for (int j = 0; j < L.N; j++) {
            const Slot s = L.d(i, j);
            if (s.lane != me) continue;
            double acc = c[s.e];
            for (int k = 0; k < L.K; k++) acc += A[i * L.K + k] * B[k * L.N + j];
            d[s.e] = (float)acc;
        }
}

template <int N, typename V> inline void unpack(const V &v, uint32_t (&out)[N]) {
    for (int e = 0; e < N; e++) out[e] = bits_of(v[e]);
}
template <int N> inline void unpack(float v, uint32_t (&out)[N]) {
    static_assert(N == 1, "a scalar operand");
    out[0] = bits_of(v);
}

// One builtin: operands unpacked to raw bits, the wave operation, D packed back.
template <int NAB, int NCD, typename VAB, typename VC>
inline VC exec(const Layout &L, Ty ty, VAB a, VAB b, VC c, int cbsz = 0, int abid = 0, int blgp = 0) {
    uint32_t ra[NAB], rb[NAB];
    float rc[NCD], rd[NCD];
    unpack<NAB>(a, ra);
    unpack<NAB>(b, rb);
    for (int e = 0; e < NCD; e++) rc[e] = c[e];
    if (cbsz != 0 || abid != 0 || blgp != 0)
        fail(std::string(L.name) + ": cbsz/abid/blgp other than 0 are not emulated");
    run<NAB, NCD>(L, ty, ra, rb, rc, rd);
    VC out;
    for (int e = 0; e < NCD; e++) out[e] = rd[e];
    return out;
}

#if defined(EMU_MMA_SYNC)
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c with d = c: the
// registers as the PTX operands (a: 4 x .b32 of 16-bit pairs, b: 2, c: 4 floats).
inline void mma_sync_m16n8k16(bool bf16, const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float *c) {
    uint32_t ra[8], rb[4];
    for (int e = 0; e < 8; e++) ra[e] = (a[e / 2] >> (16 * (e % 2))) & 0xffffu;
    const uint32_t b[2] = {b0, b1};
    for (int e = 0; e < 4; e++) rb[e] = (b[e / 2] >> (16 * (e % 2))) & 0xffffu;
    float rc[4], rd[4];
    for (int e = 0; e < 4; e++) rc[e] = c[e];
    run<8, 4, 4>(MMA_SYNC_16x8x16, bf16 ? BF16 : F16, ra, rb, rc, rd);
    for (int e = 0; e < 4; e++) c[e] = rd[e];
}
#endif

#if defined(EMU_MMA_GFX9)
inline v4f mfma_f32_16x16x16f16(v4h a, v4h b, v4f c, int cbsz, int abid, int blgp) {
    return exec<4, 4>(MFMA_16x16x16, F16, a, b, c, cbsz, abid, blgp);
}
inline v4f mfma_f32_16x16x16bf16_1k(v4s a, v4s b, v4f c, int cbsz, int abid, int blgp) {
    return exec<4, 4>(MFMA_16x16x16, BF16, a, b, c, cbsz, abid, blgp);
}
inline v4f mfma_f32_16x16x4f32(float a, float b, v4f c, int cbsz, int abid, int blgp) {
    return exec<1, 4>(MFMA_16x16x4_F32, F32, a, b, c, cbsz, abid, blgp);
}
inline v16f mfma_f32_32x32x8f16(v4h a, v4h b, v16f c, int cbsz, int abid, int blgp) {
    return exec<4, 16>(MFMA_32x32x8, F16, a, b, c, cbsz, abid, blgp);
}
inline v16f mfma_f32_32x32x8bf16_1k(v4s a, v4s b, v16f c, int cbsz, int abid, int blgp) {
    return exec<4, 16>(MFMA_32x32x8, BF16, a, b, c, cbsz, abid, blgp);
}
#endif
#if defined(EMU_MMA_GFX11)
inline v8f wmma_f32_16x16x16_f16_w32(v16h a, v16h b, v8f c) { return exec<16, 8>(WMMA11, F16, a, b, c); }
inline v8f wmma_f32_16x16x16_bf16_w32(v16s a, v16s b, v8f c) { return exec<16, 8>(WMMA11, BF16, a, b, c); }
#endif
#if defined(EMU_MMA_GFX12)
inline v8f wmma_f32_16x16x16_f16_w32_gfx12(v8h a, v8h b, v8f c) { return exec<8, 8>(WMMA12, F16, a, b, c); }
inline v8f wmma_f32_16x16x16_bf16_w32_gfx12(v8s a, v8s b, v8f c) { return exec<8, 8>(WMMA12, BF16, a, b, c); }
#endif

} // namespace mma
} // namespace emu

#if defined(EMU_MMA_GFX9)
#define __builtin_amdgcn_mfma_f32_16x16x16f16(...) emu::mma::mfma_f32_16x16x16f16(__VA_ARGS__)
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(...) emu::mma::mfma_f32_16x16x16bf16_1k(__VA_ARGS__)
#define __builtin_amdgcn_mfma_f32_16x16x4f32(...) emu::mma::mfma_f32_16x16x4f32(__VA_ARGS__)
#define __builtin_amdgcn_mfma_f32_32x32x8f16(...) emu::mma::mfma_f32_32x32x8f16(__VA_ARGS__)
#define __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(...) emu::mma::mfma_f32_32x32x8bf16_1k(__VA_ARGS__)
#endif
#if defined(EMU_MMA_GFX11)
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(...) emu::mma::wmma_f32_16x16x16_f16_w32(__VA_ARGS__)
#define __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(...) emu::mma::wmma_f32_16x16x16_bf16_w32(__VA_ARGS__)
#endif
#if defined(EMU_MMA_GFX12)
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(...) emu::mma::wmma_f32_16x16x16_f16_w32_gfx12(__VA_ARGS__)
#define __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(...)                                                    \
    emu::mma::wmma_f32_16x16x16_bf16_w32_gfx12(__VA_ARGS__)
#endif
