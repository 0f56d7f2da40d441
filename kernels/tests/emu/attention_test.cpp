// Runs kernels/hip/attention.hip on the host through emu.h and checks every kernel against a
// double-precision host reference of attention: the prefill tiles (fa_fwd_<T>_<DMAX>) and the
// decode tiles (fa_dec_*) for f32, f16 and bf16 and every head-dim tier, dense calls with row
// and head strides of a packed qkv tensor, GQA/MQA, causal, windowed, ALiBi, softcap and
// multimodal-prefix masks, bottom-right alignment (sq != sk, and sq > sk: rows with no key),
// variable-length batches, a paged cache with a shuffled block table, unaligned operands (the
// element-load path), and calls split over the keys merged by fa_combine_*; then
// fa_cache_write_*. Inputs are multiples of 1/8 (exact in every T); the tolerance is f32
// arithmetic plus the output's rounding to T. Output elements outside the result keep their
// poison. Prints bad=<mismatches> and exits non-zero on any.
//
// Built with -DFA_TEST_MMA it checks the matrix-unit kernels instead (fa_mma_<T>_<DMAX>, and the
// decode kernel fa_mdec_<T>_<DMAX> on the cases of at most 8 packed rows plus MDEC_CASES;
// -DFA_TEST_MDEC_ONLY: fa_mdec alone; the prefill tiles:
// f16 and bf16, DMAX 64/128/256) on the family the build emulates: the CUDA path (mma.sync,
// emu.h's default), -DEMU_AMD_WAVE=64 -D__gfx942__ (MFMA), -DEMU_AMD_WAVE=32 -D__gfx1100__ or
// -D__gfx1200__ (WMMA), on the same cases plus MMA_CASES (lengths around the 64-row and 64-key
// tiles, head dims that end inside a 16-column step or a staged chunk). Those kernels round P
// to T before P V, so their tolerance adds T's unit roundoff u times sum_j p_j |v_j| / sum_j p_j
// (the most the rounding of every p_j by a relative u can move the normalised output).
// The mixed kernels (fa_dec*_f32h_*, and with -DFA_TEST_MMA fa_mma_f32h_*, fa_mdec_f32h_*: q and
// output f32, K and V f16) run the same cases (the FMA ones: the decode cases) but the packed ones (one tensor holds q, k and v, so one type). -DFA_EXIT_ON_BAD stops at the first failing case (the mutant tests).
#include "emu.h"

#include "check.h"

#ifndef FA_SOURCE
#define FA_SOURCE "../../hip/attention.hip"
#endif
#include FA_SOURCE

using namespace chk;

typedef void (*Kernel)(fa_params);
static Counter C;
static long launches;

template <typename T> static double value(T v) { return (double)fa_to(v); }
template <typename T> static T make(double v) { return fa_from<T>((float)v); }
static double unit(DT d) { return d == F32 ? ldexp(1.0, -24) : d == F16 ? ldexp(1.0, -11) : ldexp(1.0, -8); }

struct Case {
    const char *what;
    uint32_t batch, sq, sk, heads, kv_heads, d;
    int wl, wr;          // -1: unbounded
    bool alibi;
    float softcap;       // 0: none
    bool varlen;         // ragged lengths from sq/sk downwards
    uint32_t page;       // 0: not paged (paged implies varlen)
    bool packed;         // q, k, v views of one (tok, heads + 2 kv_heads, d) tensor
    bool unaligned;      // one element of offset: the element-load path
    uint32_t splits;
    bool mm;             // one multimodal prefix range per sequence
};

template <typename T> struct Run {
    DT dt;
    Kernel fwd, dec4, dec8, combine;
    int dmax;
    bool mma = false; // fwd is fa_mma_*: rows of 64, P rounded to T
    Kernel dec1 = nullptr; // the short decode kernels (fa_sdec*): R = 1 for one packed row
    bool sdec = false;     // splits in FA_DEC_TILE keys for every T
};

