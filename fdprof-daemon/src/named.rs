//! A target name's figures. While a name is the daemon's only one (`-a`'s `all`, or a single
//! `--comm`), its figures are the daemon's whole but for what only the daemon has (its own
//! drops and CPU): it reads the daemon's history rather than keeping a second copy of every
//! interval, running total and stack.

use fdprof_recording::Recording;
use fdprof_recording::recording::Target;

use fdprof_figures::TimelinePoint;
use fdprof_profiler::model::window;

use super::history::{History, Span, SpanError};
use super::watcher::DAEMON_PROBE;

/// How a name's figures are held.
#[derive(Debug)]
pub(crate) enum Named {
    /// Its own history: one of several names, or a name that was.
    Own(Box<History>),
    /// The daemon's history, read as this target's.
    Daemon(Target),
}

/// A name's figures as the endpoints read them.
#[derive(Clone, Copy)]
pub(crate) struct NameView<'a> {
    history: &'a History,
    /// Set when `history` is the daemon's, to read as this target's.
    as_target: Option<&'a Target>,
}

impl<'a> NameView<'a> {
    /// The daemon's own figures, every name's together.
    pub(crate) fn daemon(history: &'a History) -> Self {
        Self {
            history,
            as_target: None,
        }
    }
}

impl Named {
    pub(crate) fn view<'a>(&'a self, daemon: &'a History) -> NameView<'a> {
        match self {
            Named::Own(history) => NameView {
                history,
                as_target: None,
            },
            Named::Daemon(target) => NameView {
                history: daemon,
                as_target: Some(target),
            },
        }
    }
}

/// The daemon's figures made a target's: its name, without the daemon's own drops and CPU.
pub(crate) fn as_target(rec: &mut Recording, target: &Target) {
    rec.target = target.clone();
    rec.drops.retain(|d| d.probe != DAEMON_PROBE);
    rec.own_cost.collector_cpu_ns = 0;
}

impl NameView<'_> {
    fn fix(&self, rec: &mut Recording) {
        if let Some(target) = self.as_target {
            as_target(rec, target);
        }
    }

    pub(crate) fn total(&self) -> Recording {
        let mut rec = self.history.total.clone();
        self.fix(&mut rec);
        rec
    }

    pub(crate) fn span(&self, span: Span) -> Result<Recording, SpanError> {
        Ok(self.span_folding(span)?.0)
    }

    pub(crate) fn span_folding(&self, span: Span) -> Result<(Recording, u64), SpanError> {
        let (mut rec, folded) = self.history.span_folding(span)?;
        self.fix(&mut rec);
        Ok((rec, folded))
    }

    pub(crate) fn points(&self) -> impl Iterator<Item = TimelinePoint> + '_ {
        self.history.points()
    }

    pub(crate) fn between(&self, from_ns: u64, until_ns: u64) -> Vec<window::Timed> {
        let mut intervals = self.history.between(from_ns, until_ns);
        for t in &mut intervals {
            self.fix(&mut t.rec);
        }
        intervals
    }
}
