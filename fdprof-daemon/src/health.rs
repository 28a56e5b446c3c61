//! `/healthz`: the daemon answers, and its collector still ends intervals. A main loop stuck
//! (a hung read, a wedged program set) fails the check, so a liveness probe restarts it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An interval may end this much later than due before the daemon counts as stalled: a busy
/// host delays it, a long request does not hold it up.
const GRACE: Duration = Duration::from_secs(10);
/// Intervals that may pass unended.
const MISSED: u32 = 3;

/// When the last interval ended (the start, before the first), and how long one is.
#[derive(Debug)]
pub(crate) struct Health {
    last: Mutex<(Instant, Duration)>,
}

impl Health {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            last: Mutex::new((Instant::now(), interval)),
        }
    }

    /// An interval of `interval` (the watch's now) has just ended.
    pub(crate) fn ended(&self, interval: Duration) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), interval);
    }

    /// `Err` with one line when no interval has ended for [`MISSED`] intervals and [`GRACE`].
    pub(crate) fn check(&self, now: Instant) -> Result<(), String> {
        let (last, interval) = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        let since = now.saturating_duration_since(last);
        match since > interval * MISSED + GRACE {
            true => Err(format!(
                "stalled: no interval has ended for {} s (one is due every {} s)",
                since.as_secs(),
                interval.as_secs_f64()
            )),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_that_ends_no_interval_fails_the_check() {
        let health = Health::new(Duration::from_secs(1));
        let now = Instant::now();
        assert!(health.check(now).is_ok());
        assert!(health.check(now + Duration::from_secs(12)).is_ok());
        let stalled = health.check(now + Duration::from_secs(14)).unwrap_err();
        assert!(
            stalled.starts_with("stalled: no interval has ended for 1"),
            "{stalled}"
        );
        health.ended(Duration::from_secs(3600));
        assert!(
            health
                .check(Instant::now() + Duration::from_secs(3 * 3600))
                .is_ok()
        );
    }
}
