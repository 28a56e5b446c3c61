//! `fdprof record` on the real kernel, compared with the ground truth the workload generator
//! prints (`expected`). Tracepoint mode on this machine.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// `fdprof record OPTIONS -o OUT -- fdprof workload WORKLOAD...`, the workload's stdout dropped.
fn record_workload(
    options: &[&str],
    out: &std::path::Path,
    workload: &[&str],
) -> std::process::Output {
    run(fdprof()
        .arg("record")
        .args(options)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .arg("workload")
        .args(workload)
        .stdout(Stdio::null()))
}

/// Runs one deterministic scenario under `record -p` and returns (expected, recording).
fn record_deterministic(scenario: &[&str], name: &str) -> (Value, Value) {
    let out = tmp(name);
    let w = start_workload(scenario);
    let pid = w.pid.to_string();
    let mut rec = start_record(&["-p", &pid, "-o", out.to_str().unwrap()]);
    w.go();
    let result = w.finish();
    let status = rec.wait().unwrap();
    assert!(status.success(), "record failed");
    let recording = read_json(&out);
    assert_eq!(recording["end_reason"], "target_exited");
    (result["expected"].clone(), recording)
}

fn check_counts(expected: &Value, rec: &Value) {
    for (field, rec_field) in [
        ("syscalls", "calls"),
        ("fds_created", "fds_created"),
        ("fds_closed", "fds_closed"),
    ] {
        for (name, n) in expected[field].as_object().unwrap() {
            let got = syscall(rec, name).map_or(0, |s| s[rec_field].as_u64().unwrap());
            assert_eq!(got, n.as_u64().unwrap(), "{field} of {name}");
        }
    }
    // Nothing else was seen: the measured phase did only what the generator says.
    let expected_calls: u64 = expected["syscalls"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let calls: u64 = rec["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(calls, expected_calls, "total traced fd syscalls");
}

#[test]
fn one_thread_counts_are_exact() {
    require_root();
    let _guard = kernel_lock();
    for scenario in [
        "socket-close",
        "open-close",
        "dup-close",
        "pipe",
        "socketpair",
    ] {
        let (expected, rec) =
            record_deterministic(&[scenario, "--ops", "3000"], &format!("{scenario}.data"));
        check_counts(&expected, &rec);
        // Scan: every allocation in these loops starts at next_fd and finds it free.
        let allocs: u64 = expected["allocs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["count"].as_u64().unwrap())
            .sum();
        assert_eq!(
            rec["scan"]["allocations"].as_u64().unwrap(),
            allocs,
            "{scenario}"
        );
        assert_eq!(
            rec["table"]["max_fds_max"], expected["max_fds"],
            "{scenario}"
        );
    }
    assert_no_programs_left();
}

/// Without `--latency` the syscalls are counted exactly and never timed; with it every call is
/// timed once. Reports say which.
#[test]
fn syscalls_are_timed_with_latency_only() {
    require_root();
    let _guard = kernel_lock();
    for (options, timed) in [(&[][..], false), (&["--latency"][..], true)] {
        let out = tmp(&format!("latency-{timed}.data"));
        let w = start_workload(&["socket-close", "--ops", "3000"]);
        let pid = w.pid.to_string();
        let mut args = vec!["-p", &pid, "-o", out.to_str().unwrap()];
        args.extend(options);
        let mut rec = start_record(&args);
        w.go();
        let result = w.finish();
        assert!(rec.wait().unwrap().success(), "record failed");
        let recording = read_json(&out);
        check_counts(&result["expected"], &recording);
        assert_eq!(recording["syscall_latency"], timed);
        for s in recording["syscalls"].as_array().unwrap() {
            let want = if timed {
                s["calls"].as_u64().unwrap()
            } else {
                0
            };
            assert_eq!(s["latency"]["count"], want, "latencies of {}", s["name"]);
        }
        let text = run(fdprof().arg("report").arg(&out)).stdout;
        let said = "syscall latency: not measured (record --latency)";
        assert_eq!(String::from_utf8_lossy(&text).contains(said), !timed);
        let json = run(fdprof().args(["report", "--json"]).arg(&out)).stdout;
        let level = &serde_json::from_slice::<Value>(&json).unwrap()["syscall_latency_level"];
        assert_eq!(level == "not-measured", !timed, "{level}");
    }
    assert_no_programs_left();
}

#[test]
fn holes_scan_distance_is_exact() {
    require_root();
    let _guard = kernel_lock();
    let (n, k) = (300u64, 3u64);
    let (expected, rec) = record_deterministic(
        &[
            "holes",
            "--ops",
            "500",
            "-n",
            &n.to_string(),
            "--hole",
            &k.to_string(),
        ],
        "holes.data",
    );
    check_counts(&expected, &rec);
    let far = n - k - 1;
    let scan = &rec["scan"]["bits"];
    assert_eq!(scan["max"].as_u64().unwrap(), far, "largest scan is N-k-1");
    // The slot holding N-k-1 has exactly the allocations the generator says scanned that far.
    let slot = 64 - far.leading_zeros() as usize;
    let want: u64 = expected["allocs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scan_bits"].as_u64() == Some(far))
        .map(|a| a["count"].as_u64().unwrap())
        .sum();
    assert_eq!(want, 500);
    assert_eq!(scan["slots"][slot].as_u64().unwrap(), want);
    assert_eq!(
        scan["slots"].as_array().unwrap().len(),
        slot + 1,
        "nothing beyond it"
    );
    assert_no_programs_left();
}

#[test]
fn opensock_two_threads_contend_on_file_lock() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("opensock.data");
    let status = record_workload(
        &[],
        &out,
        &["opensock", "-t", "2", "-n", "4000", "-d", "3s"],
    );
    assert!(status.status.success());
    let rec = read_json(&out);
    let sites = rec["contention"].as_array().unwrap();
    let file_lock: Vec<&Value> = sites.iter().filter(|s| s["lock"] == "file_lock").collect();
    let total: u64 = file_lock
        .iter()
        .map(|s| s["total_wait_ns"].as_u64().unwrap())
        .sum();
    assert!(total > 0, "no file_lock contention found");
    for (op, function) in [("alloc", "alloc_fd"), ("close", "file_close_fd")] {
        let wait: u64 = file_lock
            .iter()
            .filter(|s| s["operation"] == op)
            .map(|s| s["total_wait_ns"].as_u64().unwrap())
            .sum();
        let share = wait as f64 / total as f64;
        assert!(
            share >= 0.2,
            "{op} has {:.0}% of file_lock wait",
            share * 100.0
        );
        let named = file_lock.iter().any(|s| {
            s["operation"] == op
                && s["kernel_stack"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["function"] == function)
        });
        assert!(named, "no {op} stack names {function}");
    }
    // Every wait began with its stacks walked or reused from its site, and reuse did happen:
    // one thread in one syscall contends from one site over and over.
    let waits: u64 = sites.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    let walks = &rec["stack_walks"];
    let (walked, reused) = (
        walks["walked"].as_u64().unwrap(),
        walks["reused"].as_u64().unwrap(),
    );
    assert!(walked + reused >= waits, "{walked} + {reused} < {waits}");
    assert!(
        reused > walked,
        "stacks reused {reused} times, walked {walked}"
    );
    // No raw kernel addresses leave the machine unless asked for.
    assert!(
        !std::fs::read_to_string(&out)
            .unwrap()
            .contains("\"address\"")
    );
    assert_no_programs_left();

    // The report and the flamegraph read it end to end.
    let report = run(fdprof().arg("report").arg(&out));
    assert!(report.status.success());
    let text = String::from_utf8_lossy(&report.stdout);
    for needle in [
        "file_lock",
        "alloc_fd",
        "file_close_fd",
        "drops",
        "tracepoint",
    ] {
        assert!(text.contains(needle), "report lacks {needle}");
    }
    let svg = tmp("opensock.svg");
    let fg = run(fdprof().arg("flamegraph").arg(&out).arg("-o").arg(&svg));
    assert!(fg.status.success());
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("alloc_fd") && svg.contains("file_close_fd"));
    parse_svg(&svg);
}

