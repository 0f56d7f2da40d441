//! The process-wide ROCm runtime: the loaded libraries, initialised once.

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rocm_sys::{hipError_t, Hip, Miopen, Rccl, Rocblas};

use crate::error::{check, Result, RocmError};

/// The loaded HIP runtime plus the companion libraries, loaded lazily from its directory.
///
/// Obtained with [`Runtime::get`]; the first call loads `libamdhip64` and calls `hipInit`, and
/// its outcome (success or the typed reason for failure) is kept for the life of the process.
pub struct Runtime {
    hip: Arc<Hip>,
    init_error: Option<HipInitFailure>,
    rocblas: OnceLock<Result<Arc<Rocblas>>>,
    miopen: OnceLock<Result<Option<Arc<Miopen>>>>,
    rccl: OnceLock<Result<Arc<Rccl>>>,
    /// The graph entry points, resolved on first use ([`Runtime::graphs`]).
    graphs: OnceLock<Result<crate::graph::GraphApi>>,
    /// Errors raised in `Drop` impls, reported by the next [`Runtime::check_err`].
    deferred: Mutex<Option<RocmError>>,
    /// Whether device `.0` reads device `.1`'s memory directly (probed, and enabled, once per
    /// pair: [`Runtime::peer_access`]).
    pub(crate) peers: Mutex<std::collections::HashMap<(usize, usize), bool>>,
}

#[derive(Clone, Debug)]
struct HipInitFailure {
    code: hipError_t,
    name: String,
}

static RUNTIME: OnceLock<Result<Arc<Runtime>>> = OnceLock::new();

impl Runtime {
    /// Loads the HIP runtime (once per process) following `rocm_sys`'s search order.
    pub fn get() -> Result<Arc<Runtime>> {
        RUNTIME.get_or_init(|| Self::from_hip(Hip::load()?)).clone()
    }

    /// Builds a runtime around an already loaded HIP library (tests, or an application that
    /// picks the library itself). Does not touch the process-wide instance.
    pub fn from_hip(hip: Arc<Hip>) -> Result<Arc<Runtime>> {
        // SAFETY: hipInit takes a flags word; 0 is the only defined value. It is safe to call
        // more than once.
        let code = unsafe { (hip.hipInit)(0) };
        let init_error = (!code.is_success()).then(|| HipInitFailure {
            code,
            name: hip.error_name(code),
        });
        Ok(Arc::new(Runtime {
            hip,
            init_error,
            rocblas: OnceLock::new(),
            miopen: OnceLock::new(),
            rccl: OnceLock::new(),
            graphs: OnceLock::new(),
            deferred: Mutex::new(None),
            peers: Mutex::new(std::collections::HashMap::new()),
        }))
    }

    /// The loaded HIP runtime's entry points.
    pub fn hip(&self) -> &Hip {
        &self.hip
    }

    /// A shared handle to the HIP library.
    pub fn hip_arc(&self) -> Arc<Hip> {
        self.hip.clone()
    }

    /// `hipRuntimeGetVersion`, e.g. `60342134` for ROCm 6.3.
    pub fn runtime_version(&self) -> Result<i32> {
        self.hip.runtime_version().map_err(|code| {
            RocmError::Hip(crate::error::HipError::new(
                &self.hip,
                "hipRuntimeGetVersion",
                code,
            ))
        })
    }

