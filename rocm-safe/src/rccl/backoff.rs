//! [`Backoff`]: the pauses between the polls of a wait on RCCL (a collective settling, a
//! group's end, a stream going idle).
//!
//! For its first [`SPIN`] a wait only yields the processor between polls: a collective on a
//! non-blocking communicator that answers `ncclInProgress` is launched by a background thread
//! of RCCL (or NCCL, under the harness) within tens of microseconds, and a sleep there (the
//! kernel's timer slack makes a 20 us sleep last 60-80 us) would be paid on each such
//! collective. Then pauses double from [`FIRST`], up to [`SHORT_CAP`] while the wait is younger
//! than [`SHORT_WAIT`], then up to [`LONG_CAP`]: a wait ends at most about [`SHORT_CAP`] (plus
//! the timer slack) after what it waits for where its first milliseconds matter (a decode
//! step's collectives take a few milliseconds, and pauses grown to 2 ms there cost up to 2 ms a
//! step: the tensor-parallel llama waits once a step), and long waits (a peer starting late, a
//! large transfer) poll every 2 ms.

use std::time::Duration;

/// How long a wait yields between polls before it sleeps.
pub(super) const SPIN: Duration = Duration::from_micros(200);
/// The first pause.
pub(super) const FIRST: Duration = Duration::from_micros(20);
/// The longest pause while the wait is younger than [`SHORT_WAIT`].
pub(super) const SHORT_CAP: Duration = Duration::from_micros(50);
/// How long a wait polls at [`SHORT_CAP`] at most.
pub(super) const SHORT_WAIT: Duration = Duration::from_millis(100);
/// The longest pause after that.
pub(super) const LONG_CAP: Duration = Duration::from_millis(2);

/// The pauses of one wait.
#[derive(Debug)]
pub(super) struct Backoff {
    pause: Duration,
}

impl Backoff {
    /// A wait's first pause is [`FIRST`].
    pub(super) fn new() -> Backoff {
        Backoff { pause: FIRST }
    }

    /// Yields, or sleeps the next pause (never past `timeout`), in a wait that has lasted
    /// `waited` so far.
    pub(super) fn sleep(&mut self, waited: Duration, timeout: Duration) {
        match self.step(waited) {
            None => std::thread::yield_now(),
            Some(pause) => std::thread::sleep(pause.min(timeout.saturating_sub(waited))),
        }
    }

    /// What to do after a poll at `waited`: yield (`None`) or sleep the returned pause.
    fn step(&mut self, waited: Duration) -> Option<Duration> {
        if waited < SPIN {
            return None;
        }
        let pause = self.pause;
        self.pause = next(pause, waited);
        Some(pause)
    }
}

/// The pause after `pause` in a wait that has lasted `waited`.
fn next(pause: Duration, waited: Duration) -> Duration {
    let cap = if waited < SHORT_WAIT {
        SHORT_CAP
    } else {
        LONG_CAP
    };
    (pause * 2).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_short_early_and_grow_to_the_long_cap_later() {
        let mut pause = FIRST;
        let mut early = Vec::new();
        for _ in 0..8 {
            pause = next(pause, Duration::from_millis(3));
            early.push(pause);
        }
        assert_eq!(early[0], Duration::from_micros(40));
        assert!(early[1..].iter().all(|&p| p == SHORT_CAP), "{early:?}");
        let mut pause = SHORT_CAP;
        for _ in 0..8 {
            pause = next(pause, SHORT_WAIT);
        }
        assert_eq!(pause, LONG_CAP);
        // A long wait's pause never exceeds the long cap.
        assert_eq!(next(LONG_CAP, Duration::from_secs(60)), LONG_CAP);
    }

    #[test]
    fn a_wait_yields_first_then_sleeps_from_the_first_pause() {
        let mut b = Backoff::new();
        assert_eq!(b.step(Duration::ZERO), None);
        assert_eq!(b.step(SPIN / 2), None);
        assert_eq!(b.step(SPIN), Some(FIRST));
        assert_eq!(b.step(SPIN * 2), Some(FIRST * 2));
        assert_eq!(b.step(SPIN * 3), Some(SHORT_CAP));
        assert_eq!(b.step(SHORT_WAIT), Some(SHORT_CAP));
        assert_eq!(b.step(SHORT_WAIT), Some(SHORT_CAP * 2));
    }
}
