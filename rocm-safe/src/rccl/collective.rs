//! Collectives and point-to-point transfers on device buffers, with every count, data type,
//! rank and stream checked before RCCL is called; [`super::group`] fuses several of them.

use rocm_sys::rccl::{ncclDataType_t, ncclRedOp_t};

use crate::buffer::{DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::error::Result;

use super::comm::{check_rank_args, Communicator};
use super::error::RcclError;

/// An element type RCCL can move, and reduce where RCCL's arithmetic matches ours.
///
/// # Safety
/// `COPY` (and `REDUCE`, when `Some`) must be an `ncclDataType_t` whose element size is
/// `size_of::<Self>()`: RCCL reads and writes `count * size` bytes of each buffer. `REDUCE`
/// must also have the same bit format as `Self`, or reductions compute garbage.
pub unsafe trait RcclType: DeviceRepr {
    /// The data type used for copies (all-gather, broadcast, send/recv): any type of the
    /// right size, since copies are bytewise.
    const COPY: ncclDataType_t;
    /// The data type used for reductions, `None` when RCCL has no arithmetic for `Self`.
    const REDUCE: Option<ncclDataType_t>;
}

macro_rules! rccl_type {
    ($($t:ty => $copy:ident, $reduce:expr;)*) => { $(
        // SAFETY: the data type named has the element size and bit format of the Rust type
        // (checked by the `sizes_match` test against `ncclDataType_t::size_in_bytes`).
        unsafe impl RcclType for $t {
            const COPY: ncclDataType_t = ncclDataType_t::$copy;
            const REDUCE: Option<ncclDataType_t> = $reduce;
        }
    )* };
}

rccl_type! {
    i8 => ncclInt8, Some(ncclDataType_t::ncclInt8);
    u8 => ncclUint8, Some(ncclDataType_t::ncclUint8);
    i32 => ncclInt32, Some(ncclDataType_t::ncclInt32);
    u32 => ncclUint32, Some(ncclDataType_t::ncclUint32);
    i64 => ncclInt64, Some(ncclDataType_t::ncclInt64);
    u64 => ncclUint64, Some(ncclDataType_t::ncclUint64);
    half::f16 => ncclFloat16, Some(ncclDataType_t::ncclFloat16);
    half::bf16 => ncclBfloat16, Some(ncclDataType_t::ncclBfloat16);
    f32 => ncclFloat32, Some(ncclDataType_t::ncclFloat32);
    f64 => ncclFloat64, Some(ncclDataType_t::ncclFloat64);
    // RCCL has no 16-bit integers: copies move them as 2-byte halves, bit for bit.
    i16 => ncclFloat16, None;
    u16 => ncclFloat16, None;
    // Candle's F8E4M3 is OCP e4m3fn; RCCL's 8-bit floats are FNUZ on MI300 (see
    // rocm_sys::rccl): copy as bytes, never reduce.
    float8::F8E4M3 => ncclUint8, None;
}

/// A reduction (`ncclRedOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Average: the sum divided by the number of ranks (integer division for integers).
    Avg,
}

impl ReduceOp {
    /// The C value.
    pub fn raw(self) -> ncclRedOp_t {
        match self {
            ReduceOp::Sum => ncclRedOp_t::ncclSum,
            ReduceOp::Prod => ncclRedOp_t::ncclProd,
            ReduceOp::Min => ncclRedOp_t::ncclMin,
            ReduceOp::Max => ncclRedOp_t::ncclMax,
            ReduceOp::Avg => ncclRedOp_t::ncclAvg,
        }
    }
}

/// The data type to reduce `T` with, or why it cannot be.
pub(crate) fn reduce_type<T: RcclType>(op: &'static str) -> Result<ncclDataType_t, RcclError> {
    T::REDUCE.ok_or_else(|| {
        RcclError::invalid(
            op,
            format!(
                "RCCL cannot reduce {} (no matching arithmetic type): reduce in a wider type \
                 (f32, or f16/bf16) and convert",
                std::any::type_name::<T>()
            ),
        )
    })
}

