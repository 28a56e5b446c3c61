//! `fdprof daemon`: an always-on service. One tokio runtime runs the collector (`watcher`:
//! a profiler per target process, attached and finished as processes come and go, their deltas
//! added up per target name each interval into `history`) and the read-only HTTP endpoints
//! (`http`) that serve those figures: Prometheus metrics, reports, flamegraphs and a stream.
//! SIGHUP reloads the config; SIGTERM and SIGINT detach everything and end it.
//!
//! The API is what `fdprof daemon`'s command needs: [`hold_signals`] before any thread starts,
//! then [`run`] serves a [`config::Config`] until SIGTERM; [`config`] holds the typed settings,
//! the flags' defaults and ranges, and the config file's reader ([`config::Reload`], which
//! SIGHUP runs again); [`log`] is the daemon's log; [`server`] and [`access`] name the bounds and
//! the token directory the flags and `doctor` speak of. Everything else is the service's own.

#![warn(unreachable_pub)]

pub mod access;
mod app;
pub(crate) mod capture;
mod capture_dir;
pub mod config;
mod files;
mod followed;
mod health;
mod heap;
pub(crate) mod history;
pub(crate) mod http;
mod interval;
pub mod log;
mod long_lived;
mod main_loop;
mod metrics;
mod named;
pub mod otlp;
mod page;
mod profiles;
pub mod server;
mod span;
pub(crate) mod state;
pub(crate) mod tls;
mod trace_request;
pub(crate) mod watcher;
pub mod web_config;
mod windows;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use fdprof_profiler::collect::Kernel;
use fdprof_profiler::error::{EXIT_USAGE, fatal};
use fdprof_profiler::symbolize::KernelSymbols;

use config::{Config, Reload};
use state::State;
use watcher::Watcher;

/// The signals the daemon handles; until [`run`] has its handlers in place they are held
/// pending (see [`hold_signals`]).
const HANDLED: [libc::c_int; 4] = [libc::SIGHUP, libc::SIGTERM, libc::SIGINT, libc::SIGUSR1];

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
    heap::tune();
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
    let (sockets, listen) = listen(&config).await?;
    let (token, token_saved) = access_token(&config.http, listen)?;
    log::info(&format!("watching {}", config.watch.describe()));
    let signals = main_loop::Signals::new()?;
    // Handled from now on (this is the thread `block_on` runs on): any held pending arrive.
    set_signal_mask(libc::SIG_UNBLOCK);
    let debug = config.watch.debug.sources()?;
    let watcher = Watcher::new(
        kernel,
        kernel_syms,
        config.watch.clone(),
        config.max_processes,
        debug,
    );
    let state = State::new(watcher.empty_history(None), config.watch.interval);
    state.set_capture_dir(config.watch.capture.as_ref().map(|c| c.dir.clone()));
    let (web, https) = (sockets.web(), sockets.https());
    let policy = access::Policy::new(
        token.clone(),
        listen,
        &config.http.allow_hosts,
        https,
        web.clone(),
    );
    let watching = web.map(web_config::Live::watch);
    let pusher = config.otlp.clone().map(otlp::Pusher::start);
    // Few: each is answered at once by the main loop.
    let (asks, asked) = tokio::sync::mpsc::channel(4);
    let (stop, server) = start_http(
        sockets,
        policy,
        config.http.max_connections,
        &state,
        asks,
        pusher.as_ref().map(otlp::Pusher::figures),
    );
    log::info(&format!(
        "fdprof daemon {} listening on {}://{listen}",
        env!("CARGO_PKG_VERSION"),
        if https { "https" } else { "http" },
    ));
    main_loop::run(watcher, state, signals, asked, reload, pusher).await;
    stop.send_replace(true);
    server.await.context("the HTTP server failed")?;
    if let Some(watching) = watching {
        watching.abort();
    }
    if let Some(path) = token_saved {
        token.remove_saved(&path);
    }
    log::info("stopped");
    Ok(())
}

