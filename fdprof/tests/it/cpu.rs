//! On-CPU sampling (`record --cpu`) against real programs on the running kernel: a program
//! that spins in one known function, checked against Debian's `perf record`; the seed figure
//! (spinning under alloc vs close) checked against the contention stacks of the same run; and
//! `flamegraph --cpu` refusing a recording without samples. Run as root.

use std::process::Command;

use crate::common::daemon::{poll, spinning_under_daemon};
use crate::common::{
    assert_no_programs_left, cc, fdprof, kernel_lock, parse_svg, read_json, require_root, run, tmp,
};
use serde_json::Value;

/// Share of a recording's on-CPU samples taken in user mode inside `function` (the innermost
/// user frame).
fn share_in(rec: &Value, function: &str) -> f64 {
    let samples = rec["cpu"]["samples"].as_array().expect("on-CPU samples");
    let count = |s: &Value| s["count"].as_u64().unwrap() as f64;
    let all: f64 = samples.iter().map(count).sum();
    let inside: f64 = samples
        .iter()
        .filter(|s| {
            s["kernel_stack"].as_array().unwrap().is_empty()
                && s["user_stack"][0]["function"] == function
        })
        .map(count)
        .sum();
    assert!(all >= 50.0, "too few samples to judge: {all}");
    inside / all
}

/// `perf report`'s share of samples whose leaf symbol is `function`.
fn perf_share(data: &std::path::Path, function: &str) -> f64 {
    let out = run(Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "symbol",
            "-g",
            "none",
            "-i",
        ])
        .arg(data));
    assert!(out.status.success(), "perf report failed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.split_whitespace().any(|word| word == function))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum::<f64>()
        / 100.0
}

