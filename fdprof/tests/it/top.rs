//! `fdprof top` on the real kernel: per-interval figures that add up exactly to the workload
//! generator's ground truth, `-n`, the batch blocks, and bad input.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use fdprof_figures::{EventKind, Interval, Report};

/// A running `fdprof top`, its standard output read as it writes (a full pipe would stall it).
struct Top {
    child: Child,
    stdout: std::thread::JoinHandle<String>,
}

/// Starts `fdprof top ARGS` and waits until it says it is attached.
fn start_top(args: &[&str]) -> Top {
    let mut child = fdprof()
        .arg("top")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("watching"), "top did not start: {line}");
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        eprint!("{rest}");
    });
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        out.read_to_string(&mut text).unwrap();
        text
    });
    Top { child, stdout }
}

/// Waits for `top` to exit successfully and parses its JSON lines.
fn intervals(mut top: Top) -> Vec<Interval> {
    let status = top.child.wait().unwrap();
    assert!(status.success(), "top failed: {status}");
    parse_lines(&top.stdout.join().unwrap())
}

/// The intervals among a launched command's output, which shares top's stdout.
fn json_lines(stdout: &[u8]) -> Vec<Interval> {
    let text = String::from_utf8_lossy(stdout);
    let lines: String = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| format!("{l}\n"))
        .collect();
    parse_lines(&lines)
}

fn parse_lines(out: &str) -> Vec<Interval> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an Interval: {e}: {l}")))
        .collect()
}

fn calls(report: &Report, name: &str) -> u64 {
    report
        .syscalls
        .iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.calls)
}

/// Indices count up from 0 and each interval starts where the one before ended.
fn check_sequence(ivs: &[Interval]) {
    for (i, iv) in ivs.iter().enumerate() {
        assert_eq!(iv.index, i as u64);
        assert_eq!(iv.report.header.duration_ns, iv.duration_ns);
        if i > 0 {
            let before = &ivs[i - 1];
            assert_eq!(iv.start_ns, before.start_ns + before.duration_ns);
        }
    }
}

#[test]
fn intervals_add_up_to_the_generators_counts() {
    require_root();
    let _guard = kernel_lock();
    let w = start_workload(&["socket-close", "-t", "1", "--ops", "200000"]);
    let pid = w.pid.to_string();
    let top = start_top(&["-p", &pid, "--jsonl", "--interval", "200ms"]);
    w.go();
    let expected = w.finish()["expected"].clone();
    let ivs = intervals(top);
    assert!(ivs.len() > 1, "one interval only: {}", ivs.len());
    check_sequence(&ivs);
    assert_eq!(
        ivs.last().unwrap().report.header.end_reason.name(),
        "target_exited"
    );
    let expected_calls = expected["syscalls"].as_object().unwrap();
    for (name, n) in expected_calls {
        let sum: u64 = ivs.iter().map(|iv| calls(&iv.report, name)).sum();
        assert_eq!(
            sum,
            n.as_u64().unwrap(),
            "{name} over {} intervals",
            ivs.len()
        );
    }
    // Nothing else: the intervals hold the measured phase and only it.
    let all: u64 = ivs
        .iter()
        .flat_map(|iv| iv.report.syscalls.iter().map(|s| s.calls))
        .sum();
    let want: u64 = expected_calls.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(all, want);
    assert_no_programs_left();
}

