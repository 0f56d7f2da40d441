//! `matmul`: dispatch on the operands' dtype to the GEMM launcher ([`crate::launch::gemm`]),
//! for f32, f64, f16 and bf16; other dtypes are a typed error, as in Candle's CUDA backend.

use candle_core::Layout;

use crate::device::RocmDevice;
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;
use crate::launch::gemm::gemm;

/// `matmul` for (b, m, n, k): `lhs` is (b, m, k), `rhs` (b, k, n).
pub fn matmul(
    dev: &RocmDevice,
    (lhs, lhs_l): (&S, &Layout),
    (rhs, rhs_l): (&S, &Layout),
    bmnk: (usize, usize, usize, usize),
) -> Result<S, BackendError> {
    Ok(match (lhs, rhs) {
        (S::F32(a), S::F32(b)) => S::F32(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l))?),
        (S::F64(a), S::F64(b)) => S::F64(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l))?),
        (S::F16(a), S::F16(b)) => S::F16(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l))?),
        (S::BF16(a), S::BF16(b)) => S::BF16(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l))?),
        (a, b) if a.dtype() != b.dtype() => {
            return Err(BackendError::DtypeMismatch {
                op: "matmul",
                lhs: a.dtype(),
                rhs: b.dtype(),
            })
        }
        (a, _) => {
            return Err(BackendError::UnsupportedDtype {
                op: "matmul",
                dtype: a.dtype(),
            })
        }
    })
}
