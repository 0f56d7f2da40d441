//! rocBLAS, declared by hand (Debian 12 packages no rocBLAS headers to generate from).
//!
//! Only the entry points candle-rocm uses are declared. Every enum value below was checked
//! against rocBLAS's `rocblas-types.h` and `rocblas-auxiliary.h` (ROCm 5.2-era, 6.x and 7.x
//! headers: the values below are identical in all three; `excluded_from_build` and
//! `arch_mismatch` appeared with ROCm 5.7). They are plain integer newtypes so a value a newer
//! rocBLAS adds is never undefined behaviour. The 8-bit float types moved between releases and
//! are deliberately not declared.

use std::ffi::{c_char, c_void};

use crate::bindings::hip::hipStream_t;
use crate::library::Loaded;
use crate::loader::{self, LibraryKind, LoadError};
use crate::table::api_table;
use crate::Hip;

/// Opaque rocBLAS context (`struct _rocblas_handle*`).
pub type rocblas_handle = *mut c_void;
/// rocBLAS's 32-bit integer (LP64 build; the ILP64 API uses `_64` suffixed entry points).
pub type rocblas_int = i32;
/// Stride between matrices of a batch, in elements.
pub type rocblas_stride = i64;

macro_rules! int_newtype {
    ($(#[$m:meta])* $name:ident($repr:ty) { $($(#[$vm:meta])* $v:ident = $n:expr,)* }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub $repr);
        #[allow(non_upper_case_globals)]
        impl $name {
            $( $(#[$vm])* pub const $v: $name = $name($n); )*
            /// The C name of a known value, `None` for values this crate does not know.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $n => Some(stringify!($v)), )*
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use int_newtype;

int_newtype! {
    /// `rocblas_status`.
    rocblas_status(u32) {
        /// Success.
        rocblas_status_success = 0,
        /// Handle not initialised, invalid or null.
        rocblas_status_invalid_handle = 1,
        /// Function is not implemented.
        rocblas_status_not_implemented = 2,
        /// Invalid pointer argument.
        rocblas_status_invalid_pointer = 3,
        /// Invalid size argument.
        rocblas_status_invalid_size = 4,
        /// Failed internal memory allocation, copy or dealloc.
        rocblas_status_memory_error = 5,
        /// Other internal library failure.
        rocblas_status_internal_error = 6,
        /// Performance degraded due to low device memory.
        rocblas_status_perf_degraded = 7,
        /// Unmatched start/stop size query.
        rocblas_status_size_query_mismatch = 8,
        /// Queried device memory size increased.
        rocblas_status_size_increased = 9,
        /// Queried device memory size unchanged.
        rocblas_status_size_unchanged = 10,
        /// Passed argument not valid.
        rocblas_status_invalid_value = 11,
        /// Nothing preventing function to proceed.
        rocblas_status_continue = 12,
        /// Numerical check failed.
        rocblas_status_check_numerics_fail = 13,
        /// Function excluded from this build.
        rocblas_status_excluded_from_build = 14,
        /// The GPU architecture is not supported by this rocBLAS build.
        rocblas_status_arch_mismatch = 15,
    }
}

int_newtype! {
    /// `rocblas_operation`.
    rocblas_operation(u32) {
        /// Use the matrix as is.
        rocblas_operation_none = 111,
        /// Transpose.
        rocblas_operation_transpose = 112,
        /// Conjugate transpose.
        rocblas_operation_conjugate_transpose = 113,
    }
}

int_newtype! {
    /// `rocblas_datatype`.
    rocblas_datatype(u32) {
        /// 16-bit float.
        rocblas_datatype_f16_r = 150,
        /// 32-bit float.
        rocblas_datatype_f32_r = 151,
        /// 64-bit float.
        rocblas_datatype_f64_r = 152,
        /// Complex 16-bit float.
        rocblas_datatype_f16_c = 153,
        /// Complex 32-bit float.
        rocblas_datatype_f32_c = 154,
        /// Complex 64-bit float.
        rocblas_datatype_f64_c = 155,
        /// Signed 8-bit integer.
        rocblas_datatype_i8_r = 160,
        /// Unsigned 8-bit integer.
        rocblas_datatype_u8_r = 161,
        /// Signed 32-bit integer.
        rocblas_datatype_i32_r = 162,
        /// Unsigned 32-bit integer.
        rocblas_datatype_u32_r = 163,
        /// Complex signed 8-bit integer.
        rocblas_datatype_i8_c = 164,
        /// Complex unsigned 8-bit integer.
        rocblas_datatype_u8_c = 165,
        /// Complex signed 32-bit integer.
        rocblas_datatype_i32_c = 166,
        /// Complex unsigned 32-bit integer.
        rocblas_datatype_u32_c = 167,
        /// bfloat16.
        rocblas_datatype_bf16_r = 168,
        /// Complex bfloat16.
        rocblas_datatype_bf16_c = 169,
        /// Invalid type.
        rocblas_datatype_invalid = 255,
    }
}

int_newtype! {
    /// `rocblas_gemm_algo`.
    rocblas_gemm_algo(u32) {
        /// Default algorithm selection.
        rocblas_gemm_algo_standard = 0,
        /// Use the solution index passed in.
        rocblas_gemm_algo_solution_index = 1,
    }
}

int_newtype! {
    /// `rocblas_pointer_mode`: where alpha and beta live.
    rocblas_pointer_mode(u32) {
        /// Scalars are host pointers.
        rocblas_pointer_mode_host = 0,
        /// Scalars are device pointers.
        rocblas_pointer_mode_device = 1,
    }
}

/// `rocblas_gemm_flags`: no flags.
pub const rocblas_gemm_flags_none: u32 = 0x0;

api_table! {
    /// Entry points of rocBLAS, resolved from `librocblas` at run time.
    pub struct RocblasApi;
    required extern "C" {
        pub fn rocblas_create_handle(handle: *mut rocblas_handle) -> rocblas_status;
        pub fn rocblas_destroy_handle(handle: rocblas_handle) -> rocblas_status;
        pub fn rocblas_set_stream(handle: rocblas_handle, stream: hipStream_t) -> rocblas_status;
        pub fn rocblas_get_stream(handle: rocblas_handle, stream: *mut hipStream_t) -> rocblas_status;
        pub fn rocblas_set_pointer_mode(handle: rocblas_handle, mode: rocblas_pointer_mode) -> rocblas_status;
        pub fn rocblas_get_version_string_size(len: *mut usize) -> rocblas_status;
        pub fn rocblas_get_version_string(buf: *mut c_char, len: usize) -> rocblas_status;
        pub fn rocblas_gemm_strided_batched_ex(
            handle: rocblas_handle,
            trans_a: rocblas_operation,
            trans_b: rocblas_operation,
            m: rocblas_int,
            n: rocblas_int,
            k: rocblas_int,
            alpha: *const c_void,
            a: *const c_void,
            a_type: rocblas_datatype,
            lda: rocblas_int,
            stride_a: rocblas_stride,
            b: *const c_void,
            b_type: rocblas_datatype,
            ldb: rocblas_int,
            stride_b: rocblas_stride,
            beta: *const c_void,
            c: *const c_void,
            c_type: rocblas_datatype,
            ldc: rocblas_int,
            stride_c: rocblas_stride,
            d: *mut c_void,
            d_type: rocblas_datatype,
            ldd: rocblas_int,
            stride_d: rocblas_stride,
            batch_count: rocblas_int,
            compute_type: rocblas_datatype,
            algo: rocblas_gemm_algo,
            solution_index: i32,
            flags: u32,
        ) -> rocblas_status;
    }
    optional extern "C" {
        pub fn rocblas_status_to_string(status: rocblas_status) -> *const c_char;
        pub fn rocblas_initialize();
    }
}

/// The rocBLAS library, loaded from beside the HIP runtime.
pub type Rocblas = Loaded<RocblasApi>;

impl Rocblas {
    /// Loads rocBLAS from its override variable, else from the HIP runtime's directory.
    pub fn load_beside(hip: &Hip) -> Result<Rocblas, LoadError> {
        let kind = LibraryKind::Rocblas;
        let over = std::env::var_os(kind.override_var()).filter(|v| !v.is_empty());
        let candidates = loader::companion_candidates(kind, over.as_ref(), hip.dir());
        // SAFETY: the candidates carry librocblas names (or the user's override for one) and
        // the table above follows rocBLAS's C API.
        unsafe {
            Loaded::open(kind, candidates, RocblasApi::resolve, |api| {
                api.rocblas_create_handle as *const c_void
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_and_unknown_codes() {
        assert_eq!(
            rocblas_status::rocblas_status_arch_mismatch.name(),
            Some("rocblas_status_arch_mismatch")
        );
        assert_eq!(rocblas_status(9999).name(), None);
        assert_eq!(rocblas_datatype::rocblas_datatype_bf16_r.0, 168);
        assert_eq!(rocblas_operation::rocblas_operation_transpose.0, 112);
    }

    #[test]
    fn table_lists_required_gemm() {
        assert!(RocblasApi::REQUIRED.contains(&"rocblas_gemm_strided_batched_ex"));
        assert!(RocblasApi::OPTIONAL.contains(&"rocblas_status_to_string"));
    }
}
