//! `record --interval`'s series on the real kernel: its samples add up exactly to the
//! recording's totals and the workload's ground truth; `report` shows the rates over time;
//! `top --from` plays a series back without privileges, and refuses a recording without one.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::common::*;
use fdprof_figures::{Interval, Report};
use fdprof_recording::{
    Recording,
    series::{Sample, SampleSyscall, Series},
};

/// The calls to `name` in each of `samples`.
fn sample_calls(samples: &[serde_json::Value], name: &str) -> Vec<u64> {
    samples
        .iter()
        .map(|s| {
            s["syscalls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["name"] == name)
                .map(|c| c["calls"].as_u64().unwrap())
                .sum()
        })
        .collect()
}

/// `top --from PATH --jsonl` (through `prefix`, e.g. a privilege drop): its intervals.
fn play_back(prefix: &mut Command, path: &std::path::Path) -> Vec<Interval> {
    let out = run(prefix
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["top", "--jsonl", "--from"])
        .arg(path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an Interval: {e}: {l}")))
        .collect()
}

fn calls(iv: &Interval, name: &str) -> u64 {
    iv.report
        .syscalls
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.calls)
        .sum()
}

#[test]
fn a_series_adds_up_to_the_recording_and_plays_back() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("series.data");
    let ops = 400_000u64;
    let record = run(fdprof()
        .args(["record", "--interval", "200ms", "-o"])
        .arg(&out)
        .args([
            "--",
            env!("CARGO_BIN_EXE_fdprof"),
            "workload",
            "socket-close",
            "-t",
            "1",
            "--ops",
            &ops.to_string(),
            "--json",
        ]));
    assert!(record.status.success());
    let truth: serde_json::Value = serde_json::from_slice(&record.stdout).unwrap();
    assert_eq!(truth["expected"]["syscalls"]["socket"], ops);
    let rec = read_json(&out);
    let series = &rec["series"];
    assert_eq!(series["interval_ns"], 200_000_000);
    let samples = series["samples"].as_array().unwrap();
    assert!(samples.len() >= 2, "{} intervals", samples.len());
    for name in ["socket", "close"] {
        let total = syscall(&rec, name).unwrap()["calls"].as_u64().unwrap();
        assert_eq!(
            sample_calls(samples, name).iter().sum::<u64>(),
            total,
            "{name}"
        );
    }
    assert!(syscall(&rec, "socket").unwrap()["calls"].as_u64().unwrap() >= ops);
    // Each interval starts where the one before ended.
    for w in samples.windows(2) {
        let end = w[0]["start_ns"].as_u64().unwrap() + w[0]["duration_ns"].as_u64().unwrap();
        assert_eq!(w[1]["start_ns"].as_u64().unwrap(), end);
    }
    let bytes = std::fs::metadata(&out).unwrap().len();
    eprintln!("{} samples, recording {bytes} bytes", samples.len());

    let text = run(fdprof().arg("report").arg(&out));
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("== rates over time (every 200 ms) =="),
        "{text}"
    );
    let json = run(fdprof().args(["report", "--json"]).arg(&out));
    let report: Report = serde_json::from_slice(&json.stdout).unwrap();
    let rates = report.rates.expect("rates in report --json");
    assert_eq!(rates.rows.len(), samples.len());
    assert!(rates.rows.iter().any(|r| r.fd_syscalls_per_s > Some(0.0)));

    // Played back as nobody, from a copy nobody can read.
    let copy = tmp("series-copy.data");
    std::fs::copy(&out, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut nobody = Command::new("setpriv");
    nobody.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]);
    let ivs = play_back(&mut nobody, &copy);
    assert_eq!(ivs.len(), samples.len());
    for name in ["socket", "close"] {
        let played: Vec<u64> = ivs.iter().map(|iv| calls(iv, name)).collect();
        assert_eq!(played, sample_calls(samples, name), "{name}");
    }
    assert_no_programs_left();
}

/// A recording with a hand-made series of three intervals.
fn with_series() -> Recording {
    let mut rec = fdprof_recording::testdata::recording();
    rec.end_reason = fdprof_figures::EndReason::Interrupted;
    let sample = |i: u64, calls: u64| Sample {
        start_ns: i * 1_000_000,
        duration_ns: 1_000_000,
        syscalls: vec![SampleSyscall {
            name: "socket".into(),
            calls,
            errors: 0,
        }],
        ..Default::default()
    };
    rec.series = Some(Series {
        interval_ns: 1_000_000,
        samples: vec![sample(0, 5), sample(1, 0), sample(2, 7)],
    });
    rec
}

#[test]
fn top_from_plays_every_interval_and_stops_at_n() {
    let path = tmp("hand-made.data");
    std::fs::write(&path, serde_json::to_vec(&with_series()).unwrap()).unwrap();
    let ivs = play_back(&mut Command::new("env"), &path);
    let played: Vec<(u64, u64)> = ivs
        .iter()
        .map(|iv| (iv.index, calls(iv, "socket")))
        .collect();
    assert_eq!(played, [(0, 5), (1, 0), (2, 7)]);
    let ends: Vec<_> = ivs.iter().map(|iv| iv.report.header.end_reason).collect();
    use fdprof_figures::EndReason::{Duration, Interrupted};
    assert_eq!(
        ends,
        [Duration, Duration, Interrupted],
        "the recording's at the end"
    );
    let out = run(fdprof()
        .args(["top", "--batch", "-n", "2", "--from"])
        .arg(&path));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("fdprof top - ").count(), 2, "{text}");
}

#[test]
fn top_from_a_recording_without_a_series_fails_in_one_line() {
    let path = tmp("no-series.data");
    std::fs::write(
        &path,
        serde_json::to_vec(&fdprof_recording::testdata::recording()).unwrap(),
    )
    .unwrap();
    let out = run(fdprof().args(["top", "--jsonl", "--from"]).arg(&path));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("record --interval"), "{err}");
    let missing = run(fdprof().args(["top", "--jsonl", "--from", "/nonexistent.data"]));
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(missing.stderr).unwrap().lines().count(),
        1
    );
}