// TQ: q's and the output's type (T, or f32 for the mixed kernels fa_*_f32h_*: K and V in T).
template <typename T, typename TQ = T>
static void run(const Run<T> &k, const Case &cs, bool decode) {
    constexpr bool mixed = sizeof(TQ) != sizeof(T);
    if (mixed && cs.packed) return; // q, k and v of one tensor share its type
    const uint32_t packed = cs.sq * (cs.heads / cs.kv_heads);
    C.ctx = std::string(cs.what) + " " + dt_name(k.dt) + (mixed ? " q f32" : "") + " d=" + std::to_string(cs.d) +
            " dmax=" + std::to_string(k.dmax) + (decode ? " dec" : " fwd");
    std::mt19937_64 rng(cs.sq * 7919 + cs.sk * 104729 + cs.d * 31 + cs.heads + (decode ? 5 : 0));
    std::uniform_int_distribution<int> small(-8, 8);
    const uint32_t B = cs.batch, H = cs.heads, HK = cs.kv_heads, G = H / HK, D = cs.d;
    // Sequence lengths: ragged for variable-length calls.
    std::vector<uint32_t> lq(B, cs.sq), lk(B, cs.sk);
    if (cs.varlen)
        for (uint32_t b = 0; b < B; b++) {
            lq[b] = cs.sq - (b * 5) % (cs.sq > 1 ? cs.sq : 1);
            lk[b] = cs.sk - (b * 11) % (cs.sk > 1 ? cs.sk : 1);
            if (lk[b] < 1) lk[b] = 1;
        }
    std::vector<uint32_t> cu_q(B + 1, 0), cu_k(B + 1, 0);
    for (uint32_t b = 0; b < B; b++) {
        cu_q[b + 1] = cu_q[b] + lq[b];
        cu_k[b + 1] = cu_k[b] + lk[b];
    }
    uint32_t max_q = 0, max_k = 0;
    for (uint32_t b = 0; b < B; b++) {
        max_q = std::max(max_q, lq[b]);
        max_k = std::max(max_k, lk[b]);
    }
    const uint32_t total_q = cs.varlen ? cu_q[B] : B * cs.sq;
    const uint32_t total_k = cs.varlen ? cu_k[B] : B * cs.sk;
    const uint64_t off = cs.unaligned ? 1 : 0;
    // q: (tok, H, D) rows of `qrow`; packed: q, k, v share rows of (H + 2 HK) D.
    const uint64_t qrow = cs.packed ? (uint64_t)(H + 2 * HK) * D : (uint64_t)H * D;
    const uint64_t krow = cs.packed ? qrow : (uint64_t)HK * D;
    std::vector<TQ> qbuf(off + (uint64_t)total_q * qrow + 8);
    std::vector<T> kbuf, vbuf;
    for (auto &x : qbuf) x = make<TQ>(small(rng) / 8.0);
    // Paged: blocks of `page` rows, a shuffled table with spare blocks.
    uint32_t nblocks = 0, bt_stride = 0;
    std::vector<uint32_t> table;
    if (cs.page) {
        bt_stride = (max_k + cs.page - 1) / cs.page + 1;
        nblocks = B * bt_stride + 3;
        std::vector<uint32_t> perm(nblocks);
        for (uint32_t i = 0; i < nblocks; i++) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        table.assign((size_t)B * bt_stride, 0);
        for (size_t i = 0; i < table.size(); i++) table[i] = perm[i];
        kbuf.resize(off + (uint64_t)nblocks * cs.page * HK * D + 8);
        vbuf.resize(kbuf.size());
    } else if (!cs.packed) {
        kbuf.resize(off + (uint64_t)total_k * krow + 8);
        vbuf.resize(kbuf.size());
    }
    for (auto &x : kbuf) x = make<T>(small(rng) / 8.0);
    for (auto &x : vbuf) x = make<T>(small(rng) / 8.0);
    std::vector<float> alibi(H);
    for (uint32_t h = 0; h < H; h++) alibi[h] = (float)ldexp(1.0, -(int)(h % 4) - 1);
    std::vector<int32_t> mm(B * 2);
    for (uint32_t b = 0; b < B; b++) {
        mm[2 * b] = (int32_t)(lk[b] / 4);
        mm[2 * b + 1] = (int32_t)(lk[b] / 2 + 1);
    }

    fa_params p{};
    const TQ *qp = qbuf.data() + off;
    const T *kp, *vp;
    uint64_t kb, kr, kh;
    if (cs.page) {
        kp = kbuf.data() + off;
        vp = vbuf.data() + off;
        kb = (uint64_t)cs.page * HK * D;
        kr = (uint64_t)HK * D;
        kh = D;
    } else if (cs.packed) {
        kp = reinterpret_cast<const T *>(qp) + (uint64_t)H * D; // T == TQ here
        vp = reinterpret_cast<const T *>(qp) + (uint64_t)(H + HK) * D;
        kb = cs.varlen ? 0 : (uint64_t)cs.sk * krow;
        kr = krow;
        kh = D;
    } else {
        kp = kbuf.data() + off;
        vp = vbuf.data() + off;
        kb = cs.varlen ? 0 : (uint64_t)cs.sk * krow;
        kr = krow;
        kh = D;
    }
    // Dense packed calls need sq == sk (one tensor); the cases keep that.
    const TQ poison = make<TQ>(1234.0);
    std::vector<TQ> out(off + (uint64_t)total_q * H * D + 16, poison);
    p.q = qp;
    p.k = kp;
    p.v = vp;
    p.o = out.data() + off;
    p.cu_q = cs.varlen ? cu_q.data() : nullptr;
    p.cu_k = cs.varlen ? cu_k.data() : nullptr;
    p.block_table = cs.page ? table.data() : nullptr;
    p.alibi = cs.alibi ? alibi.data() : nullptr;
    p.mm_prefix = cs.mm ? mm.data() : nullptr;
    p.q_batch = cs.varlen ? 0 : (uint64_t)cs.sq * qrow;
    p.q_row = qrow;
    p.q_head = D;
    p.k_batch = p.v_batch = kb;
    p.k_row = p.v_row = kr;
    p.k_head = p.v_head = kh;
    p.o_batch = cs.varlen ? 0 : (uint64_t)cs.sq * H * D;
    p.o_row = (uint64_t)H * D;
    p.o_head = D;
    p.heads = H;
    p.kv_heads = HK;
    p.group = G;
    p.d = D;
    p.seqlen_q = cs.varlen ? max_q : cs.sq;
    p.seqlen_k = cs.varlen ? max_k : cs.sk;
    p.batch = B;
    p.splits = cs.splits;
    p.page = cs.page;
    p.bt_stride = bt_stride;
    // The decode kernels' split unit: FA_DEC_TILE keys, FA_DEC_TILE_F32 for f32's FMA decode.
    const uint32_t key_tile = !decode ? FA_BN : sizeof(T) == 4 && !k.mma && !k.sdec ? FA_DEC_TILE_F32 : FA_DEC_TILE;
    const uint32_t ktiles = (p.seqlen_k + key_tile - 1) / key_tile;
    p.tiles_per_split = (ktiles + cs.splits - 1) / cs.splits;
    p.total_q = total_q;
    p.mm_ranges = cs.mm ? 1 : 0;
    p.mm_stride = 2;
    const size_t N = 16 / sizeof(T);
    p.vec_ok = !cs.unaligned && qrow % N == 0 && kr % N == 0;
    p.window_left = cs.wl;
    p.window_right = cs.wr;
    p.scale = 1.0f / sqrtf((float)D);
    p.softcap = cs.softcap;
    std::vector<float> opart, lse;
    if (cs.splits > 1) {
        opart.assign((size_t)cs.splits * total_q * H * D, NAN);
        lse.assign((size_t)cs.splits * total_q * H, NAN);
        p.o_part = opart.data();
        p.lse_part = lse.data();
    }
    const uint32_t bm = k.mma || k.dmax <= 128 ? 64 : k.dmax == 256 ? 32 : 16;
    const uint32_t tiles = decode ? 1 : (p.seqlen_q * G + bm - 1) / bm;
    Kernel kern = !decode ? k.fwd : packed <= 1 && k.dec1 ? k.dec1 : packed <= 4 ? k.dec4 : k.dec8;
    launches++;
    if (!emu::launch(C.ctx.c_str(), kern, dim3(tiles, HK * cs.splits, B), dim3(FA_THREADS), p)) {
        C.fail("launch failed");
        return;
    }
    if (cs.splits > 1) {
        launches++;
        if (!emu::launch("combine", k.combine, dim3(total_q, H), dim3(FA_THREADS), p)) {
            C.fail("combine launch failed");
            return;
        }
    }
    // Reference.
    auto kv_at = [&](const T *base, uint32_t b, uint32_t j, uint32_t hk) -> const T * {
        if (cs.page) return base + (uint64_t)table[b * bt_stride + j / cs.page] * kb + (uint64_t)(j % cs.page) * kr + hk * kh;
        const uint64_t t0 = cs.varlen ? cu_k[b] : 0;
        return base + (uint64_t)b * kb + (t0 + j) * kr + hk * kh;
    };
    const double scale = p.scale;
    std::vector<double> logit(max_k), acc(D), acc_abs(D);
    for (uint32_t b = 0; b < B; b++) {
        const uint32_t sq = lq[b], sk = lk[b];
        for (uint32_t i = 0; i < sq; i++)
            for (uint32_t h = 0; h < H; h++) {
                const uint32_t hk = h / G;
                const int64_t qpos = (int64_t)i + sk - sq;
                const TQ *qr = qp + (uint64_t)b * p.q_batch + (uint64_t)((cs.varlen ? cu_q[b] : 0) + i) * qrow + (uint64_t)h * D;
                double mx = -INFINITY;
                for (uint32_t j = 0; j < sk; j++) {
                    bool in = (cs.wl < 0 || (int64_t)j >= qpos - cs.wl) && (cs.wr < 0 || (int64_t)j <= qpos + cs.wr);
                    if (!in && cs.mm) in = qpos >= mm[2 * b] && qpos < mm[2 * b + 1] && (int64_t)j >= mm[2 * b] && (int64_t)j < mm[2 * b + 1];
                    if (!in) {
                        logit[j] = -INFINITY;
                        continue;
                    }
                    const T *kr_ = kv_at(kp, b, j, hk);
                    double dot = 0;
                    for (uint32_t e = 0; e < D; e++) dot += value(qr[e]) * value(kr_[e]);
                    double x = cs.softcap > 0 ? cs.softcap * tanh(scale * dot / cs.softcap) : scale * dot;
                    if (cs.alibi) x -= alibi[h] * fabs((double)(qpos - (int64_t)j));
                    logit[j] = x;
                    mx = std::max(mx, x);
                }
                std::fill(acc.begin(), acc.end(), 0.0);
                std::fill(acc_abs.begin(), acc_abs.end(), 0.0);
                double sum = 0;
                if (mx > -INFINITY)
                    for (uint32_t j = 0; j < sk; j++) {
                        if (logit[j] == -INFINITY) continue;
                        const double w = exp(logit[j] - mx);
                        sum += w;
                        const T *vr = kv_at(vp, b, j, hk);
                        for (uint32_t e = 0; e < D; e++) {
                            acc[e] += w * value(vr[e]);
                            acc_abs[e] += w * fabs(value(vr[e]));
                        }
                    }
                const uint64_t tok = (cs.varlen ? cu_q[b] : (uint64_t)b * cs.sq) + i;
                const TQ *orow = out.data() + off + tok * H * D + (uint64_t)h * D;
                for (uint32_t e = 0; e < D; e++) {
                    const double want = sum > 0 ? acc[e] / sum : 0.0;
                    const double got = value(orow[e]);
                    double tol = 4e-5 + 2 * unit(k.dt) * fabs(want);
                    if (k.mma && sum > 0) tol += unit(k.dt) * acc_abs[e] / sum; // P rounded to T
                    C.checks++;
                    if (!(fabs(got - want) <= tol)) {
                        C.fail("b=%u i=%u h=%u e=%u: got %.8g want %.8g (tol %.3g)", b, i, h, e, got, want, tol);
                        return;
                    }
                }
            }
    }
    for (size_t x = 0; x < off; x++)
        if (value(out[x]) != value(poison)) C.fail("out[%zu] before the output was written", x);
    for (size_t x = off + (uint64_t)total_q * H * D; x < out.size(); x++)
        if (value(out[x]) != value(poison)) C.fail("out[%zu] past the output was written", x);
}

