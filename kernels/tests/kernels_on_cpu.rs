//! Runs our own kernel sources on the CPU: `tests/emu/emu.h` emulates the HIP/CUDA execution
//! model in plain C++ (blocks one after another, the threads of a block as cooperative fibers
//! that meet at `__syncthreads` and wave shuffles, `__shared__` as static storage), and the
//! drivers in `tests/emu/` launch `hip/elementwise.hip`, `hip/rows.hip`, `hip/index.hip`,
//! `hip/qmatvec.hip` (its one-row kernels, split and SwiGLU-gated, in `qmatvec_decode_test.cpp`), `hip/copy.hip` (batched copies, im2col rows), `hip/gemv.hip` (both
//! orientations, `gemv_test.cpp` and `gemv_nn_test.cpp`),
//! `hip/attention.hip` and `hip/conv_igemm.hip` with candle-rocm's launch geometry and
//! argument structs and check every result against host references. `rows.hip`, `qmatvec.hip`, `gemv.hip` and `attention.hip`
//! run three ways: their CUDA path
//! (32-lane `__shfl_xor_sync`) and their AMD path (`ds_bpermute`) with wave 32 and wave 64.
//! `hip/mma/tile.h` (the matrix-unit tiles) runs once per family on `tests/emu/matrix.h`'s
//! emulated MFMA / WMMA instructions, which follow AMD's documented lane layouts, and so do
//! attention's matrix-unit prefill tiles (`fa_mma_*`), plus once on the CUDA path with
//! matrix.h's emulated `mma.sync` m16n8k16 (NVIDIA's documented layouts), and so do the
//! implicit-GEMM convolutions (`conv_igemm_*`). `hip/collective.hip` (the one-shot all-reduces
//! between GPUs, flag and Lamport forms) runs its AMD path with two ranks on two host threads
//! over shared memory (`collective_test.cpp`, emu.h's `EMU_RANKS`).
//!
//! Needs the toolchain `cargo xtask kernels` uses (`bash kernels/install-toolchain.sh`, or a
//! ROCm install's clang via `ROCM_PATH`); `.ci/run` installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod host_program;

use std::path::{Path, PathBuf};

/// Builds `tests/emu/<driver>` with `defines` for the host, runs it and checks it reports no
/// mismatch (`bad=0`).
fn build_and_run(driver: &str, tag: &str, defines: &[&str]) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // -O0: the drivers build in about 2 s each and run in seconds; -O1 builds 5x slower.
    let mut args = vec!["-x", "c++", "-std=c++17", "-O0"];
    args.extend_from_slice(defines);
    host_program::build_and_check(
        &format!("emu-{tag}"),
        &args,
        &dir.join("tests/emu").join(driver),
    );
}

#[test]
fn elementwise_kernels_match_references_on_cpu() {
    build_and_run("elementwise_test.cpp", "elementwise", &[]);
}

/// The elementwise driver catches 16-byte packs taken where the host planned 8-byte ones (a
/// pack would cross a row of a per-channel operand).
#[test]
fn elementwise_driver_catches_whole_packs_for_half_ones() {
    let (tag, what) = ("ew-0", "16-byte packs on an 8-byte plan");
    let tmp = mutant_tree(
        tag,
        "elementwise.hip",
        &["elementwise"],
        "elementwise/engines.h",
        "map2_packs<S, (VEC >= 4 ? VEC / 2 : 1)>",
        "map2_packs<S, VEC>",
        what,
    );
    assert_caught(
        tag,
        &tmp,
        "elementwise.hip",
        "EW_SOURCE",
        "elementwise_test.cpp",
        &[],
        what,
    );
}

#[test]
fn rows_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("rows_test.cpp", "rows-cuda", &[]);
}

#[test]
fn rows_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run("rows_test.cpp", "rows-amd32", &["-DEMU_AMD_WAVE=32"]);
}

#[test]
fn rows_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run("rows_test.cpp", "rows-amd64", &["-DEMU_AMD_WAVE=64"]);
}

#[test]
fn gemv_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("gemv_test.cpp", "gemv-cuda", &[]);
}

#[test]
fn gemv_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run("gemv_test.cpp", "gemv-amd32", &["-DEMU_AMD_WAVE=32"]);
}

#[test]
fn gemv_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run("gemv_test.cpp", "gemv-amd64", &["-DEMU_AMD_WAVE=64"]);
}

#[test]
fn gemv_nn_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("gemv_nn_test.cpp", "gemv-nn-cuda", &[]);
}

