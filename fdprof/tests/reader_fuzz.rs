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
//! directory and an over-size file.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fdprof::model::Recording;
use fdprof::model::bounded;
use fdprof::model::read::MAX_BYTES;
use fdprof::model::recording::{Frame, FunctionStats, StackWalks, Target};
use fdprof::render::testdata::{self, frame, hist, site};
use fdprof::render::{self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions, SortKey};
use serde_json::{Value, json};

/// The address space the worker and the `fdprof` runs get.
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
    let dir = TempDir::new("fuzz");
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "reader_and_renderers_survive_hostile_recordings",
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
    let dir = TempDir::new("files");
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

/// A directory of this test's own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fdprof-reader-{what}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
        let text = render::text(&rec, opts);
        assert!(text.ends_with('\n'));
        serde_json::to_string_pretty(&render::json(&rec, opts)).unwrap();
    }
    for lock in [LockFilter::FileLock, LockFilter::All] {
        for op in [OpFilter::All, OpFilter::Alloc] {
            let opts = FlamegraphOptions {
                op,
                lock,
                offsets: op == OpFilter::Alloc,
            };
            render::folded(&rec, &opts);
            // An error (nothing to draw) is an answer; only a panic fails.
            let _ = render::svg(&rec, &opts);
        }
    }
    true
}

/// A site whose stacks have `depth` frames each, named after the site.
fn deep_site(i: usize, depth: usize) -> fdprof::model::recording::ContentionSite {
    let kernel: Vec<Frame> = (0..depth)
        .map(|j| frame(&format!("kernel_function_{i}_{j}"), j as u64 * 8, None))
        .collect();
    let user: Vec<Frame> = (0..depth)
        .map(|j| {
            frame(
                &format!("user_function_{i}_{j}"),
                j as u64,
                Some("/usr/lib/libx.so.1"),
            )
        })
        .collect();
    let lock = if i.is_multiple_of(3) {
        "spinlock"
    } else {
        "file_lock"
    };
    site(
        lock,
        "alloc",
        kernel,
        user,
        &[(1000 + i as u64, 1 + i as u64 % 7)],
    )
}

/// Valid recordings the mutations start from.
fn seeds() -> Vec<Value> {
    let base = testdata::recording();

    let mut direct = base.clone();
    direct.mode = "fentry".into();
    direct
        .modes
        .insert("allocate".into(), "fentry (alloc_fd)".into());
    direct.stack_walks = StackWalks {
        walked: 40,
        reused: 600,
        refresh_every: 16,
    };
    direct.target = Target {
        kind: "command".into(),
        pid: Some(9),
        tid: None,
        command: vec!["/usr/bin/server".into(), "--threads".into(), "8".into()],
        comm: None,
    };
    direct.functions = ["alloc", "close", "expand", "other"]
        .iter()
        .map(|op| FunctionStats {
            operation: op.to_string(),
            calls: 1000,
            expanded: 3,
            duration: hist(&[(500, 900), (90_000, 100)]),
            hold: hist(&[(200, 1000)]),
            slowpath_wait: hist(&[(0, 1), (u64::MAX, 1)]),
            unpaired: 1,
        })
        .collect();
    for s in &mut direct.contention {
        for f in &mut s.kernel_stack {
            f.address = Some(0xffff_ffff_8100_0000 + f.offset);
        }
    }

    let mut lock_only = base.clone();
    lock_only
        .modes
        .insert("fd_syscalls".into(), "off (--lock-only)".into());
    lock_only.target = Target {
        kind: "all".into(),
        pid: None,
        tid: None,
        command: vec![],
        comm: None,
    };

    let mut many = base.clone();
    many.contention = (0..60).map(|i| deep_site(i, 1 + i % 12)).collect();

    [base, direct, lock_only, many]
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect()
}

/// The test recording as compact JSON, with `f` applied.
fn doc_with(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut doc = serde_json::to_value(testdata::recording()).unwrap();
    f(&mut doc);
    serde_json::to_vec(&doc).unwrap()
}

/// A minimal frame, as small as JSON allows.
fn tiny_frame() -> Value {
    json!({"function": "", "offset": 0})
}

/// A fixed case: its name and how to make it (only when it runs).
type Case = (String, Box<dyn Fn() -> Vec<u8>>);