/// The count RCCL gets for an all-gather (`send` elements per rank into `nranks * send`).
pub(crate) fn gather_count(
    op: &'static str,
    send: usize,
    recv: usize,
    nranks: usize,
) -> Result<usize, RcclError> {
    match send.checked_mul(nranks) {
        Some(total) if total == recv => Ok(send),
        _ => Err(RcclError::invalid(
            op,
            format!(
                "the output must hold world size x input = {nranks} x {send} elements, it \
                 holds {recv}"
            ),
        )),
    }
}

/// The count RCCL gets for a reduce-scatter (`nranks * recv` elements in, `recv` out).
pub(crate) fn scatter_count(
    op: &'static str,
    send: usize,
    recv: usize,
    nranks: usize,
) -> Result<usize, RcclError> {
    match recv.checked_mul(nranks) {
        Some(total) if total == send => Ok(recv),
        _ => Err(RcclError::invalid(
            op,
            format!(
                "the input must hold world size x output = {nranks} x {recv} elements, it \
                 holds {send}"
            ),
        )),
    }
}

/// Checks two lengths are equal (all-reduce, broadcast).
pub(crate) fn same_count(op: &'static str, send: usize, recv: usize) -> Result<usize, RcclError> {
    if send == recv {
        Ok(send)
    } else {
        Err(RcclError::invalid(
            op,
            format!("input has {send} elements but output has {recv}: they must be equal"),
        ))
    }
}

impl Communicator {
    /// Checks a buffer is ordered on this communicator's stream.
    fn on_stream<T: DeviceRepr>(&self, op: &'static str, buf: &dyn DeviceSlice<T>) -> Result<()> {
        if buf.stream().id() == self.stream().id() {
            return Ok(());
        }
        Err(RcclError::invalid(
            op,
            format!(
                "a buffer is ordered on stream {} of device {}, the communicator on stream {} \
                 of device {}: allocate the buffers on the communicator's stream (or copy them \
                 there) so the collective is ordered after the work that wrote them",
                buf.stream().id(),
                buf.stream().device().ordinal(),
                self.stream().id(),
                self.device().ordinal()
            ),
        )
        .into())
    }

    /// Checks a root or peer rank.
    fn peer(&self, op: &'static str, peer: usize) -> Result<i32> {
        Ok(check_rank_args(op, peer, self.world_size())?.0)
    }

    /// All-reduce (`ncclAllReduce`): every rank's `recv` gets the element-wise `op` of every
    /// rank's `send`. Both hold the same number of elements.
    pub fn all_reduce<T: RcclType>(
        &self,
        send: &impl DeviceSlice<T>,
        recv: &mut impl DeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let name = "ncclAllReduce";
        let dtype = reduce_type::<T>(name)?;
        let count = same_count(name, send.len(), recv.len())?;
        self.on_stream(name, send)?;
        self.on_stream(name, recv)?;
        let (s, r, stream) = (send.device_ptr(), recv.device_ptr(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: `s` and `r` hold `count` elements of T (checked above), whose size
            // `dtype` has (RcclType contract); both are ordered on `stream`, the communicator's
            // stream, and stay borrowed until the call has queued the work, after which
            // stream order protects them; `comm` is live (checked by `call`).
            unsafe { (rccl.ncclAllReduce)(s, r, count, dtype, op.raw(), comm, stream) }
        })
    }

    /// In-place all-reduce: `buf` is both input and output.
    pub fn all_reduce_in_place<T: RcclType>(
        &self,
        buf: &mut impl DeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let name = "ncclAllReduce";
        let dtype = reduce_type::<T>(name)?;
        self.on_stream(name, buf)?;
        let (p, count, stream) = (buf.device_ptr(), buf.len(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: as in `all_reduce`, with one exclusively borrowed buffer of `count`
            // elements as both input and output (RCCL's in-place form: sendbuff == recvbuff).
            unsafe { (rccl.ncclAllReduce)(p, p, count, dtype, op.raw(), comm, stream) }
        })
    }

