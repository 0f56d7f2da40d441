//! [`group`]: RCCL's `ncclGroupStart` / `ncclGroupEnd`, and the per-thread record of the
//! communicators a group touched, so that a group that fails is aborted as a whole.
//!
//! Why abort them all: the work a group queued is launched by `ncclGroupEnd` even when one
//! call inside it failed, and RCCL cannot take it back. A collective launched on some ranks
//! and not on others waits for the missing ones forever (and `ncclCommDestroy`, or a stream
//! synchronisation, waits with it). Aborting every communicator of the failed group stops
//! those kernels; each later use returns [`RcclError::Aborted`](super::RcclError::Aborted).

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::Arc;

use parking_lot::Mutex;
use rocm_sys::rccl::{ncclResult_t, Rccl};

use crate::error::Result;
use crate::runtime::Runtime;

use super::comm::DEFAULT_TIMEOUT;
use super::error::RcclError;
use super::state::{abort_state, settle_state, State};

/// One communicator a group queued work on (or saw fail).
struct Member {
    rccl: Arc<Rccl>,
    state: Arc<Mutex<State>>,
    rank: c_int,
    runtime: Arc<Runtime>,
}

/// An open group of this thread.
#[derive(Default)]
struct Frame {
    members: Vec<Member>,
    /// A nested group failed: the outermost group aborts everything when it ends.
    poisoned: bool,
}

thread_local! {
    /// The open groups of this thread, innermost last.
    static GROUPS: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread is inside a [`group`].
pub(super) fn active() -> bool {
    GROUPS.with(|g| !g.borrow().is_empty())
}

/// Records that the innermost open group of this thread uses this communicator (no-op outside
/// a group, and for a communicator already recorded).
pub(super) fn register(
    rccl: &Arc<Rccl>,
    state: &Arc<Mutex<State>>,
    rank: c_int,
    runtime: &Arc<Runtime>,
) {
    GROUPS.with(|g| {
        let mut groups = g.borrow_mut();
        let Some(frame) = groups.last_mut() else {
            return;
        };
        if frame.members.iter().any(|m| Arc::ptr_eq(&m.state, state)) {
            return;
        }
        frame.members.push(Member {
            rccl: rccl.clone(),
            state: state.clone(),
            rank,
            runtime: runtime.clone(),
        });
    });
}

/// Closes the innermost group after `ncclGroupEnd`. A nested group hands its members (and
/// its failure) to the enclosing one, whose `ncclGroupEnd` is the one that launches. The
/// outermost settles every member (non-blocking communicators enqueue grouped work in the
/// background), aborts every member when anything inside failed or a member does not settle
/// (that member's error), and returns whether a nested group had failed.
fn leave(failed: bool) -> Result<bool> {
    let (frame, outer) = GROUPS.with(|g| {
        let mut groups = g.borrow_mut();
        let frame = groups.pop().unwrap_or_default();
        (frame, !groups.is_empty())
    });
    let poisoned = frame.poisoned;
    if outer {
        GROUPS.with(|g| {
            let mut groups = g.borrow_mut();
            if let Some(parent) = groups.last_mut() {
                parent.poisoned |= failed || poisoned;
                for m in frame.members {
                    if !parent
                        .members
                        .iter()
                        .any(|p| Arc::ptr_eq(&p.state, &m.state))
                    {
                        parent.members.push(m);
                    }
                }
            }
        });
        return Ok(false);
    }
    let mut settle_err = None;
    if !(failed || poisoned) {
        // Non-blocking communicators enqueue the group's work in the background: every member
        // settles here, so that work queued on the streams after the group runs after it.
        for m in &frame.members {
            let mut state = m.state.lock();
            if let Err(e) = settle_state(&m.rccl, &mut state, m.rank, DEFAULT_TIMEOUT) {
                settle_err.get_or_insert(e);
            }
        }
    }
    if failed || poisoned || settle_err.is_some() {
        for m in &frame.members {
            let mut state = m.state.lock();
            if let Err(e) = abort_state(&m.rccl, &mut state, m.rank) {
                m.runtime.record_err(e);
            }
        }
    }
    match settle_err {
        Some(e) => Err(e),
        None => Ok(poisoned),
    }
}

/// Runs `f` between `ncclGroupStart` and `ncclGroupEnd`, so the collectives and transfers it
/// queues (on one or several communicators of this thread) are launched together: needed to
/// drive several GPUs from one thread, and to pair sends with receives.
///
/// `ncclGroupEnd` is called even when `f` fails, so the group nesting stays balanced; the
/// first error is returned. When anything inside failed, every communicator the group used
/// is aborted after `ncclGroupEnd` (see the module documentation): create new communicators
/// on every rank to go on. Buffers passed inside `f` must stay alive until `group` returns
/// (the borrow checker sees to it when they are borrowed from outside the closure).
pub fn group<R>(rt: &Runtime, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let rccl = rt.rccl()?;
    // SAFETY: ncclGroupStart takes no arguments and only increments this thread's group depth.
    let code = unsafe { (rccl.ncclGroupStart)() };
    if !code.is_success() {
        return Err(RcclError::call(&rccl, "ncclGroupStart", -1, code, None).into());
    }
    GROUPS.with(|g| g.borrow_mut().push(Frame::default()));
    let out = f();
    // SAFETY: balances the ncclGroupStart above on this thread; every buffer queued inside
    // `f` is still borrowed by the caller, so it is live when the grouped work is launched.
    let code = unsafe { (rccl.ncclGroupEnd)() };
    let end: Result<()> = if code.is_success() || code == ncclResult_t::ncclInProgress {
        Ok(())
    } else {
        Err(RcclError::call(&rccl, "ncclGroupEnd", -1, code, None).into())
    };
    let left = leave(out.is_err() || end.is_err());
    let value = out?;
    end?;
    let nested_failed = left?;
    if nested_failed {
        return Err(RcclError::invalid(
            "ncclGroupEnd",
            "a nested group failed and its error was not returned from this group's closure: \
             every communicator of the group was aborted. To fix: propagate errors out of \
             group closures (`?`), and create new communicators on every rank",
        )
        .into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn depth() -> usize {
        GROUPS.with(|g| g.borrow().len())
    }

    #[test]
    fn frames_nest_and_a_nested_failure_reaches_the_outermost_group() {
        assert!(!active());
        GROUPS.with(|g| g.borrow_mut().push(Frame::default()));
        GROUPS.with(|g| g.borrow_mut().push(Frame::default()));
        assert!(active());
        assert!(
            !leave(true).unwrap(),
            "a nested group never reports by itself"
        );
        assert_eq!(depth(), 1);
        assert!(
            leave(false).unwrap(),
            "the outermost group learns the nested failure"
        );
        assert_eq!(depth(), 0);
        assert!(!active());
        // Leaving with nothing open is harmless.
        assert!(!leave(false).unwrap());
    }
}
