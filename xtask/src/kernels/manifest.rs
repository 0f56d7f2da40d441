//! The committed set: `kernels/objects/*.co.z`, `kernels/manifest.json` and the embedding
//! table `kernels/src/objects.rs`; writing them after a build, reading them, and `--check`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use candle_rocm_kernels::code_object::CodeObject;
use candle_rocm_kernels::Module;
use serde_json::{json, Value};

use super::compile::{flags, occupancy_path, Built};
use super::occupancy::check_against_compiler;
use super::sources::{candle_sources, kernel_names, source_hash};
use super::toolchain::Toolchain;
use super::{all_targets, CANDLE_KERNELS_VERSION};

/// Writes the compressed objects of a build, the manifest (keeping the entries of pairs not
/// built) and the embedding table.
pub(super) fn write_committed(
    root: &Path,
    tc: &Toolchain,
    candle: &Path,
    include: &Path,
    results: &[(Module, String, Result<Built>)],
) -> Result<()> {
    let objects_dir = root.join("kernels/objects");
    std::fs::create_dir_all(&objects_dir)?;
    let manifest_path = root.join("kernels/manifest.json");
    // Keep entries of a partial build's untouched (module, target) pairs.
    let mut entries: BTreeMap<(String, String), Value> = read_manifest(&manifest_path)
        .map(|m| {
            m["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|o| {
                    Some((
                        (
                            o["module"].as_str()?.to_string(),
                            o["target"].as_str()?.to_string(),
                        ),
                        o,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    for (m, t, r) in results {
        let Ok((obj, hash, ..)) = r else { continue };
        let raw = std::fs::read(obj)?;
        compiler_agrees(obj, t, &raw)?;
        let packed = miniz_oxide::deflate::compress_to_vec(&raw, 10);
        let e = entry(*m, t, &raw, packed.len(), hash, &tc.version)
            .with_context(|| format!("reading {}", obj.display()))?;
        std::fs::write(objects_dir.join(file_name(*m, t)), &packed)?;
        entries.insert((m.name().to_string(), t.clone()), e);
    }
    let _ = (candle, include);
    let manifest = json!({
        "candle_kernels": CANDLE_KERNELS_VERSION,
        "objects": entries.values().cloned().collect::<Vec<_>>(),
    });
    std::fs::write(&manifest_path, manifest_text(&manifest)?)?;
    write_table(root, &manifest)?;
    eprintln!(
        "updated {} and kernels/src/objects.rs",
        manifest_path.display()
    );
    Ok(())
}

/// The file name of a (module, target) object under `kernels/objects/`.
fn file_name(module: Module, target: &str) -> String {
    format!("{}.{target}.co.z", module.name())
}

/// The manifest entry of one object: what proves it current (source hash, flags, compiler)
/// and what it holds (sizes, kernel count). The per-kernel resource use is not recorded:
/// `--report` reads it from the object itself.
fn entry(
    module: Module,
    target: &str,
    raw: &[u8],
    compressed_bytes: usize,
    source_hash: &str,
    compiler: &str,
) -> Result<Value> {
    let names = kernel_names(raw)?;
    Ok(json!({
        "module": module.name(),
        "target": target,
        "file": file_name(module, target),
        "source_hash": source_hash,
        "flags": flags(module, target).join(" "),
        "compiler": compiler,
        "raw_bytes": raw.len(),
        "compressed_bytes": compressed_bytes,
        "kernel_count": names.len(),
    }))
}

/// The manifest as written to `kernels/manifest.json`.
fn manifest_text(manifest: &Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(manifest)? + "\n")
}

/// Fails unless the occupancy `--report` computes from a freshly compiled object (cached at
/// `obj`, for `target`) is what the compiler reported when it built it.
pub(super) fn compiler_agrees(obj: &Path, target: &str, raw: &[u8]) -> Result<()> {
    let path = occupancy_path(obj);
    let reported: BTreeMap<String, u64> = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    let co = CodeObject::parse(raw).map_err(|e| anyhow!("{}: {e}", obj.display()))?;
    check_against_compiler(target, &co.kernels, &reported)
}

/// One object of the manifest.
pub(super) struct Entry<'a> {
    /// The module the object was built from.
    pub(super) module: Module,
    /// The target it was built for.
    pub(super) target: &'a str,
    /// Its file under `kernels/objects/`.
    pub(super) file: &'a str,
    /// The whole manifest entry.
    pub(super) json: &'a Value,
}

/// The objects of a manifest, their modules resolved.
pub(super) fn entries(manifest: &Value) -> Result<Vec<Entry<'_>>> {
    manifest["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let (Some(m), Some(target), Some(file)) = (
                o["module"].as_str(),
                o["target"].as_str(),
                o["file"].as_str(),
            ) else {
                bail!("malformed manifest entry {o}");
            };
            let module = Module::ALL
                .iter()
                .copied()
                .find(|x| x.name() == m)
                .ok_or_else(|| anyhow!("unknown module {m} in the manifest"))?;
            Ok(Entry {
                module,
                target,
                file,
                json: o,
            })
        })
        .collect()
}

