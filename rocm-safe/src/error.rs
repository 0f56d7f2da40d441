//! The error type of rocm-safe: every failure says what happened and what to do about it.

use rocm_sys::miopen::miopenStatus_t;
use rocm_sys::rocblas::rocblas_status;
use rocm_sys::{hipError_t, Hip, LoadError};

/// Result alias used throughout rocm-safe.
pub type Result<T, E = RocmError> = std::result::Result<T, E>;

/// A failed HIP runtime call, with the runtime's own name and description of the code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipError {
    /// The entry point that failed, e.g. `hipMalloc`.
    pub op: &'static str,
    /// The raw `hipError_t` value (unknown values are kept as they are).
    pub code: u32,
    /// The runtime's name for the code, e.g. `hipErrorOutOfMemory`.
    pub name: String,
    /// The runtime's description of the code.
    pub message: String,
}

impl HipError {
    /// Builds the error for `code`, asking the loaded runtime for its name and message.
    pub fn new(hip: &Hip, op: &'static str, code: hipError_t) -> Self {
        Self {
            op,
            code: code.0,
            name: hip.error_name(code),
            message: hip.error_string(code),
        }
    }

    /// The typed status code.
    pub fn status(&self) -> hipError_t {
        hipError_t(self.code)
    }

    /// A remedy for the codes where one is known.
    fn hint(&self) -> &'static str {
        match hipError_t(self.code) {
            hipError_t::hipErrorOutOfMemory => {
                " To fix: free tensors you no longer need, use a smaller batch or dtype, or \
                 choose a GPU with more memory."
            }
            hipError_t::hipErrorNoDevice | hipError_t::hipErrorInvalidDevice => {
                " To fix: check that the amdgpu driver is loaded, that /dev/kfd and /dev/dri are \
                 accessible to this user (groups render and video), and that \
                 HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES do not hide the device."
            }
            hipError_t::hipErrorInsufficientDriver => {
                " To fix: update the amdgpu kernel driver to one that supports this ROCm runtime."
            }
            hipError_t::hipErrorNoBinaryForGpu
            | hipError_t::hipErrorInvalidImage
            | hipError_t::hipErrorInvalidKernelFile
            | hipError_t::hipErrorInvalidDeviceFunction => {
                " To fix: the code object was not built for this GPU's architecture; rebuild the \
                 kernels for it (cargo xtask kernels)."
            }
            hipError_t::hipErrorLaunchFailure | hipError_t::hipErrorIllegalAddress => {
                " The device context is likely unusable now: restart the process. Please report \
                 this with the failing operation."
            }
            _ => "",
        }
    }
}

impl std::fmt::Display for HipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {} (code {}): {}.{}",
            self.op,
            self.name,
            self.code,
            self.message,
            self.hint()
        )
    }
}

