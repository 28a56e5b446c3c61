//! `fdprof daemon`: the always-on service (`service/`), its command line and config file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use fdprof_common::cpu::{DEFAULT_FREQUENCY_HZ, MAX_FREQUENCY_HZ};
use serde::Deserialize;

use fdprof_common::probes::Mode;

use super::args::{ModeArg, ProbeArgs};
use fdprof_daemon::{
    config::{
        self as cfg, Capture, Config, Reload, Targets, Tier, TraceOn, Tracing, Trigger, Watch,
        bounds,
    },
    files::{self, Access},
    log, server,
};
use fdprof_profiler::collect::cgroups::Cgroup;
use fdprof_profiler::error::{EXIT_USAGE, fatal};
use fdprof_profiler::privileges::{self, Capability};

/// A comm is at most this many bytes (TASK_COMM_LEN less its NUL): a longer name never matches.
const COMM_MAX: usize = 15;
/// The largest config file read.
const CONFIG_MAX: u64 = 64 * 1024;

#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("targets").required(true).args(["pid", "comm", "cgroup", "all", "config"])),
    after_help = "Bounds (memory stays flat however long it runs; what they turn away is counted \
                  in fdprof_events_dropped_total{probe=\"daemon\"}): 4096 processes followed at \
                  once (--max-processes), 32 target names, the last 300 intervals per name for ?seconds=N, 128 \
                  stacks per name and interval and in each name's running total (the rest are \
                  folded into one stack-less row per lock and operation; no count is lost).\n\n\
                  Tiers: at rest (the default) only the lock contention programs run, the fd \
                  syscall programs stay loaded and are linked for windows of full tracing: \
                  --trace-window when a target's file_lock wait reaches --trace-on, when a \
                  capture's rule fires, at SIGUSR1, or N seconds at POST /api/v1/trace?seconds=N; \
                  at most --trace-max of them in any hour. --tier full traces the fd syscalls all \
                  the time.\n\n\
                  Endpoints (read-only but POST /api/v1/trace): /metrics (OpenMetrics), /report.json?seconds=N&target=, \
                  /flamegraph.svg?seconds=N&op=alloc|close|all&lock=file_lock|all&target= \
                  (&cpu=1: the on-CPU samples of --cpu), \
                  /api/v1/stream (one SSE event per interval, one per capture), /captures and \
                  /captures/NAME (--capture-dir's captures), /healthz.\n\n\
                  Access: every endpoint but /healthz needs the token (Authorization: Bearer \
                  TOKEN, ?token=TOKEN, or the cookie a ?token= answer sets), from --token-file or \
                  made at start into /run/fdprof/daemon-ADDRESS-PORT.token (root only; the log names \
                  it); a request whose Host is not one of the daemon's names gets 421. At most \
                  --max-connections at once; one that sends no whole request within 10 s is \
                  closed.\n\n\
                  Signals: SIGHUP reloads --config (a broken file keeps the old config); SIGUSR1 \
                  opens a window of full tracing; SIGTERM or SIGINT detaches everything and exits 0.\n\n\
                  Config file (TOML): one of `pid = [1234]`, `comm = [\"nginx\"]`, `cgroup = \
                  [\"/sys/fs/cgroup/system.slice/nginx.service\"]` or `all = true`; optional `interval = \"1s\"`, `slow = \"100us\"`, `mode = \"tracepoint\"`, `lock_only = true`, `tier = \"full\"`, `trace_window = \"30s\"`, `trace_max = \"5m\"`, `trace_on = \"1ms\"`, `latency = true`, `cpu = true`, \
                  `freq = 99`, `children = true`, `capture_on = [\"shared-table\"]`, \
                  `capture_dir = \"/var/lib/fdprof/captures\"`, `capture_window = \"30s\"`, \
                  `capture_after = \"10s\"`, `capture_every = \"10m\"`, `capture_max = 50`."
)]
pub(crate) struct DaemonArgs {
    /// Where to serve HTTP; a non-loopback address needs --allow-remote
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// Allow --listen on an address other hosts can reach (the endpoints stay read-only)
    #[arg(long)]
    pub allow_remote: bool,
    /// The token requests must carry: a file owned by root that only root can read (e.g.
    /// `openssl rand -hex 32`); without it, one is made at each start into
    /// /run/fdprof/daemon-ADDRESS-PORT.token
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Also answer requests whose Host header names this (a DNS name the daemon is reached by);
    /// others get 421
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert: a file owned by root that only root can read
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// HTTP connections open at once (1 to 4096); at the bound an idle one is closed for a new
    /// one, or the new one refused
    #[arg(long, default_value_t = server::MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=server::MAX_CONNECTIONS_LIMIT as u64))]
    pub max_connections: usize,
    /// Profile these processes (each labelled by its comm); one that exits is dropped. May be
    /// given several times
    #[arg(short, long, num_args = 1.., value_name = "PID")]
    pub pid: Vec<u32>,
    /// Profile every process with this comm, from its exec or rename (in the kernel), until it
    /// exits
    #[arg(long, num_args = 1.., value_name = "NAME")]
    pub comm: Vec<String>,
    /// Profile the processes of this cgroup and those below it (a directory under
    /// /sys/fs/cgroup, v2 or v1), as they start, are moved in or out, and end; each cgroup a
    /// target named by its path. May be given several times
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub cgroup: Vec<PathBuf>,
    /// Profile every process but the daemon itself, as one target named `all`; /metrics also has per-process series
    /// (labels pid and comm) for the first 20 processes by file_lock wait (the report's order)
    #[arg(short, long)]
    pub all: bool,
    /// Read the targets, interval and slow threshold from this TOML file (root's, mode 0644:
    /// readable by all, writable by root alone); SIGHUP reads it again
    #[arg(long, conflicts_with_all = ["pid", "comm", "cgroup", "all"])]
    pub config: Option<PathBuf>,
    /// Time between intervals of figures and target discovery (10 ms to 1 h)
    #[arg(long, default_value = "1s", value_parser = super::duration::parse_interval)]
    pub interval: Duration,
    /// Waits at least this long count as slow waits (1 µs to 10 s)
    #[arg(long, default_value = "100us", value_parser = super::duration::parse_slow)]
    pub slow: Duration,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Follow at most this many processes at once (1 to 65536; all share one set of
    /// programs); others are counted, not profiled
    #[arg(long, default_value_t = bounds::PROCESSES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=bounds::PROCESSES_MAX as u64))]
    pub max_processes: usize,
    /// With -p, also follow the processes they start, from their fork (a --comm name's forks
    /// are followed anyway: they carry its name)
    #[arg(long)]
    pub children: bool,
    /// What to trace: rest (lock contention all the time, the fd syscalls only in windows of
    /// full tracing) or full (the fd syscalls all the time, as record and top do)
    #[arg(long, value_enum, default_value = Tracing::TIER, conflicts_with = "lock_only")]
    pub tier: Tier,
    /// How long a window of full tracing lasts (10 ms to 1 h); SIGUSR1, --trace-on and a
    /// capture's rule open one, POST /api/v1/trace?seconds=N one of N seconds
    #[arg(long, value_name = "DURATION", default_value = Tracing::WINDOW,
          value_parser = super::duration::parse_interval)]
    pub trace_window: Duration,
    /// Full tracing at most this long in any hour, all windows together (1 s to 1 h): bounds
    /// what the fd syscall programs cost the host however often windows are asked for
    #[arg(long, value_name = "DURATION", default_value = Tracing::MAX,
          value_parser = super::duration::parse_trace_max)]
    pub trace_max: Duration,
    /// Open a window of full tracing when a target's file_lock wait in an interval reaches
    /// this much per second (1 µs to 1 s; `off`: never)
    #[arg(long, value_name = "WAIT|off", default_value = Tracing::ON,
          value_parser = super::duration::parse_trace_on)]
    pub trace_on: TraceOn,
    /// Keep the minutes around a problem: when one of these rules fires on a target's
    /// interval (a diagnosis rule such as shared-table, long-scans, table-growth,
    /// interrupt-time, host-steal; or slow-wait: a file_lock wait past --slow), write the
    /// intervals around it into --capture-dir as a recording
    #[arg(long, value_name = "RULE[,RULE…]", value_delimiter = ',', requires = "capture_dir",
          value_parser = |s: &str| Trigger::parse(s))]
    pub capture_on: Vec<Trigger>,
    /// Where captures go: an existing directory owned by root and not writable by group or
    /// others
    #[arg(long, value_name = "DIR", requires = "capture_on")]
    pub capture_dir: Option<PathBuf>,
    /// How much of what came before the interval that fired a capture holds
    #[arg(long, value_name = "DURATION", default_value = Capture::WINDOW,
          value_parser = super::duration::parse_capture)]
    pub capture_window: Duration,
    /// How long to wait after the interval that fired, and keep, before writing the capture
    #[arg(long, value_name = "DURATION", default_value = Capture::AFTER,
          value_parser = super::duration::parse_capture)]
    pub capture_after: Duration,
    /// At most one capture per target and rule this often
    #[arg(long, value_name = "DURATION", default_value = Capture::EVERY,
          value_parser = super::duration::parse_capture)]
    pub capture_every: Duration,
    /// Captures kept in --capture-dir (1 to 10000): past it, the oldest is removed
    #[arg(long, default_value_t = Capture::MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=CAPTURE_MAX_LIMIT as u64))]
    pub capture_max: usize,
    /// Log every attach, detach and reload in detail
    #[arg(short, long)]
    pub verbose: bool,
}

