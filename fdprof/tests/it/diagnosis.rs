//! The diagnosis on the real kernel (tracepoint mode on this machine), read through
//! `report --json`: each rule fires on the scenario built to show it, none on the quiet ones,
//! and each remedy variant of the generator, recorded, keeps its exact ground truth and shows
//! the remedy in the recorded figures.

use std::process::{Command, Stdio};

use crate::common::remedy::{check_counts, recorded, report};
use crate::common::*;
use serde_json::Value;

/// The rules that fired.
fn rules(report: &Value) -> Vec<String> {
    report["diagnosis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

fn finding<'a>(report: &'a Value, rule: &str) -> &'a Value {
    report["diagnosis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == rule)
        .unwrap_or_else(|| panic!("no {rule} finding: {}", report["diagnosis"]))
}

/// The value of `figure` in a finding's evidence, checked against its threshold.
fn evidence(f: &Value, figure: &str) -> f64 {
    let e = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["figure"] == figure)
        .unwrap_or_else(|| panic!("no {figure} in {f}"));
    let (v, t) = (
        e["value"].as_f64().unwrap(),
        e["threshold"].as_f64().unwrap(),
    );
    match e["comparison"].as_str().unwrap() {
        "at_least" => assert!(v >= t, "{e}"),
        "at_most" => assert!(v <= t, "{e}"),
        other => panic!("comparison {other}"),
    }
    v
}

/// Two threads replacing sockets in one table: the shared-table rule, with the file_lock
/// stacks that carry it (the scheduler decides how much they collide: a few tries at most).
#[test]
fn shared_table_fires_on_opensock_two_threads() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("opensock.data");
    for _ in 0..3 {
        let rec = run(fdprof()
            .args(["record", "-o", out.to_str().unwrap(), "--"])
            .arg(env!("CARGO_BIN_EXE_fdprof"))
            .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d", "3s"])
            .stdout(Stdio::null()));
        assert!(rec.status.success(), "{rec:?}");
        let r = report(&out);
        if !rules(&r).contains(&"shared-table".to_string()) {
            eprintln!("no shared-table finding this time: {}", r["contention"]);
            continue;
        }
        let f = finding(&r, "shared-table");
        let waits = evidence(f, "contention.file_lock_count");
        assert_eq!(waits, r["contention"]["file_lock_count"].as_f64().unwrap());
        evidence(f, "contention.file_lock_wait_share_of_duration");
        assert_eq!(
            f["remedy"]["wait_ns"], r["contention"]["file_lock_wait_ns"],
            "the saving is the file_lock wait"
        );
        let stacks = f["stacks"].as_array().unwrap();
        assert!(!stacks.is_empty(), "{f}");
        assert!(stacks.iter().all(|s| s["source"] == "contention"));
        assert!(
            stacks.iter().any(|s| s["operation"] == "alloc"),
            "socket()'s alloc_fd waits: {f}"
        );
        assert!(
            f["summary"]
                .as_str()
                .unwrap()
                .starts_with("file_lock wait is ")
        );
        // The text report says the same.
        let text = String::from_utf8(run(fdprof().arg("report").arg(&out)).stdout).unwrap();
        assert!(text.contains("== diagnosis =="), "{text}");
        assert!(
            text.contains("  [shared-table] file_lock wait is "),
            "{text}"
        );
        assert_no_programs_left();
        return;
    }
    panic!("opensock -t 2 never fired the shared-table rule in 3 runs");
}

