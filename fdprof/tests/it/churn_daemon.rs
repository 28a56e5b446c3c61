//! `fdprof daemon` through process churn and long-lived clients, for real: thousands of short
//! processes started by an unprivileged user (`fdprof workload churn --uid 65534`) under
//! `--comm` and under `-a`, then a new workload counted exactly; and hundreds of clients that
//! open the SSE stream or a pprof delta and never read. The daemon must stay within its memory,
//! answer `/healthz` throughout and its endpoints within a second (a debug build; the release
//! figures are `cargo xtask bench churn`'s).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, authorization, fdprof_as};
use crate::common::prometheus::http_get_with;
use crate::common::*;
use fdprof_figures::Report;
use serde_json::Value;

/// Short processes of the churn under `--comm` (the bench starts 50,000 on a release build).
const CHURN: u64 = 5000;
/// Under `-a`: fewer, so that the kernel's per-process maps (4096 names) have room for the
/// new workload while their rows of exited processes are not freed yet.
const CHURN_ALL: u64 = 3000;
/// Sockets each churned process opens and closes.
const SOCKETS: u64 = 2;
/// What a debug build may take to answer, at most.
const SECOND: Duration = Duration::from_secs(1);
/// Memory the daemon may keep after the churn, at most.
const RSS_GROWTH_KB: u64 = 20 * 1024;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// GET `path` (with the token): its status, body and time; an error after 30 s.
fn timed_get(addr: SocketAddr, path: &str) -> (u16, String, Duration) {
    let began = Instant::now();
    let (code, _, body) = http_get_with(addr, path, &[&authorization()])
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (code, body, began.elapsed())
}

/// Polls `/healthz` every 100 ms until dropped: the longest answer (or failure: 30 s).
struct HealthWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Duration>>,
}

impl HealthWatch {
    fn start(addr: SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stopped.load(Ordering::Relaxed) {
                let began = Instant::now();
                let ok = http_get_with(addr, "/healthz", &[]).is_ok_and(|(code, _, _)| code == 200);
                let took = if ok {
                    began.elapsed()
                } else {
                    Duration::from_secs(30)
                };
                longest = longest.max(took);
                std::thread::sleep(Duration::from_millis(100));
            }
            longest
        });
        HealthWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops polling: the longest answer.
    fn longest(mut self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// `fdprof workload churn` as `comm`, run by uid 65534: `n` processes of [`SOCKETS`] sockets.
/// Its `expected`.
fn churn(comm: &str, n: u64) -> Value {
    let out = run(fdprof_as(comm).args([
        "workload",
        "churn",
        "--spawn",
        &n.to_string(),
        "--ops",
        &SOCKETS.to_string(),
        "--uid",
        "65534",
        "--json",
    ]));
    assert!(
        out.status.success(),
        "churn failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed"], 0, "{report}");
    report["expected"].clone()
}

/// The endpoints after the churn: each within a second, the per-process figures bounded.
fn check_endpoints(daemon: &Daemon, target: &str) -> Report {
    let (code, metrics, took) = timed_get(daemon.addr, "/metrics");
    assert_eq!(code, 200, "{metrics}");
    assert!(took < SECOND, "/metrics took {took:?}\n{}", daemon.log());
    let held = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("fdprof_processes{{target=\"{target}\"}} ")))
        .map_or(0.0, |v| v.trim().parse::<f64>().unwrap());
    // The processes alive and those that exited within the last interval, not every one seen.
    assert!(held < 200.0, "fdprof_processes {held}");
    let metrics_took = took;
    let (code, body, took) = timed_get(daemon.addr, "/report.json");
    assert_eq!(code, 200, "{body}");
    eprintln!("fdprof_processes {held}, /metrics {metrics_took:?}, /report.json {took:?}");
    assert!(
        took < SECOND,
        "/report.json took {took:?}\n{}",
        daemon.log()
    );
    serde_json::from_str(&body).unwrap()
}

/// A workload of `ops` socket/close pairs as `comm`, started now: counted exactly in its own
/// row of `/report.json` (and, under `--comm`, in the target's counter).
fn new_workload_counted_exactly(daemon: &Daemon, comm: &str, counter: Option<&str>) {
    let ops = 3000u64;
    let before = counter.map(|c| daemon.metric(c).unwrap_or(0.0));
    let w = start_workload_with(
        fdprof_as(comm),
        &["socket-close", "-t", "1", "--ops", &ops.to_string()],
    );
    if counter.is_some() {
        daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    } else {
        // Under -a every process is followed from its start: one interval so that the
        // workload's ready line is behind the daemon.
        daemon.stream(1);
    }
    let pid = w.pid;
    w.go();
    let expected = w.finish()["expected"].clone();
    assert_eq!(expected["fds_created"]["socket"], ops);
    if let (Some(counter), Some(before)) = (counter, before) {
        daemon.wait_metric(counter, before + ops as f64);
    }
    let row = crate::common::daemon::poll(Duration::from_secs(30), || {
        let (code, body) = daemon.get("/report.json?seconds=10");
        assert_eq!(code, 200, "{body}");
        let report: Value = serde_json::from_str(&body).unwrap();
        let sockets = sockets_by_pid(&report);
        match sockets.get(&pid) {
            Some(&n) if n == ops => Ok(()),
            other => Err(other.copied()),
        }
    });
    assert!(
        row.is_ok(),
        "pid {pid} in processes[] with {ops} sockets: {row:?}\n{}",
        daemon.log()
    );
}

