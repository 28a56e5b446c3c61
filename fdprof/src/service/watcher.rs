//! The daemon's collector: one [`Profiler`] for every target, its programs loaded once whatever
//! the number of processes followed. Under `-a` it profiles every process; otherwise its target
//! set holds the processes followed, which user space adds (`-p`, the `--comm` processes
//! already running) and the kernel extends the moment a process matches (a `--comm` name at
//! exec or rename, a target's children at fork) and shrinks as processes end. Every interval
//! it takes the snapshot's delta, turns it into one symbolized [`Recording`] (the assembler
//! `record` uses) with each process's figures, and narrows it to each target name's processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
};

use fdprof_figures::Event;

use crate::collect::{
    EventStream, Filter, Kernel, Profiler, ProfilerOptions, RawEvent, Snapshot,
    profiler::monotonic_ns,
    starts::{StartBatch, StartStream},
    stats::own_cpu_ns,
    steal::{CpuTimes, tick_ns},
};
use crate::model::{
    Recording,
    assemble::{self, Run},
    build::Symbolizers,
    events::EventSymbolizer,
    merge, process,
    recording::{DropCount, Target},
};
use crate::symbolize::{KernelSymbols, UserSymbolizer};

use super::config::{Targets, Watch};
use super::followed::Followed;
pub use super::followed::{NAME_BOUND, PROCESS_BOUND};
use super::log;

/// The name of the one target of `-a`.
pub const ALL: &str = "all";
/// The drop counters of what the daemon's bounds turn away (probe `daemon`).
pub const DAEMON_PROBE: &str = "daemon";
pub const ATTACH_FAILED: &str = "attach_failed";
/// Mapped files the user symbolizer may hold before it starts afresh.
const USER_FILES: usize = 256;
/// Symbolized event stacks kept for reuse.
const EVENT_STACKS: usize = 4096;
/// Events an interval carries at most (the rest are counted as dropped).
pub const EVENTS: usize = 1000;
pub const EVENT_BOUND: &str = "event_bound";
/// Processes whose maps are read at once per batch of starts; the rest at the next interval.
const SNAPSHOTS_PER_BATCH: usize = 64;

/// The loaded programs and what belongs to them.
struct Stage {
    profiler: Profiler,
    /// The snapshot at the end of the last interval.
    earlier: Snapshot,
    events: Option<EventStream>,
    starts: Option<StartStream>,
    symbolizer: EventSymbolizer,
    /// What was fixed at load: a new watch that differs loads the programs anew.
    loaded: Loaded,
}

/// The settings fixed when the programs load.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Loaded {
    all: bool,
    slow: Duration,
    latency: bool,
    cpu_hz: Option<u64>,
}

impl Loaded {
    fn of(watch: &Watch) -> Self {
        Self {
            all: watch.targets == Targets::All,
            slow: watch.slow,
            latency: watch.latency,
            cpu_hz: watch.cpu_hz,
        }
    }
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
    stage: Option<Stage>,
    /// The last figures of programs unloaded since the last interval (a reload).
    finished: Option<Recording>,
    followed: Followed,
    /// Events read since the last interval.
    events: Vec<Event>,
    /// `CLOCK_MONOTONIC` at start: the origin of the events' times.
    started_ns: u64,
    /// The programs' attach facts: the mode, per role.
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
            stage: None,
            finished: None,
            followed: Followed::new(max_processes),
            events: Vec::new(),
            started_ns: monotonic_ns(),
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

    /// Processes followed now (under `-a`, 1 while the programs are loaded).
    pub fn attached(&self) -> usize {
        match &self.stage {
            None => 0,
            Some(s) if s.loaded.all => 1,
            Some(_) => self.followed.len(),
        }
    }

