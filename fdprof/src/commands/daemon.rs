//! `fdprof daemon`: the always-on service (`fdprof_daemon`), its command line; the config file
//! and its checks are the daemon's (`fdprof_daemon::config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::args::{DebugArgs, ProbeArgs};
use fdprof_daemon::config::durations::{
    parse_capture, parse_otlp_timeout, parse_trace_max, parse_trace_on,
};
use fdprof_daemon::config::{
    self as cfg, Capture, Config, Defaults, Reload, Tier, TraceOn, Tracing, Trigger, bounds,
};
use fdprof_daemon::otlp::settings as otlp;
use fdprof_daemon::{log, server};
use fdprof_profiler::duration::{parse_interval, parse_slow};
use fdprof_profiler::error::{EXIT_USAGE, fatal};
use fdprof_profiler::privileges::{self, Capability};

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
    /// The token requests must carry (e.g. `openssl rand -hex 32`): a file owned by root or by
    /// the daemon's uid, writable by its owner alone, readable by no one else but the daemon's
    /// group (0600, 0400, or 0440 of the daemon's group); without it, one is made at each start
    /// into /run/fdprof/daemon-ADDRESS-PORT.token
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Also answer requests whose Host header names this (a DNS name the daemon is reached by);
    /// others get 421
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert: owned and readable as the --token-file is
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Prometheus exporter-toolkit's web configuration (YAML): tls_server_config (client
    /// certificates verified against client_ca_file, client_allowed_sans, min_version,
    /// cipher_suites), basic_auth_users (bcrypt) and http_server_config.headers. Read again
    /// whenever it or a file it names changes; a bad new one keeps the old. A verified client
    /// certificate, or a basic_auth user, is a credential as the token is
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub web_config_file: Option<PathBuf>,
    /// Serve /healthz alone, over plain HTTP and with no credential, on this address too (for
    /// probes that present no client certificate)
    #[arg(long, value_name = "ADDRESS")]
    pub health_listen: Option<SocketAddr>,
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
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Waits at least this long count as slow waits (1 µs to 10 s)
    #[arg(long, default_value = "100us", value_parser = parse_slow)]
    pub slow: Duration,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub debug: DebugArgs,
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
          value_parser = parse_interval)]
    pub trace_window: Duration,
    /// Full tracing at most this long in any hour, all windows together (1 s to 1 h): bounds
    /// what the fd syscall programs cost the host however often windows are asked for
    #[arg(long, value_name = "DURATION", default_value = Tracing::MAX,
          value_parser = parse_trace_max)]
    pub trace_max: Duration,
    /// Open a window of full tracing when a target's file_lock wait in an interval reaches
    /// this much per second (1 µs to 1 s; `off`: never)
    #[arg(long, value_name = "WAIT|off", default_value = Tracing::ON,
          value_parser = parse_trace_on)]
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
          value_parser = parse_capture)]
    pub capture_window: Duration,
    /// How long to wait after the interval that fired, and keep, before writing the capture
    #[arg(long, value_name = "DURATION", default_value = Capture::AFTER,
          value_parser = parse_capture)]
    pub capture_after: Duration,
    /// At most one capture per target and rule this often
    #[arg(long, value_name = "DURATION", default_value = Capture::EVERY,
          value_parser = parse_capture)]
    pub capture_every: Duration,
    /// Captures kept in --capture-dir (1 to 10000): past it, the oldest is removed
    #[arg(long, default_value_t = Capture::MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=Capture::MAX_LIMIT as u64))]
    pub capture_max: usize,
    /// Log every attach, detach and reload in detail
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub otlp: OtlpArgs,
}

/// Pushing each interval's profiles to an OTLP receiver. Each option unset is read from its
/// OpenTelemetry SDK variable, OTEL_EXPORTER_OTLP_PROFILES_* then OTEL_EXPORTER_OTLP_*
/// (ENDPOINT, PROTOCOL, HEADERS, TIMEOUT in ms, CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY).
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "OTLP push")]
pub(crate) struct OtlpArgs {
    /// Push each interval's profiles to this receiver: http://HOST:PORT or https://HOST:PORT
    /// (an OTel Collector's otlp receiver, Pyroscope's OTLP ingest)
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// How: gRPC (port 4317 by convention) or protobuf over HTTP (4318) [default: grpc]
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    pub otlp_protocol: Option<otlp::Protocol>,
    /// A header each request carries (e.g. a tenant or an Authorization), repeatable
    #[arg(long, value_name = "KEY=VALUE")]
    pub otlp_header: Vec<String>,
    /// How long a request may take, connect and answer included [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_otlp_timeout)]
    pub otlp_timeout: Option<Duration>,
    /// Requests kept while the receiver is away or refuses (each retried with backoff); past
    /// it the oldest is dropped, counted in fdprof_otlp_requests_dropped_total
    #[arg(long, value_name = "N", default_value_t = otlp::QUEUE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub otlp_queue: usize,
    /// The CA certificates an https receiver's certificate is checked against [default: the
    /// system's]
    #[arg(long, value_name = "FILE")]
    pub otlp_ca_file: Option<PathBuf>,
    /// A client certificate to present to the receiver (with --otlp-client-key)
    #[arg(long, value_name = "FILE")]
    pub otlp_client_cert: Option<PathBuf>,
    /// The client certificate's key: root's (or the daemon's user's) alone
    #[arg(long, value_name = "FILE")]
    pub otlp_client_key: Option<PathBuf>,
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
        cpu_hz: args.probe.cpu_hz(),
        call_graph: args.probe.call_graph.walk(),
        children: args.children,
        capture: Capture {
            on: args.capture_on,
            dir: args.capture_dir.unwrap_or_default(),
            window: args.capture_window,
            after: args.capture_after,
            every: args.capture_every,
            max: args.capture_max,
        },
        // A daemon never waits: a file's frames are named once it arrives.
        debug: args.debug.options(std::time::Duration::ZERO),
    };
    // With a config file its keys override the flags, at start and at each SIGHUP.
    let (watch, reload) = match args.config {
        Some(path) => {
            let reload = Reload::new(path, defaults);
            (reload.read()?, Some(reload))
        }
        None => (
            defaults.watch(&args.pid, &args.comm, &args.cgroup, args.all)?,
            None,
        ),
    };
    let push = otlp::PushArgs {
        endpoint: args.otlp.otlp_endpoint,
        protocol: args.otlp.otlp_protocol,
        headers: args.otlp.otlp_header,
        timeout: args.otlp.otlp_timeout,
        queue: Some(args.otlp.otlp_queue),
        ca_file: args.otlp.otlp_ca_file,
        client_cert: args.otlp.otlp_client_cert,
        client_key: args.otlp.otlp_client_key,
    };
    let otlp =
        otlp::resolve(&push, &|name| std::env::var(name).ok()).map_err(|e| fatal(EXIT_USAGE, e))?;
    may_load()?;
    log::set_verbose(args.verbose);
    let (kernel, kernel_syms) = fdprof_profiler::live::read_kernel()?;
    let config = Config {
        listen: args.listen,
        watch,
        verbose: args.verbose,
        max_processes: args.max_processes,
        http: cfg::Http {
            token_file: args.token_file,
            allow_hosts: args.allow_host,
            tls: args.tls_cert.zip(args.tls_key),
            web_config: args.web_config_file,
            health_listen: args.health_listen,
            max_connections: args.max_connections,
        },
        otlp,
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
