//! Errors of the backend, and their conversion into `candle_core::Error`.

use candle_core::DType;
use rocm_safe::RocmError;

use crate::registry::KernelError;

/// Everything the backend can report.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The ROCm runtime or a device call failed.
    #[error(transparent)]
    Rocm(#[from] RocmError),
    /// A kernel module could not be found or loaded.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The operation has no kernel for this dtype.
    #[error(
        "{op} is not available for dtype {dtype:?} on ROCm. To fix: convert the tensor with \
         to_dtype first (e.g. to f32)"
    )]
    UnsupportedDtype {
        /// The operation.
        op: &'static str,
        /// The dtype.
        dtype: DType,
    },
    /// An op has no ROCm implementation and strict mode forbids the CPU fallback.
    #[error(
        "{op} has no ROCm implementation for these operands and CANDLE_ROCM_STRICT=1 forbids \
         running it on the CPU. To fix: unset CANDLE_ROCM_STRICT to allow the slower CPU \
         fallback, or convert the operands (e.g. to_dtype(F32), contiguous())"
    )]
    CpuFallback {
        /// The op's name.
        op: String,
    },
    /// Operands of one operation have different dtypes.
    #[error("{op}: operands have different dtypes ({lhs:?} and {rhs:?})")]
    DtypeMismatch {
        /// The operation.
        op: &'static str,
        /// First operand's dtype.
        lhs: DType,
        /// Second operand's dtype.
        rhs: DType,
    },
    /// A size computed from an op's dims and parameters (an output's element count, a
    /// buffer's length, a batch stride) does not fit in `usize`.
    #[error(
        "{op}: the {what} overflows usize. To fix: the operands or the op's parameters \
         (output size, kernel size, stride, padding) are far too large; check them, or split \
         the tensor (e.g. with chunk or narrow) and run the op on the parts"
    )]
    SizeOverflow {
        /// The operation.
        op: String,
        /// Which size overflowed, with the values it is computed from.
        what: String,
    },
}

/// Converts backend results into Candle's error type (`Error::wrap`), like candle-core's
/// CUDA backend does with its own `WrapErr`.
pub trait WrapErr<T> {
    /// Wraps the error.
    fn w(self) -> candle_core::Result<T>;
}

impl<T, E: Into<BackendError>> WrapErr<T> for Result<T, E> {
    fn w(self) -> candle_core::Result<T> {
        self.map_err(|e| candle_core::Error::wrap(e.into()))
    }
}
