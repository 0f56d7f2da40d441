//! `cargo xtask kernels --report [--kernels]`: the resource use of the committed objects
//! (registers, LDS, scratch, occupancy), per module and target or per kernel, all read from
//! the objects' own metadata (the manifest only lists them); occupancy is computed from it
//! by [`super::occupancy`].

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use candle_rocm_kernels::code_object::{CodeObject, KernelInfo};

use super::manifest::{entries, read_manifest};
use super::occupancy::waves_per_simd;

/// Prints the resource table of the committed objects, per module and target or, with
/// `per_kernel`, per kernel.
pub(super) fn report(root: &Path, per_kernel: bool) -> Result<()> {
    let manifest = read_manifest(&root.join("kernels/manifest.json"))
        .ok_or_else(|| anyhow!("kernels/manifest.json is missing: run `cargo xtask kernels`"))?;
    let header = [
        "module", "target", "kernels", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "waves",
    ];
    if per_kernel {
        println!(
            "{:<10} {:<16} {:<36} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5}",
            header[0],
            header[1],
            "kernel",
            header[3],
            header[4],
            header[5],
            header[6],
            header[7],
            header[8]
        );
    } else {
        println!(
            "{:<10} {:<16} {:>7} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5} {:>8} {:>8}",
            header[0],
            header[1],
            header[2],
            header[3],
            header[4],
            header[5],
            header[6],
            header[7],
            "min wv",
            "scr.krn",
            "raw KiB"
        );
    }
    let (mut total_packed, mut total_raw, mut spilling) = (0u64, 0u64, 0usize);
    for e in entries(&manifest)? {
        let f = e.file;
        let packed = std::fs::read(root.join("kernels/objects").join(f))?;
        let raw = miniz_oxide::inflate::decompress_to_vec(&packed)
            .map_err(|err| anyhow!("{f} is corrupt: {err:?}"))?;
        let co = CodeObject::parse(&raw).map_err(|err| anyhow!("{f}: {err}"))?;
        let waves = co
            .kernels
            .iter()
            .map(|k| waves_per_simd(e.target, k))
            .collect::<Result<Vec<u64>>>()
            .with_context(|| format!("occupancy of {f}"))?;
        // Kernels that touch scratch memory: stack use or VGPR spills. (SGPR spills go to
        // VGPR lanes and cost no memory traffic.)
        let uses_scratch = |k: &KernelInfo| k.scratch_bytes > 0 || k.vgpr_spills > 0;
        total_packed += packed.len() as u64;
        total_raw += raw.len() as u64;
        if per_kernel {
            for (k, w) in co.kernels.iter().zip(&waves) {
                println!(
                    "{:<10} {:<16} {:<36} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5}",
                    e.module.name(),
                    e.target,
                    k.name,
                    k.vgprs,
                    k.agprs,
                    k.sgprs,
                    k.lds_bytes,
                    k.scratch_bytes,
                    w
                );
            }
            continue;
        }
        let max = |g: fn(&KernelInfo) -> u64| co.kernels.iter().map(g).max().unwrap_or(0);
        let scratch = co.kernels.iter().filter(|k| uses_scratch(k)).count();
        spilling += scratch;
        let min_waves = waves.iter().min();
        println!(
            "{:<10} {:<16} {:>7} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5} {:>8} {:>8}",
            e.module.name(),
            e.target,
            co.kernels.len(),
            max(|k| k.vgprs),
            max(|k| k.agprs),
            max(|k| k.sgprs),
            max(|k| k.lds_bytes),
            max(|k| k.scratch_bytes),
            min_waves.map_or("?".to_string(), |w| w.to_string()),
            scratch,
            raw.len() / 1024
        );
    }
    println!(
        "total: {:.1} MiB embedded (compressed), {:.1} MiB raw; kernels using scratch: {spilling} \
         (kernels/tests/embedded.rs allows none)",
        total_packed as f64 / (1 << 20) as f64,
        total_raw as f64 / (1 << 20) as f64
    );
    Ok(())
}