/// The holes pattern: long scans, with its closes and opens named; --reserve makes every scan
/// zero bits, and the rule stays silent. Both keep their ground truth exactly.
#[test]
fn long_scans_fire_on_holes_and_reserve_removes_them() {
    require_root();
    let _guard = kernel_lock();
    let (n, k, ops) = (300u64, 3u64, 500u64);
    let base = ["holes", "--ops", "500", "-n", "300", "--hole", "3"];
    let (result, rec, r) = recorded(&base, &[], "holes.data");
    check_counts(&result["expected"], &rec);
    let f = finding(&r, "long-scans");
    assert_eq!(evidence(f, "scan.far_scans"), ops as f64);
    assert_eq!(evidence(f, "scan.far_share"), 0.5);
    assert_eq!(evidence(f, "scan.next_fd_hit_rate"), 0.5);
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("{ops} of {} allocations", 2 * ops)),
        "{summary}"
    );
    assert!(summary.contains("the holes pattern"), "{summary}");
    assert!(
        summary.contains(&format!("({} closes)", 2 * ops)),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("openat {}", 2 * ops)),
        "{summary}"
    );
    assert_eq!(f["remedy"]["shown_by"], "fdprof workload holes --reserve");
    // N-k-1 = 296 bits lies in the bucket 256..=511: at least 256 bits, 4 words, each.
    assert_eq!(r["scan"]["bits"]["max"], n - k - 1);
    assert_eq!(f["remedy"]["scan_words"], ops * 4);

    let mut reserve = base.to_vec();
    reserve.push("--reserve");
    let (result, rec, r) = recorded(&reserve, &[], "reserve.data");
    check_counts(&result["expected"], &rec);
    assert_eq!(rec["scan"]["allocations"], ops);
    assert_eq!(
        rec["scan"]["next_fd_hits"], ops,
        "every allocation at next_fd"
    );
    assert_eq!(r["scan"]["bits"]["max"], 0, "zero-bit scans only");
    assert_eq!(r["scan"]["bits"]["p99"], 0);
    assert!(
        !rules(&r).contains(&"long-scans".to_string()),
        "{}",
        r["diagnosis"]
    );
    assert_no_programs_left();
}

/// A table grown under the recording: 3000 held fds take socket-close's table from 64 slots
/// to 4096, through every power of two.
#[test]
fn table_growth_fires_on_a_growing_table() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("growth.data");
    let rec = run(fdprof()
        .args(["record", "-o", out.to_str().unwrap(), "--"])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "socket-close", "-n", "3000", "--ops", "100"])
        .stdout(Stdio::null()));
    assert!(rec.status.success(), "{rec:?}");
    let r = report(&out);
    let f = finding(&r, "table-growth");
    let grew = evidence(f, "table.expansions");
    assert_eq!(grew, r["table"]["expansions"].as_f64().unwrap());
    assert!(grew >= 1.0);
    assert_eq!(r["table"]["max_fds_max"], 4096);
    assert_eq!(f["remedy"]["table_copies"].as_f64(), Some(grew));
    assert!(
        f["remedy"]["change"]
            .as_str()
            .unwrap()
            .contains("F_DUPFD, 4095")
    );
    assert_no_programs_left();
}

/// close-loop under `record --trace`: every op's N closes are one run of consecutive fds,
/// exactly; with --close-range the recording has one close_range call an op closing N fds,
/// and the rule is silent.
#[test]
fn close_loops_fire_and_close_range_removes_them() {
    require_root();
    let _guard = kernel_lock();
    let (ops, n) = (100u64, 64u64);
    let base = ["close-loop", "--ops", "100", "-n", "64"];
    let (result, rec, r) = recorded(&base, &["--trace"], "close-loop.data");
    check_counts(&result["expected"], &rec);
    assert_eq!(syscall(&rec, "close").unwrap()["calls"], ops * n);
    // Set-up sized the table, whatever size it inherited: close loops are all there is.
    assert_eq!(rules(&r), ["close-loops"], "{}", r["diagnosis"]);
    let f = finding(&r, "close-loops");
    assert_eq!(evidence(f, "trace.close_loop_fds"), (ops * n) as f64);
    assert_eq!(
        f["remedy"]["syscalls"],
        ops * n - ops,
        "one call a run instead of N"
    );
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("{ops} runs of 8 or more (the longest {n})"))
    );

    let mut range = base.to_vec();
    range.push("--close-range");
    let (result, rec, r) = recorded(&range, &["--trace"], "close-range.data");
    check_counts(&result["expected"], &rec);
    let cr = syscall(&rec, "close_range").unwrap();
    assert_eq!(cr["calls"], ops, "one call an op");
    assert_eq!(cr["fds_closed"], ops * n, "each closing N fds");
    assert!(syscall(&rec, "close").is_none_or(|c| c["calls"] == 0));
    assert_eq!(rules(&r), Vec::<String>::new(), "{}", r["diagnosis"]);
    assert_eq!(r["diagnosis"]["not_checked"], serde_json::json!([]));
    assert_no_programs_left();
}

