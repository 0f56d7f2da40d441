//! The GEMM launcher behind `matmul`: rocBLAS's strided-batched GEMM, for f32, f64, f16 and
//! bf16, over typed buffers.
//!
//! Candle's tensors are row-major and rocBLAS is column-major, so `C = A * B` (row-major)
//! runs as `C^T = B^T * A^T`: rocBLAS's first operand is Candle's rhs. A transposed operand
//! (strides swapped) and a broadcast or strided batch are passed to rocBLAS as they are, with
//! no copy, whenever rocBLAS can express the layout; otherwise the error says which layout.
//! Decode-shaped products (up to 8 rows against a transposed rhs, or against a row-major one
//! such as attention's `att @ v`, in f32/f16/bf16) run our `gemv` kernels instead
//! ([`crate::launch::gemv`], [`crate::launch::gemv_nn`]).

use candle_core::Layout;
use rocm_safe::{DeviceBuffer, GemmType};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{checked_product, gemm_config, invalid};

/// The output element count `b * m * n` of a matmul, after checking that it and the dense
/// matrix sizes `m * k`, `n * k` fit in `usize`.
fn matmul_sizes((b, m, n, k): (usize, usize, usize, usize)) -> Result<usize, BackendError> {
    checked_product("matmul", "lhs matrix size (m * k)", &[m, k])?;
    checked_product("matmul", "rhs matrix size (k * n)", &[k, n])?;
    checked_product("matmul", "output element count (b * m * n)", &[b, m, n])
}

/// Runs the GEMM for buffers of one element type: our `gemv` kernels for decode-shaped
/// products ([`crate::launch::gemv::plan`], [`crate::launch::gemv_nn::plan`]), rocBLAS for
/// the rest.
pub fn gemm<T: GemmType + RocmDType>(
    dev: &RocmDevice,
    (b, m, n, k): (usize, usize, usize, usize),
    (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
    (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
) -> Result<DeviceBuffer<T>, BackendError> {
    let out_el = matmul_sizes((b, m, n, k))?;
    let cfg = gemm_config((b, m, n, k), lhs_l, rhs_l).ok_or_else(|| {
        invalid(
            "matmul",
            format_args!(
                "rocBLAS cannot take operands with strides {:?} and {:?} for (b, m, n, k) = \
                 {:?}; make them contiguous first",
                lhs_l.stride(),
                rhs_l.stride(),
                (b, m, n, k)
            ),
        )
    })?;
    let mut out = dev.alloc::<T>(out_el)?;
    if out_el == 0 {
        return Ok(out);
    }
    if k == 0 {
        dev.stream().memset_zeros(&mut out)?;
        return Ok(out);
    }
    let (l_off, r_off) = (lhs_l.start_offset(), rhs_l.start_offset());
    if l_off > lhs.len() || r_off > rhs.len() {
        return Err(invalid("matmul", "a start offset lies past its buffer"));
    }
    let (a, bb) = (rhs.slice(r_off..)?, lhs.slice(l_off..)?);
    if crate::settings::fast_kernels() {
        if let Some(p) = crate::launch::gemv::plan(&cfg, T::DTYPE) {
            crate::launch::gemv::run(dev, &cfg, &p, &a, &bb, &mut out)?;
            return Ok(out);
        }
        if let Some(p) = crate::launch::gemv_nn::plan(&cfg, T::DTYPE) {
            crate::launch::gemv_nn::run(dev, &cfg, &p, &a, &bb, &mut out)?;
            return Ok(out);
        }
    }
    // `gemm_strided_batched` checks that every matrix of the batch lies inside its operand.
    dev.blas(|h| h.gemm_strided_batched(&cfg, &a, &bb, &mut out))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    /// Huge (b, m, n, k) give [`BackendError::SizeOverflow`] (and no GEMM), never a wrapped
    /// size or a panic.
    #[test]
    fn size_overflow_is_a_typed_error() {
        let big = usize::MAX / 2 + 1;
        for bmnk in [(3, big, 4, 1), (1, big, 1, 4), (1, 1, big, 4)] {
            let e = matmul_sizes(bmnk).unwrap_err();
            assert!(
                matches!(e, BackendError::SizeOverflow { .. }),
                "{bmnk:?}: {e}"
            );
        }
        assert_eq!(matmul_sizes((2, 3, 5, 4)).unwrap(), 30);
        assert_eq!(matmul_sizes((0, big, big, 0)).unwrap(), 0);
        let (l, r) = (Layout::contiguous((3, 4)), Layout::contiguous((4, 5)));
        assert!(gemm_config((1, big, 5, 4), &l, &r).is_none());
        // A batch stride times a batch dim that overflows is not a dense batch.
        let l = Layout::new(Shape::from((2, 3, 3, 4)), vec![7, big, 4, 1], 0);
        let r = Layout::contiguous((2, 3, 4, 5));
        assert!(gemm_config((6, 3, 5, 4), &l, &r).is_none());
    }
}
