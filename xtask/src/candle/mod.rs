//! `cargo xtask candle [--check]`: materialises the patched candle crates and Candle's own
//! test suite for our device.
//!
//! Inputs: the candle-core version locked in `Cargo.lock` (candle-nn and candle-transformers are
//! released in lockstep), the pristine `candle-core-<ver>`, `candle-nn-<ver>` and
//! `candle-transformers-<ver>` sources in the cargo registry (fetched through a throw-away
//! project in `target/xtask/` when missing), and our patches
//! `patches/<crate>/*.patch` (unified diffs with `a/` and `b/` prefixes, paths relative to the
//! crate root, as `git diff --no-index` or `diff -ruN` write them), applied in file-name order.
//! A patch whose context does not match exactly is an error.
//!
//! Outputs, both git-ignored and regenerated as a whole:
//! - `.candle/<crate>/`: each crate copied from the registry, patched (candle-core and candle-nn:
//!   the backend slot; candle-transformers: its `flash-attn` feature without Candle's `cuda`,
//!   for the `flash-attn/` stand-in of candle-flash-attn), with an own `[workspace]`
//!   appended to its `Cargo.toml` (so cargo does not look for an enclosing workspace), plus
//!   `.candle/STAMP` (versions and patch hashes, for humans).
//! - `tests/candle-suite/`: candle-core's `tests/*.rs` and their data files, each test file with
//!   candle's `test_device!` import replaced by a local macro that runs the test on the CPU
//!   (`<name>_cpu`), on the first ROCm device (`<name>::rocm`, ignored without a HIP device) and
//!   on `candle_ext_cpu`'s device (`<name>::ext_cpu`: candle's CPU backend behind the backend
//!   slot, so the slot's code paths run in CI).
//!   Files gated on a backend feature as a whole (`#![cfg(feature = "cutile")]`) are left out.
//!
//! Everything is built in a staging directory under `target/xtask/` and then moved into place,
//! so an interrupted run never leaves a half-patched tree. `--check` regenerates into a staging
//! directory and compares it byte for byte with the trees in place (ignoring `target/` and
//! `Cargo.lock` at a crate root), naming the first file that differs.
//!
//! Modules: `sources` (the lock file, the registry, the patch files), `patch` (applying the
//! unified diffs), `test_file` (rewriting one of candle-core's test files), `suite` (the
//! `candle-suite` crate) and `tree` (staging, comparing and moving the output trees).

mod patch;
mod sources;
mod suite;
mod test_file;
mod tree;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::project_root;
use patch::apply_patch_to_dir;
use sources::{crate_sources, locked_version, patch_files};
use suite::write_suite;
use tree::{copy_dir, replace_dir, tree_files, write_file, Staging};

/// The crates materialised into `.candle/`, in this order; the first one's version is locked.
pub const CRATES: [&str; 3] = ["candle-core", "candle-nn", "candle-transformers"];

/// Our stand-in for candle-flash-attn (relative to the project root), printed with the
/// `[patch.crates-io]` lines: the patched candle-transformers' `flash-attn` feature needs it.
const FLASH_ATTN: (&str, &str) = ("candle-flash-attn", "flash-attn");

/// The patched crates, relative to the project root.
const CANDLE_DIR: &str = ".candle";
/// The generated test crate, relative to the project root.
const SUITE_DIR: &str = "tests/candle-suite";
/// Our patches, relative to the project root: `patches/<crate>/*.patch`.
const PATCHES_DIR: &str = "patches";
/// What a stale or missing output tells the user to run.
const RERUN: &str = "run `cargo xtask candle`";

/// Runs the command: regenerates the outputs under the project root, or with `check` only
/// verifies that they are up to date.
pub fn run(check: bool) -> Result<()> {
    let root = project_root();
    if check {
        let summary = check_root(&root)?;
        println!(
            "candle: {CANDLE_DIR}/ and {SUITE_DIR}/ are up to date (candle-core {}, {} patches)",
            summary.version, summary.patches
        );
        return Ok(());
    }
    let summary = generate(&root)?;
    print_summary(&root, &summary);
    Ok(())
}

/// What a generation produced, for the messages.
#[derive(Debug)]
pub struct Summary {
    /// The candle-core (and candle-nn, candle-transformers) version.
    pub version: String,
    /// How many patch files were applied.
    pub patches: usize,
    /// The candle-core test files copied into the suite.
    pub tests: Vec<String>,
    /// The candle-core test files left out, each with the reason.
    pub excluded: Vec<(String, String)>,
}

