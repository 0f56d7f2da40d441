//! The kernel registry: which code object each device loads for each kernel module, loaded
//! lazily, once per device, from any thread.
//!
//! Selection, per module and device:
//! 1. an embedded code object built for exactly the device's processor (`gfx1100`);
//! 2. else the embedded generic family object (`gfx11-generic`), when the loaded HIP runtime
//!    can load generic code objects (ROCm 6.4 and newer);
//! 3. else `$CANDLE_ROCM_KERNELS_DIR/<module>.<processor>.co`, then `<module>.co` (objects
//!    built for an unsupported GPU, or by nvcc for the HIP-on-CUDA harness);
//! 4. else a typed error naming the processor, the embedded targets and the command that builds
//!    for it.
//!
//! Kernels are found again by name in [`table::KernelTable`], without a lock or an allocation.

pub mod table;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use candle_rocm_kernels::{Module, GENERIC_TARGETS, KERNELS_DIR_VAR, TARGETS};
use rocm_safe::{Device, Function, GfxArch, RocmError};

/// First HIP runtime version that loads generic (`gfxN-generic`) code objects: ROCm 6.4.
pub const GENERIC_MIN_RUNTIME: i32 = 60_400_000;

/// Why a kernel module is unavailable.
#[derive(Clone, Debug, thiserror::Error)]
pub enum KernelError {
    /// No code object fits the device.
    #[error(
        "no `{module}` kernels for {processor}: candle-rocm embeds {embedded}{generic}. To fix: \
         build them with `cargo xtask kernels --arch {processor}` and set {KERNELS_DIR_VAR} to \
         the output directory"
    )]
    NoCodeObject {
        /// The kernel module.
        module: &'static str,
        /// The device's processor, e.g. `gfx906`.
        processor: String,
        /// The embedded targets, comma-separated.
        embedded: String,
        /// A note about the generic target, when one exists but the runtime is too old.
        generic: String,
    },
    /// The override directory holds a file that could not be read.
    #[error("cannot read kernel code object {path}: {reason}. To fix: check {KERNELS_DIR_VAR}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The module has no kernel of this name (e.g. an op/dtype pair candle-kernels lacks).
    #[error(
        "no kernel `{name}` in the `{module}` module: {source}. The op is not available for \
         this dtype. To fix: convert the tensor with to_dtype first (e.g. to f32)"
    )]
    MissingKernel {
        /// The kernel module.
        module: &'static str,
        /// The kernel asked for.
        name: String,
        /// The HIP error.
        #[source]
        source: RocmError,
    },
    /// The runtime rejected the code object.
    #[error("loading `{module}` kernels: {source}")]
    Load {
        /// The kernel module.
        module: &'static str,
        /// The HIP error.
        #[source]
        source: RocmError,
    },
}

/// Where a module's code object comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// An embedded object for this exact target.
    Exact(&'static str),
    /// An embedded generic object.
    Generic(&'static str),
    /// A file in the override directory.
    File(PathBuf),
}

/// What the selection needs to know about the device and the build, kept separate from the
/// live device so the policy can be tested with fake devices.
pub struct SelectionInput<'a> {
    /// The device's architecture.
    pub arch: &'a GfxArch,
    /// `hipRuntimeGetVersion`.
    pub runtime_version: i32,
    /// Whether an embedded object exists for (module, target).
    pub embedded: &'a dyn Fn(Module, &str) -> bool,
    /// The override directory, if set.
    pub dir: Option<&'a Path>,
}

