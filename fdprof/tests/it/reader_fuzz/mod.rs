//! The recording reader and every renderer on hostile input, and `fdprof report` / `flamegraph`
//! on hostile files. No kernel needed.
//!
//! Pass condition, for every case: no panic, no hang, and memory bounded. The cases run in a
//! worker process (this test binary run again with `FDPROF_READER_FUZZ` set) whose address space
//! is limited to 1 GiB (`RLIMIT_AS`, set between fork and exec), so an input that needs more
//! ends the worker with an allocation failure; the worker must finish all cases within
//! [`WORKER_TIMEOUT`]. The cases: fixed hostile documents (each bound reached and passed, wrong
//! types and versions, deep nesting, overflowing sums, a file over the size bound), then
//! [`RANDOM_CASES`] seeded,
//! deterministic mutations of valid recordings (values replaced by negative, huge, fractional,
//! wrong-typed or nested ones; keys removed; lists grown past their bounds; strings made long;
//! bytes flipped; documents cut short). Each goes through `Recording::read` on a file and,
//! when read, through the text and JSON reports, the folded stacks and the SVG, with the
//! default filter and with `--lock all`. The largest file read goes through `fdprof` itself, in
//! the second test, with the 1 M-slot histogram, a 15 MB recording, `/dev/zero`, a FIFO, a
//! directory and an over-size file. The third (`claims`) sends small files whose numbers claim
//! more than fdprof's memory budget (a snapshot of 2^27 open fds, 2^24 deflated zero rows, and
//! their neighbours) through `report`, `replay`, `export --format trace-jsonl` and `flamegraph`.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fdprof_profiler::analysis::{
    self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions, SortKey,
};
use fdprof_profiler::render;
use fdprof_recording::Recording;
use fdprof_recording::read::MAX_BYTES;
use fdprof_recording::testdata::{self, TempDir};
use serde_json::{Value, json};

use crate::common::load_lock;

/// The address space the worker and the `fdprof` runs get.
mod cases;
mod claims;
mod mutate;

use cases::*;
use mutate::*;

const AS_LIMIT: u64 = 1 << 30;
/// Set in the worker's environment (to a directory for its files); the worker runs the cases
/// instead of starting one.
const WORKER_ENV: &str = "FDPROF_READER_FUZZ";
/// Runs only the cases whose name contains this (to reproduce one).
const CASE_ENV: &str = "FDPROF_READER_FUZZ_CASE";
/// Mutated recordings after the fixed cases.
const RANDOM_CASES: u32 = 1000;
/// Everything the worker does (≈ 25 s in a debug build on 2 cores).
const WORKER_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn reader_and_renderers_survive_hostile_recordings() {
    if std::env::var_os(WORKER_ENV).is_some() {
        worker();
        return;
    }
    let _load = load_lock();
    let dir = TempDir::new("reader-fuzz");
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "reader_fuzz::reader_and_renderers_survive_hostile_recordings",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(WORKER_ENV, &dir.0)
    .env("RUST_BACKTRACE", "0");
    let started = Instant::now();
    let run = run_limited(&mut cmd, Stdio::null(), &dir.0, WORKER_TIMEOUT);
    // The first panics with their cases, and the end (an abort names no case of its own).
    let lines: Vec<&str> = run.stderr.lines().collect();
    let mut report: Vec<&str> = Vec::new();
    let mut case = "";
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("case ") {
            case = line;
        } else if line.contains("panicked at") && report.len() < 30 {
            report.extend([case, line, lines.get(i + 1).unwrap_or(&"")]);
        }
    }
    report.extend(lines.iter().rev().take(3).rev());
    assert!(
        run.status.is_some_and(|s| s.success()),
        "the fuzz worker failed ({}); rerun a case with {WORKER_ENV}=DIR {CASE_ENV}=NAME:\n{}",
        describe(run.status),
        report.join("\n")
    );
    let summary = run
        .stdout
        .lines()
        .find_map(|l| l.find("reader fuzz:").map(|at| &l[at..]))
        .unwrap_or("no summary");
    println!(
        "{summary}; {:.1} s with start-up",
        started.elapsed().as_secs_f64()
    );
}

