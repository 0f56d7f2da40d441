//! `cargo xtask candle [--check]`: materialises the patched candle crates and Candle's own
//! test suite for our device.
//!
//! Inputs: the candle-core version locked in `Cargo.lock` (candle-nn is released in lockstep),
//! the pristine `candle-core-<ver>` and `candle-nn-<ver>` sources in the cargo registry (fetched
//! through a throw-away project in `target/xtask/` when missing), and our patches
//! `patches/<crate>/*.patch` (unified diffs with `a/` and `b/` prefixes, paths relative to the
//! crate root, as `git diff --no-index` or `diff -ruN` write them), applied in file-name order.
//! A patch whose context does not match exactly is an error.
//!
//! Outputs, both git-ignored and regenerated as a whole:
//! - `.candle/<crate>/`: each crate copied from the registry, patched, with an own `[workspace]`
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::project_root;

/// The crates materialised into `.candle/`, in this order; the first one's version is locked.
pub const CRATES: [&str; 2] = ["candle-core", "candle-nn"];

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
    /// The candle-core (and candle-nn) version.
    pub version: String,
    /// How many patch files were applied.
    pub patches: usize,
    /// The candle-core test files copied into the suite.
    pub tests: Vec<String>,
    /// The candle-core test files left out, each with the reason.
    pub excluded: Vec<(String, String)>,
}

