//! The daemon's collector: one live stage ([`Stage`]) for every target, its programs loaded
//! once whatever the number of processes followed. Under `-a` it profiles every process;
//! otherwise its target set holds the processes followed, which user space adds (`-p`, the
//! `--comm` processes already running) and the kernel extends the moment a process matches (a
//! `--comm` name at exec or rename, a target's children at fork) and shrinks as processes end.
//! Every interval the stage assembles the delta into one symbolized [`Recording`] with each
//! process's figures, which is narrowed to each target name's processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
};

use fdprof_figures::{Event, FullTracing};
use fdprof_recording::{
    Recording,
    recording::{DropCount, Target},
};

use fdprof_profiler::collect::{
    Filter, Kernel, ProfilerOptions, Snapshot,
    profiler::monotonic_ns,
    starts::StartBatch,
    stats::own_cpu_ns,
    steal::{CpuTimes, tick_ns},
    target,
};
use fdprof_profiler::live::{self, Maps, Stage, StageOptions, Symbols, SymbolsFrom, Tick, unix_ms};
use fdprof_profiler::model::{
    assemble::{self, Run},
    merge, process,
};
use fdprof_profiler::symbolize::{KernelSymbols, UserSymbolizer};

use super::config::{Targets, Tier, TraceOn, Trigger, Watch};
use super::followed::Followed;
use super::history::IntervalFigures;
use super::log;
use super::windows::{self, Opener, Traced, Windows};

/// The name of the one target of `-a`.
pub(crate) const ALL: &str = "all";
/// The drop counters of what the daemon's bounds turn away (probe `daemon`).
pub(crate) const DAEMON_PROBE: &str = "daemon";
pub(crate) const ATTACH_FAILED: &str = "attach_failed";
/// A capture (`--capture-on`) that could not be written.
pub(crate) const CAPTURE_FAILED: &str = "capture_failed";
/// Events an interval carries at most (the rest are counted as dropped).
pub(crate) const EVENTS: usize = 1000;
pub(crate) const EVENT_BOUND: &str = "event_bound";

/// The loaded programs on the live stage, and what was fixed when they loaded.
struct Loaded {
    stage: Stage,
    /// A new watch that differs loads the programs anew.
    settings: Settings,
}

/// The settings fixed when the programs load.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    all: bool,
    forced: Option<Mode>,
    lock_only: bool,
    rest: bool,
    slow: Duration,
    latency: bool,
    cpu_hz: Option<u64>,
}

impl Settings {
    fn of(watch: &Watch) -> Self {
        Self {
            all: watch.targets == Targets::All,
            forced: watch.forced,
            lock_only: watch.lock_only,
            rest: watch.tracing.tier == Tier::Rest,
            slow: watch.slow,
            latency: watch.latency,
            cpu_hz: watch.cpu_hz,
        }
    }
}

pub(crate) struct Watcher {
    kernel: Kernel,
    /// The symbolizers while no programs are loaded: they move onto the stage at load, and
    /// back at unload.
    symbols: Option<Symbols>,
    watch: Watch,
    max_processes: usize,
    stage: Option<Loaded>,
    /// The last figures of programs unloaded since the last interval (a reload).
    finished: Option<Recording>,
    followed: Followed,
    /// Events of programs unloaded since the last interval.
    events: Vec<Event>,
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
    /// The windows of full tracing (`--tier rest`).
    windows: Windows,
}

impl Watcher {
    pub(crate) fn new(
        kernel: Kernel,
        kernel_syms: KernelSymbols,
        watch: Watch,
        max_processes: usize,
    ) -> Self {
        // Event times count from the daemon's start, across reloads.
        let mut symbols = Symbols::new(
            kernel_syms,
            UserSymbolizer::new(),
            Maps::Starts,
            monotonic_ns(),
            false,
        );
        let blank = blank(
            &mut symbols,
            Mode::Tracepoint,
            BTreeMap::new(),
            watch.latency,
        );
        Self {
            kernel,
            symbols: Some(symbols),
            watch: watch.clone(),
            max_processes,
            stage: None,
            finished: None,
            followed: Followed::new(max_processes),
            events: Vec::new(),
            mode: Mode::Tracepoint,
            probes: BTreeMap::new(),
            blank,
            started: Instant::now(),
            started_unix_ms: unix_ms(),
            last_end: Duration::ZERO,
            windows: Windows::new(watch.tracing.max),
            cpu_earlier: own_cpu_ns(),
            cpu_times: CpuTimes::read(),
            index: 0,
        }
    }

    pub(crate) fn watch(&self) -> &Watch {
        &self.watch
    }

    /// Processes followed now (under `-a`, 1 while the programs are loaded).
    pub(crate) fn attached(&self) -> usize {
        match &self.stage {
            None => 0,
            Some(s) if s.settings.all => 1,
            Some(_) => self.followed.len(),
        }
    }

