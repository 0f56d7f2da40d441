//! The process-wide gate between stream captures and the calls that would invalidate them.
//!
//! While any stream of the process records a graph (graph mode's stretches, or an explicit
//! [`crate::graph::Capture`]), a call that synchronises a whole device or frees device or
//! pinned memory (`hipDeviceSynchronize`, `hipFree`, `hipHostFree`, `hipModuleUnload`)
//! invalidates the capture, whichever thread makes it: the recorded work would be lost. Such
//! calls go through [`device_wide`]: they run at once when nothing records, else they are
//! deferred and run when the last recording ends (as PyTorch's caching allocator defers its
//! frees during a capture). Captures register with [`recording_begins`] / [`recording_ends`].
//!
//! Deferred work is only ever "release something later": memory freed later, a module
//! unloaded later. Nothing that must have happened before a caller goes on is deferred.
//!
//! Lock order: a stream's graph-mode lock, then this gate; deferred work takes no lock of a
//! stream or allocator (it holds raw handles and an `Arc` of the runtime only), so it may run
//! under the gate.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Work deferred until no capture is in progress.
pub(crate) type Deferred = Box<dyn FnOnce() + Send>;

struct Gate {
    /// Captures in progress in the process.
    recording: usize,
    /// Device-wide work that arrived while some capture was in progress.
    deferred: Vec<Deferred>,
}

static GATE: Mutex<Gate> = parking_lot::const_mutex(Gate {
    recording: 0,
    deferred: Vec::new(),
});

/// Notified when the last capture in progress ends.
static QUIET: Condvar = Condvar::new();

/// How long [`device_wide_wait`]'s callers wait for other threads' recordings to end: graph
/// mode launches a stretch at least every few dozen operations, so this is long.
pub(crate) const PATIENCE: Duration = Duration::from_millis(500);

/// A capture is about to begin: device-wide work waits from now until [`recording_ends`].
/// Call it before `hipStreamBeginCapture` (and [`recording_ends`] if that fails).
pub(crate) fn recording_begins() {
    GATE.lock().recording += 1;
}

/// A capture begun after [`recording_begins`] has ended (or failed to begin). When it was the
/// last, the work deferred meanwhile runs now, before any new capture can begin.
pub(crate) fn recording_ends() {
    let mut gate = GATE.lock();
    gate.recording = gate.recording.saturating_sub(1);
    if gate.recording == 0 {
        for op in std::mem::take(&mut gate.deferred) {
            op();
        }
        QUIET.notify_all();
    }
}

/// Runs `op` now when no capture is in progress (holding the gate, so none begins meanwhile)
/// and returns `true`; else keeps it for when the last capture ends and returns `false`.
pub(crate) fn device_wide(op: impl FnOnce() + Send + 'static) -> bool {
    let mut gate = GATE.lock();
    if gate.recording == 0 {
        op();
        true
    } else {
        gate.deferred.push(Box::new(op));
        false
    }
}

/// Runs `op` now, holding the gate, when no capture is in progress; `None` (and `op` not run)
/// otherwise. For work whose caller needs its result now (trimming a cache to retry an
/// allocation).
pub(crate) fn device_wide_now<R>(op: impl FnOnce() -> R) -> Option<R> {
    let gate = GATE.lock();
    if gate.recording == 0 {
        let r = op();
        drop(gate);
        Some(r)
    } else {
        None
    }
}

/// Runs `op` holding the gate once no capture is in progress, waiting up to `patience` for
/// those in progress to end; after that it runs anyway. For calls that must happen now and may
/// synchronise the device inside a library (creating a rocBLAS or MIOpen handle): a capture
/// still open after `patience` (another thread recording without pause, or this thread's own
/// recording on another stream, which cannot end while it waits) may then lose its work, as
/// an error.
pub(crate) fn device_wide_wait<R>(patience: Duration, op: impl FnOnce() -> R) -> R {
    let deadline = Instant::now() + patience;
    let mut gate = GATE.lock();
    while gate.recording > 0 {
        if QUIET.wait_until(&mut gate, deadline).timed_out() {
            break;
        }
    }
    let r = op();
    drop(gate);
    r
}

/// Captures in progress in the process (for tests and diagnostics).
pub fn recordings_in_progress() -> usize {
    GATE.lock().recording
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// The gate is process-wide: these tests hold this lock so they do not see each other.
    static SERIAL: Mutex<()> = parking_lot::const_mutex(());

    #[test]
    fn work_runs_at_once_when_nothing_records() {
        let _s = SERIAL.lock();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        assert!(device_wide(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(device_wide_now(|| 7), Some(7));
    }

    #[test]
    fn work_waits_for_the_last_recording_to_end() {
        let _s = SERIAL.lock();
        let ran = Arc::new(AtomicUsize::new(0));
        recording_begins();
        recording_begins();
        for _ in 0..3 {
            let r = ran.clone();
            assert!(!device_wide(move || {
                r.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert_eq!(device_wide_now(|| 7), None, "refused while recording");
        recording_ends();
        assert_eq!(ran.load(Ordering::SeqCst), 0, "one capture still records");
        assert_eq!(recordings_in_progress(), 1);
        recording_ends();
        assert_eq!(ran.load(Ordering::SeqCst), 3, "ran when the last one ended");
        assert_eq!(recordings_in_progress(), 0);
        recording_ends();
        assert_eq!(
            recordings_in_progress(),
            0,
            "an extra end does not underflow"
        );
    }

    #[test]
    fn a_waiting_call_runs_when_the_other_threads_recording_ends_or_after_its_patience() {
        use std::sync::atomic::AtomicBool;
        let _s = SERIAL.lock();
        static ENDED: AtomicBool = AtomicBool::new(false);
        ENDED.store(false, Ordering::SeqCst);
        recording_begins();
        let ender = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            ENDED.store(true, Ordering::SeqCst);
            recording_ends();
        });
        let t = Instant::now();
        let ran_after_end =
            device_wide_wait(Duration::from_secs(30), || ENDED.load(Ordering::SeqCst));
        assert!(ran_after_end, "waited for the recording to end");
        assert!(t.elapsed() < Duration::from_secs(10));
        ender.join().unwrap();
        assert_eq!(recordings_in_progress(), 0);
        recording_begins();
        let t = Instant::now();
        device_wide_wait(Duration::from_millis(20), || ());
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "ran after its patience"
        );
        assert_eq!(recordings_in_progress(), 1, "the recording is still open");
        recording_ends();
    }
}