#[test]
fn corrupt_recordings_are_refused_clearly() {
    let bad = tmp("truncated.data");
    std::fs::write(
        &bad,
        b"{\"format\": \"fdprof-recording\", \"version\": 1, \"kern",
    )
    .unwrap();
    for (path, needle) in [
        (bad.as_path(), "truncated or corrupt"),
        (
            std::path::Path::new("/nonexistent/fdprof.data"),
            "cannot read",
        ),
    ] {
        let out = run(fdprof().arg("report").arg(path));
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
    let foreign = tmp("foreign.data");
    std::fs::write(&foreign, b"{\"format\": \"something-else\"}").unwrap();
    let out = run(fdprof().arg("report").arg(&foreign));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an fdprof recording"));
}

#[test]
fn command_mode_counts_threads_born_later() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("cmd.data");
    let status = record_workload(&[], &out, &["socket-close", "-t", "2", "--ops", "700"]);
    assert!(status.status.success());
    let rec = read_json(&out);
    assert_eq!(rec["end_reason"], "command_exited");
    // Only the two worker threads, created after exec, call socket().
    assert_eq!(syscall(&rec, "socket").unwrap()["calls"], 1400);
    assert!(syscall(&rec, "close").unwrap()["calls"].as_u64().unwrap() >= 1400);
    assert_no_programs_left();
}

