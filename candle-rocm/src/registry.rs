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

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use candle_rocm_kernels::{Module, GENERIC_TARGETS, KERNELS_DIR_VAR, TARGETS};
use rocm_safe::{Device, Function, GfxArch, RocmError};

/// Variable that turns our fast kernel modules (`elementwise`, `rows`, `gemv`, the batched
/// `copy`) off when `0` or `off`: candle's kernels and rocBLAS then run every op they cover (for
/// side-by-side measurements, and as an escape hatch). Read once per process.
pub const FAST_KERNELS_VAR: &str = "CANDLE_ROCM_FAST_KERNELS";

/// Whether the on/off variable `var` says `0` or `off`.
fn switched_off(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "0" || v.eq_ignore_ascii_case("off"))
}

/// Whether the fast kernel modules run (see [`FAST_KERNELS_VAR`]).
pub fn fast_kernels() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = switched_off(FAST_KERNELS_VAR);
        if off {
            tracing::info!("{FAST_KERNELS_VAR}: our fast kernels are off, candle's kernels run");
        }
        !off
    })
}

/// Variable that turns the batched copies of `cat` off when `0` or `off`: each input then
/// takes its own `copy2d` launch, as in candle's CUDA backend (for side-by-side measurements;
/// [`FAST_KERNELS_VAR`] turns them off too). Read once per process.
pub const BATCHED_COPY_VAR: &str = "CANDLE_ROCM_BATCHED_COPY";

/// Whether `cat` runs its copies batched (`kernels/hip/copy.hip`; see [`BATCHED_COPY_VAR`]).
pub fn batched_copy() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = switched_off(BATCHED_COPY_VAR);
        if off {
            tracing::info!("{BATCHED_COPY_VAR}: cat copies one input per launch");
        }
        fast_kernels() && !off
    })
}

/// Variable that selects the activations of the quantized mat-vec (decode, up to 8 rows):
/// `q8` rounds them to 8 bits per 32-value block exactly as Candle's CUDA backend does (its
/// `quantize_q8_1`: f16 scale and f16 sum per block), and multiplies with integer dot products
/// in the f32 expressions of its kernels (`kernels/hip/qmatvec.hip`'s `qmatvec8_*`: a quarter of
/// the x bytes, 4 products per instruction), so products come out as Candle CUDA's up to the
/// order of f32 sums, and candle-core's `quantized_tests.rs` passes with the expectations of its
/// CUDA arms; unset or `f32` keeps them in f32 (`qmatvec_*`), which follows the f32 model more
/// closely. Read once per process.
pub const QMATVEC_VAR: &str = "CANDLE_ROCM_QMATVEC";

/// Whether the quantized mat-vec rounds activations to 8 bits (see [`QMATVEC_VAR`]).
pub fn qmatvec_q8() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var(QMATVEC_VAR) {
        Ok(v) if v.eq_ignore_ascii_case("q8") => {
            tracing::info!("{QMATVEC_VAR}=q8: the quantized mat-vec rounds activations to 8 bits");
            true
        }
        Ok(v) if !v.is_empty() && !v.eq_ignore_ascii_case("f32") => {
            tracing::warn!(
                "{QMATVEC_VAR}={v:?} is neither `f32` nor `q8`: keeping f32 activations"
            );
            false
        }
        _ => false,
    })
}

/// Variable that sets the most rows of activations the quantized mat-vec kernels take (in
/// launches of up to 8 rows, 4 for the k-quants, each reading the weights once) before a
/// product moves on to the tiled kernels ([`QMATMUL_ROWS_VAR`]) or to dequantizing the weights
/// to f16 and one GEMM: a number from 1 to 64. Unset, the measured default of
/// `candle_rocm::quantized::qmatmul_path`: 8 rows (as Candle's CUDA backend), but 6 for the
/// 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in f32, whose 7 and 8 rows the
/// register-tiled kernels take. On the H100 via HIP-on-CUDA (2026-11-25, 4096x4096 q4_0 /
/// q4_K weights, once the f16 dequantize had 16-byte stores) 16 rows took 55.4 / 55.0 us
/// through the mat-vec in f32 against 51.4 / 35.3 us through the GEMM, and with 8-bit
/// activations 32.1 / 43.2 us against 34.6 / 35.0: past 8 rows the GEMM is as fast or faster.
/// Read once per process.
pub const QMATVEC_ROWS_VAR: &str = "CANDLE_ROCM_QMATVEC_ROWS";

/// Default of [`QMATVEC_ROWS_VAR`] for the k-quants and in q8 mode (see there).
pub const QMATVEC_ROWS_DEFAULT: usize = 8;

/// The most activation rows that run the quantized mat-vec kernels, when [`QMATVEC_ROWS_VAR`]
/// sets it; `None` (the measured per-type default) when it is unset or not a number from 1 to
/// 64 (a warning then).
pub fn qmatvec_rows_set() -> Option<usize> {
    static ROWS: OnceLock<Option<usize>> = OnceLock::new();
    *ROWS.get_or_init(|| rows_var(QMATVEC_ROWS_VAR, 1, 64, "the mat-vec"))
}

/// A row-count variable read from the environment: its value when a number from `min` to `max`
/// (logged, naming `what` runs that many rows); `None` when unset, or set otherwise (a
/// warning: the default stays).
fn rows_var(var: &str, min: usize, max: usize, what: &str) -> Option<usize> {
    let v = std::env::var(var).ok()?;
    match parse_rows(&v, min, max) {
        Some(rows) => {
            tracing::info!("{var}={rows}: up to {rows} rows run {what}");
            Some(rows)
        }
        None => {
            tracing::warn!("{var}={v:?} is not a number from {min} to {max}: keeping the default");
            None
        }
    }
}

