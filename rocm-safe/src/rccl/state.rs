//! A communicator's shared state (its handle and condition, behind the mutex that the
//! [`super::group`] registry shares) and the two operations on it that need no
//! [`super::Communicator`]: settling its queued work, and aborting it.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use rocm_sys::rccl::{ncclComm_t, ncclResult_t, Rccl};

use crate::error::Result;

use super::backoff::Backoff;
use super::error::RcclError;

/// The handle and its condition, shared with the [`group`] registry of the thread that queues
/// work on it (so a failed group can abort every communicator it touched).
pub(super) struct State {
    /// The handle; dangling once `aborted` is set (ncclCommAbort frees it).
    pub(super) raw: ncclComm_t,
    /// ncclCommAbort has been called: `raw` must not be used again.
    pub(super) aborted: bool,
    /// A call failed: Drop aborts instead of destroying.
    pub(super) failed: bool,
}

// SAFETY: `raw` is an opaque RCCL handle; `State` is only reached through its mutex, so the
// handle is passed to RCCL by one thread at a time, which RCCL allows from any host thread.
unsafe impl Send for State {}

/// Polls `ncclCommGetAsyncError` until the communicator's queued operations are enqueued
/// (no longer ncclInProgress), for at most `timeout`: `Ok(())` when settled and healthy, the
/// typed error otherwise (the caller aborts). Used at the end of a group, whose members' work
/// RCCL enqueues in the background on non-blocking communicators.
pub(super) fn settle_state(
    rccl: &Rccl,
    state: &mut State,
    rank: c_int,
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    let mut backoff = Backoff::new();
    loop {
        if state.aborted {
            return Err(RcclError::Aborted {
                op: "ncclGroupEnd",
                rank: rank.max(0) as usize,
            }
            .into());
        }
        let mut async_code = ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is live (not aborted, checked above, under the caller's lock);
        // `async_code` is a valid out-pointer.
        let code = unsafe { (rccl.ncclCommGetAsyncError)(state.raw, &mut async_code) };
        if !code.is_success() {
            return Err(RcclError::call(rccl, "ncclCommGetAsyncError", rank, code, None).into());
        }
        if async_code.is_success() {
            return Ok(());
        }
        if async_code != ncclResult_t::ncclInProgress {
            return Err(RcclError::call(rccl, "ncclGroupEnd", rank, async_code, None).into());
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(RcclError::invalid(
                "ncclGroupEnd",
                format!(
                    "the grouped operations of rank {rank} were not enqueued within {waited:?}:                      a peer may be gone; the communicator is aborted, create new ones on every rank"
                ),
            )
            .into());
        }
        backoff.sleep(waited, timeout);
    }
}

/// `ncclCommAbort` on `state`'s handle unless already aborted (the caller holds the lock).
pub(super) fn abort_state(rccl: &Rccl, state: &mut State, rank: c_int) -> Result<()> {
    if state.aborted {
        return Ok(());
    }
    state.aborted = true;
    state.failed = true;
    // SAFETY: `raw` is live (not aborted before, checked under the lock), and is never used
    // again: `aborted` is set before the lock is released.
    let code = unsafe { (rccl.ncclCommAbort)(state.raw) };
    if code.is_success() {
        return Ok(());
    }
    Err(RcclError::call(rccl, "ncclCommAbort", rank, code, None).into())
}