/// Picks the code object for `module` (see the module documentation for the order).
pub fn select(module: Module, input: &SelectionInput<'_>) -> Result<Choice, KernelError> {
    let processor = input.arch.processor.as_str();
    if let Some(t) = TARGETS.iter().find(|t| **t == processor) {
        if (input.embedded)(module, t) {
            return Ok(Choice::Exact(t));
        }
    }
    let generic = input
        .arch
        .generic_target()
        .and_then(|g| GENERIC_TARGETS.iter().find(|t| **t == g));
    if let Some(g) = generic {
        if input.runtime_version >= GENERIC_MIN_RUNTIME && (input.embedded)(module, g) {
            return Ok(Choice::Generic(g));
        }
    }
    if let Some(dir) = input.dir {
        for name in [
            format!("{}.{processor}.co", module.name()),
            format!("{}.co", module.name()),
        ] {
            let path = dir.join(name);
            if path.is_file() {
                return Ok(Choice::File(path));
            }
        }
    }
    let generic_note = match generic {
        Some(g) if input.runtime_version < GENERIC_MIN_RUNTIME => format!(
            " (and {g}, which needs ROCm 6.4 or newer; this runtime is {})",
            hip_version_string(input.runtime_version)
        ),
        _ => String::new(),
    };
    Err(KernelError::NoCodeObject {
        module: module.name(),
        processor: processor.to_string(),
        embedded: TARGETS.join(", "),
        generic: generic_note,
    })
}