/// Two threads sending datagrams to one socket over loopback: the NET_RX softirq runs on each
/// sender's stack and contends the socket's queue lock, so the interrupt-time rule fires with
/// those softirq stacks; the generator makes no fd call, and the recording agrees exactly.
/// Only senders running at once contend, so on a host whose CPUs are busy with other work the
/// run is tried again, longer each time, until the wait crosses the rule's 1 ms.
#[test]
fn interrupt_time_fires_on_udp_loopback() {
    require_root();
    let _guard = kernel_lock();
    for ops in ["200000", "600000", "1800000"] {
        let (result, rec, r) = recorded(
            &["udp-loopback", "-t", "2", "--ops", ops],
            &[],
            "udp-loopback.data",
        );
        check_counts(&result["expected"], &rec);
        assert_eq!(result["expected"]["syscalls"], serde_json::json!({}));
        let fired = rules(&r);
        for fd_rule in ["shared-table", "long-scans", "table-growth"] {
            assert!(!fired.contains(&fd_rule.to_string()), "{fired:?}");
        }
        if !fired.contains(&"interrupt-time".to_string()) {
            eprintln!("no interrupt-time finding this time: {}", r["contention"]);
            continue;
        }
        let f = finding(&r, "interrupt-time");
        let waits = evidence(f, "contention.interrupt_waits");
        let wait_ns = evidence(f, "contention.interrupt_wait_ns");
        evidence(f, "contention.interrupt_share_of_all");
        evidence(f, "contention.interrupt_wait_share_of_duration");
        let softirq = &r["contention"]["softirq"];
        assert!(
            waits
                <= softirq["count"].as_f64().unwrap()
                    + r["contention"]["irq"]["count"].as_f64().unwrap()
        );
        assert_eq!(f["remedy"]["wait_ns"].as_f64(), Some(wait_ns));
        let top = &f["stacks"][0];
        assert_eq!(top["source"], "contention", "{f}");
        assert_eq!(top["operation"], "softirq", "{f}");
        let frames: Vec<&str> = top["kernel_stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap())
            .collect();
        assert!(
            frames.contains(&"__udp_enqueue_schedule_skb"),
            "the receive queue's lock, taken in NET_RX: {frames:?}"
        );
        assert!(
            frames
                .iter()
                .any(|f| f.contains("softirq") || *f == "net_rx_action"),
            "{frames:?}"
        );
        assert_no_programs_left();
        return;
    }
    panic!("udp-loopback -t 2 never fired the interrupt-time rule in 3 runs, the last of 1.8M ops");
}

/// No rule fires on socket/close in one thread (traced, so every rule looks) nor on an idle
/// process.
#[test]
fn quiet_scenarios_fire_nothing() {
    require_root();
    let _guard = kernel_lock();
    let (result, rec, r) = recorded(
        &["socket-close", "--ops", "3000"],
        &["--trace"],
        "quiet.data",
    );
    check_counts(&result["expected"], &rec);
    assert_eq!(rules(&r), Vec::<String>::new(), "{}", r["diagnosis"]);
    assert_eq!(r["diagnosis"]["not_checked"], serde_json::json!([]));

    let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
    let out = tmp("idle.data");
    let rec = run(fdprof()
        .args(["record", "-d", "1s", "-o", out.to_str().unwrap(), "-p"])
        .arg(idle.id().to_string()));
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(idle.id() as i32, libc::SIGKILL) };
    idle.wait().unwrap();
    assert!(rec.status.success(), "{rec:?}");
    let r = report(&out);
    assert_eq!(rules(&r), Vec::<String>::new(), "{}", r["diagnosis"]);
    let text = String::from_utf8(run(fdprof().arg("report").arg(&out)).stdout).unwrap();
    assert!(text.contains("no rule fired"), "{text}");
    assert_no_programs_left();
}
