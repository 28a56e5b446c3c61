//! `record --trace` on the real kernel (tracepoint mode on this machine): the workload
//! generator's scenarios traced, replayed under mainline without a mismatch, and the traced
//! allocations counted against the generator's ground truth (`expected`). Then the refusals:
//! a recording without a trace, a corrupt trace, `--trace` with `-a`.

use std::process::Stdio;

use crate::common::*;
use fdprof_common::trace::op;
use fdprof_recording::trace::codec::{self, Row};
use fdprof_recording::trace::{ENCODING, SYSCALL_TRACE_NOTE, TableSnapshot, Trace, TraceTable};
use serde_json::Value;

/// The trace's lines (`export --format trace-jsonl`).
fn trace_lines(path: &std::path::Path) -> Vec<Value> {
    let out = run(fdprof()
        .args(["export", "--format", "trace-jsonl", "-o", "-"])
        .arg(path));
    assert!(out.status.success(), "export failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `replay PATH --model mainline --json`: mainline's row.
fn replay_mainline(path: &std::path::Path) -> Value {
    replay_model(path, "mainline")
}

/// `replay --model MODEL --json`'s row of MODEL (mainline's row comes first, for the ratios).
fn replay_model(path: &std::path::Path, model: &str) -> Value {
    let out = run(fdprof()
        .args(["replay", "--model", model, "--json"])
        .arg(path));
    assert!(out.status.success(), "replay failed: {out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("replay notes: {}", report["source"]["notes"]);
    let rows = report["models"].as_array().unwrap();
    rows.iter()
        .find(|m| m["name"].as_str().unwrap().starts_with(model))
        .unwrap_or_else(|| panic!("no {model} row: {rows:?}"))
        .clone()
}

/// `record -p --trace` of a deterministic scenario from its measured phase: (expected, trace).
fn traced(scenario: &[&str], name: &str) -> (Value, std::path::PathBuf) {
    let out = tmp(name);
    let w = start_workload(scenario);
    let pid = w.pid.to_string();
    let mut rec = start_record(&["--trace", "-p", &pid, "-o", out.to_str().unwrap()]);
    w.go();
    let result = w.finish();
    assert!(rec.wait().unwrap().success(), "record failed");
    (result["expected"].clone(), out)
}

fn count(lines: &[Value], f: impl Fn(&Value) -> bool) -> u64 {
    lines.iter().filter(|l| f(l)).count() as u64
}

fn is_alloc(l: &Value) -> bool {
    l["op"] == "alloc" && l["fd"].is_u64()
}

#[test]
fn single_threaded_scenarios_replay_exactly() {
    require_root();
    let _k = kernel_lock();
    let scenarios: [&[&str]; 8] = [
        &["socket-close", "--ops", "500"],
        &["open-close", "--ops", "500"],
        &["dup-close", "--ops", "500"],
        &["pipe", "--ops", "300"],
        &["socketpair", "--ops", "300"],
        &["opensock", "-t", "1", "-n", "200", "--ops", "500"],
        &["dup2-worst", "-n", "300", "--ops", "200"],
        &["holes", "-n", "300", "--ops", "200"],
    ];
    for scenario in scenarios {
        let (expected, path) = traced(scenario, &format!("trace-{}.json", scenario[0]));
        let lines = trace_lines(&path);
        // The table at attach: the scenario's held fds are in it.
        let snapshot = &lines[0];
        assert_eq!(snapshot["op"], "snapshot", "{scenario:?}");
        let held: u64 = snapshot["open"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[1].as_u64().unwrap())
            .sum();
        assert!(held >= 3, "{scenario:?}: {held} fds open at attach");
        // Every allocation of the measured phase, and nothing else, was traced.
        let allocs: u64 = expected["allocs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap())
            .sum();
        assert_eq!(count(&lines, is_alloc), allocs, "{scenario:?} allocations");
        let dup2s = expected["fds_created"]["dup2"].as_u64().unwrap_or(0);
        assert_eq!(
            count(&lines, |l| l["op"] == "install_at"),
            dup2s,
            "{scenario:?} dup2"
        );
        let closes = expected["fds_closed"]["close"].as_u64().unwrap_or(0);
        assert!(
            count(&lines, |l| l["op"] == "release") >= closes,
            "{scenario:?} closes"
        );
        // Tracing changes none of the counts.
        let rec = read_json(&path);
        for (name, n) in expected["syscalls"].as_object().unwrap() {
            let calls = syscall(&rec, name).map_or(0, |s| s["calls"].as_u64().unwrap());
            assert_eq!(calls, n.as_u64().unwrap(), "{scenario:?} calls of {name}");
        }
        let m = replay_mainline(&path);
        assert_eq!(m["allocations"].as_u64().unwrap(), allocs, "{scenario:?}");
        assert_eq!(m["model_mismatch"], 0, "{scenario:?}");
        assert_eq!(m["ambiguous"], 0, "{scenario:?}: one thread");
        assert_eq!(m["rejected"], 0, "{scenario:?}");
        assert_eq!(m["implicit_tables"], 0, "{scenario:?}");
        // A non-POSIX model's departures stand beside its allocations too.
        let fast = replay_model(&path, "fastalloc");
        assert_eq!(
            fast["allocations"].as_u64().unwrap(),
            allocs,
            "{scenario:?}"
        );
        for key in ["diverged", "non_lowest", "collision", "stale_close"] {
            assert!(
                fast[key].is_u64(),
                "{scenario:?}: fastalloc has no {key}: {fast}"
            );
        }
        assert!(fast.get("model_mismatch").is_none(), "{scenario:?}");
    }
    assert_no_programs_left();
}

#[test]
fn threads_sharing_a_table_replay_with_overlaps_ambiguous() {
    require_root();
    let _k = kernel_lock();
    let (_, path) = traced(
        &["opensock", "-t", "2", "-n", "2000", "--ops", "20000"],
        "trace-opensock-2.json",
    );
    let lines = trace_lines(&path);
    // Each task's op is a close and a socket: 2 × 20000 sockets.
    assert_eq!(
        count(&lines, |l| is_alloc(l) && l["syscall"] == "socket"),
        40_000
    );
    let tables = count(&lines, |l| l["op"] == "snapshot");
    assert_eq!(tables, 1);
    let m = replay_mainline(&path);
    assert_eq!(m["model_mismatch"], 0);
    assert_eq!(m["rejected"], 0);
    eprintln!(
        "opensock -t 2: {} allocations, {} ambiguous",
        m["allocations"], m["ambiguous"]
    );
    assert_no_programs_left();
}

/// accept: the accepting thread's table is shared with the connector thread, whose socket and
/// close may overlap an accept4: no mismatch, whatever is ambiguous.
#[test]
fn accept_with_its_connector_replays_without_a_mismatch() {
    require_root();
    let _k = kernel_lock();
    // Not deterministic beyond its accepts (the connectors may retry): no `expected`.
    let (_, path) = traced(&["accept", "--ops", "500"], "trace-accept.json");
    let lines = trace_lines(&path);
    assert_eq!(
        count(&lines, |l| is_alloc(l) && l["syscall"] == "accept4"),
        500
    );
    let sockets = count(&lines, |l| is_alloc(l) && l["syscall"] == "socket");
    assert!(sockets >= 500, "{sockets} connector sockets");
    let m = replay_mainline(&path);
    assert_eq!(m["allocations"].as_u64().unwrap(), 500 + sockets, "{m}");
    assert_eq!(m["model_mismatch"], 0, "{m}");
    assert_eq!(m["rejected"], 0, "{m}");
    eprintln!(
        "accept: {} allocations, {} ambiguous",
        m["allocations"], m["ambiguous"]
    );
    assert_no_programs_left();
}

#[test]
fn a_launched_command_is_traced_from_its_exec() {
    require_root();
    let _k = kernel_lock();
    let out = tmp("trace-command.json");
    let status = run(fdprof()
        .args(["record", "--trace", "-o"])
        .arg(&out)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "socket-close", "--ops", "300"])
        .stdout(Stdio::null()));
    assert!(status.status.success(), "{status:?}");
    let lines = trace_lines(&out);
    assert_eq!(lines[0]["op"], "snapshot");
    assert_eq!(count(&lines, |l| l["op"] == "exec"), 1);
    assert!(count(&lines, |l| is_alloc(l) && l["syscall"] == "socket") >= 300);
    let m = replay_mainline(&out);
    assert_eq!(m["model_mismatch"], 0);
    assert_eq!(m["rejected"], 0);
    assert_no_programs_left();
}

/// `--processes`: the launched workload forks one process per task, each with a table of its
/// own; the trace follows each from its fork, its table a copy of the parent's.
#[test]
fn forked_processes_are_followed_from_their_fork() {
    require_root();
    let _k = kernel_lock();
    let out = tmp("trace-processes.json");
    let rec = run(fdprof()
        .args(["record", "--trace", "-o"])
        .arg(&out)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args([
            "workload",
            "socket-close",
            "-t",
            "2",
            "--processes",
            "--ops",
            "300",
            "--json",
        ]));
    assert!(rec.status.success(), "{rec:?}");
    let result: Value = serde_json::from_str(
        String::from_utf8_lossy(&rec.stdout)
            .lines()
            .last()
            .expect("the workload's result"),
    )
    .unwrap();
    let lines = trace_lines(&out);
    let forks: Vec<&Value> = lines.iter().filter(|l| l["op"] == "fork").collect();
    assert_eq!(forks.len(), 2, "{forks:?}");
    // Each child's 300 sockets, on its own table.
    for fork in &forks {
        let child = &fork["child_table"];
        assert_ne!(child, &fork["table"]);
        assert_eq!(
            count(&lines, |l| l["table"] == *child
                && is_alloc(l)
                && l["syscall"] == "socket"),
            300,
            "{fork}"
        );
    }
    assert_eq!(result["ops"], 600, "{result}");
    let m = replay_mainline(&out);
    assert!(m["allocations"].as_u64().unwrap() >= 600, "{m}");
    assert_eq!(m["model_mismatch"], 0, "{m}");
    assert_eq!(m["ambiguous"], 0, "{m}");
    assert_eq!(m["rejected"], 0, "{m}");
    assert_eq!(m["implicit_tables"], 0, "{m}");
    assert_eq!(m["tables"], 3, "{m}");
    assert_no_programs_left();
}

#[test]
fn a_trace_cut_by_its_limit_says_so() {
    require_root();
    let _k = kernel_lock();
    let out = tmp("trace-limit.json");
    let status = run(fdprof()
        .args(["record", "--trace", "--trace-limit", "100", "-o"])
        .arg(&out)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "socket-close", "--ops", "500"])
        .stdout(Stdio::null()));
    assert!(status.status.success(), "{status:?}");
    let rec = read_json(&out);
    assert_eq!(rec["trace"]["events"], 100);
    let over = rec["trace"]["over_limit"].as_u64().unwrap();
    assert!(over >= 900, "{over} past the limit");
    let limit_drops = rec["drops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["probe"] == "trace" && d["reason"] == "limit")
        .unwrap();
    assert_eq!(limit_drops["count"].as_u64().unwrap(), over);
    let text = run(fdprof().arg("replay").arg(&out));
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("past --trace-limit 100"), "{text}");
    assert_no_programs_left();
}

