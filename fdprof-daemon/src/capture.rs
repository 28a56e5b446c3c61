//! The flight recorder (`--capture-on`): every interval, each target's figures are checked with
//! the diagnosis the report uses (and for `slow-wait`, a `file_lock` wait past `--slow`); when
//! a rule fires, the daemon waits `--capture-after`, then writes the intervals around it
//! (`--capture-window` before the one that fired, `--capture-after` after) as one recording
//! with its series, from the intervals it keeps anyway. At most one capture per target and
//! rule per `--capture-every`; at most `--capture-max` in the directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fdprof_common::contention::LockKind;
use fdprof_figures::EventKind;
use fdprof_recording::Recording;

use fdprof_profiler::analysis::{self, ReportOptions};
use fdprof_profiler::model::window;
use fdprof_profiler::render::human;

use super::capture_dir;
use super::config::{Capture, Trigger};
use super::interval::{IntervalFigures, Names};
use super::log;
use super::state::{State, Written};

/// A capture waiting for its last intervals.
#[derive(Debug, Clone)]
struct Pending {
    target: String,
    trigger: Trigger,
    /// The start of the interval that fired (Unix ms): the capture's name.
    fired_unix_ms: u64,
    /// Intervals overlapping `[from_ns, until_ns)` (the daemon's clock) go in.
    from_ns: u64,
    until_ns: u64,
    dir: PathBuf,
    max: usize,
}

#[derive(Default)]
pub(crate) struct Recorder {
    /// When each target and trigger last fired a capture (the fired interval's start).
    last: HashMap<(String, Trigger), u64>,
    pending: Vec<Pending>,
    writing: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Checks each target's interval against `settings`' triggers; one that fires (and is past
    /// its rate limit) becomes a pending capture. Returns the captures begun, by target.
    pub(crate) fn check(
        &mut self,
        settings: &Capture,
        figures: &IntervalFigures,
    ) -> Vec<(String, Trigger)> {
        let one = matches!(figures.names, Names::Whole { .. });
        let mut begun = Vec::new();
        for (name, rec) in figures.each_name() {
            let fired = fired(settings, rec, figures, one);
            for trigger in fired {
                let key = (name.clone(), trigger);
                let start = figures.start_ns;
                let every = settings.every.as_nanos() as u64;
                if self.last.get(&key).is_some_and(|&at| start < at + every) {
                    continue;
                }
                self.last.insert(key, start);
                log::info(&format!(
                    "capture: {} fired for target {name}; writing in {:?}",
                    trigger.name(),
                    settings.after
                ));
                self.pending.push(Pending {
                    target: name.clone(),
                    trigger,
                    fired_unix_ms: rec.started_unix_ms,
                    from_ns: start.saturating_sub(settings.window.as_nanos() as u64),
                    until_ns: start + rec.duration_ns + settings.after.as_nanos() as u64,
                    dir: settings.dir.clone(),
                    max: settings.max,
                });
                begun.push((name.clone(), trigger));
            }
        }
        begun
    }

    /// Starts writing the captures whose last interval has ended by `end_ns` (all of them when
    /// `end_ns` is `None`: the daemon stops), from the intervals `state` keeps.
    pub(crate) fn write_due(
        &mut self,
        state: &Arc<State>,
        end_ns: Option<u64>,
        interval: Duration,
    ) {
        self.writing.retain(|w| !w.is_finished());
        let (due, waiting) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| end_ns.is_none_or(|end| p.until_ns <= end));
        self.pending = waiting;
        for p in due {
            let intervals = state
                .read()
                .name(&p.target)
                .map(|h| h.between(p.from_ns, p.until_ns))
                .unwrap_or_default();
            let count = intervals.len();
            let Some(mut rec) = window::with_series(intervals, interval.as_nanos() as u64) else {
                continue;
            };
            rec.notes.push(format!(
                "captured by fdprof daemon: {} fired for {} in the interval from {}",
                p.trigger.name(),
                p.target,
                human::utc(p.fired_unix_ms)
            ));
            let state = state.clone();
            self.writing.push(tokio::task::spawn_blocking(move || {
                write(&state, &p, &rec, count);
            }));
        }
    }

    /// Writes what is pending with the intervals there are, and waits for every write.
    pub(crate) async fn finish(&mut self, state: &Arc<State>, interval: Duration) {
        self.write_due(state, None, interval);
        for w in self.writing.drain(..) {
            let _ = w.await;
        }
    }
}

/// The triggers `rec` (one target's interval) fires.
fn fired(
    settings: &Capture,
    rec: &Recording,
    figures: &IntervalFigures,
    one: bool,
) -> Vec<Trigger> {
    let rules = settings.on.iter().any(|t| matches!(t, Trigger::Rule(_)));
    let report = rules.then(|| analysis::report(rec, &ReportOptions::default()));
    settings
        .on
        .iter()
        .copied()
        .filter(|&t| match t {
            Trigger::Rule(rule) => report
                .as_ref()
                .is_some_and(|r| r.diagnosis.findings.iter().any(|f| f.rule == rule)),
            Trigger::SlowWait => figures.events.iter().any(|e| {
                matches!(&e.what, EventKind::SlowWait { lock, .. } if lock.kind == LockKind::FileLock)
                    && (one || rec.processes.iter().any(|p| p.pid == e.pid))
            }),
        })
        .collect()
}

/// Writes one capture (on a blocking thread), then keeps the directory to its bound; logs,
/// counts and tells the stream what came of it.
fn write(state: &State, p: &Pending, rec: &Recording, intervals: usize) {
    let stamp = human::utc_stamp(p.fired_unix_ms);
    let name = capture_dir::file_name(&stamp, &p.target, p.trigger.name());
    let written = serde_json::to_vec_pretty(rec)
        .map_err(anyhow::Error::from)
        .and_then(|data| Ok((capture_dir::write(&p.dir, &name, &data)?, data.len())));
    match written {
        Ok((path, bytes)) => {
            let written = Written {
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or(name),
                path: path.display().to_string(),
                target: p.target.clone(),
                rule: p.trigger.name(),
                fired_unix_ms: p.fired_unix_ms,
                intervals,
                bytes,
            };
            log::info(&format!(
                "capture: wrote {} ({} fired for {}; {intervals} intervals, {bytes} bytes)",
                written.path, written.rule, written.target
            ));
            match capture_dir::prune(&p.dir, p.max) {
                Ok(removed) if !removed.is_empty() => log::info(&format!(
                    "capture: removed {} (at most {} kept)",
                    removed.join(", "),
                    p.max
                )),
                Ok(_) => {}
                Err(e) => log::error(&format!("capture: cannot remove old captures: {e}")),
            }
            state.capture_written(written);
        }
        Err(e) => {
            log::error(&format!(
                "capture: cannot write {name} ({} fired for {}): {e:#}",
                p.trigger.name(),
                p.target
            ));
            state.capture_failed();
        }
    }
}
