//! The daemon's main loop: at each tick, an interval's figures into the histories and the
//! flight recorder and the processes found anew; at SIGHUP, the config read again beside the
//! loop; at SIGTERM or SIGINT, everything detached and the pending captures written.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, block_in_place};
use tokio::time::{self, Instant};

use fdprof_profiler::live::Clock;

use super::capture::Recorder;
use super::config::{Reload, Watch};
use super::heap;
use super::log;
use super::otlp::Pusher;
use super::state::State;
use super::watcher::Watcher;
use super::windows::{Ask, Opener};

/// How long a SIGHUP's read of the config may take before it is given up (the old config
/// stays): the read runs beside the main loop, which never waits for it.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The signals the loop answers.
pub(super) struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
    usr1: Signal,
}

impl Signals {
    /// Handlers for SIGHUP, SIGTERM, SIGINT and SIGUSR1: from now on they no longer end the
    /// process.
    pub(super) fn new() -> Result<Self> {
        Ok(Self {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }
}

/// The collector and what its figures feed.
struct Collector {
    watcher: Watcher,
    state: Arc<State>,
    recorder: Recorder,
    /// `--otlp-endpoint`: each interval's profiles are queued to be pushed.
    pusher: Option<Pusher>,
}

/// A SIGHUP's read of the config, while it runs.
struct Reading {
    task: JoinHandle<Result<Watch>>,
    began: Instant,
}

/// Runs until SIGTERM or SIGINT; everything is detached and the pending captures are written
/// when it returns.
pub(super) async fn run(
    watcher: Watcher,
    state: Arc<State>,
    mut signals: Signals,
    mut asks: mpsc::Receiver<Ask>,
    reload: Option<Reload>,
    pusher: Option<Pusher>,
) {
    let mut collector = Collector {
        watcher,
        state,
        recorder: Recorder::default(),
        pusher,
    };
    block_in_place(|| collector.watcher.discover());
    let mut every = Clock::new(collector.watcher.watch().interval);
    let mut reading: Option<Reading> = None;
    loop {
        let give_up = reading
            .as_ref()
            .map_or_else(Instant::now, |r| r.began + RELOAD_TIMEOUT);
        // A window of full tracing ends on time, not at the interval's end.
        let window_due = collector.watcher.window_due();
        tokio::select! {
            _ = time::sleep_until(window_due.map_or_else(Instant::now, Instant::from_std)), if window_due.is_some() => {
                block_in_place(|| collector.watcher.end_window_if_due(std::time::Instant::now()));
            }
            _ = every.tick() => collector.interval(&mut every),
            batch = collector.watcher.next() => collector.watcher.started(batch),
            _ = signals.hup.recv() => hup(reload.as_ref(), &mut reading),
            _ = signals.usr1.recv() => {
                block_in_place(|| collector.watcher.trace_window(Opener::Signal, None));
            }
            Some(ask) = asks.recv() => {
                let traced = block_in_place(|| collector.watcher.trace_window(Opener::Request, Some(ask.length)));
                // The asker may have gone: nothing is lost.
                let _ = ask.answer.send(traced);
            }
            read = async { (&mut reading.as_mut().expect("guarded").task).await }, if reading.is_some() => {
                reading = None;
                let read = read.unwrap_or_else(|e| Err(anyhow::anyhow!("the read failed: {e}")));
                if let Some(timer) = collector.reloaded(read) {
                    every = timer;
                }
            }
            _ = time::sleep_until(give_up), if reading.is_some() => {
                // The thread may stay blocked (a hung file system); the loop goes on without it.
                reading = None;
                log::error(&format!(
                    "config not reloaded, the old one stays: its read took over {RELOAD_TIMEOUT:?}"
                ));
            }
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
        }
    }
    collector.stop().await;
}

/// SIGHUP: starts reading the config again, unless there is none or a read is still running.
fn hup(reload: Option<&Reload>, reading: &mut Option<Reading>) {
    match (reload, &reading) {
        (None, _) => log::warn("SIGHUP: no --config file to reload"),
        (Some(_), Some(_)) => log::warn("SIGHUP: the last reload is still reading the config"),
        (Some(reload), None) => {
            let reload = reload.clone();
            *reading = Some(Reading {
                task: tokio::task::spawn_blocking(move || reload.read()),
                began: Instant::now(),
            });
        }
    }
}

impl Collector {
    /// Ends an interval: its figures go to the histories and the flight recorder; then the
    /// processes started since are found.
    fn interval(&mut self, clock: &mut Clock) {
        let began = std::time::Instant::now();
        // The collector reads and assembles the interval.
        let figures = block_in_place(|| self.watcher.interval());
        clock.cut();
        log::debug(&format!(
            "interval {}: {} processes, {} contention sites, {} events, read in {:?}",
            figures.index,
            self.watcher.attached(),
            figures.daemon.contention.len(),
            figures.events.len(),
            began.elapsed()
        ));
        // Said once each, not per frame.
        for failure in self.watcher.take_name_failures() {
            log::error(&failure);
        }
        let end_ns = figures.start_ns + figures.daemon.duration_ns;
        // The flight recorder looks at it: the captures it begins, and a wait past
        // --trace-on, ask for windows of full tracing.
        let captures = match &self.watcher.watch().capture {
            Some(settings) => self.recorder.check(settings, &figures),
            None => Vec::new(),
        };
        block_in_place(|| self.watcher.trace_if_asked(&figures, captures));
        if let Some(pusher) = &self.pusher {
            block_in_place(|| pusher.interval(&figures));
        }
        // The state keeps it, with the collector as those windows left it.
        self.state.push(figures, self.watcher.status());
        // Then the captures due are written, and the processes started since are found.
        let interval = self.watcher.watch().interval;
        self.recorder.write_due(&self.state, Some(end_ns), interval);
        block_in_place(|| self.watcher.discover());
        heap::give_back();
    }

    /// Applies a SIGHUP's read of the config; a new interval timer when the interval changed.
    fn reloaded(&mut self, read: Result<Watch>) -> Option<Clock> {
        let watch = match read {
            Ok(watch) => watch,
            Err(e) => {
                log::error(&format!("config not reloaded, the old one stays: {e:#}"));
                return None;
            }
        };
        log::info(&format!("config reloaded: {}", watch.describe()));
        if watch.debug != self.watcher.watch().debug {
            match watch.debug.sources() {
                Ok(debug) => self.watcher.set_debug(debug),
                Err(e) => log::error(&format!("the old debug sources stay: {e:#}")),
            }
        }
        let timer =
            (watch.interval != self.watcher.watch().interval).then(|| Clock::new(watch.interval));
        block_in_place(|| {
            self.watcher.reload(watch);
            self.watcher.discover();
        });
        let capture = self.watcher.watch().capture.as_ref();
        self.state.set_capture_dir(capture.map(|c| c.dir.clone()));
        timer
    }

    /// Detaches everything, then writes what is pending with the intervals there are: the
    /// episode may be why the daemon is being stopped.
    async fn stop(mut self) {
        log::info("stopping: detaching every program");
        block_in_place(|| self.watcher.shutdown());
        let interval = self.watcher.watch().interval;
        self.recorder.finish(&self.state, interval).await;
        if let Some(pusher) = self.pusher {
            pusher.finish().await;
        }
    }
}
