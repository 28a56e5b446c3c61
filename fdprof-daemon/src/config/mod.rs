//! What the daemon watches and how: from the command line ([`Defaults`], the flags the
//! command parses), or from a config file ([`Reload`]) whose keys override them and that SIGHUP
//! reads again. These are the typed results; the submodules check and read them.

mod defaults;
pub mod durations;
mod file;
mod targets;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fdprof_figures::Rule;

use super::capture_dir;

pub use defaults::Defaults;
pub use file::Reload;

/// The processes the daemon profiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// These processes, labelled by their comm; one that exits is dropped.
    Pids(Vec<u32>),
    /// Every process with one of these comms, as they start and exit.
    Comms(Vec<String>),
    /// Every process, as one target named `all`.
    All,
    /// The processes of these cgroups (and below them), each cgroup a target named by its
    /// path, as they are started, moved in, moved out and end.
    Cgroups(Vec<fdprof_profiler::collect::cgroups::Cgroup>),
}

/// What a config file (or the command line) sets; SIGHUP swaps in a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub targets: Targets,
    /// Time between the figures' intervals (and target discovery).
    pub interval: Duration,
    /// Waits at least this long are counted as slow waits (the programs' threshold).
    pub slow: Duration,
    /// `--mode`: the mode forced on every function role; `None`, the most direct each allows.
    pub forced: Option<fdprof_common::probes::Mode>,
    /// `--lock-only`: lock contention only, no fd syscall or fd function probes.
    pub lock_only: bool,
    /// `--tier` and its windows of full tracing.
    pub tracing: Tracing,
    /// Time the fd syscalls entry to exit (for processes attached from now on).
    pub latency: bool,
    /// Sample processes attached from now on, on CPU, this many times a second per CPU
    /// (`--cpu`); `None`: no sampling.
    pub cpu_hz: Option<u64>,
    /// How user stacks are walked (`--call-graph`; the command line's, for processes attached
    /// from now on).
    pub call_graph: fdprof_profiler::collect::CallGraph,
    /// `-p` targets' new processes are followed from their fork (`--children`).
    pub children: bool,
    /// The flight recorder (`--capture-on`, `--capture-dir`, …); `None`: no captures.
    pub capture: Option<Capture>,
    /// Where stripped binaries' names are looked for (`--debug-dir`, `--debuginfod`, …), for
    /// the files seen from now on.
    pub debug: fdprof_profiler::symbolize::DebugOptions,
}

impl Watch {
    /// What it watches, for the log.
    pub(crate) fn describe(&self) -> String {
        let targets = match &self.targets {
            Targets::All => "every process".to_string(),
            Targets::Pids(p) => format!(
                "pids {}",
                p.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
            ),
            Targets::Comms(c) => format!("processes named {}", c.join(", ")),
            Targets::Cgroups(c) => format!(
                "the processes of cgroups {}",
                c.iter()
                    .map(|c| c.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "{targets}, every {:?}, slow waits from {:?}",
            self.interval, self.slow
        )
    }
}

/// What the daemon traces, and when it traces the fd syscalls in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracing {
    pub tier: Tier,
    /// How long a window of full tracing lasts (SIGUSR1, `--trace-on`).
    pub window: Duration,
    /// Full tracing at most this long in any hour (every window's time added up).
    pub max: Duration,
    /// What a target's `file_lock` wait must reach to open a window.
    pub on: TraceOn,
}

/// `--trace-on`: the `file_lock` wait per second of an interval that opens a window of full
/// tracing for its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOn {
    /// Only SIGUSR1, `POST /api/v1/trace` and captures open one.
    Off,
    Wait(Duration),
}

impl Tracing {
    pub const TIER: &str = "rest";
    pub const WINDOW: &str = "30s";
    pub const MAX: &str = "5m";
    pub const ON: &str = "1ms";
}

/// What the daemon traces between windows of full tracing.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The fd syscalls all the time (as `record` and `top` trace them).
    Full,
    /// Lock contention only; the fd syscall programs stay loaded, attached for a window of
    /// full tracing (SIGUSR1) and detached after it, so that between windows no program runs
    /// on a syscall.
    Rest,
}

/// What sets a capture off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// A diagnosis rule fired on the target's interval.
    Rule(Rule),
    /// A `file_lock` wait of the target longer than `--slow`.
    SlowWait,
}