/// The manifest at `path`, if it exists and is valid JSON.
pub(super) fn read_manifest(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Generates `kernels/src/objects.rs`, the table of embedded objects.
fn write_table(root: &Path, manifest: &Value) -> Result<()> {
    let mut s = String::from(
        "// @generated by `cargo xtask kernels` from kernels/manifest.json. Do not edit.\n\n\
         use crate::Module;\n\n\
         /// Embedded code objects: (module, target, deflate-compressed HSA code object).\n\
         pub(crate) static OBJECTS: &[(Module, &str, &[u8])] = &[\n",
    );
    for e in entries(manifest)? {
        let (variant, t, f) = (e.module, e.target, e.file);
        writeln!(
            s,
            "    (Module::{variant:?}, \"{t}\", include_bytes!(\"../objects/{f}\")),"
        )?;
    }
    s.push_str("];\n");
    std::fs::write(root.join("kernels/src/objects.rs"), s)?;
    Ok(())
}

/// `--check`: every (module, target) is in the manifest, with the current source hash and
/// an object file of the recorded size.
pub(super) fn check(root: &Path) -> Result<()> {
    let manifest_path = root.join("kernels/manifest.json");
    let manifest = read_manifest(&manifest_path).ok_or_else(|| {
        anyhow!(
            "{} is missing or unreadable: run `cargo xtask kernels`",
            manifest_path.display()
        )
    })?;
    if manifest["candle_kernels"] != CANDLE_KERNELS_VERSION {
        bail!(
            "the objects were built from candle-kernels {}, this tree wants {CANDLE_KERNELS_VERSION}: \
             run `cargo xtask kernels`",
            manifest["candle_kernels"]
        );
    }
    let candle = candle_sources(root)?;
    let include = root.join("kernels/include");
    let mut stale = Vec::new();
    let mut present = std::collections::BTreeSet::new();
    for e in entries(&manifest)? {
        let (module, m, t, f, o) = (e.module, e.module.name(), e.target, e.file, e.json);
        present.insert((m.to_string(), t.to_string()));
        let hash = source_hash(module, &candle, &include, &flags(module, t).join(" "))?;
        if o["source_hash"] != hash.as_str() {
            stale.push(format!("{m}.{t}: sources or flags changed"));
        }
        let path = root.join("kernels/objects").join(f);
        match std::fs::metadata(&path) {
            Ok(md) if Some(md.len()) == o["compressed_bytes"].as_u64() => {}
            _ => stale.push(format!(
                "{m}.{t}: {} is missing or differs from the manifest",
                path.display()
            )),
        }
    }
    for m in Module::ALL {
        for t in all_targets() {
            if !present.contains(&(m.name().to_string(), t.to_string())) {
                stale.push(format!("{}.{t}: not built", m.name()));
            }
        }
    }
    if !stale.is_empty() {
        bail!(
            "kernel objects are out of date ({}):\n  {}\nrun `cargo xtask kernels` and commit kernels/",
            stale.len(),
            stale.join("\n  ")
        );
    }
    eprintln!("kernels: {} objects match their sources", present.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project_root;

    /// The committed manifest is exactly what [`write_committed`] writes for the committed
    /// objects (their source hashes and compiler taken from it): same fields, sizes, kernel
    /// counts and formatting.
    #[test]
    fn manifest_is_what_the_writer_writes() {
        let root = project_root();
        let path = root.join("kernels/manifest.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let committed: Value = serde_json::from_str(&text).unwrap();
        let objects = entries(&committed)
            .unwrap()
            .into_iter()
            .map(|e| {
                let packed = std::fs::read(root.join("kernels/objects").join(e.file)).unwrap();
                let raw = miniz_oxide::inflate::decompress_to_vec(&packed).unwrap();
                let hash = e.json["source_hash"].as_str().unwrap();
                let compiler = e.json["compiler"].as_str().unwrap();
                entry(e.module, e.target, &raw, packed.len(), hash, compiler).unwrap()
            })
            .collect::<Vec<_>>();
        let rewritten = json!({
            "candle_kernels": CANDLE_KERNELS_VERSION,
            "objects": objects,
        });
        assert!(
            manifest_text(&rewritten).unwrap() == text,
            "kernels/manifest.json is not what `cargo xtask kernels` writes for kernels/objects"
        );
    }

    /// CI runs this: the committed code objects were built from the current sources and flags.
    #[test]
    fn kernel_objects_are_fresh() {
        if let Err(e) = check(&project_root()) {
            panic!("{e:#}");
        }
    }
}