/// The most `--capture-max` may ask for.
const CAPTURE_MAX_LIMIT: usize = 10_000;

/// A config file's fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    pid: Option<Vec<u32>>,
    comm: Option<Vec<String>>,
    cgroup: Option<Vec<PathBuf>>,
    all: Option<bool>,
    children: Option<bool>,
    interval: Option<String>,
    slow: Option<String>,
    latency: Option<bool>,
    cpu: Option<bool>,
    freq: Option<u64>,
    mode: Option<ModeArg>,
    lock_only: Option<bool>,
    tier: Option<Tier>,
    trace_window: Option<String>,
    trace_max: Option<String>,
    trace_on: Option<String>,
    capture_on: Option<Vec<String>>,
    capture_dir: Option<PathBuf>,
    capture_window: Option<String>,
    capture_after: Option<String>,
    capture_every: Option<String>,
    capture_max: Option<usize>,
}

pub(crate) fn run(args: DaemonArgs) -> Result<()> {
    fdprof_daemon::hold_signals();
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        return Err(fatal(
            EXIT_USAGE,
            format!(
                "{} is not a loopback address: add --allow-remote to serve other hosts",
                args.listen
            ),
        ));
    }
    let cpu_hz = args.probe.cpu_hz();
    let defaults = Defaults {
        interval: args.interval,
        slow: args.slow,
        forced: args.probe.mode.forced(),
        lock_only: args.probe.lock_only,
        tracing: Tracing {
            tier: args.tier,
            window: args.trace_window,
            max: args.trace_max,
            on: args.trace_on,
        },
        latency: args.probe.latency,
        cpu_hz,
        children: args.children,
        capture: Capture {
            on: args.capture_on.clone(),
            dir: args.capture_dir.clone().unwrap_or_default(),
            window: args.capture_window,
            after: args.capture_after,
            every: args.capture_every,
            max: args.capture_max,
        },
    };
    let watch = match &args.config {
        Some(path) => read_config(path, &defaults)?,
        None => {
            let capture = checked_capture(defaults.capture.clone(), args.interval)
                .map_err(|e| fatal(EXIT_USAGE, e))?;
            Watch {
                targets: targets(&args.pid, &args.comm, &args.cgroup, args.all, Shown::Value)?,
                interval: args.interval,
                slow: args.slow,
                forced: defaults.forced,
                lock_only: defaults.lock_only,
                tracing: defaults.tracing.clone(),
                latency: args.probe.latency,
                cpu_hz,
                children: args.children,
                capture,
            }
        }
    };
    may_load()?;
    log::set_verbose(args.verbose);
    let (kernel, kernel_syms) = fdprof_profiler::live::read_kernel()?;
    let reload: Option<Reload> = args
        .config
        .clone()
        .map(|path| std::sync::Arc::new(move || read_config(&path, &defaults)) as Reload);
    let config = Config {
        listen: args.listen,
        watch,
        verbose: args.verbose,
        max_processes: args.max_processes,
        http: cfg::Http {
            token_file: args.token_file,
            allow_hosts: args.allow_host,
            tls: args.tls_cert.zip(args.tls_key),
            max_connections: args.max_connections,
        },
    };
    fdprof_daemon::run(config, kernel, kernel_syms, reload)
}