fn print_summary(root: &Path, s: &Summary) {
    println!(
        "candle: wrote {CANDLE_DIR}/ (candle-core and candle-nn {}, {} patches) and {SUITE_DIR}/ \
         ({} test files)",
        s.version,
        s.patches,
        s.tests.len()
    );
    for (file, why) in &s.excluded {
        println!("  left out tests/{file}: {why}");
    }
    println!("\nTo use the patched crates in another project, add to its Cargo.toml:\n");
    println!("[patch.crates-io]");
    for name in CRATES {
        let path = root.join(CANDLE_DIR).join(name);
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

/// A directory under `target/xtask/` removed again when dropped.
struct Staging(PathBuf);

impl Staging {
    fn new(root: &Path, what: &str) -> Result<Staging> {
        let dir = root
            .join("target/xtask")
            .join(format!("candle-{what}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Staging(dir))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Best effort: a leftover only costs disk space under target/.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Moves the freshly built `new` to `dest`, moving a previous `dest` out of the way to `old`
/// first; build outputs (`target/`) of the previous crate directories are kept.
fn replace_dir(new: &Path, dest: &Path, old: &Path) -> Result<()> {
    if dest.exists() {
        if let Some(parent) = old.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(dest, old)
            .with_context(|| format!("moving {} to {}", dest.display(), old.display()))?;
        for krate in crate_dirs(old)? {
            let target = krate.join("target");
            let rel = krate.strip_prefix(old).unwrap_or(&krate);
            if target.is_dir() && new.join(rel).is_dir() {
                std::fs::rename(&target, new.join(rel).join("target"))
                    .with_context(|| format!("keeping {}", target.display()))?;
            }
        }
    } else if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(new, dest)
        .with_context(|| format!("moving {} to {}", new.display(), dest.display()))
}

/// The crate directories of an output tree: the tree itself when it holds a `Cargo.toml`
/// (the suite), else its subdirectories that do (`.candle/<crate>`).
fn crate_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.join("Cargo.toml").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries {
            let p = e?.path();
            if p.join("Cargo.toml").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every file of the two outputs under `base`, keyed by its path relative to `base` (with
/// `/` separators), leaving out `target/` and `Cargo.lock` at the root of each crate.
fn tree_files(base: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for rel in [CANDLE_DIR, SUITE_DIR] {
        let dir = base.join(rel);
        if !dir.is_dir() {
            continue;
        }
        let skip: BTreeSet<PathBuf> = crate_dirs(&dir)?
            .into_iter()
            .flat_map(|c| [c.join("target"), c.join("Cargo.lock")])
            .collect();
        let mut files = Vec::new();
        walk(&dir, &skip, &mut files)?;
        for f in files {
            let key = f
                .strip_prefix(base)
                .unwrap_or(&f)
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(key, f);
        }
    }
    Ok(out)
}

fn walk(dir: &Path, skip: &BTreeSet<PathBuf>, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let p = e.path();
        if skip.contains(&p) {
            continue;
        }
        if e.file_type()?.is_dir() {
            walk(&p, skip, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// Sources

/// The version of `name` locked in a `Cargo.lock`, if it has exactly one.
fn locked_version(lock: &str, name: &str) -> Result<Option<String>> {
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
fn registry_crate(name: &str, version: &str) -> Result<Option<PathBuf>> {
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
fn crate_sources(root: &Path, version: &str) -> Result<Vec<PathBuf>> {
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
            "`cargo fetch` of candle-core and candle-nn {version} failed; check the network or \
             fetch them yourself (any project depending on candle-nn = \"={version}\")"
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
fn patch_files(root: &Path, name: &str) -> Result<Vec<PathBuf>> {
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

/// Copies a directory tree, leaving out cargo's `.cargo-ok` extraction marker; copies are
/// writable by their owner.
fn copy_dir(src: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        let (from, to) = (e.path(), dest.join(e.file_name()));
        if e.file_name() == ".cargo-ok" {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_dir(&from, &to)?;
        } else {
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            make_writable(&to)?;
        }
    }
    Ok(())
}

fn make_writable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut perms = std::fs::metadata(path)?.permissions();
    if perms.mode() & 0o200 == 0 {
        perms.set_mode(perms.mode() | 0o200);
        std::fs::set_permissions(path, perms)
            .with_context(|| format!("making {} writable", path.display()))?;
    }
    Ok(())
}

fn write_file(path: &Path, contents: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Patches

/// One file's part of a multi-file unified diff.
#[derive(Debug)]
struct FilePatch {
    /// The original path relative to the crate root; `None` for a new file (`/dev/null`).
    old: Option<String>,
    /// The resulting path; `None` for a deleted file (`/dev/null`).
    new: Option<String>,
    /// The `---`/`+++` header and the hunks, as `diffy::Patch` parses them.
    text: String,
}

impl FilePatch {
    /// The file the patch changes.
    fn path(&self) -> &str {
        self.new
            .as_deref()
            .or(self.old.as_deref())
            .unwrap_or_default()
    }
}

/// Splits a multi-file unified diff into per-file patches, at `diff …` lines or at a
/// `---`/`+++` header pair outside a hunk. Hunk bodies are consumed by their line counts, so a
/// removed line that starts with `-- ` is not mistaken for a header. Preamble lines (`index`,
/// `new file mode`, …) are skipped; renames, copies and binary diffs are errors.
fn split_patch(text: &str) -> Result<Vec<FilePatch>> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = Vec::new();
    let mut cur: Option<(FilePatch, usize)> = None; // the patch and its hunk count
    let (mut old_left, mut new_left) = (0usize, 0usize);
    // The line of a `diff …` line whose `---`/`+++` header has not come yet.
    let mut pending_diff: Option<usize> = None;
    let headerless = |line: usize| {
        anyhow!(
            "the diff at line {line} has no `---`/`+++` header (a mode change, empty file, \
             rename or binary diff): unsupported"
        )
    };
    let finish = |cur: &mut Option<(FilePatch, usize)>, out: &mut Vec<FilePatch>| -> Result<()> {
        if let Some((fp, hunks)) = cur.take() {
            if hunks == 0 {
                bail!("the diff of {} has no hunks", fp.path());
            }
            out.push(fp);
        }
        Ok(())
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let n = i + 1;
        i += 1;
        if old_left > 0 || new_left > 0 {
            match line.as_bytes().first() {
                Some(b' ') => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                }
                Some(b'-') => old_left = old_left.saturating_sub(1),
                Some(b'+') => new_left = new_left.saturating_sub(1),
                Some(b'\\') => {}
                _ => bail!("line {n}: malformed hunk line {:?}", line.trim_end()),
            }
            if let Some((fp, _)) = cur.as_mut() {
                fp.text.push_str(line);
            }
            continue;
        }
        if line.starts_with('\\') {
            // "\ No newline at end of file" after a hunk's last line.
            match cur.as_mut() {
                Some((fp, h)) if *h > 0 => fp.text.push_str(line),
                _ => bail!("line {n}: stray {:?}", line.trim_end()),
            }
        } else if line.starts_with("diff ") {
            if let Some(at) = pending_diff {
                return Err(headerless(at));
            }
            finish(&mut cur, &mut out)?;
            pending_diff = Some(n);
        } else if line.starts_with("--- ")
            && lines.get(i).is_some_and(|next| next.starts_with("+++ "))
        {
            finish(&mut cur, &mut out)?;
            pending_diff = None;
            let plus = lines[i];
            i += 1;
            let fp = FilePatch {
                old: header_path(line, "--- ", "a/").with_context(|| format!("line {n}"))?,
                new: header_path(plus, "+++ ", "b/").with_context(|| format!("line {}", n + 1))?,
                text: format!("{line}{plus}"),
            };
            if fp.old.is_none() && fp.new.is_none() {
                bail!("line {n}: both sides are /dev/null");
            }
            cur = Some((fp, 0));
        } else if line.starts_with("@@ ") {
            let Some((fp, hunks)) = cur.as_mut() else {
                bail!("line {n}: hunk before a `---`/`+++` header");
            };
            (old_left, new_left) =
                hunk_counts(line).with_context(|| format!("line {n}: bad hunk header"))?;
            fp.text.push_str(line);
            *hunks += 1;
        } else if [
            "rename ",
            "copy ",
            "similarity ",
            "GIT binary patch",
            "Binary files ",
        ]
        .iter()
        .any(|p| line.starts_with(p))
        {
            bail!("line {n}: unsupported diff ({:?})", line.trim_end());
        }
        // Anything else is a preamble line: `index …`, `new file mode …`, `Only in …`.
    }
    if old_left > 0 || new_left > 0 {
        bail!("the patch ends inside a hunk");
    }
    if let Some(at) = pending_diff {
        return Err(headerless(at));
    }
    finish(&mut cur, &mut out)?;
    if out.is_empty() {
        bail!("no file diffs found");
    }
    Ok(out)
}

/// The path of a `--- a/…` or `+++ b/…` header without its prefix (and `diff -u`'s tab and
/// timestamp); `None` for `/dev/null`.
fn header_path(line: &str, marker: &str, prefix: &str) -> Result<Option<String>> {
    let rest = line
        .strip_prefix(marker)
        .unwrap_or(line)
        .trim_end_matches(['\n', '\r']);
    let path = rest.split('\t').next().unwrap_or(rest).trim_end();
    if path == "/dev/null" {
        return Ok(None);
    }
    let rel = path
        .strip_prefix(prefix)
        .ok_or_else(|| anyhow!("expected a path starting with `{prefix}`, got {path:?}"))?;
    let ok = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !ok || rel.starts_with('"') {
        bail!("unsupported path {path:?} (must be plain and relative to the crate root)");
    }
    Ok(Some(rel.to_string()))
}

/// The old and new line counts of a `@@ -a,b +c,d @@` header.
fn hunk_counts(line: &str) -> Result<(usize, usize)> {
    let mut parts = line.split_whitespace().skip(1);
    let mut count = |sign: char| -> Result<usize> {
        let r = parts
            .next()
            .and_then(|p| p.strip_prefix(sign))
            .ok_or_else(|| anyhow!("missing {sign} range"))?;
        Ok(match r.split_once(',') {
            Some((_, len)) => len.parse()?,
            None => 1,
        })
    };
    Ok((count('-')?, count('+')?))
}

/// Applies one file's patch to its original text (`None` for a new file), requiring every
/// hunk's context to match at exactly the line its header names. Returns the new text, or
/// `None` when the file is deleted.
fn apply_file_patch(base: Option<&str>, fp: &FilePatch) -> Result<Option<String>> {
    let base = match (base, &fp.old) {
        (Some(_), None) => bail!("creates {}, which already exists", fp.path()),
        (None, Some(old)) => bail!("changes {old}, which does not exist"),
        (b, _) => b.unwrap_or_default(),
    };
    let patch = diffy::Patch::from_str(&fp.text).map_err(|e| anyhow!("{}: {e}", fp.path()))?;
    let base_lines: Vec<&str> = base.split_inclusive('\n').collect();
    for (i, hunk) in patch.hunks().iter().enumerate() {
        let pre: Vec<&str> = hunk
            .lines()
            .iter()
            .filter_map(|l| match l {
                diffy::Line::Context(s) | diffy::Line::Delete(s) => Some(*s),
                diffy::Line::Insert(_) => None,
            })
            .collect();
        let range = hunk.old_range();
        // An empty old range names the line after which the hunk inserts.
        let start = if range.is_empty() {
            range.start()
        } else {
            range.start().saturating_sub(1)
        };
        if base_lines.get(start..start + pre.len()) != Some(pre.as_slice()) {
            bail!(
                "{}: hunk #{} (@@ -{},{} @@) does not apply: the file differs from its context",
                fp.path(),
                i + 1,
                range.start(),
                range.len()
            );
        }
    }
    let patched = diffy::apply(base, &patch).map_err(|e| anyhow!("{}: {e}", fp.path()))?;
    match &fp.new {
        None if !patched.is_empty() => bail!("deletes {} but leaves text behind", fp.path()),
        None => Ok(None),
        Some(_) => Ok(Some(patched)),
    }
}

/// Applies a multi-file patch to the crate copied to `dir`.
fn apply_patch_to_dir(dir: &Path, text: &str) -> Result<()> {
    for fp in split_patch(text)? {
        if let (Some(old), Some(new)) = (&fp.old, &fp.new) {
            if old != new {
                bail!("renames {old} to {new}; renames are not supported");
            }
        }
        let path = dir.join(fp.path());
        let base = match std::fs::read(&path) {
            Ok(bytes) => Some(
                String::from_utf8(bytes).map_err(|_| anyhow!("{} is not UTF-8 text", fp.path()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        match apply_file_patch(base.as_deref(), &fp)? {
            Some(t) => write_file(&path, t.as_bytes())?,
            None => std::fs::remove_file(&path)
                .with_context(|| format!("removing {}", path.display()))?,
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The test suite

/// The macro that replaces candle's `test_device!` in the copied tests. `Result` and `Device`
/// are the test file's own, as with candle's macro (some files use `anyhow::Result`).
const TEST_DEVICE_MACRO: &str = r#"macro_rules! test_device {
    ($fn_name: ident, $test_cpu: ident, $test_cuda: ident, $test_metal: ident) => {
        #[test]
        fn $test_cpu() -> Result<()> {
            $fn_name(&Device::Cpu)
        }

        mod $fn_name {
            #[test]
            #[ignore = "needs a HIP device"]
            fn rocm() -> super::Result<()> {
                let device = candle_rocm::device(0).map_err(candle_core::Error::wrap)?;
                super::$fn_name(&device)
            }

            #[test]
            fn ext_cpu() -> super::Result<()> {
                super::$fn_name(&candle_ext_cpu::ext_cpu_device())
            }
        }
    };
}
"#;

/// The macro for the files of [`Q8_NUMERICS`]: the CPU and the ROCm device in q8 mode, no
/// `ext_cpu` variant (candle's CPU behind the slot has the CPU's numerics, not CUDA's).
const TEST_DEVICE_MACRO_Q8: &str = r#"macro_rules! test_device {
    ($fn_name: ident, $test_cpu: ident, $test_cuda: ident, $test_metal: ident) => {
        #[test]
        fn $test_cpu() -> Result<()> {
            $fn_name(&Device::Cpu)
        }

        mod $fn_name {
            #[test]
            #[ignore = "needs a HIP device and CANDLE_ROCM_QMATVEC=q8"]
            fn rocm() -> super::Result<()> {
                if !candle_rocm::registry::qmatvec_q8() {
                    candle_core::bail!(
                        "this test expects Candle CUDA's 8-bit activations: run it with \
                         CANDLE_ROCM_QMATVEC=q8 (the default f32 activations give other, \
                         more exact products)"
                    );
                }
                let device = candle_rocm::device(0).map_err(candle_core::Error::wrap)?;
                super::$fn_name(&device)
            }
        }
    };
}
"#;

/// Test files whose device tests expect the numerics of Candle CUDA's quantized products, with
/// the reason. Their ROCm variants run in candle-rocm's q8 mode (`CANDLE_ROCM_QMATVEC=q8`,
/// activations rounded to q8_1 as Candle CUDA rounds them) and fail with that advice otherwise.
const Q8_NUMERICS: &[(&str, &str)] = &[(
    "quantized_tests.rs",
    "its device tests assert the exact products of Candle CUDA's kernels on 8-bit (q8_1) \
     activations: the ROCm variants run with CANDLE_ROCM_QMATVEC=q8 (Candle CUDA's rounding; \
     the default f32 activations are checked against the CPU by tests/tests/gpu/quantized.rs), \
     and there is no ext_cpu variant",
)];

/// The test files a suite got, and those left out (each with the reason).
type SuiteFiles = (Vec<String>, Vec<(String, String)>);

/// Writes the `candle-suite` crate to `dest` from candle-core's sources at `core`.
fn write_suite(core: &Path, dest: &Path, version: &str) -> Result<SuiteFiles> {
    let tests_dir = core.join("tests");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&tests_dir)
        .with_context(|| format!("reading {}", tests_dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    let (mut copied, mut excluded, mut sources) = (Vec::new(), Vec::new(), Vec::new());
    for path in entries {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            bail!(
                "{} is a directory; `cargo xtask candle` only knows flat test folders",
                path.display()
            );
        }
        if path.extension().is_none_or(|x| x != "rs") {
            let to = dest.join("tests").join(&name);
            // Data files the tests open by relative path (`tests/test.npy`).
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            write_file(&to, &bytes)?;
            continue;
        }
        let src = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        match rewrite_test_file(&name, &src, version)
            .with_context(|| format!("rewriting candle-core {version}'s tests/{name}"))?
        {
            Rewritten::Excluded(why) => excluded.push((name, why)),
            Rewritten::Text(text) => {
                // One test binary (`tests/suite.rs`) with a module per file keeps the device
                // bundle small: each binary links all of candle-core and candle-rocm.
                write_file(&dest.join("tests/suite").join(&name), text.as_bytes())?;
                sources.push(src);
                copied.push(name);
            }
        }
    }

    let mut main = format!(
        "// Generated by `cargo xtask candle` from candle-core {version}'s tests; do not edit.\n\
         //! candle-core {version}'s own tests, one module per file of its `tests/` folder.\n"
    );
    for name in &copied {
        let stem = name.trim_end_matches(".rs");
        writeln!(main, "#[path = \"suite/{name}\"]\nmod {stem};")?;
    }
    write_file(&dest.join("tests/suite.rs"), main.as_bytes())?;

    let manifest_path = core.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    write_file(
        &dest.join("Cargo.toml"),
        suite_manifest(&manifest, &sources, version)?.as_bytes(),
    )?;

    let mut lib = format!(
        "//! candle-core {version}'s own tests (`tests/*.rs`), run on the CPU and on the first \
         ROCm\n//! device.\n//!\n\
         //! Generated by `cargo xtask candle`; do not edit: rerun the command. Each test \
         `foo`\n//! that candle runs per device comes out as `foo_cpu`, `foo::rocm` (ignored \
         without a HIP\n//! device; run with `--include-ignored`) and `foo::ext_cpu` (candle's \
         CPU backend behind\n//! the backend slot, `candle_ext_cpu`: the slot's code paths, \
         in CI).\n"
    );
    lib.push_str(
        "//!\n//! ROCm variants only with `CANDLE_ROCM_QMATVEC=q8`, no ext-cpu variants:\n",
    );
    for (file, why) in Q8_NUMERICS {
        writeln!(lib, "//! - `{file}`: {why}")?;
    }
    if !excluded.is_empty() {
        lib.push_str("//!\n//! Left out:\n");
        for (file, why) in &excluded {
            writeln!(lib, "//! - `{file}`: {why}")?;
        }
    }
    write_file(&dest.join("src/lib.rs"), lib.as_bytes())?;
    Ok((copied, excluded))
}

/// The suite's `Cargo.toml`: candle-core, candle-rocm, and the dependencies of candle-core the
/// tests name (as `crate::…` paths), with candle-core's own version requirements.
fn suite_manifest(core_manifest: &str, sources: &[String], version: &str) -> Result<String> {
    let mut toml = format!(
        "# Generated by `cargo xtask candle` from candle-core {version}; do not edit.\n\
         [package]\n\
         name = \"candle-suite\"\n\
         description = \"candle-core's own test suite, run on the CPU and on a ROCm device\"\n\
         version = \"0.0.0\"\n\
         edition = \"2021\"\n\
         publish = false\n\n\
         [dependencies]\n\
         candle-core = \"{version}\"\n\
         candle-rocm = {{ path = \"../../candle-rocm\", default-features = false, features = \
         [\"candle\"] }}\n\
         # candle's CPU backend behind the slot (`foo::ext_cpu`: the slot's paths in CI).\n\
         candle-ext-cpu = {{ path = \"../ext-cpu\" }}\n\n\
         [features]\n\
         default = [\"embed-kernels\"]\n\
         # The embedded AMD code objects (off in `cargo xtask device-bundle`).\n\
         embed-kernels = [\"candle-rocm/embed-kernels\"]\n"
    );
    let deps = dependency_tables(core_manifest);
    let mut first = true;
    for (name, body) in &deps {
        if name.starts_with("candle-") {
            continue;
        }
        let ident = name.replace('-', "_");
        if !sources.iter().any(|s| names_crate(s, &ident)) {
            continue;
        }
        if first {
            toml.push_str("\n# As candle-core's Cargo.toml requires them.\n");
            first = false;
        }
        writeln!(toml, "[dev-dependencies.{name}]\n{body}")?;
    }
    let features: BTreeSet<String> = sources.iter().flat_map(|s| cfg_features(s)).collect();
    if !features.is_empty() {
        let list = features
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(", ");
        if first {
            toml.push('\n');
        }
        writeln!(
            toml,
            "[lints.rust]\n# candle's tests gate some items on its backend features, which this \
             crate does not have.\nunexpected_cfgs = {{ level = \"warn\", check-cfg = \
             ['cfg(feature, values({list}))'] }}"
        )?;
    }
    Ok(toml)
}

/// The `[dependencies.<name>]` and `[dev-dependencies.<name>]` tables of a normalized
/// (registry) `Cargo.toml`, by name; a dev-dependency's table wins. Optional dependencies are
/// left out: only candle's backend features (cuda, metal, ...) use them, and the suite has
/// none (a test naming `cudarc::` is `#[cfg(feature = "cuda")]`).
fn dependency_tables(manifest: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut dev_names = BTreeSet::new();
    let mut current: Option<(String, bool, String)> = None;
    let mut flush = |cur: &mut Option<(String, bool, String)>| {
        if let Some((name, dev, body)) = cur.take() {
            let optional = body.lines().any(|l| l.trim() == "optional = true");
            if !optional && (dev || !dev_names.contains(&name)) {
                if dev {
                    dev_names.insert(name.clone());
                }
                out.insert(name, body);
            }
        }
    };
    for line in manifest.lines() {
        if line.starts_with('[') {
            flush(&mut current);
            let header = line.trim().trim_start_matches('[').trim_end_matches(']');
            current = if let Some(n) = header.strip_prefix("dependencies.") {
                Some((n.to_string(), false, String::new()))
            } else {
                header
                    .strip_prefix("dev-dependencies.")
                    .map(|n| (n.to_string(), true, String::new()))
            };
        } else if let Some((_, _, body)) = current.as_mut() {
            if !line.trim().is_empty() {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    flush(&mut current);
    out
}

/// Whether `src` names the crate `ident` as a path root (`ident::…`, not `x::ident::…`).
fn names_crate(src: &str, ident: &str) -> bool {
    let pat = format!("{ident}::");
    src.match_indices(&pat).any(|(i, _)| {
        !src[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// The feature names in `feature = "…"` conditions of `src`.
fn cfg_features(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in src.match_indices("feature") {
        let rest = src[i + "feature".len()..].trim_start();
        let Some(rest) = rest.strip_prefix('=') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix('"') else {
            continue;
        };
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

/// A test file after [`rewrite_test_file`].
#[derive(Debug, PartialEq)]
enum Rewritten {
    /// The file to write.
    Text(String),
    /// The file is left out, for this reason.
    Excluded(String),
}

/// Rewrites one of candle-core's test files for the suite: drops the `test_device` import,
/// adds a generated-file header and, when the file uses `test_device!`, the local macro after
/// the inner attributes. Files gated as a whole on a feature are excluded. Anything not
/// recognised is an error, never a silently broken file.
fn rewrite_test_file(file: &str, src: &str, version: &str) -> Result<Rewritten> {
    // The inner attributes and doc comments at the top, which must stay first.
    let mut prologue_end = 0;
    let mut offset = 0;
    let mut lines = src.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("#![") {
            let mut attr = line.to_string();
            let depth = |s: &str| s.matches('[').count() as isize - s.matches(']').count() as isize;
            let mut len = line.len();
            while depth(&attr) > 0 {
                let next = lines
                    .next()
                    .ok_or_else(|| anyhow!("unterminated inner attribute"))?;
                attr.push_str(next);
                len += next.len();
            }
            let compact: String = attr.split_whitespace().collect();
            if compact.starts_with("#![cfg") {
                let feature = compact
                    .strip_prefix("#![cfg(feature=\"")
                    .and_then(|r| r.strip_suffix("\")]"))
                    .filter(|f| !f.contains('"'));
                return match feature {
                    Some(f) => Ok(Rewritten::Excluded(format!(
                        "`#![cfg(feature = \"{f}\")]`: only for candle's {f} backend"
                    ))),
                    None => bail!("unrecognised crate-level cfg `{}`", attr.trim()),
                };
            }
            offset += len;
            prologue_end = offset;
            continue;
        }
        if t.starts_with("/*") {
            bail!("block comments before the first item are not supported");
        }
        offset += line.len();
        if t.starts_with("//!") {
            prologue_end = offset;
        } else if !(t.is_empty() || t.starts_with("//")) {
            break;
        }
    }

    let body = remove_test_device_import(&src[prologue_end..])?;
    let q8 = Q8_NUMERICS.iter().any(|(f, _)| *f == file);
    let body = adapt_to_module(&body);
    let invocations = check_test_device_uses(&body)?;
    let mut out = format!(
        "// Generated by `cargo xtask candle` from candle-core {version}'s tests/{file}; do not \
         edit.\n"
    );
    if invocations > 0 {
        out.push_str(
            "// Changed: `test_device!` is the local macro below, which runs each test on the \
             CPU\n// (`<name>_cpu`), on the first ROCm device (`<name>::rocm`, ignored \
             without a HIP device)\n// and on candle's CPU behind the backend slot \
             (`<name>::ext_cpu`).\n",
        );
    }
    out.push_str(
        "// Changed: a module of tests/suite.rs (`crate::` is `self::`); a `match` on `Device` \
         treats\n// `Device::Ext` (the ROCm device) like `Device::Cuda`.\n",
    );
    if q8 {
        out.push_str(
            "// Changed: the ROCm variants need CANDLE_ROCM_QMATVEC=q8 (Candle CUDA's 8-bit \
             activations)\n// and there are no ext_cpu variants.\n",
        );
    }
    let head = &src[..prologue_end];
    out.push_str(head);
    if invocations > 0 {
        if !head.is_empty() {
            if !head.ends_with('\n') {
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str(if q8 {
            TEST_DEVICE_MACRO_Q8
        } else {
            TEST_DEVICE_MACRO
        });
        if !body.starts_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&body);
    Ok(Rewritten::Text(out))
}

/// What the suite changes besides `test_device!`, each noted in the file's header:
/// - the file becomes a module of `tests/suite.rs`, so its `crate::` paths (which name its own
///   imports) become `self::`;
/// - an exhaustive `match` on `Device` gets the `Ext` variant of the backend slot, with the
///   expectations of the other GPU backend (`Device::Cuda(_) | Device::Ext(_) =>`). Calls of
///   `is_cuda()` stay as they are: `Device::Ext` is not CUDA there.
fn adapt_to_module(body: &str) -> String {
    body.replace("crate::", "self::")
        .replace("Device::Cuda(_) =>", "Device::Cuda(_) | Device::Ext(_) =>")
}

/// Byte offsets of `ident` in `s` as a whole identifier.
fn ident_positions(s: &str, ident: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    s.match_indices(ident)
        .filter(|(i, _)| {
            !s[..*i].chars().next_back().is_some_and(is_ident)
                && !s[i + ident.len()..].chars().next().is_some_and(is_ident)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether byte offset `i` of `s` lies in a `//` comment.
fn in_line_comment(s: &str, i: usize) -> bool {
    let line_start = s[..i].rfind('\n').map_or(0, |p| p + 1);
    s[line_start..i].contains("//")
}

/// Removes `test_device` from the `use` statements of candle-core (or an alias of it,
/// `use candle_core as candle;`) that import it.
fn remove_test_device_import(src: &str) -> Result<String> {
    let mut roots = vec!["candle_core".to_string()];
    for line in src.lines() {
        if let Some(alias) = line
            .trim()
            .strip_prefix("use candle_core as ")
            .and_then(|r| r.strip_suffix(';'))
        {
            roots.push(alias.trim().to_string());
        }
    }
    let mut out = src.to_string();
    // Statements are edited from the last one back, so earlier offsets stay valid.
    let mut stmts = Vec::new();
    let mut line_start = 0;
    for line in src.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with("use ") || t.starts_with("pub use ") {
            let semi = src[line_start..]
                .find(';')
                .ok_or_else(|| anyhow!("unterminated `use`"))?;
            let end = line_start + semi + 1;
            let stmt = &src[line_start..end];
            if !ident_positions(stmt, "test_device").is_empty() {
                stmts.push((line_start, end));
            }
        }
        line_start += line.len();
    }
    for (start, end) in stmts.into_iter().rev() {
        let stmt = &src[start..end];
        let replacement = rewrite_use(stmt, &roots).ok_or_else(|| {
            anyhow!(
                "`test_device` is imported in a form `cargo xtask candle` does not know: {:?}",
                stmt.trim()
            )
        })?;
        match replacement {
            Some(new) => out.replace_range(start..end, &new),
            None => {
                // The whole statement goes, with its line break.
                let end = if out[end..].starts_with('\n') {
                    end + 1
                } else {
                    end
                };
                out.replace_range(start..end, "");
            }
        }
    }
    Ok(out)
}

/// `stmt` (a whole `use …;`, indentation included) without `test_device`: `Some(None)` when
/// nothing is left of it, `None` when the form is not recognised.
fn rewrite_use(stmt: &str, roots: &[String]) -> Option<Option<String>> {
    let body = stmt.trim_start();
    let rest = body
        .strip_prefix("pub use ")
        .or_else(|| body.strip_prefix("use "))?;
    let compact: String = rest.split_whitespace().collect();
    let root = roots
        .iter()
        .find(|r| compact.starts_with(&format!("{r}::")))?;
    if compact == format!("{root}::test_device;") {
        return Some(None);
    }
    if !compact.starts_with(&format!("{root}::{{")) || !compact.ends_with("};") {
        return None;
    }
    let open = stmt.find('{')?;
    let close = stmt.rfind('}')?;
    // The top-level elements of the braces, as trimmed ranges of `stmt`.
    let mut elems = Vec::new();
    let (mut depth, mut from) = (0usize, open + 1);
    for (i, c) in stmt[open + 1..close]
        .char_indices()
        .map(|(i, c)| (open + 1 + i, c))
    {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                elems.push((from, i));
                from = i + 1;
            }
            _ => {}
        }
    }
    elems.push((from, close));
    let trimmed = |(a, b): (usize, usize)| {
        let s = &stmt[a..b];
        let lead = s.len() - s.trim_start().len();
        (a + lead, a + lead + s.trim().len())
    };
    let elems: Vec<(usize, usize)> = elems
        .into_iter()
        .map(trimmed)
        .filter(|(a, b)| a < b)
        .collect();
    let (s, e) = *elems.iter().find(|(a, b)| &stmt[*a..*b] == "test_device")?;
    if elems.len() == 1 {
        return Some(None);
    }
    let (mut start, mut end) = (s, e);
    if stmt[e..].starts_with(',') {
        let after = &stmt[e + 1..];
        end = e + 1 + (after.len() - after.trim_start_matches([' ', '\t']).len());
        let line_start = stmt[..s].rfind('\n').map_or(0, |p| p + 1);
        if stmt[line_start..s].trim().is_empty() && stmt[end..].starts_with('\n') {
            // The element has a line of its own.
            start = line_start;
            end += 1;
        }
    } else {
        // The last element: remove the comma before it.
        start = stmt[..s].rfind(',')?;
    }
    let mut new = stmt.to_string();
    new.replace_range(start..end, "");
    Some(Some(new))
}

/// Checks that what is left of `test_device` in `src` are `test_device!(a, b, c, d)`
/// invocations of the local macro (four identifiers, as candle's macro takes), and counts them.
fn check_test_device_uses(src: &str) -> Result<usize> {
    let mut count = 0;
    for i in ident_positions(src, "test_device") {
        if in_line_comment(src, i) {
            continue;
        }
        let line = src[..i].matches('\n').count() + 1;
        if src[..i].ends_with("::") {
            bail!("line {line}: `test_device` is used by path; only `test_device!` is supported");
        }
        if src[..i].trim_end().ends_with("macro_rules!") {
            bail!("line {line}: the file defines its own `test_device!`");
        }
        let after = src[i + "test_device".len()..].trim_start();
        let args = after
            .strip_prefix('!')
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix('('))
            .and_then(|a| a.find(')').map(|end| &a[..end]))
            .ok_or_else(|| anyhow!("line {line}: unrecognised use of `test_device`"))?;
        let idents: Vec<&str> = args
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let is_ident = |a: &&str| {
            let a = a.strip_prefix('$').unwrap_or(a);
            a.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && a.chars().all(|c| c.is_alphanumeric() || c == '_')
        };
        if idents.len() != 4 || !idents.iter().all(is_ident) {
            bail!("line {line}: `test_device!` with arguments other than four identifiers");
        }
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,4 +1,5 @@
 mod a;
-mod b;
+mod b2;
+mod rocm;
 -- not a header
 pub use a::*;
diff --git a/src/rocm.rs b/src/rocm.rs
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/src/rocm.rs
@@ -0,0 +1,2 @@
+//! ROCm slot.
+pub struct Slot;
--- a/README.md\t2024-01-01 00:00:00.000000000 +0000
+++ b/README.md\t2024-01-02 00:00:00.000000000 +0000
@@ -1 +1 @@
-old
\\ No newline at end of file
+new
";

    const LIB: &str = "mod a;\nmod b;\n-- not a header\npub use a::*;\n";

    #[test]
    fn multi_file_patch_is_split_and_applied() {
        let parts = split_patch(PATCH).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].old.as_deref(), Some("src/lib.rs"));
        assert_eq!(parts[1].old, None);
        assert_eq!(parts[1].new.as_deref(), Some("src/rocm.rs"));
        assert_eq!(parts[2].path(), "README.md");

        let lib = apply_file_patch(Some(LIB), &parts[0]).unwrap();
        assert_eq!(
            lib.as_deref(),
            Some("mod a;\nmod b2;\nmod rocm;\n-- not a header\npub use a::*;\n")
        );
        let new = apply_file_patch(None, &parts[1]).unwrap();
        assert_eq!(new.as_deref(), Some("//! ROCm slot.\npub struct Slot;\n"));
        let readme = apply_file_patch(Some("old"), &parts[2]).unwrap();
        assert_eq!(readme.as_deref(), Some("new\n"));
    }

    #[test]
    fn patch_applies_to_a_directory() {
        let dir = project_root().join(format!("target/xtask/test-patch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_file(&dir.join("src/lib.rs"), LIB.as_bytes()).unwrap();
        write_file(&dir.join("README.md"), b"old").unwrap();
        write_file(&dir.join("gone.txt"), b"x\n").unwrap();
        let delete = "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
        apply_patch_to_dir(&dir, &format!("{PATCH}{delete}")).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("src/rocm.rs"), "//! ROCm slot.\npub struct Slot;\n");
        assert!(read("src/lib.rs").contains("mod rocm;\n"));
        assert_eq!(read("README.md"), "new\n");
        assert!(!dir.join("gone.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mismatched_context_is_an_error() {
        let parts = split_patch(PATCH).unwrap();
        let err = apply_file_patch(Some("mod a;\nmod c;\n"), &parts[0]).unwrap_err();
        assert!(err.to_string().contains("does not apply"), "{err}");
        // The right text one line lower: diffy would apply it at an offset; we do not.
        let shifted = format!("// header\n{LIB}");
        assert!(apply_file_patch(Some(&shifted), &parts[0]).is_err());
        // New file that exists, changed file that does not.
        assert!(apply_file_patch(Some(""), &parts[1]).is_err());
        assert!(apply_file_patch(None, &parts[0]).is_err());
    }

    #[test]
    fn test_device_import_is_removed() {
        let one_line = "use candle_core::{test_device, Device, Result};\n\nfn f() {}\n";
        assert_eq!(
            remove_test_device_import(one_line).unwrap(),
            "use candle_core::{Device, Result};\n\nfn f() {}\n"
        );
        let last = "use candle_core::{Device, Result, test_device};\n";
        assert_eq!(
            remove_test_device_import(last).unwrap(),
            "use candle_core::{Device, Result};\n"
        );
        let own_line =
            "use candle_core::{\n    bail,\n    quantized::{self, X},\n    test_device,\n    Device,\n};\n";
        assert_eq!(
            remove_test_device_import(own_line).unwrap(),
            "use candle_core::{\n    bail,\n    quantized::{self, X},\n    Device,\n};\n"
        );
        let alias = "use candle::{test_device, Device};\nuse candle_core as candle;\n";
        assert_eq!(
            remove_test_device_import(alias).unwrap(),
            "use candle::{Device};\nuse candle_core as candle;\n"
        );
        let single = "use candle_core::test_device;\nuse x::Y;\n";
        assert_eq!(remove_test_device_import(single).unwrap(), "use x::Y;\n");
        assert!(remove_test_device_import("use other::{test_device};\n").is_err());
    }

    #[test]
    fn test_files_are_rewritten() {
        let src = "#![allow(clippy::approx_constant)]\nuse anyhow::Result;\n\
                   use candle_core::{test_device, Device};\n\nfn zeros(d: &Device) -> Result<()> \
                   { Ok(()) }\n\ntest_device!(zeros, zeros_cpu, zeros_gpu, zeros_metal);\n";
        let Rewritten::Text(out) = rewrite_test_file("t.rs", src, "0.0.1").unwrap() else {
            panic!("excluded");
        };
        let attr = out.find("#![allow").unwrap();
        let mac = out.find("macro_rules! test_device").unwrap();
        assert!(out.starts_with("// Generated by `cargo xtask candle` from candle-core 0.0.1"));
        assert!(attr < mac, "{out}");
        assert!(out.contains("use candle_core::{Device};\n"));
        assert!(!out.contains("test_device,"));

        let gated = "#![cfg(feature = \"metal\")]\n\nuse candle_core::Device;\n";
        assert!(matches!(
            rewrite_test_file("m.rs", gated, "0.0.1").unwrap(),
            Rewritten::Excluded(_)
        ));
        let five = "use candle_core::test_device;\ntest_device!(a, b, c, d, e);\n";
        assert!(rewrite_test_file("f.rs", five, "0.0.1").is_err());
        let by_path = "candle_core::test_device!(a, b, c, d);\n";
        assert!(rewrite_test_file("p.rs", by_path, "0.0.1").is_err());
    }

    #[test]
    fn suite_dependencies_follow_candle_core() {
        let manifest = "[dependencies.rand]\nversion = \"0.9.0\"\n\n[dependencies.zip]\n\
                        version = \"9\"\noptional = true\n\n[dev-dependencies.anyhow]\n\
                        version = \"1\"\nfeatures = [\"backtrace\"]\n";
        let src = "use rand::prelude::*;\nfn f() -> anyhow::Result<()> { zip::x() }\n\
                   #[cfg(feature = \"metal\")]\nfn g() {}\n"
            .to_string();
        let toml = suite_manifest(manifest, &[src], "0.0.1").unwrap();
        assert!(
            toml.contains("[dev-dependencies.rand]\nversion = \"0.9.0\"\n"),
            "{toml}"
        );
        assert!(toml.contains("[dev-dependencies.anyhow]\nversion = \"1\"\nfeatures"));
        assert!(!toml.contains("zip"), "{toml}");
        assert!(toml.contains("values(\"metal\")"));
        assert!(!toml.contains("[workspace]"));
    }

    /// Generates into a scratch project root (this workspace's `Cargo.lock` and a small patch),
    /// checks it, tampers with it, and regenerates. Needs candle-core and candle-nn in the cargo
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