fn fixed_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut add = |name: String, make: Box<dyn Fn() -> Vec<u8>>| cases.push((name, make));
    for text in [
        "",
        " \n",
        "null",
        "[]",
        "{}",
        "1",
        "\"fdprof-recording\"",
        "{\"format\":\"fdprof-recording\",\"version\":1}",
        "{\"format\":\"fdprof-recording\",\"version\":1,\"format\":\"x\"}",
    ] {
        add(format!("document {text:?}"), Box::new(move || text.into()));
    }
    for version in [
        "\"1\"",
        "1.0",
        "-1",
        "null",
        "18446744073709551616",
        "2",
        "[[[[1]]]]",
    ] {
        add(
            format!("version {version}"),
            Box::new(move || {
                recording_text()
                    .replacen("\"version\":1", &format!("\"version\":{version}"), 1)
                    .into()
            }),
        );
    }
    const DEEP: usize = 100_000;
    add(format!("{DEEP} ["), Box::new(|| "[".repeat(DEEP).into()));
    add(
        format!("{DEEP} nested arrays"),
        Box::new(|| format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP)).into()),
    );
    add(
        format!("{DEEP} nested arrays in an unknown field"),
        Box::new(|| {
            recording_text()
                .replacen(
                    '{',
                    &format!("{{\"x\":{}{},", "[".repeat(DEEP), "]".repeat(DEEP)),
                    1,
                )
                .into()
        }),
    );
    add(
        format!("{DEEP} nested objects as the version"),
        Box::new(|| {
            let nested = format!("{}1{}", "{\"a\":".repeat(DEEP), "}".repeat(DEEP));
            recording_text()
                .replacen("\"version\":1", &format!("\"version\":{nested}"), 1)
                .into()
        }),
    );
    add(
        format!("{DEEP} nested arrays as a frame"),
        Box::new(|| {
            let nested = format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP));
            recording_text()
                .replacen(
                    "\"kernel_stack\":[",
                    &format!("\"kernel_stack\":[{nested},"),
                    1,
                )
                .into()
        }),
    );

    // Each bound reached (read) and passed (refused).
    for n in [bounded::SLOTS, bounded::SLOTS + 1, 1_000_000] {
        add(
            format!("{n} slots of u64::MAX"),
            Box::new(move || {
                doc_with(|d| {
                    d["contention"][0]["wait"]["slots"] = Value::Array(vec![json!(u64::MAX); n]);
                    d["scan"]["bits"]["slots"] = Value::Array(vec![json!(u64::MAX); n.min(65)]);
                    d["scan"]["bits"]["count"] = json!(u64::MAX);
                })
            }),
        );
    }
    for n in [bounded::FRAMES, bounded::FRAMES + 1] {
        add(
            format!("{n} frames"),
            Box::new(move || {
                doc_with(|d| {
                    d["contention"][1]["user_stack"] = Value::Array(vec![tiny_frame(); n]);
                })
            }),
        );
    }
    for n in [bounded::SITES, bounded::SITES + 1] {
        add(
            format!("{n} sites"),
            Box::new(move || {
                doc_with(|d| {
                    let site = d["contention"][3].clone();
                    d["contention"] = Value::Array(vec![site; n]);
                })
            }),
        );
    }
    add(
        format!("{} sites, each its own lock and operation", bounded::SITES),
        Box::new(|| {
            doc_with(|d| {
                let site = d["contention"][3].clone();
                d["contention"] = (0..bounded::SITES)
                    .map(|i| {
                        let mut s = site.clone();
                        s["lock"] = json!(format!("lock{i}"));
                        s["operation"] = json!(format!("op{i}"));
                        s
                    })
                    .collect();
            })
        }),
    );
    for (field, n) in [
        ("syscalls", bounded::SYSCALLS),
        ("functions", bounded::FUNCTIONS),
        ("drops", bounded::DROPS),
        ("notes", bounded::NOTES),
    ] {
        for n in [n, n + 1] {
            add(
                format!("{n} {field}"),
                Box::new(move || {
                    doc_with(|d| {
                        let one = match field {
                            "functions" => serde_json::to_value(FunctionStats {
                                operation: "alloc".into(),
                                calls: u64::MAX,
                                ..Default::default()
                            })
                            .unwrap(),
                            "notes" => json!("a note"),
                            _ => d[field][0].clone(),
                        };
                        d[field] = Value::Array(vec![one; n]);
                    })
                }),
            );
        }
    }
    for n in [bounded::PROGRAMS, bounded::PROGRAMS + 1] {
        add(
            format!("{n} programs"),
            Box::new(move || {
                doc_with(|d| {
                    let one = d["own_cost"]["programs"][0].clone();
                    d["own_cost"]["programs"] = Value::Array(vec![one; n]);
                })
            }),
        );
    }
    for n in [bounded::MODES, bounded::MODES + 1] {
        add(
            format!("{n} modes"),
            Box::new(move || {
                doc_with(|d| {
                    d["modes"] = (0..n)
                        .map(|i| (format!("role{i}"), json!("fentry")))
                        .collect();
                })
            }),
        );
    }
    for n in [bounded::ARG_WORDS, bounded::ARG_WORDS + 1] {
        add(
            format!("{n} command-line words"),
            Box::new(move || {
                let words = format!("[{}]", vec!["\"\""; n].join(","));
                let doc = doc_with(|d| {
                    d["target"]["kind"] = json!("command");
                    d["target"]["command"] = json!("@@WORDS@@");
                });
                String::from_utf8(doc)
                    .unwrap()
                    .replace("\"@@WORDS@@\"", &words)
                    .into_bytes()
            }),
        );
    }
    for (name, bytes, at) in [
        (
            "function",
            bounded::FUNCTION_BYTES,
            "/contention/0/kernel_stack/0/function",
        ),
        (
            "module",
            bounded::PATH_BYTES,
            "/contention/0/user_stack/0/module",
        ),
        ("lock", bounded::NAME_BYTES, "/contention/0/lock"),
        ("comm", bounded::NAME_BYTES, "/target/comm"),
        ("note", bounded::TEXT_BYTES, "/notes/0"),
        ("origin", bounded::TEXT_BYTES, "/scan/origin"),
        ("command word", bounded::ARG_BYTES, "/target/command"),
    ] {
        for n in [bytes, bytes + 1] {
            add(
                format!("{name} of {n} bytes"),
                Box::new(move || {
                    let text = json!("é".repeat(n / 2) + &"x".repeat(n % 2));
                    doc_with(|d| {
                        if name == "command word" {
                            d["target"]["kind"] = json!("command");
                            d["target"]["command"] = json!([text]);
                        } else {
                            *d.pointer_mut(at).unwrap() = text;
                        }
                    })
                }),
            );
        }
    }

    // Overflowing sums: every u64 at u64::MAX, in every site, merged.
    add(
        "u64::MAX everywhere".into(),
        Box::new(|| doc_with(max_numbers)),
    );

    // The largest file read is drawn by `fdprof` itself (below): it takes ~20 s here.
    add(
        "one byte over the size bound".into(),
        Box::new(|| {
            let mut doc = recording_text().into_bytes();
            doc.resize(MAX_BYTES as usize + 1, b' ');
            doc
        }),
    );
    cases
}

