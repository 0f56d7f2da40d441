//! The crate's level order, kept (as rust-analyzer's `tidy.rs` keeps its rules): every module
//! has a level ([`LEVELS`], the table of lib.rs), and a file may name another module of the
//! crate (a `crate::` or `super::` path, in code or in its tests) only when that module's level
//! is lower than its own. So imports point down only, and no circle can form. Also kept here:
//! only the files above the ops name `RocmStorage`, every `CANDLE_ROCM_*` variable is read in
//! `settings.rs` alone, and no file grows past [`MAX_LINES`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Module paths (relative to the crate root) and their levels; a module not listed takes the
/// level of its longest listed prefix.
const LEVELS: &[(&str, u32)] = &[
    ("settings", 0),
    ("registry::table", 9),
    ("registry", 10),
    ("error", 20),
    ("report", 20),
    ("dtype", 30),
    ("device", 40),
    ("layout", 40),
    ("dispatch", 50),
    ("launch", 60),
    ("launch::attention", 61),
    ("launch::batch_norm", 63),
    ("launch::candle", 61),
    ("launch::collective", 61),
    ("launch::conv_plan", 61),
    ("launch::conv_tiles", 62),
    ("launch::copy", 61),
    ("launch::gemv", 61),
    ("launch::gemv_nn", 62),
    ("launch::group_norm", 61),
    ("launch::upsample", 61),
    ("launch::rows", 61),
    ("launch::row_elementwise", 62),
    ("launch::rope_cache", 62),
    ("launch::strides", 61),
    ("launch::elementwise", 62),
    ("launch::conv_igemm", 63),
    ("launch::conv", 64),
    ("launch::gemm", 63),
    ("launch::transpose", 62),
    ("ops", 70),
    ("ops::attention::spec", 71),
    ("ops::attention::host", 72),
    ("ops::attention", 73),
    ("ops::peer_reduce", 71),
    ("ops::collective", 72),
    ("ops::copy", 71),
    ("ops::elementwise", 71),
    ("ops::indexing", 71),
    ("ops::matmul", 71),
    ("ops::rand", 71),
    ("ops::reduce", 71),
    ("ops::conv", 72),
    ("ops::conv::kernels", 73),
    ("ops::conv::miopen", 73),
    ("ops::conv::convolve", 74),
    ("storage", 80),
    ("backend_device", 90),
    ("quantized::plan", 100),
    ("quantized::qstorage", 100),
    ("quantized::dequantize", 101),
    ("quantized::matvec", 102),
    ("quantized::tiled", 103),
    ("quantized", 104),
    ("slot::attention::op", 109),
    ("slot::attention", 110),
    ("slot::fused", 110),
    ("slot::graphs", 110),
    ("slot", 111),
    // Above the slot: a `Comm` opens its device through `slot::device`.
    ("slot::collective", 112),
    ("levels", 200),
];

/// The most lines a source file may have.
const MAX_LINES: usize = 700;

/// The files that may name the storage type: the storage level and the ones above it.
const STORAGE_LEVEL: u32 = 80;

