//! MIOpen, declared by hand: handle lifetime and stream binding for now.
//!
//! MIOpen is optional at run time: candle-rocm falls back to its own kernels when it is absent.
//! Values checked against MIOpen's `miopen.h` (stable since MIOpen 2.0).

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};

use crate::bindings::hip::hipStream_t;
use crate::loader::{self, LibraryKind, LoadError};
use crate::rocblas::int_newtype;
use crate::table::api_table;
use crate::Hip;

/// Opaque MIOpen context.
pub type miopenHandle_t = *mut c_void;
/// MIOpen's name for a HIP stream.
pub type miopenAcceleratorQueue_t = hipStream_t;

int_newtype! {
    /// `miopenStatus_t`.
    miopenStatus_t(u32) {
        /// Success.
        miopenStatusSuccess = 0,
        /// Data not initialised.
        miopenStatusNotInitialized = 1,
        /// Incorrect variable value.
        miopenStatusInvalidValue = 2,
        /// Incorrect parameter detected.
        miopenStatusBadParm = 3,
        /// Memory allocation error.
        miopenStatusAllocFailed = 4,
        /// MIOpen failure.
        miopenStatusInternalError = 5,
        /// Use of unimplemented feature.
        miopenStatusNotImplemented = 6,
        /// Unknown error occurred.
        miopenStatusUnknownError = 7,
        /// Unsupported operator for fusion.
        miopenStatusUnsupportedOp = 8,
        /// An operation was skipped.
        miopenStatusGpuOperationsSkipped = 9,
        /// Version mismatch of the supplied binary data argument.
        miopenStatusVersionMismatch = 10,
    }
}

api_table! {
    /// Entry points of MIOpen, resolved from `libMIOpen` at run time.
    pub struct MiopenApi;
    required extern "C" {
        pub fn miopenCreate(handle: *mut miopenHandle_t) -> miopenStatus_t;
        pub fn miopenCreateWithStream(handle: *mut miopenHandle_t, stream: miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenDestroy(handle: miopenHandle_t) -> miopenStatus_t;
        pub fn miopenSetStream(handle: miopenHandle_t, stream: miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenGetStream(handle: miopenHandle_t, stream: *mut miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenGetVersion(major: *mut usize, minor: *mut usize, patch: *mut usize) -> miopenStatus_t;
        pub fn miopenGetErrorString(error: miopenStatus_t) -> *const c_char;
    }
    optional extern "C" {
    }
}

/// The MIOpen library, loaded from beside the HIP runtime.
pub struct Miopen {
    api: MiopenApi,
    path: PathBuf,
    // Declared last: the function pointers above must not outlive the library.
    _lib: libloading::Library,
}

impl Miopen {
    /// Loads MIOpen from its override variable, else from the HIP runtime's directory.
    ///
    /// Returns `Ok(None)` when the override variable is `none` (MIOpen disabled on purpose).
    pub fn load_beside(hip: &Hip) -> Result<Option<Miopen>, LoadError> {
        let over = std::env::var_os(LibraryKind::Miopen.override_var()).filter(|v| !v.is_empty());
        if over.as_deref() == Some(std::ffi::OsStr::new("none")) {
            return Ok(None);
        }
        let candidates =
            loader::companion_candidates(LibraryKind::Miopen, over.as_ref(), hip.dir());
        let (lib, candidate) = loader::open_first(LibraryKind::Miopen, candidates)?;
        // SAFETY: `lib` opened under a libMIOpen name (or the user's override for one); the
        // declarations above follow MIOpen's C API, and `lib` outlives the pointers.
        let api =
            unsafe { MiopenApi::resolve(&lib) }.map_err(|names| LoadError::MissingSymbols {
                library: LibraryKind::Miopen,
                path: candidate.path.clone(),
                names,
            })?;
        let path =
            loader::path_of_symbol(api.miopenCreate as *const c_void).unwrap_or(candidate.path);
        Ok(Some(Miopen {
            api,
            path,
            _lib: lib,
        }))
    }

    /// The file MIOpen was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for Miopen {
    type Target = MiopenApi;
    fn deref(&self) -> &MiopenApi {
        &self.api
    }
}

impl std::fmt::Debug for Miopen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Miopen")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