/// Prints what [`generate`] wrote and how to use the patched crates elsewhere.
fn print_summary(root: &Path, s: &Summary) {
    println!(
        "candle: wrote {CANDLE_DIR}/ ({} {}, {} patches) and {SUITE_DIR}/ \
         ({} test files)",
        CRATES.join(", "),
        s.version,
        s.patches,
        s.tests.len()
    );
    for (file, why) in &s.excluded {
        println!("  left out tests/{file}: {why}");
    }
    println!("\nTo use the patched crates in another project, add to its Cargo.toml:\n");
    println!("[patch.crates-io]");
    let (fa_name, fa_dir) = FLASH_ATTN;
    let paths = CRATES
        .iter()
        .map(|name| (*name, root.join(CANDLE_DIR).join(name)))
        .chain([(fa_name, root.join(fa_dir))]);
    for (name, path) in paths {
        println!(
            "{name} = {{ path = \"{}\" }}",
            toml_escape(&path.to_string_lossy())
        );
    }
    println!(
        "\nand enable candle-rocm's `candle` feature: candle-rocm = {{ version = \"...\", \
         features = [\"candle\"] }}"
    );
}

/// `s` escaped for a TOML basic string.
fn toml_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

// ---------------------------------------------------------------------------------------------
// Generate and check

/// Regenerates `.candle/` and `tests/candle-suite/` under `root` (a project root: it holds
/// `Cargo.lock` and optionally `patches/`), replacing what is there.
pub fn generate(root: &Path) -> Result<Summary> {
    let stage = Staging::new(root, "stage")?;
    let summary = build(root, &stage.0)?;
    for rel in [CANDLE_DIR, SUITE_DIR] {
        replace_dir(
            &stage.0.join(rel),
            &root.join(rel),
            &stage.0.join("old").join(rel),
        )?;
    }
    Ok(summary)
}

/// Regenerates into a staging directory and compares with the trees under `root`; fails
/// naming the first file that is stale, missing or not generated.
pub fn check_root(root: &Path) -> Result<Summary> {
    let stage = Staging::new(root, "check")?;
    let summary = build(root, &stage.0)?;
    let expected = tree_files(&stage.0)?;
    let actual = tree_files(root)?;
    let mut problems = Vec::new();
    for rel in expected
        .keys()
        .chain(actual.keys())
        .collect::<BTreeSet<_>>()
    {
        match (expected.get(rel), actual.get(rel)) {
            (Some(_), None) => problems.push(format!("{rel} is missing")),
            (None, Some(_)) => problems.push(format!("{rel} is not generated (stray file)")),
            (Some(e), Some(a)) => {
                let same = std::fs::read(e).with_context(|| format!("reading {}", e.display()))?
                    == std::fs::read(a).with_context(|| format!("reading {}", a.display()))?;
                if !same {
                    problems.push(format!("{rel} is stale"));
                }
            }
            (None, None) => {}
        }
    }
    if let Some(first) = problems.first() {
        let more = match problems.len() {
            1 => String::new(),
            n => format!(" ({} more files differ)", n - 1),
        };
        bail!("{first}{more}: {RERUN}");
    }
    Ok(summary)
}

