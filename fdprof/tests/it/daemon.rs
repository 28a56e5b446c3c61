//! `fdprof daemon` for real: it profiles workloads named by their comm (copies of the fdprof
//! binary under a name of each test's own), a real Prometheus scrapes it, and its endpoints,
//! log, signals and bad input are checked against what the workloads know they did.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, bpf_programs_held, fdprof_as, poll};
use crate::common::prometheus::{
    Prometheus, dashboard_expressions, free_loopback_addr, sample_values,
};
use crate::common::*;
use fdprof_figures::{Interval, LatencyLevel, Report};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A workload run as `comm`, waiting for `go()`.
fn workload_as(comm: &str, args: &[&str]) -> Waiting {
    start_workload_with(fdprof_as(comm), args)
}

#[test]
fn counts_reach_prometheus_exactly_and_stay_after_the_process_exits() {
    require_root();
    let _guard = kernel_lock();
    let (comm, ops) = ("fdpd-exact", 20_000u64);
    // The workload is ready (its setup done) before the daemon can see it: only the measured
    // phase is counted.
    let w = workload_as(
        comm,
        &["socket-close", "-t", "1", "--ops", &ops.to_string()],
    );
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "1s"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    let prometheus = Prometheus::start(&[daemon.addr]);
    let pid = w.pid;
    w.go();
    let expected = w.finish()["expected"].clone();
    let exited = Instant::now();
    assert_eq!(expected["fds_created"]["socket"], ops);
    assert_eq!(expected["fds_closed"]["close"], ops);
    let allocs = format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}");
    let closes = format!("fdprof_fd_closes_total{{target=\"{comm}\",syscall=\"close\"}}");
    for (series, want) in [
        (&allocs, &expected["fds_created"]["socket"]),
        (&closes, &expected["fds_closed"]["close"]),
    ] {
        let want = want.as_f64().unwrap();
        prometheus.wait_for(series, TIMEOUT, |r| sample_values(r) == [want]);
    }
    daemon.wait_line(
        "INFO",
        &format!("stopped profiling pid {pid} ({comm}): it exited"),
    );
    // Still exported, unchanged, by scrapes taken well after the exit (polled: one scrape
    // that times out on a loaded host marks a series stale until the next).
    std::thread::sleep(Duration::from_secs(4));
    for series in [&allocs, &closes] {
        let fresh = format!("time() - timestamp({series})");
        prometheus.wait_for(&fresh, TIMEOUT, |r| {
            let age = sample_values(r);
            age.len() == 1 && age[0] < exited.elapsed().as_secs_f64() - 2.0
        });
        assert_eq!(sample_values(&prometheus.query(series)), [ops as f64]);
    }
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-dash";
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "1s"]);
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "60s"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    let prometheus = Prometheus::start(&[daemon.addr]);
    w.go();
    let mut empty = Vec::new();
    for expr in dashboard_expressions(comm) {
        let found = poll(TIMEOUT, || {
            let r = prometheus.query(&expr);
            (!sample_values(&r).is_empty()).then_some(()).ok_or(r)
        });
        if let Err(last) = found {
            empty.push(format!("{expr} -> {last}"));
        }
    }
    w.end();
    assert!(empty.is_empty(), "no series:\n{}", empty.join("\n"));
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn the_stream_sends_intervals_even_with_no_target() {
    require_root();
    let _guard = kernel_lock();
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        "fdpd-nobody",
        "--interval",
        "100ms",
    ]);
    let events = daemon.stream(3);
    let ivs: Vec<Interval> = events
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e}")))
        .collect();
    for pair in ivs.windows(2) {
        assert_eq!(pair[1].index, pair[0].index + 1, "intervals in order");
        assert!(pair[1].start_ns > pair[0].start_ns);
    }
    assert!(ivs.iter().all(|iv| iv.report.syscalls.is_empty()));
}

