//! [`Backoff`]: the pauses between the polls of a wait on RCCL (a collective settling, a
//! group's end, a stream going idle).
//!
//! Pauses double from [`FIRST`], up to [`SHORT_CAP`] while the wait is younger than
//! [`SHORT_WAIT`], then up to [`LONG_CAP`]. A wait then ends at most about [`SHORT_CAP`] (plus
//! the kernel's timer slack) after what it waits for, where its first milliseconds matter: a
//! decode step's collectives take a few milliseconds, and a pause grown to 2 ms there cost up
//! to 2 ms a step (the tensor-parallel llama waits once a step). Long waits (a peer starting
//! late, a large transfer) poll every 2 ms.

use std::time::Duration;

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

    /// Sleeps the next pause, never past `timeout` (the wait has lasted `waited` so far).
    pub(super) fn sleep(&mut self, waited: Duration, timeout: Duration) {
        std::thread::sleep(self.pause.min(timeout.saturating_sub(waited)));
        self.pause = next(self.pause, waited);
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
}
