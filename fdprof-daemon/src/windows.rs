//! Windows of full tracing under `--tier rest`: what opens one (SIGUSR1, `POST
//! /api/v1/trace`, a target's `file_lock` wait past `--trace-on`, a capture's rule), how long
//! it lasts, and the budget that bounds them all: at most `--trace-max` of full tracing in any
//! hour, so that the fd syscall programs' cost is bounded however often something asks.
//!
//! A window ends at its own end or the budget's edge, whichever is first, even mid-interval:
//! the main loop sleeps until [`Windows::due`] (an interval of an hour must not stretch a
//! window to an hour). An interval may so hold several windows, each stated.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use fdprof_common::contention::LockKind;
use fdprof_figures::{FullTracing, TracedWindow};
use fdprof_recording::Recording;

use super::config::Trigger;

const HOUR: Duration = Duration::from_secs(3600);
/// Windows kept for the budget's hour: past it, none opens until the oldest is an hour old
/// (a window lasts at least an interval, so at the default 1 s the hour holds no more).
const WINDOWS_PER_HOUR: usize = 3600;

/// What opened (or lengthened) a window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Opener {
    Signal,
    Request,
    /// A target's `file_lock` wait in an interval, per second, past `--trace-on`.
    Wait {
        target: String,
        per_second: Duration,
    },
    /// A capture's trigger fired for a target: its capture holds the window.
    Capture {
        target: String,
        trigger: Trigger,
    },
}

impl fmt::Display for Opener {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Opener::Signal => write!(f, "SIGUSR1"),
            Opener::Request => write!(f, "POST /api/v1/trace"),
            Opener::Wait { target, per_second } => write!(
                f,
                "target {}'s file_lock wait of {per_second:?} a second is past --trace-on",
                fdprof_recording::escape::name(target)
            ),
            Opener::Capture { target, trigger } => write!(
                f,
                "capture rule {} fired for target {}",
                trigger.name(),
                fdprof_recording::escape::name(target)
            ),
        }
    }
}

/// A window asked for that the budget cannot give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spent {
    /// When some of the budget is free again.
    pub retry_after: Duration,
}

/// What came of asking for a window of full tracing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Traced {
    /// `--tier full`: the fd syscalls are traced anyway.
    Always,
    /// `--lock-only`: no fd syscall program is loaded.
    Never,
    /// Traced from now on for this long.
    For(Duration),
    /// The hour's budget (`--trace-max`) is spent.
    Spent(Spent),
}

/// `POST /api/v1/trace?seconds=N`, on its way to the main loop, which answers it.
pub(crate) struct Ask {
    pub length: Duration,
    pub answer: tokio::sync::oneshot::Sender<Traced>,
}

/// The window open now, if any, and the windows of the last hour.
#[derive(Debug)]
pub(crate) struct Windows {
    max: Duration,
    open: Option<Window>,
    /// Windows closed, the oldest first; those that ended over an hour ago go.
    past: VecDeque<Window>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    since: Instant,
    /// When it is due to end (while open), or when it ended.
    until: Instant,
}

impl Windows {
    /// At most `max` of full tracing in any hour.
    pub(crate) fn new(max: Duration) -> Windows {
        Windows {
            max,
            open: None,
            past: VecDeque::new(),
        }
    }

