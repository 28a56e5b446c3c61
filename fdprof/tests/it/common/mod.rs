//! Helpers shared by the integration tests that touch the kernel for real.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Held alone by a test that loads BPF programs, shared by tests that load the machine.
static KERNEL: RwLock<()> = RwLock::new(());

/// Serializes tests that load BPF programs, so leak checks see only their own programs, and
/// keeps [`load_lock`]'s tests from running beside them.
pub fn kernel_lock() -> RwLockWriteGuard<'static, ()> {
    KERNEL.write().unwrap_or_else(|e| e.into_inner())
}

/// Taken by tests that load the machine for seconds (fd-syscall loops, fuzzers spinning a
/// core): they run beside each other, never beside a [`kernel_lock`] test, whose system-wide
/// figures, drop counts and timings they would disturb. Each was a test binary of its own,
/// which cargo never ran beside another.
pub fn load_lock() -> RwLockReadGuard<'static, ()> {
    KERNEL.read().unwrap_or_else(|e| e.into_inner())
}

pub fn fdprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fdprof"))
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Panics with a clear message unless running as root (the tests attach for real).
pub fn require_root() {
    assert!(
        is_root(),
        "this test loads BPF programs into the running kernel: run the tests as root"
    );
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Names of loaded BPF programs that belong to fdprof (`bpftool prog show`).
pub fn loaded_fdprof_programs() -> Vec<String> {
    loaded_fdprof_program_tags()
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// `(tag, name)` of every loaded program called fdprof_*, as the kernel reports them
/// (`bpftool prog show`, not kallsyms).
pub fn loaded_fdprof_program_tags() -> Vec<(String, String)> {
    let out = run(Command::new("bpftool").args(["prog", "show", "--json"]));
    assert!(out.status.success(), "bpftool prog show failed");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    progs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["tag"].as_str()?.into(), p["name"].as_str()?.into())))
        .filter(|(_, n): &(String, String)| n.starts_with("fdprof"))
        .collect()
}

/// The kernel frees a program shortly after its last fd closes (deferred to RCU), so a program
/// of an fdprof that just exited may still be listed for a moment: allow a few seconds.
pub fn assert_no_programs_left() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = loaded_fdprof_programs();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "fdprof programs still loaded: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Parses an SVG as XML and checks its root is `<svg>`: inferno writes the SVG 1.1 doctype, so
/// DTDs are allowed; anything not well-formed fails the test.
pub fn parse_svg(text: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, opts)
        .unwrap_or_else(|e| panic!("the SVG is not well-formed XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc
}

/// The one line of `stderr`, failing the test if it holds another.
pub fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    lines[0]
}

