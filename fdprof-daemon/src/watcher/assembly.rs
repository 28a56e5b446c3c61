//! Each interval's figures, assembled: the stage's reading (and the last one of programs
//! unloaded since) symbolized into one recording of every process followed, the daemon's own
//! figures (its CPU, the host's steal, full tracing, what its bounds turned away), and that
//! recording narrowed to each target name's processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fdprof_common::probes::{Attachment, Mode, Role};
use fdprof_common::session::{EndReason, TargetKind};
use fdprof_figures::Event;
use fdprof_profiler::collect::Snapshot;
use fdprof_profiler::collect::stats::own_cpu_ns;
use fdprof_profiler::collect::steal::{CpuTimes, tick_ns};
use fdprof_profiler::live::{Symbols, unix_ms};
use fdprof_profiler::model::{
    assemble::{self, Run},
    merge, process,
};
use fdprof_recording::{
    Recording,
    recording::{DropCount, Target},
};

use super::{ALL, DAEMON_PROBE, Watcher, count_events_dropped};
use crate::config::{Targets, Watch};
use crate::followed::Followed;
use crate::interval::{IntervalFigures, Names};
use crate::log;

/// What the figures are made of between intervals.
pub(super) struct Assembly {
    /// A recording of nothing in the programs' mode ([`blank`]), cloned for every name's
    /// every interval.
    blank: Recording,
    started: Instant,
    started_unix_ms: u64,
    /// End of the last interval, since `started`.
    last_end: Duration,
    cpu_earlier: u64,
    /// The machine's CPU times at the end of the last interval, for its steal time.
    cpu_times: Option<CpuTimes>,
    index: u64,
    /// The last figures of programs unloaded since the last interval (a reload), and then
    /// the interval's own.
    whole: Option<Recording>,
    /// The events of both.
    events: Vec<Event>,
}

impl Assembly {
    pub(super) fn new(symbols: &mut Symbols, latency: bool) -> Self {
        Self {
            blank: blank(symbols, Mode::Tracepoint, BTreeMap::new(), latency),
            started: Instant::now(),
            started_unix_ms: unix_ms(),
            last_end: Duration::ZERO,
            cpu_earlier: own_cpu_ns(),
            cpu_times: CpuTimes::read(),
            index: 0,
            whole: None,
            events: Vec::new(),
        }
    }

    /// Programs loaded in `mode`: the blank recording is theirs from now on.
    pub(super) fn loaded(
        &mut self,
        symbols: &mut Symbols,
        mode: Mode,
        probes: BTreeMap<Role, Attachment>,
        latency: bool,
    ) {
        self.blank = blank(symbols, mode, probes, latency);
    }

