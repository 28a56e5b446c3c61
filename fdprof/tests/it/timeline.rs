//! The daemon's kept intervals in time (`/api/v1/timeline`) and ranges of them (`from` and `to`
//! in Unix ms on `/report.json`, `/flamegraph.svg` and the pprof endpoints), against a load
//! that runs, pauses and runs again: the timeline shows two bursts and a gap, a range over the
//! gap has no waits and no fd syscalls, one over a burst has that burst's sockets exactly.

use std::time::Duration;

use serde_json::Value;

use crate::common::daemon::{Daemon, fdprof_as, poll};
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(60);
const COMM: &str = "fdpd-timeline";

fn workload_as(comm: &str, args: &[&str]) -> Waiting {
    start_workload_with(fdprof_as(comm), args)
}

/// `path`'s JSON, once it answers 200.
fn json(daemon: &Daemon, path: &str) -> Value {
    let (code, body) = daemon.get(path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The socket calls of a report.
fn sockets(report: &Value) -> u64 {
    report["syscalls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == "socket")
        .map(|s| s["calls"].as_u64().unwrap())
        .sum()
}

/// The runs of consecutive points with fd syscalls: each one's `[from, to)` in Unix ms.
pub(crate) fn bursts(points: &[Value]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut open = false;
    for p in points {
        let start = p["start_unix_ms"].as_u64().unwrap();
        let end = start + p["duration_ms"].as_u64().unwrap();
        match (p["fd_syscalls"].as_u64().unwrap() > 0, open) {
            (true, true) => runs.last_mut().unwrap().1 = end,
            (true, false) => runs.push((start, end)),
            _ => {}
        }
        open = p["fd_syscalls"].as_u64().unwrap() > 0;
    }
    runs
}

#[test]
fn a_range_of_the_timeline_has_exactly_its_bursts_figures() {
    require_root();
    let _guard = kernel_lock();
    // Both ready (their setup done) before the daemon sees them: only the bursts count.
    let (ops_a, ops_b) = (3_000u64, 2_000u64);
    let a = workload_as(COMM, &["socket-close", "--ops", &ops_a.to_string()]);
    let b = workload_as(COMM, &["socket-close", "--ops", &ops_b.to_string()]);
    let daemon = Daemon::start(&["--tier", "full", "--comm", COMM, "--interval", "1s"]);
    daemon.wait_line("INFO", "profiling");
    a.go();
    assert_eq!(a.finish()["expected"]["syscalls"]["socket"], ops_a);
    // The pause: three intervals at least with nothing.
    std::thread::sleep(Duration::from_millis(3_500));
    b.go();
    assert_eq!(b.finish()["expected"]["syscalls"]["socket"], ops_b);

    // Two bursts with a gap, once the interval after the second has ended.
    let runs = poll(TIMEOUT, || {
        let t = json(&daemon, "/api/v1/timeline");
        let points = t["points"].as_array().unwrap().clone();
        let runs = bursts(&points);
        let after = points
            .last()
            .is_some_and(|p| p["fd_syscalls"] == 0 && runs.len() == 2);
        after.then_some(runs).ok_or(t)
    })
    .unwrap_or_else(|t| panic!("no two bursts and a gap in the timeline: {t}"));
    let (burst_a, burst_b) = (runs[0], runs[1]);
    assert!(burst_a.1 < burst_b.0, "{runs:?}");
    let t = json(&daemon, "/api/v1/timeline");
    for p in t["points"].as_array().unwrap() {
        // Full tracing throughout: every interval traced in full, its rate over all of it.
        assert_eq!(
            p["traced_in_full_ns"].as_u64().unwrap() / 1_000_000,
            p["duration_ms"].as_u64().unwrap(),
            "{p}"
        );
    }

    let range = |(from, to): (u64, u64)| format!("/report.json?from={from}&to={to}");
    assert_eq!(sockets(&json(&daemon, &range(burst_a))), ops_a);
    assert_eq!(sockets(&json(&daemon, &range(burst_b))), ops_b);
    assert_eq!(
        sockets(&json(&daemon, &range((burst_a.0, burst_b.1)))),
        ops_a + ops_b
    );
    let gap = json(&daemon, &range((burst_a.1, burst_b.0)));
    assert_eq!(sockets(&gap), 0, "{gap}");
    let calls: u64 = gap["syscalls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(calls, 0, "{gap}");
    assert_eq!(gap["contention"]["count"], 0, "{gap}");

    // Outside what is kept: one line naming what is.
    let (code, body) = daemon.get("/report.json?from=1000&to=2000");
    assert_eq!(code, 404, "{body}");
    assert_eq!(body.trim().lines().count(), 1, "{body}");
    assert!(body.contains("the daemon keeps"), "{body}");
    // The same range on the flamegraph and the pprof endpoints; bad ranges refused.
    let (code, body) = daemon.get("/flamegraph.svg?from=1000&to=2000");
    assert_eq!(code, 404, "{body}");
    for bad in [
        "/report.json?from=2000&to=1000",
        "/report.json?from=1000",
        "/report.json?from=1000&to=2000&seconds=5",
        "/debug/pprof/mutex?seconds=5&from=1000&to=2000",
        "/flamegraph.svg?from=x&to=2000",
    ] {
        let (code, body) = daemon.get(bad);
        assert_eq!(code, 400, "{bad}: {body}");
        assert_eq!(body.trim().lines().count(), 1, "{bad}: {body}");
    }
    let (code, _) = daemon.get(&format!(
        "/debug/pprof/mutex?from={}&to={}",
        burst_a.0, burst_b.1
    ));
    assert_eq!(code, 200);
    drop(daemon);
    assert_no_programs_left();
}