    pub(crate) fn set_max(&mut self, max: Duration) {
        self.max = max;
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// When the open window is due to end (never past the budget's edge: [`Windows::ask`]
    /// gives no more than is left).
    pub(crate) fn due(&self) -> Option<Instant> {
        self.open.map(|w| w.until)
    }

    /// Full tracing in the hour before `now` (the open window's part included).
    fn spent(&self, now: Instant) -> Duration {
        let hour_ago = now.checked_sub(HOUR);
        let part = |w: &Window, end: Instant| {
            let from = hour_ago.map_or(w.since, |h| w.since.max(h));
            end.saturating_duration_since(from)
        };
        let past: Duration = self.past.iter().map(|w| part(w, w.until)).sum();
        past + self.open.as_ref().map_or(Duration::ZERO, |w| part(w, now))
    }

    /// Opens a window of `length` from `now`, or makes the open one last at least that long
    /// from now, as far as the budget allows. Returns how long it lasts from now.
    pub(crate) fn ask(&mut self, now: Instant, length: Duration) -> Result<Duration, Spent> {
        while self.past.front().is_some_and(|w| w.until + HOUR <= now) {
            self.past.pop_front();
        }
        let left = self.max.saturating_sub(self.spent(now));
        let full = self.open.is_none() && self.past.len() >= WINDOWS_PER_HOUR;
        if left.is_zero() || full {
            let oldest = self.past.front().map_or(now, |w| w.since);
            return Err(Spent {
                retry_after: (oldest + HOUR)
                    .saturating_duration_since(now)
                    .max(Duration::from_secs(1)),
            });
        }
        let until = now + length.min(left);
        let window = self.open.get_or_insert(Window { since: now, until });
        window.until = window.until.max(until);
        Ok(window.until - now)
    }

    /// Ends the open window if its time has passed by `now`; true if it did.
    pub(crate) fn close_if_due(&mut self, now: Instant) -> bool {
        match self.open {
            Some(w) if now >= w.until => {
                self.close(now);
                true
            }
            _ => false,
        }
    }

    /// Ends the open window now (its programs were unloaded, or the tier changed).
    pub(crate) fn close(&mut self, now: Instant) {
        if let Some(mut w) = self.open.take() {
            w.until = now;
            self.past.push_back(w);
        }
    }

    /// The part of `[from, to)` traced in full, as a recording states it (`unix_ms` turns a
    /// moment into Unix ms).
    pub(crate) fn traced_in(
        &self,
        from: Instant,
        to: Instant,
        unix_ms: impl Fn(Instant) -> u64,
    ) -> FullTracing {
        let spans = self.spans_in(from, to);
        FullTracing {
            traced_ns: spans
                .iter()
                .map(|(since, until)| (*until - *since).as_nanos() as u64)
                .sum(),
            windows: spans
                .into_iter()
                .map(|(since, until)| TracedWindow {
                    from_unix_ms: unix_ms(since),
                    to_unix_ms: unix_ms(until),
                })
                .collect(),
        }
    }

    /// The parts of `[from, to)` traced in full, oldest first: those of the windows closed in
    /// it, then the open one's up to `to`.
    fn spans_in(&self, from: Instant, to: Instant) -> Vec<(Instant, Instant)> {
        let closed = self
            .past
            .iter()
            .rev()
            .take_while(|w| w.until > from)
            .map(|w| (w.since, w.until));
        let open = self.open.map(|w| (w.since, to));
        let mut spans: Vec<(Instant, Instant)> = closed
            .chain(open)
            .map(|(since, until)| (since.max(from), until.min(to)))
            .filter(|(since, until)| until > since)
            .collect();
        spans.sort();
        spans
    }

    #[cfg(test)]
    /// The one part of `[from, to)` traced in full, where there is exactly one.
    fn span_in(&self, from: Instant, to: Instant) -> Option<(Instant, Instant)> {
        match self.spans_in(from, to).as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }
}

/// The first target whose `file_lock` wait per second of its interval reached `on`, with
/// that wait per second.
pub(crate) fn wait_past<'a>(
    names: impl IntoIterator<Item = (&'a String, &'a Recording)>,
    on: Duration,
) -> Option<Opener> {
    names.into_iter().find_map(|(name, rec)| {
        let wait_ns: u64 = rec
            .contention
            .iter()
            .filter(|s| s.lock == LockKind::FileLock)
            .map(|s| s.total_wait_ns)
            .sum();
        let seconds = rec.duration_ns as f64 / 1e9;
        let per_second = Duration::from_nanos((wait_ns as f64 / seconds.max(1e-3)) as u64);
        (wait_ns > 0 && per_second >= on).then(|| Opener::Wait {
            target: name.clone(),
            per_second,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_window_lasts_its_length_and_a_second_ask_lengthens_it() {
        let t0 = Instant::now();
        let mut w = Windows::new(300 * S);
        assert_eq!(w.ask(t0, 30 * S), Ok(30 * S));
        assert_eq!(w.ask(t0 + 10 * S, 30 * S), Ok(30 * S));
        assert_eq!(w.ask(t0 + 10 * S, 5 * S), Ok(30 * S), "never shortened");
        assert!(!w.close_if_due(t0 + 39 * S));
        assert_eq!(
            w.span_in(t0 + 30 * S, t0 + 39 * S),
            Some((t0 + 30 * S, t0 + 39 * S))
        );
        assert!(w.close_if_due(t0 + 41 * S));
        assert_eq!(
            w.span_in(t0 + 39 * S, t0 + 41 * S),
            Some((t0 + 39 * S, t0 + 41 * S))
        );
        assert_eq!(w.span_in(t0 + 41 * S, t0 + 42 * S), None);
        assert_eq!(w.spent(t0 + 50 * S), 41 * S);
    }

    #[test]
    fn no_hour_holds_more_than_the_budget() {
        let t0 = Instant::now();
        let mut w = Windows::new(60 * S);
        assert_eq!(w.ask(t0, 45 * S), Ok(45 * S));
        w.close(t0 + 45 * S);
        assert_eq!(w.ask(t0 + 100 * S, 45 * S), Ok(15 * S), "what is left");
        w.close(t0 + 115 * S);
        let spent = w.ask(t0 + 200 * S, 10 * S).unwrap_err();
        assert_eq!(spent.retry_after, 3400 * S);
        // An hour after the first window began, its time starts coming back.
        assert_eq!(w.ask(t0 + 3610 * S, 30 * S), Ok(10 * S));
        w.close(t0 + 3620 * S);
        assert_eq!(w.ask(t0 + 3700 * S, 30 * S), Ok(30 * S));
    }

    /// A window ends at its own time, mid-interval: an interval of an hour holds every window
    /// that opened and closed in it, each for its own time, and never more than the budget.
    #[test]
    fn windows_end_on_time_and_an_interval_holds_each_of_them() {
        let t0 = Instant::now();
        let mut w = Windows::new(5 * S);
        assert_eq!(w.ask(t0, 30 * S), Ok(5 * S), "the budget's edge");
        assert_eq!(w.due(), Some(t0 + 5 * S));
        assert!(w.close_if_due(t0 + 5 * S));
        assert_eq!(w.due(), None);
        let mut w = Windows::new(60 * S);
        w.ask(t0 + S, 2 * S).unwrap();
        assert!(w.close_if_due(t0 + 3 * S));
        w.ask(t0 + 10 * S, 2 * S).unwrap();
        assert!(w.close_if_due(t0 + 12 * S));
        w.ask(t0 + 20 * S, 30 * S).unwrap();
        assert!(!w.close_if_due(t0 + 49 * S));
        assert!(w.close_if_due(t0 + 50 * S));
        let traced = w.traced_in(t0, t0 + 3600 * S, |_| 0);
        assert_eq!(traced.windows.len(), 3);
        assert_eq!(traced.traced_ns, (2 + 2 + 30) * 1_000_000_000);
        let early = w.traced_in(t0 + 2 * S, t0 + 11 * S, |_| 0);
        assert_eq!(
            early.traced_ns,
            2 * 1_000_000_000,
            "only the parts in the span"
        );
    }
}