/// `fdprof report`, `report --json` and `flamegraph` under a 1 GiB address space: a valid file
/// (up to the largest read) is drawn, every other gets one line of error and exit code 1, never
/// a panic, a signal or a hang.
#[test]
fn fdprof_refuses_hostile_files_within_1_gib() {
    let _load = load_lock();
    let dir = TempDir::new("reader-files");
    let valid = dir.0.join("valid.data");
    std::fs::write(
        &valid,
        serde_json::to_vec_pretty(&testdata::recording()).unwrap(),
    )
    .unwrap();

    // 1 M histogram slots: 2 MB that once cost 1.5 GB and printed 120 MB.
    let slots = dir.0.join("slots.data");
    let mut doc = serde_json::to_value(testdata::recording()).unwrap();
    doc["scan"]["bits"]["slots"] = Value::Array(vec![json!(1); 1_000_000]);
    std::fs::write(&slots, serde_json::to_vec(&doc).unwrap()).unwrap();

    // ~15 MB of contention sites with 20-frame stacks: valid.
    let many = dir.0.join("many.data");
    let mut rec = testdata::recording();
    rec.contention = (0..3000).map(|i| deep_site(i, 20)).collect();
    std::fs::write(&many, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
    let size = std::fs::metadata(&many).unwrap().len();
    assert!((14_000_000..16_000_000).contains(&size), "{size} bytes");

    // The largest file read: the most frames, none merging (report and flamegraph ~20 s each).
    let largest = dir.0.join("largest.data");
    std::fs::write(&largest, biggest()).unwrap();

    let over = dir.0.join("over.data");
    File::create(&over).unwrap().set_len(MAX_BYTES + 1).unwrap();

    let fifo = dir.0.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);

    let cases: &[(&Path, Option<&str>)] = &[
        (&valid, None),
        (&many, None),
        (&largest, None),
        (&slots, Some("more than 65 slots in a histogram")),
        (Path::new("/dev/zero"), Some("is a character device")),
        (&fifo, Some("is a FIFO")),
        (&dir.0, Some("is a directory")),
        (
            &over,
            Some("more than the largest recording fdprof reads (64 MiB)"),
        ),
        (&dir.0.join("missing.data"), Some("cannot read")),
    ];
    let svg = dir.0.join("out.svg");
    let mut peak = (0, String::new());
    for (input, error) in cases {
        for args in [
            vec!["report".as_ref(), input.as_os_str()],
            vec!["report".as_ref(), "--json".as_ref(), input.as_os_str()],
            // Every stack, so the largest output of the largest file.
            vec![
                "report".as_ref(),
                "--json".as_ref(),
                "--top".as_ref(),
                "0".as_ref(),
                input.as_os_str(),
            ],
            vec![
                "flamegraph".as_ref(),
                input.as_os_str(),
                "-o".as_ref(),
                svg.as_os_str(),
            ],
        ] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_fdprof"));
            cmd.args(&args);
            let run = run_limited(&mut cmd, Stdio::null(), &dir.0, Duration::from_secs(120));
            check_exit(&args, &run, *error);
            if run.maxrss_kb > peak.0 {
                peak = (run.maxrss_kb, format!("{args:?}"));
            }
        }
    }
    println!(
        "fdprof under a {} MiB address-space limit: peak RSS {} MiB, in {}",
        AS_LIMIT >> 20,
        peak.0 / 1024,
        peak.1
    );

    // `-` reads standard input, with the same bound.
    for (stdin, error) in [
        (File::open(&valid).unwrap(), None),
        (
            File::open("/dev/zero").unwrap(),
            Some("standard input holds more than the largest recording fdprof reads (64 MiB)"),
        ),
    ] {
        let args = ["report".as_ref(), "-".as_ref()];
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fdprof"));
        cmd.args(args);
        let run = run_limited(&mut cmd, stdin.into(), &dir.0, Duration::from_secs(120));
        check_exit(&args, &run, error);
    }
}

/// Exit code 0 and some output, or (with `error`) exit code 1 and one line of error containing
/// it.
fn check_exit(args: &[&std::ffi::OsStr], run: &Run, error: Option<&str>) {
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let what = format!(
        "fdprof {args:?}: {}, stderr: {stderr}",
        describe(run.status)
    );
    let code = run.status.and_then(|s| s.code());
    match error {
        None => {
            assert_eq!(code, Some(0), "{what}");
            assert!(!stdout.is_empty() || args[0] == "flamegraph", "{what}");
        }
        Some(needle) => {
            assert_eq!(code, Some(1), "{what}");
            assert_eq!(stderr.lines().count(), 1, "{what}");
            assert!(stderr.starts_with("fdprof: error: "), "{what}");
            assert!(stderr.contains(needle), "{what}");
        }
    }
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        None => "still running at the deadline: killed".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(101), _) => "exit code 101: a panic".into(),
            (Some(c), _) => format!("exit code {c}"),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

/// How a command run by [`run_limited`] ended.
struct Run {
    /// `None`: killed at the deadline.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    maxrss_kb: i64,
}