/// The listening sockets and TLS (`--tls-cert`'s, or the web config's); the address bound (its
/// port is the kernel's pick under `--listen HOST:0`).
async fn listen(config: &Config) -> Result<(Sockets, SocketAddr)> {
    server::reserve_descriptors(config.http.max_connections).map_err(|e| fatal(EXIT_USAGE, e))?;
    let tls = match (&config.http.tls, &config.http.web_config) {
        (Some((cert, key)), _) => Some(server::Tls::Fixed(
            tls::acceptor(cert, key).map_err(|e| fatal(EXIT_USAGE, e))?,
        )),
        (None, Some(path)) => Some(server::Tls::Live(
            web_config::Live::open(path.clone()).map_err(|e| fatal(EXIT_USAGE, e))?,
        )),
        (None, None) => None,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(|e| {
        fatal(
            EXIT_USAGE,
            format!("cannot listen on {}: {e}", config.listen),
        )
    })?;
    let listen = listener.local_addr().unwrap_or(config.listen);
    // Logged once the port is ours: a daemon that cannot listen says only that, on one line.
    if !listen.ip().is_loopback() {
        log::warn(&format!(
            "serving on {listen}, reachable from other hosts (--allow-remote)",
        ));
    }
    let health = match config.http.health_listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
            fatal(
                EXIT_USAGE,
                format!("cannot listen on {addr} (--health-listen): {e}"),
            )
        })?),
        None => None,
    };
    let sockets = Sockets {
        main: listener,
        health,
        tls,
    };
    Ok((sockets, listen))
}

/// What the daemon serves on: its port and TLS, and `--health-listen`'s port.
struct Sockets {
    main: TcpListener,
    health: Option<TcpListener>,
    tls: Option<server::Tls>,
}

impl Sockets {
    /// The web config served, if it is one.
    fn web(&self) -> Option<Arc<web_config::Live>> {
        match &self.tls {
            Some(server::Tls::Live(live)) => Some(live.clone()),
            _ => None,
        }
    }

    /// Whether it serves HTTPS (a web config without `tls_server_config` does not).
    fn https(&self) -> bool {
        match &self.tls {
            Some(server::Tls::Fixed(_)) => true,
            Some(server::Tls::Live(live)) => live.current().tls.is_some(),
            None => false,
        }
    }
}

/// Connections the health port serves at once (probes ask one at a time).
const HEALTH_CONNECTIONS: usize = 8;

/// Starts serving the endpoints on `listener` (and `/healthz` alone on `health`); `true` sent on the channel returned stops the
/// server, whose task ends once the answers being sent are done.
fn start_http(
    Sockets {
        main: listener,
        health,
        tls,
    }: Sockets,
    policy: access::Policy,
    max_connections: usize,
    state: &Arc<State>,
    asks: tokio::sync::mpsc::Sender<windows::Ask>,
    push: Option<otlp::PushFigures>,
) -> (watch::Sender<bool>, JoinHandle<()>) {
    let counters = Arc::new(server::Counters::default());
    let app = Arc::new(app::App {
        state: state.clone(),
        registry: metrics::registry(state.clone(), counters.clone(), push),
        long_lived: long_lived::LongLived::new(max_connections, counters.clone()),
        asks,
    });
    let (stop, stopped) = watch::channel(false);
    // `--health-listen`: `/healthz` alone, plain HTTP, a few connections of its own.
    let health = health.map(|listener| {
        let server = server::Server {
            listener,
            router: http::health_router(app.clone()),
            tls: None,
            max: HEALTH_CONNECTIONS,
            counters: Arc::new(server::Counters::default()),
        };
        tokio::spawn(server.run(stopped.clone()))
    });
    let server = server::Server {
        listener,
        router: http::router(app, Arc::new(policy)),
        tls,
        max: max_connections,
        counters,
    };
    let main = tokio::spawn(server.run(stopped));
    let both = tokio::spawn(async move {
        let _ = main.await;
        if let Some(health) = health {
            let _ = health.await;
        }
    });
    (stop, both)
}

/// The daemon's token: `--token-file`'s, else a new one saved where root alone can read it
/// (its path logged; removed at exit).
fn access_token(
    http: &config::Http,
    listen: SocketAddr,
) -> Result<(access::Token, Option<PathBuf>)> {
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
        .and_then(|d| d.split(':').next().map(PathBuf::from))
        .unwrap_or_else(|| access::TOKEN_DIR.into());
    let path = token.save(&dir, listen).map_err(|e| {
        fatal(
            EXIT_USAGE,
            format!(
                "cannot save the daemon's token: {e} (give --token-file FILE, or a writable \
                 {}: in a pod, an emptyDir mounted there)",
                dir.display()
            ),
        )
    })?;
    log::info(&format!(
        "requests need the token in {} (new at each start; --token-file keeps one)",
        path.display()
    ));
    Ok((token, Some(path)))
}