/// Everything that can go wrong in rocm-safe.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RocmError {
    /// A ROCm library could not be loaded (see [`LoadError`]).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A HIP runtime call returned an error.
    #[error("{0}")]
    Hip(HipError),
    /// The runtime loaded but there is no usable GPU.
    #[error(
        "no usable HIP device: {reason}. To fix: check that the amdgpu driver is loaded, that \
         /dev/kfd and /dev/dri are accessible to this user (groups render and video), and that \
         HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES do not hide every device"
    )]
    NoDevice {
        /// What the runtime reported.
        reason: String,
    },
    /// A device ordinal outside `0..count`.
    #[error(
        "HIP device {ordinal} does not exist: {count} device(s) are visible. To fix: use an \
         ordinal below {count} (see rocm-info)"
    )]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the runtime reports.
        count: usize,
    },
    /// An allocation failed even after the caching allocator released its cache.
    #[error(
        "out of device memory on HIP device {ordinal}: requested {requested} bytes, {free} of \
         {total} bytes free. To fix: free tensors you no longer need, use a smaller batch or \
         dtype, or choose a GPU with more memory"
    )]
    OutOfMemory {
        /// The device.
        ordinal: usize,
        /// Bytes requested.
        requested: usize,
        /// Free device memory after trimming the cache.
        free: usize,
        /// Total device memory.
        total: usize,
    },
    /// A rocBLAS call returned an error.
    #[error("rocBLAS {op} failed: {name} (status {code}).{}", blas_hint(*.code))]
    Blas {
        /// The entry point that failed.
        op: &'static str,
        /// The raw `rocblas_status`.
        code: u32,
        /// Its name (from rocBLAS, or ours for known codes).
        name: String,
    },
    /// An MIOpen call returned an error.
    #[error("MIOpen {op} failed: {name} (status {code}).{}", miopen_hint(*.code))]
    Miopen {
        /// The entry point that failed.
        op: &'static str,
        /// The raw `miopenStatus_t`.
        code: u32,
        /// Its description.
        name: String,
    },
    /// The loaded runtime or device lacks a feature.
    #[error("{what} is not supported here: {detail}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// Why, and what to do.
        detail: String,
    },
    /// HIP graphs (stream capture, instantiate, update, launch) cannot be used with the loaded
    /// runtime. Nothing is wrong with the work itself: run it as plain launches.
    #[error("graphs unavailable: {reason}. Work runs as plain kernel launches")]
    GraphsUnavailable {
        /// Which entry points are missing, from which library.
        reason: String,
    },
    /// An operation that cannot be recorded into a graph (a host synchronisation, a copy from
    /// pageable host memory, a cache trim) was called while its stream is capturing. The
    /// capture is still valid but incomplete: abandon it and run the work as plain launches.
    #[error(
        "{op} cannot run while stream #{stream} is capturing a graph: {why}. End (or drop) the \
         capture and run this work as plain launches"
    )]
    NotCapturable {
        /// The refused operation.
        op: &'static str,
        /// The capturing stream's id ([`crate::Stream::id`]).
        stream: u64,
        /// Why it cannot be captured.
        why: &'static str,
    },
    /// Graph mode ([`crate::graph::GraphMode`]) recorded work that it then could not launch:
    /// the runtime invalidated the capture or refused the graph. The recorded operations did
    /// not run, so results that depend on them are missing.
    #[error(
        "{nodes} operations recorded in graph mode on stream #{stream} could not be launched \
         ({cause}); their results are missing. To fix: rerun the step with graph mode off \
         (CANDLE_ROCM_GRAPHS=0) and report the operation that broke the capture"
    )]
    GraphWorkLost {
        /// The stream's id ([`crate::Stream::id`]).
        stream: u64,
        /// Operations recorded and lost.
        nodes: usize,
        /// What the runtime said.
        cause: Box<RocmError>,
    },
    /// An argument that can never be valid (length mismatch, zero-sized launch, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// RCCL (collectives between GPUs) failed, or a collective's arguments are inconsistent.
    #[error(transparent)]
    Rccl(#[from] crate::rccl::RcclError),
    /// The rendezvous between ranks failed (see [`crate::rendezvous`]).
    #[error(transparent)]
    Rendezvous(#[from] crate::rendezvous::RendezvousError),
}

fn blas_hint(code: u32) -> &'static str {
    match rocblas_status(code) {
        rocblas_status::rocblas_status_arch_mismatch
        | rocblas_status::rocblas_status_excluded_from_build => {
            " To fix: this rocBLAS build has no kernels for the GPU's architecture; install a \
             rocBLAS from a ROCm release that supports it."
        }
        rocblas_status::rocblas_status_memory_error => {
            " To fix: free device memory (rocBLAS needs workspace)."
        }
        _ => "",
    }
}

fn miopen_hint(code: u32) -> &'static str {
    match miopenStatus_t(code) {
        miopenStatus_t::miopenStatusNotImplemented
        | miopenStatus_t::miopenStatusUnsupportedOp
        | miopenStatus_t::miopenStatusBadParm => {
            " MIOpen does not support this configuration (shape, dtype or parameters): use \
             another implementation for it (candle-rocm falls back to its im2col path)."
        }
        miopenStatus_t::miopenStatusAllocFailed => {
            " To fix: free device memory (MIOpen needs workspace), or use a smaller batch."
        }
        _ => "",
    }
}

impl RocmError {
    /// The HIP status code, when this is a HIP error.
    pub fn hip_status(&self) -> Option<hipError_t> {
        match self {
            RocmError::Hip(e) => Some(e.status()),
            _ => None,
        }
    }
}

/// Turns a HIP status into a `Result`.
pub(crate) fn check(hip: &Hip, op: &'static str, code: hipError_t) -> Result<()> {
    if code.is_success() {
        Ok(())
    } else {
        Err(RocmError::Hip(HipError::new(hip, op, code)))
    }
}