/// The churn under `args` (`--comm COMM` or `-a`): bounded memory, `/healthz` always, the
/// endpoints within a second, then a new workload counted exactly.
fn churn_under(args: &[&str], comm: &str, n: u64, target: &str) -> (Daemon, Report) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--interval", "1s", "--tier", "full"]);
    let daemon = Daemon::start(&all);
    daemon.stream(1);
    // Warm: the first scrape and report allocate what every later one reuses.
    check_endpoints(&daemon, target);
    let rss_before = rss_kb(daemon.pid());
    let health = HealthWatch::start(daemon.addr);
    let began = Instant::now();
    let expected = churn(comm, n);
    eprintln!("{n} processes in {:?}", began.elapsed());
    // Every exit read (a sweep takes an ended process's rows out a second or two after its
    // exit, the interval after reads them), and the two intervals after it that let them go.
    daemon.stream(6);
    let longest = health.longest();
    assert!(
        longest < SECOND,
        "/healthz took {longest:?} during the churn"
    );
    let report = check_endpoints(&daemon, target);
    let rss_after = rss_kb(daemon.pid());
    eprintln!("/healthz at most {longest:?}; VmRSS {rss_before} kB, then {rss_after} kB");
    assert!(
        rss_after <= rss_before + RSS_GROWTH_KB,
        "VmRSS {rss_before} kB before {n} processes, {rss_after} kB after"
    );
    assert_eq!(expected["processes"], n);
    (daemon, report)
}

#[test]
fn short_processes_under_comm_leave_the_daemon_bounded_and_counted() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-churn";
    let (mut daemon, report) = churn_under(&["--comm", comm], comm, CHURN, comm);
    // Every socket of every process stays in the target's figures, in rows and `others`.
    let calls = |rows: &[fdprof_figures::Syscall], name: &str| {
        rows.iter().find(|s| s.name == name).map_or(0, |s| s.calls)
    };
    let fds = CHURN * SOCKETS;
    assert_eq!(calls(&report.syscalls, "socket"), fds);
    let in_rows: u64 = report
        .processes
        .iter()
        .map(|p| calls(&p.syscalls, "socket"))
        .sum();
    let others = report
        .processes_others
        .as_ref()
        .expect("an others row after the churn");
    assert_eq!(in_rows + calls(&others.syscalls, "socket"), fds);
    assert!(others.processes > 0);
    let counter = format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}");
    assert_eq!(daemon.metric(&counter), Some(fds as f64));
    new_workload_counted_exactly(&daemon, comm, Some(&counter));
    let stopping = Instant::now();
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "SIGTERM took {:?}",
        stopping.elapsed()
    );
    assert_no_programs_left();
}

#[test]
fn short_processes_system_wide_leave_the_daemon_bounded_and_counted() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-churn-a";
    let (mut daemon, _) = churn_under(&["-a"], comm, CHURN_ALL, "all");
    new_workload_counted_exactly(&daemon, "fdpd-churn-n", None);
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_no_programs_left();
}

/// Clients that ask for a long-lived answer (the SSE stream, a pprof delta of an hour) and
/// never read it, held open until dropped.
fn never_reading(addr: SocketAddr, paths: &[&str]) -> Vec<TcpStream> {
    paths
        .iter()
        .map(|path| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{}\r\n\r\n",
                authorization()
            )
            .unwrap();
            s
        })
        .collect()
}

#[test]
fn never_reading_stream_clients_leave_room_for_health_and_scrapes() {
    require_root();
    let _guard = kernel_lock();
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        "fdpd-longlived",
        "--interval",
        "1s",
    ]);
    daemon.stream(1);
    let mut paths = vec!["/api/v1/stream"; 280];
    paths.extend(["/debug/pprof/mutex?seconds=3600"; 20]);
    let held = never_reading(daemon.addr, &paths);
    // Let them all be admitted and started; then a few intervals stream into them.
    std::thread::sleep(Duration::from_secs(3));
    for path in ["/healthz", "/metrics", "/report.json"] {
        let (code, body, took) = timed_get(daemon.addr, path);
        assert_eq!(code, 200, "{path}: {body}\n{}", daemon.log());
        assert!(took < SECOND, "{path} took {took:?}");
    }
    // Those past their bound were answered at once, and counted.
    let refused = daemon
        .metric("fdprof_http_requests_refused_total{reason=\"long_lived\"}")
        .unwrap_or(0.0);
    assert!(refused > 0.0, "no long-lived request refused");
    let (code, body, _) = timed_get(daemon.addr, "/api/v1/stream");
    assert_eq!(code, 503, "{body}");
    assert_eq!(one_line(&body), body.trim_end());
    drop(held);
    let mut daemon = daemon;
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_no_programs_left();
}