    /// The daemon's start: the statistics windows and event times count from it.
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// `at` in Unix ms.
    pub(super) fn unix_ms(&self, at: Instant) -> u64 {
        self.started_unix_ms + at.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Adds figures read (an interval's, or the last of programs unloaded) to the next
    /// interval's.
    pub(super) fn add(&mut self, rec: Recording, events: Vec<Event>) {
        match self.whole.as_mut() {
            Some(into) => merge::add(into, &rec),
            None => self.whole = Some(rec),
        }
        self.events.extend(events);
    }

    /// The daemon stops: what was read is not wanted.
    pub(super) fn forget_finished(&mut self) {
        self.whole = None;
    }

    /// A recording of nothing, for `name` over `[start, start + duration)`: what each
    /// interval starts from.
    pub(super) fn empty(
        &self,
        watch: &Watch,
        name: &str,
        start: Duration,
        duration: Duration,
    ) -> Recording {
        Recording {
            target: target(kind(&watch.targets), name),
            started_unix_ms: self.started_unix_ms + start.as_millis() as u64,
            duration_ns: duration.as_nanos() as u64,
            // A reload may have changed it: the sum shows latency only if all measured it.
            syscall_latency: watch.latency,
            ..self.blank.clone()
        }
    }

    /// The interval ending `now`: its start and length since the daemon started.
    fn span(&mut self, now: Instant) -> (Duration, Duration) {
        let end = now.saturating_duration_since(self.started);
        let span = (self.last_end, end.saturating_sub(self.last_end));
        self.last_end = end;
        span
    }

    /// The daemon's own CPU time since the last interval.
    fn own_cpu(&mut self) -> u64 {
        let cpu = own_cpu_ns();
        let since = cpu.saturating_sub(self.cpu_earlier);
        self.cpu_earlier = cpu;
        since
    }

    /// The host's steal time since the last interval.
    fn steal(&mut self) -> Option<fdprof_recording::recording::StealTime> {
        let cpu_times = CpuTimes::read();
        let steal = match (&cpu_times, &self.cpu_times) {
            (Some(now), Some(then)) => Some(now.since(then, tick_ns()).into()),
            _ => None,
        };
        self.cpu_times = cpu_times;
        steal
    }
}

impl Watcher {
    /// Ends an interval: the figures of every process followed, narrowed to each name, and
    /// the daemon's. The rows of processes that left are deleted once read.
    pub(crate) fn interval(&mut self) -> IntervalFigures {
        self.sync();
        let now = Instant::now();
        self.end_window_if_due(now);
        self.read_stage();
        let (start, duration) = self.assembly.span(now);
        let (full_tracing, full_tracing_ns) = self.traced_in(self.assembly.started() + start, now);
        let collector_cpu_ns = self.assembly.own_cpu();
        let steal = self.assembly.steal();

        let mut daemon = self
            .assembly
            .empty(&self.watch, &self.daemon_name(), start, duration);
        // Dropped once added: under churn each copy of an interval's rows is megabytes.
        if let Some(whole) = self.assembly.whole.take() {
            merge::add(&mut daemon, &whole);
        }
        daemon.steal = steal;
        daemon.full_tracing = full_tracing;
        let names = names_of(&daemon, &self.watch.targets, &self.followed);
        self.followed.end_interval();
        for (reason, count) in std::mem::take(&mut self.followed.dropped) {
            daemon.drops.push(DropCount {
                probe: DAEMON_PROBE.into(),
                reason: reason.into(),
                count,
            });
        }
        daemon.own_cost.collector_cpu_ns = collector_cpu_ns;
        let mut events = std::mem::take(&mut self.assembly.events);
        events.sort_by_key(|e| e.at_ns);
        let index = self.assembly.index;
        self.assembly.index += 1;
        IntervalFigures {
            index,
            start_ns: start.as_nanos() as u64,
            names,
            daemon,
            events,
            full_tracing_ns,
            empty: self.empty_history(None),
        }
    }

    /// The stage's figures since the last interval, into the assembly; the rows of processes
    /// that left go.
    fn read_stage(&mut self) {
        let target = self.target();
        let Some(loaded) = self.stage.as_mut() else {
            return;
        };
        let stage = &mut loaded.stage;
        stage.assembler().facts.target = target;
        match stage.interval() {
            Ok(live) => {
                let rec = stage.assembler().recording(&live, EndReason::Duration);
                count_events_dropped(&mut self.followed.dropped, live.events_dropped);
                self.assembly.add(rec, live.events);
                // Their room serves new ones, and a pid reused later starts from zero.
                if let Err(e) = stage.forget(&self.followed.left()) {
                    log::error(&format!("{e:#}"));
                }
            }
            Err(e) => log::error(&format!("cannot read the figures: {e:#}")),
        }
    }

    /// The target of the daemon's own figures.
    pub(super) fn target(&self) -> Target {
        target(kind(&self.watch.targets), &self.daemon_name())
    }
}

/// Each name's interval, `daemon` narrowed to its processes; every name seen so far has one,
/// empty when none of its processes ran. With one name, it is `daemon` whole: the figures not
/// kept per process (latencies, on-CPU samples) are its too.
fn names_of(daemon: &Recording, targets: &Targets, followed: &Followed) -> Names {
    let target_of = |name: &str| target(kind(targets), name);
    if let Some(name) = whole_name(targets, followed) {
        return Names::Whole {
            name: name.to_string(),
            target: target_of(name),
        };
    }
    let each = followed
        .names
        .iter()
        .enumerate()
        .map(|(slot, name)| {
            let slot = slot as u32;
            let mut rec = process::only(daemon, |p| {
                followed.slot_of_pid(p.pid, &p.comm) == Some(slot)
            });
            rec.target = target_of(name);
            (name.clone(), rec)
        })
        .collect();
    Names::Each(each)
}

/// The name whose figures are the daemon's whole: `all`, or the only name.
fn whole_name<'a>(targets: &Targets, followed: &'a Followed) -> Option<&'a str> {
    match targets {
        Targets::All => Some(ALL),
        _ if followed.names.len() == 1 => Some(&followed.names[0]),
        _ => None,
    }
}

/// The kind of the daemon's targets.
fn kind(targets: &Targets) -> TargetKind {
    match targets {
        Targets::All => TargetKind::All,
        Targets::Cgroups(_) => TargetKind::Cgroup,
        _ => TargetKind::Name,
    }
}