    /// Takes a new config: processes it no longer wants leave the set (their last figures go
    /// into the next interval); new ones join at the next [`Watcher::discover`]. Settings fixed
    /// at load (`-a`, the slow-wait threshold, `--latency`, `--cpu`) load the programs anew.
    pub fn reload(&mut self, watch: Watch) {
        let reload = self
            .stage
            .as_ref()
            .is_some_and(|s| s.loaded != Loaded::of(&watch));
        self.watch = watch;
        self.followed.reloaded();
        if reload {
            self.unload("its settings changed");
            return;
        }
        self.match_comms();
        let unwanted = self.followed.unwanted(&self.watch);
        if let Some(stage) = self.stage.as_mut() {
            for pid in unwanted {
                if let Err(e) = stage.profiler.remove_target(pid) {
                    log::error(&format!("{e:#}"));
                }
            }
        }
        self.sync();
    }

    /// Keeps the programs' run-time statistics sampled; call it again after what it returns.
    pub fn tick(&mut self) -> Duration {
        match self.stage.as_mut() {
            Some(s) => s.profiler.tick_from(self.started),
            None => self.watch.interval,
        }
    }

    /// The next batch of processes that joined (in the kernel) or started, to take on now;
    /// never ready without a target set. Cancel-safe.
    pub async fn next_starts(&mut self) -> Option<StartBatch> {
        match self.stage.as_mut().and_then(|s| s.starts.as_mut()) {
            Some(starts) => match starts.next_batch().await {
                Ok(batch) => Some(batch),
                Err(e) => {
                    log::error(&format!("process starts are no longer read: {e:#}"));
                    if let Some(s) = self.stage.as_mut() {
                        s.starts = None;
                    }
                    None
                }
            },
            None => std::future::pending().await,
        }
    }

    /// Takes on the processes of `batch`: members from now on (named in the log), their maps
    /// read at once so their stacks are symbolized even if they end before the next interval.
    pub fn started(&mut self, batch: StartBatch) {
        let all = self.stage.as_ref().is_some_and(|s| s.loaded.all);
        for (i, start) in batch.starts.iter().enumerate() {
            if !all && !self.followed.contains(start.pid) {
                self.followed.join(start.pid, u32::from(start.slot));
            }
            if i < SNAPSHOTS_PER_BATCH {
                self.user_syms.snapshot_maps(start.pid);
            }
        }
    }

    /// Loads the programs if they are not (or were unloaded by a reload).
    fn load(&mut self) {
        if self.stage.is_some() {
            return;
        }
        let loaded = Loaded::of(&self.watch);
        let options = ProfilerOptions {
            filter: if loaded.all {
                Filter::All
            } else {
                Filter::Set {
                    max: u32::try_from(self.max_processes).unwrap_or(u32::MAX),
                }
            },
            forced: None,
            lock_only: false,
            slow: self.watch.slow,
            latency: self.watch.latency,
            cpu_hz: self.watch.cpu_hz,
            trace: false,
            children: false,
        };
        let mut profiler = match Profiler::attach(&self.kernel, options) {
            Ok(p) => p,
            Err(e) => {
                log::error(&format!("cannot load the programs: {e:#}"));
                *self.followed.dropped.entry(ATTACH_FAILED).or_default() += 1;
                return;
            }
        };
        // Name the programs' frames.
        if let Ok(now) = std::fs::read_to_string("/proc/kallsyms") {
            self.kernel_syms.add_bpf_programs(&now);
        }
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
        if loaded.all {
            log::info("profiling every process");
        }
        // Inside the runtime (the caller's): the streams register with its reactor.
        let events = match profiler.take_events().transpose() {
            Ok(events) => events,
            Err(e) => {
                log::warn(&format!("no events: {e:#}"));
                None
            }
        };
        let starts = match profiler.take_starts().transpose() {
            Ok(starts) => starts,
            Err(e) => {
                log::warn(&format!("no process starts: {e:#}"));
                None
            }
        };
        self.stage = Some(Stage {
            profiler,
            earlier: Snapshot::zeroed(),
            events,
            starts,
            symbolizer: EventSymbolizer::new(self.started_ns),
            loaded,
        });
        self.match_comms();
    }