// Cases sized for the emulator (every lane of every block runs on one CPU thread).
static const Case CASES[] = {
    // what                     B  sq   sk  H  HK  d   wl  wr  alibi softcap varlen page packed unal splits mm
    {"full",                    1, 70,  70, 2, 2, 64, -1, -1, false, 0.f, false, 0, false, false, 1, false},
    {"causal gqa4 packed",      2, 65,  65, 4, 1, 40, -1,  0, false, 0.f, false, 0, true, false, 1, false},
    {"causal sq<sk",            1, 20,  90, 2, 1, 72, -1,  0, false, 0.f, false, 0, false, false, 1, false},
    {"causal sq>sk (empty rows)",1, 30, 10, 1, 1, 32, -1,  0, false, 0.f, false, 0, false, false, 1, false},
    {"window",                  1, 64, 130, 2, 2, 48, 17,  3, false, 0.f, false, 0, false, false, 1, false},
    {"alibi causal",            1, 33,  33, 4, 2, 64, -1,  0, true, 0.f, false, 0, false, false, 1, false},
    {"alibi full softcap",      1, 17,  40, 2, 2, 24, -1, -1, true, 5.f, false, 0, false, false, 1, false},
    {"varlen causal gqa2",      3, 40,  40, 4, 2, 32, -1,  0, false, 0.f, true, 0, false, false, 1, false},
    {"varlen unaligned",        2, 9,   70, 2, 2, 16, -1, -1, false, 0.f, true, 0, false, true, 1, false},
    {"paged causal",            2, 12, 100, 2, 1, 64, -1,  0, false, 0.f, true, 32, false, false, 1, false},
    {"paged split mm",          2, 5,  200, 4, 2, 40, -1,  0, false, 0.f, true, 32, false, false, 3, true},
    {"varlen causal mm prefill",2, 60,  60, 2, 1, 32, -1,  0, false, 0.f, true, 0, false, false, 1, true},
    {"decode split gqa8",       2, 1,  300, 8, 1, 64, -1,  0, false, 0.f, false, 0, false, false, 4, false},
    {"decode 4 rows split",     1, 4,  150, 2, 2, 128, -1, 0, true, 0.f, false, 0, false, false, 2, false},
    {"hd256 causal gqa2",       1, 20,  20, 2, 1, 256, -1, 0, false, 0.f, false, 0, false, false, 1, false},
    {"hd512 full",              1, 18,  30, 1, 1, 512, -1, -1, false, 0.f, false, 0, false, false, 1, false},
    {"decode hd200 split",      1, 1,  100, 4, 2, 200, -1, 0, false, 0.f, false, 0, false, false, 2, false},
    {"decode hd512 split",      1, 1,   70, 2, 2, 512, -1, 0, false, 0.f, false, 0, false, false, 2, false},
    {"decode gqa6 hd256 paged", 3, 1,  150, 6, 1, 256, -1, 0, false, 0.f, true, 32, false, false, 2, false},
    {"decode 2x4 hd512 window", 1, 2,   90, 4, 1, 512, 30, 0, true, 0.f, false, 0, false, false, 1, false},
    {"decode unaligned split",  1, 2,  129, 4, 4, 8, -1, -1, false, 2.f, false, 0, false, true, 3, false},
};