/// Builds both outputs into `out` (as `out/.candle/` and `out/tests/candle-suite/`) from the
/// registry sources and `root`'s lock file and patches.
fn build(root: &Path, out: &Path) -> Result<Summary> {
    let lock_path = root.join("Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .with_context(|| format!("reading {}", lock_path.display()))?;
    let version = locked_version(&lock, CRATES[0])?
        .ok_or_else(|| anyhow!("{} has no {} package", lock_path.display(), CRATES[0]))?;
    for name in &CRATES[1..] {
        if let Some(v) = locked_version(&lock, name)? {
            if v != version {
                bail!(
                    "{} locks {name} {v} but {} {version}; they are released in lockstep",
                    lock_path.display(),
                    CRATES[0]
                );
            }
        }
    }
    let sources = crate_sources(root, &version)?;

    let candle = out.join(CANDLE_DIR);
    let mut stamp = String::from(
        "# Written by `cargo xtask candle`, for humans; nothing reads this file.\n\
         # The crates below are the crates.io releases with these patches applied, in order.\n",
    );
    let mut patch_count = 0;
    for (name, src) in CRATES.iter().zip(&sources) {
        let dest = candle.join(name);
        copy_dir(src, &dest)?;
        writeln!(stamp, "{name} {version}")?;
        let patches = patch_files(root, name)?;
        if patches.is_empty() {
            writeln!(stamp, "  (no patches)")?;
        }
        for patch in patches {
            let rel = format!(
                "{PATCHES_DIR}/{name}/{}",
                patch.file_name().unwrap_or_default().to_string_lossy()
            );
            let bytes =
                std::fs::read(&patch).with_context(|| format!("reading {}", patch.display()))?;
            let text =
                String::from_utf8(bytes.clone()).map_err(|_| anyhow!("{rel} is not UTF-8 text"))?;
            apply_patch_to_dir(&dest, &text).with_context(|| format!("applying {rel}"))?;
            writeln!(stamp, "  {rel} sha256:{:x}", Sha256::digest(&bytes))?;
            patch_count += 1;
        }
        let manifest = dest.join("Cargo.toml");
        let mut toml = std::fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        toml.push_str(
            "\n# Added by `cargo xtask candle`: this copy is a workspace of its own.\n[workspace]\n",
        );
        write_file(&manifest, toml.as_bytes())?;
    }
    write_file(&candle.join("STAMP"), stamp.as_bytes())?;

    let (tests, excluded) = write_suite(&sources[0], &out.join(SUITE_DIR), &version)?;
    Ok(Summary {
        version,
        patches: patch_count,
        tests,
        excluded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candle::sources::registry_crate;

    /// Generates into a scratch project root (this workspace's `Cargo.lock` and a small patch),
    /// checks it, tampers with it, and regenerates. Needs the crates of [`CRATES`] in the cargo
    /// registry (fetched when missing).
    #[test]
    fn generate_then_check_in_a_scratch_root() {
        let root = project_root().join(format!("target/xtask/test-candle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::copy(project_root().join("Cargo.lock"), root.join("Cargo.lock")).unwrap();
        // A patch against candle-core's README (written for 0.11.1; left out if it differs).
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
        let version = locked_version(&lock, "candle-core").unwrap().unwrap();
        let readme = registry_crate("candle-core", &version)
            .unwrap()
            .and_then(|c| std::fs::read_to_string(c.join("README.md")).ok());
        let patched = readme.as_deref() == Some("# candle\nMinimalist ML framework for Rust\n");
        if patched {
            let patch = "--- a/README.md\n+++ b/README.md\n@@ -1,2 +1,3 @@\n # candle\n \
                         Minimalist ML framework for Rust\n+Patched.\n";
            write_file(
                &root.join("patches/candle-core/0001-readme.patch"),
                patch.as_bytes(),
            )
            .unwrap();
        }

        let summary = generate(&root).unwrap();
        assert!(root.join(".candle/candle-core/src/lib.rs").is_file());
        assert!(root.join(".candle/candle-nn/src/lib.rs").is_file());
        assert!(root
            .join(".candle/candle-transformers/src/lib.rs")
            .is_file());
        let toml = std::fs::read_to_string(root.join(".candle/candle-core/Cargo.toml")).unwrap();
        assert!(toml.ends_with("\n[workspace]\n"));
        assert!(root
            .join("tests/candle-suite/tests/suite/tensor_tests.rs")
            .is_file());
        assert!(root.join("tests/candle-suite/tests/test.npy").is_file());
        assert!(!summary.tests.is_empty());
        if patched {
            let readme = std::fs::read_to_string(root.join(".candle/candle-core/README.md"));
            assert!(readme.unwrap().ends_with("Rust\nPatched.\n"));
            let stamp = std::fs::read_to_string(root.join(".candle/STAMP")).unwrap();
            assert!(stamp.contains("patches/candle-core/0001-readme.patch sha256:"));
        }
        check_root(&root).unwrap();

        // A build directory and a lock file are ignored, a changed or stray file is not.
        write_file(&root.join(".candle/candle-core/target/x"), b"x").unwrap();
        check_root(&root).unwrap();
        let lib = root.join(".candle/candle-core/src/lib.rs");
        let original = std::fs::read(&lib).unwrap();
        std::fs::write(&lib, b"// changed\n").unwrap();
        let err = check_root(&root).unwrap_err().to_string();
        assert!(
            err.contains(".candle/candle-core/src/lib.rs is stale"),
            "{err}"
        );
        std::fs::write(&lib, &original).unwrap();
        check_root(&root).unwrap();
        std::fs::remove_file(root.join("tests/candle-suite/src/lib.rs")).unwrap();
        let err = check_root(&root).unwrap_err().to_string();
        assert!(
            err.contains("tests/candle-suite/src/lib.rs is missing"),
            "{err}"
        );

        // Regenerating restores the tree, keeps the build directory, and is idempotent.
        generate(&root).unwrap();
        assert!(root.join(".candle/candle-core/target/x").is_file());
        check_root(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
