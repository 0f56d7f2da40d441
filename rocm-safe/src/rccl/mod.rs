//! Several GPUs through RCCL: a [`UniqueId`] shared between ranks, an RAII [`Communicator`] per
//! rank bound to a device and a stream, collectives on device buffers, and [`RcclError`].
//!
//! | NCCL / RCCL C API | rocm-safe |
//! |---|---|
//! | `ncclGetUniqueId`, `ncclUniqueId` | [`UniqueId::new`], bytes / hex round trips |
//! | `ncclCommInitRank`, `ncclCommInitAll` | [`Communicator::init_rank`], [`Communicator::init_all`] |
//! | `ncclCommDestroy`, `ncclCommAbort` | `Drop`, [`Communicator::abort`] |
//! | `ncclCommGetAsyncError` + the stream | [`Communicator::check_async`], [`Communicator::wait`] |
//! | `ncclAllReduce`, `ncclAllGather`, `ncclReduceScatter`, `ncclBroadcast` | methods of [`Communicator`] |
//! | `ncclSend`, `ncclRecv`, `ncclGroupStart` / `ncclGroupEnd` | [`Communicator::send`], [`Communicator::recv`], [`group`] |
//!
//! Collectives are queued on the communicator's stream and return at once; [`Communicator::wait`]
//! waits with a timeout and turns a dead peer into an error (and an aborted communicator)
//! rather than a hang; a [`group`] in which anything fails aborts every communicator it used
//! (its partly launched work could never finish). Lengths, data types, ranks and streams are
//! checked before RCCL is called. The library is loaded on first use by [`crate::Runtime::rccl`]
//! (`ROCM_SYS_RCCL_LIB` overrides where from).

mod backoff;
mod collective;
mod comm;
mod error;
mod group;
mod id;
mod patience;
mod state;

pub use collective::{RcclType, ReduceOp};
pub use comm::{Communicator, DEFAULT_TIMEOUT};
pub use error::RcclError;
pub use group::group;
pub use id::UniqueId;
