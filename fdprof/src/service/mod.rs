//! `fdprof daemon`: an always-on service. One tokio runtime runs the collector ([`watcher`]:
//! a profiler per target process, attached and finished as processes come and go, their deltas
//! added up per target name each interval into [`history`]) and the read-only HTTP endpoints
//! ([`http`]) that serve those figures: Prometheus metrics, reports, flamegraphs and a stream.
//! SIGHUP reloads the config; SIGTERM and SIGINT detach everything and end it.

pub mod access;
pub mod capture;
mod capture_dir;
pub mod config;
pub mod files;
mod followed;
pub mod history;
pub mod http;
pub mod log;
mod page;
mod profiles;
pub mod server;
pub mod state;
pub mod tls;
pub mod watcher;

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::{self, Instant},
};

use crate::analysis::{self, ReportOptions};
use crate::collect::Kernel;
use crate::error::{EXIT_USAGE, fatal};
use crate::live::Clock;
use crate::model::merge;
use crate::render::metrics::{Exposition, MetricsCollector};
use crate::symbolize::KernelSymbols;

use config::{Config, Watch};
use state::State;
use watcher::Watcher;

/// Reads the config again (SIGHUP), on a thread of its own; `None` when the daemon has no
/// config file.
pub type Reload = Arc<dyn Fn() -> Result<Watch> + Send + Sync>;

