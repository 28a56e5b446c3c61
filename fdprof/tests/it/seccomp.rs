//! The DaemonSet's seccomp profile (deploy/kubernetes/seccomp/fdprof.json) is an allow-list:
//! every system call fdprof makes must be on it, or the call fails with EPERM in the pod. A
//! representative run under `strace -f` (doctor, `record -a --cpu`, and a daemon under `-a
//! --cpu --tier full` pushing to an OTLP receiver that never answers, asked at its endpoints,
//! given a window by SIGUSR1 and stopped by SIGTERM)
//! is compared with it; `cargo xtask seccomp` remakes the profile from a broader run.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::prometheus::free_loopback_addr;
use crate::common::*;

const STRACE: &str = "/usr/bin/strace";

/// The profile's names a process may call: those of its allowing rules (`clone` only without
/// namespace flags), and `clone3`, which fails with ENOSYS so that glibc calls `clone`.
fn allowed(profile: &Value) -> BTreeSet<String> {
    assert_eq!(
        profile["defaultAction"], "SCMP_ACT_ERRNO",
        "not an allow-list"
    );
    let mut names = BTreeSet::new();
    for rule in profile["syscalls"].as_array().unwrap() {
        let rule_names = rule["names"].as_array().unwrap().iter();
        let rule_names = rule_names.map(|n| n.as_str().unwrap().to_string());
        match rule["action"].as_str().unwrap() {
            "SCMP_ACT_ALLOW" => names.extend(rule_names),
            "SCMP_ACT_ERRNO" if rule["errnoRet"] == 38 && names.contains("clone") => {
                names.extend(rule_names)
            }
            _ => {}
        }
    }
    names
}

fn profile() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/seccomp/fdprof.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The calls a `strace --summary-only -U name` file names.
fn names_in(summary: &str) -> BTreeSet<String> {
    summary
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('-') && *l != "syscall" && *l != "total")
        .map(String::from)
        .collect()
}

/// `fdprof ARGS` under strace (its summary in `out`), not waited for.
fn traced(out: &Path, args: &[&str]) -> std::process::Child {
    Command::new(STRACE)
        .args(["-f", "-qq", "--summary-only", "-U", "name", "-o"])
        .arg(out)
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {STRACE} ({e}): install strace"))
}

/// A request with the token; the answer's status line.
fn get(addr: std::net::SocketAddr, path: &str, token: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// A daemon under strace: asked at its endpoints, a window by SIGUSR1, stopped by SIGTERM.
fn traced_daemon(dir: &Path) -> BTreeSet<String> {
    use std::os::unix::fs::PermissionsExt;
    let token = "0123456789abcdef".repeat(4);
    let token_file = dir.join("token");
    std::fs::write(&token_file, &token).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr = free_loopback_addr();
    let summary = dir.join("daemon.strace");
    let (listen, token_path) = (addr.to_string(), token_file.display().to_string());
    // An OTLP receiver that takes connections and never answers: the push connects, sends and
    // times out, as against a receiver that is down.
    let receiver = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let otlp = format!("http://{}", receiver.local_addr().unwrap());
    let args = [
        "daemon",
        "-a",
        "--cpu",
        "--tier",
        "full",
        "--interval",
        "500ms",
    ];
    let mut strace = traced(
        &summary,
        &[
            &args[..],
            &["--listen", &listen, "--token-file", &token_path],
            &["--otlp-endpoint", &otlp, "--otlp-timeout", "1s"],
        ]
        .concat(),
    );
    let start = Instant::now();
    while !get_ok(addr) {
        assert!(start.elapsed() < Duration::from_secs(120), "no daemon");
        assert!(strace.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(200));
    }
    let children = format!("/proc/{0}/task/{0}/children", strace.id());
    let pid: i32 = std::fs::read_to_string(children)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut guard = Stopper(Some(strace), pid);
    let load = start_workload(&["opensock", "-t", "2", "--ops", "20000"]);
    load.go();
    std::thread::sleep(Duration::from_secs(2));
    // 503 until an interval has ended, which under strace takes a while.
    for path in ["/metrics", "/report.json?top=100", "/flamegraph.svg?cpu=1"] {
        let asked = Instant::now();
        let mut status = get(addr, path, &token);
        while !status.contains(" 200 ") && asked.elapsed() < Duration::from_secs(90) {
            std::thread::sleep(Duration::from_millis(500));
            status = get(addr, path, &token);
        }
        assert!(status.contains(" 200 "), "{path}: {status}");
    }
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    std::thread::sleep(Duration::from_secs(1));
    load.finish();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let out = guard.0.take().unwrap().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    names_in(&std::fs::read_to_string(&summary).unwrap())
}

/// The traced daemon, killed (by its pid) if the test fails before it stops.
struct Stopper(Option<std::process::Child>, i32);

impl Drop for Stopper {
    fn drop(&mut self) {
        if let Some(mut strace) = self.0.take() {
            // SAFETY: killing the daemon this test started.
            unsafe { libc::kill(self.1, libc::SIGKILL) };
            let _ = strace.wait();
        }
    }
}

fn get_ok(addr: std::net::SocketAddr) -> bool {
    TcpStream::connect(addr).is_ok()
}

#[test]
fn the_seccomp_allow_list_holds_every_call_fdprof_makes() {
    require_root();
    let _guard = kernel_lock();
    let dir = tmp("seccomp-trace");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut calls = BTreeSet::new();
    let recording = dir.join("r.data").display().to_string();
    for (name, args) in [
        ("doctor", vec!["doctor"]),
        (
            "record",
            vec!["record", "-a", "--cpu", "-d", "2s", "-o", &recording],
        ),
        ("report", vec!["report", &recording]),
    ] {
        let summary = dir.join(format!("{name}.strace"));
        let out = traced(&summary, &args).wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        calls.extend(names_in(&std::fs::read_to_string(&summary).unwrap()));
    }
    calls.extend(traced_daemon(&dir));
    for expected in ["bpf", "perf_event_open", "openat", "epoll_wait", "accept4"] {
        assert!(
            calls.contains(expected),
            "strace saw no {expected}: {calls:?}"
        );
    }
    let allowing = allowed(&profile());
    let missing: Vec<&String> = calls.difference(&allowing).collect();
    assert!(
        missing.is_empty(),
        "fdprof calls {missing:?}, which deploy/kubernetes/seccomp/fdprof.json refuses (EPERM \
         in the pod): `sudo cargo xtask seccomp` remakes it"
    );
    // The comparison can fail: a profile without one of the calls made is caught.
    let mut short = profile();
    let first = &mut short["syscalls"][0]["names"];
    first.as_array_mut().unwrap().retain(|n| n != "bpf");
    assert!(calls.difference(&allowed(&short)).any(|n| n == "bpf"));
    let _ = std::fs::remove_dir_all(&dir);
}
