//! `daemon --otlp-endpoint` for real: receivers made of the official Python packages
//! (`otlp/receiver.py`: grpcio serving opentelemetry-proto's ProfilesService, or an HTTP server
//! for http/protobuf) take every interval's profiles, also after refusing every request for a
//! while, and what they took adds up to `/report.json`'s waits exactly. A receiver that never
//! answers holds up neither an interval, `/healthz` nor shutdown.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::daemon::{Daemon, fdprof_as, poll};
use crate::common::prometheus::free_loopback_addr;
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(90);

/// `otlp/receiver.py`, serving on loopback until dropped.
struct Receiver {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Receiver {
    /// A receiver for `protocol` (`grpc` or `http`) that refuses every request as `refusing`
    /// says: `--refuse-for SECONDS` (its first seconds) or `--refuse-first N` (its first N).
    fn start(protocol: &str, refusing: &[&str]) -> Receiver {
        let dir = tmp(&format!("otlp-receiver-{protocol}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port_file = dir.join("port");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/otlp/receiver.py");
        let child = Command::new(crate::common::otlp::python())
            .arg(script)
            .args(["--protocol", protocol])
            .args(refusing)
            .arg("--dir")
            .arg(&dir)
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let port = poll(Duration::from_secs(30), || {
            std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
                .ok_or(())
        })
        .expect("the receiver never said its port");
        Receiver { child, port, dir }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests taken so far.
    fn requests(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "pb"))
            .collect();
        found.sort();
        found
    }

    /// What `decode.py` makes of every request taken.
    fn decoded(&self) -> Value {
        let requests = self.requests();
        let paths: Vec<&std::path::Path> = requests.iter().map(PathBuf::as_path).collect();
        crate::common::otlp::decode(&paths)
    }