/// Fails unless this process may load the programs (capabilities and, in a container, a
/// seccomp filter that lets `bpf(2)` through); says what else its pod spec lacks.
fn may_load() -> Result<()> {
    let mut needed = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        needed.push(Capability::Syslog);
    }
    privileges::require("fdprof daemon", &needed)?;
    for gap in fdprof_profiler::probe::pod_spec::check_at_start()? {
        log::warn(&format!("in a container: add {}", gap.line()));
    }
    Ok(())
}

/// How an error names a bad target: by its value (the command line, which the user typed), or
/// by its key and place (a config file, whose values are never quoted back).
#[derive(Clone, Copy)]
enum Shown {
    Value,
    Key,
}

fn targets(
    pids: &[u32],
    comms: &[String],
    cgroups: &[PathBuf],
    all: bool,
    shown: Shown,
) -> Result<Targets> {
    let given = usize::from(!pids.is_empty())
        + usize::from(!comms.is_empty())
        + usize::from(!cgroups.is_empty())
        + usize::from(all);
    if given != 1 {
        return Err(fatal(
            EXIT_USAGE,
            "give exactly one of pid, comm, cgroup or all",
        ));
    }
    if all {
        return Ok(Targets::All);
    }
    if !cgroups.is_empty() {
        let mut checked: Vec<Cgroup> = Vec::new();
        for (i, path) in cgroups.iter().enumerate() {
            let c = Cgroup::resolve(path).map_err(|e| match shown {
                Shown::Value => e,
                Shown::Key => fatal(
                    EXIT_USAGE,
                    format!(
                        "cgroup entry {} is not a cgroup fdprof can follow (a directory \
                         under /sys/fs/cgroup)",
                        i + 1
                    ),
                ),
            })?;
            if !checked.contains(&c) {
                checked.push(c);
            }
        }
        return Ok(Targets::Cgroups(checked));
    }
    if !pids.is_empty() {
        if pids.contains(&0) {
            return Err(fatal(EXIT_USAGE, "0 is not a process id"));
        }
        return Ok(Targets::Pids(pids.to_vec()));
    }
    for (i, c) in comms.iter().enumerate() {
        if c.is_empty() || c.len() > COMM_MAX {
            let which = match shown {
                Shown::Value => format!("{:?}", fdprof_recording::escape::name(c)),
                Shown::Key => format!("entry {}", i + 1),
            };
            return Err(fatal(
                EXIT_USAGE,
                format!("comm {which} can never match: a comm is 1 to {COMM_MAX} bytes"),
            ));
        }
    }
    Ok(Targets::Comms(comms.to_vec()))
}