// TQ = f32 over T = f16: the mixed decode kernels (fa_dec*_f32h_*) on the decode cases only.
template <typename T, typename TQ = T>
static void run_type(DT dt, const Kernel (&fwd)[4], const Kernel (&dec4)[4], const Kernel (&dec8)[4], Kernel combine) {
    constexpr bool mixed = sizeof(TQ) != sizeof(T);
    static const int DMAX[4] = {64, 128, 256, 512};
    for (const Case &cs : CASES)
        for (int t = 0; t < 4; t++) {
            if (cs.d > (uint32_t)DMAX[t]) continue;
            // The smallest tier that holds d, plus one larger tier for a few cases (zero padding).
            const bool smallest = t == 0 || cs.d > (uint32_t)DMAX[t - 1];
            if (!smallest && !(t == 3 && cs.d == 40) && !(t == 1 && cs.d == 64)) continue;
            Run<T> k{dt, fwd[t], dec4[t], dec8[t], combine, DMAX[t]};
            const uint64_t packed = (uint64_t)cs.sq * (cs.heads / cs.kv_heads);
            if (packed <= 8) {
                run<T, TQ>(k, cs, true);
                if (dt == F32) run<T>(k, cs, false); // the prefill tile takes decode shapes too
            } else if (!mixed) {
                run<T>(k, cs, false);
            }
        }
}