/// Formats a HIP version number (`major * 10^7 + minor * 10^5 + patch`).
pub fn hip_version_string(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

/// Whether this build embeds a code object for (module, target).
pub fn is_embedded(module: Module, target: &str) -> bool {
    candle_rocm_kernels::embedded().any(|(m, t)| m == module && t == target)
}

/// Loaded kernel modules of one device.
pub struct KernelRegistry {
    device: Device,
    dir: Option<PathBuf>,
    runtime_version: i32,
    modules: [OnceLock<Result<rocm_safe::Module, KernelError>>; Module::ALL.len()],
    /// Kernels looked up so far: every op launch asks by name, and a hit skips the runtime's
    /// symbol lookup, with no lock and no allocation.
    functions: table::KernelTable<Function>,
    /// Optional kernels a module was found not to have ([`KernelRegistry::optional_static`]),
    /// so a fallback costs one failed lookup per device, not one per launch.
    absent: parking_lot::Mutex<std::collections::HashSet<(Module, &'static str)>>,
}

impl KernelRegistry {
    /// A registry for `device`, reading the override directory from the environment.
    pub fn new(device: Device) -> Arc<KernelRegistry> {
        let dir = crate::settings::kernels_dir();
        let runtime_version = device.runtime().runtime_version().unwrap_or(0);
        Arc::new(KernelRegistry {
            device,
            dir,
            runtime_version,
            modules: std::array::from_fn(|_| OnceLock::new()),
            functions: table::KernelTable::new(),
            absent: parking_lot::Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Loads (once) and returns the module.
    pub fn module(&self, module: Module) -> Result<rocm_safe::Module, KernelError> {
        let slot = &self.modules[module as usize];
        slot.get_or_init(|| self.load(module)).clone()
    }

    /// Looks up one kernel of a module; once found, it is borrowed from the registry's table
    /// (no lock, no allocation), or owned in the rare case the table had no room for it.
    pub fn function(&self, module: Module, name: &str) -> Result<Cow<'_, Function>, KernelError> {
        self.functions.get_or_try_insert(module, name, || {
            self.module(module)?
                .function(name)
                .map_err(|source| KernelError::MissingKernel {
                    module: module.name(),
                    name: name.to_string(),
                    source,
                })
        })
    }

    /// A kernel that only some targets' code objects define (e.g. a matrix-unit variant):
    /// `Ok(None)` when the module loaded but lacks it, remembered for the device; errors
    /// loading the module itself are returned.
    pub fn optional_static(
        &self,
        module: Module,
        name: &'static str,
    ) -> Result<Option<Cow<'_, Function>>, KernelError> {
        if let Some(f) = self.functions.find(module, name) {
            return Ok(Some(Cow::Borrowed(f)));
        }
        if self.absent.lock().contains(&(module, name)) {
            return Ok(None);
        }
        match self.function(module, name) {
            Ok(f) => Ok(Some(f)),
            Err(KernelError::MissingKernel { .. }) => {
                tracing::debug!(module = module.name(), name, "optional kernel absent");
                self.absent.lock().insert((module, name));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn load(&self, module: Module) -> Result<rocm_safe::Module, KernelError> {
        let input = SelectionInput {
            arch: &self.device.info().arch,
            runtime_version: self.runtime_version,
            embedded: &is_embedded,
            dir: self.dir.as_deref(),
        };
        let image: Vec<u8> = match select(module, &input)? {
            Choice::Exact(t) | Choice::Generic(t) => candle_rocm_kernels::code_object(module, t)
                .ok_or_else(|| KernelError::NoCodeObject {
                    module: module.name(),
                    processor: t.to_string(),
                    embedded: TARGETS.join(", "),
                    generic: String::new(),
                })?
                .map_err(|reason| KernelError::Unreadable {
                    path: PathBuf::from(format!("<embedded {}.{t}>", module.name())),
                    reason,
                })?,
            Choice::File(path) => std::fs::read(&path).map_err(|e| KernelError::Unreadable {
                path: path.clone(),
                reason: e.to_string(),
            })?,
        };
        rocm_safe::Module::load(&self.device, &image).map_err(|source| KernelError::Load {
            module: module.name(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(s: &str) -> GfxArch {
        GfxArch::parse(s).unwrap()
    }

    fn all_embedded(_: Module, _: &str) -> bool {
        true
    }

    fn none_embedded(_: Module, _: &str) -> bool {
        false
    }

    fn input<'a>(
        arch: &'a GfxArch,
        version: i32,
        embedded: &'a dyn Fn(Module, &str) -> bool,
        dir: Option<&'a Path>,
    ) -> SelectionInput<'a> {
        SelectionInput {
            arch,
            runtime_version: version,
            embedded,
            dir,
        }
    }

    #[test]
    fn exact_target_wins() {
        let a = arch("gfx1100");
        let c = select(Module::Unary, &input(&a, 60_000_000, &all_embedded, None)).unwrap();
        assert_eq!(c, Choice::Exact("gfx1100"));
        let a = arch("gfx90a:sramecc+:xnack+");
        let c = select(Module::Unary, &input(&a, 50_700_000, &all_embedded, None)).unwrap();
        assert_eq!(
            c,
            Choice::Exact("gfx90a"),
            "target features do not change the choice"
        );
    }

    #[test]
    fn generic_family_needs_a_new_enough_runtime() {
        let a = arch("gfx1103");
        let c = select(Module::Reduce, &input(&a, 60_400_000, &all_embedded, None)).unwrap();
        assert_eq!(c, Choice::Generic("gfx11-generic"));
        let e = select(Module::Reduce, &input(&a, 60_300_000, &all_embedded, None)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("gfx1103") && msg.contains("needs ROCm 6.4"),
            "{msg}"
        );
        assert!(msg.contains("cargo xtask kernels --arch gfx1103"), "{msg}");
    }

    #[test]
    fn unsupported_arch_is_a_clear_error() {
        let a = arch("gfx908:sramecc+:xnack-");
        let e = select(Module::Affine, &input(&a, 60_400_000, &all_embedded, None)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("no `affine` kernels for gfx908"), "{msg}");
        assert!(msg.contains("gfx90a, gfx942"), "{msg}");
        assert!(msg.contains(KERNELS_DIR_VAR), "{msg}");
    }

    #[test]
    fn override_directory_serves_the_harness() {
        let dir = std::env::temp_dir().join(format!("candle-rocm-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = arch("sm_90");
        let e = select(
            Module::Fill,
            &input(&a, 60_300_000, &none_embedded, Some(&dir)),
        );
        assert!(e.is_err(), "nothing in the directory yet");
        std::fs::write(dir.join("fill.co"), b"x").unwrap();
        let c = select(
            Module::Fill,
            &input(&a, 60_300_000, &none_embedded, Some(&dir)),
        )
        .unwrap();
        assert_eq!(c, Choice::File(dir.join("fill.co")));
        std::fs::write(dir.join("fill.sm_90.co"), b"x").unwrap();
        let c = select(
            Module::Fill,
            &input(&a, 60_300_000, &none_embedded, Some(&dir)),
        )
        .unwrap();
        assert_eq!(
            c,
            Choice::File(dir.join("fill.sm_90.co")),
            "the processor-specific file first"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn embedded_exact_beats_override_directory() {
        let dir = std::env::temp_dir();
        let a = arch("gfx942:sramecc+:xnack-");
        let c = select(
            Module::Conv,
            &input(&a, 60_000_000, &all_embedded, Some(&dir)),
        )
        .unwrap();
        assert_eq!(c, Choice::Exact("gfx942"));
    }
}
