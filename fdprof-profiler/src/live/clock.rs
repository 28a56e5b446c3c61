//! The interval clock of a live view (`top`, `record --interval`, the daemon).

use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::{Instant, Sleep};

/// Ends each interval one period after the last one was cut, so that no interval is shorter
/// than asked: a pass that runs late (a stalled process, a slow snapshot, a slow sink) makes its
/// own interval longer and moves the clock on. A clock on fixed deadlines would end the next
/// interval at once, a few ms after the late cut, and its rates (and `/proc/stat` steal, counted
/// in 10 ms ticks) would be noise.
pub struct Clock {
    every: Duration,
    next: Pin<Box<Sleep>>,
}

impl Clock {
    /// The first interval ends `every` from now.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            next: Box::pin(tokio::time::sleep_until(Instant::now() + every)),
        }
    }

    /// Waits until the interval is due; cancel-safe. Due until [`Clock::cut`].
    pub async fn tick(&mut self) {
        self.next.as_mut().await;
    }

    /// The interval was cut now: the next one ends a period from now.
    pub fn cut(&mut self) {
        let next = Instant::now() + self.every;
        self.next.as_mut().reset(next);
    }
}

/// Now, Unix time in ms: the unit recordings and windows carry.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    /// A cut that comes late (the process stopped between the tick and the snapshot) is
    /// followed by a whole interval, not by one that ends at once.
    #[tokio::test(start_paused = true)]
    async fn a_late_cut_is_followed_by_a_whole_interval() {
        let every = Duration::from_millis(100);
        let mut clock = Clock::new(every);
        let begun = Instant::now();
        clock.tick().await;
        assert_eq!(begun.elapsed(), every);
        advance(Duration::from_millis(150)).await;
        clock.cut();
        let cut = Instant::now();
        clock.tick().await;
        assert_eq!(cut.elapsed(), every, "the interval after a late cut");
        clock.cut();
        let cut = Instant::now();
        clock.tick().await;
        assert_eq!(cut.elapsed(), every);
    }
}
