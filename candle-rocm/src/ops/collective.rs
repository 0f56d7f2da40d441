//! Collectives between GPUs (RCCL through [`rocm_safe::rccl`]) over storage slices: all-reduce,
//! all-gather and reduce-scatter along the first dimension, and broadcast, for every stored
//! dtype RCCL can move.
//!
//! Each op reads a contiguous input (any start offset) and returns a new buffer, queued on the
//! device's stream like every other op: the result is ordered before later work on the device
//! and nothing waits here. [`Communicator::wait`] is where a dead peer becomes an error; call
//! it (through the slot's `Comm::wait`) where a step ends.
//!
//! A sum of f32, f16 or bf16 small enough runs as one kernel over the peers' memory instead of
//! RCCL when the communicator has a [`PeerReduce`] (see `ops::peer_reduce`), and so does a
//! small all-gather of those dtypes, as the sum of every rank's input placed in zeros.
//!
//! Reductions take the float types (f32, f64, f16, bf16) and u8, u32, i32, i64; i16 and f8e4m3
//! are moved bytewise by all-gather and broadcast but not reduced (RCCL has no 16-bit integer
//! type, and its 8-bit floats are FNUZ on MI300, not Candle's OCP e4m3): a typed error says so.

use candle_core::{Layout, Shape};
use rocm_safe::rccl::{Communicator, RcclType, ReduceOp};
use rocm_safe::{DeviceSlice, DeviceSliceMut};

use crate::device::RocmDevice;
use crate::dtype::{for_each_slice, RocmDType, RocmStorageSlice};
use crate::error::BackendError;
use crate::layout::{parameter_error, shape_error};
use crate::ops::peer_reduce::PeerReduce;

/// A collective over one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// Every rank gets the element-wise reduction of every rank's tensor (same shape).
    AllReduce(ReduceOp),
    /// Every rank gets every rank's tensor, concatenated along dimension 0 in rank order.
    AllGather,
    /// The element-wise reduction, split along dimension 0 into one block per rank; rank `i`
    /// gets block `i` (dimension 0 must divide by the world size).
    ReduceScatter(ReduceOp),
    /// Every rank gets rank `root`'s tensor (same shape on every rank).
    Broadcast {
        /// The rank whose tensor is sent.
        root: usize,
    },
}

impl Collective {
    /// The op's name in errors.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter(_) => "reduce-scatter",
            Collective::Broadcast { .. } => "broadcast",
        }
    }

    /// The output shape for an input of `shape` among `world_size` ranks.
    pub fn output_shape(self, shape: &Shape, world_size: usize) -> Result<Shape, BackendError> {
        let name = self.name();
        match self {
            Collective::AllReduce(_) | Collective::Broadcast { .. } => Ok(shape.clone()),
            Collective::AllGather | Collective::ReduceScatter(_) => {
                let mut dims = shape.dims().to_vec();
                let Some(first) = dims.first_mut() else {
                    return Err(shape_error(
                        name,
                        "a scalar has no dimension 0 to gather or scatter along: reshape it to (1,)",
                    ));
                };
                if self == Collective::AllGather {
                    *first = first.checked_mul(world_size).ok_or_else(|| {
                        shape_error(name, format!("{shape:?} x {world_size} ranks overflows"))
                    })?;
                } else if world_size == 0 || *first % world_size != 0 {
                    return Err(shape_error(
                        name,
                        format!(
                            "dimension 0 of {shape:?} does not divide into {world_size} equal \
                             blocks, one per rank"
                        ),
                    ));
                } else {
                    *first /= world_size;
                }
                Ok(Shape::from(dims))
            }
        }
    }
}

