//! The one program set: loaded when the watcher first needs it, with what is fixed at load
//! taken from the watch ([`Settings`]); loaded anew when a reload changes any of it; unloaded
//! (its last figures kept for the next interval) when it can no longer be read or the daemon
//! stops.

use std::time::Duration;

use fdprof_common::probes::Mode;
use fdprof_common::session::EndReason;
use fdprof_profiler::collect::CallGraph;
use fdprof_profiler::collect::{Filter, ProfilerOptions};
use fdprof_profiler::live::{self, Maps, Stage, StageOptions, Symbols, SymbolsFrom};
use fdprof_profiler::symbolize::{DebugSources, KernelSymbols};

use super::{ATTACH_FAILED, EVENTS, Watcher, count_events_dropped, new_symbols};
use crate::config::{Targets, Tier, Watch};
use crate::log;

/// The loaded programs on the live stage, and what was fixed when they loaded.
pub(super) struct Loaded {
    pub(super) stage: Stage,
    /// A new watch that differs loads the programs anew.
    pub(super) settings: Settings,
}

/// The settings fixed when the programs load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) all: bool,
    forced: Option<Mode>,
    lock_only: bool,
    rest: bool,
    slow: Duration,
    latency: bool,
    cpu_hz: Option<u64>,
    call_graph: CallGraph,
}

impl Settings {
    pub(super) fn of(watch: &Watch) -> Self {
        Self {
            all: watch.targets == Targets::All,
            forced: watch.forced,
            lock_only: watch.lock_only,
            rest: watch.tracing.tier == Tier::Rest,
            slow: watch.slow,
            latency: watch.latency,
            cpu_hz: watch.cpu_hz,
            call_graph: watch.call_graph,
        }
    }

    /// The profiler's options: one program set, a target set of at most `max_processes`
    /// (none under `-a`).
    fn options(&self, max_processes: usize) -> ProfilerOptions {
        ProfilerOptions {
            filter: match self.all {
                true => Filter::All,
                false => Filter::Set {
                    max: u32::try_from(max_processes).unwrap_or(u32::MAX),
                },
            },
            forced: self.forced,
            lock_only: self.lock_only,
            rest: self.rest,
            slow: self.slow,
            latency: self.latency,
            cpu_hz: self.cpu_hz,
            call_graph: self.call_graph,
            trace: false,
            children: false,
        }
    }
}

impl Watcher {
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
            self.windows.close(std::time::Instant::now());
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

    /// Loads the programs if they are not (or were unloaded by a reload).
    pub(super) fn load(&mut self) {
        if self.stage.is_some() {
            return;
        }
        let Some(symbols) = self.symbols.take() else {
            log::error("cannot load the programs: kernel stacks cannot be symbolized");
            *self.followed.dropped.entry(ATTACH_FAILED).or_default() += 1;
            return;
        };
        let settings = Settings::of(&self.watch);
        // Inside the runtime (the caller's): the rings register with its reactor.
        let mut stage = match live::start(&self.kernel, self.request(&settings, symbols)) {
            Ok(started) => started.stage,
            Err(failed) => {
                log::error(&format!("cannot load the programs: {:#}", failed.error));
                *self.followed.dropped.entry(ATTACH_FAILED).or_default() += 1;
                // Symbolizers the stage took went with it: start them afresh.
                let debug = self.debug.clone();
                self.symbols = failed.symbols.map(|s| *s).or_else(|| fresh_symbols(debug));
                return;
            }
        };
        let facts = &stage.assembler().facts;
        (self.mode, self.probes) = (facts.mode, facts.probes.clone());
        let latency = facts.syscall_latency;
        self.assembly.loaded(
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

    /// What the live stage is started with.
    fn request(&self, settings: &Settings, symbols: Symbols) -> live::Request {
        live::Request {
            options: settings.options(self.max_processes),
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
                stats_origin: Some(self.assembly.started()),
                ..StageOptions::default()
            },
        }
    }

    /// The kernel matches the `--comm` names at exec and rename from now on.
    pub(super) fn match_comms(&mut self) {
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
    pub(super) fn unload(&mut self, why: &str) {
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
                    count_events_dropped(&mut self.followed.dropped, last.events_dropped);
                    self.assembly.add(rec, last.events);
                }
                self.symbols = Some(finished.assembler.symbols);
            }
            Err(e) => {
                log::error(&format!("the last figures are lost: {e:#}"));
                self.symbols = fresh_symbols(self.debug.clone());
            }
        }
        self.followed.leave_all(why, &self.watch);
    }
}

/// Symbolizers started afresh, for when they were lost with the programs; without them
/// (kallsyms unreadable) nothing loads again.
fn fresh_symbols(debug: DebugSources) -> Option<Symbols> {
    match KernelSymbols::load() {
        Ok(kernel) => Some(new_symbols(kernel, debug)),
        Err(e) => {
            log::error(&format!("cannot symbolize kernel stacks: {e:#}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(targets: Targets) -> Watch {
        super::super::watch_of(targets)
    }

    #[test]
    fn every_process_is_one_program_set_without_a_target_set() {
        let all = Settings::of(&watch(Targets::All)).options(4096);
        assert!(matches!(all.filter, Filter::All));
        let named = Settings::of(&watch(Targets::Comms(vec!["nginx".into()]))).options(4096);
        assert!(matches!(named.filter, Filter::Set { max: 4096 }));
        assert!(named.rest && !named.trace && !named.children);
    }

    #[test]
    fn only_what_is_fixed_at_load_loads_the_programs_anew() {
        let before = Settings::of(&watch(Targets::Comms(vec!["nginx".into()])));
        // Other names, a longer interval, another window: the same programs serve.
        let mut w = watch(Targets::Comms(vec!["redis-server".into()]));
        w.interval = Duration::from_secs(5);
        w.tracing.window = Duration::from_secs(5);
        assert_eq!(Settings::of(&w), before);
        // What the programs are loaded with: anew.
        for change in [
            |w: &mut Watch| w.slow = Duration::from_millis(1),
            |w: &mut Watch| w.latency = true,
            |w: &mut Watch| w.cpu_hz = Some(99),
            |w: &mut Watch| w.lock_only = true,
            |w: &mut Watch| w.tracing.tier = Tier::Full,
            |w: &mut Watch| w.forced = Some(Mode::Tracepoint),
            |w: &mut Watch| w.targets = Targets::All,
        ] {
            let mut w = watch(Targets::Comms(vec!["nginx".into()]));
            change(&mut w);
            assert_ne!(Settings::of(&w), before, "{w:?}");
        }
    }
}