    /// All-gather (`ncclAllGather`): `recv` gets every rank's `send`, rank `i`'s at offset
    /// `i * send.len()`; `recv.len()` must be `world_size() * send.len()`.
    pub fn all_gather<T: RcclType>(
        &self,
        send: &impl DeviceSlice<T>,
        recv: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        let name = "ncclAllGather";
        let count = gather_count(name, send.len(), recv.len(), self.world_size())?;
        self.on_stream(name, send)?;
        self.on_stream(name, recv)?;
        let (s, r, stream) = (send.device_ptr(), recv.device_ptr(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: `s` holds `count` elements and `r` holds `nranks * count` (checked
            // above) of T, whose size `T::COPY` has; both ordered on the communicator's stream
            // and borrowed across the enqueue; `comm` is live.
            unsafe { (rccl.ncclAllGather)(s, r, count, T::COPY, comm, stream) }
        })
    }

    /// Reduce-scatter (`ncclReduceScatter`): the element-wise `op` of every rank's `send` is
    /// split in `world_size()` blocks and rank `i` gets block `i`; `send.len()` must be
    /// `world_size() * recv.len()`.
    pub fn reduce_scatter<T: RcclType>(
        &self,
        send: &impl DeviceSlice<T>,
        recv: &mut impl DeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let name = "ncclReduceScatter";
        let dtype = reduce_type::<T>(name)?;
        let count = scatter_count(name, send.len(), recv.len(), self.world_size())?;
        self.on_stream(name, send)?;
        self.on_stream(name, recv)?;
        let (s, r, stream) = (send.device_ptr(), recv.device_ptr(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: `s` holds `nranks * count` and `r` holds `count` elements of T (checked
            // above), whose size `dtype` has; both ordered on the communicator's stream and
            // borrowed across the enqueue; `comm` is live.
            unsafe { (rccl.ncclReduceScatter)(s, r, count, dtype, op.raw(), comm, stream) }
        })
    }

    /// Broadcast (`ncclBroadcast`): every rank's `recv` gets rank `root`'s `send` (read on
    /// `root` only; its length is checked on every rank).
    pub fn broadcast<T: RcclType>(
        &self,
        send: &impl DeviceSlice<T>,
        recv: &mut impl DeviceSliceMut<T>,
        root: usize,
    ) -> Result<()> {
        let name = "ncclBroadcast";
        let root_c = self.peer(name, root)?;
        let count = same_count(name, send.len(), recv.len())?;
        self.on_stream(name, send)?;
        self.on_stream(name, recv)?;
        let (s, r, stream) = (send.device_ptr(), recv.device_ptr(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: both buffers hold `count` elements of T (checked above), whose size
            // `T::COPY` has; `root_c` is a rank of the communicator; both ordered on the
            // communicator's stream and borrowed across the enqueue; `comm` is live.
            unsafe { (rccl.ncclBroadcast)(s, r, count, T::COPY, root_c, comm, stream) }
        })
    }

    /// In-place broadcast: `buf` on `root` is copied into `buf` on every other rank.
    pub fn broadcast_in_place<T: RcclType>(
        &self,
        buf: &mut impl DeviceSliceMut<T>,
        root: usize,
    ) -> Result<()> {
        let name = "ncclBroadcast";
        let root_c = self.peer(name, root)?;
        self.on_stream(name, buf)?;
        let (p, count, stream) = (buf.device_ptr(), buf.len(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: as in `broadcast`, with sendbuff == recvbuff (RCCL's in-place form) on
            // one exclusively borrowed buffer of `count` elements.
            unsafe { (rccl.ncclBroadcast)(p, p, count, T::COPY, root_c, comm, stream) }
        })
    }

    /// Sends `buf` to rank `peer` (`ncclSend`), which must post a matching [`recv`] of the
    /// same length. Pair sends and receives inside one [`super::group`] to avoid deadlock.
    ///
    /// [`recv`]: Communicator::recv
    pub fn send<T: RcclType>(&self, buf: &impl DeviceSlice<T>, peer: usize) -> Result<()> {
        let name = "ncclSend";
        let peer_c = self.peer(name, peer)?;
        self.on_stream(name, buf)?;
        let (p, count, stream) = (buf.device_ptr(), buf.len(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: `p` holds `count` elements of T, whose size `T::COPY` has; `peer_c` is
            // a rank of the communicator; the buffer is ordered on the communicator's stream
            // and borrowed across the enqueue; `comm` is live.
            unsafe { (rccl.ncclSend)(p, count, T::COPY, peer_c, comm, stream) }
        })
    }

    /// Receives `buf.len()` elements from rank `peer` (`ncclRecv`).
    pub fn recv<T: RcclType>(&self, buf: &mut impl DeviceSliceMut<T>, peer: usize) -> Result<()> {
        let name = "ncclRecv";
        let peer_c = self.peer(name, peer)?;
        self.on_stream(name, buf)?;
        let (p, count, stream) = (buf.device_ptr(), buf.len(), self.stream().raw());
        self.call(name, |rccl, comm| {
            // SAFETY: `p` holds `count` writable elements of T (an exclusive borrow), whose
            // size `T::COPY` has; `peer_c` is a rank of the communicator; ordered on the
            // communicator's stream and borrowed across the enqueue; `comm` is live.
            unsafe { (rccl.ncclRecv)(p, count, T::COPY, peer_c, comm, stream) }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn check<T: RcclType>() {
        let size = std::mem::size_of::<T>();
        assert_eq!(
            T::COPY.size_in_bytes(),
            Some(size),
            "{}",
            std::any::type_name::<T>()
        );
        if let Some(r) = T::REDUCE {
            assert_eq!(
                r.size_in_bytes(),
                Some(size),
                "{}",
                std::any::type_name::<T>()
            );
        }
    }

    #[test]
    fn sizes_match() {
        check::<i8>();
        check::<u8>();
        check::<i16>();
        check::<u16>();
        check::<i32>();
        check::<u32>();
        check::<i64>();
        check::<u64>();
        check::<half::f16>();
        check::<half::bf16>();
        check::<f32>();
        check::<f64>();
        check::<float8::F8E4M3>();
    }

    #[test]
    fn reductions_refuse_types_rccl_cannot_add() {
        assert_eq!(
            reduce_type::<f32>("x").unwrap(),
            ncclDataType_t::ncclFloat32
        );
        assert_eq!(
            reduce_type::<half::bf16>("x").unwrap(),
            ncclDataType_t::ncclBfloat16
        );
        let e = reduce_type::<float8::F8E4M3>("ncclAllReduce").unwrap_err();
        assert!(
            e.to_string().contains("cannot reduce float8::F8E4M3"),
            "{e}"
        );
        assert!(reduce_type::<i16>("x").is_err());
    }

    #[test]
    fn counts_are_checked() {
        assert_eq!(gather_count("g", 3, 6, 2).unwrap(), 3);
        assert_eq!(gather_count("g", 0, 0, 4).unwrap(), 0);
        let e = gather_count("ncclAllGather", 3, 5, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RCCL ncclAllGather: the output must hold world size x input = 2 x 3 elements, it \
             holds 5"
        );
        assert!(
            gather_count("g", usize::MAX, 0, 2).is_err(),
            "overflow is an error"
        );
        assert_eq!(scatter_count("s", 8, 4, 2).unwrap(), 4);
        assert!(scatter_count("s", 7, 4, 2).is_err());
        assert!(scatter_count("s", 0, usize::MAX, 3).is_err());
        assert_eq!(same_count("a", 5, 5).unwrap(), 5);
        assert!(same_count("a", 5, 4)
            .unwrap_err()
            .to_string()
            .contains("input has 5 elements but output has 4"));
    }

    #[test]
    fn reduce_ops_map_to_rccl_values() {
        let ops = [
            (ReduceOp::Sum, 0),
            (ReduceOp::Prod, 1),
            (ReduceOp::Max, 2),
            (ReduceOp::Min, 3),
            (ReduceOp::Avg, 4),
        ];
        for (op, value) in ops {
            assert_eq!(op.raw().0, value, "{op:?}");
        }
    }
}
