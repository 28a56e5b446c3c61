//! The daemon's collector: one [`Profiler`] for every target, its programs loaded once whatever
//! the number of processes followed. Under `-a` it profiles every process; otherwise its target
//! set holds the processes followed, which user space adds (`-p`, the `--comm` processes
//! already running) and the kernel extends the moment a process matches (a `--comm` name at
//! exec or rename, a target's children at fork) and shrinks as processes end. Every interval
//! it takes the snapshot's delta, turns it into one symbolized [`Recording`] (the assembler
//! `record` uses) with each process's figures, and narrows it to each target name's processes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
    targets::{TargetEntry, flag},
};

use fdprof_figures::Event;

use crate::collect::{
    EventStream, Filter, Kernel, Profiler, ProfilerOptions, RawEvent, Snapshot,
    profiler::monotonic_ns,
    starts::{StartBatch, StartStream},
    stats::own_cpu_ns,
    steal::{CpuTimes, tick_ns},
    target,
    targets::Refused,
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
    /// Target names (label values), in the order first seen: a name's slot is its index.
    names: Vec<String>,
    /// The processes followed: pid → slot. Those that left stay until their last figures are
    /// read.
    members: BTreeMap<u32, u32>,
    /// Members that left since the last interval: their rows are deleted once read.
    left: BTreeSet<u32>,
    /// Events read since the last interval.
    events: Vec<Event>,
    /// `CLOCK_MONOTONIC` at start: the origin of the events' times.
    started_ns: u64,
    /// Pids not profiled, and why (counted once each), forgotten once they exit.
    refused: HashMap<u32, &'static str>,
    /// `-p` pids that exited: never followed again, even if the pid is reused.
    gone: BTreeSet<u32>,
    /// `--comm` names no process had when last looked for, already logged as awaited.
    awaited: BTreeSet<String>,
    /// Counts of what the bounds turned away this interval, by reason.
    dropped: BTreeMap<&'static str, u64>,
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
            names: Vec::new(),
            members: BTreeMap::new(),
            left: BTreeSet::new(),
            events: Vec::new(),
            started_ns: monotonic_ns(),
            refused: HashMap::new(),
            gone: BTreeSet::new(),
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

    /// Processes followed now (under `-a`, 1 while the programs are loaded).
    pub fn attached(&self) -> usize {
        match &self.stage {
            None => 0,
            Some(s) if s.loaded.all => 1,
            Some(_) => self.members.len() - self.left.len(),
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
        self.gone.clear();
        self.refused.clear();
        self.awaited.clear();
        if reload {
            self.unload("its settings changed");
            return;
        }
        if let Targets::Comms(comms) = &self.watch.targets {
            let comms = comms.clone();
            self.match_comms(&comms);
        }
        let unwanted: Vec<u32> = self
            .members
            .iter()
            .filter(|(pid, slot)| !self.left.contains(pid) && !self.wants(**pid, **slot))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in unwanted {
            if let Some(stage) = self.stage.as_mut()
                && let Err(e) = stage.profiler.remove_target(pid)
            {
                log::error(&format!("{e:#}"));
            }
        }
        self.sync();
    }

    fn wants(&self, pid: u32, slot: u32) -> bool {
        let name = self.names.get(slot as usize).map(String::as_str);
        match &self.watch.targets {
            Targets::Pids(pids) => pids.contains(&pid),
            Targets::Comms(comms) => name.is_some_and(|n| comms.iter().any(|c| c == n)),
            Targets::All => true,
        }
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
            if !all && !self.members.contains_key(&start.pid) {
                self.join(start.pid, u32::from(start.slot));
            }
            if i < SNAPSHOTS_PER_BATCH {
                self.user_syms.snapshot_maps(start.pid);
            }
        }
    }

    fn join(&mut self, pid: u32, slot: u32) {
        self.members.insert(pid, slot);
        self.left.remove(&pid);
        let name = self.name_of_slot(slot);
        log::info(&format!("profiling pid {pid} ({name})"));
    }

    fn name_of_slot(&self, slot: u32) -> &str {
        self.names.get(slot as usize).map_or("?", String::as_str)
    }

    /// The slot of `name`, a new one if there is room.
    fn slot_of(&mut self, name: &str) -> Option<u32> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Some(i as u32);
        }
        if self.names.len() >= bounds::NAMES {
            return None;
        }
        self.names.push(name.to_string());
        Some(self.names.len() as u32 - 1)
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
        };
        let mut profiler = match Profiler::attach(&self.kernel, options) {
            Ok(p) => p,
            Err(e) => {
                log::error(&format!("cannot load the programs: {e:#}"));
                *self.dropped.entry(ATTACH_FAILED).or_default() += 1;
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
        if let Targets::Comms(comms) = &self.watch.targets {
            let comms = comms.clone();
            self.match_comms(&comms);
        }
    }

    /// The kernel matches `comms` at exec and rename from now on.
    fn match_comms(&mut self, comms: &[String]) {
        let mut slots = Vec::new();
        for comm in comms {
            match self.slot_of(comm) {
                Some(slot) => slots.push((comm.clone(), slot)),
                None => *self.dropped.entry(NAME_BOUND).or_default() += 1,
            }
        }
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
        for pid in self.members.keys().copied().collect::<Vec<_>>() {
            self.leave(pid, why);
        }
    }

    /// Loads the programs if needed and adds the processes the targets name that are not
    /// followed yet (those that ran before the daemon; with tp_btf, the kernel adds the rest).
    pub fn discover(&mut self) {
        self.load();
        let Some(stage) = self.stage.as_ref() else {
            return;
        };
        if stage.loaded.all {
            return;
        }
        self.refused.retain(|pid, _| target::process_alive(*pid));
        let wanted: Vec<(u32, String, u32)> = match &self.watch.targets {
            Targets::All => Vec::new(),
            Targets::Pids(pids) => {
                let children = if self.watch.children {
                    flag::CHILDREN
                } else {
                    0
                };
                let mut alive = Vec::new();
                let pids: Vec<u32> = pids
                    .iter()
                    .copied()
                    .filter(|p| !self.gone.contains(p))
                    .collect();
                for p in pids {
                    if self.members.contains_key(&p) {
                        continue;
                    }
                    match target::comm_of(p).filter(|_| target::process_alive(p)) {
                        Some(comm) => alive.push((p, comm, children)),
                        None => {
                            log::warn(&format!("pid {p} is not running: dropped from the targets"));
                            self.gone.insert(p);
                        }
                    }
                }
                alive
            }
            Targets::Comms(comms) => {
                let found = processes_named(comms);
                for comm in comms {
                    if found.iter().any(|(_, c)| c == comm) {
                        self.awaited.remove(comm);
                    } else if self.awaited.insert(comm.clone()) {
                        log::info(&format!(
                            "no process named {comm} is running: waiting for one"
                        ));
                    }
                }
                found
                    .into_iter()
                    .map(|(pid, comm)| (pid, comm, flag::BY_COMM))
                    .collect()
            }
        };
        for (pid, name, flags) in wanted {
            if self.members.contains_key(&pid) || self.refused.contains_key(&pid) {
                continue;
            }
            let Some(slot) = self.slot_of(&name) else {
                self.refuse(pid, &name, NAME_BOUND);
                continue;
            };
            let Some(stage) = self.stage.as_mut() else {
                return;
            };
            match stage.profiler.add_target(pid, TargetEntry { slot, flags }) {
                Ok(Ok(())) => {}
                Ok(Err(Refused::Full)) => self.refuse(pid, &name, PROCESS_BOUND),
                Err(e) => log::error(&format!("{e:#}")),
            }
        }
        self.sync();
    }

    fn refuse(&mut self, pid: u32, name: &str, reason: &'static str) {
        log::warn(&format!(
            "not profiling pid {pid} ({name}): {} (at most {} processes, {} names)",
            reason.replace('_', " "),
            self.max_processes,
            bounds::NAMES
        ));
        self.refused.insert(pid, reason);
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// Brings the members in line with the kernel's set: processes it added are taken on,
    /// those it removed (they ended, or were renamed away) leave.
    fn sync(&mut self) {
        let Some(stage) = self.stage.as_ref() else {
            return;
        };
        if stage.loaded.all {
            return;
        }
        let set = match stage.profiler.targets() {
            Ok(set) => set,
            Err(e) => {
                log::error(&format!("cannot read the target set: {e:#}"));
                return;
            }
        };
        for (&pid, entry) in &set {
            if !self.members.contains_key(&pid) || self.left.contains(&pid) {
                self.join(pid, entry.slot);
                self.user_syms.snapshot_maps(pid);
            }
        }
        let gone: Vec<u32> = self
            .members
            .keys()
            .copied()
            .filter(|pid| !set.contains_key(pid) && !self.left.contains(pid))
            .collect();
        for pid in gone {
            let why = if target::process_alive(pid) {
                "no longer a target"
            } else {
                "it exited"
            };
            self.leave(pid, why);
        }
    }

    fn leave(&mut self, pid: u32, why: &str) {
        let Some(&slot) = self.members.get(&pid) else {
            return;
        };
        if !self.left.insert(pid) {
            return;
        }
        let name = self.name_of_slot(slot);
        log::info(&format!("stopped profiling pid {pid} ({name}): {why}"));
        if matches!(self.watch.targets, Targets::Pids(_)) {
            self.gone.insert(pid);
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
                    let left: Vec<u32> = self.left.iter().copied().collect();
                    if let Err(e) = stage.profiler.forget(&left) {
                        log::error(&format!("{e:#}"));
                    }
                    now.processes.forget(&left);
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
        for pid in std::mem::take(&mut self.left) {
            self.members.remove(&pid);
        }
        let live: BTreeSet<u32> = self.members.keys().copied().collect();
        let all = self.watch.targets == Targets::All;
        self.user_syms
            .trim(|p| all || live.contains(&p), USER_FILES);
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

    /// Each name's interval, `daemon` narrowed to its processes; every name seen so far has
    /// one, empty when none of its processes ran. With one name, it is `daemon` whole: the
    /// figures not kept per process (latencies, on-CPU samples) are its too.
    fn names_of(
        &self,
        daemon: &Recording,
        start: Duration,
        duration: Duration,
    ) -> BTreeMap<String, Recording> {
        if self.watch.targets == Targets::All || self.names.len() == 1 {
            let name = match self.watch.targets {
                Targets::All => ALL,
                _ => &self.names[0],
            };
            let mut rec = daemon.clone();
            rec.target = self.empty(name, start, duration).target;
            return [(name.to_string(), rec)].into();
        }
        self.names
            .iter()
            .enumerate()
            .map(|(slot, name)| {
                let slot = slot as u32;
                let mut rec =
                    process::only(daemon, |p| self.slot_of_pid(p.pid, &p.comm) == Some(slot));
                rec.target = self.empty(name, start, duration).target;
                (name.clone(), rec)
            })
            .collect()
    }

    /// Which name's a process is: its slot as it joined, else (it joined and left unseen) the
    /// name it has.
    fn slot_of_pid(&self, pid: u32, comm: &str) -> Option<u32> {
        self.members
            .get(&pid)
            .copied()
            .or_else(|| self.names.iter().position(|n| n == comm).map(|i| i as u32))
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
            *self.dropped.entry(EVENT_BOUND).or_default() += (raw.len() - room) as u64;
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
            Targets::Pids(_) if self.names.is_empty() => "(none yet)".into(),
            Targets::Pids(_) => self.names.join(", "),
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
