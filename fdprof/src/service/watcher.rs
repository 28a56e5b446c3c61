//! The daemon's collector: one [`Profiler`] per target process (each filtered to its process),
//! attached as processes appear and finished as they exit. Every interval it takes each one's
//! snapshot, turns the delta into a symbolized [`Recording`] (the assembler `record` uses) and
//! adds the recordings up per target name: the interval of each name and of the whole daemon.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
};

use fdprof_figures::Event;

use crate::collect::{
    EventStream, Filter, Kernel, Profiler, ProfilerOptions, RawEvent, Snapshot,
    profiler::monotonic_ns,
    stats::own_cpu_ns,
    steal::{CpuTimes, tick_ns},
    target,
};
use crate::model::{
    Recording,
    assemble::{self, Run},
    build::Symbolizers,
    events::EventSymbolizer,
    merge,
    recording::{DropCount, Target},
};
use crate::symbolize::{KernelSymbols, UserSymbolizer};

use super::config::{Targets, Watch, bounds};
use super::log;

/// The name of the one target of `-a`.
pub const ALL: &str = "all";
/// The drop counters of what the daemon's bounds turn away (probe `daemon`).
pub const DAEMON_PROBE: &str = "daemon";
pub const PROCESS_BOUND: &str = "process_bound";
pub const NAME_BOUND: &str = "name_bound";
pub const ATTACH_FAILED: &str = "attach_failed";
/// Mapped files the user symbolizer may hold before it starts afresh.
const USER_FILES: usize = 256;
/// Symbolized event stacks a process keeps for reuse.
const EVENT_STACKS: usize = 4096;
/// Events an interval carries at most (the rest are counted as dropped).
pub const EVENTS: usize = 1000;
pub const EVENT_BOUND: &str = "event_bound";

/// A process being profiled.
struct Process {
    name: String,
    profiler: Profiler,
    /// Its snapshot at the end of the last interval.
    earlier: Snapshot,
    /// Its slow waits, table expansions and exits, as the kernel sends them.
    events: Option<EventStream>,
    symbolizer: EventSymbolizer,
}

/// One interval's figures: each name's and the whole daemon's.
pub struct IntervalFigures {
    pub index: u64,
    /// Start, since the daemon started.
    pub start_ns: u64,
    pub names: BTreeMap<String, Recording>,
    pub daemon: Recording,
    /// The interval's events, every process's, oldest first (time since the daemon started).
    pub events: Vec<Event>,
}

pub struct Watcher {
    kernel: Kernel,
    kernel_syms: KernelSymbols,
    user_syms: UserSymbolizer,
    watch: Watch,
    max_processes: usize,
    /// By pid.
    processes: BTreeMap<u32, Process>,
    /// Finished since the last interval (exited, or no longer wanted): their last delta.
    finished: Vec<(String, u32, Recording)>,
    /// Events read since the last interval.
    events: Vec<Event>,
    /// `CLOCK_MONOTONIC` at start: the origin of the events' times.
    started_ns: u64,
    /// Pids not profiled, and why (counted once each), forgotten once they exit.
    refused: HashMap<u32, &'static str>,
    /// `-p` pids that exited: never attached again, even if the pid is reused.
    gone: BTreeSet<u32>,
    /// Names seen so far (the bound on label values).
    names: BTreeSet<String>,
    /// `--comm` names no process had when last looked for, already logged as awaited.
    awaited: BTreeSet<String>,
    /// Counts of what the bounds turned away this interval, by reason.
    dropped: BTreeMap<&'static str, u64>,
    /// The facts of the first profiler (all are attached alike): the mode, per role.
    mode: Mode,
    probes: BTreeMap<Role, Attachment>,
    /// [`blank`] in that mode.
    blank: Recording,
    started: Instant,
    started_unix_ms: u64,
    /// End of the last interval, since `started`.
    last_end: Duration,
    cpu_earlier: u64,
    /// The machine's CPU times at the end of the last interval, for its steal time.
    cpu_times: Option<CpuTimes>,
    index: u64,
}

