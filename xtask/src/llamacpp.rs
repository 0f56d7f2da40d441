//! `cargo xtask llamacpp` (and the last step of `cargo xtask bench`): llama.cpp's source,
//! trimmed to what `llama-bench` needs with the CUDA and CPU backends, packed into the bench
//! bundle as `llama.cpp.tar.xz` for `tests/hip-on-cuda/llamacpp.sh` to build and run on the
//! device next to ours.
//!
//! The source comes from the source distribution of the PyPI package `llama-cpp-python` at
//! [`VERSION`], which carries llama.cpp under `vendor/llama.cpp`: downloaded once (with `curl`)
//! into `target/llama-cpp/`, checked against [`SHA256`], unpacked, and the files [`kept`] says
//! the CMake build of `llama-bench` needs copied into a staging tree. `tools/CMakeLists.txt` is
//! replaced by one that adds `llama-bench` alone (the full one adds every tool, whose sources are
//! left out). No llama.cpp file is committed to this repository.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest as _, Sha256};

use crate::project_root;

/// The pinned `llama-cpp-python` release; its sdist vendors llama.cpp 0.5.0-dev (ggml 0.25.3).
pub const VERSION: &str = "0.3.36";
/// The sdist's sha256, as PyPI's JSON API lists it for [`VERSION`].
const SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";
/// Where PyPI serves the sdist of [`VERSION`] (the `url` of PyPI's JSON API).
const URL: &str = "https://files.pythonhosted.org/packages/ec/e9/\
                   e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/\
                   llama_cpp_python-0.3.36.tar.gz";
/// The archive's name inside the bench bundle.
pub const ARCHIVE: &str = "llama.cpp.tar.xz";
/// The trimmed tree stays a few MB; a much larger one means [`kept`] let something big in.
const MAX_ARCHIVE: u64 = 6 << 20;

/// The `tools/CMakeLists.txt` of the trimmed tree: `llama-bench` only (what the full file does
/// before its list of tools, then the one tool).
const TOOLS_CMAKE: &str = "\
# Written by candle-rocm's `cargo xtask llamacpp`: llama-bench only (the other tools' sources
# are not in this trimmed tree).
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
";

/// `cargo xtask llamacpp`: packs the trimmed llama.cpp into `bundle` (replacing an older
/// archive there, keeping the rest of the bundle) and returns the archive's size in bytes.
pub fn pack_into(bundle: &Path) -> Result<u64> {
    let root = project_root();
    let sdist = download(&root.join("target/llama-cpp"))?;
    let work = root.join("target/llama-cpp/work");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let prefix = format!("llama_cpp_python-{VERSION}/vendor/llama.cpp");
    eprintln!("== unpacking {prefix} from the sdist");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(&work)
        .arg(&prefix))?;
    let stage = work.join("stage");
    let files = trim(&work.join(&prefix), &stage.join("llama.cpp"))?;
    for rel in SENTINELS {
        ensure!(
            stage.join("llama.cpp").join(rel).is_file(),
            "the trimmed llama.cpp has no {rel}: check `kept` in xtask/src/llamacpp.rs against \
             the llama.cpp of llama-cpp-python {VERSION}"
        );
    }
    std::fs::create_dir_all(bundle)?;
    let archive = bundle.join(ARCHIVE);
    eprintln!("== packing {files} files into {}", archive.display());
    // A reproducible archive: sorted names, no owners, one timestamp.
    run(Command::new("tar")
        .env("XZ_OPT", "-9")
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mtime=@0",
            "-cJf",
        ])
        .arg(&archive)
        .arg("-C")
        .arg(&stage)
        .arg("llama.cpp"))?;
    std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    let size = std::fs::metadata(&archive)?.len();
    ensure!(
        size <= MAX_ARCHIVE,
        "{} is {size} bytes, more than the {MAX_ARCHIVE} expected: check `kept` in \
         xtask/src/llamacpp.rs against the llama.cpp of llama-cpp-python {VERSION}",
        archive.display()
    );
    Ok(size)
}