/// A YAML file as JSON, read by Python's YAML 1.1 parser (Debian's python3-yaml), which reads
/// `0400` as octal as Kubernetes' own parser does.
pub fn yaml(path: &std::path::Path) -> serde_json::Value {
    let out = run(Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(path));
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `name` in the calling module's own temporary directory (made on first use): the modules
/// were binaries of their own and reuse names (`opensock.data`), so each keeps a directory.
#[track_caller]
pub fn tmp(name: &str) -> std::path::PathBuf {
    let file = std::panic::Location::caller().file();
    let module = file.rsplit_once("tests/it/").map_or(file, |(_, m)| m);
    let dir = std::env::temp_dir()
        .join(format!("fdprof-it-{}", std::process::id()))
        .join(module.trim_end_matches(".rs").replace('/', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A JSON file (a recording) as a value.
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A recording's row for syscall `name`.
pub fn syscall<'a>(rec: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    rec["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
}

/// Builds `tests/programs/SOURCE` into `output` with the system's C compiler.
pub fn cc(source: &str, output: &std::path::Path, flags: &[&str]) {
    let built = run(Command::new("cc")
        .args(["-O2", "-o"])
        .arg(output)
        .arg(format!(
            "{}/tests/programs/{source}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(flags));
    assert!(built.status.success(), "cc {source} failed");
}

/// A workload started with `--wait-signal`: its PID, and the child to collect output from.
pub struct Waiting {
    pub child: Child,
    pub pid: u32,
}

/// Starts `fdprof record` and waits until it reports that it is attached; its standard error
/// is drained from then on, so the recorder never blocks on a full pipe, and printed.
pub fn start_record(args: &[&str]) -> Child {
    let (rec, rest) = start_record_collecting(args);
    std::thread::spawn(move || eprint!("{}", rest.join().unwrap_or_default()));
    rec
}

/// [`start_record`], with the rest of its standard error handed back by the returned thread.
pub fn start_record_collecting(args: &[&str]) -> (Child, std::thread::JoinHandle<String>) {
    let mut rec = fdprof()
        .arg("record")
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("fdprof: attached"),
        "record did not start: {line}"
    );
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    (rec, rest)
}

/// A socket/close loop in the background, for system-wide tests (`-a` leaves fdprof's own
/// process out, so it must watch another); ended and reaped when dropped.
pub struct Load(Child);

impl Load {
    pub fn start() -> Self {
        let child = fdprof()
            .args(["workload", "socket-close", "-d", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a background workload");
        Load(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // The child this test started, by its handle.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_workload(args: &[&str]) -> Waiting {
    start_workload_with(fdprof(), args)
}

/// [`start_workload`] run by `fdprof`, a command for the fdprof binary (e.g. a copy of it under
/// another name, so that the workload has that comm).
pub fn start_workload_with(mut fdprof: Command, args: &[&str]) -> Waiting {
    let mut child = fdprof
        .arg("workload")
        .args(args)
        .args(["--json", "--wait-signal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).expect("ready line");
    assert_eq!(ready["event"], "ready");
    let pid = ready["pid"].as_u64().unwrap() as u32;
    assert_eq!(pid, child.id());
    Waiting { child, pid }
}

impl Waiting {
    pub fn go(&self) {
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(self.pid as i32, libc::SIGUSR1) };
    }

    /// Ends the workload wherever it is (running, or waiting for its signal), and reaps it.
    pub fn end(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn finish(mut self) -> Value {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "workload failed");
        serde_json::from_str(out.trim()).expect("workload result JSON")
    }
}
/// `socket` calls of each process of a report's (or an interval's) `processes`.
pub fn sockets_by_pid(report: &Value) -> std::collections::BTreeMap<u32, u64> {
    report["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let sockets = p["syscalls"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == "socket")
                .map_or(0, |s| s["calls"].as_u64().unwrap());
            (p["pid"].as_u64().unwrap() as u32, sockets)
        })
        .collect()
}

/// `fdprof report ARGS --json`, parsed; the report must succeed.
pub fn report_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Value {
    let out = run(fdprof().arg("report").args(args).arg("--json"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `go tool pprof ARGS SOURCE`'s standard output (SOURCE: a file or a URL).
pub fn go_pprof(args: &[&str], source: impl AsRef<std::ffi::OsStr>) -> String {
    let source = source.as_ref();
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(source)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run go ({e}): install golang-go (cargo xtask bootstrap)")
        });
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {source:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The sum of each value column over the samples `go tool pprof -raw` lists.
pub fn raw_totals(raw: &str) -> Vec<u64> {
    let samples = raw.split_once("Samples:\n").expect("a Samples section").1;
    let mut totals = Vec::new();
    for line in samples.lines().skip(1) {
        let Some((values, _locations)) = line.split_once(':') else {
            break;
        };
        let Ok(values) = values
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<Vec<u64>, _>>()
        else {
            continue; // a labels line
        };
        totals.resize(values.len(), 0);
        for (t, v) in totals.iter_mut().zip(values) {
            *t += v;
        }
    }
    totals
}

pub mod cdp;
pub mod credentials;
pub mod daemon;
pub mod otlp;
pub mod podman;
pub mod prometheus;
pub mod remedy;
