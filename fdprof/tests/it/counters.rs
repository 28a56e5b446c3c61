//! Per-thread counters on the real kernel, against what `programs/counted_threads.c` knows:
//! each of its threads touches PAGES fresh pages (a page fault each at least) and sleeps NAPS
//! times (a context switch each at least).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use crate::common::*;
use serde_json::Value;

const THREADS: u64 = 3;
const PAGES: u64 = 2000;
const NAPS: u64 = 50;

/// The program, built for one test (tests run in parallel).
fn program(test: &str) -> std::path::PathBuf {
    let program = tmp(&format!("counted_threads-{test}"));
    cc("counted_threads.c", &program, &["-pthread"]);
    program
}

/// Whether this machine exposes a hardware PMU to perf events.
fn has_pmu() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/cpu").exists()
        || std::path::Path::new("/sys/bus/event_source/devices/cpu_core").exists()
}

fn reading(row: &Value, name: &str) -> u64 {
    row["readings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {row}"))["count"]
        .as_u64()
        .unwrap()
}

fn report(out: &std::path::Path, json: bool) -> String {
    let mut cmd = fdprof();
    cmd.arg("report").arg(out);
    if json {
        cmd.arg("--json");
    }
    let r = run(&mut cmd);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8(r.stdout).unwrap()
}

/// Task-clock is CPU time: more than none, at most the recording's length per thread.
fn check_task_clock(rec: &Value, threads: u64) -> u64 {
    let duration = rec["duration_ns"].as_u64().unwrap();
    let rows = rec["counters"]["threads"].as_array().unwrap();
    let total: u64 = rows.iter().map(|r| reading(r, "task-clock")).sum();
    assert!(total > 0, "{rows:?}");
    assert!(
        total <= duration * threads,
        "{total} > {duration} × {threads}"
    );
    total
}

/// The hardware counters are counted where there is a PMU, and unavailable with the reason
/// where there is none, in the recording and in both reports.
fn check_hardware(rec: &Value, text: &str, json: &Value) {
    for name in ["cycles", "instructions", "cache-misses"] {
        let event = rec["counters"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} event"));
        let total = json["counters"]["totals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        if has_pmu() {
            assert!(event.get("unavailable").is_none(), "{event}");
            assert!(total["value"].as_u64().is_some(), "{total}");
        } else {
            let why = event["unavailable"].as_str().unwrap();
            assert!(why.starts_with("no hardware PMU ("), "{why}");
            assert_eq!(total["unavailable"], why);
            assert!(total["value"].is_null(), "{total}");
            assert!(
                text.lines()
                    .any(|l| l.contains(name) && l.contains(&format!("unavailable: {why}"))),
                "{text}"
            );
        }
    }
}

/// `record -- program`: the held command is counted from its first instruction, and the
/// threads it creates are inherited into its row.
#[test]
fn a_commands_threads_are_counted_with_it() {
    require_root();
    let _guard = kernel_lock();
    let program = program("command");
    let out = tmp("command.data");
    let r = run(fdprof()
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&program)
        .stdout(Stdio::null()));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let rec = read_json(&out);
    let rows = rec["counters"]["threads"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "one thread at the start: {rows:?}");
    assert_eq!(rows[0]["comm"], "counted_threads"); // 15 bytes: the comm after exec
    assert!(
        reading(&rows[0], "page-faults") >= THREADS * PAGES,
        "{rows:?}"
    );
    assert!(
        reading(&rows[0], "context-switches") >= THREADS * NAPS,
        "{rows:?}"
    );
    check_task_clock(&rec, THREADS + 1);

    let text = report(&out, false);
    let json: Value = serde_json::from_str(&report(&out, true)).unwrap();
    check_hardware(&rec, &text, &json);
    let totals = json["counters"]["totals"].as_array().unwrap();
    let faults = totals.iter().find(|t| t["name"] == "page-faults").unwrap();
    assert_eq!(
        faults["value"].as_u64(),
        Some(reading(&rows[0], "page-faults"))
    );
    assert!(text.contains("== counters =="), "{text}");
    assert!(text.contains("on CPU (task-clock)"), "{text}");
    assert!(
        json["own_cost"]["target_cpu"]["target_cpu_ns"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_no_programs_left();
}

/// `record -p`: one row per thread alive at the start, each with its own figures, also for
/// threads that exited before the end.
#[test]
fn a_process_is_counted_per_thread() {
    require_root();
    let _guard = kernel_lock();
    let program = program("process");
    let mut target = Command::new(&program)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, format!("ready {THREADS} {PAGES} {NAPS}\n"));
    let out = tmp("process.data");
    let mut rec = fdprof()
        .args(["record", "-p", &target.id().to_string(), "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(rec.stderr.take().unwrap());
    let mut started = String::new();
    stderr.read_line(&mut started).unwrap();
    assert!(started.starts_with("fdprof: attached"), "{started}");
    target.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(target.wait().unwrap().success());
    let status = rec.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{rest}");

    let rec = read_json(&out);
    let rows = rec["counters"]["threads"].as_array().unwrap();
    assert_eq!(rows.len() as u64, THREADS + 1, "{rows:?}");
    let workers: Vec<&Value> = rows
        .iter()
        .filter(|r| reading(r, "page-faults") >= PAGES)
        .collect();
    assert_eq!(workers.len() as u64, THREADS, "{rows:?}");
    for w in &workers {
        assert!(reading(w, "context-switches") >= NAPS, "{w}");
        assert!(w["tid"].as_u64().unwrap() != target.id() as u64, "{w}");
    }
    check_task_clock(&rec, THREADS + 1);
    let text = report(&out, false);
    let json: Value = serde_json::from_str(&report(&out, true)).unwrap();
    check_hardware(&rec, &text, &json);
    assert_eq!(
        json["counters"]["threads"].as_array().unwrap().len() as u64,
        THREADS + 1
    );
    assert_no_programs_left();
}

/// `--no-counters` records none; system-wide, the recording says why there are none.
#[test]
fn counters_can_be_left_out_and_are_not_taken_system_wide() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("none.data");
    for (args, note) in [
        (&["--no-counters", "--", "true"][..], false),
        (&["-a", "-d", "200ms"][..], true),
    ] {
        let r = run(fdprof().arg("record").arg("-o").arg(&out).args(args));
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let rec = read_json(&out);
        assert!(rec.get("counters").is_none(), "{args:?}");
        let notes = rec["notes"].to_string();
        assert_eq!(
            notes.contains("per-thread counters are not collected"),
            note,
            "{notes}"
        );
        assert!(!report(&out, false).contains("== counters =="));
    }
    assert_no_programs_left();
}