/// A trace of two allocations by pid 42 (fds 3 and 4, its table read with fds 0-2 open),
/// written with the format's own types: what `record --trace` makes of them (the library's
/// `model::trace` tests), without a kernel.
fn small_trace() -> Trace {
    let row = |fd: i32, exit_ns: u64| Row {
        exit_ns,
        enter_ns: exit_ns - 10,
        tid: 42,
        table: 0,
        op: op::ALLOC,
        fd,
        next_fd: 3,
        max_fds: 64,
        ..Row::default()
    };
    let rows = [row(3, 1_000), row(4, 2_000)];
    Trace {
        encoding: ENCODING.into(),
        events: rows.len() as u64,
        limit: 100,
        over_limit: 0,
        lost: 0,
        tables: vec![TraceTable {
            pid: 42,
            addr: None,
        }],
        snapshots: vec![TableSnapshot {
            table: 0,
            from_ns: 500,
            until_ns: 600,
            open: vec![[0, 3]],
            cloexec: Vec::new(),
            next_fd: 3,
            max_fds: 64,
        }],
        notes: vec![SYSCALL_TRACE_NOTE.into()],
        data: codec::encode(&rows),
    }
}

fn write_with(trace: Option<Trace>, name: &str) -> std::path::PathBuf {
    let mut rec = fdprof_recording::testdata::recording();
    rec.trace = trace;
    let path = tmp(name);
    fdprof_profiler::output::Output::File(path.clone())
        .write_with(|out| rec.write(out))
        .unwrap();
    path
}