/// Runs `cmd` with its address space limited to [`AS_LIMIT`], killed after `timeout`; its
/// output goes through files in `dir` (no pipe to fill).
fn run_limited(cmd: &mut Command, stdin: Stdio, dir: &Path, timeout: Duration) -> Run {
    let out_path = dir.join("stdout");
    let err_path = dir.join("stderr");
    cmd.stdin(stdin)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: AS_LIMIT,
                rlim_max: AS_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped by wait4 below, which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + timeout;
    let mut maxrss_kb = 0;
    let status = loop {
        let mut raw = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it and `raw`.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child, not yet reaped; the pointers are valid.
        match unsafe { libc::wait4(pid, &mut raw, libc::WNOHANG, &mut usage) } {
            0 => {}
            r if r == pid => {
                maxrss_kb = usage.ru_maxrss;
                break Some(ExitStatus::from_raw(raw));
            }
            _ => panic!("wait4: {}", std::io::Error::last_os_error()),
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    Run {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
        maxrss_kb,
    }
}

// ---------------------------------------------------------------------------------------------
// The worker

fn worker() {
    let dir = PathBuf::from(std::env::var_os(WORKER_ENV).unwrap());
    let mut tally = Tally {
        path: dir.join("case.data"),
        only: std::env::var(CASE_ENV).unwrap_or_default(),
        cases: 0,
        read: 0,
        failures: Vec::new(),
    };
    let started = Instant::now();
    for (name, make) in fixed_cases() {
        tally.run(&name, &make, false);
    }
    let (fixed, fixed_time) = (tally.cases, started.elapsed());
    let seeds = seeds();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..RANDOM_CASES {
        let (name, bytes) = mutated(&seeds, &mut rng);
        tally.run(&format!("random {i}: {name}"), &|| bytes.clone(), true);
    }
    assert!(
        tally.failures.is_empty(),
        "panics in: {:#?}",
        tally.failures
    );
    // SAFETY: getrusage fills the struct it is given.
    let maxrss_kb = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_maxrss
    };
    println!(
        "reader fuzz: {} cases ({fixed} fixed in {:.1} s, {} random in {:.1} s; {} read, the rest \
         refused), peak RSS {} MiB under a {} MiB address-space limit",
        tally.cases,
        fixed_time.as_secs_f64(),
        tally.cases - fixed,
        (started.elapsed() - fixed_time).as_secs_f64(),
        tally.read,
        maxrss_kb / 1024,
        AS_LIMIT >> 20
    );
}

/// The worker's cases so far.
struct Tally {
    path: PathBuf,
    only: String,
    cases: u32,
    read: u32,
    failures: Vec<String>,
}

impl Tally {
    /// Runs the case `name` (made by `make`) through the reader and the renderers, unless
    /// another case was asked for.
    fn run(&mut self, name: &str, make: &dyn Fn() -> Vec<u8>, every_option: bool) {
        if !name.contains(&self.only) {
            return;
        }
        let bytes = make();
        eprintln!("case {}: {name} ({} bytes)", self.cases, bytes.len());
        self.cases += 1;
        std::fs::write(&self.path, &bytes).unwrap();
        match std::panic::catch_unwind(|| render_all(&self.path, every_option)) {
            Ok(true) => self.read += 1,
            Ok(false) => {}
            Err(_) => self.failures.push(name.to_string()),
        }
    }
}

/// Reads `path` and, when it is a recording, renders it with the default report options (and
/// `every_option`: all stacks, other orders, offsets) and flamegraph filters. True when it was
/// read; a refusal must be one line naming the file.
fn render_all(path: &Path, every_option: bool) -> bool {
    let rec = match Recording::read(path) {
        Ok(rec) => rec,
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(!msg.contains('\n'), "{msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            return false;
        }
    };
    let report_opts = if !every_option {
        vec![ReportOptions::default()]
    } else {
        vec![
            ReportOptions::default(),
            ReportOptions {
                top: 0,
                sort: SortKey::Avg,
                offsets: true,
            },
            ReportOptions {
                top: 3,
                sort: SortKey::Max,
                offsets: false,
            },
        ]
    };
    for opts in &report_opts {
        let report = analysis::report(&rec, opts);
        let text = render::text(&report);
        assert!(text.ends_with('\n'));
        serde_json::to_string_pretty(&report).unwrap();
    }
    // `top --from`: each interval of a series played back (the first 100), and the total.
    let len = analysis::series_len(&rec).unwrap_or(0);
    for i in 0..len.min(100) {
        let iv = analysis::playback(&rec, i).unwrap();
        render::live::interval(&iv);
        serde_json::to_string(&iv).unwrap();
    }
    if len > 0 {
        render::text(&analysis::playback_total(&rec, 0, len - 1).unwrap());
    }
    for lock in [LockFilter::FileLock, LockFilter::All] {
        for op in [OpFilter::All, OpFilter::Alloc] {
            let opts = FlamegraphOptions {
                op,
                lock,
                offsets: op == OpFilter::Alloc,
            };
            let graph = analysis::folded(&rec, &opts);
            render::folded(&graph);
            // An error (nothing to draw) is an answer; only a panic fails.
            let _ = render::svg(&graph);
        }
    }
    true
}
