//! MIOpen, declared by hand: handle lifetime and stream binding for now.
//!
//! MIOpen is optional at run time: candle-rocm falls back to its own kernels when it is absent.
//! Values checked against MIOpen's `miopen.h` (stable since MIOpen 2.0).

use std::ffi::{c_char, c_void};

use crate::bindings::hip::hipStream_t;
use crate::library::Loaded;
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
pub type Miopen = Loaded<MiopenApi>;

impl Miopen {
    /// Loads MIOpen from its override variable, else from the HIP runtime's directory.
    ///
    /// Returns `Ok(None)` when the override variable is `none` (MIOpen disabled on purpose).
    pub fn load_beside(hip: &Hip) -> Result<Option<Miopen>, LoadError> {
        let kind = LibraryKind::Miopen;
        let over = std::env::var_os(kind.override_var()).filter(|v| !v.is_empty());
        if over.as_deref() == Some(std::ffi::OsStr::new("none")) {
            return Ok(None);
        }
        let candidates = loader::companion_candidates(kind, over.as_ref(), hip.dir());
        // SAFETY: the candidates carry libMIOpen names (or the user's override for one) and
        // the table above follows MIOpen's C API.
        unsafe {
            Loaded::open(kind, candidates, MiopenApi::resolve, |api| {
                api.miopenCreate as *const c_void
            })
        }
        .map(Some)
    }
}