// The short decode kernels' own cases: key counts around their chunks (16, 32, 64 keys by type
// and tier), one row a kv head (R = 1), several chunks (the online rescale), a window inside a
// chunk.
static const Case SDEC_CASES[] = {
    // what                     B  sq   sk  H  HK  d   wl  wr  alibi softcap varlen page packed unal splits mm
    {"sdec 1 key mha",          1, 1,    1, 4, 4, 128, -1, 0, false, 0.f, false, 0, false, false, 1, false},
    {"sdec 63 keys mha",        2, 1,   63, 3, 3, 64, -1,  0, false, 0.f, false, 0, false, false, 1, false},
    {"sdec 65 keys gqa4",       1, 1,   65, 8, 2, 128, -1, 0, true, 0.f, false, 0, false, false, 1, false},
    {"sdec 200 keys window",    1, 1,  200, 2, 2, 256, 70, 0, false, 3.f, false, 0, false, false, 1, false},
    {"sdec varlen paged gqa8",  3, 1,   97, 8, 1, 128, -1, 0, false, 0.f, true, 16, false, false, 1, true},
    {"sdec 2x2 split",          1, 2,  300, 4, 2, 96, -1,  0, false, 0.f, false, 0, false, false, 3, false},
};

// Every decode case (at most 8 packed rows, d <= 256) on fa_sdec<R>_<T>_<DMAX>: R = 1 for one
// packed row, 4, 8; the smallest tier that holds d, plus tier 128 for d = 64.
template <typename T, typename TQ = T>
static void run_type_sdec(DT dt, const Kernel (&s1)[3], const Kernel (&s4)[3], const Kernel (&s8)[3], Kernel combine) {
    constexpr bool mixed = sizeof(TQ) != sizeof(T);
    static const int DMAX[3] = {64, 128, 256};
    auto one = [&](const Case &cs) {
        if ((uint64_t)cs.sq * (cs.heads / cs.kv_heads) > 8 || (mixed && cs.packed)) return;
        for (int t = 0; t < 3; t++) {
            if (cs.d > (uint32_t)DMAX[t]) continue;
            const bool smallest = t == 0 || cs.d > (uint32_t)DMAX[t - 1];
            if (!smallest && !(t == 1 && cs.d == 64)) continue;
            Run<T> k{dt, nullptr, s4[t], s8[t], combine, DMAX[t]};
            k.dec1 = s1[t];
            k.sdec = true;
            run<T, TQ>(k, cs, true);
        }
    };
    for (const Case &cs : CASES) one(cs);
    for (const Case &cs : SDEC_CASES) one(cs);
}

