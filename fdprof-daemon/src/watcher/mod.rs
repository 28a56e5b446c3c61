//! The daemon's collector: one live stage (`Stage`) for every target, its programs loaded
//! once whatever the number of processes followed. Under `-a` it profiles every process;
//! otherwise its target set holds the processes followed, which user space adds (`-p`, the
//! `--comm` processes already running) and the kernel extends the moment a process matches (a
//! `--comm` name at exec or rename, a target's children at fork) and shrinks as processes end.
//!
//! Its parts, by what they do: [`programs`] loads the one program set and loads it anew when a
//! reload changes what is fixed at load; [`tracing`] opens and ends the windows of full
//! tracing; [`assembly`] turns each interval's reading into one symbolized [`Recording`] with
//! each process's figures, narrowed to each target name's processes.

mod assembly;
mod programs;
mod tracing;

use std::collections::BTreeMap;

use fdprof_common::probes::{Attachment, Mode, Role};
use fdprof_profiler::collect::profiler::monotonic_ns;
use fdprof_profiler::collect::{Kernel, starts::StartBatch};
use fdprof_profiler::live::{Maps, Symbols, Tick};
use fdprof_profiler::symbolize::{DebugSources, KernelSymbols, UserSymbolizer};
use fdprof_recording::Recording;

use super::config::{Targets, Watch};
use super::followed::Followed;
use super::interval::{Following, Status};
use super::log;
use super::windows::Windows;
use assembly::Assembly;
use programs::Loaded;

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

pub(crate) struct Watcher {
    kernel: Kernel,
    /// The symbolizers while no programs are loaded: they move onto the stage at load, and
    /// back at unload.
    symbols: Option<Symbols>,
    /// Where stripped binaries' names are looked for (the watch's, once started).
    debug: DebugSources,
    watch: Watch,
    max_processes: usize,
    stage: Option<Loaded>,
    followed: Followed,
    /// The programs' attach facts: the mode, per role.
    mode: Mode,
    probes: BTreeMap<Role, Attachment>,
    /// The windows of full tracing (`--tier rest`).
    windows: Windows,
    /// What each interval's figures are made of, between intervals.
    assembly: Assembly,
}

impl Watcher {
    pub(crate) fn new(
        kernel: Kernel,
        kernel_syms: KernelSymbols,
        watch: Watch,
        max_processes: usize,
        debug: DebugSources,
    ) -> Self {
        // Event times count from the daemon's start, across reloads.
        let mut symbols = new_symbols(kernel_syms, debug.clone());
        let assembly = Assembly::new(&mut symbols, watch.latency);
        Self {
            kernel,
            symbols: Some(symbols),
            debug,
            windows: Windows::new(watch.tracing.max),
            watch,
            max_processes,
            stage: None,
            followed: Followed::new(max_processes),
            mode: Mode::Tracepoint,
            probes: BTreeMap::new(),
            assembly,
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
    fn full_tracing(&self) -> bool {
        self.stage
            .as_ref()
            .is_some_and(|s| s.stage.profiler().full_tracing())
    }

    /// The collector as it stands, for the state beside an interval's figures.
    pub(crate) fn status(&self) -> Status {
        Status {
            attached: self.attached(),
            full_tracing: self.full_tracing(),
            interval: self.watch.interval,
            following: match &self.stage {
                None => Following::Nothing,
                Some(s) if s.settings.all => Following::Alive,
                Some(_) => Following::Set(self.followed.pids()),
            },
            unlinked: self
                .stage
                .as_ref()
                .map_or_else(Vec::new, |s| s.stage.profiler().unlinked()),
        }
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

    /// The empty recording a name's history starts from; `None`: the daemon's own.
    pub(crate) fn empty_history(&self, name: Option<&str>) -> Recording {
        let name = name.map_or_else(|| self.daemon_name(), str::to_string);
        self.assembly
            .empty(&self.watch, &name, Default::default(), Default::default())
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

    /// The symbolizers, on the stage or at rest.
    fn symbols_mut(&mut self) -> Option<&mut Symbols> {
        match self.stage.as_mut() {
            Some(loaded) => Some(&mut loaded.stage.assembler().symbols),
            None => self.symbols.as_mut(),
        }
    }

    /// Looks for stripped binaries' names in `debug` from now on (a reload that changed them).
    pub(crate) fn set_debug(&mut self, debug: DebugSources) {
        self.debug = debug.clone();
        if let Some(symbols) = self.symbols_mut() {
            symbols.set_debug(debug);
        }
    }

    /// The debuginfod failures not said yet, each kind once.
    pub(crate) fn take_name_failures(&mut self) -> Vec<String> {
        self.symbols_mut()
            .map(|s| s.take_name_failures())
            .unwrap_or_default()
    }

    /// Unloads everything (SIGTERM, SIGINT): nothing stays loaded.
    pub(crate) fn shutdown(&mut self) {
        self.unload("the daemon stops");
        self.assembly.forget_finished();
    }
}

/// Symbolizers for the daemon's whole life (event times count from now).
fn new_symbols(kernel: KernelSymbols, debug: DebugSources) -> Symbols {
    Symbols::new(
        kernel,
        UserSymbolizer::with_sources(debug),
        Maps::Starts,
        monotonic_ns(),
        false,
    )
}

/// Counts the events past an interval's bound with the daemon's drops.
fn count_events_dropped(drops: &mut BTreeMap<&'static str, u64>, dropped: u64) {
    if dropped > 0 {
        *drops.entry(EVENT_BOUND).or_default() += dropped;
    }
}

/// A watch of `targets` at rest, with the command line's defaults.
#[cfg(test)]
fn watch_of(targets: Targets) -> Watch {
    use crate::config::{Tier, TraceOn, Tracing};
    use std::time::Duration;
    Watch {
        targets,
        interval: Duration::from_secs(1),
        slow: Duration::from_micros(100),
        forced: None,
        lock_only: false,
        tracing: Tracing {
            tier: Tier::Rest,
            window: Duration::from_secs(30),
            max: Duration::from_secs(300),
            on: TraceOn::Off,
        },
        latency: false,
        cpu_hz: None,
        call_graph: Default::default(),
        children: false,
        capture: None,
        debug: Default::default(),
    }
}
