//! Intervals and whole profiles turned into recordings (`model::assemble`), their stacks
//! symbolized now, while their processes live.

use std::time::Duration;

use fdprof_common::session::EndReason;
use fdprof_recording::{Recording, series::Sample};

use super::{Facts, LiveInterval, Symbols};
use crate::collect::Snapshot;
use crate::model::{
    assemble::{self, Run},
    sample,
};

/// The facts of a profile and its symbolizers.
pub struct Assembler {
    pub facts: Facts,
    pub symbols: Symbols,
}

impl Assembler {
    /// `interval` assembled; `end` is why it ended.
    pub fn recording(&mut self, interval: &LiveInterval, end: EndReason) -> Recording {
        let run = self.facts.run(
            interval.start,
            interval.duration,
            end,
            interval.collector_cpu_ns,
        );
        self.assemble(&interval.delta, run)
    }

    /// Everything from `since` (a total: the start, or a reset) to the end of `interval`.
    pub fn cumulative(&mut self, interval: &LiveInterval, since: &Snapshot) -> Recording {
        let run = self.facts.run(
            since.elapsed,
            interval.total.elapsed.saturating_sub(since.elapsed),
            EndReason::Duration,
            0,
        );
        self.assemble(&interval.total.delta(since), run)
    }

    /// The whole profile (`total`, since attach), `duration` long, ended by `end`, having
    /// cost fdprof `cpu_ns`.
    pub(crate) fn whole(
        &mut self,
        total: &Snapshot,
        duration: Duration,
        end: EndReason,
        cpu_ns: u64,
    ) -> Recording {
        let run = self.facts.run(Duration::ZERO, duration, end, cpu_ns);
        self.assemble(total, run)
    }

    /// `interval`'s sample of a recording's series.
    pub fn sample(&mut self, interval: &LiveInterval) -> Sample {
        sample::of_snapshot(
            interval.start.as_nanos() as u64,
            interval.duration.as_nanos() as u64,
            &interval.delta,
            &mut self.symbols.symbolizers(),
        )
    }

    /// The recording of `snap`, with the processes that only waited named while they live.
    fn assemble(&mut self, snap: &Snapshot, run: Run) -> Recording {
        let mut recording = assemble::recording(snap, run, &mut self.symbols.symbolizers());
        crate::model::process::name_unnamed(&mut recording);
        self.symbols.identify(&mut recording);
        recording
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fdprof_common::{counters::per_syscall, session::TargetKind, syscalls::FD_SYSCALLS};

    use std::collections::BTreeMap;

    use fdprof_common::probes::Mode;

    use super::*;
    use crate::live::{Facts, Maps, Symbols};
    use crate::symbolize::{KernelSymbols, UserSymbolizer};
    use fdprof_recording::recording::Target;

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
    fn an_interval_holds_its_delta_only_timed_from_its_start() {
        let (earlier, now) = (snapshot(1000, 5), snapshot(1500, 12));
        let delta = LiveInterval {
            index: 1,
            start: earlier.elapsed,
            duration: now.elapsed - earlier.elapsed,
            delta: now.delta(&earlier),
            total: now.clone(),
            collector_cpu_ns: 42,
            events: Vec::new(),
            events_dropped: 0,
            last: false,
        };
        let facts = Facts {
            target: Target {
                kind: TargetKind::Pid,
                pid: Some(7),
                pids: Vec::new(),
                children: false,
                cgroups: Vec::new(),
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
            raw_addrs: false,
        };
        let kernel = KernelSymbols::parse("ffffffff81000100 T alloc_fd\n").unwrap();
        let symbols = Symbols::new(kernel, UserSymbolizer::new(), Maps::set(), 0, false);
        let mut assembler = Assembler { facts, symbols };
        let rec = assembler.recording(&delta, EndReason::Duration);
        assert_eq!(rec.duration_ns, 5e8 as u64);
        assert_eq!(rec.started_unix_ms, 1_001_000);
        assert_eq!(rec.target.pid, Some(7));
        assert_eq!(rec.syscalls.len(), 1);
        assert_eq!(rec.syscalls[0].name, "socket");
        assert_eq!(rec.syscalls[0].calls, 7);
        assert_eq!(rec.own_cost.collector_cpu_ns, 42);
    }
}