/// Runs `op` on `src` (laid out by `layout`) with `comm` (or `peer`'s kernel, for the sums it
/// takes), on `dev`'s stream: the new buffer and its shape.
pub fn run(
    dev: &RocmDevice,
    comm: &Communicator,
    peer: Option<&PeerReduce>,
    op: Collective,
    src: &RocmStorageSlice,
    layout: &Layout,
) -> Result<(RocmStorageSlice, Shape), BackendError> {
    let name = op.name();
    if comm.stream().id() != dev.stream().id() {
        return Err(parameter_error(
            name,
            format!(
                "the communicator runs on device {} (stream {}), the tensor is on device {} \
                 (stream {}): create the communicator for the tensor's device (Comm::new)",
                comm.device().ordinal(),
                comm.stream().id(),
                dev.ordinal(),
                dev.stream().id()
            ),
        ));
    }
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Err(parameter_error(
            name,
            "the input must be contiguous: call .contiguous() on it first",
        ));
    };
    let shape = op.output_shape(layout.shape(), comm.world_size())?;
    let out_len = shape.elem_count();
    let slice = for_each_slice!(src, b => {
        let input = b.slice(start..end)?;
        let mut out = dev.alloc(out_len)?;
        match op {
            Collective::AllReduce(r) => all_reduce(dev, comm, peer, &input, &mut out, r)?,
            Collective::AllGather => all_gather(dev, comm, peer, &input, &mut out)?,
            Collective::ReduceScatter(r) => comm.reduce_scatter(&input, &mut out, r)?,
            Collective::Broadcast { root } => comm.broadcast(&input, &mut out, root)?,
        }
        RocmStorageSlice::from_buffer(out)
    });
    Ok((slice, shape))
}

/// The all-reduce of `x` followed by candle-nn's `add_rms_norm` with `residual` and `alpha`
/// (each a slice laid out by its layout: contiguous, `x` and `residual` of one shape, `alpha`
/// its last dimension) as `peer`'s one launch: a new buffer of shape (2, ..x's shape) holding
/// the residual sums, then the norms (as candle-nn's fused `add_rms_norm` returns them).
pub fn all_reduce_add_rms_norm(
    dev: &RocmDevice,
    peer: &PeerReduce,
    (x, lx): (&RocmStorageSlice, &Layout),
    (residual, lr): (&RocmStorageSlice, &Layout),
    (alpha, la): (&RocmStorageSlice, &Layout),
    eps: f32,
) -> Result<(RocmStorageSlice, Shape), BackendError> {
    let name = "all_reduce_add_rms_norm";
    let dims = lx.shape().dims();
    let Some(&cols) = dims.last() else {
        return Err(shape_error(name, "a scalar has no rows to normalise"));
    };
    if lr.shape() != lx.shape() || la.shape().dims() != [cols] {
        return Err(shape_error(
            name,
            format!(
                "x {:?}, residual {:?}, alpha {:?}: the residual must have x's shape and alpha \
                 x's last dimension",
                lx.shape(),
                lr.shape(),
                la.shape()
            ),
        ));
    }
    let span = |l: &Layout| {
        l.contiguous_offsets().ok_or_else(|| {
            parameter_error(
                name,
                "every operand must be contiguous: call .contiguous() first",
            )
        })
    };
    let (sx, sr, sa) = (span(lx)?, span(lr)?, span(la)?);
    let rows = lx.shape().elem_count() / cols.max(1);
    let mut out_dims = vec![2];
    out_dims.extend_from_slice(dims);
    fn run_t<T: RocmDType>(
        dev: &RocmDevice,
        peer: &PeerReduce,
        (x, r, a): (&RocmStorageSlice, &RocmStorageSlice, &RocmStorageSlice),
        (sx, sr, sa): ((usize, usize), (usize, usize), (usize, usize)),
        shape: (usize, usize),
        eps: f32,
    ) -> Result<RocmStorageSlice, BackendError> {
        let mismatch = || BackendError::DtypeMismatch {
            op: "all_reduce_add_rms_norm",
            lhs: x.dtype(),
            rhs: if T::as_buffer(r).is_none() {
                r.dtype()
            } else {
                a.dtype()
            },
        };
        let (Some(bx), Some(br), Some(ba)) = (T::as_buffer(x), T::as_buffer(r), T::as_buffer(a))
        else {
            return Err(mismatch());
        };
        let (vx, vr, va) = (
            bx.slice(sx.0..sx.1)?,
            br.slice(sr.0..sr.1)?,
            ba.slice(sa.0..sa.1)?,
        );
        let mut out = dev.alloc::<T>(2 * shape.0 * shape.1)?;
        peer.all_reduce_add_rms_norm(dev, &vx, &vr, &va, &mut out, shape, eps)?;
        Ok(T::wrap_slice(out))
    }
    let ops = (x, residual, alpha);
    let spans = (sx, sr, sa);
    let slice = match x.dtype() {
        candle_core::DType::F32 => run_t::<f32>(dev, peer, ops, spans, (rows, cols), eps)?,
        candle_core::DType::F16 => run_t::<half::f16>(dev, peer, ops, spans, (rows, cols), eps)?,
        candle_core::DType::BF16 => run_t::<half::bf16>(dev, peer, ops, spans, (rows, cols), eps)?,
        dtype => return Err(BackendError::UnsupportedDtype { dtype, op: name }),
    };
    Ok((slice, Shape::from(out_dims)))
}