/// Turns a rocBLAS status into a `Result`.
pub(crate) fn check_blas(
    blas: &rocm_sys::Rocblas,
    op: &'static str,
    code: rocblas_status,
) -> Result<()> {
    if code == rocblas_status::rocblas_status_success {
        return Ok(());
    }
    let name = match (code.name(), blas.rocblas_status_to_string) {
        (Some(n), _) => n.to_string(),
        (None, Some(to_string)) => {
            // SAFETY: rocblas_status_to_string returns a static NUL-terminated string or null
            // for any value.
            let p = unsafe { to_string(code) };
            if p.is_null() {
                "unknown rocBLAS status".to_string()
            } else {
                // SAFETY: non-null results point to static NUL-terminated strings.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
        }
        (None, None) => "unknown rocBLAS status".to_string(),
    };
    Err(RocmError::Blas {
        op,
        code: code.0,
        name,
    })
}

/// Turns an MIOpen status into a `Result`.
pub(crate) fn check_miopen(
    miopen: &rocm_sys::Miopen,
    op: &'static str,
    code: miopenStatus_t,
) -> Result<()> {
    if code == miopenStatus_t::miopenStatusSuccess {
        return Ok(());
    }
    // SAFETY: miopenGetErrorString returns a static string (or null) for any status value.
    let p = unsafe { (miopen.miopenGetErrorString)(code) };
    let name = if p.is_null() {
        code.name().unwrap_or("unknown MIOpen status").to_string()
    } else {
        // SAFETY: non-null results point to static NUL-terminated strings.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    Err(RocmError::Miopen {
        op,
        code: code.0,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_hip_codes_format_sanely() {
        let e = HipError {
            op: "hipMalloc",
            code: 987_654,
            name: "hipErrorUnknown".into(),
            message: "unknown error".into(),
        };
        let s = RocmError::Hip(e).to_string();
        assert_eq!(
            s,
            "hipMalloc failed: hipErrorUnknown (code 987654): unknown error."
        );
    }

    #[test]
    fn known_codes_carry_a_remedy() {
        let e = HipError {
            op: "hipModuleLoadData",
            code: hipError_t::hipErrorNoBinaryForGpu.0,
            name: "hipErrorNoBinaryForGpu".into(),
            message: "no kernel image".into(),
        };
        assert!(e.to_string().contains("cargo xtask kernels"));
    }

    #[test]
    fn every_variant_says_what_to_do_or_what_happened() {
        let cases = [
            RocmError::NoDevice {
                reason: "hipInit returned hipErrorInvalidDevice".into(),
            },
            RocmError::InvalidDevice {
                ordinal: 3,
                count: 1,
            },
            RocmError::OutOfMemory {
                ordinal: 0,
                requested: 1 << 40,
                free: 10,
                total: 20,
            },
        ];
        for c in cases {
            assert!(c.to_string().contains("To fix"), "{c}");
        }
        let blas = RocmError::Blas {
            op: "rocblas_gemm_strided_batched_ex",
            code: 15,
            name: "rocblas_status_arch_mismatch".into(),
        };
        assert!(blas.to_string().contains("To fix"));
    }

    #[test]
    fn the_error_stays_small() {
        // Large error types make every `Result` in the stack larger (clippy's
        // result_large_err in candle-rocm): the multi-GPU variants must not grow it.
        let hip = std::mem::size_of::<HipError>();
        assert!(std::mem::size_of::<crate::rccl::RcclError>() <= hip);
        assert!(std::mem::size_of::<crate::rendezvous::RendezvousError>() <= hip);
    }

    #[test]
    fn miopen_errors_carry_the_status_name_and_a_remedy() {
        let e = RocmError::Miopen {
            op: "miopenConvolutionForward",
            code: 3,
            name: "miopenStatusBadParm".into(),
        };
        let s = e.to_string();
        assert!(
            s.starts_with(
                "MIOpen miopenConvolutionForward failed: miopenStatusBadParm (status 3)."
            ),
            "{s}"
        );
        assert!(s.contains("im2col"), "{s}");
        let unknown = RocmError::Miopen {
            op: "miopenPoolingForward",
            code: 9999,
            name: "Unknown error status".into(),
        };
        assert!(unknown.to_string().ends_with("(status 9999)."));
    }
}
