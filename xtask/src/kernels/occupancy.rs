//! Occupancy (waves per SIMD) of a kernel, computed from its code object's metadata the way
//! LLVM 19's AMDGPU backend computes the `Occupancy [waves/SIMD]` of its
//! `-Rpass-analysis=kernel-resource-usage` remark, so `--report` needs only the committed
//! objects, not the compiler.
//!
//! The compiler's figure is the least of four limits (`GCNSubtarget::computeOccupancy` and
//! `AMDGPUMCExpr::createOccupancy`): the target's most waves per SIMD; the waves the
//! kernel's static LDS lets a compute unit hold, given its largest workgroup
//! (`getOccupancyWithLocalMemSize`); the SGPR file (before gfx10 only); and the VGPR file in
//! allocation granules (`getNumWavesPerEUWithNumVGPRs`). Each build compares this with the
//! compiler's own remarks ([`check_against_compiler`]), so a compiler whose formula differs
//! fails the build instead of making the report wrong.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use candle_rocm_kernels::code_object::KernelInfo;

/// What bounds the occupancy on one target (LLVM's `AMDGPU::IsaInfo` for its features).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Limits {
    /// Most waves a SIMD holds (`getMaxWavesPerEU`): 8 with gfx90a instructions, 10 before
    /// gfx10, 16 from gfx10.3.
    max_waves: u64,
    /// SIMDs whose waves share a workgroup's compute unit (`getEUsPerCU`): 4, both in gfx9's
    /// CU and in gfx10+'s work-group processor (the default WGP mode).
    simds: u64,
    /// Barriers per compute unit, the most multi-wave workgroups it holds: 16 before gfx10,
    /// 32 in WGP mode.
    barriers: u64,
    /// LDS bytes a compute unit shares among its workgroups: 64 KiB before gfx10, 128 KiB in
    /// a gfx10+ work-group processor.
    lds_bytes: u64,
    /// Whether SGPRs limit occupancy (before gfx10).
    sgpr_limited: bool,
    /// Whether the target has gfx90a's unified 512-entry VGPR/AGPR file.
    gfx90a: bool,
    /// Whether the target has 1.5 times the VGPRs of gfx10.3 (`Feature1_5xVGPRs`: gfx1100,
    /// gfx1101, gfx1151 and gfx12, not gfx1102 nor the gfx11 generic target).
    vgprs_1_5x: bool,
}

/// The limits of a target this project builds for.
fn limits(target: &str) -> Result<Limits> {
    let gfx9 = Limits {
        max_waves: 10,
        simds: 4,
        barriers: 16,
        lds_bytes: 64 << 10,
        sgpr_limited: true,
        gfx90a: false,
        vgprs_1_5x: false,
    };
    let gfx10_3 = Limits {
        max_waves: 16,
        barriers: 32,
        lds_bytes: 128 << 10,
        sgpr_limited: false,
        ..gfx9
    };
    Ok(match target {
        "gfx9-generic" => gfx9,
        "gfx90a" | "gfx942" => Limits {
            max_waves: 8,
            gfx90a: true,
            ..gfx9
        },
        "gfx1030" | "gfx10-3-generic" | "gfx1102" | "gfx11-generic" => gfx10_3,
        "gfx1100" | "gfx1101" | "gfx1151" | "gfx1200" | "gfx1201" | "gfx12-generic" => Limits {
            vgprs_1_5x: true,
            ..gfx10_3
        },
        other => bail!("no occupancy rules for target {other}"),
    })
}

/// The waves per SIMD a kernel of a code object for `target` can reach, as the compiler
/// reported it when it built the object.
pub(super) fn waves_per_simd(target: &str, k: &KernelInfo) -> Result<u64> {
    let l = limits(target)?;
    let wave = match k.wavefront_size {
        0 => bail!("{target}: kernel {} declares no wave size", k.name),
        w => w,
    };
    let mut waves = l.max_waves.min(lds_limit(&l, wave, k));
    if l.sgpr_limited && k.sgprs > 0 {
        waves = waves.min(match k.sgprs {
            0..=80 => 10,
            81..=88 => 9,
            89..=100 => 8,
            _ => 7,
        });
    }
    // The metadata's VGPR count is what LLVM counts (on gfx90a, aligned arch VGPRs plus
    // AGPRs); a kernel uses at least one.
    let (granule, file) = vgpr_file(&l, wave);
    let vgprs = k.vgprs.max(1);
    if vgprs >= granule {
        waves = waves.min((file / vgprs.next_multiple_of(granule)).clamp(1, l.max_waves));
    }
    Ok(waves)
}

/// (allocation granule, registers per SIMD lane) of the VGPR file
/// (`getVGPRAllocGranule`, `getTotalNumVGPRs`).
fn vgpr_file(l: &Limits, wave: u64) -> (u64, u64) {
    let wave32 = wave == 32;
    match (l.gfx90a, l.sgpr_limited, l.vgprs_1_5x, wave32) {
        (true, ..) => (8, 512),
        // Before gfx10 (the SGPR-limited generation): 256 in granules of 4.
        (false, true, ..) => (4, 256),
        (false, false, true, true) => (24, 1536),
        (false, false, true, false) => (12, 768),
        (false, false, false, true) => (16, 1024),
        (false, false, false, false) => (8, 512),
    }
}

