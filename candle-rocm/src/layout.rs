//! Layout guards and checked sizes: every view a kernel reads or writes is proved to lie inside
//! its buffer here first, and every size computed from dims and parameters is checked not to
//! wrap. A leaf above errors: it knows no device and no op.

use candle_core::Layout;
use rocm_safe::{DeviceBuffer, DeviceRepr, DeviceView, GemmConfig, Transpose};

use crate::error::BackendError;

/// [`BackendError::Invalid`]: op `name` cannot take its input, for the reason `msg`.
pub(crate) fn invalid(name: &str, msg: impl std::fmt::Display) -> BackendError {
    BackendError::Invalid {
        op: name.to_string(),
        detail: msg.to_string(),
    }
}

/// [`BackendError::OutOfBounds`]: `what` (a layout, indices, a copy) of op `name` reaches
/// element `reach` of a buffer of `len`.
pub(crate) fn out_of_bounds(
    name: &str,
    what: &'static str,
    reach: usize,
    len: usize,
) -> BackendError {
    BackendError::OutOfBounds {
        op: name.to_string(),
        what,
        reach,
        len,
    }
}

/// [`BackendError::Shape`]: the operands of op `name` do not fit together.
pub(crate) fn shape_error(name: &str, detail: impl std::fmt::Display) -> BackendError {
    BackendError::Shape {
        op: name.to_string(),
        detail: detail.to_string(),
    }
}

/// [`BackendError::Parameter`]: a parameter of op `name` is wrong.
pub(crate) fn parameter_error(name: &str, detail: impl std::fmt::Display) -> BackendError {
    BackendError::Parameter {
        op: name.to_string(),
        detail: detail.to_string(),
    }
}

/// [`BackendError::KernelLimit`]: `what` of op `name` is past the kernels' limits.
pub(crate) fn kernel_limit(name: &str, what: impl std::fmt::Display) -> BackendError {
    BackendError::KernelLimit {
        op: name.to_string(),
        what: what.to_string(),
    }
}

/// Number of elements past `layout`'s start offset that its last element lies at, plus one
/// (0 for an empty layout).
fn span(layout: &Layout) -> usize {
    if layout.shape().elem_count() == 0 {
        return 0;
    }
    layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(d, s)| d.saturating_sub(1).saturating_mul(*s))
        .fold(1usize, usize::saturating_add)
}

/// The part of `buf` a layout addresses, starting at its offset, after checking that every
/// element the layout reaches lies inside the buffer (a kernel never reads out of bounds
/// because of a bad layout).
pub(crate) fn checked_view<'a, T: DeviceRepr>(
    name: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceView<'a, T>, BackendError> {
    let start = layout.start_offset();
    let end = start.saturating_add(span(layout));
    if end > buf.len() || start > buf.len() {
        return Err(out_of_bounds(name, "layout", end, buf.len()));
    }
    Ok(buf.slice(start..)?)
}

/// The contiguous elements `layout` covers (its offsets `o1..o2`), or an error naming `op`
/// when the layout is not contiguous (candle's `RequiresContiguous`).
pub(crate) fn contiguous_view<'a, T: DeviceRepr>(
    op: &'static str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceView<'a, T>, BackendError> {
    match layout.contiguous_offsets() {
        Some((o1, o2)) if o2 <= buf.len() => Ok(buf.slice(o1..o2)?),
        Some((_, o2)) => Err(out_of_bounds(op, "layout", o2, buf.len())),
        None => Err(candle_core::Error::RequiresContiguous { op }.bt().into()),
    }
}

/// The product of `factors`, the size `what` of `op` (e.g. "output element count"), or
/// [`BackendError::SizeOverflow`] when it does not fit in `usize`: sizes computed from dims
/// and parameters are never allowed to wrap. A zero factor makes the product 0 whatever the
/// others are (an empty tensor).
pub fn checked_product(
    op: &str,
    what: &'static str,
    factors: &[usize],
) -> Result<usize, BackendError> {
    // One pass when the product fits (a zero factor then gives 0 too); a product that
    // overflows before reaching a zero factor is still 0.
    if let Some(v) = factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
    {
        return Ok(v);
    }
    if factors.contains(&0) {
        return Ok(0);
    }
    let values: Vec<String> = factors.iter().map(usize::to_string).collect();
    Err(size_overflow(
        op,
        format_args!("{what} ({})", values.join(" * ")),
    ))
}

/// [`BackendError::SizeOverflow`] for `op`: `what`, with its values, overflows `usize`.
pub(crate) fn size_overflow(op: &str, what: impl std::fmt::Display) -> BackendError {
    BackendError::SizeOverflow {
        op: op.to_string(),
        what: what.to_string(),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    #[test]
    fn size_overflow_is_a_typed_error() {
        assert_eq!(checked_product("t", "size", &[2, 3, 4]).unwrap(), 24);
        assert_eq!(checked_product("t", "size", &[]).unwrap(), 1);
        // An empty tensor's size is 0 whatever its other dims are.
        assert_eq!(
            checked_product("t", "size", &[usize::MAX, usize::MAX, 0]).unwrap(),
            0
        );
        let e = checked_product(
            "upsample_nearest2d",
            "output element count (b * c * out_h * out_w)",
            &[2, 3, 1 << 32, 1 << 32],
        )
        .unwrap_err();
        match &e {
            BackendError::SizeOverflow { op, what } => {
                assert_eq!(op, "upsample_nearest2d");
                assert_eq!(
                    what,
                    "output element count (b * c * out_h * out_w) (2 * 3 * 4294967296 * 4294967296)"
                );
            }
            other => panic!("not a size overflow: {other:?}"),
        }
        // Through candle's error type the message keeps what overflowed and what to do.
        let msg = crate::error::WrapErr::w(Err::<(), _>(e))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("upsample_nearest2d: the output element count")
                && msg.contains("overflows usize")
                && msg.contains("To fix"),
            "{msg}"
        );
    }

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
}
