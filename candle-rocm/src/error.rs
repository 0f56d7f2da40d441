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
    /// An operand's layout, indices or copy reaches past the end of its buffer.
    #[error(
        "{op}: the {what} reaches element {reach} of a buffer of {len}. To fix: the tensor's \
         layout does not match its storage; make it contiguous, or check the offsets and \
         strides passed to the op"
    )]
    OutOfBounds {
        /// The operation (or kernel).
        op: String,
        /// What reaches past the end: `layout`, `indices`, `copy`, ...
        what: &'static str,
        /// One past the last element reached.
        reach: usize,
        /// The buffer's length in elements.
        len: usize,
    },
    /// The operands' shapes do not fit together (or one does not have the rank the op takes).
    #[error("{op}: {detail}. To fix: check the operands' shapes")]
    Shape {
        /// The operation.
        op: String,
        /// What does not fit, with the shapes.
        detail: String,
    },
    /// A parameter of the op is missing, out of its range, or disagrees with the operands.
    #[error("{op}: {detail}. To fix: check the op's parameters against its operands")]
    Parameter {
        /// The operation.
        op: String,
        /// The parameter and what is wrong with it.
        detail: String,
    },
    /// A size is past what the kernels index (32-bit element indices, grid limits).
    #[error(
        "{op}: {what} exceeds the kernels' limits. To fix: split the tensor (e.g. with chunk or \
         narrow) and run the op on the parts"
    )]
    KernelLimit {
        /// The operation (or kernel).
        op: String,
        /// The size, with its value.
        what: String,
    },
    /// Any other input the op cannot take.
    #[error("{op}: {detail}")]
    Invalid {
        /// The operation.
        op: String,
        /// What is wrong and what to do.
        detail: String,
    },
    /// An error of candle-core's own (a layout operation, `RequiresContiguous`, ...), kept as
    /// it is: converting a [`BackendError`] back to `candle_core::Error` gives it back unwrapped.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
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
        self.map_err(|e| e.into().into_candle())
    }
}

impl From<BackendError> for candle_core::Error {
    fn from(e: BackendError) -> Self {
        e.into_candle()
    }
}

impl BackendError {
    /// As candle's error type: candle-core's own errors as they were, the rest wrapped
    /// (`Error::wrap`), so `downcast` gives the [`BackendError`] back.
    pub fn into_candle(self) -> candle_core::Error {
        match self {
            BackendError::Candle(e) => e,
            e => candle_core::Error::wrap(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candle_errors_come_back_unwrapped_and_ours_keep_their_facts() {
        let own = candle_core::Error::RequiresContiguous { op: "gather" };
        let back: candle_core::Error = BackendError::from(own).into();
        assert!(
            matches!(
                back,
                candle_core::Error::RequiresContiguous { op: "gather" }
            ),
            "{back:?}"
        );
        let e = BackendError::OutOfBounds {
            op: "affine".into(),
            what: "layout",
            reach: 12,
            len: 10,
        };
        let msg = candle_core::Error::from(e).to_string();
        assert!(
            msg.contains("affine: the layout reaches element 12 of a buffer of 10")
                && msg.contains("To fix"),
            "{msg}"
        );
        let e = BackendError::Parameter {
            op: "conv2d".into(),
            detail: "parameter stride = 0".into(),
        };
        assert!(e
            .to_string()
            .starts_with("conv2d: parameter stride = 0. To fix"));
    }
}
