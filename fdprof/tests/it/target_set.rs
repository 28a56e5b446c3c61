//! One program set for many processes (the target set in the kernel): the daemon following 32
//! processes of one name, some started before it, some after, some living a few ms; 300
//! short-lived processes; `record`/`top` with `-p` given twice; `--children`. Every count is
//! compared with what the workloads know they did.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, bpf_programs_held, fdprof_as, fdprof_named, poll};
use crate::common::prometheus::{Prometheus, sample_values};
use crate::common::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `socket-close --ops ops` as `comm` to its end, without waiting for a signal: a
/// process that lives a few milliseconds. Its pid.
fn short_lived(comm: &str, ops: u64) -> u32 {
    let mut child = fdprof_as(comm)
        .args(["workload", "socket-close", "--ops", &ops.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    pid
}

#[test]
fn thirty_two_processes_of_one_name_are_counted_exactly_each_and_all() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-set32";
    let ops = |i: u64| 200 + 37 * i;
    let mut expected: BTreeMap<u32, u64> = BTreeMap::new();
    // Ten ready before the daemon starts: found in /proc and added by user space.
    let early: Vec<(Waiting, u64)> = (0..10)
        .map(|i| {
            (
                workload_as(comm, &["socket-close", "--ops", &ops(i).to_string()]),
                ops(i),
            )
        })
        .collect();
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "250ms"]);
    let prometheus = Prometheus::start(&[daemon.addr]);
    daemon.wait_metric("fdprof_targets", 10.0);
    let held = bpf_programs_held(daemon.pid());
    // Twelve started after it, held ready; ten that run straight through in a few ms (they
    // join at their exec, in the kernel, before their first instruction).
    let late: Vec<(Waiting, u64)> = (10..22)
        .map(|i| {
            (
                workload_as(comm, &["socket-close", "--ops", &ops(i).to_string()]),
                ops(i),
            )
        })
        .collect();
    for i in 22..32 {
        let began = Instant::now();
        let pid = short_lived(comm, ops(i));
        eprintln!("pid {pid} lived {:?}", began.elapsed());
        expected.insert(pid, ops(i));
    }
    for (w, n) in early.into_iter().chain(late) {
        let pid = w.pid;
        w.go();
        assert_eq!(w.finish()["expected"]["fds_created"]["socket"], n);
        expected.insert(pid, n);
    }
    assert_eq!(expected.len(), 32);
    let total: u64 = expected.values().sum();
    let series = format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}");
    prometheus.wait_for(&series, TIMEOUT, |r| sample_values(r) == [total as f64]);
    daemon.wait_metric("fdprof_targets", 0.0);
    // Each process apart, as the daemon's running total keeps them.
    let (code, body) = daemon.get("/report.json");
    assert_eq!(code, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sockets_by_pid(&report), expected, "{}", daemon.log());
    // One program set throughout, whatever the number of processes.
    assert_eq!(bpf_programs_held(daemon.pid()), held);
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();
}

/// A workload run as `comm`, waiting for `go()`.
fn workload_as(comm: &str, args: &[&str]) -> Waiting {
    start_workload_with(fdprof_as(comm), args)
}

#[test]
fn three_hundred_short_lived_processes_leave_counters_rising_and_memory_flat() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-churn";
    let ops = 20u64;
    // 100 ms intervals: the history of 300 intervals per name is full after 30 s, a third of
    // the way through, and from then on memory must stay flat.
    let mut daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "100ms"]);
    daemon.wait_line("INFO", &format!("no process named {comm} is running"));
    let held = bpf_programs_held(daemon.pid());
    assert!(held > 0);
    let series = format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}");
    let mut last = 0.0;
    let mut rss = Vec::new();
    // 300 processes over about a minute: 5 a second.
    for i in 0..300u64 {
        short_lived(comm, ops);
        std::thread::sleep(Duration::from_millis(200));
        if i % 10 == 9 {
            let now = daemon.metric(&series).unwrap_or(0.0);
            assert!(now >= last, "{series} fell from {last} to {now}");
            last = now;
            assert_eq!(
                bpf_programs_held(daemon.pid()),
                held,
                "programs loaded changed"
            );
            rss.push(rss_kb(daemon.pid()));
        }
    }
    poll(TIMEOUT, || match daemon.metric(&series) {
        Some(v) if v == (300 * ops) as f64 => Ok(()),
        other => Err(format!("{series} = {other:?}, not {}", 300 * ops)),
    })
    .unwrap();
    // Flat: the last third no higher than the middle third's peak by more than 8 MB. The
    // history of 300 intervals fills during the first third; how much it holds grows with the
    // stacks' depth (whole user stacks hold some 16 frames where a frame-pointer walk of this
    // program held 2), so only a full one is judged.
    eprintln!("daemon RSS (kB) every 10 processes: {rss:?}");
    let third = rss.len() / 3;
    let early = *rss[third..2 * third].iter().max().unwrap();
    let late = *rss[2 * third..].iter().max().unwrap();
    assert!(
        late <= early + 8 * 1024,
        "RSS rose from {early} kB to {late} kB: {rss:?}"
    );
    assert!(daemon.stop().success());
    assert_no_programs_left();
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn record_and_top_with_two_pids_count_each_process_exactly() {
    require_root();
    let _guard = kernel_lock();
    for top in [false, true] {
        let a = start_workload(&["socket-close", "--ops", "3000"]);
        let b = start_workload(&["socket-close", "--ops", "5000"]);
        let (pa, pb) = (a.pid.to_string(), b.pid.to_string());
        let out = tmp(if top {
            "set-top.jsonl"
        } else {
            "set-record.json"
        });
        let data = tmp("set-record.data");
        let mut profiler = if top {
            let mut top = fdprof()
                .args([
                    "top",
                    "-p",
                    &pa,
                    "-p",
                    &pb,
                    "--jsonl",
                    "--interval",
                    "200ms",
                ])
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // Its first line once attached, the set filled.
            let mut stderr = BufReader::new(top.stderr.take().unwrap());
            let mut line = String::new();
            stderr.read_line(&mut line).unwrap();
            assert!(line.starts_with("fdprof: watching"), "{line}");
            // The rest is read to its end: top never writes to a closed pipe.
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            top
        } else {
            start_record(&["-p", &pa, "-p", &pb, "-o", data.to_str().unwrap()])
        };
        a.go();
        b.go();
        let (a_pid, b_pid) = (a.pid, b.pid);
        let (ea, eb) = (a.finish(), b.finish());
        // Both exited: the profile ends by itself.
        let status = profiler.wait().unwrap();
        assert!(status.success(), "{status}");
        let mut got: BTreeMap<u32, u64> = BTreeMap::new();
        if top {
            let text = std::fs::read_to_string(&out).unwrap();
            for line in text.lines() {
                let interval: Value = serde_json::from_str(line).unwrap();
                for (pid, n) in sockets_by_pid(&interval) {
                    *got.entry(pid).or_default() += n;
                }
            }
        } else {
            let report = run(fdprof().args(["report", "--json", data.to_str().unwrap()]));
            let report: Value = serde_json::from_slice(&report.stdout).unwrap();
            assert_eq!(report["target"]["kind"], "pids");
            assert_eq!(report["target"]["pids"].as_array().map(Vec::len), Some(2));
            got = sockets_by_pid(&report);
        }
        got.retain(|_, n| *n > 0);
        let want: BTreeMap<u32, u64> = [
            (
                a_pid,
                ea["expected"]["fds_created"]["socket"].as_u64().unwrap(),
            ),
            (
                b_pid,
                eb["expected"]["fds_created"]["socket"].as_u64().unwrap(),
            ),
        ]
        .into();
        assert_eq!(got, want, "top: {top}");
    }
    assert_no_programs_left();
}

