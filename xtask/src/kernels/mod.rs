//! `cargo xtask kernels`: compiles every kernel module for every AMD target into compressed,
//! committed code objects plus a manifest, and checks or reports on them.
//!
//! Sources: candle-kernels' `.cu` files, read from the cargo registry (fetched if needed, never
//! copied into this repository), and our own `kernels/hip/*.hip`, compiled through our
//! compatibility headers in `kernels/include/`. Compiler: `$ROCM_PATH/llvm/bin/clang++` when `ROCM_PATH` is set,
//! else Debian's `clang++-19` with `rocm-device-libs` (see `kernels/install-toolchain.sh`); for
//! targets the Debian 5.2 device libraries predate, the `oclc_isa_version` bitcode is
//! generated into an overlay directory.
//!
//! Outputs, all under `kernels/`: `objects/<module>.<target>.co.z` (deflate-compressed HSA code
//! objects), `manifest.json` (per object: source hash, flags, compiler, sizes, kernel count)
//! and `src/objects.rs` (the embedding table). A compile is cached per (module, target, source
//! hash) in `target/xtask/kernel-cache`.
//!
//! Flags: `--check` fails when a source or flag changed since the manifest (no compiler
//! needed); `--verify` recompiles everything and fails unless each object is byte-identical to
//! the committed one (CI runs it: the committed binaries are exactly what the sources give), and
//! checks that the occupancy computed from each object is the compiler's; `--report` prints
//! per module and target the largest VGPR/AGPR/SGPR/LDS/scratch use and the lowest occupancy
//! (waves per SIMD, computed from the objects' metadata as the compiler computes it),
//! `--report --kernels` the same per kernel;
//! `--arch A,B` and `--module M,N` restrict a build; `--out DIR` writes uncompressed objects
//! named `<module>.<arch>.co` to DIR instead (for `CANDLE_ROCM_KERNELS_DIR`).
//!
//! Modules: `sources` (where the sources are, and the hash of what an object depends on),
//! `toolchain` (the compiler and device libraries), `compile` (the flags and one compile),
//! `build` (every (module, target) in parallel, `--verify`), `manifest` (the committed
//! manifest and embedding table, `--check`), `occupancy` (waves per SIMD from a kernel's
//! metadata) and `report` (`--report`).

mod build;
mod compile;
mod manifest;
mod occupancy;
mod report;
mod sources;
mod toolchain;

use anyhow::Result;
use candle_rocm_kernels::{GENERIC_TARGETS, TARGETS};

use crate::flags::Kernels;
use crate::project_root;
pub use sources::candle_sources;

/// The candle-kernels release whose sources are compiled; must match candle-core's version.
pub const CANDLE_KERNELS_VERSION: &str = "0.11.1";

/// Every target objects are built for: exact processors, then generic families.
pub fn all_targets() -> Vec<&'static str> {
    TARGETS.iter().chain(GENERIC_TARGETS).copied().collect()
}

/// Runs the command.
pub fn run(opts: &Kernels) -> Result<()> {
    let root = project_root();
    if opts.check {
        return manifest::check(&root);
    }
    if opts.report {
        return report::report(&root, opts.per_kernel);
    }
    build::build(&root, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candle_kernels_version_matches_candle_core() {
        let lock = std::fs::read_to_string(project_root().join("Cargo.lock")).unwrap();
        let pos = lock
            .find("name = \"candle-core\"")
            .expect("candle-core in Cargo.lock");
        let version = lock[pos..].lines().nth(1).unwrap_or_default();
        assert_eq!(version, format!("version = \"{CANDLE_KERNELS_VERSION}\""));
    }
}
