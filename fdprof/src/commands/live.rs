//! Interval figures: each delta the streaming collector sends is assembled into a recording of
//! its own (`model::assemble::recording`) and analysed (`analysis::report`), so an interval has
//! the same figures, and the same JSON, as `report --json` gives a whole recording.

use std::collections::BTreeMap;

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::EndReason,
};

use crate::analysis::{self, Interval, ReportOptions};
use crate::collect::{Profiler, stream::IntervalDelta};
use crate::model::{
    assemble::{self, Run},
    build::Symbolizers,
    recording::Target,
};

/// What is known of the live profile besides each interval's delta.
#[derive(Debug, Clone)]
pub struct Facts {
    pub target: Target,
    /// When the probes were attached, Unix time in ms.
    pub started_unix_ms: u64,
    pub mode: Mode,
    pub probes: BTreeMap<Role, Attachment>,
    pub notes: Vec<String>,
}

impl Facts {
    /// The facts of `profiler`, profiling `target` since `started_unix_ms`.
    pub fn of(profiler: &Profiler, target: Target, started_unix_ms: u64) -> Self {
        let mut notes = profiler.notes().to_vec();
        if target.kind == fdprof_common::session::TargetKind::All {
            notes.push("user stacks are not symbolized in system-wide mode".into());
        }
        Self {
            target,
            started_unix_ms,
            mode: profiler.mode(),
            probes: profiler.attachments().clone(),
            notes,
        }
    }
}

/// The figures of one interval. `end` is why the interval ended: [`EndReason::Duration`] for
/// one that ran its length, the profile's end reason for the last one.
pub fn interval(
    delta: &IntervalDelta,
    facts: &Facts,
    end: EndReason,
    sym: &mut Symbolizers,
) -> Interval {
    let run = Run {
        target: facts.target.clone(),
        started_unix_ms: facts.started_unix_ms + delta.start.as_millis() as u64,
        duration_ns: delta.duration.as_nanos() as u64,
        end_reason: end,
        mode: facts.mode,
        probes: facts.probes.clone(),
        raw_addrs: sym.raw_addrs,
        notes: facts.notes.clone(),
        collector_cpu_ns: delta.collector_cpu_ns,
    };
    let recording = assemble::recording(&delta.delta, run, sym);
    Interval {
        index: delta.index,
        start_ns: delta.start.as_nanos() as u64,
        duration_ns: delta.duration.as_nanos() as u64,
        report: analysis::report(&recording, &ReportOptions::default()),
        // EVENTS JOIN HERE: the interval's events, oldest first.
        events: Vec::new(),
    }
}