/// How long a SIGHUP's read of the config may take before it is given up (the old config
/// stays): the read runs beside the main loop, which never waits for it.
const RELOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
    server::reserve_descriptors(config.http.max_connections).map_err(|e| fatal(EXIT_USAGE, e))?;
    let tls = match &config.http.tls {
        None => None,
        Some((cert, key)) => Some(tls::acceptor(cert, key).map_err(|e| fatal(EXIT_USAGE, e))?),
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            fatal(
                EXIT_USAGE,
                format!("cannot listen on {}: {e}", config.listen),
            )
        })?;
    // The address bound: its port is the kernel's pick under `--listen HOST:0`.
    let listen = listener.local_addr().unwrap_or(config.listen);
    // Logged once the port is ours: a daemon that cannot listen says only that, on one line.
    if !listen.ip().is_loopback() {
        log::warn(&format!(
            "serving on {listen}, reachable from other hosts (--allow-remote)",
        ));
    }
    let (token, token_saved) = access_token(&config.http, listen.port())?;
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
    state.set_capture_dir(config.watch.capture.as_ref().map(|c| c.dir.clone()));
    let mut recorder = capture::Recorder::default();
    let http_counters = Arc::new(server::Counters::default());
    let registry = MetricsCollector::new({
        let state = state.clone();
        let counters = http_counters.clone();
        // The totals change once an interval: scrapes in between (several Prometheus servers,
        // a person with curl) reuse the figures.
        let cache: std::sync::Mutex<Option<(u64, Exposition)>> = Default::default();
        move || {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            let now = state.read().intervals;
            let mut figures = match &*cache {
                Some((made, figures)) if *made == now => figures.clone(),
                _ => {
                    let figures = exposition(&state);
                    *cache = Some((now, figures.clone()));
                    figures
                }
            };
            // The server's counts change with every connection, the captures' as they are
            // written: read at each scrape.
            figures.http = counters.figures();
            figures.captures = state.capture_counts();
            figures
        }
    })
    .into_registry();
    let app = Arc::new(http::App {
        state: state.clone(),
        registry,
    });
    let policy = access::Policy::new(token, listen, &config.http.allow_hosts, tls.is_some());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = server::Server {
        listener,
        router: http::router(app, Arc::new(policy)),
        tls,
        max: config.http.max_connections,
        counters: http_counters,
    };
    let server = tokio::spawn(server.run(stopped));
    log::info(&format!(
        "fdprof daemon {} listening on {}://{listen}",
        env!("CARGO_PKG_VERSION"),
        if config.http.tls.is_some() {
            "https"
        } else {
            "http"
        },
    ));
    tokio::task::block_in_place(|| watcher.discover());

    let mut every = Clock::new(watcher.watch().interval);
    // A SIGHUP's read of the config, while it runs.
    let mut reloading: Option<tokio::task::JoinHandle<Result<Watch>>> = None;
    let mut reload_began = Instant::now();
    loop {
        tokio::select! {
            _ = every.tick() => {
                let began = std::time::Instant::now();
                let mut figures = tokio::task::block_in_place(|| watcher.interval());
                every.cut();
                merge::add_drop(
                    &mut figures.daemon.drops,
                    watcher::DAEMON_PROBE,
                    watcher::CAPTURE_FAILED,
                    state.take_capture_failures(),
                );
                log::debug(&format!(
                    "interval {}: {} processes, {} contention sites, {} events, read in {:?}",
                    figures.index,
                    watcher.attached(),
                    figures.daemon.contention.len(),
                    figures.events.len(),
                    began.elapsed()
                ));
                let w = &watcher;
                let end_ns = figures.start_ns + figures.daemon.duration_ns;
                if let Some(settings) = &w.watch().capture {
                    tokio::task::block_in_place(|| recorder.check(settings, &figures));
                }
                state.push(figures, w.attached(), w.watch().interval, |name| w.empty_history(Some(name)));
                recorder.write_due(&state, Some(end_ns), w.watch().interval);
                tokio::task::block_in_place(|| watcher.discover());
            }
            batch = watcher.next() => watcher.started(batch),
            _ = hup.recv() => match (&reload, &reloading) {
                (None, _) => log::warn("SIGHUP: no --config file to reload"),
                (Some(_), Some(_)) => log::warn("SIGHUP: the last reload is still reading the config"),
                (Some(read), None) => {
                    let read = read.clone();
                    reloading = Some(tokio::task::spawn_blocking(move || read()));
                    reload_began = Instant::now();
                }
            },
            read = async { reloading.as_mut().expect("guarded").await }, if reloading.is_some() => {
                reloading = None;
                let read = read.unwrap_or_else(|e| Err(anyhow::anyhow!("the read failed: {e}")));
                if let Some(timer) = reloaded(&mut watcher, read) {
                    every = timer;
                }
                state.set_capture_dir(watcher.watch().capture.as_ref().map(|c| c.dir.clone()));
            }
            _ = time::sleep_until(reload_began + RELOAD_TIMEOUT), if reloading.is_some() => {
                // The thread may stay blocked (a hung file system); the loop goes on without it.
                reloading = None;
                log::error(&format!(
                    "config not reloaded, the old one stays: its read took over {RELOAD_TIMEOUT:?}"
                ));
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    log::info("stopping: detaching every program");
    tokio::task::block_in_place(|| watcher.shutdown());
    // What is pending is written with the intervals there are: the episode may be why the
    // daemon is being stopped.
    recorder.finish(&state, watcher.watch().interval).await;
    stop.send_replace(true);
    server.await.context("the HTTP server failed")?;
    if let Some(path) = token_saved {
        let _ = std::fs::remove_file(path);
    }
    log::info("stopped");
    Ok(())
}

/// Applies a SIGHUP's read of the config; a new interval timer when the interval changed.
fn reloaded(watcher: &mut Watcher, read: Result<Watch>) -> Option<Clock> {
    let watch = match read {
        Ok(watch) => watch,
        Err(e) => {
            log::error(&format!("config not reloaded, the old one stays: {e:#}"));
            return None;
        }
    };
    log::info(&format!("config reloaded: {}", describe(&watch)));
    let timer = (watch.interval != watcher.watch().interval).then(|| Clock::new(watch.interval));
    tokio::task::block_in_place(|| {
        watcher.reload(watch);
        watcher.discover();
    });
    timer
}

/// The daemon's token: `--token-file`'s, else a new one saved where root alone can read it
/// (its path logged; removed at exit).
fn access_token(
    http: &config::Http,
    port: u16,
) -> Result<(access::Token, Option<std::path::PathBuf>)> {
    if let Some(file) = &http.token_file {
        let token = access::Token::read(file).map_err(|e| {
            fatal(
                EXIT_USAGE,
                format!("bad --token-file {}: {e}", file.display()),
            )
        })?;
        log::info(&format!("requests need the token in {}", file.display()));
        return Ok((token, None));
    }
    let token = access::Token::generate().map_err(|e| fatal(EXIT_USAGE, e))?;
    // systemd's RuntimeDirectory= (the first, when it names several).
    let dir = std::env::var("RUNTIME_DIRECTORY")
        .ok()
        .and_then(|d| d.split(':').next().map(std::path::PathBuf::from))
        .unwrap_or_else(|| access::TOKEN_DIR.into());
    let path = token.save(&dir, port).map_err(|e| {
        fatal(
            EXIT_USAGE,
            format!("cannot save the daemon's token: {e} (or give --token-file)"),
        )
    })?;
    log::info(&format!(
        "requests need the token in {} (new at each start; --token-file keeps one)",
        path.display()
    ));
    Ok((token, Some(path)))
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
        config::Targets::Cgroups(c) => format!(
            "the processes of cgroups {}",
            c.iter()
                .map(|c| c.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
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
        http: Default::default(),
        captures: Vec::new(),
    }
}
