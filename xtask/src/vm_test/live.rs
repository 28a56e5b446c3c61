//! `top` and the daemon in the guest, judged on the host: the `socket` count each shows equals
//! the workload's `expected`, and each names what saw the lock waits as the report does.

use fdprof_figures::WaitSource;
use serde_json::Value;

use super::guest::{self, GuestOutput, StepResult};
use super::row::{Row, failure};

/// The JSON lines a step printed.
fn json_lines(step: &StepResult) -> Vec<Value> {
    step.stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `socket()` calls the workload's line (the one with `expected`) says it made.
fn expected_sockets(lines: &[Value]) -> Option<u64> {
    lines
        .iter()
        .find(|v| v.get("expected").is_some())
        .and_then(|v| v["expected"]["syscalls"]["socket"].as_u64())
}

/// What must see the lock waits on this kernel in `mode`: the doctor says whether the lock
/// tracepoints exist.
pub(super) fn wait_source(doctor: Option<&Value>, mode: &str) -> WaitSource {
    let tracepoints = doctor
        .and_then(|d| d["lock_tracepoints_chosen"].as_str())
        .is_some_and(|c| c != "unavailable");
    match (tracepoints, mode) {
        (true, _) => WaitSource::LockTracepoints,
        (false, "tracepoint") => WaitSource::Unavailable,
        (false, _) => WaitSource::SlowPath,
    }
}

/// `fdprof top --jsonl` launching the workload: its intervals add up to its sockets.
pub(super) fn top_row(out: &GuestOutput, kernel: &str, mode: &str, doc: Option<&Value>) -> Row {
    let mut row = Row::failed(kernel, mode, "top");
    let Some(step) = out.steps.get(&guest::top_step(mode)) else {
        row.figures = "no result from the guest (it stopped early?)".into();
        return row;
    };
    if step.rc != 0 {
        row.figures = failure("top", step);
        return row;
    }
    let lines = json_lines(step);
    let intervals: Vec<&Value> = lines.iter().filter(|v| v.get("index").is_some()).collect();
    let sockets: u64 = intervals
        .iter()
        .flat_map(|v| v["syscalls"].as_array().into_iter().flatten())
        .filter(|s| s["name"] == "socket")
        .filter_map(|s| s["calls"].as_u64())
        .sum();
    let want = expected_sockets(&lines);
    let sources: Vec<&str> = intervals
        .iter()
        .filter_map(|v| v["contention"]["source"].as_str())
        .collect();
    let source = wait_source(doc, mode).name();
    let modes_ok = intervals.iter().all(|v| v["mode"] == mode);
    row.pass = want == Some(sockets)
        && !intervals.is_empty()
        && modes_ok
        && sources.len() == intervals.len()
        && sources.iter().all(|s| *s == source);
    row.figures = format!(
        "socket {sockets}/{} in {} intervals of top --jsonl, {} mode, lock waits {} ({:.1}s)",
        want.map_or("?".into(), |w| w.to_string()),
        intervals.len(),
        if modes_ok { mode } else { "another" },
        sources.first().unwrap_or(&"?"),
        step.secs
    );
    row
}

/// The value of the `/metrics` sample of `family` whose labels include every one of `labels`.
fn sample(metrics: &str, family: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `fdprof daemon --tier full --comm NAME`: its `/metrics` count the workload's sockets, and
/// say what saw the lock waits.
pub(super) fn daemon_row(out: &GuestOutput, kernel: &str, mode: &str, doc: Option<&Value>) -> Row {
    let mut row = Row::failed(kernel, mode, "daemon");
    let Some(step) = out.steps.get(&guest::daemon_step(mode)) else {
        row.figures = "no result from the guest (it stopped early?)".into();
        return row;
    };
    if step.rc != 0 {
        row.figures = failure("daemon", step);
        return row;
    }
    let want = expected_sockets(&json_lines(step));
    let target = format!("target=\"{}\"", guest::DAEMON_COMM);
    let sockets = sample(
        &step.stdout,
        "fdprof_fd_allocations_total",
        &[&target, "syscall=\"socket\""],
    );
    let source = wait_source(doc, mode).name();
    let source_label = format!("source=\"{source}\"");
    let said = sample(
        &step.stdout,
        "fdprof_lock_wait_source",
        &[&target, &source_label],
    );
    row.pass = want.is_some() && sockets == want.map(|w| w as f64) && said == Some(1.0);
    row.figures = format!(
        "/metrics: socket allocations {}/{}, fdprof_lock_wait_source {source} {} ({:.1}s)",
        sockets.map_or("none".into(), |s| s.to_string()),
        want.map_or("?".into(), |w| w.to_string()),
        said.map_or("absent".into(), |s| s.to_string()),
        step.secs
    );
    row
}