#[test]
fn gemv_nn_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run("gemv_nn_test.cpp", "gemv-nn-amd32", &["-DEMU_AMD_WAVE=32"]);
}

#[test]
fn gemv_nn_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run("gemv_nn_test.cpp", "gemv-nn-amd64", &["-DEMU_AMD_WAVE=64"]);
}

#[test]
fn batched_copy_kernels_match_references_on_cpu() {
    build_and_run("copy_test.cpp", "copy", &[]);
}

#[test]
fn im2col_kernels_match_references_on_cpu() {
    build_and_run("im2col_test.cpp", "im2col", &[]);
}

/// Builds the implicit-GEMM convolution driver (`conv_igemm_*` against the exact reference)
/// for one matrix-unit family. -O1, as the attention driver's matrix-unit builds.
fn conv_igemm(tag: &str, family: &[&str]) {
    let mut defines = vec!["-O1"];
    defines.extend_from_slice(family);
    build_and_run("conv_igemm_test.cpp", tag, &defines);
}

/// `conv_igemm_*` on the CUDA path: mma.sync m16n8k16 (emulated, PTX layouts), 4 warps.
#[test]
fn conv_igemm_kernels_match_references_on_cpu_cuda_mma_sync() {
    conv_igemm("conv-igemm-cuda", &[]);
}

/// `conv_igemm_*` on gfx942 MFMA (wave64: 2 waves of 32 channels x 128 positions, one shared
/// buffer).
#[test]
fn conv_igemm_kernels_match_references_on_cpu_gfx9_mfma() {
    conv_igemm("conv-igemm-gfx942", &["-DEMU_AMD_WAVE=64", "-D__gfx942__"]);
}

/// `conv_igemm_*` on gfx11 WMMA (wave32, operands replicated in both half-waves).
#[test]
fn conv_igemm_kernels_match_references_on_cpu_gfx11_wmma() {
    conv_igemm(
        "conv-igemm-gfx1100",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1100__"],
    );
}

/// `conv_igemm_*` on gfx12 WMMA (wave32, gfx12's operand layout).
#[test]
fn conv_igemm_kernels_match_references_on_cpu_gfx12_wmma() {
    conv_igemm(
        "conv-igemm-gfx1200",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1200__"],
    );
}

#[test]
fn collective_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run(
        "collective_test.cpp",
        "collective-amd64",
        &["-DEMU_AMD_WAVE=64"],
    );
}

#[test]
fn collective_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run(
        "collective_test.cpp",
        "collective-amd32",
        &["-DEMU_AMD_WAVE=32"],
    );
}

/// The collective driver catches broken Lamport kernels: a receiver that does not put the empty
/// marker back (the next call through that buffer reads stale data), and a sender that does not
/// normalise its -0.0 (the receiver takes it for "not written yet" and times out).
#[test]
fn collective_driver_catches_mutants() {
    let mutants = [
        (
            "                ar_store_volatile(src + p, empty);\n",
            "",
            "the receiver leaves its data in the buffer",
        ),
        (
            "__device__ __forceinline__ uint4 ar_pack_normal(uint4 v) {\n    return",
            "__device__ __forceinline__ uint4 ar_pack_normal(uint4 v) {\n    return v; return",
            "the sender sends -0.0 as it is",
        ),
    ];
    for (n, (from, to, what)) in mutants.into_iter().enumerate() {
        let tag = format!("ar-{n}");
        let file = "collective.hip";
        let tmp = mutant_tree(&tag, file, &[], file, from, to, what);
        let args = ["-DEMU_AMD_WAVE=64", "-DAR_EMU_TIMEOUT_MS=50"];
        assert_caught(
            &tag,
            &tmp,
            file,
            "AR_SOURCE",
            "collective_test.cpp",
            &args,
            what,
        );
    }
}