    /// The kernel matches the `--comm` names at exec and rename from now on.
    fn match_comms(&mut self) {
        let comms = match &self.watch.targets {
            Targets::Comms(comms) => comms.clone(),
            _ => Vec::new(),
        };
        let slots = self.followed.comm_slots(&comms);
        if let Some(stage) = self.stage.as_mut()
            && let Err(e) = stage.profiler.match_comms(&slots)
        {
            log::error(&format!("cannot match names in the kernel: {e:#}"));
        }
    }

    /// Unloads the programs, keeping their last figures for the next interval.
    fn unload(&mut self, why: &str) {
        let Some(stage) = self.stage.take() else {
            return;
        };
        log::info(&format!("unloading the programs: {why}"));
        let Stage {
            profiler, earlier, ..
        } = stage;
        let (probes, latency) = (profiler.attachments().clone(), profiler.syscall_latency());
        match profiler.finish() {
            Ok(last) => {
                let rec = self.assemble(&last.delta(&earlier), probes, latency);
                match self.finished.as_mut() {
                    Some(into) => merge::add(into, &rec),
                    None => self.finished = Some(rec),
                }
            }
            Err(e) => log::error(&format!("the last figures are lost: {e:#}")),
        }
        self.followed.leave_all(why, &self.watch);
    }

    /// Loads the programs if needed and adds the processes the targets name that are not
    /// followed yet.
    pub fn discover(&mut self) {
        self.load();
        if let Some(stage) = self.stage.as_mut()
            && !stage.loaded.all
        {
            self.followed.discover(&mut stage.profiler, &self.watch);
        }
        self.sync();
    }

    /// Takes on the processes the kernel added to the set, and lets go of those it removed.
    fn sync(&mut self) {
        if let Some(stage) = self.stage.as_ref()
            && !stage.loaded.all
        {
            for pid in self.followed.sync(&stage.profiler, &self.watch) {
                self.user_syms.snapshot_maps(pid);
            }
        }
    }

