//! `cargo xtask bindgen`: generates `rocm-sys/src/bindings/hip.rs`.
//!
//! bindgen reads `rocm-sys/src/bindings/hip_wrapper.h` against the HIP headers, allowlisted to
//! the types and entry points below. The `extern "C"` block it produces is rewritten into an
//! `api_table!` invocation (see `rocm-sys/src/table.rs`) so the functions are resolved at run time
//! with `dlopen` instead of being linked; everything else (types, constants, status newtypes) is
//! kept as bindgen wrote it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::project_root;

/// Entry points every supported HIP runtime (ROCm 5.2 and newer) exports; loading fails
/// without them.
const REQUIRED: &[&str] = &[
    "hipInit",
    "hipDriverGetVersion",
    "hipRuntimeGetVersion",
    "hipGetDeviceCount",
    "hipSetDevice",
    "hipGetDevice",
    "hipDeviceGetAttribute",
    "hipDeviceGetName",
    "hipDeviceTotalMem",
    "hipDeviceSynchronize",
    "hipMemGetInfo",
    "hipGetErrorName",
    "hipGetErrorString",
    "hipMalloc",
    "hipFree",
    "hipHostMalloc",
    "hipHostFree",
    "hipMemcpyHtoD",
    "hipMemcpyDtoH",
    "hipMemcpyDtoD",
    "hipMemcpyHtoDAsync",
    "hipMemcpyDtoHAsync",
    "hipMemcpyDtoDAsync",
    "hipMemsetD8Async",
    "hipMemsetD16Async",
    "hipMemsetD32Async",
    "hipStreamCreateWithFlags",
    "hipStreamDestroy",
    "hipStreamSynchronize",
    "hipStreamQuery",
    "hipStreamWaitEvent",
    "hipEventCreateWithFlags",
    "hipEventDestroy",
    "hipEventRecord",
    "hipEventSynchronize",
    "hipEventQuery",
    "hipEventElapsedTime",
    "hipModuleLoadData",
    "hipModuleUnload",
    "hipModuleGetFunction",
    "hipModuleLaunchKernel",
    "hipFuncGetAttribute",
];

/// Entry points probed once and kept as `Option`s (stream-ordered allocation and memory pools
/// appeared in ROCm 5.1 and are not supported on every device; peer copies have a fallback).
const OPTIONAL: &[&str] = &[
    "hipMallocAsync",
    "hipFreeAsync",
    "hipDeviceGetDefaultMemPool",
    "hipMemPoolSetAttribute",
    "hipMemPoolGetAttribute",
    "hipMemPoolTrimTo",
    // Peer-to-peer copies (ROCm 5.2+); optional so a runtime without them falls back to
    // copies staged through pinned host memory.
    "hipDeviceCanAccessPeer",
    "hipDeviceEnablePeerAccess",
    "hipMemcpyPeerAsync",
    // Stream capture and graphs (HIP 4.3+, hipGraphExecUpdate 4.5+; "beta" in the headers):
    // optional so a runtime without them runs plain launches (rocm-safe's `graph` module).
    // hipGraphInstantiate, not hipGraphInstantiateWithFlags: ROCm 5.2's library lacks the latter.
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipStreamIsCapturing",
    "hipGraphInstantiate",
    "hipGraphExecUpdate",
    "hipGraphLaunch",
    "hipGraphExecDestroy",
    "hipGraphDestroy",
    // Lets the caching allocator make a raw allocation for a graph pool while capturing
    // (relaxed mode around hipMalloc, as PyTorch does around cudaMalloc). HIP 5.0+.
    "hipThreadExchangeStreamCaptureMode",
    // Memory another process of the same host maps (one-shot all-reduce between ranks):
    // fine-grained device memory, so writes and system-scope atomics are seen across GPUs
    // while a kernel runs, and its IPC handles. ROCm 3.x+; optional, the collectives keep RCCL
    // without them.
    "hipExtMallocWithFlags",
    "hipIpcGetMemHandle",
    "hipIpcOpenMemHandle",
    "hipIpcCloseMemHandle",
];

/// Types and constants used by the safe layer.
const TYPES: &[&str] = &[
    "hipError_t",
    "hipDeviceAttribute_t",
    "hipFunction_attribute",
    "hipMemPoolAttr",
    "hipDeviceProp_t",
    "hipStreamCaptureMode",
    "hipStreamCaptureStatus",
    "hipGraphExecUpdateResult",
    "hipIpcMemHandle_t",
];
const VARS: &[&str] = &[
    "hipStreamDefault",
    "hipStreamNonBlocking",
    "hipEventDefault",
    "hipEventBlockingSync",
    "hipEventDisableTiming",
    "hipHostMallocDefault",
    "hipHostMallocPortable",
    "hipDeviceMallocFinegrained",
    "hipIpcMemLazyEnablePeerAccess",
];

const OUT: &str = "rocm-sys/src/bindings/hip.rs";
const WRAPPER: &str = "rocm-sys/src/bindings/hip_wrapper.h";

/// Runs the generator; with `check`, compares instead of writing.
pub fn run(check: bool) -> Result<()> {
    let root = project_root();
    let generated = generate(&root)?;
    ensure_file_contents(&root.join(OUT), &generated, check)
}

