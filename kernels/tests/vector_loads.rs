//! Static AMD evidence for the hot kernels (no GPU needed): the disassembly of our `elementwise`,
//! `rows` and `index` modules for gfx942 (wave64, CDNA3) and gfx1100 (wave32, RDNA3) shows 128-bit
//! global loads (`global_load_dwordx4` on gfx9, `global_load_b128` on gfx11) in the function
//! body of every kernel with a vectorised contiguous path, and no kernel of these modules uses
//! scratch memory on any target.
//!
//! The disassembler is LLVM's `llvm-objdump`: `$ROCM_PATH/llvm/bin/llvm-objdump` when
//! `ROCM_PATH` is set, otherwise `llvm-objdump-19` (Debian's `llvm-19`, which
//! `kernels/install-toolchain.sh` installs). Without one these tests fail with that hint; they
//! never pass without having looked.

#![cfg(feature = "embed")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use candle_rocm_kernels::code_object::CodeObject;
use candle_rocm_kernels::{code_object, embedded, Module};

/// The targets whose disassembly is checked, with the mnemonic of a 128-bit global load there.
const TARGETS: [(&str, &str); 2] = [
    ("gfx942", "global_load_dwordx4"),
    ("gfx1100", "global_load_b128"),
];

/// The modules checked here: ours, written with a vectorised contiguous path.
const MODULES: [Module; 3] = [Module::Elementwise, Module::Rows, Module::Index];

/// Kernels named in issue 13's bandwidth table (and their bf16 twins): each must exist and
/// use 128-bit loads. The rule in [`has_contiguous_path`] covers the rest of the module.
const HOT: &[(Module, &str)] = &[
    (Module::Elementwise, "uexp_f32"),
    (Module::Elementwise, "uexp_bf16"),
    (Module::Elementwise, "ugelu_f32"),
    (Module::Elementwise, "usilu_bf16"),
    (Module::Elementwise, "affine_f32"),
    (Module::Elementwise, "affine_bf16"),
    (Module::Elementwise, "badd_f32"),
    (Module::Elementwise, "badd_bf16"),
    (Module::Elementwise, "bmul_f16"),
    // The strided binary kernel takes its contiguous fast path when both sides are contiguous.
    (Module::Elementwise, "badd_f32_strided"),
    (Module::Elementwise, "cast_f32_bf16"),
    (Module::Elementwise, "cast_bf16_f32"),
    (Module::Elementwise, "cast_f32_f16"),
    // where_cond: u8 / u32 / i64 conditions (a pack is 16 bytes of the smaller of the
    // condition and value types, so every operand moves in 128-bit packs).
    (Module::Elementwise, "where_u8_f32"),
    (Module::Elementwise, "where_u8_bf16"),
    (Module::Elementwise, "where_u8_f16"),
    (Module::Elementwise, "where_u8_f64"),
    (Module::Elementwise, "where_u32_f32"),
    (Module::Elementwise, "where_u32_bf16"),
    (Module::Elementwise, "where_i64_f32"),
    (Module::Elementwise, "where_i64_i64"),
    // The strided select takes whole packs for row and column broadcasts.
    (Module::Elementwise, "where_u8_f32_strided"),
    (Module::Rows, "rsum_f32_v"),
    (Module::Rows, "rsum_bf16_v"),
    (Module::Rows, "rmax_f32_v"),
    (Module::Rows, "rmin_f32_v"),
    (Module::Rows, "rargmax_f32_v"),
    (Module::Rows, "rsoftmax_f32_4_v"),
    (Module::Rows, "rsoftmax_bf16_4_v"),
    (Module::Rows, "rrmsnorm_f32_4_v"),
    (Module::Rows, "rlayernorm_f32_4_v"),
    // index_select of whole row segments in 16-byte packs (the embedding lookup), per id type.
    (Module::Index, "is_rows_u8_v16"),
    (Module::Index, "is_rows_u32_v16"),
    (Module::Index, "is_rows_i64_v16"),
];