/// The convolution driver catches broken `conv_igemm_*` kernels: each mutant of
/// `hip/conv_igemm.hip` (a copy with one change), built for the family named, must report a
/// mismatch (or fail its launch).
#[test]
fn conv_igemm_driver_catches_mutants() {
    let cuda: &[&str] = &[];
    let gfx942: &[&str] = &["-DEMU_AMD_WAVE=64", "-D__gfx942__"];
    let gfx1100: &[&str] = &["-DEMU_AMD_WAVE=32", "-D__gfx1100__"];
    let gfx1200: &[&str] = &["-DEMU_AMD_WAVE=32", "-D__gfx1200__"];
    let mutants = [
        (
            cuda,
            "t.off = (int64_t)ci * (int64_t)a.s_c + ",
            "t.off = (int64_t)ci + ",
            "a tap's channel offset ignores the channel stride",
        ),
        (
            gfx942,
            "if (tid < CI_BK) tab[step & 1][tid] = ci_tap(a, k0 + 2 * CI_BK + tid);",
            "if (tid < CI_BK) tab[(step + 1) & 1][tid] = ci_tap(a, k0 + 2 * CI_BK + tid);",
            "the step after next's taps overwrite the next step's",
        ),
        (
            gfx942,
            "__syncthreads(); // the next step's tiles are in place; this step's are read",
            "",
            "no barrier between a step's staging and its use",
        ),
        (
            gfx942,
            "if (CI_STAGES == 1) __syncthreads(); // this step's tiles are read",
            "",
            "MFMA's one shared buffer overwritten while a wave still reads it",
        ),
        (
            gfx1100,
            "const uint32_t co = cm + i * 16 + q.q;",
            "const uint32_t co = cm + i * 16 + q.c;",
            "the store swaps an accumulator's rows and columns",
        ),
        (
            gfx1200,
            "const bool in = c.live && iy < a.h_in && ix < a.w_in;",
            "const bool in = c.live && iy < a.h_in;",
            "taps left or right of the input are read, not zeros",
        ),
        (
            cuda,
            "if (a.w_vec && co < a.c_out && k + 16 <= a.k) {",
            "if (a.w_vec && co < a.c_out) {",
            "16-byte kernel loads past K",
        ),
        (
            gfx942,
            "for (int kk = 0; kk < CI_BK; kk++, q += a.s_c) v[kk] = *q;",
            "for (int kk = 0; kk < CI_BK; kk++, q += 1) v[kk] = *q;",
            "taps outer: a step's channels read one element apart",
        ),
        (
            cuda,
            "if (++s.kx == a.k_w) {",
            "if (++s.kx > a.k_w) {",
            "taps outer: the step after a row's last tap stays on that row",
        ),
    ];
    for (n, (family, from, to, what)) in mutants.into_iter().enumerate() {
        let tag = format!("ci-{n}");
        let file = "conv_igemm.hip";
        let tmp = mutant_tree(&tag, file, &["mma"], file, from, to, what);
        let mut args = vec!["-DCI_EXIT_ON_BAD"];
        args.extend_from_slice(family);
        assert_caught(
            &tag,
            &tmp,
            file,
            "CI_SOURCE",
            "conv_igemm_test.cpp",
            &args,
            what,
        );
    }
}

#[test]
fn index_select_kernels_match_references_on_cpu() {
    build_and_run("index_test.cpp", "index", &[]);
}

/// The mat-vec kernels' tuning knobs away from their defaults (parts per lane, loop unroll), so a
/// tuning build stays correct.
#[test]
fn qmatvec_tuning_knobs_match_references_on_cpu() {
    build_and_run(
        "qmatvec_test.cpp",
        "qmatvec-knobs",
        &[
            "-DEMU_AMD_WAVE=64",
            "-DQMV_PARTS=2",
            "-DQMV8_PARTS=4",
            "-DQMV8_PARTS_Q5=2",
            "-DQMV8_KPARTS=2",
            "-DQMV8_KPARTS_Q6K=2",
            "-DQMR_LANES=32",
            "-DQMV_UNROLL=2",
        ],
    );
}

#[test]
fn qmatvec_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("qmatvec_test.cpp", "qmatvec-cuda", &[]);
}

#[test]
fn qmatvec_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run("qmatvec_test.cpp", "qmatvec-amd32", &["-DEMU_AMD_WAVE=32"]);
}

#[test]
fn qmatvec_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run("qmatvec_test.cpp", "qmatvec-amd64", &["-DEMU_AMD_WAVE=64"]);
}

/// The one-row (decode) mat-vec kernels: the split ones (`qmatvec/split.h`,
/// `CANDLE_ROCM_QMATVEC_SPLIT`), every type, gpr 1 to 8, against the same reference, twice each
/// (identical bits); and those with SwiGLU's gate (`qmatvec/gated.h`), every type.
#[test]
fn qmatvec_decode_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("qmatvec_decode_test.cpp", "qmatvec-decode-cuda", &[]);
}

#[test]
fn qmatvec_decode_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run(
        "qmatvec_decode_test.cpp",
        "qmatvec-decode-amd32",
        &["-DEMU_AMD_WAVE=32"],
    );
}

