//! Raw, run-time loaded FFI to the ROCm libraries: the HIP runtime (`libamdhip64`), rocBLAS,
//! MIOpen and RCCL.
//!
//! Nothing here links against ROCm: every library is opened with `dlopen` (through
//! [libloading](https://docs.rs/libloading)) when first needed, so a program using this crate
//! builds and starts on any Linux machine and reports a typed [`LoadError`] when ROCm is absent.
//!
//! | layer | crate | what it holds |
//! |---|---|---|
//! | raw | **rocm-sys** | C types, status newtypes, entry-point tables, the loader |
//! | safe | rocm-safe | RAII devices, streams, buffers, modules, BLAS handles, allocator |
//! | backend | candle-rocm | Candle's `BackendDevice`/`BackendStorage` on top of rocm-safe |
//!
//! Entry points keep their C names and are called through the loaded table:
//!
//! ```no_run
//! let hip = rocm_sys::Hip::load()?;
//! let mut count = 0;
//! // SAFETY: `count` is a valid out-pointer.
//! let status = unsafe { (hip.hipGetDeviceCount)(&mut count) };
//! println!("{} -> {}", hip.error_name(status), count);
//! # Ok::<(), rocm_sys::LoadError>(())
//! ```
//!
//! Status codes (`hipError_t`, [`rocblas::rocblas_status`], [`miopen::miopenStatus_t`],
//! [`rccl::ncclResult_t`]) are transparent integer newtypes: a code a newer release adds is a
//! value, never undefined behaviour.
//!
//! Override variables (a file path, or a directory holding the library):
//! [`loader::HIP_OVERRIDE_VAR`] (`ROCM_SYS_HIP_LIB`), [`loader::ROCBLAS_OVERRIDE_VAR`]
//! (`ROCM_SYS_ROCBLAS_LIB`), [`loader::MIOPEN_OVERRIDE_VAR`] (`ROCM_SYS_MIOPEN_LIB`, `none`
//! disables MIOpen), [`loader::RCCL_OVERRIDE_VAR`] (`ROCM_SYS_RCCL_LIB`).

// C names are kept verbatim: a reader can grep the ROCm headers for any item here.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

pub mod bindings;
mod hip;
mod library;
pub mod loader;
pub mod miopen;
pub mod props;
pub mod rccl;
pub mod rocblas;
mod table;

pub use bindings::hip::*;
pub use hip::Hip;
pub use library::Loaded;
pub use loader::{LibraryKind, LoadError};
pub use miopen::Miopen;
pub use rccl::Rccl;
pub use rocblas::Rocblas;

impl hipError_t {
    /// Whether this is `hipSuccess`.
    pub fn is_success(self) -> bool {
        self == hipError_t::hipSuccess
    }
}