fn refused(args: &[&str], path: &std::path::Path, wanted: &str) {
    let out = run(fdprof().args(args).arg(path));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(wanted), "{args:?}: {stderr}");
}

#[test]
fn a_small_trace_replays_and_bad_ones_are_refused_in_one_line() {
    let good = write_with(Some(small_trace()), "trace-small.json");
    let out = run(fdprof()
        .args(["replay", "--model", "mainline", "--json"])
        .arg(&good));
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["models"][0]["allocations"], 2);
    assert_eq!(report["models"][0]["model_mismatch"], 0);

    let none = write_with(None, "trace-none.json");
    refused(&["replay"], &none, "has no fd trace: record with --trace");
    refused(
        &["export", "--format", "trace-jsonl", "-o", "-"],
        &none,
        "has no fd trace",
    );

    let mut cut = small_trace();
    cut.data.truncate(cut.data.len() / 2);
    let cut = write_with(Some(cut), "trace-cut.json");
    refused(&["replay"], &cut, "corrupt fd trace");
    refused(
        &["export", "--format", "trace-jsonl", "-o", "-"],
        &cut,
        "corrupt fd trace",
    );

    let mut more = small_trace();
    more.events = 3;
    let more = write_with(Some(more), "trace-more.json");
    refused(&["replay"], &more, "corrupt fd trace");
}

#[test]
fn trace_needs_a_process_or_a_command() {
    let out = run(fdprof().args(["record", "--trace", "-a", "-d", "1s"]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--trace"), "{stderr}");
}
