//! `/healthz`: the daemon answers, its collector still ends intervals, and the programs it
//! linked still run. A main loop stuck (a hung read, a wedged program set) or a program left
//! without its link fails the check, so a liveness probe restarts it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An interval may end this much later than due before the daemon counts as stalled: a busy
/// host delays it, a long request does not hold it up.
const GRACE: Duration = Duration::from_secs(10);
/// Intervals that may pass unended.
const MISSED: u32 = 3;

/// When the last interval ended (the start, before the first), how long one is, and the
/// programs no link ran at its end.
#[derive(Debug)]
pub(crate) struct Health {
    last: Mutex<(Instant, Duration, Vec<String>)>,
}

impl Health {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            last: Mutex::new((Instant::now(), interval, Vec::new())),
        }
    }

    /// An interval of `interval` (the watch's now) has just ended, with `unlinked` programs.
    pub(crate) fn ended(&self, interval: Duration, unlinked: Vec<String>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), interval, unlinked);
    }

    /// `Err` with one line when no interval has ended for [`MISSED`] intervals and [`GRACE`],
    /// or when the last one found programs unlinked.
    pub(crate) fn check(&self, now: Instant) -> Result<(), String> {
        let (last, interval, unlinked) = &*self.last.lock().unwrap_or_else(|e| e.into_inner());
        let since = now.saturating_duration_since(*last);
        if since > *interval * MISSED + GRACE {
            return Err(format!(
                "stalled: no interval has ended for {} s (one is due every {} s)",
                since.as_secs(),
                interval.as_secs_f64()
            ));
        }
        match unlinked.is_empty() {
            true => Ok(()),
            false => Err(format!("detached: no link runs {}", unlinked.join(", "))),
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
        health.ended(Duration::from_secs(3600), Vec::new());
        assert!(
            health
                .check(Instant::now() + Duration::from_secs(3 * 3600))
                .is_ok()
        );
    }

    #[test]
    fn programs_left_without_a_link_fail_the_check_until_linked_again() {
        let health = Health::new(Duration::from_secs(1));
        let unlinked = vec!["fdprof_lock_begin".into(), "fdprof_lock_end".into()];
        health.ended(Duration::from_secs(1), unlinked);
        assert_eq!(
            health.check(Instant::now()),
            Err("detached: no link runs fdprof_lock_begin, fdprof_lock_end".into())
        );
        health.ended(Duration::from_secs(1), Vec::new());
        assert!(health.check(Instant::now()).is_ok());
    }
}