/// The level of module `path` (`a::b::c`), by its longest listed prefix.
fn level(path: &str) -> Option<u32> {
    let mut best: Option<(&str, u32)> = None;
    for &(m, l) in LEVELS {
        let covers = path == m || path.starts_with(&format!("{m}::"));
        if covers && best.is_none_or(|(b, _)| m.len() > b.len()) {
            best = Some((m, l));
        }
    }
    best.map(|(_, l)| l)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src` (`ops/conv/mod.rs` -> `ops::conv`); `None` for the
/// crate root and binaries.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [root] if root == "lib" => None,
        [first, ..] if first == "bin" => None,
        [dirs @ .., last] if last == "mod" => Some(dirs.join("::")),
        all => Some(all.join("::")),
    }
}

/// The code of a line, without its `//` comment (doc comments included).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// The module paths a piece of code names through `crate::` (not `$crate::`, which macros
/// expand at their callers) or `super::` (resolved from `module`): each path's leading
/// lowercase segments. A `crate::{` or `crate::Type` path names the crate root, returned as
/// the empty path.
fn named_modules(text: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    let idents = |rest: &str| -> Vec<String> {
        let mut segs = Vec::new();
        let mut r = rest;
        loop {
            let seg: String = r
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let after = &r[seg.len()..];
            if seg.is_empty() || !after.starts_with("::") {
                // The last segment is an item unless a `::` follows it.
                break;
            }
            segs.push(seg.clone());
            r = &after[2..];
        }
        segs
    };
    let mut i = 0;
    while let Some(p) = text[i..].find("crate::") {
        let at = i + p;
        i = at + 7;
        if text[..at].ends_with('$') {
            continue;
        }
        let rest = &text[i..];
        let mut segs = idents(rest);
        if segs.is_empty() {
            // `crate::{...}`, `crate::Type` or `crate::module` as the last segment of a `use`.
            let seg: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if seg.is_empty() || rest[seg.len()..].starts_with(['{', ';', ',']) {
                if !seg.is_empty() {
                    segs.push(seg);
                } else {
                    out.push(String::new());
                    continue;
                }
            }
        }
        out.push(segs.join("::"));
    }
    let mut i = 0;
    while let Some(p) = text[i..].find("super::") {
        let at = i + p;
        let mut base: Vec<&str> = module.split("::").collect();
        let mut rest = &text[at..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        i = text.len() - rest.len();
        let mut path: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        path.extend(idents(rest));
        if let Some(seg) = rest.split(['{', ';', ',', ' ', ')']).next() {
            // `super::name;` or `super::name,` inside braces may be a module itself.
            let lower = seg.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            if !seg.is_empty() && !seg.contains("::") && lower {
                path.push(seg.to_string());
            }
        }
        out.push(path.join("::"));
    }
    out
}

/// The longest prefix of `path` that names a listed module (`ops::conv::kernels::Pool2D`
/// style paths reduce to their module).
fn listed_prefix(path: &str) -> String {
    let segs: Vec<&str> = path.split("::").collect();
    for n in (1..=segs.len()).rev() {
        let p = segs[..n].join("::");
        if LEVELS.iter().any(|(m, _)| *m == p) {
            return p;
        }
    }
    path.to_string()
}

#[test]
fn imports_point_down_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut bad = BTreeSet::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        if module == "levels" {
            continue;
        }
        let own = level(&module).unwrap_or_else(|| panic!("{module} has no level in LEVELS"));
        let text = std::fs::read_to_string(file).expect("read");
        // Inside the file's inline `mod tests`, `super` is the file's own module.
        let (body, tests) = match text.find("#[cfg(test)]\nmod tests {") {
            Some(i) => text.split_at(i),
            None => (text.as_str(), ""),
        };
        let strip = |t: &str| t.lines().map(code).collect::<Vec<_>>().join("\n");
        let tests_module = format!("{module}::tests");
        let named = named_modules(&strip(body), &module)
            .into_iter()
            .chain(named_modules(&strip(tests), &tests_module));
        for target in named {
            let target = listed_prefix(&target);
            if target.is_empty() {
                bad.insert(format!("{module}: names the crate root (`crate::{{..}}` or `crate::Type`); import from the module"));
                continue;
            }
            if target == module {
                continue;
            }
            match level(&target) {
                Some(l) if l < own => {}
                Some(l) => {
                    bad.insert(format!(
                        "{module} (level {own}) imports {target} (level {l})"
                    ));
                }
                None => {
                    bad.insert(format!("{module} names {target}, which has no level"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports that do not point down:\n{}", {
        let v: Vec<_> = bad.into_iter().collect();
        v.join("\n")
    });
}

#[test]
fn only_the_top_names_the_storage_type() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        if module == "levels" || level(&module).is_some_and(|l| l >= STORAGE_LEVEL) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            let hit = c.match_indices("RocmStorage").any(|(i, _)| {
                !c[i + "RocmStorage".len()..].starts_with(|ch: char| ch.is_alphanumeric())
            });
            assert!(
                !hit,
                "{}:{}: {module} names RocmStorage",
                file.display(),
                n + 1
            );
        }
    }
}

#[test]
fn settings_are_read_in_one_place() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in &files {
        if file.ends_with("settings.rs") || file.ends_with("levels.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            assert!(
                !c.contains("env::var"),
                "{}:{}: reads the environment; read settings in settings.rs",
                file.display(),
                n + 1
            );
        }
    }
}

#[test]
fn no_file_is_too_long() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in &files {
        let lines = std::fs::read_to_string(file).expect("read").lines().count();
        assert!(
            lines <= MAX_LINES,
            "{} has {lines} lines (at most {MAX_LINES}): split it along its seams",
            file.display()
        );
    }
}

#[test]
fn the_checker_sees_an_upward_import() {
    let named = named_modules(
        "use crate::storage::RocmStorage;\nuse super::{conv_out, dims_n};\nlet x = crate::launch::rows::transpose(a);",
        "ops::conv::kernels",
    );
    assert_eq!(named, ["storage", "launch::rows", "ops::conv"]);
    assert_eq!(level("ops::conv::kernels"), Some(73));
    assert_eq!(level("ops::conv::params"), Some(72));
    assert!(level("storage").unwrap() > level("ops::conv::kernels").unwrap());
    assert_eq!(
        module_of(Path::new("/s"), Path::new("/s/ops/conv/mod.rs")).as_deref(),
        Some("ops::conv")
    );
    assert_eq!(named_modules("use crate::{A, B};", "ops"), [""]);
    assert_eq!(
        listed_prefix("ops::conv::kernels::Pool2D"),
        "ops::conv::kernels"
    );
}
