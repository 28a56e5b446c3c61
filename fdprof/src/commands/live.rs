//! Interval figures: each delta the streaming collector sends is assembled into a recording of
//! its own (`model::assemble::recording`) and analysed (`analysis::report`), so an interval has
//! the same figures, and the same JSON, as `report --json` gives a whole recording.

use std::collections::BTreeMap;

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::EndReason,
};

use crate::analysis::{self, Interval, ReportOptions};
use crate::collect::{Profiler, Snapshot, stream::IntervalDelta};
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
    /// Whether the fd syscalls are timed (`--latency`).
    pub syscall_latency: bool,
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
            syscall_latency: profiler.syscall_latency(),
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
        syscall_latency: facts.syscall_latency,
        notes: facts.notes.clone(),
        collector_cpu_ns: delta.collector_cpu_ns,
    };
    let mut recording = assemble::recording(&delta.delta, run, sym);
    // Processes that only waited, named while they live (system-wide only).
    crate::model::process::name_unnamed(&mut recording);
    Interval {
        index: delta.index,
        start_ns: delta.start.as_nanos() as u64,
        duration_ns: delta.duration.as_nanos() as u64,
        report: analysis::report(&recording, &ReportOptions::default()),
        // The caller adds the interval's events, oldest first.
        events: Vec::new(),
    }
}

/// The report over everything from `since` (a total snapshot: the start, or the last reset)
/// to the end of `delta`'s interval: the screen's cumulative view.
pub fn cumulative(
    delta: &IntervalDelta,
    since: &Snapshot,
    facts: &Facts,
    sym: &mut Symbolizers,
) -> crate::analysis::Report {
    let whole = IntervalDelta {
        index: delta.index,
        start: since.elapsed,
        duration: delta.total.elapsed.saturating_sub(since.elapsed),
        delta: delta.total.delta(since),
        total: Snapshot::default(),
        collector_cpu_ns: 0,
        last: delta.last,
    };
    interval(&whole, facts, EndReason::Duration, sym).report
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fdprof_common::{counters::per_syscall, session::TargetKind, syscalls::FD_SYSCALLS};

    use super::*;
    use crate::collect::Snapshot;
    use crate::symbolize::{KernelSymbols, UserSymbolizer};

    /// A snapshot `elapsed_ms` after attach with `calls` socket() calls, sized as the maps are.
    fn snapshot(elapsed_ms: u64, calls: u64) -> Snapshot {
        let mut snap = Snapshot {
            elapsed: Duration::from_millis(elapsed_ms),
            ..crate::collect::Snapshot::zeroed()
        };
        let socket = FD_SYSCALLS.iter().position(|s| s.name == "socket").unwrap() as u32;
        snap.syscall_counters[(socket * per_syscall::COUNT + per_syscall::CALLS) as usize] = calls;
        snap
    }

    #[test]
    fn an_interval_holds_its_delta_only_with_the_report_of_a_recording() {
        let (earlier, now) = (snapshot(1000, 5), snapshot(1500, 12));
        let delta = IntervalDelta {
            index: 1,
            start: earlier.elapsed,
            duration: now.elapsed - earlier.elapsed,
            delta: now.delta(&earlier),
            total: now.clone(),
            collector_cpu_ns: 42,
            last: false,
        };
        let facts = Facts {
            target: Target {
                kind: TargetKind::Pid,
                pid: Some(7),
                pids: Vec::new(),
                children: false,
                tid: None,
                command: Vec::new(),
                comm: Some("srv".into()),
                exit_status: None,
                threads: None,
            },
            started_unix_ms: 1_000_000,
            mode: Mode::Tracepoint,
            probes: BTreeMap::new(),
            syscall_latency: false,
            notes: Vec::new(),
        };
        let kernel = KernelSymbols::parse("ffffffff81000100 T alloc_fd\n").unwrap();
        let mut user = UserSymbolizer::new();
        let mut sym = Symbolizers {
            kernel: &kernel,
            user: &mut user,
            user_pid: None,
            raw_addrs: false,
        };
        let iv = interval(&delta, &facts, EndReason::Duration, &mut sym);
        assert_eq!(
            (iv.index, iv.start_ns, iv.duration_ns),
            (1, 1e9 as u64, 5e8 as u64)
        );
        let header = &iv.report.header;
        assert_eq!(header.duration_ns, iv.duration_ns);
        assert_eq!(header.started_unix_ms, 1_001_000);
        assert_eq!(header.target.description, "pid 7 (srv)");
        assert_eq!(iv.report.syscalls.len(), 1);
        assert_eq!(iv.report.syscalls[0].name, "socket");
        assert_eq!(iv.report.syscalls[0].calls, 7);
        assert_eq!(iv.report.own_cost.collector_cpu_ns, 42);
    }
}