/// Whether a kernel of `module` is a contiguous kernel with a vectorised path, by the
/// modules' naming: in `elementwise` each `<op>_<dtype>` (including every
/// `where_<cond>_<dtype>`; its `<op>_<dtype>_strided` twin takes the shape; [`HOT`] checks
/// the binary and select ones, which load whole packs for contiguous and broadcast operands);
/// in `rows` the `*_v` kernels; in `index` the `is_rows_*_v16` kernels (the `_v8`/`_v4` ones
/// move 64/32-bit packs by design, the gather/scatter kernels one element per thread).
fn has_contiguous_path(module: Module, kernel: &str) -> bool {
    match module {
        Module::Elementwise => !kernel.ends_with("_strided"),
        Module::Rows => kernel.ends_with("_v"),
        Module::Index => kernel.starts_with("is_rows_") && kernel.ends_with("_v16"),
        _ => false,
    }
}

/// The disassembler, or a panic that says how to get one.
fn objdump() -> PathBuf {
    let tool = match std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        Some(rocm) => PathBuf::from(rocm).join("llvm/bin/llvm-objdump"),
        None => PathBuf::from("llvm-objdump-19"),
    };
    match Command::new(&tool).arg("--version").output() {
        Ok(out) if out.status.success() => tool,
        Ok(out) => panic!(
            "{} --version failed ({}): {}",
            tool.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "cannot run {} ({e}): the kernel disassembly checks need LLVM's llvm-objdump; \
             install the toolchain with `bash kernels/install-toolchain.sh` (Debian's llvm-19), \
             or set ROCM_PATH to a ROCm install that has llvm/bin/llvm-objdump",
            tool.display()
        ),
    }
}

fn raw_object(module: Module, target: &str) -> Vec<u8> {
    code_object(module, target)
        .unwrap_or_else(|| panic!("{}.{target} is not embedded", module.name()))
        .unwrap()
}

/// Instruction mnemonics per function symbol of one code object.
type Disassembly = BTreeMap<String, BTreeSet<String>>;

/// Splits `llvm-objdump -d --no-leading-addr` output into the mnemonics of each function: a
/// line `<symbol>:` opens a function body, each following tab-indented line is an instruction.
fn parse_disassembly(text: &str) -> Disassembly {
    let mut functions = Disassembly::new();
    let mut current: Option<&mut BTreeSet<String>> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('<').and_then(|l| l.strip_suffix(">:")) {
            current = Some(functions.entry(name.to_string()).or_default());
        } else if line.starts_with('\t') {
            if let (Some(set), Some(mnemonic)) = (current.as_mut(), line.split_whitespace().next())
            {
                set.insert(mnemonic.to_string());
            }
        } else if line.trim().is_empty() {
            continue;
        } else {
            current = None;
        }
    }
    functions
}

/// The disassembly of each checked (module, target), made once per test binary.
fn disassembly(module: Module, target: &str) -> &'static Disassembly {
    static ALL: OnceLock<BTreeMap<(Module, String), Disassembly>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        let tool = objdump();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vector_loads");
        std::fs::create_dir_all(&dir).unwrap();
        let mut all = BTreeMap::new();
        for m in MODULES {
            for (t, _) in TARGETS {
                let path = dir.join(format!("{}.{t}.co", m.name()));
                std::fs::write(&path, raw_object(m, t)).unwrap();
                let out = Command::new(&tool)
                    .args(["-d", "--no-show-raw-insn", "--no-leading-addr"])
                    .arg(&path)
                    .output()
                    .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
                assert!(
                    out.status.success(),
                    "{} -d {} failed: {}",
                    tool.display(),
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                let text = String::from_utf8_lossy(&out.stdout);
                all.insert((m, t.to_string()), parse_disassembly(&text));
            }
        }
        all
    });
    &all[&(module, target.to_string())]
}