    /// Ends an interval: the figures of every process followed, narrowed to each name, and
    /// the daemon's. The rows of processes that left are deleted once read.
    pub fn interval(&mut self) -> IntervalFigures {
        self.sync();
        let mut whole = self.finished.take();
        if let Some(mut stage) = self.stage.take() {
            self.read_events(&mut stage);
            match stage.profiler.snapshot() {
                Ok(mut now) => {
                    let probes = stage.profiler.attachments().clone();
                    let latency = stage.profiler.syscall_latency();
                    let rec = self.assemble(&now.delta(&stage.earlier), probes, latency);
                    match whole.as_mut() {
                        Some(into) => merge::add(into, &rec),
                        None => whole = Some(rec),
                    }
                    // The rows of processes that left go: their room serves new ones, and a
                    // pid reused later starts from zero.
                    let left = self.followed.left();
                    if let Err(e) = stage.profiler.forget(&left) {
                        log::error(&format!("{e:#}"));
                    }
                    now.forget(&left);
                    stage.earlier = now;
                }
                Err(e) => log::error(&format!("cannot read the figures: {e:#}")),
            }
            self.stage = Some(stage);
        }

        let end = self.started.elapsed();
        let (start, duration) = (self.last_end, end.saturating_sub(self.last_end));
        self.last_end = end;
        let cpu = own_cpu_ns();
        let collector_cpu_ns = cpu.saturating_sub(self.cpu_earlier);
        self.cpu_earlier = cpu;
        let cpu_times = CpuTimes::read();
        let steal = match (&cpu_times, &self.cpu_times) {
            (Some(now), Some(then)) => Some(now.since(then, tick_ns()).into()),
            _ => None,
        };
        self.cpu_times = cpu_times;

        let mut daemon = self.empty(&self.daemon_name(), start, duration);
        if let Some(whole) = &whole {
            merge::add(&mut daemon, whole);
        }
        daemon.steal = steal;
        let names = self.names_of(&daemon, start, duration);
        let live = self.followed.end_interval();
        let all = self.watch.targets == Targets::All;
        self.user_syms
            .trim(|p| all || live.contains(&p), USER_FILES);
        for (reason, count) in std::mem::take(&mut self.followed.dropped) {
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

    /// Each name's interval, `daemon` narrowed to its processes; every name seen so far has
    /// one, empty when none of its processes ran. With one name, it is `daemon` whole: the
    /// figures not kept per process (latencies, on-CPU samples) are its too.
    fn names_of(
        &self,
        daemon: &Recording,
        start: Duration,
        duration: Duration,
    ) -> BTreeMap<String, Recording> {
        let names = &self.followed.names;
        if self.watch.targets == Targets::All || names.len() == 1 {
            let name = match self.watch.targets {
                Targets::All => ALL,
                _ => &names[0],
            };
            let mut rec = daemon.clone();
            rec.target = self.empty(name, start, duration).target;
            return [(name.to_string(), rec)].into();
        }
        names
            .iter()
            .enumerate()
            .map(|(slot, name)| {
                let slot = slot as u32;
                let mut rec = process::only(daemon, |p| {
                    self.followed.slot_of_pid(p.pid, &p.comm) == Some(slot)
                });
                rec.target = self.empty(name, start, duration).target;
                (name.clone(), rec)
            })
            .collect()
    }

    /// Takes the events from the ring buffer, symbolized now (through the maps snapshots),
    /// within [`EVENTS`] an interval.
    fn read_events(&mut self, stage: &mut Stage) {
        let Some(stream) = stage.events.as_mut() else {
            return;
        };
        let raw = stream.try_batch();
        if raw.is_empty() {
            return;
        }
        let room = EVENTS.saturating_sub(self.events.len());
        if raw.len() > room {
            *self.followed.dropped.entry(EVENT_BOUND).or_default() += (raw.len() - room) as u64;
        }
        let raw = &raw[..raw.len().min(room)];
        let stacks = stage
            .profiler
            .stacks(raw.iter().flat_map(RawEvent::stack_ids))
            .unwrap_or_default();
        let mut sym = Symbolizers {
            kernel: &self.kernel_syms,
            user: &mut self.user_syms,
            // Each event's user stack is its own process's.
            user_pid: None,
            raw_addrs: false,
        };
        stage.symbolizer.trim(EVENT_STACKS);
        self.events
            .extend(stage.symbolizer.events(raw, &stacks, &mut sym));
    }

    /// What the daemon's own figures are named after: its targets.
    fn daemon_name(&self) -> String {
        match &self.watch.targets {
            Targets::All => ALL.into(),
            Targets::Comms(comms) => comms.join(", "),
            Targets::Pids(_) if self.followed.names.is_empty() => "(none yet)".into(),
            Targets::Pids(_) => self.followed.names.join(", "),
        }
    }

    /// The recording of a delta of the programs, its stacks symbolized now (while the
    /// processes run), each process's figures of its own.
    fn assemble(
        &mut self,
        delta: &Snapshot,
        probes: BTreeMap<Role, Attachment>,
        syscall_latency: bool,
    ) -> Recording {
        let kind = match self.watch.targets {
            Targets::All => TargetKind::All,
            _ => TargetKind::Name,
        };
        let run = Run {
            target: target(kind, None, &self.daemon_name()),
            started_unix_ms: self.started_unix_ms + self.last_end.as_millis() as u64,
            ..blank_run(self.mode, probes, syscall_latency)
        };
        let mut sym = Symbolizers {
            kernel: &self.kernel_syms,
            user: &mut self.user_syms,
            user_pid: None,
            raw_addrs: false,
        };
        let mut rec = assemble::recording(delta, run, &mut sym);
        // Processes that only waited, named while they live.
        process::name_unnamed(&mut rec);
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

    /// Unloads everything (SIGTERM, SIGINT): nothing stays loaded.
    pub fn shutdown(&mut self) {
        self.unload("the daemon stops");
        self.finished = None;
    }
}

/// The target of a name's figures.
fn target(kind: TargetKind, pid: Option<u32>, name: &str) -> Target {
    Target {
        kind,
        pid,
        pids: Vec::new(),
        children: false,
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}