    /// Whether the fd syscalls are traced now (`--tier full`, or a window of full tracing).
    pub(crate) fn full_tracing(&self) -> bool {
        self.stage
            .as_ref()
            .is_some_and(|s| s.stage.profiler().full_tracing())
    }

    /// Whether process `pid` is profiled now: alive under `-a`, else in the target set.
    pub(crate) fn follows(&self, pid: u32) -> bool {
        match &self.stage {
            None => false,
            Some(s) if s.settings.all => target::process_alive(pid),
            Some(_) => self.followed.contains(pid),
        }
    }

    /// Takes a new config: processes it no longer wants leave the set (their last figures go
    /// into the next interval); new ones join at the next [`Watcher::discover`]. Settings fixed
    /// at load (`-a`, `--mode`, `--lock-only`, the slow-wait threshold, `--latency`, `--cpu`) load
    /// the programs anew.
    pub(crate) fn reload(&mut self, watch: Watch) {
        let reload = self
            .stage
            .as_ref()
            .is_some_and(|s| s.settings != Settings::of(&watch));
        self.windows.set_max(watch.tracing.max);
        if watch.tracing.tier == Tier::Full || watch.lock_only {
            self.windows.close(Instant::now());
        }
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
                if let Err(e) = stage.stage.profiler_mut().remove_target(pid) {
                    log::error(&format!("{e:#}"));
                }
            }
        }
        self.sync();
    }

    /// Works the stage between intervals (the statistics sampler, events symbolized as they
    /// come, the maps of processes that start) until a batch of processes joined (in the
    /// kernel) or started, which [`Watcher::started`] takes on; never ready while nothing is
    /// loaded. Cancel-safe.
    pub(crate) async fn next(&mut self) -> StartBatch {
        loop {
            let Some(loaded) = self.stage.as_mut() else {
                return std::future::pending().await;
            };
            match loaded.stage.next(None).await {
                Ok(Tick::Started(batch)) => return batch,
                Ok(_) => {}
                Err(e) => {
                    log::error(&format!("the programs can no longer be read: {e:#}"));
                    self.unload("they can no longer be read");
                }
            }
        }
    }

    /// Takes on the processes of `batch` (their maps already read): members from now on, named
    /// in the log.
    pub(crate) fn started(&mut self, batch: StartBatch) {
        let all = self.stage.as_ref().is_some_and(|s| s.settings.all);
        for start in &batch.starts {
            if !all && !self.followed.contains(start.pid) {
                self.followed.join(start.pid, u32::from(start.slot));
            }
        }
    }

    /// Loads the programs if they are not (or were unloaded by a reload).
    fn load(&mut self) {
        if self.stage.is_some() {
            return;
        }
        let Some(symbols) = self.symbols.take() else {
            log::error("cannot load the programs: kernel stacks cannot be symbolized");
            *self.followed.dropped.entry(ATTACH_FAILED).or_default() += 1;
            return;
        };
        let settings = Settings::of(&self.watch);
        let request = live::Request {
            options: ProfilerOptions {
                filter: match settings.all {
                    true => Filter::All,
                    false => Filter::Set {
                        max: u32::try_from(self.max_processes).unwrap_or(u32::MAX),
                    },
                },
                forced: settings.forced,
                lock_only: settings.lock_only,
                rest: settings.rest,
                slow: self.watch.slow,
                latency: self.watch.latency,
                cpu_hz: self.watch.cpu_hz,
                trace: false,
                children: false,
            },
            symbols: SymbolsFrom::Kept(Box::new(symbols)),
            maps: match settings.all {
                true => Maps::Starts,
                false => Maps::set(),
            },
            pids: Vec::new(),
            cgroups: None,
            target: self.target(),
            raw_addrs: false,
            // The daemon's figures carry no run notes: they add up over its whole life.
            notes: None,
            stage: StageOptions {
                events: Some(EVENTS),
                starts: true,
                trim: true,
                // Every load times the statistics windows from the daemon's start.
                stats_origin: Some(self.started),
                ..StageOptions::default()
            },
        };
        // Inside the runtime (the caller's): the rings register with its reactor.
        let mut stage = match live::start(&self.kernel, request) {
            Ok(started) => started.stage,
            Err(failed) => {
                log::error(&format!("cannot load the programs: {:#}", failed.error));
                *self.followed.dropped.entry(ATTACH_FAILED).or_default() += 1;
                // Symbolizers the stage took went with it: start them afresh.
                self.symbols = failed.symbols.map(|s| *s).or_else(|| self.fresh_symbols());
                return;
            }
        };
        let facts = &stage.assembler().facts;
        (self.mode, self.probes) = (facts.mode, facts.probes.clone());
        let latency = facts.syscall_latency;
        self.blank = blank(
            &mut stage.assembler().symbols,
            self.mode,
            self.probes.clone(),
            latency,
        );
        log::info(&format!("probes attach in {} mode", self.mode));
        if settings.all {
            log::info("profiling every process");
        }
        self.stage = Some(Loaded { stage, settings });
        // Programs loaded anew during a window trace fully to its end.
        if self.windows.is_open() {
            self.switch_full_tracing(true);
        }
        self.match_comms();
    }

    /// Opens a window of full tracing of `length` (`--trace-window` when `None`) from now, or
    /// makes the open one last that long from now, as far as `--trace-max` allows.
    pub(crate) fn trace_window(&mut self, opener: Opener, length: Option<Duration>) -> Traced {
        if self.watch.lock_only {
            return Traced::Never;
        }
        if self.watch.tracing.tier == Tier::Full {
            return Traced::Always;
        }
        let length = length.unwrap_or(self.watch.tracing.window);
        let was_open = self.windows.is_open();
        match self.windows.ask(Instant::now(), length) {
            Err(spent) => {
                // Said once per window that could not open, not at every interval it is asked.
                if !matches!(opener, Opener::Wait { .. } | Opener::Capture { .. }) {
                    log::warn(&format!(
                        "{opener}: no full tracing, --trace-max ({:?} an hour) is spent for {:?}",
                        self.watch.tracing.max, spent.retry_after
                    ));
                }
                Traced::Spent(spent)
            }
            Ok(left) => {
                if !was_open {
                    log::info(&format!("{opener}: full tracing for {left:?}"));
                    self.switch_full_tracing(true);
                } else {
                    log::debug(&format!("{opener}: full tracing goes on for {left:?}"));
                }
                Traced::For(left)
            }
        }
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
            && let Some(opener) = windows::wait_past(&figures.names, on)
        {
            self.trace_window(opener, None);
        }
    }

    /// Ends the window of full tracing once its time has passed by `now` (at an interval's
    /// end, so that an interval holds at most one window).
    fn end_window_if_due(&mut self, now: Instant) {
        if self.windows.close_if_due(now) {
            log::info("full tracing ends: its window has passed");
            self.switch_full_tracing(false);
        }
    }

    /// The time of `[from, to)` the fd syscalls were traced, as the interval's recording
    /// states it (`None` under `--tier full`: traced throughout), and in ns.
    fn traced_in(&self, from: Instant, to: Instant) -> (Option<FullTracing>, u64) {
        if self.watch.lock_only {
            return (None, 0);
        }
        if self.watch.tracing.tier == Tier::Full {
            return (None, to.saturating_duration_since(from).as_nanos() as u64);
        }
        let unix_ms = |at: Instant| {
            self.started_unix_ms + at.saturating_duration_since(self.started).as_millis() as u64
        };
        let traced = self.windows.traced_in(from, to, unix_ms);
        let ns = traced.traced_ns;
        (Some(traced), ns)
    }

    fn switch_full_tracing(&mut self, on: bool) {
        if let Some(loaded) = self.stage.as_mut()
            && let Err(e) = loaded.stage.profiler_mut().set_full_tracing(on)
        {
            log::error(&format!("{e:#}"));
        }
    }

    /// The kernel matches the `--comm` names at exec and rename from now on.
    fn match_comms(&mut self) {
        let comms = match &self.watch.targets {
            Targets::Comms(comms) => comms.clone(),
            _ => Vec::new(),
        };
        let slots = self.followed.comm_slots(&comms);
        if let Some(stage) = self.stage.as_mut()
            && let Err(e) = stage.stage.profiler_mut().match_comms(&slots)
        {
            log::error(&format!("cannot match names in the kernel: {e:#}"));
        }
    }

    /// Unloads the programs, keeping their last figures for the next interval.
    fn unload(&mut self, why: &str) {
        let Some(loaded) = self.stage.take() else {
            return;
        };
        log::info(&format!("unloading the programs: {why}"));
        let mut stage = loaded.stage;
        stage.assembler().facts.target = self.target();
        match stage.finish() {
            Ok(mut finished) => {
                if let Some(last) = finished.last.take() {
                    let rec = finished.assembler.recording(&last, EndReason::Duration);
                    self.events.extend(last.events);
                    count_events_dropped(&mut self.followed.dropped, last.events_dropped);
                    match self.finished.as_mut() {
                        Some(into) => merge::add(into, &rec),
                        None => self.finished = Some(rec),
                    }
                }
                self.symbols = Some(finished.assembler.symbols);
            }
            Err(e) => {
                log::error(&format!("the last figures are lost: {e:#}"));
                self.symbols = self.fresh_symbols();
            }
        }
        self.followed.leave_all(why, &self.watch);
    }

    /// Loads the programs if needed and adds the processes the targets name that are not
    /// followed yet.
    pub(crate) fn discover(&mut self) {
        self.load();
        if let Some(stage) = self.stage.as_mut()
            && !stage.settings.all
        {
            self.followed
                .discover(stage.stage.profiler_mut(), &self.watch);
        }
        self.sync();
    }

    /// Takes on the processes the kernel added to the set, and lets go of those it removed.
    fn sync(&mut self) {
        if let Some(loaded) = self.stage.as_mut()
            && !loaded.settings.all
        {
            let joined = self.followed.sync(loaded.stage.profiler(), &self.watch);
            loaded.stage.assembler().symbols.follow(&joined);
        }
    }

    /// Ends an interval: the figures of every process followed, narrowed to each name, and
    /// the daemon's. The rows of processes that left are deleted once read.
    pub(crate) fn interval(&mut self) -> IntervalFigures {
        self.sync();
        let now = Instant::now();
        self.end_window_if_due(now);
        let mut whole = self.finished.take();
        let target = self.target();
        if let Some(loaded) = self.stage.as_mut() {
            let stage = &mut loaded.stage;
            stage.assembler().facts.target = target;
            match stage.interval() {
                Ok(live) => {
                    let rec = stage.assembler().recording(&live, EndReason::Duration);
                    match whole.as_mut() {
                        Some(into) => merge::add(into, &rec),
                        None => whole = Some(rec),
                    }
                    self.events.extend(live.events);
                    count_events_dropped(&mut self.followed.dropped, live.events_dropped);
                    // The rows of processes that left go: their room serves new ones, and a
                    // pid reused later starts from zero.
                    if let Err(e) = stage.forget(&self.followed.left()) {
                        log::error(&format!("{e:#}"));
                    }
                }
                Err(e) => log::error(&format!("cannot read the figures: {e:#}")),
            }
        }

        let end = now.saturating_duration_since(self.started);
        let (start, duration) = (self.last_end, end.saturating_sub(self.last_end));
        let (full_tracing, full_tracing_ns) = self.traced_in(self.started + start, now);
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
        // Dropped once added: under churn each copy of an interval's rows is megabytes.
        if let Some(whole) = whole.take() {
            merge::add(&mut daemon, &whole);
        }
        daemon.steal = steal;
        daemon.full_tracing = full_tracing;
        let names = self.names_of(&daemon, start, duration);
        self.followed.end_interval();
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
            full_tracing_ns,
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

    /// Symbolizers started afresh, for when they were lost with the programs; without them
    /// (kallsyms unreadable) nothing loads again.
    fn fresh_symbols(&self) -> Option<Symbols> {
        let kernel = KernelSymbols::load();
        match kernel {
            Ok(kernel) => Some(Symbols::new(
                kernel,
                UserSymbolizer::new(),
                Maps::Starts,
                monotonic_ns(),
                false,
            )),
            Err(e) => {
                log::error(&format!("cannot symbolize kernel stacks: {e:#}"));
                None
            }
        }
    }

    /// What the daemon's own figures are named after: its targets.
    fn daemon_name(&self) -> String {
        match &self.watch.targets {
            Targets::All => ALL.into(),
            Targets::Comms(comms) => comms.join(", "),
            Targets::Pids(_) if self.followed.names.is_empty() => "(none yet)".into(),
            Targets::Pids(_) => self.followed.names.join(", "),
            Targets::Cgroups(c) => c
                .iter()
                .map(|c| c.path.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The target of the daemon's own figures.
    fn target(&self) -> Target {
        let kind = match self.watch.targets {
            Targets::All => TargetKind::All,
            _ => TargetKind::Name,
        };
        target(kind, None, &self.daemon_name())
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
    pub(crate) fn empty_history(&self, name: Option<&str>) -> Recording {
        let name = name.map_or_else(|| self.daemon_name(), str::to_string);
        self.empty(&name, Duration::ZERO, Duration::ZERO)
    }

    /// Unloads everything (SIGTERM, SIGINT): nothing stays loaded.
    pub(crate) fn shutdown(&mut self) {
        self.unload("the daemon stops");
        self.finished = None;
    }
}

/// Counts the events past an interval's bound with the daemon's drops.
fn count_events_dropped(drops: &mut BTreeMap<&'static str, u64>, dropped: u64) {
    if dropped > 0 {
        *drops.entry(EVENT_BOUND).or_default() += dropped;
    }
}

/// The target of a name's figures.
fn target(kind: TargetKind, pid: Option<u32>, name: &str) -> Target {
    Target {
        kind,
        pid,
        pids: Vec::new(),
        children: false,
        cgroups: Vec::new(),
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