fn metadata(module: Module, target: &str) -> CodeObject {
    CodeObject::parse(&raw_object(module, target))
        .unwrap_or_else(|e| panic!("{}.{target}: {e}", module.name()))
}

#[test]
fn hot_kernels_use_128_bit_loads() {
    let mut failures = Vec::new();
    for (target, wide_load) in TARGETS {
        for &(module, kernel) in HOT {
            let what = format!("{}.{target}.{kernel}", module.name());
            if !metadata(module, target).has_kernel(kernel) {
                failures.push(format!("{what}: no such kernel"));
                continue;
            }
            match disassembly(module, target).get(kernel) {
                None => failures.push(format!("{what}: no function body in the disassembly")),
                Some(body) if !body.contains(wide_load) => {
                    let loads: Vec<_> = body.iter().filter(|i| i.contains("load")).collect();
                    failures.push(format!("{what}: no {wide_load}; its loads: {loads:?}"));
                }
                Some(_) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_contiguous_kernel_uses_128_bit_loads() {
    let mut failures = Vec::new();
    for (target, wide_load) in TARGETS {
        for module in MODULES {
            let kernels = metadata(module, target).kernels;
            let code = disassembly(module, target);
            let checked: Vec<_> = kernels
                .iter()
                .filter(|k| has_contiguous_path(module, &k.name))
                .collect();
            // Guards the naming rule against matching nothing after a rename.
            assert!(
                checked.len() >= HOT.iter().filter(|(m, _)| *m == module).count(),
                "{}.{target}: only {} kernels have a contiguous path by name",
                module.name(),
                checked.len()
            );
            for k in checked {
                if !code
                    .get(&k.name)
                    .is_some_and(|body| body.contains(wide_load))
                {
                    failures.push(format!("{}.{target}.{}", module.name(), k.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "kernels with a contiguous path but no 128-bit global load in their body: {failures:#?}"
    );
}

#[test]
fn checked_modules_use_no_scratch() {
    let mut offenders = Vec::new();
    // Resource use from the metadata, on every embedded target, with no allowlist. SGPR spills
    // go to VGPR lanes, not memory, so they do not count.
    for (m, t) in embedded().filter(|(m, _)| MODULES.contains(m)) {
        for k in metadata(m, t).kernels {
            if k.scratch_bytes > 0 || k.vgpr_spills > 0 {
                offenders.push(format!(
                    "{}.{t}.{}: scratch={}B vgpr_spills={}",
                    m.name(),
                    k.name,
                    k.scratch_bytes,
                    k.vgpr_spills
                ));
            }
        }
    }
    // And the code itself: no private-memory access (scratch_* on gfx942/gfx11, buffer loads
    // and stores for the private segment on older targets; cache controls such as
    // buffer_gl0_inv are not accesses) in any function of the disassembled objects.
    for m in MODULES {
        for (t, _) in TARGETS {
            for (function, body) in disassembly(m, t) {
                let private: Vec<_> = body
                    .iter()
                    .filter(|i| {
                        i.starts_with("scratch_")
                            || i.starts_with("buffer_load")
                            || i.starts_with("buffer_store")
                    })
                    .collect();
                if !private.is_empty() {
                    offenders.push(format!("{}.{t}.{function}: {private:?}", m.name()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "kernels of elementwise/rows/index using scratch: {offenders:#?}"
    );
}

#[test]
fn disassembly_parser_splits_functions() {
    let text = "\nx.co:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n<a>:\n\
                \tglobal_load_b128 v[0:3], v0, s[0:1]\n\ts_endpgm\n\n<b>:\n\
                \tglobal_load_b32 v0, v0, s[0:1]   // 000: ABCD\n";
    let d = parse_disassembly(text);
    assert_eq!(d.len(), 2);
    assert!(d["a"].contains("global_load_b128") && d["a"].contains("s_endpgm"));
    assert_eq!(d["b"].iter().collect::<Vec<_>>(), ["global_load_b32"]);
}
