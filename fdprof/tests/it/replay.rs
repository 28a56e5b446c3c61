//! `fdprof replay --synthetic`: every pattern replays under every POSIX model with no mismatch
//! (the generator's fds are the lowest free ones, as the kernel's), the seed figure of Linus'
//! loop holds (the linear scan reads tens of times more words than the full-words bitmap), and
//! bad arguments are one line. A recording of a few KB that asks for minutes of work (or a
//! trace-jsonl export a thousand times its size) is refused in one line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fdprof_common::trace::op;
use fdprof_recording::trace::{ENCODING, TableSnapshot, Trace, TraceTable, codec};

use crate::common::{fdprof, load_lock, tmp};
use serde_json::Value;

fn replay(args: &[&str]) -> Value {
    let out = fdprof()
        .args(["replay", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_pattern_replays_without_mismatch() {
    let _load = load_lock();
    for pattern in ["linus-loop", "opensock", "holes", "dup2-worst"] {
        let r = replay(&[
            "--synthetic",
            pattern,
            "--fds",
            "3000",
            "--ops",
            "5000",
            "--kernel",
            "6.1.0-18-amd64",
        ]);
        let models = r["models"].as_array().unwrap();
        let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["mainline (fb61)", "linear", "fb613", "viro", "fastalloc"],
            "{pattern}"
        );
        for m in models {
            assert!(m["allocations"].as_u64().unwrap() >= 5000, "{pattern}: {m}");
            assert_eq!(m["alloc_failures"], 0, "{pattern}: {m}");
            if m["name"] != "fastalloc" {
                assert_eq!(m["model_mismatch"], 0, "{pattern}: {}", m["name"]);
            }
        }
    }
}

#[test]
fn linus_loop_linear_reads_tens_of_times_more_words_than_fb61() {
    let _load = load_lock();
    let r = replay(&[
        "--synthetic",
        "linus-loop",
        "--ops",
        "100000",
        "--model",
        "fb61",
        "--kernel",
        "4.3",
    ]);
    let models = r["models"].as_array().unwrap();
    assert_eq!(models[0]["name"], "mainline (linear)");
    let ratio = models[1]["vs_mainline"]["words"].as_f64().unwrap();
    // fb61 reads 1/64 of linear's words on a dense table, plus one open word each time.
    assert!(ratio > 1.0 / 80.0 && ratio < 1.0 / 40.0, "{ratio}");
}

#[test]
fn bad_arguments_are_one_line() {
    let _load = load_lock();
    for args in [
        &["--synthetic", "holes", "--fds", "0"][..],
        &["--synthetic", "holes", "--ops", "1000000000"],
        &["--synthetic", "holes", "--kernel", "banana"],
        &["--synthetic", "nope"],
    ] {
        let out = fdprof().arg("replay").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if !args.contains(&"nope") {
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        }
    }
}

/// A recording whose fd trace is one table's snapshot (`open`, `max_fds`) and `rows`, written
/// to `name`: its path and size.
fn traced_recording(name: &str, open: u32, max_fds: u32, rows: &[codec::Row]) -> (PathBuf, u64) {
    let mut rec = fdprof_recording::testdata::recording();
    rec.kernel_release = "6.12.0".into();
    rec.trace = Some(Trace {
        encoding: ENCODING.into(),
        events: rows.len() as u64,
        limit: 5_000_000,
        over_limit: 0,
        lost: 0,
        tables: vec![TraceTable { pid: 1, addr: None }],
        snapshots: vec![TableSnapshot {
            table: 0,
            from_ns: 0,
            until_ns: 0,
            open: vec![[0, open]],
            cloexec: Vec::new(),
            next_fd: open,
            max_fds,
        }],
        notes: Vec::new(),
        data: codec::encode(rows),
    });
    let path = tmp(name);
    rec.write(std::fs::File::create(&path).unwrap()).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    (path, size)
}

/// The audit's file: `open` fds open (a million) in a table of 2^20, then 100,000 execs (each
/// makes a replay visit every open fd, and every word of the table under every model), in
/// 12 KB (the audit's file, 18 KB, held a few more stacks).
fn exec_storm(name: &str, open: u32) -> (PathBuf, u64) {
    let rows: Vec<codec::Row> = (1..=100_000u64)
        .map(|i| codec::Row {
            exit_ns: i * 1000,
            enter_ns: i * 1000,
            tid: 1,
            op: op::EXEC,
            syscall: u8::MAX,
            ..codec::Row::default()
        })
        .collect();
    traced_recording(name, open, 1 << 20, &rows)
}

/// `fdprof ARGS FILE`: its exit code, standard error and how long it took.
fn timed(args: &[&str], file: &Path) -> (Option<i32>, String, Duration) {
    let began = Instant::now();
    let out = fdprof().args(args).arg(file).output().unwrap();
    let took = began.elapsed();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

/// A debug build's bound on what takes about a second in release (the refusal comes at the
/// work bound, not at the end of the minutes the file asks for).
const REFUSED_WITHIN: Duration = Duration::from_secs(20);

#[test]
fn a_small_recording_asking_for_minutes_of_replay_is_refused_in_one_line() {
    let _load = load_lock();
    let (file, size) = exec_storm("exec-storm.data", 1_000_000);
    assert!(size < 32 << 10, "{size} bytes");
    // Ordering the rows goes through the million open fds at each exec; with one fd open, the
    // models still read the 16384 words of the table at each.
    let (sparse, _) = exec_storm("exec-storm-sparse.data", 1);
    for (file, args, stopped) in [
        (&file, &["replay"][..], "while ordering its rows"),
        (
            &sparse,
            &["replay", "--model", "mainline", "--json"],
            "in the mainline",
        ),
    ] {
        let (code, err, took) = timed(args, file);
        assert!(matches!(code, Some(1 | 2)), "{args:?}: {code:?} {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("its fd trace would take more than")
                && err.contains("operations to replay")
                && err.contains("256 a byte")
                && err.contains(stopped),
            "{err}"
        );
        assert!(took < REFUSED_WITHIN, "{args:?} took {took:?}");
    }
    // A report reads the trace's rows once (close loops): done, whatever the table's size.
    let (code, err, took) = timed(&["report"], &file);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < REFUSED_WITHIN, "report took {took:?}");
    // Its JSON lines (~60 bytes an exec) are hundreds of times the file: said before writing.
    let out = tmp("exec-storm.jsonl");
    let (code, err, _) = timed(
        &[
            "export",
            "--format",
            "trace-jsonl",
            "-o",
            out.to_str().unwrap(),
        ],
        &file,
    );
    assert_eq!(code, Some(0), "{err}");
    let first = err.lines().next().unwrap_or_default();
    let written = std::fs::metadata(&out).unwrap().len();
    assert!(first.contains("the fd trace's 100000 rows make"), "{err}");
    assert!(
        first.contains(&format!("{} times the", written / size)),
        "{err}"
    );
}

#[test]
fn a_trace_jsonl_export_far_larger_than_its_recording_is_refused_with_its_size() {
    let _load = load_lock();
    // 300,000 allocs and closes of fd 3: ~170 bytes a line, a few bytes a row deflated.
    let rows: Vec<codec::Row> = (1..=300_000u64)
        .map(|i| codec::Row {
            exit_ns: i * 1000,
            enter_ns: i * 1000 - 500,
            tid: 1,
            op: if i % 2 == 1 { op::ALLOC } else { op::RELEASE },
            syscall: 0,
            fd: 3,
            next_fd: 3,
            max_fds: 64,
            ..codec::Row::default()
        })
        .collect();
    let (file, size) = traced_recording("alloc-storm.data", 3, 64, &rows);
    let out = tmp("alloc-storm.jsonl");
    let _ = std::fs::remove_file(&out);
    let args = [
        "export",
        "--format",
        "trace-jsonl",
        "-o",
        out.to_str().unwrap(),
    ];
    let (code, err, _) = timed(&args, &file);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("the fd trace's 300000 rows make") && err.contains("MiB of JSON lines"),
        "{err}"
    );
    assert!(err.contains("give --max-output"), "{err}");
    assert!(!out.exists(), "a refused export wrote {}", out.display());
    // The size it states is the size it writes once allowed.
    let stated: f64 = err
        .split("rows make ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {err}"));
    let allowed = ["--max-output", "1G"];
    let (code, err, _) = timed(&[&args[..], &allowed[..]].concat(), &file);
    assert_eq!(code, Some(0), "{err}");
    let written = std::fs::metadata(&out).unwrap().len() as f64 / (1 << 20) as f64;
    assert!(
        (written - stated).abs() < 0.1,
        "{written} MiB written, {stated} stated"
    );
    assert!(
        written > 16.0 && size < 1 << 20,
        "{written} MiB of {size} bytes"
    );
}