/// close_range closes what is open in its range, counted from the bitmap at entry; with
/// CLOSE_RANGE_CLOEXEC it closes nothing (`tests/programs/close_range.c` says what it does).
#[test]
fn close_range_counts_the_fds_it_closes() {
    require_root();
    let _guard = kernel_lock();
    let program = tmp("close_range");
    cc("close_range.c", &program, &[]);
    let out = tmp("close_range.data");
    let status = run(fdprof()
        .arg("record")
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&program)
        .stdin(Stdio::null()));
    assert!(status.status.success());
    let rec = read_json(&out);
    let close_range = syscall(&rec, "close_range").unwrap();
    assert_eq!(close_range["calls"], 200);
    assert_eq!(close_range["fds_closed"], 1000);
    let dup2 = syscall(&rec, "dup2").unwrap();
    assert_eq!(dup2["calls"], 1000);
    // Each dup2 lands on a closed fd: it closes nothing.
    assert_eq!(dup2["fds_closed"], 0);
    assert_no_programs_left();
}

#[test]
fn interrupt_writes_a_complete_recording() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("interrupted.data");
    let w = start_workload(&["socket-close", "-d", "30s"]);
    let pid = w.pid.to_string();
    let mut rec = start_record(&["-p", &pid, "-o", out.to_str().unwrap()]);
    w.go();
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: the recorder is our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let start = Instant::now();
    assert!(rec.wait().unwrap().success());
    assert!(start.elapsed() < Duration::from_secs(10));
    let recording = read_json(&out);
    assert_eq!(recording["end_reason"], "interrupted");
    assert!(
        syscall(&recording, "socket").unwrap()["calls"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_no_programs_left();
    // SAFETY: ending the workload this test started.
    unsafe { libc::kill(w.pid as i32, libc::SIGKILL) };
    let mut child = w.child;
    let _ = child.wait();
}

fn one_line_error(args: &[&str]) -> String {
    let out = run(fdprof().args(args));
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn bad_targets_fail_clearly() {
    require_root();
    let _guard = kernel_lock();
    // A PID that does not exist: above pid_max.
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
    let missing = (pid_max.trim().parse::<u64>().unwrap() + 1).to_string();
    assert!(one_line_error(&["record", "-p", &missing, "-d", "1s"]).contains("no process"));
    // kthreadd is PID 2 on Linux.
    assert!(one_line_error(&["record", "-p", "2", "-d", "1s"]).contains("kernel thread"));
    assert!(
        one_line_error(&["record", "-a", "-d", "1s", "-o", "/nonexistent-dir/x.data"])
            .contains("cannot write")
    );
    assert_no_programs_left();
}

#[test]
fn record_without_root_fails_clearly() {
    require_root();
    use std::os::unix::process::CommandExt;
    let out = run(Command::new(env!("CARGO_BIN_EXE_fdprof"))
        .args(["record", "-a", "-d", "1s", "-o", "/tmp/x.data"])
        .uid(65534)
        .gid(65534));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("root"));
}

#[test]
fn forced_modes_follow_what_the_kernel_allows() {
    require_root();
    let _guard = kernel_lock();
    let doctor: Value = serde_json::from_slice(&run(fdprof().args(["doctor", "--json"])).stdout)
        .expect("doctor --json");
    let alloc = doctor["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "allocate")
        .unwrap()["functions"][0]
        .clone();
    for (mode, entry, exit) in [
        ("fentry", "fentry", "fexit"),
        ("kprobe", "kprobe", "kretprobe"),
    ] {
        let allowed = alloc[entry]["result"] == "works" && alloc[exit]["result"] == "works";
        let out_path = tmp(&format!("forced-{mode}.data"));
        let out = record_workload(
            &["--mode", mode],
            &out_path,
            &["socket-close", "--ops", "500"],
        );
        if allowed {
            assert!(out.status.success(), "{mode} is allowed but record failed");
            let rec = read_json(&out_path);
            assert_eq!(rec["mode"], mode);
        } else {
            assert!(
                !out.status.success(),
                "{mode} is refused but record succeeded"
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(&format!("in {mode} mode")), "{stderr}");
            assert!(!out_path.exists(), "no recording on failure");
        }
    }
    // Tracepoint mode works wherever the tracepoints do, and says so.
    let out_path = tmp("forced-tracepoint.data");
    let out = record_workload(
        &["--mode", "tracepoint"],
        &out_path,
        &["socket-close", "--ops", "500"],
    );
    assert!(out.status.success());
    let rec = read_json(&out_path);
    assert_eq!(rec["mode"], "tracepoint");
    assert_eq!(syscall(&rec, "socket").unwrap()["calls"], 500);
    assert_no_programs_left();
}

#[test]
fn lock_only_records_contention_and_nothing_else() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("lock-only.data");
    let status = record_workload(
        &["--lock-only"],
        &out,
        &["opensock", "-t", "2", "-n", "2000", "-d", "2s"],
    );
    assert!(status.status.success());
    let rec = read_json(&out);
    assert_eq!(rec["modes"]["fd_syscalls"], "off");
    assert!(rec["syscalls"].as_array().unwrap().is_empty());
    let file_lock_waits: u64 = rec["contention"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["lock"] == "file_lock")
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert!(file_lock_waits > 0, "no file_lock contention found");
    let report = run(fdprof().arg("report").arg(&out));
    assert!(String::from_utf8_lossy(&report.stdout).contains("not recorded (--lock-only)"));
    assert_no_programs_left();
}

#[test]
fn attaching_mid_run_loses_nothing() {
    // The exit probes go in before the entry probes: a target already in its loop must not
    // leave entries without exits (each would count as a drop).
    require_root();
    let _guard = kernel_lock();
    let out = tmp("mid-run.data");
    // Long enough to outlive the attach however slow it is; ended once the recording is.
    let w = start_workload(&["socket-close", "-d", "60s"]);
    w.go();
    std::thread::sleep(Duration::from_millis(300));
    let pid = w.pid.to_string();
    let status = run(fdprof().args([
        "record",
        "-p",
        &pid,
        "-d",
        "1s",
        "-o",
        out.to_str().unwrap(),
    ]));
    w.end();
    assert!(status.status.success());
    let rec = read_json(&out);
    let syscall_drops: u64 = rec["drops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["probe"] == "syscalls")
        .map(|d| d["count"].as_u64().unwrap())
        .sum();
    assert_eq!(syscall_drops, 0);
    assert!(syscall(&rec, "socket").unwrap()["calls"].as_u64().unwrap() > 1000);
    assert_no_programs_left();
}