/// The test recording as compact JSON.
fn recording_text() -> String {
    serde_json::to_string(&testdata::recording()).unwrap()
}

/// A valid recording as close to [`MAX_BYTES`] as sites of full stacks of minimal frames get,
/// every site's stacks distinct from their outermost frame on, so nothing merges: the most
/// frames a file of that size holds, and the most a flamegraph may have to draw.
fn biggest() -> Vec<u8> {
    let mut rec = testdata::recording();
    rec.contention.clear();
    let text = serde_json::to_string(&rec).unwrap();
    let (head, tail) = text.split_once("\"contention\":[]").unwrap();
    let frames = vec!["{\"function\":\"\",\"offset\":0}"; bounded::FRAMES - 1].join(",");
    let mut doc = format!("{head}\"contention\":[").into_bytes();
    let mut i = 0;
    while doc.len() + 2 * frames.len() + 400 + tail.len() < MAX_BYTES as usize {
        if i > 0 {
            doc.push(b',');
        }
        doc.extend_from_slice(
            format!(
                "{{\"lock\":\"file_lock\",\"operation\":\"alloc\",\"kernel_stack\":[{frames}],\
                 \"user_stack\":[{frames},{{\"function\":\"u{i}\",\"offset\":0}}],\"count\":1,\
                 \"total_wait_ns\":1,\"max_wait_ns\":1,\
                 \"wait\":{{\"slots\":[0,1],\"count\":1,\"sum\":1,\"max\":1}}}}"
            )
            .as_bytes(),
        );
        i += 1;
    }
    doc.extend_from_slice(format!("]{tail}").as_bytes());
    doc
}

/// Raw JSON texts put in place of a value.
const HOSTILE: &[&str] = &[
    "-1",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "1.5",
    "-0",
    "0",
    "null",
    "true",
    "\"\"",
    "\"\\u0000\\u001b[31m\"",
    "\"\\ud800\"",
    "[]",
    "{}",
    "[null]",
    "{\"a\":[1,{}]}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
];