fn include_dir() -> Result<PathBuf> {
    let mut tried = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["ROCM_PATH", "HIP_PATH"] {
        if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            dirs.push(Path::new(&p).join("include"));
        }
    }
    dirs.push(PathBuf::from("/usr/include"));
    for dir in dirs {
        if dir.join("hip/hip_runtime_api.h").is_file() {
            return Ok(dir);
        }
        tried.push(dir.display().to_string());
    }
    bail!(
        "hip/hip_runtime_api.h not found under {}. Install the HIP headers \
         (`apt-get install libamdhip64-dev` on Debian 12) or set ROCM_PATH",
        tried.join(", ")
    )
}

fn generate(root: &Path) -> Result<String> {
    let include = include_dir()?;
    let mut builder = bindgen::Builder::default()
        .header(root.join(WRAPPER).display().to_string())
        .clang_arg(format!("-I{}", include.display()))
        .clang_arg("-D__HIP_PLATFORM_AMD__")
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_eq(true)
        .generate_comments(false)
        .layout_tests(true)
        .merge_extern_blocks(true)
        .prepend_enum_name(false)
        .use_core()
        .formatter(bindgen::Formatter::None);
    for f in REQUIRED.iter().chain(OPTIONAL) {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder.generate().context(
        "bindgen failed on the HIP headers (is libclang installed? apt-get install libclang-dev)",
    )?;
    let file: syn::File =
        syn::parse_str(&bindings.to_string()).context("bindgen output does not parse")?;
    let version = hip_version(&include).unwrap_or_else(|| "unknown".to_string());
    render(file, &version)
}

/// Reads `HIP_VERSION_*` from `hip/hip_version.h` so the header records its input.
fn hip_version(include: &Path) -> Option<String> {
    let text = std::fs::read_to_string(include.join("hip/hip_version.h")).ok()?;
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
            .map(|v| v.trim().to_string())
    };
    Some(format!(
        "{}.{}.{}",
        get("HIP_VERSION_MAJOR")?,
        get("HIP_VERSION_MINOR")?,
        get("HIP_VERSION_PATCH")?
    ))
}

fn render(file: syn::File, hip_version: &str) -> Result<String> {
    let mut types = Vec::new();
    let mut fns: Vec<syn::ForeignItemFn> = Vec::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(block) => {
                for fi in block.items {
                    match fi {
                        syn::ForeignItem::Fn(f) => fns.push(f),
                        other => bail!("unexpected foreign item {}", quote_item(&other)),
                    }
                }
            }
            other => types.push(other),
        }
    }
    let mut out = String::new();
    out.push_str(&format!(
        "// @generated by `cargo xtask bindgen` from the HIP {hip_version} headers. Do not edit.\n\
         // Regenerate after changing the lists in xtask/src/bindgen_hip.rs.\n\n"
    ));
    out.push_str(&prettyplease::unparse(&syn::File {
        shebang: None,
        attrs: vec![],
        items: types,
    }));
    out.push_str("\ncrate::table::api_table! {\n");
    out.push_str(
        "    /// Entry points of the HIP runtime, resolved from `libamdhip64` at run time.\n",
    );
    out.push_str("    pub struct HipApi;\n");
    for (label, names) in [("required", REQUIRED), ("optional", OPTIONAL)] {
        out.push_str(&format!("    {label} extern \"C\" {{\n"));
        for name in names {
            let Some(f) = fns.iter().find(|f| f.sig.ident == name) else {
                bail!("the HIP headers do not declare `{name}`");
            };
            out.push_str(&format!("        {}\n", render_sig(f)));
        }
        out.push_str("    }\n");
    }
    out.push_str("}\n");
    Ok(out)
}

fn quote_item(item: &syn::ForeignItem) -> String {
    match item {
        syn::ForeignItem::Static(s) => format!("static {}", s.ident),
        syn::ForeignItem::Type(t) => format!("type {}", t.ident),
        _ => "item".to_string(),
    }
}

/// One declaration as `pub fn name(arg: Ty, ...) -> Ret;` on a single line.
fn render_sig(f: &syn::ForeignItemFn) -> String {
    let file = syn::File {
        shebang: None,
        attrs: vec![],
        items: vec![syn::Item::ForeignMod(syn::ItemForeignMod {
            attrs: vec![],
            unsafety: None,
            abi: syn::parse_quote!(extern "C"),
            brace_token: Default::default(),
            items: vec![syn::ForeignItem::Fn(syn::ForeignItemFn {
                attrs: vec![],
                ..f.clone()
            })],
        })],
    };
    let text = prettyplease::unparse(&file);
    let body: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("extern") && *l != "}")
        .map(str::trim)
        .collect();
    body.join(" ").replace("( ", "(").replace(", )", ")")
}

/// Writes `contents` to `path`, or with `check` fails when they differ.
fn ensure_file_contents(path: &Path, contents: &str, check: bool) -> Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    if old == contents {
        return Ok(());
    }
    if check {
        bail!(
            "{} is out of date: run `cargo xtask bindgen` and commit the result",
            path.display()
        );
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("updated {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    /// CI runs this: the checked-in bindings match the headers and the lists above.
    #[test]
    fn bindings_are_fresh() {
        if let Err(e) = super::run(true) {
            panic!("{e:#}");
        }
    }
}