    /// `hipDriverGetVersion`.
    pub fn driver_version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out-pointer for one int.
        let code = unsafe { (self.hip.hipDriverGetVersion)(&mut v) };
        check(&self.hip, "hipDriverGetVersion", code)?;
        Ok(v)
    }

    /// Number of visible devices; a typed [`RocmError::NoDevice`] when there are none.
    pub fn device_count(&self) -> Result<usize> {
        if let Some(f) = &self.init_error {
            return Err(RocmError::NoDevice {
                reason: format!(
                    "hipInit failed with {} (code {}) using {}",
                    f.name,
                    f.code.0,
                    self.hip.path().display()
                ),
            });
        }
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for one int.
        let code = unsafe { (self.hip.hipGetDeviceCount)(&mut n) };
        if code == hipError_t::hipErrorNoDevice || (code.is_success() && n <= 0) {
            return Err(RocmError::NoDevice {
                reason: format!(
                    "hipGetDeviceCount reports no device using {}",
                    self.hip.path().display()
                ),
            });
        }
        check(&self.hip, "hipGetDeviceCount", code)?;
        Ok(n as usize)
    }

    /// The graph entry points (stream capture, instantiate, update, launch), or
    /// [`RocmError::GraphsUnavailable`] naming what this runtime lacks. Checked once.
    pub(crate) fn graphs(&self) -> Result<&crate::graph::GraphApi> {
        self.graphs
            .get_or_init(|| {
                crate::graph::GraphApi::resolve(
                    crate::graph::GraphSymbols::of(&self.hip),
                    &self.hip.path().display().to_string(),
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether graphs can be used: `Ok(())`, or [`RocmError::GraphsUnavailable`] with the
    /// reason, for a caller that wants to choose between graphs and plain launches up front.
    pub fn graphs_available(&self) -> Result<()> {
        self.graphs().map(|_| ())
    }

    /// rocBLAS, loaded on first use from beside the HIP runtime.
    pub fn rocblas(&self) -> Result<Arc<Rocblas>> {
        self.rocblas
            .get_or_init(|| Ok(Arc::new(Rocblas::load_beside(&self.hip)?)))
            .clone()
    }

    /// MIOpen, loaded on first use; `Ok(None)` when it is absent or disabled, since every
    /// MIOpen path has a fallback.
    pub fn miopen(&self) -> Result<Option<Arc<Miopen>>> {
        self.miopen
            .get_or_init(|| match Miopen::load_beside(&self.hip) {
                Ok(m) => Ok(m.map(Arc::new)),
                Err(rocm_sys::LoadError::LibraryNotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            })
            .clone()
    }

    /// rocBLAS's version string (loads rocBLAS if needed).
    pub fn rocblas_version(&self) -> Result<String> {
        let lib = self.rocblas()?;
        let mut len = 0usize;
        // SAFETY: `len` is a valid out-pointer.
        let code = unsafe { (lib.rocblas_get_version_string_size)(&mut len) };
        crate::error::check_blas(&lib, "rocblas_get_version_string_size", code)?;
        let mut buf = vec![0u8; len.clamp(1, 4096)];
        // SAFETY: `buf` is writable for its full length, which is passed.
        let code = unsafe { (lib.rocblas_get_version_string)(buf.as_mut_ptr().cast(), buf.len()) };
        crate::error::check_blas(&lib, "rocblas_get_version_string", code)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// MIOpen's version as `major.minor.patch`, `Ok(None)` when MIOpen is absent.
    pub fn miopen_version(&self) -> Result<Option<String>> {
        let Some(lib) = self.miopen()? else {
            return Ok(None);
        };
        let (mut a, mut b, mut c) = (0usize, 0usize, 0usize);
        // SAFETY: three valid out-pointers.
        let code = unsafe { (lib.miopenGetVersion)(&mut a, &mut b, &mut c) };
        crate::error::check_miopen(&lib, "miopenGetVersion", code)?;
        Ok(Some(format!("{a}.{b}.{c}")))
    }

    /// RCCL, loaded on first use (see [`rocm_sys::loader::rccl_candidates`]); needed only for
    /// several GPUs, so a missing RCCL is an error of the multi-GPU calls alone.
    pub fn rccl(&self) -> Result<Arc<Rccl>> {
        self.rccl
            .get_or_init(|| Ok(Arc::new(Rccl::load_beside(&self.hip)?)))
            .clone()
    }

    /// RCCL's version as `major.minor.patch` (loads RCCL if needed).
    pub fn rccl_version(&self) -> Result<String> {
        let lib = self.rccl()?;
        lib.version_code()
            .map(rocm_sys::rccl::version_string)
            .map_err(|code| {
                crate::rccl::RcclError::call(&lib, "ncclGetVersion", -1, code, None).into()
            })
    }

    /// Records an error raised where it cannot be returned (in `Drop`).
    pub(crate) fn record_err(&self, e: RocmError) {
        let mut slot = self.deferred.lock();
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// Returns (and clears) the first error recorded by a `Drop` impl since the last call.
    pub fn check_err(&self) -> Result<()> {
        match self.deferred.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("hip", &self.hip.path())
            .field("init_error", &self.init_error)
            .finish_non_exhaustive()
    }
}