impl Trigger {
    /// The name `--capture-on`, file names and metrics use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Trigger::Rule(rule) => rule.name(),
            Trigger::SlowWait => "slow-wait",
        }
    }

    pub fn parse(text: &str) -> Result<Trigger, String> {
        if text == Trigger::SlowWait.name() {
            return Ok(Trigger::SlowWait);
        }
        Rule::ALL
            .into_iter()
            .find(|r| r.name() == text)
            .map(Trigger::Rule)
            .ok_or_else(|| {
                format!(
                    "no rule named {:?} (rules: {})",
                    fdprof_recording::escape::name(text),
                    Trigger::names()
                )
            })
    }

    /// Every trigger's name, for errors: `shared-table, …, slow-wait`.
    pub(crate) fn names() -> String {
        let names: Vec<&str> = Rule::ALL
            .iter()
            .map(|r| r.name())
            .chain([Trigger::SlowWait.name()])
            .collect();
        names.join(", ")
    }
}

/// `--capture-*`: what fires a capture of the flight recorder (`service::capture`), where it
/// goes and how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub on: Vec<Trigger>,
    pub dir: PathBuf,
    /// Kept before the interval that fired.
    pub window: Duration,
    /// Waited for, and kept, after it.
    pub after: Duration,
    /// At most one capture per target and rule this often.
    pub every: Duration,
    /// Captures kept in `dir`, the oldest removed.
    pub max: usize,
}

impl Capture {
    pub const WINDOW: &str = "30s";
    pub const AFTER: &str = "10s";
    pub const EVERY: &str = "10m";
    pub const MAX: usize = 50;
    /// The most `--capture-max` (and the file's `capture_max`) may ask for.
    pub const MAX_LIMIT: usize = 10_000;

    /// These settings when some rule is named, checked (the directory, the window); `None`
    /// when none is.
    fn checked(self, interval: Duration) -> Result<Option<Capture>, String> {
        if self.on.is_empty() {
            return Ok(None);
        }
        if self.dir.as_os_str().is_empty() {
            return Err("capture_on needs capture_dir".into());
        }
        self.check(interval)?;
        Ok(Some(self))
    }

    /// Refuses settings the daemon cannot honour at `interval`: a window longer than the
    /// intervals it keeps, or a directory it must not write into. One line.
    fn check(&self, interval: Duration) -> Result<(), String> {
        let kept = interval.saturating_mul(bounds::INTERVALS as u32);
        if self.window + self.after + interval > kept {
            return Err(format!(
                "--capture-window and --capture-after ({:?} + {:?}) must fit in the {} \
                 intervals the daemon keeps ({kept:?} at --interval {interval:?})",
                self.window,
                self.after,
                bounds::INTERVALS
            ));
        }
        capture_dir::check(&self.dir).map_err(|why| {
            format!(
                "cannot capture into {}: {why}",
                fdprof_recording::escape::name(&self.dir.display().to_string())
            )
        })
    }
}

/// How the daemon runs. `listen` is fixed for its life; `watch` may be reloaded.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub watch: Watch,
    /// `-v`: log every attach, detach and scrape.
    pub verbose: bool,
    /// Processes attached at once, at most [`bounds::PROCESSES`].
    pub max_processes: usize,
    pub http: Http,
    /// `--otlp-endpoint` and the rest: where each interval's profiles are pushed, if anywhere.
    pub otlp: Option<crate::otlp::Push>,
}

/// Who may reach the endpoints, and how many at once. Fixed for the daemon's life.
#[derive(Debug, Clone)]
pub struct Http {
    /// `--token-file`; without it a token is made at start and saved (see `service::access`).
    pub token_file: Option<PathBuf>,
    /// `--allow-host`: more names a request's Host may give.
    pub allow_hosts: Vec<String>,
    /// `--tls-cert` and `--tls-key`.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `--web-config-file`: the exporter-toolkit's web configuration (TLS, client
    /// certificates, basic auth, headers), read again when it changes.
    pub web_config: Option<PathBuf>,
    /// `--health-listen`: `/healthz` alone on a port of its own, plain HTTP.
    pub health_listen: Option<SocketAddr>,
    /// `--max-connections`.
    pub max_connections: usize,
}

/// The bounds that keep the daemon's memory flat however long it runs (stated in `--help` and
/// in the docs); what they turn away is counted as a drop.
pub mod bounds {
    /// Processes followed at once (entries of the programs' target set): `--max-processes`'s
    /// default.
    pub const PROCESSES: usize = 4096;
    /// The most `--max-processes` may ask for.
    pub const PROCESSES_MAX: usize = 65536;
    /// Target names kept (and exported as `target` label values).
    pub(crate) const NAMES: usize = 32;
    /// Intervals kept per name for `?seconds=N` (5 minutes at the default 1 s).
    pub(crate) const INTERVALS: usize = 300;
    /// Contention sites kept per name per interval, and in each name's running total.
    pub(crate) const SITES: usize = 128;
}