    fn refused(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("refused")).map_or(0, |n| n.trim().parse().unwrap())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The report's waits and wait time (every lock), as the receiver's two profiles count them.
fn report_totals(daemon: &Daemon, comm: &str) -> (Value, Value) {
    let (code, body) = daemon.get(&format!("/report.json?target={comm}"));
    assert_eq!(code, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    let c = &report["contention"];
    (c["count"].clone(), c["total_wait_ns"].clone())
}

/// Runs two threads contending on their table as `comm` for 3 s, under `daemon`; its pid.
fn contend(daemon: &Daemon, comm: &str) -> u32 {
    let w = start_workload_with(
        fdprof_as(comm),
        &["opensock", "-t", "2", "-n", "2000", "-d", "3s"],
    );
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    w.go();
    let pid = w.pid;
    w.finish();
    pid
}

/// Waits until the receiver's totals equal the report's (the workload has ended: both stop
/// moving) and no request is queued; checks the counts `/metrics` gives of the push against
/// what the receiver took.
fn every_wait_reaches(receiver: &Receiver, daemon: &Daemon, comm: &str, pid: u32) {
    let got = poll(TIMEOUT, || {
        let want = report_totals(daemon, comm);
        let got = receiver.decoded();
        let totals = (
            got["totals"]["contentions/count"].clone(),
            got["totals"]["delay/nanoseconds"].clone(),
        );
        let queued = daemon.metric("fdprof_otlp_queued_requests");
        (totals == want && queued == Some(0.0) && want.0.as_u64() > Some(0))
            .then_some(got.clone())
            .ok_or_else(|| {
                format!("the receiver has {totals:?}, the report {want:?}, {queued:?} queued")
            })
    })
    .unwrap_or_else(|last| panic!("{last}\n{}", daemon.log()));
    eprintln!(
        "{comm}: the receiver took {} requests, {} waits, {} ns (the report's); {} failed attempts",
        receiver.requests().len(),
        got["totals"]["contentions/count"],
        got["totals"]["delay/nanoseconds"],
        daemon
            .metric("fdprof_otlp_request_failures_total")
            .unwrap_or(0.0)
    );
    let pids: Vec<&String> = got["by_pid"].as_object().unwrap().keys().collect();
    assert_eq!(pids, [&pid.to_string()], "{got}");
    assert_eq!(got["names"][pid.to_string()], comm);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(got["resource"]["host.name"], host.trim());
    assert_eq!(got["zero_first"], true);
    let taken = receiver.requests().len() as f64;
    assert_eq!(daemon.metric("fdprof_otlp_requests_total"), Some(taken));
    assert_eq!(
        daemon.metric("fdprof_otlp_requests_dropped_total"),
        Some(0.0)
    );
    assert!(daemon.metric("fdprof_otlp_sent_bytes_total").unwrap() > 0.0);
}

#[test]
fn a_grpc_receiver_that_refuses_its_first_12_s_gets_every_wait_of_the_report() {
    require_root();
    let _guard = kernel_lock();
    let receiver = Receiver::start("grpc", &["--refuse-for", "12"]);
    let started = Instant::now();
    let comm = "fdpd-otlp-grpc";
    let daemon = Daemon::start(&[
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--otlp-endpoint",
        &receiver.endpoint(),
    ]);
    let pid = contend(&daemon, comm);
    every_wait_reaches(&receiver, &daemon, comm, pid);
    assert!(started.elapsed() >= Duration::from_secs(12));
    assert!(receiver.refused() > 0, "it never refused");
    let failures = daemon.metric("fdprof_otlp_request_failures_total").unwrap();
    assert_eq!(
        failures,
        receiver.refused() as f64,
        "each refusal is one failure"
    );
    daemon.wait_line(
        "WARN",
        "did not take a request (gRPC status 14: starting up)",
    );
    daemon.wait_line("INFO", "the receiver takes requests again");
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn http_protobuf_from_the_sdks_variables_waits_as_the_receiver_asks() {
    require_root();
    let _guard = kernel_lock();
    let receiver = Receiver::start("http", &["--refuse-first", "2"]);
    let comm = "fdpd-otlp-http";
    let addr = free_loopback_addr();
    let token = crate::common::daemon::token_file().to_str().unwrap();
    let mut daemon = Daemon::spawn_env(
        &addr.to_string(),
        addr,
        &["--comm", comm, "--interval", "250ms", "--token-file", token],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-scope-orgid=fdprof%20test"),
        ],
    );
    daemon.wait_healthy();
    daemon.wait_line("INFO", "(http/protobuf)");
    let pid = contend(&daemon, comm);
    every_wait_reaches(&receiver, &daemon, comm, pid);
    assert!(receiver.refused() > 0, "it never refused");
    daemon.wait_line("WARN", "HTTP 503 Service Unavailable");
    drop(daemon);
    assert_no_programs_left();
}

/// A listener that accepts and never answers: intervals go on, `/healthz` answers, failures
/// are counted, and SIGTERM ends the daemon within the push's short flush.
#[test]
fn a_receiver_that_never_answers_holds_up_nothing() {
    require_root();
    let _guard = kernel_lock();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let comm = "fdpd-otlp-hang";
    let mut daemon = Daemon::start(&[
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--otlp-endpoint",
        &endpoint,
        "--otlp-timeout",
        "1s",
        "--otlp-queue",
        "4",
    ]);
    let pid = contend(&daemon, comm);
    assert!(pid > 0);
    // Every request timed out or waits: the daemon's own figures still move.
    poll(TIMEOUT, || {
        let failed = daemon
            .metric("fdprof_otlp_request_failures_total")
            .unwrap_or(0.0);
        (failed >= 2.0).then_some(()).ok_or(failed)
    })
    .expect("no failure counted");
    let (code, _) = daemon.get_anonymous("/healthz");
    assert_eq!(code, 200);
    let (count, _) = report_totals(&daemon, comm);
    assert!(count.as_u64().unwrap() > 0);
    let queued = daemon.metric("fdprof_otlp_queued_requests").unwrap();
    assert!(queued <= 4.0, "{queued} queued past --otlp-queue 4");
    let asked = Instant::now();
    let status = daemon.stop();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "shutdown waited {:?} on a silent receiver",
        asked.elapsed()
    );
    daemon.wait_line("WARN", "requests not sent at shutdown");
    drop(silent);
    assert_no_programs_left();
}

/// Arguments, environment, and what the one line says.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_push_settings_are_one_line_before_anything_is_loaded() {
    require_root();
    let cases: [Case; 4] = [
        (
            &["--otlp-endpoint", "ftp://h:1"],
            &[],
            "--otlp-endpoint: only http:// and https://",
        ),
        (
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ],
            "OTEL_EXPORTER_OTLP_PROTOCOL: http/json is not supported",
        ),
        (
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:1",
                "--otlp-header",
                "authorization",
            ],
            &[],
            "--otlp-header: a header is KEY=VALUE",
        ),
        (
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:1",
                "--otlp-client-cert",
                "/etc/hostname",
            ],
            &[],
            "a client certificate needs its key",
        ),
    ];
    for (args, env, says) in cases {
        let out = crate::common::fdprof()
            .args(["daemon", "--comm", "fdpd-none", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