/// An all-reduce: `peer`'s one-shot kernel when it takes the op, dtype and size, else RCCL.
fn all_reduce<T: RocmDType + RcclType>(
    dev: &RocmDevice,
    comm: &Communicator,
    peer: Option<&PeerReduce>,
    input: &impl DeviceSlice<T>,
    out: &mut impl DeviceSliceMut<T>,
    op: ReduceOp,
) -> Result<(), BackendError> {
    match peer {
        Some(p) if p.takes::<T>(op, input.len()) => p.all_reduce_sum(dev, input, out),
        _ => Ok(comm.all_reduce(input, out, op)?),
    }
}

/// An all-gather: for the small ones `peer` takes ([`PeerReduce::gathers`]), this rank's input
/// copied to its offset in a zeroed buffer and the one-shot sum of those buffers (no RCCL call,
/// so a graph-mode recording goes on), else RCCL.
fn all_gather<T: RocmDType + RcclType>(
    dev: &RocmDevice,
    comm: &Communicator,
    peer: Option<&PeerReduce>,
    input: &impl DeviceSlice<T>,
    out: &mut impl DeviceSliceMut<T>,
) -> Result<(), BackendError> {
    match peer {
        Some(p) if p.gathers::<T>(out.len()) => {
            let n = input.len();
            let at = comm.rank() * n;
            let mut placed = dev.zeros::<T>(out.len())?;
            dev.stream()
                .memcpy_dtod(input, &mut placed.slice_mut(at..at + n)?)?;
            p.all_reduce_sum(dev, &placed, out)
        }
        _ => Ok(comm.all_gather(input, out)?),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn output_shapes() {
        let s = Shape::from((6, 4));
        let sum = Collective::AllReduce(ReduceOp::Sum);
        assert_eq!(sum.output_shape(&s, 2).unwrap(), s);
        assert_eq!(
            Collective::Broadcast { root: 1 }
                .output_shape(&s, 3)
                .unwrap(),
            s
        );
        assert_eq!(
            Collective::AllGather.output_shape(&s, 3).unwrap(),
            Shape::from((18, 4))
        );
        let rs = Collective::ReduceScatter(ReduceOp::Max);
        assert_eq!(rs.output_shape(&s, 3).unwrap(), Shape::from((2, 4)));
        let e = rs.output_shape(&s, 4).unwrap_err().to_string();
        assert!(e.contains("does not divide into 4 equal blocks"), "{e}");
        let e = Collective::AllGather
            .output_shape(&Shape::from(()), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("reshape it to (1,)"), "{e}");
        assert!(Collective::AllGather
            .output_shape(&Shape::from((usize::MAX, 2)), 2)
            .is_err());
    }
}
