//! `cargo xtask test [--no-setup | --setup-only] [-- ARGS]`: every test the README promises, in
//! one command.
//!
//! 0. the set-up (see `setup.rs`): the Debian packages, the kernel toolchain, rustfmt and
//!    clippy, installed when missing (as root or through `sudo -n`), else the command stops
//!    with the command line that installs them; `--no-setup` skips it, `--setup-only` stops
//!    after it;
//! 1. `cargo test --workspace` in the root workspace (rocm-sys, rocm-safe, kernels,
//!    candle-rocm, xtask);
//! 2. `cargo xtask candle` when `.candle/` or `tests/candle-suite/` is missing or stale;
//! 3. `cargo test --workspace` in the `tests/` workspace (Tensor-level tests and Candle's own
//!    suite on the patched candle-core).
//!
//! `ARGS` go to both test runs (e.g. `-- --include-ignored` on a machine with a GPU). Each run's
//! output, the test runner's summary included, goes straight to the terminal.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::flags::Test;
use crate::project_root;

/// Runs the set-up and the tests; `opts.args` are passed to libtest.
pub fn run(opts: &Test) -> Result<()> {
    let root = project_root();
    if !opts.no_setup {
        crate::setup::ensure(&root)?;
    }
    if opts.setup_only {
        return Ok(());
    }
    let args = &opts.args;
    cargo_test(&root, None, args)?;
    if let Err(why) = crate::candle::check_root(&root) {
        eprintln!("== regenerating the patched Candle ({why:#})");
        crate::candle::run(false)?;
    }
    cargo_test(&root, Some("tests/Cargo.toml"), args)
}

/// Runs `cargo test --workspace` in `root`, for `manifest` when given, with libtest `args`.
fn cargo_test(root: &Path, manifest: Option<&str>, args: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args(["test", "--workspace"]);
    if let Some(m) = manifest {
        cmd.args(["--manifest-path", m]);
    }
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    let what = format!(
        "cargo test --workspace{}",
        manifest
            .map(|m| format!(" --manifest-path {m}"))
            .unwrap_or_default()
    );
    eprintln!("== {what}");
    let status = cmd.status().with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