#if defined(FA_TEST_MMA)
// The matrix-unit tiles' own cases: lengths around the 64-row and 64-key tiles, head dims that
// end inside a 16-column step (24, 80) or inside a staged 64-column chunk (136, 200).
static const Case MMA_CASES[] = {
    // what                     B  sq   sk  H  HK  d   wl  wr  alibi softcap varlen page packed unal splits mm
    {"one query",               1, 1,   65, 2, 2, 64, -1, -1, false, 0.f, false, 0, false, false, 1, false},
    {"63 causal",               1, 63,  63, 2, 2, 64, -1,  0, false, 0.f, false, 0, false, false, 1, false},
    {"64 full gqa2",            1, 64,  64, 4, 2, 64, -1, -1, false, 0.f, false, 0, false, false, 1, false},
    {"65 causal gqa4 packed",   1, 65,  65, 4, 1, 128, -1, 0, false, 0.f, false, 0, true, false, 1, false},
    {"127x129 window split",    2, 127, 129, 2, 2, 64, 40, 0, false, 0.f, false, 0, false, false, 2, false},
    {"d80 varlen causal gqa2",  2, 50,  70, 4, 2, 80, -1,  0, false, 0.f, true, 0, false, false, 1, false},
    {"d200 softcap split",      1, 33, 140, 2, 2, 200, -1, -1, false, 5.f, false, 0, false, false, 3, false},
    {"d136 paged causal",       2, 20,  90, 4, 2, 136, -1, 0, true, 0.f, true, 16, false, false, 1, false},
    {"d24 unaligned alibi",     1, 40,  40, 2, 2, 24, -1,  0, true, 0.f, false, 0, false, true, 1, false},
    {"decode gqa4 split",       2, 1,  300, 8, 2, 128, -1, 0, false, 0.f, false, 0, false, false, 5, false},
    {"decode paged gqa8 split", 1, 2,  200, 8, 1, 64, -1,  0, false, 0.f, true, 16, false, false, 3, false},
};

// The matrix-unit decode kernel's own cases: key counts around its 16-key tiles and the 64 keys
// its waves take a step, ragged lengths, a window, softcap, ALiBi and the multimodal prefix.
static const Case MDEC_CASES[] = {
    // what                     B  sq   sk  H  HK  d   wl  wr  alibi softcap varlen page packed unal splits mm
    {"mdec 1 key",              1, 1,    1, 4, 1, 128, -1, 0, false, 0.f, false, 0, false, false, 1, false},
    {"mdec 15 keys gqa8",       1, 1,   15, 8, 1, 64, -1,  0, false, 0.f, false, 0, false, false, 1, false},
    {"mdec 17 keys window",     1, 1,   17, 4, 1, 128, 9, 0, false, 0.f, false, 0, false, false, 1, false},
    {"mdec 63+65 varlen",       2, 1,   65, 4, 2, 128, -1, 0, false, 0.f, true, 0, false, false, 1, false},
    {"mdec 4x2 split window",   2, 2,  700, 8, 2, 128, 300, 0, true, 0.f, false, 0, false, false, 4, false},
    {"mdec softcap split",      1, 1,  520, 4, 1, 64, -1,  0, false, 30.f, false, 0, false, false, 3, false},
    {"mdec paged mm",           2, 1,  260, 4, 1, 128, -1, 0, false, 0.f, true, 16, false, false, 2, true},
    {"mdec d96 gqa4",           1, 2,  150, 8, 2, 96, -1,  0, false, 0.f, false, 0, false, false, 1, false},
};

// Every case with d <= 256 on fa_mma_<T>_<DMAX>: the smallest tier that holds d, plus a larger
// tier for d = 40 and d = 64 (the tier's padding).
template <typename T, typename TQ = T> static void run_type_mma(DT dt, const Kernel (&mma)[3], Kernel combine) {
    static const int DMAX[3] = {64, 128, 256};
    auto one = [&](const Case &cs) {
        for (int t = 0; t < 3; t++) {
            if (cs.d > (uint32_t)DMAX[t]) continue;
            const bool smallest = t == 0 || cs.d > (uint32_t)DMAX[t - 1];
            if (!smallest && !(t == 2 && cs.d == 40) && !(t == 1 && cs.d == 64)) continue;
            Run<T> k{dt, mma[t], nullptr, nullptr, combine, DMAX[t], true};
            run<T, TQ>(k, cs, false);
#if defined(FA_EXIT_ON_BAD) // mutants: the first mismatch is enough
            if (C.bad) {
                printf("attention mma: bad=%ld (stopped at the first failing case)\n", C.bad);
                exit(1);
            }
#endif
        }
    };
    for (const Case &cs : CASES) one(cs);
    for (const Case &cs : MMA_CASES) one(cs);
}