#[test]
fn stream_flamegraph_and_report_show_a_contended_target() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-views";
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "250ms"]);
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "60s"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    w.go();
    let ivs: Vec<Interval> = daemon
        .stream(3)
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e}")))
        .collect();
    assert!(
        ivs.iter()
            .any(|iv| iv.report.syscalls.iter().any(|s| s.calls > 0)),
        "no calls in the streamed intervals"
    );
    // Without --latency the daemon counts the syscalls but does not time them, and says so.
    assert!(
        ivs.iter()
            .all(|iv| iv.report.syscall_latency_level == LatencyLevel::NotMeasured)
    );
    // Contention under load may take a moment to show: poll the report until it does.
    let path = format!("/report.json?seconds=30&target={comm}");
    let report = poll(TIMEOUT, || {
        let (code, body) = daemon.get(&path);
        assert_eq!(code, 200, "{path}: {body}");
        let report: Report = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        // The diagnosis comes with it: two threads replacing sockets in one table.
        let diagnosed = report.diagnosis.findings.iter().any(|f| {
            matches!(
                f.rule,
                fdprof_figures::Rule::SharedTable | fdprof_figures::Rule::LongScans
            )
        });
        (report.contention.file_lock_count > 0
            && report.contention.file_lock_wait_ns > 0
            && diagnosed)
            .then_some(())
            .ok_or(body)
    });
    if let Err(body) = report {
        panic!("no file_lock contention or no diagnosis of it in {path}: {body}");
    }
    let (code, svg) = daemon.get(&format!(
        "/flamegraph.svg?seconds=30&op=alloc&target={comm}"
    ));
    assert_eq!(code, 200, "{svg}");
    assert!(svg.contains("alloc_fd"), "{svg}");
    parse_svg(&svg);
    // Requests the daemon cannot serve say why.
    assert_eq!(daemon.get("/report.json?target=fdpd-none").0, 404);
    assert_eq!(daemon.get("/flamegraph.svg?op=write").0, 400);
    assert_eq!(daemon.get("/report.json?seconds=-1").0, 400);
    w.end();
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn comm_targets_come_and_go_and_sigterm_detaches() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-late";
    let mut daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "250ms"]);
    daemon.wait_line("INFO", &format!("no process named {comm} is running"));
    daemon.wait_metric("fdprof_targets", 0.0);
    // One program set, loaded once: the processes come and go as entries of its target set.
    let held = bpf_programs_held(daemon.pid());
    assert!(held > 0, "no program loaded\n{}", daemon.log());
    // In the set from its exec, in the kernel: every socket it makes is counted.
    let w = workload_as(comm, &["socket-close", "--ops", "1000"]);
    let pid = w.pid;
    daemon.wait_line("INFO", &format!("profiling pid {pid} ({comm})"));
    daemon.wait_metric("fdprof_targets", 1.0);
    assert_eq!(bpf_programs_held(daemon.pid()), held);
    w.go();
    let expected = w.finish()["expected"].clone();
    daemon.wait_line(
        "INFO",
        &format!("stopped profiling pid {pid} ({comm}): it exited"),
    );
    daemon.wait_metric("fdprof_targets", 0.0);
    let allocs = format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}");
    assert_eq!(
        daemon.metric(&allocs),
        expected["fds_created"]["socket"].as_f64()
    );
    // Left the set: the programs stay as they were.
    assert_eq!(bpf_programs_held(daemon.pid()), held);

    // Attached again, then SIGTERM: exit 0, nothing left.
    let w = workload_as(comm, &["socket-close", "--ops", "1000"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    let status = daemon.stop();
    assert!(status.success(), "{status}\n{}", daemon.log());
    daemon.wait_line("INFO", "unloading the programs: the daemon stops");
    assert!(
        daemon.log().trim_end().ends_with("INFO  stopped"),
        "{}",
        daemon.log()
    );
    w.end();
    assert_no_programs_left();
}

#[test]
fn sighup_keeps_the_old_config_when_broken_and_switches_when_good() {
    require_root();
    let _guard = kernel_lock();
    let (first, second) = ("fdpd-hup1", "fdpd-hup2");
    let config = tmp("hup.toml");
    let good = |comm: &str| format!("comm = [\"{comm}\"]\ninterval = \"250ms\"\n");
    std::fs::write(&config, good(first)).unwrap();
    let mut daemon = Daemon::start(&["--tier", "full", "--config", config.to_str().unwrap()]);
    let w1 = workload_as(first, &["socket-close", "-d", "60s"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({first})", w1.pid));
    w1.go();
    let allocs = format!("fdprof_fd_allocations_total{{target=\"{first}\",syscall=\"socket\"}}");

    std::fs::write(&config, "comm = [\"fdpd-hup2\"\ninterval = 5\n").unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_line("ERROR", "config not reloaded");
    // Still profiling the first: its count keeps growing over the next intervals.
    let before = daemon.metric(&allocs).unwrap_or(0.0);
    let grew = poll(TIMEOUT, || {
        let now = daemon.metric(&allocs).unwrap_or(0.0);
        (now > before).then_some(()).ok_or(now)
    });
    assert!(grew.is_ok(), "{allocs} stuck at {before}\n{}", daemon.log());
    assert_eq!(daemon.lines("ERROR", "").len(), 1, "{}", daemon.log());
    assert!(daemon.lines("INFO", "stopped profiling").is_empty());

    let w2 = workload_as(second, &["socket-close", "--ops", "10"]);
    std::fs::write(&config, good(second)).unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_line(
        "INFO",
        &format!("config reloaded: processes named {second}"),
    );
    daemon.wait_line(
        "INFO",
        &format!(
            "stopped profiling pid {} ({first}): no longer a target",
            w1.pid
        ),
    );
    daemon.wait_line("INFO", &format!("profiling pid {} ({second})", w2.pid));
    let status = daemon.stop();
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert_eq!(daemon.lines("ERROR", "").len(), 1, "{}", daemon.log());
    w1.end();
    w2.end();
    assert_no_programs_left();
}

#[test]
fn signals_sent_while_it_starts_are_handled_once_it_can() {
    require_root();
    let _guard = kernel_lock();
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn(
        &addr.to_string(),
        addr,
        &["--tier", "full", "--comm", "fdpd-early"],
    );
    // Once it holds them (bits of SIGHUP, SIGINT, SIGTERM in its blocked set), well before it
    // listens: reading kallsyms alone takes a while.
    let status = format!("/proc/{}/status", daemon.pid());
    let held = poll(TIMEOUT, || {
        let text = std::fs::read_to_string(&status).map_err(|e| e.to_string())?;
        let blocked = text
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .map(str::trim)
            .unwrap_or_default()
            .to_string();
        let mask = u64::from_str_radix(&blocked, 16).unwrap_or(0);
        (mask & 0x4003 == 0x4003)
            .then_some(())
            .ok_or(format!("SigBlk {blocked}"))
    });
    assert!(held.is_ok(), "signals not held while it starts: {held:?}");
    daemon.signal(libc::SIGHUP);
    daemon.signal(libc::SIGTERM);
    let exit = daemon.wait_exit();
    assert!(exit.success(), "{exit}\n{}", daemon.log());
    assert!(
        daemon.log().trim_end().ends_with("INFO  stopped"),
        "{}",
        daemon.log()
    );
}

/// A daemon that must exit at once: its exit code and its standard error.
fn refused(listen: &str, args: &[&str]) -> (Option<i32>, String) {
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn(listen, addr, args);
    let status = daemon.wait_exit();
    (status.code(), daemon.log())
}

#[test]
fn a_port_in_use_or_a_bad_config_is_one_line_and_nothing_loaded() {
    let _guard = kernel_lock();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let (code, stderr) = refused(&at, &["--comm", "fdpd-port"]);
    assert_ne!(code, Some(0), "{stderr}");
    let line = one_line(&stderr);
    assert!(line.contains(&at) && line.contains("in use"), "{line}");
    drop(taken);
    assert_no_programs_left();

    let config = tmp("bad.toml");
    std::fs::write(&config, "comm = \"fdpd-bad\"\nthreads = 4\n").unwrap();
    let here = free_loopback_addr().to_string();
    let (code, stderr) = refused(&here, &["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(one_line(&stderr).contains("bad config"), "{stderr}");
}

#[test]
fn a_comm_that_never_appears_is_logged_once_and_the_daemon_serves_on() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-never";
    let mut daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "100ms"]);
    daemon.stream(5);
    let waiting = daemon.lines("INFO", &format!("no process named {comm}"));
    assert_eq!(waiting.len(), 1, "{}", daemon.log());
    assert_eq!(daemon.get("/healthz"), (200, "ok\n".to_string()));
    assert_eq!(daemon.metric("fdprof_targets"), Some(0.0));
    // Loaded, waiting: a process of that name joins at its exec.
    assert!(bpf_programs_held(daemon.pid()) > 0);
    // OpenMetrics for a scraper that asks for it (as Prometheus does), else text 0.0.4.
    let openmetrics = "application/openmetrics-text; version=1.0.0";
    let (code, head, body) = daemon.get_with("/metrics", &[&format!("Accept: {openmetrics}")]);
    assert_eq!(code, 200, "{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text")
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    let (_, head, body) = daemon.get_with("/metrics", &[]);
    assert!(head.contains("version=0.0.4"), "{head}");
    assert!(!body.contains("# EOF"));
    // SIGHUP with no config file to read: said, and nothing else changes; SIGINT ends it.
    daemon.signal(libc::SIGHUP);
    daemon.wait_line("WARN", "no --config file to reload");
    assert_eq!(daemon.get("/healthz").0, 200);
    daemon.signal(libc::SIGINT);
    let status = daemon.wait_exit();
    assert!(status.success(), "{status}\n{}", daemon.log());
}

#[test]
fn processes_beyond_the_bound_are_logged_once_and_counted() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-bound";
    let (w1, w2) = (
        workload_as(comm, &["socket-close", "--ops", "10"]),
        workload_as(comm, &["socket-close", "--ops", "10"]),
    );
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "--max-processes",
        "1",
        "--interval",
        "100ms",
    ]);
    let profiled = daemon.wait_line("INFO", &format!("({comm})"));
    let refused = daemon.wait_line("WARN", "process bound");
    let (p1, p2) = (format!("pid {} ", w1.pid), format!("pid {} ", w2.pid));
    assert!(
        (profiled.contains(&p1) && refused.contains(&p2))
            || (profiled.contains(&p2) && refused.contains(&p1)),
        "{}",
        daemon.log()
    );
    let drops = "fdprof_events_dropped_total{probe=\"daemon\",reason=\"process_bound\"}";
    daemon.wait_metric(drops, 1.0);
    daemon.stream(5);
    assert_eq!(
        daemon.lines("WARN", "process bound").len(),
        1,
        "{}",
        daemon.log()
    );
    assert_eq!(
        daemon.lines("INFO", "profiling pid").len(),
        1,
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.metric(drops), Some(1.0));
    assert_eq!(daemon.metric("fdprof_targets"), Some(1.0));
    w1.end();
    w2.end();
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn listening_beyond_loopback_needs_allow_remote_and_warns() {
    require_root();
    let _guard = kernel_lock();
    let port = free_loopback_addr().port();
    let every = format!("0.0.0.0:{port}");
    let (code, stderr) = refused(&every, &["--comm", "fdpd-remote"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(one_line(&stderr).contains("--allow-remote"), "{stderr}");

    let reach = format!("127.0.0.1:{port}").parse().unwrap();
    let mut daemon = Daemon::spawn(
        &every,
        reach,
        &["--tier", "full", "--comm", "fdpd-remote", "--allow-remote"],
    );
    daemon.wait_healthy();
    daemon.wait_line("WARN", "reachable from other hosts");
    let status = daemon.stop();
    assert!(status.success(), "{status}\n{}", daemon.log());
}

/// The machine's steal so far (`/proc/stat`'s first line), seconds.
fn machine_steal_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().next().unwrap();
    let ticks: u64 = line
        .split_ascii_whitespace()
        .nth(8)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// `daemon -a` with two workloads: `/report.json` (and its windows) breaks the figures down per
/// process, and Prometheus scrapes each one's series under its pid and comm with exactly the
/// generator's counts; the machine's steal is a counter and in every report.
#[test]
fn system_wide_keeps_each_process_apart_up_to_prometheus() {
    require_root();
    let _guard = kernel_lock();
    let steal_before = machine_steal_seconds();
    let runs = [("fdpd-proc-l", 20_000u64), ("fdpd-proc-r", 30_000)];
    let workloads: Vec<Waiting> = runs
        .iter()
        .map(|(comm, ops)| {
            workload_as(
                comm,
                &["socket-close", "-t", "1", "--ops", &ops.to_string()],
            )
        })
        .collect();
    let daemon = Daemon::start(&["--tier", "full", "-a", "--interval", "1s"]);
    daemon.wait_line("INFO", "profiling every process");
    let prometheus = Prometheus::start(&[daemon.addr]);
    let pids: Vec<u32> = workloads.iter().map(|w| w.pid).collect();
    // Scraping already: an exited process's series are served for two intervals only.
    prometheus.wait_for("fdprof_build_info", TIMEOUT, |r| {
        !sample_values(r).is_empty()
    });
    for w in &workloads {
        w.go();
    }
    let expected: Vec<serde_json::Value> = workloads
        .into_iter()
        .map(|w| w.finish()["expected"].clone())
        .collect();
    for ((pid, (comm, ops)), expected) in pids.iter().zip(runs).zip(&expected) {
        assert_eq!(expected["fds_closed"]["close"], ops);
        let fd_syscalls: u64 = expected["syscalls"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        let allocations: u64 = expected["allocs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["count"].as_u64().unwrap())
            .sum();
        let labels = format!("{{pid=\"{pid}\",comm=\"{comm}\"}}");
        for (family, want) in [
            ("fdprof_process_fd_syscalls_total", fd_syscalls),
            ("fdprof_process_fd_allocations_total", allocations),
            ("fdprof_process_fd_closes_total", ops),
        ] {
            // An exited process's series go a few intervals after its exit (the running total
            // keeps only the processes alive and the last ones'): its last value, scraped
            // before, is the counter's largest.
            let series = format!("max_over_time({family}{labels}[5m])");
            prometheus.wait_for(&series, TIMEOUT, |r| sample_values(r) == [want as f64]);
        }
        // The JSON report, whole and windowed, has the process once with its syscalls.
        for path in ["/report.json", "/report.json?seconds=300"] {
            let (code, body) = daemon.get(path);
            assert_eq!(code, 200, "{path}: {body}");
            let report: Report = serde_json::from_str(&body).unwrap();
            let rows: Vec<_> = report.processes.iter().filter(|p| p.pid == *pid).collect();
            assert_eq!(rows.len(), 1, "{path}: pid {pid} once");
            assert_eq!(rows[0].comm, comm);
            let calls = |name: &str| {
                rows[0]
                    .syscalls
                    .iter()
                    .find(|s| s.name == name)
                    .map_or(0, |s| s.calls)
            };
            assert_eq!(calls("socket"), ops, "{path}: pid {pid} sockets");
            assert_eq!(calls("close"), ops, "{path}: pid {pid} closes");
            assert_eq!(rows[0].fd_syscalls, fd_syscalls, "{path}: pid {pid}");
            assert!(report.steal.is_some(), "{path}: no steal");
        }
    }
    // The per-process series are bounded: at most the stated number of pids, 20 (docs/daemon.md;
    // the library's metrics tests hold its bound to it).
    let pids_exposed =
        prometheus.wait_for("count(fdprof_process_fd_syscalls_total)", TIMEOUT, |r| {
            sample_values(r).len() == 1
        });
    let exposed = sample_values(&pids_exposed);
    assert!(exposed.len() == 1 && exposed[0] <= 20.0, "{pids_exposed}");
    let help = run(fdprof().args(["daemon", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout);
    let stated = "first 20 processes";
    assert!(help.contains(stated), "--help does not state {stated:?}");
    // Steal: in each streamed interval, and one counter, within what /proc/stat counted
    // around the daemon's life.
    for event in daemon.stream(2) {
        let iv: Interval = serde_json::from_str(&event).unwrap();
        let steal = iv.report.steal.expect("steal in a streamed interval");
        assert!(
            steal.total_ns > 0 && steal.steal_ns <= steal.total_ns,
            "{steal:?}"
        );
    }
    let steal = prometheus.wait_for("fdprof_steal_seconds_total", TIMEOUT, |r| {
        sample_values(r).len() == 1
    });
    let stolen = sample_values(&steal)[0];
    assert!(
        // A microsecond of slack: the counter is a float sum of per-interval steals.
        (0.0..=machine_steal_seconds() - steal_before + 1e-6).contains(&stolen),
        "{steal}"
    );
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn the_daemon_takes_record_and_tops_probe_flags() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-lockonly";
    let daemon = Daemon::start(&[
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--mode",
        "tracepoint",
        "--lock-only",
    ]);
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "2s"]);
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    w.go();
    w.finish();
    let report: Report = poll(TIMEOUT, || {
        let (code, body) = daemon.get(&format!("/report.json?target={comm}"));
        let r: Report = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
        (r.contention.file_lock_count > 0)
            .then_some(r)
            .ok_or_else(|| "no waits yet".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()));
    // Lock contention only: no fd syscall was probed, in the mode asked for.
    assert!(!report.fd_activity_recorded);
    assert!(report.syscalls.is_empty());
    assert_eq!(report.header.mode.to_string(), "tracepoint");
    drop(daemon);
    assert_no_programs_left();
}