/// A row-count variable's value, if it is a number from `min` to `max`.
fn parse_rows(v: &str, min: usize, max: usize) -> Option<usize> {
    v.trim().parse().ok().filter(|r| (min..=max).contains(r))
}

/// Variable that sets the most rows of activations the tiled quantized kernels take (in
/// `kernels/hip/qmatvec.hip`: up to 16 rows the register-tiled `qmr_<type>_m<8|16>`, more the
/// `qmm_<type>_m<16|32|64>` tiles, activations and sums in f32; `qmm8_*` on 8-bit rows with
/// [`QMATVEC_VAR`]`=q8`) once a product has more rows than the mat-vec takes
/// ([`QMATVEC_ROWS_VAR`]); past it, the weights dequantize to f16 for one GEMM. A number from 0
/// to 4096; unset, [`QMATMUL_ROWS_DEFAULT`] (8: `qmr` takes the 7 and 8 rows of the 32-value
/// block types in f32, where it beats the mat-vec; 2026-11-25 18:45Z, H100 via HIP-on-CUDA,
/// 4096 x 4096 weights, us at 6 / 8 rows, mat-vec against `qmr`: q4_0 19.7 / 27.8 against
/// 19.7 / 19.6, q8_0 20.2 / 27.6 against 21.9 / 23.8, q5_0 19.2 / 29.7 against 22.8 / 22.8; q4_K
/// 24.5 / 27.3 against 26.0 / 26.4, so the k-quants keep the mat-vec). Past 8 rows the tiled
/// kernels do not beat the f16 GEMM (16:28Z and 18:45Z, us at 16 / 32 / 64 rows: q4_0 `qmr`
/// 35 at 16, `qmm` 60 / 70 / 95, against the GEMM's 34 / 33 / 34 and Candle CUDA's 23 / 26 /
/// 32; q4_K `qmr` 34 at 16, `qmm` 73 / 82 / 108, against 36 / 35 / 36). Read once per process.
pub const QMATMUL_ROWS_VAR: &str = "CANDLE_ROCM_QMATMUL_ROWS";

/// Default of [`QMATMUL_ROWS_VAR`]: 8 (see there).
pub const QMATMUL_ROWS_DEFAULT: usize = 8;

/// The most activation rows that run the tiled quantized kernels (see [`QMATMUL_ROWS_VAR`]).
pub fn qmatmul_max_rows() -> usize {
    static ROWS: OnceLock<usize> = OnceLock::new();
    *ROWS.get_or_init(|| {
        rows_var(QMATMUL_ROWS_VAR, 0, 4096, "the tiled kernels").unwrap_or(QMATMUL_ROWS_DEFAULT)
    })
}

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
            crate::report::hip_version_string(input.runtime_version)
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
    /// symbol lookup. Names known at compile time are kept borrowed (no allocation per launch).
    functions: parking_lot::Mutex<HashMap<(Module, Cow<'static, str>), Function>>,
}

impl KernelRegistry {
    /// A registry for `device`, reading the override directory from the environment.
    pub fn new(device: Device) -> Arc<KernelRegistry> {
        let dir = std::env::var_os(KERNELS_DIR_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let runtime_version = device.runtime().runtime_version().unwrap_or(0);
        Arc::new(KernelRegistry {
            device,
            dir,
            runtime_version,
            modules: std::array::from_fn(|_| OnceLock::new()),
            functions: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// Loads (once) and returns the module.
    pub fn module(&self, module: Module) -> Result<rocm_safe::Module, KernelError> {
        let slot = &self.modules[module as usize];
        slot.get_or_init(|| self.load(module)).clone()
    }

    /// Looks up one kernel of a module.
    pub fn function(&self, module: Module, name: &str) -> Result<Function, KernelError> {
        self.lookup(module, Cow::Owned(name.to_string()))
    }

    /// Looks up one kernel by a name known at compile time; a cached kernel costs no
    /// allocation.
    pub fn function_static(
        &self,
        module: Module,
        name: &'static str,
    ) -> Result<Function, KernelError> {
        self.lookup(module, Cow::Borrowed(name))
    }

    fn lookup(&self, module: Module, name: Cow<'static, str>) -> Result<Function, KernelError> {
        let key = (module, name);
        if let Some(f) = self.functions.lock().get(&key) {
            return Ok(f.clone());
        }
        let f =
            self.module(module)?
                .function(&key.1)
                .map_err(|source| KernelError::MissingKernel {
                    module: module.name(),
                    name: key.1.to_string(),
                    source,
                })?;
        self.functions.lock().insert(key, f.clone());
        Ok(f)
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

    #[test]
    fn qmatvec_rows_take_1_to_64() {
        assert_eq!(parse_rows("16", 1, 64), Some(16));
        assert_eq!(parse_rows(" 1 ", 1, 64), Some(1));
        assert_eq!(parse_rows("64", 1, 64), Some(64));
        for bad in ["0", "65", "-3", "eight", ""] {
            assert_eq!(parse_rows(bad, 1, 64), None, "{bad:?}");
        }
    }

    #[test]
    fn qmatmul_rows_take_0_to_4096() {
        assert_eq!(parse_rows("0", 0, 4096), Some(0));
        assert_eq!(parse_rows("4096", 0, 4096), Some(4096));
        assert_eq!(parse_rows("4097", 0, 4096), None);
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