#[test]
fn children_are_followed_from_their_fork_only_with_children() {
    require_root();
    let _guard = kernel_lock();
    let workload = fdprof_named("fdpd-child");
    for children in [true, false] {
        let go = tmp(&format!("children-{children}.go"));
        let _ = std::fs::remove_file(&go);
        // A parent that, once told, starts a workload as its child (fork + exec).
        let mut parent = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while [ ! -e {go} ]; do sleep 0.05; done; {w} workload socket-close --ops 1500 >/dev/null",
                go = go.display(),
                w = workload.display()
            ))
            .spawn()
            .unwrap();
        let pid = parent.id().to_string();
        let data = tmp(&format!("children-{children}.data"));
        let mut args = vec!["-p", &pid, "-o", data.to_str().unwrap()];
        if children {
            args.push("--children");
        }
        // Attached (and the set filled) once it says so.
        let mut record = start_record(&args);
        std::fs::write(&go, "").unwrap();
        assert!(parent.wait().unwrap().success());
        assert!(record.wait().unwrap().success());
        let report = run(fdprof().args(["report", "--json", data.to_str().unwrap()]));
        let report: Value = serde_json::from_slice(&report.stdout).unwrap();
        let sockets: u64 = if children {
            sockets_by_pid(&report).values().sum()
        } else {
            syscall(&report, "socket").map_or(0, |s| s["calls"].as_u64().unwrap())
        };
        assert_eq!(
            sockets,
            if children { 1500 } else { 0 },
            "children: {children}"
        );
    }
    assert_no_programs_left();
}

/// Entries of the loaded map named `name` (bpftool reads it, independently of fdprof).
fn map_entries(name: &str) -> usize {
    let out = run(Command::new("bpftool").args(["-j", "map", "dump", "name", name]));
    let dump: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    dump.as_array().map_or(0, Vec::len)
}

#[test]
fn a_departed_processs_sites_are_freed_once_read_and_its_waits_kept() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-sites";
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "250ms"]);
    daemon.wait_line("INFO", &format!("no process named {comm} is running"));
    // Two threads on one table, on two CPUs: file_lock waits at sites of its own.
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "3s"]);
    let pid = w.pid;
    daemon.wait_line("INFO", &format!("profiling pid {pid} ({comm})"));
    w.go();
    poll(TIMEOUT, || match map_entries("SITE_INDEX") {
        0 => Err("no contention site yet"),
        _ => Ok(()),
    })
    .unwrap();
    w.finish();
    daemon.wait_line(
        "INFO",
        &format!("stopped profiling pid {pid} ({comm}): it exited"),
    );
    // Read at the next interval, then freed: none left in the kernel, every wait kept.
    poll(TIMEOUT, || {
        match (map_entries("SITE_INDEX"), map_entries("SITE_OWNERS")) {
            (0, 0) => Ok(()),
            left => Err(format!("sites left: {left:?}")),
        }
    })
    .unwrap();
    let (code, body) = daemon.get("/report.json");
    assert_eq!(code, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    let process = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in {body}"));
    assert!(
        process["file_lock_count"].as_u64().unwrap() > 0,
        "{process}"
    );
    drop(daemon);
    assert_no_programs_left();
}