/// What the command line sets, which a config file's keys override.
struct Defaults {
    interval: Duration,
    slow: Duration,
    forced: Option<Mode>,
    lock_only: bool,
    tracing: Tracing,
    latency: bool,
    cpu_hz: Option<u64>,
    children: bool,
    /// `on` empty: no captures unless the file asks.
    capture: Capture,
}

/// The capture settings when some rule is named, checked (the directory, the window).
fn checked_capture(settings: Capture, interval: Duration) -> Result<Option<Capture>, String> {
    if settings.on.is_empty() {
        return Ok(None);
    }
    if settings.dir.as_os_str().is_empty() {
        return Err("capture_on needs capture_dir".into());
    }
    settings.check(interval)?;
    Ok(Some(settings))
}

/// Reads a config file (a regular file on disk that only root can change, never one that could
/// block: see [`files::read_text`]); every error is one line naming the file.
fn read_config(path: &Path, defaults: &Defaults) -> Result<Watch> {
    let Defaults {
        interval,
        slow,
        forced,
        lock_only,
        latency,
        cpu_hz,
        children,
        ..
    } = *defaults;
    let shown = path.display();
    let bad = |why: String| fatal(EXIT_USAGE, format!("bad config {shown}: {why}"));
    let text = files::read_text(path, Access::ReadableByAll, CONFIG_MAX).map_err(&bad)?;
    let file: File = toml::from_str(&text).map_err(|e| bad(toml_error(&text, &e)))?;
    let duration = |key, text: Option<String>, default, range| {
        file_duration(key, text.as_deref(), default, range).map_err(&bad)
    };
    let capture = file_capture(&file, &defaults.capture).map_err(&bad)?;
    let tracing = file_tracing(&file, &defaults.tracing).map_err(&bad)?;
    let interval = duration(
        "interval",
        file.interval,
        interval,
        super::duration::INTERVAL,
    )?;
    let capture = checked_capture(capture, interval).map_err(&bad)?;
    Ok(Watch {
        capture,
        targets: targets(
            file.pid.as_deref().unwrap_or_default(),
            file.comm.as_deref().unwrap_or_default(),
            file.cgroup.as_deref().unwrap_or_default(),
            file.all.unwrap_or(false),
            Shown::Key,
        )
        .map_err(|e| bad(e.to_string()))?,
        interval,
        slow: duration("slow", file.slow, slow, super::duration::SLOW)?,
        forced: file.mode.map_or(forced, ModeArg::forced),
        lock_only: file.lock_only.unwrap_or(lock_only),
        tracing,
        latency: file.latency.unwrap_or(latency),
        children: file.children.unwrap_or(children),
        cpu_hz: match file.cpu.unwrap_or(cpu_hz.is_some()) {
            false => None,
            true => {
                let hz = file.freq.or(cpu_hz).unwrap_or(DEFAULT_FREQUENCY_HZ);
                if !(1..=MAX_FREQUENCY_HZ).contains(&hz) {
                    return Err(bad(format!("freq is not 1 to {MAX_FREQUENCY_HZ}")));
                }
                Some(hz)
            }
        },
    })
}