/// A seed with one to three mutations, then perhaps cut short or with bytes flipped. Most
/// mutations keep the value's type, so that most cases are read and reach the renderers with
/// values no recording has.
fn mutated(seeds: &[Value], rng: &mut Rng) -> (String, Vec<u8>) {
    let seed = rng.below(seeds.len());
    let mut doc = seeds[seed].clone();
    let mut name = format!("seed {seed}");
    let mut raw: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(count(&doc));
        let node = nth_mut(&mut doc, &mut at.clone()).unwrap();
        if rng.below(5) == 0 {
            let text = *rng.pick(HOSTILE);
            name += &format!(", node {at} = {}", &text[..text.len().min(24)]);
            *node = Value::String(format!("@@RAW{}@@", raw.len()));
            raw.push(text.to_string());
            continue;
        }
        match node {
            Value::Number(_) => {
                let v = match rng.below(4) {
                    0 => u64::MAX - rng.below(3) as u64,
                    1 => u64::MAX / 2 + rng.below(3) as u64,
                    2 => rng.next(),
                    _ => rng.next() >> rng.below(64),
                };
                name += &format!(", node {at} = {v}");
                *node = json!(v);
            }
            Value::String(_) if rng.below(4) == 0 => {
                // A name ending in a number: a second count column to readers of folded stacks.
                let v = format!("f {}", rng.next() >> rng.below(64));
                name += &format!(", node {at} = {v:?}");
                *node = json!(v);
            }
            Value::String(_) => {
                let len = *rng.pick(&[0, 1, 511, 512, 513, 4096, 4097, 65536, 65537]);
                let ch = *rng.pick(&['a', 'é', '😀', '"', '\n', ';', ' ', '9', '<', '&', '\u{1b}']);
                name += &format!(", node {at} = {len} × {ch:?}");
                *node = json!(ch.to_string().repeat(len / ch.len_utf8()));
            }
            Value::Array(items) if !items.is_empty() => {
                let to = *rng.pick(&[64, 65, 66, 126, 127, 128, items.len() * 3]);
                name += &format!(", node {at} grown to {to}");
                while items.len() < to {
                    let one = items[rng.below(items.len())].clone();
                    items.push(one);
                }
            }
            Value::Object(map) if map.contains_key("slots") => {
                // Random slots and counts: quantiles and merges on nonsense.
                let slots: Vec<u64> = (0..rng.below(66))
                    .map(|_| rng.next() >> rng.below(64))
                    .collect();
                name += &format!(", node {at} = histogram of {} slots", slots.len());
                *node = json!({"slots": slots, "count": rng.next(), "sum": rng.next(), "max": rng.next()});
            }
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
                name += &format!(", node {at} without {key}");
                map.remove(&key);
            }
            _ => {}
        }
    }
    let mut text = if rng.below(2) == 0 {
        serde_json::to_string(&doc).unwrap()
    } else {
        serde_json::to_string_pretty(&doc).unwrap()
    };
    for (i, r) in raw.iter().enumerate() {
        text = text.replace(&format!("\"@@RAW{i}@@\""), r);
    }
    let mut bytes = text.into_bytes();
    match rng.below(8) {
        0 => {
            let at = rng.below(bytes.len() + 1);
            name += &format!(", cut at {at}");
            bytes.truncate(at);
        }
        1 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(bytes.len());
                let b = rng.next() as u8;
                name += &format!(", byte {at} = {b:#x}");
                bytes[at] = b;
            }
        }
        _ => {}
    }
    (name, bytes)
}

/// Every u64 number in `v` set to u64::MAX (the u32 ones stay).
fn max_numbers(v: &mut Value) {
    match v {
        Value::Number(_) => *v = json!(u64::MAX),
        Value::Array(a) => a.iter_mut().for_each(max_numbers),
        Value::Object(o) => {
            for (k, v) in o.iter_mut() {
                if !["version", "pid", "tid", "refresh_every"].contains(&k.as_str()) {
                    max_numbers(v);
                }
            }
        }
        _ => {}
    }
}

/// Nodes of a JSON tree.
fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

/// The `n`th node in pre-order.
fn nth_mut<'a>(v: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
    if *n == 0 {
        return Some(v);
    }
    *n -= 1;
    let children: Vec<&'a mut Value> = match v {
        Value::Array(a) => a.iter_mut().collect(),
        Value::Object(o) => o.values_mut().collect(),
        _ => return None,
    };
    for child in children {
        let size = count(child);
        if *n < size {
            return nth_mut(child, n);
        }
        *n -= size;
    }
    None
}

/// xorshift64: deterministic, so a failing case is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
