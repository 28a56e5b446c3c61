//! `fdprof workload` end to end: the built binary, real system calls, real fd tables.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::load_lock;

/// The binary, started with only stdio open in a fresh 64-slot fd table, so that fd numbers and
/// table sizes do not depend on what the test harness has open.
fn fdprof() -> Command {
    const CLOSE_RANGE_UNSHARE: libc::c_long = 1 << 1;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fdprof"));
    // SAFETY: the closure only makes one async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_long,
                libc::c_long::from(u32::MAX),
                CLOSE_RANGE_UNSHARE,
            );
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn workload(args: &[&str]) -> Output {
    fdprof()
        .arg("workload")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running fdprof")
}

/// Runs a workload that must succeed with --json and returns its object.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = workload(&all);
    assert!(
        out.status.success(),
        "fdprof workload {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).expect("valid JSON")
}

fn hard_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}

fn count(v: &Value, section: &str, name: &str) -> u64 {
    v["expected"][section][name].as_u64().unwrap_or(0)
}

fn allocs(v: &Value) -> Vec<(String, u64, u64, u64, u64)> {
    v["expected"]["allocs"]
        .as_array()
        .expect("allocs")
        .iter()
        .map(|a| {
            (
                a["syscall"].as_str().unwrap().to_string(),
                a["fd"].as_u64().unwrap(),
                a["origin"].as_u64().unwrap(),
                a["scan_bits"].as_u64().unwrap(),
                a["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The checks every deterministic run must pass; returns the JSON.
fn deterministic(args: &[&str], k: u64) -> Value {
    let ops = k.to_string();
    let mut all = args.to_vec();
    all.extend(["--ops", &ops, "-t", "1", "--verify-table"]);
    let v = json(&all);
    assert_eq!(v["ops"], k, "{v}");
    assert_eq!(v["tasks"], 1);
    let e = &v["expected"];
    assert!(e.is_object(), "deterministic runs carry `expected`: {v}");
    assert_eq!(e["max_fds"], v["max_fds"]);
    // Every alloc group is consistent, and all allocations are counted.
    let groups = allocs(&v);
    for (_, fd, origin, scan, n) in &groups {
        assert_eq!(fd - origin, *scan);
        assert!(*n > 0);
    }
    let grouped: u64 = groups.iter().map(|g| g.4).sum();
    let created: u64 = e["fds_created"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "dup2" && *name != "dup3")
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert_eq!(
        grouped, created,
        "allocs cover every alloc_fd allocation: {v}"
    );
    v
}

#[test]
fn socket_close_ground_truth() {
    let _load = load_lock();
    let v = deterministic(&["socket-close"], 1000);
    assert_eq!(count(&v, "syscalls", "socket"), 1000);
    assert_eq!(count(&v, "syscalls", "close"), 1000);
    assert_eq!(v["expected"]["syscalls"].as_object().unwrap().len(), 2);
    assert_eq!(count(&v, "fds_created", "socket"), 1000);
    assert_eq!(count(&v, "fds_closed", "close"), 1000);
    let groups = allocs(&v);
    assert_eq!(groups.len(), 1, "the same fd every time: {groups:?}");
    let (sys, fd, origin, scan, n) = &groups[0];
    assert_eq!((sys.as_str(), *scan, *n), ("socket", 0, 1000));
    assert_eq!(fd, origin);
    assert_eq!(v["expected"]["next_fd_start"].as_u64(), Some(*fd));
}

#[test]
fn open_close_and_dup_close_ground_truth() {
    let _load = load_lock();
    let v = deterministic(&["open-close"], 500);
    assert_eq!(count(&v, "syscalls", "openat"), 500);
    assert_eq!(count(&v, "syscalls", "close"), 500);
    assert_eq!(allocs(&v).len(), 1);

    let v = deterministic(&["dup-close", "-n", "10"], 500);
    assert_eq!(count(&v, "syscalls", "dup"), 500);
    assert_eq!(count(&v, "fds_created", "dup"), 500);
    assert_eq!(count(&v, "fds_closed", "close"), 500);
    assert_eq!(v["fds_held"], 10);
    let groups = allocs(&v);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].3, 0);
}

#[test]
fn pipe_and_socketpair_create_two_fds_a_call() {
    let _load = load_lock();
    for (scenario, sys) in [("pipe", "pipe2"), ("socketpair", "socketpair")] {
        let v = deterministic(&[scenario], 700);
        assert_eq!(count(&v, "syscalls", sys), 700, "{v}");
        assert_eq!(count(&v, "fds_created", sys), 1400, "{v}");
        assert_eq!(count(&v, "syscalls", "close"), 1400);
        assert_eq!(count(&v, "fds_closed", "close"), 1400);
        let groups = allocs(&v);
        assert_eq!(groups.len(), 2, "{groups:?}");
        // Read end at next_fd, write end right after it.
        assert_eq!(groups[1].1, groups[0].1 + 1);
        assert!(groups.iter().all(|g| g.3 == 0 && g.4 == 700));
    }
}

#[test]
fn holes_scans_from_hole_to_n() {
    let _load = load_lock();
    let v = deterministic(&["holes", "-n", "100", "--hole", "3"], 1000);
    assert_eq!(count(&v, "syscalls", "openat"), 2000);
    assert_eq!(count(&v, "syscalls", "close"), 2000);
    let groups = allocs(&v);
    assert!(
        groups.contains(&("openat".into(), 3, 3, 0, 1000)),
        "refill of the hole: {groups:?}"
    );
    assert!(
        groups.contains(&("openat".into(), 100, 4, 96, 1000)),
        "the far open scans N-k-1 = 96 bits: {groups:?}"
    );
    assert_eq!(v["fds_held"], 100);

    let v = deterministic(&["holes", "-n", "300", "--hole", "10"], 200);
    assert!(allocs(&v).contains(&("openat".into(), 300, 11, 289, 200)));
}

/// holes --reserve: the refill goes through dup2 onto K, which stays open, so every allocation
/// takes next_fd (N) with a zero-bit scan.
#[test]
fn holes_reserve_scans_nothing() {
    let _load = load_lock();
    let v = deterministic(&["holes", "--reserve", "-n", "100", "--hole", "3"], 1000);
    assert_eq!(v["variant"], "reserve");
    let dup2 = if cfg!(target_arch = "x86_64") {
        "dup2"
    } else {
        "dup3"
    };
    assert_eq!(count(&v, "syscalls", "openat"), 1000);
    assert_eq!(count(&v, "syscalls", dup2), 1000);
    assert_eq!(count(&v, "syscalls", "close"), 1000);
    assert_eq!(
        count(&v, "fds_closed", dup2),
        1000,
        "dup2 replaces K's file"
    );
    assert_eq!(allocs(&v), vec![("openat".to_string(), 100, 100, 0, 1000)]);
    assert_eq!(v["fds_held"], 100);
}

/// close-loop: N consecutive dups closed one by one, or by one close_range.
#[test]
fn close_loop_and_close_range_ground_truth() {
    let _load = load_lock();
    let v = deterministic(&["close-loop", "-n", "16"], 100);
    assert_eq!(count(&v, "syscalls", "dup"), 1600);
    assert_eq!(count(&v, "syscalls", "close"), 1600);
    assert_eq!(count(&v, "fds_closed", "close"), 1600);
    let groups = allocs(&v);
    assert_eq!(groups.len(), 16, "fds 4..=19, each at next_fd: {groups:?}");
    assert!(
        groups
            .iter()
            .enumerate()
            .all(|(i, g)| g.1 == 4 + i as u64 && g.3 == 0 && g.4 == 100)
    );
    let r = deterministic(&["close-loop", "--close-range", "-n", "16"], 100);
    assert_eq!(r["variant"], "close-range");
    assert_eq!(count(&r, "syscalls", "close_range"), 100);
    assert_eq!(count(&r, "fds_closed", "close_range"), 1600);
    assert_eq!(count(&r, "syscalls", "close"), 0);
    assert_eq!(r["expected"]["allocs"], v["expected"]["allocs"]);
}

/// opensock --io-uring-direct: the sockets live in io_uring fixed slots, so the table sees no
/// system call, allocation or close at all; the expected says so, and counts the direct files.
#[test]
fn io_uring_direct_opensock_ground_truth() {
    let _load = load_lock();
    let v = deterministic(&["opensock", "--io-uring-direct", "-n", "200"], 1000);
    assert_eq!(v["variant"], "io-uring-direct");
    let e = &v["expected"];
    assert_eq!(e["syscalls"], serde_json::json!({}));
    assert_eq!(e["allocs"], serde_json::json!([]));
    assert_eq!(e["direct_files"]["created"], 1000);
    assert_eq!(e["direct_files"]["closed"], 1000);
    assert_eq!(e["next_fd_start"], e["next_fd_end"]);
    assert_eq!(v["fds_held"], 1, "the ring's fd");
}

#[test]
fn dup2_worst_scans_from_next_fd() {
    let _load = load_lock();
    let v = deterministic(&["dup2-worst", "-n", "100"], 500);
    assert_eq!(count(&v, "syscalls", "close"), 1000);
    assert_eq!(count(&v, "syscalls", "dup"), 500);
    let dup2 = if cfg!(target_arch = "x86_64") {
        "dup2"
    } else {
        "dup3"
    };
    assert_eq!(count(&v, "syscalls", dup2), 500);
    assert_eq!(count(&v, "fds_created", dup2), 500);
    assert_eq!(
        count(&v, "fds_closed", dup2),
        0,
        "fd 3 was closed before dup2"
    );
    // dup2 leaves next_fd at 3, so dup(0) searches from 3 and finds 100.
    assert_eq!(allocs(&v), vec![("dup".to_string(), 100, 3, 97, 500)]);
}

#[test]
fn opensock_ground_truth() {
    let _load = load_lock();
    let v = deterministic(&["opensock", "-n", "200"], 2000);
    assert_eq!(count(&v, "syscalls", "close"), 2000);
    assert_eq!(count(&v, "syscalls", "socket"), 2000);
    assert_eq!(v["fds_held"], 200);
    let groups = allocs(&v);
    assert!(groups.len() > 10, "random slots: {groups:?}");
    assert!(groups.iter().all(|g| g.0 == "socket"));
    // Same seed, same run.
    let again = deterministic(&["opensock", "-n", "200"], 2000);
    assert_eq!(v["expected"], again["expected"]);
}

#[test]
fn prealloc_expands_the_table() {
    let _load = load_lock();
    let v = deterministic(&["socket-close", "--prealloc", "5000"], 10);
    assert_eq!(v["max_fds"], 8192);
}

#[test]
fn table_growth_inside_the_measured_phase_is_predicted() {
    let _load = load_lock();
    // With only stdio open (see fdprof()), held fds are 3..; a child's starting table size S is
    // inherited from this process at fork time. Hold S-4 fds so the pipe's read end is fd S-1
    // and its write end fd S: the kernel doubles the table inside the measured phase.
    // --verify-table (set by deterministic()) compares the prediction with FDSize afterwards.
    for _attempt in 0..3 {
        let probe = deterministic(&["pipe"], 1);
        let size = probe["expected"]["max_fds_start"].as_u64().unwrap();
        assert_eq!(
            probe["expected"]["next_fd_start"], 3,
            "only stdio open: {probe}"
        );
        let held = (size - 4).to_string();
        let v = deterministic(&["pipe", "-n", &held], 3);
        if v["expected"]["max_fds_start"] != size {
            continue; // this process's table grew in between: the child inherited another size
        }
        assert_eq!(v["expected"]["max_fds"], size * 2, "{v}");
        assert_eq!(
            allocs(&v),
            vec![
                ("pipe2".to_string(), size - 1, size - 1, 0, 3),
                ("pipe2".to_string(), size, size, 0, 3)
            ]
        );
        return;
    }
    panic!("the starting table size kept changing");
}

#[test]
fn too_many_fds_fails_before_starting() {
    let _load = load_lock();
    let hard = hard_nofile();
    let n = (hard + 10).to_string();
    let start = Instant::now();
    let out = workload(&["opensock", "-n", &n, "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(&hard.to_string()),
        "names the limit: {stderr}"
    );
    assert!(stderr.contains("largest -n that fits is"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(start.elapsed() < Duration::from_secs(10));

    // The largest -n it names does fit.
    let largest: u32 = stderr.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let out = workload(&["holes", "-n", &n, "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let holes_largest = stderr.trim().rsplit(' ').next().unwrap();
    let v = json(&["holes", "-n", holes_largest, "--ops", "1"]);
    assert_eq!(v["ops"], 1);
    assert!(largest > 0);
}

#[test]
fn bad_input_is_refused() {
    let _load = load_lock();
    let out = workload(&["no-such-scenario"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    for name in ["opensock", "socket-close", "holes", "dup2-worst", "accept"] {
        assert!(stderr.contains(name), "lists {name}: {stderr}");
    }
    let out = workload(&["holes", "-t", "2", "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = workload(&["pipe", "-d", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    let out = workload(&["open-close", "--path", "/nonexistent/x", "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x"));
}

#[test]
fn wait_signal_parks_until_sigusr1() {
    let _load = load_lock();
    let mut child = fdprof()
        .args([
            "workload",
            "holes",
            "-n",
            "50",
            "--ops",
            "100",
            "--json",
            "--wait-signal",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let ready: Value = serde_json::from_str(&line).expect("ready line is JSON");
    assert_eq!(ready["event"], "ready");
    assert_eq!(ready["pid"], child.id());
    // It waits for the signal.
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "still parked");
    // SAFETY: signalling the child this test spawned, by its pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGUSR1) },
        0
    );
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    let v: Value = serde_json::from_str(rest.trim()).expect("one JSON object after ready");
    assert_eq!(v["ops"], 100);
    assert!(allocs(&v).contains(&("openat".into(), 50, 4, 46, 100)));
}

#[test]
fn sweep_prints_a_row_per_task_count() {
    let _load = load_lock();
    let out = workload(&["socket-close", "--sweep", "1,2", "-d", "200ms"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "tasks,ops_per_sec,ops_per_sec_per_task,linear_pct"
    );
    assert_eq!(lines.len(), 3, "header + 2 rows: {csv}");
    assert!(lines[1].starts_with("1,") && lines[2].starts_with("2,"));
    assert!(lines[1].ends_with(",100.0"), "1 task is 100% linear: {csv}");

    let v = json(&["pipe", "--sweep", "1,2", "--processes", "--ops", "2000"]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["tasks"], 2);
    assert!(
        rows.iter()
            .all(|r| r["ops_per_sec"].as_f64().unwrap() > 0.0)
    );
}

#[test]
fn processes_run_their_own_tables() {
    let _load = load_lock();
    let v = json(&[
        "holes",
        "-n",
        "64",
        "--processes",
        "-t",
        "2",
        "--ops",
        "300",
    ]);
    assert_eq!(v["mode"], "processes");
    assert_eq!(v["ops"], 600);
    assert_eq!(v["per_task"].as_array().unwrap().len(), 2);
    assert_eq!(v["fds_held"], 128);
    assert!(v.get("expected").is_none(), "not a deterministic run");
}

#[test]
fn timed_threads_share_the_work() {
    let _load = load_lock();
    let v = json(&["opensock", "-t", "2", "-n", "400", "-d", "300ms", "--pin"]);
    assert_eq!(v["tasks"], 2);
    assert!(v["ops"].as_u64().unwrap() > 0);
    let per: u64 = v["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["ops"].as_u64().unwrap())
        .sum();
    assert_eq!(per, v["ops"].as_u64().unwrap());
    assert!(v.get("expected").is_none());
    let secs = v["secs"].as_f64().unwrap();
    assert!((0.29..1.5).contains(&secs), "{secs}");
}

#[test]
fn accept_runs_on_loopback_and_stops() {
    let _load = load_lock();
    let start = Instant::now();
    let v = json(&["accept", "-t", "1", "-d", "300ms"]);
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    assert!(v["connects"].as_u64().unwrap() >= v["ops"].as_u64().unwrap());
    assert!(v.get("expected").is_none(), "accept is not deterministic");
    assert!(start.elapsed() < Duration::from_secs(10));

    let v = json(&["accept", "-t", "2", "--ops", "200"]);
    assert_eq!(v["ops"], 400);
    assert_eq!(v["connects"], 400);
}

#[test]
fn human_summary() {
    let _load = load_lock();
    let out = workload(&["socket-close", "-n", "5", "-d", "100ms"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("ops/s"), "{text}");
    assert!(text.contains("fds held    5"), "{text}");
    assert!(text.contains("max_fds"), "{text}");
}

#[test]
fn udp_loopback_sends_and_receives_and_makes_no_fd_call() {
    let _load = load_lock();
    let v = json(&["udp-loopback", "-t", "2", "--ops", "5000"]);
    assert_eq!(
        (v["scenario"].as_str(), v["mode"].as_str()),
        (Some("udp-loopback"), Some("threads"))
    );
    assert_eq!(v["ops"], 10000, "{v}");
    // The shared receiving socket and one sending socket a task.
    assert_eq!(v["fds_held"], 3);
    let e = &v["expected"];
    for section in ["syscalls", "fds_created", "fds_closed"] {
        assert_eq!(e[section], serde_json::json!({}), "{section}: {v}");
    }
    assert!(allocs(&v).is_empty());
    assert_eq!(e["next_fd_start"], e["next_fd_end"]);

    let out = workload(&["udp-loopback", "-t", "2", "--processes", "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("drop --processes"), "{stderr}");
}

#[test]
fn cputime_reads_peer_clocks_and_makes_no_fd_call() {
    let _load = load_lock();
    let v = json(&["cputime", "-t", "2", "--ops", "1000"]);
    assert_eq!(
        (v["scenario"].as_str(), v["mode"].as_str()),
        (Some("cputime"), Some("threads"))
    );
    assert_eq!(v["tasks"], 2);
    assert_eq!(v["ops"], 2000, "one clock_gettime an op: {v}");
    let per: Vec<u64> = v["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["ops"].as_u64().unwrap())
        .collect();
    assert_eq!(per, [1000, 1000]);
    assert_eq!(v["fds_held"], 0);
    // No fd system call, so the ground truth is exact with two threads: empty.
    let e = &v["expected"];
    for section in ["syscalls", "fds_created", "fds_closed"] {
        assert_eq!(e[section], serde_json::json!({}), "{section}: {v}");
    }
    assert!(allocs(&v).is_empty());
    assert_eq!(e["next_fd_start"], e["next_fd_end"]);
    assert_eq!(e["max_fds"], e["max_fds_start"]);
    assert_eq!(e["max_fds"], v["max_fds"]);

    // One thread reads its own clock.
    let v = json(&["cputime", "-t", "1", "--ops", "300", "-n", "4"]);
    assert_eq!(
        (v["ops"].as_u64(), v["fds_held"].as_u64()),
        (Some(300), Some(4))
    );
    assert_eq!(v["expected"]["syscalls"], serde_json::json!({}));

    // Another process's thread clocks are not readable: refused in one line.
    let out = workload(&["cputime", "-t", "2", "--processes", "--ops", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("drop --processes"), "{stderr}");
}