impl Watcher {
    pub fn new(
        kernel: Kernel,
        kernel_syms: KernelSymbols,
        watch: Watch,
        max_processes: usize,
    ) -> Self {
        let mut user_syms = UserSymbolizer::new();
        let blank = blank(
            &kernel_syms,
            &mut user_syms,
            Mode::Tracepoint,
            BTreeMap::new(),
            watch.latency,
        );
        Self {
            kernel,
            kernel_syms,
            user_syms,
            watch,
            max_processes,
            processes: BTreeMap::new(),
            finished: Vec::new(),
            events: Vec::new(),
            started_ns: monotonic_ns(),
            refused: HashMap::new(),
            gone: BTreeSet::new(),
            names: BTreeSet::new(),
            awaited: BTreeSet::new(),
            dropped: BTreeMap::new(),
            mode: Mode::Tracepoint,
            probes: BTreeMap::new(),
            blank,
            started: Instant::now(),
            started_unix_ms: unix_ms(),
            last_end: Duration::ZERO,
            cpu_earlier: own_cpu_ns(),
            cpu_times: CpuTimes::read(),
            index: 0,
        }
    }

    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    pub fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }

    /// Processes attached now.
    pub fn attached(&self) -> usize {
        self.processes.len()
    }

    /// Takes a new config: processes it no longer wants are finished (their last figures go
    /// into the next interval); new ones are attached at the next [`Watcher::discover`]. The
    /// slow-wait threshold applies to processes attached from now on.
    pub fn reload(&mut self, watch: Watch) {
        self.watch = watch;
        self.gone.clear();
        self.refused.clear();
        self.awaited.clear();
        let unwanted: Vec<u32> = self
            .processes
            .iter()
            .filter(|(pid, p)| !self.wants(**pid, &p.name))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in unwanted {
            self.finish(pid, "no longer a target");
        }
    }

    fn wants(&self, pid: u32, name: &str) -> bool {
        match &self.watch.targets {
            Targets::Pids(pids) => pids.contains(&pid),
            Targets::Comms(comms) => comms.iter().any(|c| c == name),
            Targets::All => name == ALL,
        }
    }

    /// Keeps the programs' run-time statistics sampled; call it again after what it returns.
    pub fn tick(&mut self) -> Duration {
        self.processes
            .values_mut()
            .map(|p| p.profiler.tick_from(self.started))
            .min()
            .unwrap_or(self.watch.interval)
    }

    /// Attaches the processes the targets name that are not attached yet, within the bounds.
    pub fn discover(&mut self) {
        let wanted: Vec<(u32, String)> = match &self.watch.targets {
            Targets::All => vec![(0, ALL.to_string())],
            Targets::Pids(pids) => {
                let mut alive = Vec::new();
                let pids: Vec<u32> = pids
                    .iter()
                    .copied()
                    .filter(|p| !self.gone.contains(p))
                    .collect();
                for p in pids {
                    match target::comm_of(p).filter(|_| target::process_alive(p)) {
                        Some(comm) => alive.push((p, comm)),
                        None if !self.processes.contains_key(&p) => {
                            log::warn(&format!("pid {p} is not running: dropped from the targets"));
                            self.gone.insert(p);
                        }
                        None => {}
                    }
                }
                alive
            }
            Targets::Comms(comms) => {
                let found = processes_named(comms);
                for comm in comms {
                    let running = found.iter().any(|(_, c)| c == comm);
                    if running {
                        self.awaited.remove(comm);
                    } else if self.awaited.insert(comm.clone()) {
                        log::info(&format!(
                            "no process named {comm} is running: waiting for one"
                        ));
                    }
                }
                found
            }
        };
        self.refused
            .retain(|pid, _| *pid == 0 || target::process_alive(*pid));
        for (pid, name) in wanted {
            if self.processes.contains_key(&pid) || self.refused.contains_key(&pid) {
                continue;
            }
            let refusal = if self.processes.len() >= self.max_processes {
                Some(PROCESS_BOUND)
            } else if !self.names.contains(&name) && self.names.len() >= bounds::NAMES {
                Some(NAME_BOUND)
            } else {
                None
            };
            if let Some(reason) = refusal {
                log::warn(&format!(
                    "not profiling pid {pid} ({name}): {} (at most {} processes, {} names)",
                    reason.replace('_', " "),
                    self.max_processes,
                    bounds::NAMES
                ));
                self.refuse(pid, reason);
                continue;
            }
            self.attach(pid, name);
        }
    }

    fn refuse(&mut self, pid: u32, reason: &'static str) {
        self.refused.insert(pid, reason);
        *self.dropped.entry(reason).or_default() += 1;
    }

    fn attach(&mut self, pid: u32, name: String) {
        let filter = match pid {
            0 => Filter::All,
            p => Filter::Tgid(p),
        };
        let options = ProfilerOptions {
            filter,
            forced: None,
            lock_only: false,
            slow: self.watch.slow,
            latency: self.watch.latency,
            cpu_hz: self.watch.cpu_hz,
            trace: false,
        };
        let mut profiler = match Profiler::attach(&self.kernel, options) {
            Ok(p) => p,
            Err(e) => {
                log::error(&format!("cannot profile pid {pid} ({name}): {e:#}"));
                self.refuse(pid, ATTACH_FAILED);
                return;
            }
        };
        // Each profiler loads programs of its own: name their frames.
        if let Ok(now) = std::fs::read_to_string("/proc/kallsyms") {
            self.kernel_syms.add_bpf_programs(&now);
        }
        if self.probes.is_empty() {
            self.mode = profiler.mode();
            self.probes = profiler.attachments().clone();
            self.blank = blank(
                &self.kernel_syms,
                &mut self.user_syms,
                self.mode,
                self.probes.clone(),
                profiler.syscall_latency(),
            );
            log::info(&format!("probes attach in {} mode", self.mode));
        }
        match pid {
            0 => log::info("profiling every process"),
            p => log::info(&format!("profiling pid {p} ({name})")),
        }
        if pid != 0 {
            self.user_syms.snapshot_maps(pid);
        }
        // Inside the runtime (the caller's): the stream registers with its reactor.
        let events = match profiler.take_events().transpose() {
            Ok(events) => events,
            Err(e) => {
                log::warn(&format!("no events from pid {pid} ({name}): {e:#}"));
                None
            }
        };
        self.names.insert(name.clone());
        self.processes.insert(
            pid,
            Process {
                name,
                profiler,
                earlier: Snapshot::zeroed(),
                events,
                symbolizer: EventSymbolizer::new(self.started_ns),
            },
        );
    }

    /// Finishes (detaches) `pid`, keeping its last delta for the next interval.
    fn finish(&mut self, pid: u32, why: &str) {
        let Some(mut p) = self.processes.remove(&pid) else {
            return;
        };
        log::info(&format!("stopped profiling pid {pid} ({}): {why}", p.name));
        self.read_events(pid, &mut p);
        let earlier = p.earlier;
        let name = p.name;
        let probes = p.profiler.attachments().clone();
        let latency = p.profiler.syscall_latency();
        match p.profiler.finish() {
            Ok(last) => {
                let rec = self.assemble(pid, &name, &last.delta(&earlier), probes, latency);
                self.finished.push((name, pid, rec));
            }
            Err(e) => log::error(&format!("the last figures of pid {pid} are lost: {e:#}")),
        }
    }

    /// Ends an interval: every process's delta, added up per name and for the daemon. A
    /// process that exited is finished (its last delta included).
    pub fn interval(&mut self) -> IntervalFigures {
        let exited: Vec<u32> = self
            .processes
            .keys()
            .copied()
            .filter(|&pid| pid != 0 && !target::process_alive(pid))
            .collect();
        for pid in exited {
            self.finish(pid, "it exited");
            if matches!(self.watch.targets, Targets::Pids(_)) {
                self.gone.insert(pid);
            }
        }
        let mut per_process: Vec<(String, Recording)> = std::mem::take(&mut self.finished)
            .into_iter()
            .map(|(name, _, rec)| (name, rec))
            .collect();
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for pid in pids {
            let Some(mut p) = self.processes.remove(&pid) else {
                continue;
            };
            // Once an interval, for the stacks of its events and of its figures.
            if pid != 0 {
                self.user_syms.snapshot_maps(pid);
            }
            self.read_events(pid, &mut p);
            match p.profiler.snapshot() {
                Ok(now) => {
                    let probes = p.profiler.attachments().clone();
                    let latency = p.profiler.syscall_latency();
                    let delta = now.delta(&p.earlier);
                    let rec = self.assemble(pid, &p.name, &delta, probes, latency);
                    per_process.push((p.name.clone(), rec));
                    p.earlier = now;
                }
                Err(e) => log::error(&format!("cannot read the figures of pid {pid}: {e:#}")),
            }
            self.processes.insert(pid, p);
        }
        let live: BTreeSet<u32> = self.processes.keys().copied().collect();
        self.user_syms.trim(|p| live.contains(&p), USER_FILES);

        let end = self.started.elapsed();
        let (start, duration) = (self.last_end, end.saturating_sub(self.last_end));
        self.last_end = end;
        let cpu = own_cpu_ns();
        let collector_cpu_ns = cpu.saturating_sub(self.cpu_earlier);
        self.cpu_earlier = cpu;
        // The machine's steal is the same for every name: over the daemon's interval.
        let cpu_times = CpuTimes::read();
        let steal = match (&cpu_times, &self.cpu_times) {
            (Some(now), Some(then)) => Some(now.since(then, tick_ns()).into()),
            _ => None,
        };
        self.cpu_times = cpu_times;

        // Every name seen so far has an interval, empty when none of its processes ran.
        let mut names: BTreeMap<String, Recording> = self
            .names
            .iter()
            .map(|n| (n.clone(), self.empty(n, start, duration)))
            .collect();
        for (name, rec) in per_process {
            if let Some(into) = names.get_mut(&name) {
                merge::add(into, &rec);
            }
        }
        let mut daemon = self.empty(&self.daemon_name(), start, duration);
        for rec in names.values_mut() {
            merge::add(&mut daemon, rec);
            rec.steal = steal;
        }
        daemon.steal = steal;
        for (reason, count) in std::mem::take(&mut self.dropped) {
            daemon.drops.push(DropCount {
                probe: DAEMON_PROBE.into(),
                reason: reason.into(),
                count,
            });
        }
        daemon.own_cost.collector_cpu_ns = collector_cpu_ns;
        let mut events = std::mem::take(&mut self.events);
        events.sort_by_key(|e| e.at_ns);
        let index = self.index;
        self.index += 1;
        IntervalFigures {
            index,
            start_ns: start.as_nanos() as u64,
            names,
            daemon,
            events,
        }
    }

    /// Takes `p`'s events from its ring buffer, symbolized now (through the caller's maps
    /// snapshot), within [`EVENTS`] an interval.
    fn read_events(&mut self, pid: u32, p: &mut Process) {
        let Some(stream) = p.events.as_mut() else {
            return;
        };
        let raw = stream.try_batch();
        if raw.is_empty() {
            return;
        }
        let room = EVENTS.saturating_sub(self.events.len());
        if raw.len() > room {
            *self.dropped.entry(EVENT_BOUND).or_default() += (raw.len() - room) as u64;
        }
        let raw = &raw[..raw.len().min(room)];
        let stacks = p
            .profiler
            .stacks(raw.iter().flat_map(RawEvent::stack_ids))
            .unwrap_or_default();
        let mut sym = Symbolizers {
            kernel: &self.kernel_syms,
            user: &mut self.user_syms,
            user_pid: (pid != 0).then_some(pid),
            raw_addrs: false,
        };
        p.symbolizer.trim(EVENT_STACKS);
        self.events
            .extend(p.symbolizer.events(raw, &stacks, &mut sym));
    }

    /// What the daemon's own figures are named after: its targets.
    fn daemon_name(&self) -> String {
        match &self.watch.targets {
            Targets::All => ALL.into(),
            Targets::Comms(comms) => comms.join(", "),
            Targets::Pids(_) if self.names.is_empty() => "(none yet)".into(),
            Targets::Pids(_) => self.names.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }

    /// The recording of one process's delta, its stacks symbolized now (while it runs).
    fn assemble(
        &mut self,
        pid: u32,
        name: &str,
        delta: &Snapshot,
        probes: BTreeMap<Role, Attachment>,
        syscall_latency: bool,
    ) -> Recording {
        let (kind, pid) = match pid {
            0 => (TargetKind::All, None),
            p => (TargetKind::Pid, Some(p)),
        };
        let run = Run {
            target: target(kind, pid, name),
            started_unix_ms: self.started_unix_ms + self.last_end.as_millis() as u64,
            ..blank_run(self.mode, probes, syscall_latency)
        };
        let mut sym = Symbolizers {
            kernel: &self.kernel_syms,
            user: &mut self.user_syms,
            user_pid: pid,
            raw_addrs: false,
        };
        let mut rec = assemble::recording(delta, run, &mut sym);
        // Processes that only waited (system-wide), named while they live.
        crate::model::process::name_unnamed(&mut rec);
        rec
    }

    /// A recording of nothing, for `name` over one interval: what each interval starts from.
    fn empty(&self, name: &str, start: Duration, duration: Duration) -> Recording {
        let kind = match self.watch.targets {
            Targets::All => TargetKind::All,
            _ => TargetKind::Name,
        };
        Recording {
            target: target(kind, None, name),
            started_unix_ms: self.started_unix_ms + start.as_millis() as u64,
            duration_ns: duration.as_nanos() as u64,
            // A reload may have changed it: the sum shows latency only if all measured it.
            syscall_latency: self.watch.latency,
            ..self.blank.clone()
        }
    }

    /// The empty recording a name's history starts from; `None`: the daemon's own.
    pub fn empty_history(&self, name: Option<&str>) -> Recording {
        let name = name.map_or_else(|| self.daemon_name(), str::to_string);
        self.empty(&name, Duration::ZERO, Duration::ZERO)
    }

    /// Detaches everything (SIGTERM, SIGINT): nothing stays loaded.
    pub fn shutdown(&mut self) {
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for pid in pids {
            self.finish(pid, "the daemon stops");
        }
        self.finished.clear();
    }
}

/// The target of a process's (`kind` Pid or All) or a name's figures.
fn target(kind: TargetKind, pid: Option<u32>, name: &str) -> Target {
    Target {
        kind,
        pid,
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
        target: target(TargetKind::Name, None, ""),
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
    kernel: &KernelSymbols,
    user: &mut UserSymbolizer,
    mode: Mode,
    probes: BTreeMap<Role, Attachment>,
    syscall_latency: bool,
) -> Recording {
    let mut sym = Symbolizers {
        kernel,
        user,
        user_pid: None,
        raw_addrs: false,
    };
    let mut rec = assemble::recording(
        &Snapshot::zeroed(),
        blank_run(mode, probes, syscall_latency),
        &mut sym,
    );
    // Cumulative settings, not counts: merged processes bring their own.
    rec.stack_walks.refresh_every = 0;
    rec
}

/// Processes (not threads) whose comm is one of `comms`, but not fdprof itself.
fn processes_named(comms: &[String]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let comm = target::comm_of(pid)?;
            comms.contains(&comm).then_some((pid, comm))
        })
        .filter(|&(pid, _)| target::process_alive(pid))
        .collect()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}