#[test]
fn samples_land_where_the_program_spins_as_perf_says() {
    require_root();
    let _k = kernel_lock();
    let spin = tmp("spin");
    cc("spin.c", &spin, &["-fno-omit-frame-pointer"]);
    let rec_path = tmp("spin.data");
    let out = run(fdprof()
        .args(["record", "--cpu", "--freq", "99", "-o"])
        .arg(&rec_path)
        .arg("--")
        .arg(&spin)
        .arg("3"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_programs_left();
    let rec = read_json(&rec_path);
    let ours = share_in(&rec, "spin_here");
    assert!(
        ours >= 0.9,
        "only {:.1}% of fdprof's samples in spin_here",
        ours * 100.0
    );

    let perf_data = tmp("spin.perf.data");
    let out = run(Command::new("perf")
        .args(["record", "-F", "99", "-g", "-q", "-o"])
        .arg(&perf_data)
        .arg("--")
        .arg(&spin)
        .arg("3"));
    assert!(
        out.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = perf_share(&perf_data, "spin_here");
    assert!(
        (ours - theirs).abs() <= 0.05,
        "fdprof {:.1}% vs perf {:.1}% of samples in spin_here",
        ours * 100.0,
        theirs * 100.0
    );
}

/// The share of alloc in `(alloc, close)`, `None` when both are 0.
fn alloc_part(alloc: f64, close: f64) -> Option<f64> {
    (alloc + close > 0.0).then(|| alloc / (alloc + close))
}

/// One recording of opensock with on-CPU samples, its exact checks made: alloc's part of the
/// fd-table spinning samples and of the file_lock wait, with the sample counts.
#[derive(Clone, Copy)]
struct Split {
    sampled: f64,
    waited: f64,
    alloc: f64,
    close: f64,
}

fn record_split(rec_path: &std::path::Path) -> Split {
    let out = run(fdprof()
        .args(["record", "--cpu", "--freq", "9999", "-o"])
        .arg(rec_path)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "opensock", "-t", "2", "-d", "4s"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_programs_left();
    let report = run(fdprof().args(["report", "--json"]).arg(rec_path));
    assert!(report.status.success());
    let r: Value = serde_json::from_slice(&report.stdout).unwrap();
    let cpu = &r["cpu"];
    let row = |op: &str| {
        cpu["by_operation"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["operation"] == op)
            .unwrap_or_else(|| panic!("no {op} row"))
            .clone()
    };
    let spin = |op: &str| row(op)["spinning"]["samples"].as_u64().unwrap() as f64;
    let (alloc, close) = (spin("alloc"), spin("close"));
    // The split is what the section shows: both parts add up to the fd-table spinning.
    assert_eq!(
        alloc + close + spin("other"),
        cpu["fd_table_spinning"]["samples"].as_u64().unwrap() as f64
    );
    // `report --cpu`: the section alone, still with the probe modes and the drops.
    let text = run(fdprof().args(["report", "--cpu"]).arg(rec_path));
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("under alloc") && text.contains("under close"),
        "{text}"
    );
    assert!(
        text.contains("probe mode") && text.contains("drops"),
        "{text}"
    );
    assert!(!text.contains("fd-table activity"), "{text}");

    // The independent figure: file_lock wait by operation, from the contention probes.
    let wait = |op: &str| {
        r["contention"]["by_lock_operation"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["lock_kind"] == "file_lock" && l["operation"] == op)
            .map(|l| l["total_wait_ns"].as_u64().unwrap() as f64)
            .sum::<f64>()
    };
    let (Some(sampled), Some(waited)) = (
        alloc_part(alloc, close),
        alloc_part(wait("alloc"), wait("close")),
    ) else {
        panic!("no spinning samples ({alloc}, {close}) or no file_lock waits under alloc/close");
    };
    Split {
        sampled,
        waited,
        alloc,
        close,
    }
}

impl Split {
    /// Why the split is not judged sound, if it is not.
    fn unsound(&self) -> Option<String> {
        let Split {
            sampled,
            waited,
            alloc,
            close,
        } = *self;
        if alloc + close < 50.0 {
            return Some(format!(
                "too few spinning samples to judge a split: {alloc} alloc, {close} close"
            ));
        }
        for (what, part) in [("spinning samples", sampled), ("file_lock wait", waited)] {
            if !(0.15..=0.85).contains(&part) {
                return Some(format!(
                    "alloc's part of the {what} is {part:.2}: one side of the split is missing \
                     ({alloc} alloc, {close} close samples)"
                ));
            }
        }
        ((sampled - waited).abs() > 0.35).then(|| {
            format!(
                "alloc's part: {sampled:.2} of spinning samples vs {waited:.2} of file_lock wait \
                 ({alloc} alloc, {close} close samples)"
            )
        })
    }
}

// Each op is one close and one socket, so both sides take the lock equally often and wait for
// each other: the seeds' split (52.7% close, 46.4% alloc) has both parts, and so must both
// figures here. On a quiet host they agree closely (0.50 of the spinning samples against 0.54
// of the wait, some 2,600 samples at ~10 kHz for 4 s). They measure different things, though: a
// paravirtual spinlock waiter that spins too long halts its vCPU, and a halted vCPU takes no
// samples while its wait goes on. When the host preempts a lock holder's vCPU, the other side's
// wait grows without samples: one clean-clone run here saw 0.69 against 0.39. So the check is
// that each part is real in both figures, and that the split is not swapped or one-sided (0.15
// each way; 0.35 apart at most), in one of three runs: the host decides how much each is
// preempted.
#[test]
fn spinning_splits_between_alloc_and_close_as_the_contention_does() {
    require_root();
    let _k = kernel_lock();
    let rec_path = tmp("opensock.data");
    let mut why = String::new();
    for _ in 0..3 {
        match record_split(&rec_path).unsound() {
            None => return,
            Some(reason) => {
                eprintln!("not judged this time: {reason}");
                why = reason;
            }
        }
    }
    panic!("{why}");
}

#[test]
fn flamegraph_cpu_without_samples_fails_in_one_line() {
    require_root();
    let _k = kernel_lock();
    let rec_path = tmp("nocpu.data");
    let out = run(fdprof()
        .args(["record", "-o"])
        .arg(&rec_path)
        .args(["--", "/bin/true"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(fdprof()
        .args(["flamegraph", "--cpu", "-o"])
        .arg(tmp("nocpu.svg"))
        .arg(&rec_path));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no on-CPU samples"), "{err}");
    assert!(!tmp("nocpu.svg").exists());
    let out = run(fdprof().args(["report", "--cpu"]).arg(&rec_path));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no on-CPU samples"), "{err}");
}

/// `top --cpu`: every interval carries its own on-CPU samples, and they land where the
/// program spins.
#[test]
fn top_intervals_carry_their_on_cpu_samples() {
    require_root();
    let _k = kernel_lock();
    let spin = tmp("spin-top");
    cc("spin.c", &spin, &["-fno-omit-frame-pointer"]);
    let out = run(fdprof()
        .args(["top", "--jsonl", "--cpu", "--freq", "199", "-n", "2", "--"])
        .arg(&spin)
        .arg("5"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_programs_left();
    let intervals: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(intervals.len(), 2);
    for iv in &intervals {
        let cpu = &iv["cpu"];
        let samples = cpu["samples"].as_u64().unwrap();
        // ~199 a second of one spinning thread, less what a loaded machine gives it.
        assert!(samples >= 30, "{samples} samples in a 1 s interval");
        let top = &cpu["top_stacks"][0];
        assert_eq!(top["user_stack"][0]["function"], "spin_here");
        let share = top["samples"]["share_of_all"].as_f64().unwrap();
        assert!(share >= 0.9, "{:.1}% in spin_here", share * 100.0);
    }
}

/// `daemon --cpu`: the report of a window has the process's on-CPU samples where it spins,
/// and `/flamegraph.svg?cpu=1` draws them.
#[test]
fn daemon_samples_its_processes_on_cpu() {
    require_root();
    let _k = kernel_lock();
    let (mut target, daemon) = spinning_under_daemon("spin-daemon");
    let found = poll(std::time::Duration::from_secs(20), || {
        let (code, body) = daemon.get("/report.json");
        // 503 until the first interval ends.
        if code != 200 {
            return Err(body);
        }
        let report: Value = serde_json::from_str(&body).unwrap();
        let cpu = &report["cpu"];
        (cpu["samples"].as_u64().unwrap_or(0) >= 100)
            .then(|| cpu.clone())
            .ok_or(body)
    });
    let cpu = found.unwrap_or_else(|body| panic!("too few on-CPU samples: {body}"));
    let top = &cpu["top_stacks"][0];
    assert_eq!(top["user_stack"][0]["function"], "spin_here", "{cpu}");
    assert!(
        top["samples"]["share_of_all"].as_f64().unwrap() >= 0.9,
        "{cpu}"
    );
    let (code, svg) = daemon.get("/flamegraph.svg?cpu=1&op=all");
    assert_eq!(code, 200, "{svg}");
    assert!(svg.contains("spin_here"), "{svg}");
    parse_svg(&svg);
    assert_eq!(daemon.get("/flamegraph.svg?cpu=maybe").0, 400);
    drop(daemon);
    let _ = target.kill();
    let _ = target.wait();
    assert_no_programs_left();
}

/// A daemon config asking for an impossible sampling frequency is refused in one line.
#[test]
fn daemon_config_with_a_bad_frequency_fails_in_one_line() {
    let config = tmp("bad-freq.toml");
    std::fs::write(&config, "comm = [\"fdpd-cpu\"]\ncpu = true\nfreq = 0\n").unwrap();
    let out = run(fdprof()
        .args(["daemon", "--listen", "127.0.0.1:1", "--config"])
        .arg(&config));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // The config's values are never quoted back (a file may hold what it should not).
    assert!(err.contains("freq is not 1 to 100000"), "{err}");
}