/// The target of a name's figures (a cgroup target's name is its path).
fn target(kind: TargetKind, name: &str) -> Target {
    Target {
        kind,
        pid: None,
        pids: Vec::new(),
        children: false,
        cgroups: match kind {
            TargetKind::Cgroup => vec![name.to_string()],
            _ => Vec::new(),
        },
        tid: None,
        command: Vec::new(),
        comm: Some(name.to_string()),
        exit_status: None,
        threads: None,
    }
}

/// The facts of an interval's recording but its target and times.
fn blank_run(mode: Mode, probes: BTreeMap<Role, Attachment>, syscall_latency: bool) -> Run {
    Run {
        target: target(TargetKind::Name, ""),
        started_unix_ms: 0,
        duration_ns: 0,
        end_reason: EndReason::Duration,
        mode,
        probes,
        raw_addrs: false,
        syscall_latency,
        notes: Vec::new(),
        collector_cpu_ns: 0,
    }
}

/// A recording of nothing in `mode`, assembled once (per mode) and cloned for every name's
/// every interval.
fn blank(
    symbols: &mut Symbols,
    mode: Mode,
    probes: BTreeMap<Role, Attachment>,
    syscall_latency: bool,
) -> Recording {
    let mut rec = assemble::recording(
        &Snapshot::zeroed(),
        blank_run(mode, probes, syscall_latency),
        &mut symbols.symbolizers(),
    );
    // Cumulative settings, not counts: merged processes bring their own.
    rec.stack_walks.refresh_every = 0;
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cgroup target is named as a cgroup, not as processes of that name.
    #[test]
    fn a_cgroup_target_is_described_as_its_cgroup() {
        let path = "/sys/fs/cgroup/unified/fdprof-test";
        let cgroups = Targets::Cgroups(Vec::new());
        let described = target(kind(&cgroups), path).describe();
        assert_eq!(described, format!("the processes of cgroup {path}"));
        let comms = Targets::Comms(vec!["nginx".into()]);
        assert_eq!(
            target(kind(&comms), "nginx").describe(),
            "processes named nginx"
        );
    }
    use fdprof_recording::recording::ProcessRecord;

    /// `rec` with processes `pids`, each named `comm`.
    fn with_processes(pids: &[(u32, &str)]) -> Recording {
        let mut rec = fdprof_recording::testdata::recording();
        rec.processes = pids
            .iter()
            .map(|&(pid, comm)| ProcessRecord {
                pid,
                comm: comm.into(),
                ..Default::default()
            })
            .collect();
        rec
    }

    #[test]
    fn every_name_gets_its_own_processes_and_a_name_without_any_an_empty_interval() {
        let mut followed = Followed::new(16);
        for (pid, name) in [(10, "nginx"), (11, "nginx"), (20, "redis")] {
            let slot = followed.slot_of(name).unwrap();
            followed.join(pid, slot);
        }
        followed.slot_of("memcached").unwrap();
        let daemon = with_processes(&[(10, "nginx"), (11, "nginx"), (20, "redis")]);
        let comms = Targets::Comms(vec!["nginx".into(), "redis".into(), "memcached".into()]);
        let Names::Each(names) = names_of(&daemon, &comms, &followed) else {
            panic!("three names, each its own");
        };
        let pids =
            |name: &str| -> Vec<u32> { names[name].processes.iter().map(|p| p.pid).collect() };
        assert_eq!(pids("nginx"), [10, 11]);
        assert_eq!(pids("redis"), [20]);
        assert!(pids("memcached").is_empty());
        assert_eq!(names["redis"].target.comm.as_deref(), Some("redis"));
    }

    #[test]
    fn one_name_or_every_process_is_the_daemons_interval_whole() {
        let daemon = with_processes(&[(10, "nginx"), (30, "sh")]);
        let whole = |names| match names {
            Names::Whole { name, target } => (name, target.comm),
            Names::Each(_) => panic!("not the daemon's whole"),
        };
        let all = whole(names_of(&daemon, &Targets::All, &Followed::new(16)));
        assert_eq!(all, (ALL.to_string(), Some(ALL.to_string())));
        let mut followed = Followed::new(16);
        followed.slot_of("nginx").unwrap();
        let one = names_of(&daemon, &Targets::Comms(vec!["nginx".into()]), &followed);
        assert_eq!(whole(one), ("nginx".into(), Some("nginx".into())));
    }
}