/// A config file's duration `key` (`default` when absent); an error names the key and what it
/// must be, never the value.
fn file_duration(
    key: &str,
    text: Option<&str>,
    default: Duration,
    range: super::duration::Range,
) -> Result<Duration, String> {
    text.map_or(Ok(default), |t| super::duration::parse_in(t, range))
        .map_err(|_| format!("{key} is not {}", super::duration::hint(range)))
}

/// A config file's tracing settings over the command line's (`default`); errors quote no
/// value.
fn file_tracing(file: &File, default: &Tracing) -> Result<Tracing, String> {
    use super::duration::{INTERVAL, TRACE_MAX, TRACE_ON};
    let on = match file.trace_on.as_deref() {
        None => default.on,
        Some("off") => TraceOn::Off,
        text => TraceOn::Wait(file_duration("trace_on", text, Duration::ZERO, TRACE_ON)?),
    };
    Ok(Tracing {
        tier: file.tier.unwrap_or(default.tier),
        window: file_duration(
            "trace_window",
            file.trace_window.as_deref(),
            default.window,
            INTERVAL,
        )?,
        max: file_duration(
            "trace_max",
            file.trace_max.as_deref(),
            default.max,
            TRACE_MAX,
        )?,
        on,
    })
}

/// A config file's capture settings over the command line's (`default`), not yet checked
/// against the interval; errors quote no value.
fn file_capture(file: &File, default: &Capture) -> Result<Capture, String> {
    let mut capture = default.clone();
    if let Some(on) = &file.capture_on {
        capture.on = on
            .iter()
            .map(|t| Trigger::parse(t))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("capture_on names no rule (rules: {})", Trigger::names()))?;
    }
    if let Some(dir) = &file.capture_dir {
        capture.dir = dir.clone();
    }
    let duration = |key, text: &Option<String>, default| match text.as_deref() {
        Some("0") => Ok(Duration::ZERO),
        text => file_duration(key, text, default, super::duration::CAPTURE),
    };
    capture.window = duration("capture_window", &file.capture_window, capture.window)?;
    capture.after = duration("capture_after", &file.capture_after, capture.after)?;
    capture.every = duration("capture_every", &file.capture_every, capture.every)?;
    if let Some(max) = file.capture_max {
        if !(1..=CAPTURE_MAX_LIMIT).contains(&max) {
            return Err(format!("capture_max is not 1 to {CAPTURE_MAX_LIMIT}"));
        }
        capture.max = max;
    }
    Ok(capture)
}

/// A TOML or type error of a config file as one line naming the line and key, never the value
/// (serde's messages quote it: ``unknown variant `…` ``, ``invalid type: string "…"``): the
/// message keeps only what was expected.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let at = e.span().and_then(|span| {
        let before = text.get(..span.start)?;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line_text = text[line_start..].lines().next().unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let key = line_text
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        Some(match key {
            Some(key) => format!("line {line}, key {key}: "),
            None => format!("line {line}: "),
        })
    });
    let message = e.message().lines().next().unwrap_or("").trim();
    // serde's messages about a value describe it before ", expected …"; the parser's own
    // (`key with no value, expected `=``) and `unknown field `x`` quote no value.
    const ABOUT_A_VALUE: [&str; 4] = [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ];
    let said = match message.split_once(", expected ") {
        Some((about, expected)) if ABOUT_A_VALUE.iter().any(|p| about.starts_with(p)) => {
            format!("a value it does not take: expected {expected}")
        }
        _ if ABOUT_A_VALUE.iter().any(|p| message.starts_with(p)) => {
            "a value it does not take".to_string()
        }
        _ => message.to_string(),
    };
    format!("{}{said}", at.unwrap_or_default())
}