// The matrix-unit decode kernel (fa_mdec_<T>_<DMAX>, tiers 64 and 128) on every case of at most
// 8 packed rows (the host's decode calls), with the decode kernels' splits of FA_DEC_TILE keys.
template <typename T, typename TQ = T> static void run_type_mdec(DT dt, const Kernel (&mdec)[2], Kernel combine) {
    static const int DMAX[2] = {64, 128};
    auto one = [&](const Case &cs) {
        if ((uint64_t)cs.sq * (cs.heads / cs.kv_heads) > 8) return;
        for (int t = 0; t < 2; t++) {
            if (cs.d > (uint32_t)DMAX[t]) continue;
            const bool smallest = t == 0 || cs.d > (uint32_t)DMAX[t - 1];
            if (!smallest && !(t == 1 && cs.d == 64)) continue;
            Run<T> k{dt, nullptr, mdec[t], mdec[t], combine, DMAX[t], true};
            run<T, TQ>(k, cs, true);
#if defined(FA_EXIT_ON_BAD)
            if (C.bad) {
                printf("attention mdec: bad=%ld (stopped at the first failing case)\n", C.bad);
                exit(1);
            }
#endif
        }
    };
    for (const Case &cs : CASES) one(cs);
    for (const Case &cs : MMA_CASES) one(cs);
    for (const Case &cs : MDEC_CASES) one(cs);
}
#endif

// fa_cache_write: tokens into a shuffled set of slots, one padding slot (-1), one past the end.
template <typename T> static void cache_write(DT dt, void (*kern)(const T *, const T *, T *, T *, const int64_t *, uint32_t,
                                                                 uint32_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                                                                 uint64_t, uint64_t, uint32_t, uint64_t)) {
    C.ctx = std::string("cache_write ") + dt_name(dt);
    const uint32_t tokens = 6, HK = 2, D = 24, page = 4, blocks = 5;
    const uint64_t slots_n = (uint64_t)blocks * page;
    std::vector<T> key(tokens * HK * D * 2), val(key.size());
    for (size_t i = 0; i < key.size(); i++) {
        key[i] = make<T>((double)(i % 97) / 8.0);
        val[i] = make<T>(-(double)(i % 89) / 8.0);
    }
    const T poison = make<T>(-3.0);
    std::vector<T> kc(slots_n * HK * D, poison), vc(kc.size(), poison);
    std::vector<int64_t> slots = {7, 0, 19, -1, 12, (int64_t)slots_n};
    launches++;
    // key rows of 2 HK D (a view), value rows packed.
    if (!emu::launch(C.ctx.c_str(), kern, dim3(tokens), dim3(FA_THREADS), (const T *)key.data(), (const T *)val.data(), kc.data(),
                     vc.data(), (const int64_t *)slots.data(), HK, D, (uint64_t)2 * HK * D, (uint64_t)D, (uint64_t)HK * D,
                     (uint64_t)D, (uint64_t)page * HK * D, (uint64_t)HK * D, (uint64_t)D, page, slots_n)) {
        C.fail("launch failed");
        return;
    }
    std::vector<int> owner(slots_n, -1);
    for (uint32_t t = 0; t < tokens; t++)
        if (slots[t] >= 0 && (uint64_t)slots[t] < slots_n) owner[slots[t]] = (int)t;
    for (uint64_t s = 0; s < slots_n; s++)
        for (uint32_t h = 0; h < HK; h++)
            for (uint32_t e = 0; e < D; e++) {
                const uint64_t at = s * HK * D + h * D + e;
                const double wk = owner[s] < 0 ? value(poison) : value(key[owner[s] * 2 * HK * D + h * D + e]);
                const double wv = owner[s] < 0 ? value(poison) : value(val[owner[s] * HK * D + h * D + e]);
                C.checks += 2;
                if (value(kc[at]) != wk || value(vc[at]) != wv) {
                    C.fail("slot %lu head %u elem %u: got %g/%g want %g/%g", (unsigned long)s, h, e, value(kc[at]),
                           value(vc[at]), wk, wv);
                    return;
                }
            }
}

#define TIERS(P, TN) {(Kernel)&P##_##TN##_64, (Kernel)&P##_##TN##_128, (Kernel)&P##_##TN##_256, (Kernel)&P##_##TN##_512}

