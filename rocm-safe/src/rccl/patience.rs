//! [`within`]: an RCCL call that can block inside the library on its peers (a blocking
//! communicator's set-up and teardown wait for every rank) run on a thread of its own, so the
//! caller waits a bounded time and turns a peer that never comes into an error, not a hang.

use std::sync::mpsc;
use std::time::Duration;

use rocm_sys::rccl::ncclComm_t;

/// A communicator handle handed to or from the thread of [`within`].
pub(super) struct Handle(pub(super) ncclComm_t);

// SAFETY: an opaque RCCL handle; RCCL allows a communicator to be used from any host thread as
// long as calls on it do not overlap, and each handle moved across threads here is used by one
// thread at a time (the thread that made it hands it over and never touches it again).
unsafe impl Send for Handle {}

/// Runs `call` on a new thread named `name` and waits at most `patience` for its answer:
/// `Ok(Some(answer))`, or `Ok(None)` when it has not answered by then. The thread is then left
/// to finish (or block) on its own, and when it does finish, `orphan` gets the answer nobody
/// took (to free what it holds). `Err` when no thread could be started (nothing ran).
pub(super) fn within<R: Send + 'static>(
    name: &str,
    patience: Duration,
    call: impl FnOnce() -> R + Send + 'static,
    orphan: impl FnOnce(R) + Send + 'static,
) -> std::io::Result<Option<R>> {
    let (tx, rx) = mpsc::sync_channel::<R>(1);
    let job = move || {
        let answer = call();
        if let Err(mpsc::TrySendError::Disconnected(answer) | mpsc::TrySendError::Full(answer)) =
            tx.try_send(answer)
        {
            orphan(answer);
        }
    };
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(job)?;
    Ok(rx.recv_timeout(patience).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_prompt_answer_is_returned() {
        let got = within(
            "t",
            Duration::from_secs(5),
            || 7,
            |_| panic!("not orphaned"),
        )
        .unwrap();
        assert_eq!(got, Some(7));
    }

    #[test]
    fn a_late_answer_goes_to_the_orphan_handler() {
        let orphaned = Arc::new(AtomicUsize::new(0));
        let o = orphaned.clone();
        let got = within(
            "t",
            Duration::from_millis(20),
            || {
                std::thread::sleep(Duration::from_millis(200));
                5
            },
            move |v| {
                o.store(v, Ordering::SeqCst);
            },
        )
        .unwrap();
        assert_eq!(got, None);
        let start = std::time::Instant::now();
        while orphaned.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(orphaned.load(Ordering::SeqCst), 5);
    }
}