#[test]
fn qmatvec_decode_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run(
        "qmatvec_decode_test.cpp",
        "qmatvec-decode-amd64",
        &["-DEMU_AMD_WAVE=64"],
    );
}

#[test]
fn attention_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("attention_test.cpp", "attention-cuda", &[]);
}

#[test]
fn attention_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run(
        "attention_test.cpp",
        "attention-amd32",
        &["-DEMU_AMD_WAVE=32"],
    );
}

#[test]
fn attention_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run(
        "attention_test.cpp",
        "attention-amd64",
        &["-DEMU_AMD_WAVE=64"],
    );
}

/// A copy of `hip/<main>` with its parts (the folders `hip/<part>/` of `parts`) in a fresh
/// temporary directory, with `from` replaced by `to` (once) in `file` (a path under `hip/`);
/// returns the directory. Panics when `from` is no longer in `file` (the mutant went stale).
fn mutant_tree(
    tag: &str,
    main: &str,
    parts: &[&str],
    file: &str,
    from: &str,
    to: &str,
    what: &str,
) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("candle-rocm-mutant-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for sub in parts {
        std::fs::create_dir_all(tmp.join(sub)).unwrap();
        for part in std::fs::read_dir(dir.join("hip").join(sub)).unwrap() {
            let part = part.unwrap().path();
            std::fs::copy(&part, tmp.join(sub).join(part.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(dir.join("hip").join(main), tmp.join(main)).unwrap();
    let target = tmp.join(file);
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(
        text.contains(from),
        "mutant {what}: {from:?} is no longer in {file}"
    );
    std::fs::write(&target, text.replacen(from, to, 1)).unwrap();
    tmp
}

/// Builds `tests/emu/<driver>` with `args` against the mutant tree `tmp` (its `main` passed as
/// `-D<source_macro>="..."`), removes the tree, and panics when the driver reports no
/// mismatch.
fn assert_caught(
    tag: &str,
    tmp: &Path,
    main: &str,
    source_macro: &str,
    driver: &str,
    args: &[&str],
    what: &str,
) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let define = format!("-D{source_macro}=\"{}\"", tmp.join(main).display());
    let mut all = vec!["-x", "c++", "-std=c++17", "-O0", define.as_str()];
    all.extend_from_slice(args);
    let (clean, out) = host_program::build_and_report(
        &format!("mutant-{tag}"),
        &all,
        &dir.join("tests/emu").join(driver),
    );
    let _ = std::fs::remove_dir_all(tmp);
    assert!(!clean, "the mutant '{what}' passed {driver}:\n{out}");
}

/// `attention_test.cpp` built with `args` against a copy of `hip/attention.hip` and its parts
/// with `from` replaced by `to` in `file` must report a mismatch.
fn attention_mutant_caught(tag: &str, file: &str, from: &str, to: &str, what: &str, args: &[&str]) {
    let tmp = mutant_tree(
        tag,
        "attention.hip",
        &["attention", "mma"],
        file,
        from,
        to,
        what,
    );
    assert_caught(
        tag,
        &tmp,
        "attention.hip",
        "FA_SOURCE",
        "attention_test.cpp",
        args,
        what,
    );
}

/// The attention driver catches broken kernels: each mutant of `hip/attention.hip` (a copy
/// with one change) must report mismatches.
#[test]
fn attention_driver_catches_mutants() {
    let mutants = [
        (
            "attention/tile.h",
            "corr[r] = exp2f(m[r] - mu);",
            "corr[r] = 1.0f;",
            "no rescale of the running output",
        ),
        (
            "attention/tile.h",
            "            __syncthreads();            // P is written",
            "            // P is written",
            "no barrier before a V chunk",
        ),
        (
            "attention/tile.h",
            "(wr < 0 || j <= qpos[r] + wr)",
            "(wr < 0 || j < qpos[r] + wr)",
            "causal mask off by one",
        ),
        (
            "attention/tile.h",
            "if (!in && p.mm_prefix) in = fa_mm_allowed(p, b, qpos[r], j);",
            "",
            "prefix ranges ignored",
        ),
        (
            "attention/decode.h",
            "        __syncthreads(); // D: P and the rescale factors",
            "",
            "decode: no barrier between P and its use",
        ),
        (
            "attention/decode.h",
            "if (j0 + KT < j_hi) fetch(j0 + KT);",
            "if (j0 + KT < j_hi) fetch(j0);",
            "decode: the pipelined loads fetch the wrong sub-tile",
        ),
        (
            "attention/decode.h",
            "acc += sp[c][r][kk];",
            "acc = sp[c][r][kk];",
            "decode: the parts of a logit not added",
        ),
        (
            "attention/decode.h",
            "*dst = gg == 0 ? o[r][u] : *dst + o[r][u];",
            "*dst = o[r][u];",
            "decode: key groups' parts overwritten, not added",
        ),
        (
            "attention/short_dec.h",
            "        __syncthreads(); // B: P and the rescale factors",
            "",
            "short decode: no barrier between P and its use",
        ),
        (
            "attention/short_dec.h",
            "const float c = cs[buf][r];",
            "const float c = 1.0f;",
            "short decode: the output not rescaled between chunks",
        ),
        (
            "attention/short_dec.h",
            "acc += red[(gg * R + r) * DMAX + col];",
            "acc = red[(gg * R + r) * DMAX + col];",
            "short decode: the key groups' parts not added",
        ),
        (
            "attention/combine.h",
            "const float ws = exp2f(ls - mx);",
            "const float ws = 1.0f;",
            "splits merged unweighted",
        ),
    ];
    for (n, (file, from, to, what)) in mutants.iter().enumerate() {
        attention_mutant_caught(&format!("fa-{n}"), file, from, to, what, &[]);
    }
}

/// gfx90a/gfx942 MFMA (wave64): `mma/tile.h`'s 16x16x16 f16/bf16/f32 and 32x32x8 f16/bf16
/// tiles against host references, layout mutants caught, the emulator's wave rules enforced.
#[test]
fn mma_tiles_match_references_on_cpu_gfx9_mfma() {
    build_and_run(
        "matrix_test.cpp",
        "matrix-gfx942",
        &["-DEMU_AMD_WAVE=64", "-D__gfx942__"],
    );
}

/// gfx11 WMMA (wave32; A and B replicated in both half-waves).
#[test]
fn mma_tiles_match_references_on_cpu_gfx11_wmma() {
    build_and_run(
        "matrix_test.cpp",
        "matrix-gfx1100",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1100__"],
    );
}

/// gfx12 WMMA (wave32; RDNA4's operand layout).
#[test]
fn mma_tiles_match_references_on_cpu_gfx12_wmma() {
    build_and_run(
        "matrix_test.cpp",
        "matrix-gfx1200",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1200__"],
    );
}

/// Builds the attention driver in its matrix-unit mode (`-DFA_TEST_MMA`: every `fa_mma_*`
/// kernel against the double reference) for one family. -O1: the emulated matrix
/// instructions make the -O0 build about 15 times slower to run.
fn attention_mma(tag: &str, family: &[&str]) {
    let mut defines = vec!["-O1", "-DFA_TEST_MMA", "-DFA_MMA_MAX_DMAX=256"];
    defines.extend_from_slice(family);
    build_and_run("attention_test.cpp", tag, &defines);
}

/// `fa_mma_*` on the CUDA path: mma.sync m16n8k16 (emulated, PTX layouts), 4 warps of 16 rows.
#[test]
fn attention_mma_kernels_match_references_on_cpu_cuda_mma_sync() {
    attention_mma("attention-mma-cuda", &[]);
}

/// `fa_mma_*` on gfx942 MFMA (wave64: 2 waves of 2 16-row tiles, S^T and O^T transposed).
#[test]
fn attention_mma_kernels_match_references_on_cpu_gfx9_mfma() {
    attention_mma(
        "attention-mma-gfx942",
        &["-DEMU_AMD_WAVE=64", "-D__gfx942__"],
    );
}

/// `fa_mma_*` on gfx11 WMMA (wave32; P's half-waves exchanged for the replicated B operand).
#[test]
fn attention_mma_kernels_match_references_on_cpu_gfx11_wmma() {
    attention_mma(
        "attention-mma-gfx1100",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1100__"],
    );
}

/// `fa_mma_*` on gfx12 WMMA (wave32; P V's K order follows S's accumulator).
#[test]
fn attention_mma_kernels_match_references_on_cpu_gfx12_wmma() {
    attention_mma(
        "attention-mma-gfx1200",
        &["-DEMU_AMD_WAVE=32", "-D__gfx1200__"],
    );
}

/// The matrix-unit driver catches broken `fa_mma_*` kernels: each mutant, built for the family
/// it breaks, must report a mismatch (or fail its launch).
#[test]
fn attention_mma_driver_catches_mutants() {
    let cuda: &[&str] = &[];
    let gfx942: &[&str] = &["-DEMU_AMD_WAVE=64", "-D__gfx942__"];
    let gfx1100: &[&str] = &["-DEMU_AMD_WAVE=32", "-D__gfx1100__"];
    let gfx1200: &[&str] = &["-DEMU_AMD_WAVE=32", "-D__gfx1200__"];
    let mutants = [
        (
            cuda,
            "mma/frag.h",
            "return fm_pos{l / 4 + 8 * (v / 2), 8 * (e / 4) + 2 * (l % 4) + v % 2};",
            "return fm_pos{l / 4 + 8 * (v % 2), 8 * (e / 4) + 2 * (l % 4) + v / 2};",
            "CUDA: the accumulator's row map (rows and columns of the m16n8 C swapped)",
        ),
        (
            cuda,
            "attention/mma.h",
            "o[qt][x][e] *= corr[fm_slot(e)];",
            "o[qt][x][e] *= corr[0];",
            "CUDA: the rescale uses the first row's correction for both rows of a lane",
        ),
        (
            cuda,
            "attention/mma.h",
            "            __syncthreads();              // S's K chunk (or the previous V chunk) is read",
            "",
            "no barrier between the K chunk's last read and the V chunk's staging",
        ),
        (
            cuda,
            "mma/frag.h",
            "return KPAT ? 8 * (i / 16) + i % 8 : 8 * ((i / 8) % 2) + i % 8;",
            "return KPAT ? 8 * ((i / 8) % 2) + i % 8 : 8 * (i / 16) + i % 8;",
            "CUDA: ldmatrix rows named in the wrong matrix order (K's n8 and k halves swapped)",
        ),
        (
            cuda,
            "mma/frag.h",
            "return fm_ldsm<T, true, false>(p, ld, l);",
            "return fm_ldsm<T, false, false>(p, ld, l);",
            "CUDA: V as it lies read without the transposing ldmatrix",
        ),
        (
            gfx942,
            "attention/mma_pipe.h",
            "__syncthreads(); // V(t) is in vs; every wave is done with K(t)",
            "",
            "pipelined tile: no barrier between V's staging and its use (and K's next tile)",
        ),
        (
            gfx942,
            "mma/frag.h",
            "    x += fa_shfl_xor(x, 32);",
            "",
            "MFMA: the row sum misses the upper half-wave",
        ),
        (
            gfx1100,
            "mma/frag.h",
            "f[2 * e] = mma_traits<T>::elem(fa_from<T>(hi ? other : mine));",
            "f[2 * e] = mma_traits<T>::elem(fa_from<T>(mine));",
            "gfx11: P's B operand not exchanged between the half-waves",
        ),
        (
            gfx1200,
            "mma/frag.h",
            "    return 8 * (l / 16) + e;",
            "    return 8 * (e / 4) + 4 * (l / 16) + e % 4;",
            "gfx12: V's A operand in AMD's K order, unlike P's (the accumulator's)",
        ),
    ];
    // The decode kernel's mutants run its cases alone (FA_TEST_MDEC_ONLY).
    let cuda_dec: &[&str] = &["-DFA_TEST_MDEC_ONLY"];
    let gfx942_dec: &[&str] = &["-DEMU_AMD_WAVE=64", "-D__gfx942__", "-DFA_TEST_MDEC_ONLY"];
    let mutants = mutants.into_iter().chain([
        (
            cuda_dec,
            "attention/mma_dec.h",
            "FM_WAVE_SYNC(); // K(t) is in ks for every lane",
            "",
            "decode kernel: a wave reads its K tile before every lane's copy landed",
        ),
        (
            gfx942_dec,
            "attention/mma_dec.h",
            "theirs[(qt * DT + x) * FM_ACC_N + e] * cb[r]",
            "theirs[(qt * DT + x) * FM_ACC_N + e]",
            "decode kernel: the merge adds another wave's output without its rescale",
        ),
    ]);
    for (n, (family, file, from, to, what)) in mutants.enumerate() {
        let tag = format!("fa-mma-{n}");
        let mut args = vec!["-DFA_TEST_MMA", "-DFA_EXIT_ON_BAD", "-DFA_MMA_MAX_DMAX=256"];
        args.extend_from_slice(family);
        attention_mutant_caught(&tag, file, from, to, what, &args);
    }
}