int main() {
#if defined(FA_TEST_MMA)
#if !defined(FA_MMA_KERNELS)
#error "FA_TEST_MMA: this build has no matrix-unit kernels (name a gfx9/gfx11/gfx12 target, or the CUDA path)"
#endif
    static const Kernel f16m[3] = {(Kernel)&fa_mma_f16_64, (Kernel)&fa_mma_f16_128, (Kernel)&fa_mma_f16_256};
    static const Kernel bf16m[3] = {(Kernel)&fa_mma_bf16_64, (Kernel)&fa_mma_bf16_128, (Kernel)&fa_mma_bf16_256};
    static const Kernel f16d[2] = {(Kernel)&fa_mdec_f16_64, (Kernel)&fa_mdec_f16_128};
    static const Kernel bf16d[2] = {(Kernel)&fa_mdec_bf16_64, (Kernel)&fa_mdec_bf16_128};
    // f32 q and output over f16 K and V.
    static const Kernel mixm[3] = {(Kernel)&fa_mma_f32h_64, (Kernel)&fa_mma_f32h_128, (Kernel)&fa_mma_f32h_256};
    static const Kernel mixd[2] = {(Kernel)&fa_mdec_f32h_64, (Kernel)&fa_mdec_f32h_128};
    long missing = 0;
#if !defined(FA_TEST_MDEC_ONLY) // the decode kernel's mutants skip the prefill tiles
    run_type_mma<__half>(F16, f16m, &fa_combine_f16);
    run_type_mma<__nv_bfloat16>(BF16, bf16m, &fa_combine_bf16);
    run_type_mma<__half, float>(F16, mixm, &fa_combine_f32);
    for (const Kernel *t : {f16m, bf16m, mixm})
        for (int i = 0; i < 3; i++) missing += !emu::S.launched.count((const void *)t[i]);
#endif
    run_type_mdec<__half>(F16, f16d, &fa_combine_f16);
    run_type_mdec<__nv_bfloat16>(BF16, bf16d, &fa_combine_bf16);
    run_type_mdec<__half, float>(F16, mixd, &fa_combine_f32);
    for (const Kernel *t : {f16d, bf16d, mixd})
        for (int i = 0; i < 2; i++) missing += !emu::S.launched.count((const void *)t[i]);
    if (missing) {
        C.ctx = "coverage";
        C.fail("%ld kernels never ran", missing);
    }
    printf("attention mma: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
#else
    static const Kernel f32f[4] = TIERS(fa_fwd, f32), f32d4[4] = TIERS(fa_dec4, f32), f32d8[4] = TIERS(fa_dec8, f32);
    static const Kernel f16f[4] = TIERS(fa_fwd, f16), f16d4[4] = TIERS(fa_dec4, f16), f16d8[4] = TIERS(fa_dec8, f16);
    static const Kernel bf16f[4] = TIERS(fa_fwd, bf16), bf16d4[4] = TIERS(fa_dec4, bf16),
                        bf16d8[4] = TIERS(fa_dec8, bf16);
    run_type<float>(F32, f32f, f32d4, f32d8, &fa_combine_f32);
    run_type<__half>(F16, f16f, f16d4, f16d8, &fa_combine_f16);
    run_type<__nv_bfloat16>(BF16, bf16f, bf16d4, bf16d8, &fa_combine_bf16);
    static const Kernel mixd4[4] = TIERS(fa_dec4, f32h), mixd8[4] = TIERS(fa_dec8, f32h);
    run_type<__half, float>(F16, f16f, mixd4, mixd8, &fa_combine_f32);
#define SDEC(R, TN) {(Kernel)&fa_sdec##R##_##TN##_64, (Kernel)&fa_sdec##R##_##TN##_128, (Kernel)&fa_sdec##R##_##TN##_256}
    static const Kernel s1f32[3] = SDEC(1, f32), s4f32[3] = SDEC(4, f32), s8f32[3] = SDEC(8, f32);
    static const Kernel s1f16[3] = SDEC(1, f16), s4f16[3] = SDEC(4, f16), s8f16[3] = SDEC(8, f16);
    static const Kernel s1bf16[3] = SDEC(1, bf16), s4bf16[3] = SDEC(4, bf16), s8bf16[3] = SDEC(8, bf16);
    static const Kernel s1mix[3] = SDEC(1, f32h), s4mix[3] = SDEC(4, f32h), s8mix[3] = SDEC(8, f32h);
    run_type_sdec<float>(F32, s1f32, s4f32, s8f32, &fa_combine_f32);
    run_type_sdec<__half>(F16, s1f16, s4f16, s8f16, &fa_combine_f16);
    run_type_sdec<__nv_bfloat16>(BF16, s1bf16, s4bf16, s8bf16, &fa_combine_bf16);
    run_type_sdec<__half, float>(F16, s1mix, s4mix, s8mix, &fa_combine_f32);
    cache_write<float>(F32, &fa_cache_write_f32);
    cache_write<__half>(F16, &fa_cache_write_f16);
    cache_write<__nv_bfloat16>(BF16, &fa_cache_write_bf16);
    long missing = 0;
    for (const Kernel *t : {f32f, f32d4, f32d8, f16f, f16d4, f16d8, bf16f, bf16d4, bf16d8, mixd4, mixd8})
        for (int i = 0; i < 4; i++) missing += !emu::S.launched.count((const void *)t[i]);
    for (const Kernel *t : {s1f32, s4f32, s8f32, s1f16, s4f16, s8f16, s1bf16, s4bf16, s8bf16, s1mix, s4mix, s8mix})
        for (int i = 0; i < 3; i++) missing += !emu::S.launched.count((const void *)t[i]);
    if (missing) {
        C.ctx = "coverage";
        C.fail("%ld kernels never ran", missing);
    }
    printf("attention: %ld launches, %ld checks, bad=%ld\n", launches, C.checks, C.bad);
    return C.bad != 0;
#endif
}
