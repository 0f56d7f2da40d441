//! The inputs of `cargo xtask candle`: the candle-core version locked in `Cargo.lock`, the
//! crates' pristine sources in the cargo registry (fetched when missing) and our patch files.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use super::tree::write_file;
use super::{CRATES, PATCHES_DIR};

/// The version of `name` locked in a `Cargo.lock`, if it has exactly one.
pub(super) fn locked_version(lock: &str, name: &str) -> Result<Option<String>> {
    let wanted = format!("name = \"{name}\"");
    let versions: Vec<String> = lock
        .split("[[package]]")
        .filter(|block| block.lines().any(|l| l.trim() == wanted))
        .filter_map(|block| {
            block.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("version = \"")
                    .and_then(|v| v.strip_suffix('"'))
                    .map(str::to_string)
            })
        })
        .collect();
    match versions.as_slice() {
        [] => Ok(None),
        [v] => Ok(Some(v.clone())),
        many => bail!("Cargo.lock has several {name} versions: {many:?}"),
    }
}

/// `$CARGO_HOME`, or `~/.cargo`.
fn cargo_home() -> Result<PathBuf> {
    match std::env::var_os("CARGO_HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h)),
        None => Ok(PathBuf::from(
            std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?,
        )
        .join(".cargo")),
    }
}

/// `registry/src/*/<name>-<version>` in the cargo home, if some registry has it.
pub(super) fn registry_crate(name: &str, version: &str) -> Result<Option<PathBuf>> {
    let src = cargo_home()?.join("registry/src");
    let Ok(entries) = std::fs::read_dir(&src) else {
        return Ok(None);
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path().join(format!("{name}-{version}")))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    found.sort();
    Ok(found.into_iter().next())
}

/// The registry directories of [`CRATES`] at `version`, fetching them (through a throw-away
/// project under `target/xtask/`) when one is missing.
pub(super) fn crate_sources(root: &Path, version: &str) -> Result<Vec<PathBuf>> {
    let lookup = || -> Result<Vec<Option<PathBuf>>> {
        CRATES
            .iter()
            .map(|name| registry_crate(name, version))
            .collect()
    };
    let found = lookup()?;
    if found.iter().all(Option::is_some) {
        return Ok(found.into_iter().flatten().collect());
    }
    let dir = root.join(format!("target/xtask/fetch-candle-{version}"));
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let deps: String = CRATES
        .iter()
        .map(|name| format!("{name} = \"={version}\"\n"))
        .collect();
    write_file(
        &dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-candle\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[workspace]\n\n[dependencies]\n{deps}"
        )
        .as_bytes(),
    )?;
    write_file(&dir.join("src/lib.rs"), b"")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["fetch", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .status()
        .with_context(|| format!("running `{cargo} fetch` for the candle crates"))?;
    if !status.success() {
        bail!(
            "`cargo fetch` of {} {version} failed; check the network or fetch them yourself \
             (any project depending on them at \"={version}\")",
            CRATES.join(", ")
        );
    }
    let found = lookup()?;
    let missing: Vec<&str> = CRATES
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} {version} not in {} after `cargo fetch`; is CARGO_HOME the one cargo uses? \
             Fetch them into the registry (a project depending on them, `cargo fetch`) and rerun",
            missing.join(" and "),
            cargo_home()?.join("registry/src").display()
        );
    }
    Ok(found.into_iter().flatten().collect())
}

/// `patches/<name>/*.patch` under `root`, in file-name order; none when the folder is absent.
pub(super) fn patch_files(root: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let dir = root.join(PATCHES_DIR).join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries {
        let p = e
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if p.is_file() && p.extension().is_some_and(|x| x == "patch") {
            out.push(p);
        }
    }
    out.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(out)
}
