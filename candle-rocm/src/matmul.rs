//! `matmul` on rocBLAS's strided-batched GEMM, for f32, f64, f16 and bf16.
//!
//! Candle's tensors are row-major and rocBLAS is column-major, so `C = A * B` (row-major)
//! runs as `C^T = B^T * A^T`: rocBLAS's first operand is Candle's rhs. A transposed operand
//! (strides swapped) and a broadcast or strided batch are passed to rocBLAS as they are, with
//! no copy, whenever rocBLAS can express the layout; otherwise the error says which layout.
//! Decode-shaped products (up to 8 rows against a transposed rhs, in f32/f16/bf16) run our
//! `gemv` kernels instead ([`crate::gemv`]).

use candle_core::backend::BackendStorage;
use candle_core::Layout;
use rocm_safe::{DeviceBuffer, GemmConfig, GemmType, Transpose};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::ops::invalid;
use crate::storage::{RocmDType, RocmStorage, RocmStorageSlice as S};
use crate::utils::checked_product;

/// The GEMM for `(b, m, n, k)` with `lhs` (b, m, k) and `rhs` (b, k, n) laid out as given,
/// offsets excluded; or `None` when a layout has no strided-batched form or a matrix size
/// overflows `usize` ([`gemm`] reports the latter as [`BackendError::SizeOverflow`] first).
pub fn gemm_config(
    (b, m, n, k): (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Option<GemmConfig> {
    let (ls, rs) = (lhs_l.stride(), rhs_l.stride());
    if ls.len() < 2 || rs.len() < 2 {
        return None;
    }
    let (lhs_m1, lhs_m2) = (ls[ls.len() - 1], ls[ls.len() - 2]);
    let (rhs_m1, rhs_m2) = (rs[rs.len() - 1], rs[rs.len() - 2]);
    // rocBLAS's A is Candle's rhs seen column-major: (n, k) with leading dimension lda.
    let (lda, trans_a) = if (rhs_m1 == 1 || n == 1) && (rhs_m2 == n || k == 1) {
        (n, Transpose::No)
    } else if (rhs_m1 == k || n == 1) && (rhs_m2 == 1 || k == 1) {
        (k, Transpose::Yes)
    } else {
        return None;
    };
    // rocBLAS's B is Candle's lhs: (k, m) column-major.
    let (ldb, trans_b) = if (lhs_m1 == 1 || k == 1) && (lhs_m2 == k || m == 1) {
        (k, Transpose::No)
    } else if (lhs_m1 == m || k == 1) && (lhs_m2 == 1 || m == 1) {
        (m, Transpose::Yes)
    } else {
        return None;
    };
    let batch_stride = |l: &Layout, dense: usize| -> Option<usize> {
        let (dims, strides) = (l.dims(), l.stride());
        let batch_dims = &dims[..dims.len() - 2];
        let batch_strides = &strides[..strides.len() - 2];
        match (batch_dims, batch_strides) {
            ([], []) => Some(dense),
            ([_], [s]) => Some(*s),
            ([d0, d1], [s0, s1]) if s1.checked_mul(*d1) == Some(*s0) => Some(*s1),
            ([1, _], [_, s1]) => Some(*s1),
            ([_, 1], [s0, _]) => Some(*s0),
            // Every batch dim but one has size 1.
            (ds, ss) => {
                let mut big = ds.iter().zip(ss).filter(|(d, _)| **d != 1);
                match (big.next(), big.next()) {
                    (None, _) => Some(dense),
                    (Some((_, s)), None) => Some(*s),
                    _ => None,
                }
            }
        }
    };
    let stride_b = batch_stride(lhs_l, m.checked_mul(k)?)?;
    let stride_a = batch_stride(rhs_l, n.checked_mul(k)?)?;
    let stride_c = m.checked_mul(n)?;
    Some(GemmConfig {
        trans_a,
        trans_b,
        m: n,
        n: m,
        k,
        alpha: 1.0,
        beta: 0.0,
        lda: lda.max(1),
        ldb: ldb.max(1),
        ldc: n.max(1),
        stride_a,
        stride_b,
        stride_c,
        batch: b,
    })
}

/// The output element count `b * m * n` of a matmul, after checking that it and the dense
/// matrix sizes `m * k`, `n * k` fit in `usize`.
fn matmul_sizes((b, m, n, k): (usize, usize, usize, usize)) -> Result<usize, BackendError> {
    checked_product("matmul", "lhs matrix size (m * k)", &[m, k])?;
    checked_product("matmul", "rhs matrix size (k * n)", &[k, n])?;
    checked_product("matmul", "output element count (b * m * n)", &[b, m, n])
}

/// Runs the GEMM for buffers of one element type: our `gemv` kernels for decode-shaped
/// products ([`crate::gemv::plan`]), rocBLAS for the rest.
fn gemm<T: GemmType + RocmDType>(
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
    if crate::registry::fast_kernels() {
        if let Some(p) = crate::gemv::plan(&cfg, T::DTYPE) {
            crate::gemv::run(dev, &cfg, &p, &a, &bb, &mut out)?;
            return Ok(out);
        }
    }
    // `gemm_strided_batched` checks that every matrix of the batch lies inside its operand.
    dev.blas(|h| h.gemm_strided_batched(&cfg, &a, &bb, &mut out))?;
    Ok(out)
}

impl RocmStorage {
    /// `matmul` for (b, m, n, k): `self` is (b, m, k), `rhs` (b, k, n).
    pub(crate) fn matmul_impl(
        &self,
        rhs: &RocmStorage,
        bmnk: (usize, usize, usize, usize),
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> candle_core::Result<RocmStorage> {
        let dev = self.device();
        let slice = match (&self.slice, &rhs.slice) {
            (S::F32(a), S::F32(b)) => S::F32(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l)).w()?),
            (S::F64(a), S::F64(b)) => S::F64(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l)).w()?),
            (S::F16(a), S::F16(b)) => S::F16(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l)).w()?),
            (S::BF16(a), S::BF16(b)) => S::BF16(gemm(dev, bmnk, (a, lhs_l), (b, rhs_l)).w()?),
            (a, b) if a.dtype() != b.dtype() => {
                return Err(BackendError::DtypeMismatch {
                    op: "matmul",
                    lhs: a.dtype(),
                    rhs: b.dtype(),
                })
                .w()
            }
            (a, _) => {
                return Err(BackendError::UnsupportedDtype {
                    op: "matmul",
                    dtype: a.dtype(),
                })
                .w()
            }
        };
        Ok(RocmStorage::new(slice, dev.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    #[test]
    fn contiguous_operands() {
        let (l, r) = (Layout::contiguous((2, 3, 4)), Layout::contiguous((2, 4, 5)));
        let c = gemm_config((2, 3, 5, 4), &l, &r).unwrap();
        assert_eq!((c.trans_a, c.trans_b), (Transpose::No, Transpose::No));
        assert_eq!((c.m, c.n, c.k, c.lda, c.ldb, c.ldc), (5, 3, 4, 5, 4, 5));
        assert_eq!(
            (c.stride_a, c.stride_b, c.stride_c, c.batch),
            (20, 12, 15, 2)
        );
    }

    #[test]
    fn transposed_operands_need_no_copy() {
        let l = Layout::contiguous((2, 4, 3)).transpose(1, 2).unwrap();
        let r = Layout::contiguous((2, 5, 4)).transpose(1, 2).unwrap();
        let c = gemm_config((2, 3, 5, 4), &l, &r).unwrap();
        assert_eq!((c.trans_a, c.trans_b), (Transpose::Yes, Transpose::Yes));
        assert_eq!((c.lda, c.ldb), (4, 3));
    }

    #[test]
    fn broadcast_batch_has_stride_zero() {
        let l = Layout::new(Shape::from((3, 2, 4)), vec![0, 4, 1], 0);
        let r = Layout::contiguous((3, 4, 5));
        let c = gemm_config((3, 2, 5, 4), &l, &r).unwrap();
        assert_eq!((c.stride_b, c.stride_a), (0, 20));
    }

    #[test]
    fn inexpressible_layouts_are_refused() {
        let l = Layout::new(Shape::from((1, 3, 4)), vec![12, 2, 3], 0);
        let r = Layout::contiguous((1, 4, 5));
        assert!(gemm_config((1, 3, 5, 4), &l, &r).is_none());
    }

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
