//! Static checks of the embedded code objects (no GPU needed): every module is there for every
//! target, each decompresses and parses, the kernel set of a module is the same on every
//! target (the symbol contract the backend launches against), and no kernel uses scratch
//! memory.

#![cfg(feature = "embed")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use candle_rocm_kernels::code_object::CodeObject;
use candle_rocm_kernels::{code_object, embedded, Module, GENERIC_TARGETS, TARGETS};

fn objects() -> Vec<(Module, &'static str, CodeObject)> {
    embedded()
        .map(|(m, t)| {
            let raw = code_object(m, t).unwrap().unwrap();
            let co = CodeObject::parse(&raw).unwrap_or_else(|e| panic!("{}.{t}: {e}", m.name()));
            (m, t, co)
        })
        .collect()
}

#[test]
fn every_module_is_embedded_for_every_target() {
    let have: BTreeSet<(Module, &str)> = embedded().collect();
    let mut missing = Vec::new();
    for m in Module::ALL {
        for t in TARGETS.iter().chain(GENERIC_TARGETS) {
            if !have.contains(&(m, *t)) {
                missing.push(format!("{}.{t}", m.name()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not embedded: {missing:?} (run cargo xtask kernels)"
    );
}

#[test]
fn objects_match_their_target_and_wave_size() {
    for (m, t, co) in objects() {
        assert!(
            co.target.ends_with(&format!("--{t}")) || co.target.contains(&format!("--{t}:")),
            "{}.{t} was built for {}",
            m.name(),
            co.target
        );
        let wave = if t.starts_with("gfx9") { 64 } else { 32 };
        for k in &co.kernels {
            assert_eq!(k.wavefront_size, wave, "{}.{t}: {}", m.name(), k.name);
        }
    }
}

/// Every target's object of a module defines the same kernels, but for the optional ones
/// (`candle_rocm_kernels::OPTIONAL_KERNEL_PREFIXES`), which the backend looks up as such. A
/// module has kernels on some target; one whose kernels are all optional (`conv_igemm`, matrix
/// units only) may have none on the targets without them.
#[test]
fn every_target_exports_the_same_kernels() {
    let mut by_module: BTreeMap<&str, Vec<(&str, BTreeSet<String>)>> = BTreeMap::new();
    let mut any_kernel: BTreeSet<&str> = BTreeSet::new();
    for (m, t, co) in objects() {
        if !co.kernels.is_empty() {
            any_kernel.insert(m.name());
        }
        let names = co
            .kernels
            .into_iter()
            .map(|k| k.name)
            .filter(|n| !candle_rocm_kernels::is_optional_kernel(n))
            .collect();
        by_module.entry(m.name()).or_default().push((t, names));
    }
    for (module, per_target) in by_module {
        let (first_t, first) = &per_target[0];
        assert!(
            any_kernel.contains(module),
            "{module} has no kernels on any target"
        );
        assert!(
            !first.is_empty() || per_target.iter().all(|(_, n)| n.is_empty()),
            "{module}.{first_t} has no kernels"
        );
        for (t, names) in &per_target[1..] {
            let only_first: Vec<_> = first.difference(names).collect();
            let only_this: Vec<_> = names.difference(first).collect();
            assert!(
                only_first.is_empty() && only_this.is_empty(),
                "{module}: {first_t} and {t} differ: only in {first_t}: {only_first:?}; only in {t}: {only_this:?}"
            );
        }
    }
}

/// No kernel of any module, on any target, uses scratch (private segment) memory: no stack
/// arrays, no spills. candle-kernels' batched q8_1 mat-vec kernels (`mul_mat_vec_*_q8_1_cudaN`)
/// used 32-80 bytes of it until the quantized module was compiled with llama.cpp's AMD
/// configuration for them (see `flags` in xtask/src/kernels/compile.rs).
#[test]
fn no_kernel_uses_scratch() {
    let mut offenders = Vec::new();
    for (m, t, co) in objects() {
        for k in co.kernels {
            // SGPR spills go to VGPR lanes, not memory; only scratch use counts.
            if k.scratch_bytes > 0 || k.vgpr_spills > 0 {
                offenders.push(format!(
                    "{}.{t}.{} scratch={}B vgpr_spills={}",
                    m.name(),
                    k.name,
                    k.scratch_bytes,
                    k.vgpr_spills
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "kernels using scratch: {offenders:#?}"
    );
}

/// No kernel of any module, on any target, spills VGPRs to memory.
#[test]
fn no_kernel_spills_vgprs() {
    let spilling: Vec<String> = objects()
        .into_iter()
        .flat_map(|(m, t, co)| {
            co.kernels
                .into_iter()
                .filter(|k| k.vgpr_spills > 0)
                .map(move |k| format!("{}.{t}.{} vgpr_spills={}", m.name(), k.name, k.vgpr_spills))
        })
        .collect();
    assert!(spilling.is_empty(), "kernels spilling VGPRs: {spilling:#?}");
}
