//! `fdprof daemon`: an always-on service. One tokio runtime runs the collector ([`watcher`]:
//! a profiler per target process, attached and finished as processes come and go, their deltas
//! added up per target name each interval into [`history`]) and the read-only HTTP endpoints
//! ([`http`]) that serve those figures: Prometheus metrics, reports, flamegraphs and a stream.
//! SIGHUP reloads the config; SIGTERM and SIGINT detach everything and end it.

pub mod config;
pub mod history;
pub mod http;
pub mod log;
pub mod state;
pub mod watcher;

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::{self, Instant, MissedTickBehavior},
};

use crate::analysis::{self, ReportOptions};
use crate::collect::Kernel;
use crate::error::{EXIT_USAGE, fatal};
use crate::render::metrics::{Exposition, MetricsCollector};
use crate::symbolize::KernelSymbols;

use config::{Config, Watch};
use state::State;
use watcher::Watcher;

/// Reads the config again (SIGHUP); `None` when the daemon has no config file.
pub type Reload = Box<dyn Fn() -> Result<Watch> + Send>;

/// The signals the daemon handles; until [`run`] has its handlers in place they are held
/// pending (see [`hold_signals`]).
const HANDLED: [libc::c_int; 3] = [libc::SIGHUP, libc::SIGTERM, libc::SIGINT];

/// Holds SIGHUP, SIGTERM and SIGINT pending until [`run`] handles them: their default action
/// would kill the daemon during its start (reading kallsyms takes a while), so a SIGHUP sent
/// right after start would end it and a SIGTERM would not exit 0. Call it before any thread is
/// started: threads inherit the mask, and [`run`] unblocks only the thread that serves.
pub fn hold_signals() {
    set_signal_mask(libc::SIG_BLOCK);
}

fn set_signal_mask(how: libc::c_int) {
    // SAFETY: a sigset_t on the stack, filled by sigemptyset and sigaddset; pthread_sigmask
    // changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in HANDLED {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Serves until SIGTERM or SIGINT; everything is detached when it returns.
pub fn run(
    config: Config,
    kernel: Kernel,
    kernel_syms: KernelSymbols,
    reload: Option<Reload>,
) -> Result<()> {
    log::set_verbose(config.verbose);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fdprof-daemon")
        .enable_all()
        .build()
        .context("cannot start the daemon's runtime")?;
    runtime.block_on(serve(config, kernel, kernel_syms, reload))
}

async fn serve(
    config: Config,
    kernel: Kernel,
    kernel_syms: KernelSymbols,
    reload: Option<Reload>,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            fatal(
                EXIT_USAGE,
                format!("cannot listen on {}: {e}", config.listen),
            )
        })?;
    // Logged once the port is ours: a daemon that cannot listen says only that, on one line.
    if !config.listen.ip().is_loopback() {
        log::warn(&format!(
            "serving on {}, reachable from other hosts (--allow-remote)",
            config.listen
        ));
    }
    log::info(&format!("watching {}", describe(&config.watch)));
    let (mut hup, mut term, mut int) = (
        signal(SignalKind::hangup())?,
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    // Handled from now on (this is the thread `block_on` runs on): any held pending arrive.
    set_signal_mask(libc::SIG_UNBLOCK);
    let mut watcher = Watcher::new(
        kernel,
        kernel_syms,
        config.watch.clone(),
        config.max_processes,
    );
    let state = State::new(watcher.empty_history(None), config.watch.interval);
    let registry = MetricsCollector::new({
        let state = state.clone();
        // The totals change once an interval: scrapes in between (several Prometheus servers,
        // a person with curl) reuse the figures.
        let cache: std::sync::Mutex<Option<(u64, Exposition)>> = Default::default();
        move || {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            let now = state.read().intervals;
            match &*cache {
                Some((made, figures)) if *made == now => figures.clone(),
                _ => {
                    let figures = exposition(&state);
                    *cache = Some((now, figures.clone()));
                    figures
                }
            }
        }
    })
    .into_registry();
    let app = Arc::new(http::App {
        state: state.clone(),
        registry,
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let serving = axum::serve(listener, http::router(app)).with_graceful_shutdown(async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|&s| s).await;
    });
    let server = tokio::spawn(async move { serving.await });
    log::info(&format!(
        "fdprof daemon {} listening on http://{}",
        env!("CARGO_PKG_VERSION"),
        config.listen
    ));
    tokio::task::block_in_place(|| watcher.discover());

    let mut every = interval_timer(watcher.watch().interval);
    let sampler = time::sleep(watcher.tick());
    tokio::pin!(sampler);
    loop {
        tokio::select! {
            _ = every.tick() => {
                let began = std::time::Instant::now();
                let figures = tokio::task::block_in_place(|| watcher.interval());
                log::debug(&format!(
                    "interval {}: {} processes, {} contention sites, {} events, read in {:?}",
                    figures.index,
                    watcher.attached(),
                    figures.daemon.contention.len(),
                    figures.events.len(),
                    began.elapsed()
                ));
                let w = &watcher;
                state.push(figures, w.attached(), w.watch().interval, |name| w.empty_history(Some(name)));
                tokio::task::block_in_place(|| watcher.discover());
            }
            _ = &mut sampler => sampler.as_mut().reset(Instant::now() + watcher.tick()),
            _ = hup.recv() => match reload.as_ref().map(|r| r()) {
                None => log::warn("SIGHUP: no --config file to reload"),
                Some(Err(e)) => log::error(&format!("config not reloaded, the old one stays: {e:#}")),
                Some(Ok(watch)) => {
                    log::info(&format!("config reloaded: {}", describe(&watch)));
                    if watch.interval != watcher.watch().interval {
                        every = interval_timer(watch.interval);
                    }
                    tokio::task::block_in_place(|| {
                        watcher.reload(watch);
                        watcher.discover();
                    });
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    log::info("stopping: detaching every program");
    tokio::task::block_in_place(|| watcher.shutdown());
    stop.send_replace(true);
    server
        .await
        .context("the HTTP server failed")?
        .context("the HTTP server failed")?;
    log::info("stopped");
    Ok(())
}

fn interval_timer(every: std::time::Duration) -> time::Interval {
    let mut timer = time::interval_at(Instant::now() + every, every);
    timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
    timer
}

/// What a config watches, for the log.
pub fn describe(watch: &Watch) -> String {
    let targets = match &watch.targets {
        config::Targets::All => "every process".to_string(),
        config::Targets::Pids(p) => format!(
            "pids {}",
            p.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        ),
        config::Targets::Comms(c) => format!("processes named {}", c.join(", ")),
    };
    format!(
        "{targets}, every {:?}, slow waits from {:?}",
        watch.interval, watch.slow
    )
}

/// One scrape's figures: each name's running total and the daemon's, made into reports.
fn exposition(state: &State) -> Exposition {
    // Copied under the lock, analysed outside it: an interval is never held up by a scrape.
    let (names, daemon, attached) = {
        let h = state.read();
        let names: Vec<_> = h
            .names
            .iter()
            .map(|(n, hist)| (n.clone(), hist.total.clone()))
            .collect();
        (names, h.daemon.total.clone(), h.attached)
    };
    let opts = ReportOptions::default();
    Exposition {
        targets: names
            .into_iter()
            .map(|(n, rec)| (n, analysis::report(&rec, &opts)))
            .collect(),
        daemon: analysis::report(&daemon, &opts),
        attached,
    }
}
