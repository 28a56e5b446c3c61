//! Windows of full tracing as the watcher runs them: asked for by a signal, a request, a
//! capture or a target's wait past `--trace-on`; the fd syscall programs linked while one is
//! open and unlinked when it ends. [`Windows`] keeps the budget; this decides and switches.

use std::time::{Duration, Instant};

use fdprof_figures::FullTracing;

use super::Watcher;
use crate::config::{Tier, TraceOn, Trigger, Watch};
use crate::interval::IntervalFigures;
use crate::log;
use crate::windows::{self, Opener, Traced, Windows};

/// What asking for a window came to: the answer, and whether a window opened (so the programs
/// are to be linked).
#[derive(Debug, PartialEq, Eq)]
struct Asked {
    traced: Traced,
    opened: bool,
}

/// Asks `windows` for a window of `length` (`--trace-window` when `None`) from `now`, as the
/// watch allows: never under `--lock-only`, always under `--tier full`.
fn ask(watch: &Watch, windows: &mut Windows, length: Option<Duration>, now: Instant) -> Asked {
    let unchanged = |traced| Asked {
        traced,
        opened: false,
    };
    if watch.lock_only {
        return unchanged(Traced::Never);
    }
    if watch.tracing.tier == Tier::Full {
        return unchanged(Traced::Always);
    }
    let was_open = windows.is_open();
    match windows.ask(now, length.unwrap_or(watch.tracing.window)) {
        Err(spent) => unchanged(Traced::Spent(spent)),
        Ok(left) => Asked {
            traced: Traced::For(left),
            opened: !was_open,
        },
    }
}

impl Watcher {
    /// Opens a window of full tracing of `length` (`--trace-window` when `None`) from now, or
    /// makes the open one last that long from now, as far as `--trace-max` allows.
    pub(crate) fn trace_window(&mut self, opener: Opener, length: Option<Duration>) -> Traced {
        let asked = ask(&self.watch, &mut self.windows, length, Instant::now());
        match asked.traced {
            // Said once per window that could not open, not at every interval it is asked.
            Traced::Spent(spent)
                if !matches!(opener, Opener::Wait { .. } | Opener::Capture { .. }) =>
            {
                log::warn(&format!(
                    "{opener}: no full tracing, --trace-max ({:?} an hour) is spent for {:?}",
                    self.watch.tracing.max, spent.retry_after
                ));
            }
            Traced::For(left) if asked.opened => {
                log::info(&format!("{opener}: full tracing for {left:?}"));
                self.switch_full_tracing(true);
            }
            Traced::For(left) => {
                log::debug(&format!("{opener}: full tracing goes on for {left:?}"));
            }
            _ => {}
        }
        asked.traced
    }

    /// Opens a window when an interval asks for one: a capture begun on it (for
    /// `--capture-after`: the capture holds the window its rule opened), or a target's
    /// `file_lock` wait past `--trace-on`.
    pub(crate) fn trace_if_asked(
        &mut self,
        figures: &IntervalFigures,
        captures: Vec<(String, Trigger)>,
    ) {
        let after = self.watch.capture.as_ref().map(|c| c.after);
        for (target, trigger) in captures {
            let length = after.map(|a| a.max(self.watch.interval));
            self.trace_window(Opener::Capture { target, trigger }, length);
        }
        if let TraceOn::Wait(on) = self.watch.tracing.on
            && let Some(opener) = windows::wait_past(figures.each_name(), on)
        {
            self.trace_window(opener, None);
        }
    }

    /// When the open window of full tracing is due to end: the main loop ends it then.
    pub(crate) fn window_due(&self) -> Option<Instant> {
        self.windows.due()
    }

    /// Ends the window of full tracing once its time has passed by `now`.
    pub(crate) fn end_window_if_due(&mut self, now: Instant) {
        if self.windows.close_if_due(now) {
            log::info("full tracing ends: its window has passed");
            self.switch_full_tracing(false);
        }
    }

    /// The time of `[from, to)` the fd syscalls were traced, as the interval's recording
    /// states it (`None` under `--tier full`: traced throughout), and in ns.
    pub(super) fn traced_in(&self, from: Instant, to: Instant) -> (Option<FullTracing>, u64) {
        if self.watch.lock_only {
            return (None, 0);
        }
        if self.watch.tracing.tier == Tier::Full {
            return (None, to.saturating_duration_since(from).as_nanos() as u64);
        }
        let traced = self
            .windows
            .traced_in(from, to, |at| self.assembly.unix_ms(at));
        let ns = traced.traced_ns;
        (Some(traced), ns)
    }

    pub(super) fn switch_full_tracing(&mut self, on: bool) {
        if let Some(loaded) = self.stage.as_mut()
            && let Err(e) = loaded.stage.profiler_mut().set_full_tracing(on)
        {
            log::error(&format!("{e:#}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Targets;

    fn watch(tier: Tier, lock_only: bool) -> Watch {
        let mut w = super::super::watch_of(Targets::All);
        w.tracing.tier = tier;
        w.tracing.max = Duration::from_secs(40);
        w.lock_only = lock_only;
        w
    }

    #[test]
    fn the_tiers_answer_without_a_window() {
        let now = Instant::now();
        let mut windows = Windows::new(Duration::from_secs(40));
        let full = ask(&watch(Tier::Full, false), &mut windows, None, now);
        assert_eq!(full.traced, Traced::Always);
        let locks = ask(&watch(Tier::Rest, true), &mut windows, None, now);
        assert_eq!(locks.traced, Traced::Never);
        assert!(!full.opened && !locks.opened && !windows.is_open());
    }

    #[test]
    fn a_window_opens_once_lasts_as_asked_and_stops_at_the_budget() {
        let w = watch(Tier::Rest, false);
        let now = Instant::now();
        let mut windows = Windows::new(w.tracing.max);
        let first = ask(&w, &mut windows, None, now);
        assert_eq!(first.traced, Traced::For(Duration::from_secs(30)));
        assert!(first.opened);
        // Asked again while open: it goes on, nothing to link again.
        let again = ask(&w, &mut windows, Some(Duration::from_secs(5)), now);
        assert_eq!(again.traced, Traced::For(Duration::from_secs(30)));
        assert!(!again.opened);
        // 35 s in, 5 s of the 40 s budget are left: the window lasts no longer.
        let later = now + Duration::from_secs(35);
        let longer = ask(&w, &mut windows, None, later);
        assert_eq!(longer.traced, Traced::For(Duration::from_secs(5)));
        windows.close(later + Duration::from_secs(5));
        let spent = ask(&w, &mut windows, None, later + Duration::from_secs(6));
        assert!(matches!(spent.traced, Traced::Spent(_)) && !spent.opened);
    }
}