/// Waves per SIMD that the kernel's static LDS allows (`getOccupancyWithLocalMemSize`):
/// as many workgroups as fit the LDS and the compute unit, spread over its SIMDs.
fn lds_limit(l: &Limits, wave: u64, k: &KernelInfo) -> u64 {
    let group_size = match k.max_workgroup_size {
        0 => 1024,
        n => n,
    };
    let group_waves = group_size.div_ceil(wave);
    let cu_waves = l.max_waves * l.simds;
    let groups_per_cu = if group_waves == 1 {
        cu_waves
    } else {
        (cu_waves / group_waves).min(l.barriers)
    };
    if groups_per_cu == 0 {
        return 0;
    }
    let groups = l.lds_bytes / k.lds_bytes.max(1);
    if groups == 0 {
        return 1;
    }
    (groups.min(groups_per_cu) * group_waves)
        .div_ceil(l.simds)
        .min(l.max_waves)
}

/// Fails unless [`waves_per_simd`] gives, for every kernel of an object, what the compiler
/// reported for it (`reported`: kernel name to waves per SIMD, from its remarks).
pub(super) fn check_against_compiler(
    target: &str,
    kernels: &[KernelInfo],
    reported: &BTreeMap<String, u64>,
) -> Result<()> {
    let mut differ = Vec::new();
    for k in kernels {
        let ours = waves_per_simd(target, k)?;
        match reported.get(&k.name) {
            Some(&theirs) if theirs == ours => {}
            theirs => differ.push(format!("{}: compiler {theirs:?}, computed {ours}", k.name)),
        }
    }
    if !differ.is_empty() {
        bail!(
            "{target}: the occupancy computed from the code object differs from the compiler's \
             remarks for {} kernels (update xtask/src/kernels/occupancy.rs for this compiler):\n  {}",
            differ.len(),
            differ.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waves per SIMD of a kernel with these resources on `target`.
    fn waves(target: &str, vgprs: u64, sgprs: u64, lds: u64, wave: u64, group: u64) -> u64 {
        let k = KernelInfo {
            name: "k".into(),
            vgprs,
            sgprs,
            lds_bytes: lds,
            wavefront_size: wave,
            max_workgroup_size: group,
            ..KernelInfo::default()
        };
        waves_per_simd(target, &k).unwrap()
    }

    #[test]
    fn registers_bound_occupancy() {
        // gfx1100, wave32: 1536 VGPRs in granules of 24.
        assert_eq!(waves("gfx1100", 96, 20, 0, 32, 1024), 16);
        assert_eq!(waves("gfx1100", 128, 20, 0, 32, 1024), 10);
        // gfx1102: 1024 in granules of 16.
        assert_eq!(waves("gfx1102", 128, 20, 0, 32, 1024), 8);
        // gfx9-generic: SGPRs count too.
        assert_eq!(waves("gfx9-generic", 20, 90, 0, 64, 256), 8);
        // gfx90a: a 512-entry file in granules of 8, at most 8 waves.
        assert_eq!(waves("gfx90a", 256, 20, 0, 64, 256), 2);
        assert_eq!(waves("gfx90a", 8, 20, 0, 64, 256), 8);
        let k = KernelInfo {
            wavefront_size: 64,
            ..KernelInfo::default()
        };
        assert!(waves_per_simd("gfx803", &k).is_err());
    }

    #[test]
    fn lds_bounds_occupancy() {
        // gfx10+ in WGP mode: 128 KiB. 64 KiB per 256-thread wave32 group: 2 groups of 8
        // waves over 4 SIMDs.
        assert_eq!(waves("gfx1030", 8, 20, 64 << 10, 32, 256), 4);
        // gfx9: 64 KiB. 16 KiB per 256-thread wave64 group: 4 groups of 4 waves.
        assert_eq!(waves("gfx942", 8, 20, 16 << 10, 64, 256), 4);
        // More LDS than a compute unit has: the compiler assumes the worst, one wave.
        assert_eq!(waves("gfx1030", 8, 20, 256 << 10, 32, 256), 1);
    }

    #[test]
    fn disagreement_with_the_compiler_is_an_error() {
        let k = KernelInfo {
            name: "k".into(),
            vgprs: 8,
            wavefront_size: 32,
            max_workgroup_size: 256,
            ..KernelInfo::default()
        };
        let reported = |w: u64| BTreeMap::from([("k".to_string(), w)]);
        check_against_compiler("gfx1100", std::slice::from_ref(&k), &reported(16)).unwrap();
        let e = check_against_compiler("gfx1100", &[k], &reported(12)).unwrap_err();
        assert!(
            format!("{e}").contains("compiler Some(12), computed 16"),
            "{e}"
        );
    }
}