/// `cargo xtask llamacpp`: [`pack_into`] the project's `.bench-bundle/`.
pub fn run_command() -> Result<()> {
    let bundle = project_root().join(crate::bench::BUNDLE);
    let size = pack_into(&bundle)?;
    eprintln!(
        "\n{}/{ARCHIVE} ready ({:.1} MiB); tests/hip-on-cuda/bench.sh builds and runs it \
         (tests/hip-on-cuda/llamacpp.sh).",
        crate::bench::BUNDLE,
        size as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The sdist in `cache` (downloaded when missing or damaged), its sha256 checked.
fn download(cache: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(cache)?;
    let file = cache.join(format!("llama_cpp_python-{VERSION}.tar.gz"));
    if file.exists() && sha256(&file)? == SHA256 {
        return Ok(file);
    }
    eprintln!("== downloading llama-cpp-python {VERSION}'s sdist from PyPI (75 MB)");
    let part = file.with_extension("gz.part");
    run(Command::new("curl")
        .args(["-fsSL", "--retry", "3", "-o"])
        .arg(&part)
        .arg(URL))
    .context(
        "downloading the llama-cpp-python sdist from PyPI (needs curl and access to \
         files.pythonhosted.org; or put the file in target/llama-cpp/ yourself)",
    )?;
    let got = sha256(&part)?;
    if got != SHA256 {
        bail!(
            "{} has sha256 {got}, not the pinned {SHA256}: PyPI served another file for \
             llama-cpp-python {VERSION}; delete it and retry, or pin the new one in \
             xtask/src/llamacpp.rs after checking it",
            part.display()
        );
    }
    std::fs::rename(&part, &file)?;
    Ok(file)
}

/// The sha256 of a file, in hex.
fn sha256(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Whether the file at `rel` (relative to llama.cpp's root, `/`-separated) is one the CMake
/// build of `llama-bench` with the CUDA and CPU backends reads.
///
/// Kept: the top-level CMake files and licenses, `cmake/`, `include/`, `src/` (libllama),
/// `common/` (llama-bench links llama-common), `vendor/` (the header-only libraries common and
/// the top-level CMakeLists add), ggml's CMake files, headers and core sources with its CPU and
/// CUDA backends, and `tools/llama-bench/`. Everything else (the other backends, tools,
/// examples, tests, docs, models, Python) is left out.
pub fn kept(rel: &str) -> bool {
    const DIRS: &[&str] = &[
        "cmake/",
        "include/",
        "src/",
        "common/",
        "vendor/",
        "licenses/",
        "ggml/cmake/",
        "ggml/include/",
        "ggml/src/ggml-cpu/",
        "ggml/src/ggml-cuda/",
        "tools/llama-bench/",
    ];
    const FILES: &[&str] = &["CMakeLists.txt", "LICENSE", "ggml/CMakeLists.txt"];
    if FILES.contains(&rel) || DIRS.iter().any(|d| rel.starts_with(d)) {
        return true;
    }
    // ggml's core: the files directly in ggml/src (sources, headers, CMakeLists.txt,
    // ggml-version.h.in), not the other backends' folders.
    rel.strip_prefix("ggml/src/")
        .is_some_and(|name| !name.contains('/'))
}

/// Files the trimmed tree must hold, one from each part the build of `llama-bench` compiles
/// (a check on the unpacking as well as on [`kept`]: libllama's per-architecture graphs live in
/// `src/models/`, beside the sdist's unrelated top-level `models/`).
const SENTINELS: &[&str] = &[
    "CMakeLists.txt",
    "src/llama-model.cpp",
    "src/models/models.h",
    "src/models/llama.cpp",
    "common/arg.cpp",
    "vendor/nlohmann/json.hpp",
    "ggml/src/ggml.c",
    "ggml/src/ggml-cpu/ggml-cpu.c",
    "ggml/src/ggml-cuda/fattn.cu",
    "tools/llama-bench/llama-bench.cpp",
];

/// Copies the files of `src` that [`kept`] keeps into `dst`, writes the trimmed
/// `tools/CMakeLists.txt`, and returns how many files it wrote.
fn trim(src: &Path, dst: &Path) -> Result<usize> {
    ensure!(
        src.join("tools/llama-bench/llama-bench.cpp").is_file(),
        "{} has no tools/llama-bench/llama-bench.cpp: the layout of llama-cpp-python {VERSION}'s \
         vendored llama.cpp is not the one `kept` expects",
        src.display()
    );
    let mut count = 0;
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let rel = path
                .strip_prefix(src)
                .context("a path outside the tree")?
                .to_string_lossy()
                .replace('\\', "/");
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && kept(&rel) {
                let to = dst.join(&rel);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::copy(&path, &to).with_context(|| format!("copying {}", path.display()))?;
                count += 1;
            }
        }
    }
    std::fs::create_dir_all(dst.join("tools"))?;
    std::fs::write(dst.join("tools/CMakeLists.txt"), TOOLS_CMAKE)?;
    Ok(count + 1)
}

/// Runs a command, failing with its command line and status.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_llama_bench_build_reads() {
        for path in [
            "CMakeLists.txt",
            "LICENSE",
            "cmake/build-info.cmake",
            "cmake/common.cmake",
            "cmake/license.cmake",
            "cmake/git-vars.cmake",
            "include/llama.h",
            "src/CMakeLists.txt",
            "src/llama-model.cpp",
            "src/models/llama.cpp",
            "src/models/models.h",
            "common/CMakeLists.txt",
            "common/build-info.cpp.in",
            "common/parsers/sources.cmake",
            "vendor/CMakeLists.txt",
            "vendor/nlohmann/json.hpp",
            "vendor/cpp-httplib/httplib.cpp",
            "ggml/CMakeLists.txt",
            "ggml/cmake/ggml-config.cmake.in",
            "ggml/include/ggml.h",
            "ggml/src/CMakeLists.txt",
            "ggml/src/ggml.c",
            "ggml/src/gguf.cpp",
            "ggml/src/ggml-version.h.in",
            "ggml/src/ggml-cpu/CMakeLists.txt",
            "ggml/src/ggml-cpu/arch/x86/quants.c",
            "ggml/src/ggml-cuda/CMakeLists.txt",
            "ggml/src/ggml-cuda/fattn.cu",
            "ggml/src/ggml-cuda/template-instances/fattn-vec-instance-q4_0-q4_0.cu",
            "tools/llama-bench/CMakeLists.txt",
            "tools/llama-bench/llama-bench.cpp",
            "tools/llama-bench/main.cpp",
        ] {
            assert!(kept(path), "{path} is needed");
        }
    }

    #[test]
    fn leaves_out_what_it_does_not_read() {
        for path in [
            "tools/CMakeLists.txt", // replaced by TOOLS_CMAKE
            "tools/server/server.cpp",
            "tools/mtmd/clip.cpp",
            "examples/simple/simple.cpp",
            "tests/test-backend-ops.cpp",
            "docs/build.md",
            "models/ggml-vocab-llama-spm.gguf",
            "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
            "ggml/src/ggml-metal/ggml-metal.m",
            "ggml/src/ggml-hip/CMakeLists.txt",
            "gguf-py/gguf/constants.py",
            "convert_hf_to_gguf.py",
            "README.md",
        ] {
            assert!(!kept(path), "{path} is not needed");
        }
    }

    /// The trim on a small fake tree: kept files copied, the tools list replaced.
    #[test]
    fn trims_a_tree() -> Result<()> {
        let base = std::env::temp_dir().join(format!("xtask-llamacpp-{}", std::process::id()));
        let (src, dst) = (base.join("src"), base.join("dst"));
        for (rel, text) in [
            ("CMakeLists.txt", "top"),
            ("tools/CMakeLists.txt", "all tools"),
            ("tools/llama-bench/llama-bench.cpp", "bench"),
            ("tools/server/server.cpp", "server"),
            ("ggml/src/ggml.c", "ggml"),
            ("ggml/src/ggml-vulkan/v.cpp", "vulkan"),
        ] {
            let p = src.join(rel);
            std::fs::create_dir_all(p.parent().context("parent")?)?;
            std::fs::write(p, text)?;
        }
        let n = trim(&src, &dst)?;
        assert_eq!(n, 4);
        assert_eq!(
            std::fs::read_to_string(dst.join("tools/CMakeLists.txt"))?,
            TOOLS_CMAKE
        );
        assert!(dst.join("ggml/src/ggml.c").is_file());
        assert!(dst.join("tools/llama-bench/llama-bench.cpp").is_file());
        assert!(!dst.join("tools/server").exists());
        assert!(!dst.join("ggml/src/ggml-vulkan").exists());
        std::fs::remove_dir_all(&base)?;
        Ok(())
    }
}