#[test]
fn a_launched_command_is_watched_until_it_exits() {
    require_root();
    let _guard = kernel_lock();
    let ops = 200_000u64;
    let out = run(fdprof()
        .args(["top", "--jsonl", "--interval", "200ms", "--"])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args([
            "workload",
            "socket-close",
            "-t",
            "1",
            "--ops",
            &ops.to_string(),
        ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The workload's summary shares top's stdout: keep the JSON lines.
    let ivs = json_lines(&out.stdout);
    assert!(ivs.len() > 1, "one interval only");
    check_sequence(&ivs);
    let last = ivs.last().unwrap();
    assert_eq!(last.report.header.end_reason.name(), "command_exited");
    assert!(last.report.header.target.exit_status.is_some());
    // Only the loop calls socket(); close is also called at start-up.
    let sum = |name| ivs.iter().map(|iv| calls(&iv.report, name)).sum::<u64>();
    assert_eq!(sum("socket"), ops);
    assert!(sum("close") >= ops);
    assert_no_programs_left();
}

/// What a launched command starts is watched from its fork: the shell's child's sockets, all
/// of them, in the command's intervals.
#[test]
fn what_a_launched_command_starts_is_watched() {
    require_root();
    let _guard = kernel_lock();
    let script = format!(
        "{} workload socket-close --ops 1500 >/dev/null; true",
        env!("CARGO_BIN_EXE_fdprof")
    );
    let out = run(fdprof()
        .args(["top", "--jsonl", "--interval", "100ms", "-n", "600", "--"])
        .args(["sh", "-c", &script]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ivs = json_lines(&out.stdout);
    check_sequence(&ivs);
    let last = ivs.last().unwrap();
    assert_eq!(last.report.header.end_reason.name(), "command_exited");
    assert!(last.report.header.target.children);
    let sockets: u64 = ivs.iter().map(|iv| calls(&iv.report, "socket")).sum();
    assert_eq!(sockets, 1500);
    assert_no_programs_left();
}

/// The machine's steal so far (`/proc/stat`'s first line), ns.
fn machine_steal_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let ticks: u64 = stat
        .lines()
        .next()
        .unwrap()
        .split_ascii_whitespace()
        .nth(8)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * (1_000_000_000 / hz)
}

#[test]
fn count_stops_after_that_many_intervals() {
    require_root();
    let _guard = kernel_lock();
    let load = Load::start();
    let steal_before = machine_steal_ns();
    let out = run(fdprof().args(["top", "-n", "3", "-a", "--interval", "100ms", "--jsonl"]));
    let steal_after = machine_steal_ns();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ivs = parse_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(ivs.len(), 3);
    check_sequence(&ivs);
    // Each interval states the machine's steal over it: together, within what /proc/stat
    // counted around the whole run.
    let mut stolen = 0;
    for iv in &ivs {
        let steal = iv.report.steal.as_ref().expect("steal in every interval");
        assert!(
            steal.total_ns > 0 && steal.steal_ns <= steal.total_ns,
            "{steal:?}"
        );
        stolen += steal.steal_ns;
    }
    assert!(stolen <= steal_after - steal_before, "{stolen} ns stolen");
    // System-wide, each interval breaks its figures down per process, each pid once.
    for iv in &ivs {
        let mut pids: Vec<u32> = iv.report.processes.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), iv.report.processes.len(), "a pid twice");
    }
    // The background load is there.
    assert!(
        ivs.iter()
            .any(|iv| iv.report.processes.iter().any(|p| p.pid == load.pid()))
    );
    drop(load);
    assert_no_programs_left();
}

/// A pass that runs late (here: top stopped for 150 ms) makes the interval it ends longer and
/// delays the clock; the interval after it is as long as asked, not the few ms left to the
/// next multiple of the interval, whose figures (and steal, counted in 10 ms ticks) are noise.
#[test]
fn a_late_pass_makes_no_short_interval() {
    require_root();
    let _guard = kernel_lock();
    let load = Load::start();
    let pid = load.pid().to_string();
    let top = start_top(&["-p", &pid, "-n", "14", "--interval", "100ms", "--jsonl"]);
    let stall = |on: bool| {
        let signal = if on { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(top.child.id() as i32, signal) };
    };
    // Four stalls, each at its own phase of the clock.
    for pause in [230, 270, 310, 350] {
        std::thread::sleep(Duration::from_millis(pause));
        stall(true);
        std::thread::sleep(Duration::from_millis(150));
        stall(false);
    }
    let ivs = intervals(top);
    assert_eq!(ivs.len(), 14);
    check_sequence(&ivs);
    let ms: Vec<u64> = ivs.iter().map(|iv| iv.duration_ns / 1_000_000).collect();
    // Each interval ends a period after the last cut: none is shorter than asked, even the
    // one after a stall between a tick and its snapshot.
    assert!(ms.iter().all(|&d| d >= 99), "intervals of {ms:?} ms");
    assert!(ms.iter().any(|&d| d >= 140), "no stall seen: {ms:?} ms");
    drop(load);
    assert_no_programs_left();
}

#[test]
fn batch_prints_a_block_per_interval() {
    require_root();
    let _guard = kernel_lock();
    let out = run(fdprof()
        .args(["top", "--batch", "--interval", "100ms", "--"])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args([
            "workload", "opensock", "-t", "2", "-n", "200", "-d", "500ms",
        ])
        .stdin(Stdio::null()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let headers = text
        .lines()
        .filter(|l| l.starts_with("fdprof top - "))
        .count();
    assert!(headers > 1, "{text}");
    // Each block's header ends with the machine's steal over the interval.
    assert!(
        text.lines()
            .filter(|l| l.starts_with("fdprof top - "))
            .all(|l| l.contains(" dropped - steal ") && l.ends_with(')')),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("file_lock")).count(),
        headers,
        "{text}"
    );
    let syscall_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fd syscalls/s"))
        .collect();
    assert_eq!(syscall_lines.len(), headers, "{text}");
    assert!(
        syscall_lines.iter().any(|l| l.contains("socket ")),
        "{text}"
    );
    assert_no_programs_left();
}

#[test]
fn interrupt_ends_cleanly_after_the_last_interval() {
    require_root();
    let _guard = kernel_lock();
    let top = start_top(&["-a", "--jsonl", "--interval", "200ms"]);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(top.child.id() as i32, libc::SIGINT) };
    let started = Instant::now();
    let ivs = intervals(top);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!ivs.is_empty());
    check_sequence(&ivs);
    assert_eq!(
        ivs.last().unwrap().report.header.end_reason.name(),
        "interrupted"
    );
    assert_no_programs_left();
}

#[test]
fn a_target_that_exits_ends_top_after_its_last_interval() {
    require_root();
    let _guard = kernel_lock();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("0.7")
        .spawn()
        .unwrap();
    let top = start_top(&[
        "-p",
        &sleeper.id().to_string(),
        "--jsonl",
        "--interval",
        "200ms",
    ]);
    // Reaped here so that /proc shows it gone, not a zombie.
    sleeper.wait().unwrap();
    let ivs = intervals(top);
    assert!(!ivs.is_empty());
    assert_eq!(
        ivs.last().unwrap().report.header.end_reason.name(),
        "target_exited"
    );
    assert_no_programs_left();
}

#[test]
fn bad_input_is_refused_in_one_line() {
    require_root();
    let _guard = kernel_lock();
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
    let missing = (pid_max.trim().parse::<u64>().unwrap() + 1).to_string();
    let out = run(fdprof().args(["top", "-p", &missing, "--jsonl"]));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no process"), "{stderr}");
    assert!(out.stdout.is_empty());
    for (interval, says) in [
        ("0", "must be positive"),
        ("garbage", "not a duration"),
        ("5ms", "shorter than the shortest"),
        ("2h", "longer than the longest"),
    ] {
        let out = run(fdprof().args(["top", "-a", "--interval", interval]));
        assert_eq!(out.status.code(), Some(2), "{interval}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // clap adds a usage hint below its one error line.
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(says), "{interval}: {stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = run(fdprof().args(["top", "-a", "--slow", "0.5us"]));
    assert_eq!(out.status.code(), Some(2));
    assert_no_programs_left();
}

/// The ring-buffer events reach the intervals: a table that grows shows one expansion event per
/// growth the interval figures count, each from the old size to the new, and the target's exit
/// (its last thread) ends the stream.
#[test]
fn events_arrive_with_the_intervals() {
    require_root();
    let _guard = kernel_lock();
    let out = run(fdprof()
        .args([
            "top",
            "--jsonl",
            "--interval",
            "100ms",
            "--slow",
            "1us",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "holes", "-n", "3000", "--ops", "10"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ivs = json_lines(&out.stdout);
    let expansions: Vec<(u64, u64)> = ivs
        .iter()
        .flat_map(|iv| &iv.events)
        .filter_map(|e| match e.what {
            EventKind::Expansion {
                old_max_fds,
                new_max_fds,
                ..
            } => Some((old_max_fds, new_max_fds)),
            _ => None,
        })
        .collect();
    let counted: u64 = ivs.iter().map(|iv| iv.report.table.expansions).sum();
    assert!(counted > 0, "the table did not grow");
    assert_eq!(expansions.len() as u64, counted);
    assert!(
        expansions.iter().all(|(old, new)| old < new),
        "{expansions:?}"
    );
    assert_eq!(
        expansions.last().unwrap().1,
        4096,
        "3000 fds take a 4096-slot table"
    );
    let exits = ivs
        .iter()
        .flat_map(|iv| &iv.events)
        .filter(|e| matches!(e.what, EventKind::Exit { process: true }))
        .count();
    assert_eq!(exits, 1, "the workload's process exits once");
    assert_no_programs_left();
}

#[test]
fn system_wide_batch_blocks_list_processes() {
    require_root();
    let _guard = kernel_lock();
    let _load = Load::start();
    let out = run(fdprof().args(["top", "-n", "3", "-a", "--interval", "200ms", "--batch"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The background load makes fd syscalls: some block has its process table.
    let heads = text
        .lines()
        .filter(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.starts_with(&["pid", "comm", "file_lock/s", "wait/s", "fd"])
        })
        .count();
    assert!(heads >= 1, "{text}");
    assert_no_programs_left();
}
