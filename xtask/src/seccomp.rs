//! `cargo xtask seccomp`: writes deploy/kubernetes/seccomp/fdprof.json, an allow-list of the
//! system calls the container's fdprof makes. The static binary the image holds is run under
//! `strace -f --summary-only` through a broad scenario (doctor, workloads, `record -a --cpu`,
//! `record --trace` of a command, report, flamegraph, export, `top --batch`, and a daemon under
//! `--config` with the on-CPU samples and full tracing, every endpoint asked with the token, a
//! window of full tracing by POST and by SIGUSR1, a reload at SIGHUP, an OTLP push to a receiver
//! that never answers, and a stop at SIGTERM);
//! the names it saw, the ones the container runtime makes between loading the filter and
//! exec'ing fdprof ([`RUNTIME`]), and those of Debian's dynamic loader (the tests' build of
//! fdprof is dynamic: [`LOADER`]), and `restart_syscall` ([`KERNEL`]) are allowed; anything else fails with EPERM. `clone` is allowed
//! only without namespace flags, and `clone3`, whose flags a filter cannot see, fails with
//! ENOSYS, on which glibc falls back to `clone`. A call of [`NEVER`] in the trace stops the
//! task: allowing it is a decision, not a measurement.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::workspace::root;

const STRACE: &str = "/usr/bin/strace";

/// What runc (1.1, Debian 12's) calls after it has loaded the filter and before it execs the
/// container's process, when no_new_privs is off (allowPrivilegeEscalation: true): the filter
/// then goes in before it drops to the user and the capabilities. Measured by running the
/// DaemonSet's pod (its user, capabilities and mounts) with `SCMP_ACT_LOG` as the default
/// action, the calls seen so far allowed, and the kernel's log read for those of
/// `runc:[2:INIT]`, over and over until a run logs none (the log keeps 10 lines per 5 s).
const RUNTIME: &[&str] = &[
    // Measured.
    "capget",
    "capset",
    "chdir",
    "close",
    "epoll_ctl",
    "execve",
    "faccessat2",
    "fchown",
    "fcntl",
    "fstat",
    "fstatfs",
    "futex",
    "getcwd",
    "getdents64",
    "getpid",
    "getppid",
    "newfstatat",
    "openat",
    "prctl",
    "read",
    "setgid",
    "setgroups",
    "setuid",
    "write",
    // Go's runtime in runc's init may make these on another run (threads, signals, timers),
    // and a runc that drops privileges with the set*res* calls.
    "close_range",
    "epoll_pwait",
    "exit",
    "exit_group",
    "fchdir",
    "gettid",
    "madvise",
    "mmap",
    "munmap",
    "nanosleep",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sched_yield",
    "setresgid",
    "setresuid",
    "sigaltstack",
    "tgkill",
];

/// Debian's dynamic loader's calls that the static binary does not make (it reads the
/// libraries' headers with `pread64`).
const LOADER: &[&str] = &["access", "pread64"];

/// What the kernel makes on fdprof's behalf: a sleep interrupted by a stop (SIGSTOP, a
/// debugger) resumes through `restart_syscall`, which a trace sees only when one happened.
const KERNEL: &[&str] = &["restart_syscall"];

/// Calls that must stay refused: a trace that holds one stops `cargo xtask seccomp`.
pub(crate) const NEVER: &[&str] = &[
    "ptrace",
    "process_vm_writev",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "pivot_root",
    "chroot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "userfaultfd",
    "reboot",
];

/// x86-64 calls arm64 lacks, and the generic call glibc makes there in their place.
const GENERIC: &[(&str, &str)] = &[
    ("access", "faccessat"),
    ("chmod", "fchmodat"),
    ("chown", "fchownat"),
    ("dup2", "dup3"),
    ("epoll_create", "epoll_create1"),
    ("epoll_wait", "epoll_pwait"),
    ("eventfd", "eventfd2"),
    ("getdents", "getdents64"),
    ("inotify_init", "inotify_init1"),
    ("link", "linkat"),
    ("lstat", "newfstatat"),
    ("mkdir", "mkdirat"),
    ("open", "openat"),
    ("pipe", "pipe2"),
    ("poll", "ppoll"),
    ("readlink", "readlinkat"),
    ("rename", "renameat2"),
    ("renameat", "renameat2"),
    ("select", "pselect6"),
    ("signalfd", "signalfd4"),
    ("stat", "newfstatat"),
    ("unlink", "unlinkat"),
];

/// CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID and
/// CLONE_NEWNET: `clone` is allowed where none of them is set.
const CLONE_NAMESPACES: u64 = 0x7E02_0000;

fn profile_path() -> PathBuf {
    root().join("deploy/kubernetes/seccomp/fdprof.json")
}

/// `cargo xtask seccomp`.
pub(crate) fn run() -> Result<()> {
    if !Path::new(STRACE).is_file() {
        crate::bootstrap::apt_get(&["install", "-y", "strace"])?;
    }
    let bin = crate::static_fdprof::build_static()?;
    let dir = root().join("target/seccomp");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let traced = scenario(&bin, &dir)?;
    let never: Vec<&&str> = NEVER.iter().filter(|n| traced.contains(**n)).collect();
    if !never.is_empty() {
        bail!("fdprof called {never:?}, which the profile refuses by decision: look first");
    }
    let profile = profile(&traced);
    let text = serde_json::to_string_pretty(&profile)? + "\n";
    fs::write(profile_path(), text)?;
    println!(
        "wrote {}: {} system calls fdprof made, {} allowed in all",
        profile_path().display(),
        traced.len(),
        profile["syscalls"][0]["names"]
            .as_array()
            .map_or(0, |n| n.len())
            + 1
    );
    Ok(())
}

/// The profile allowing `traced`, the runtime's and the loader's calls.
pub(crate) fn profile(traced: &BTreeSet<String>) -> serde_json::Value {
    let mut allowed: BTreeSet<String> = traced.clone();
    allowed.extend(
        RUNTIME
            .iter()
            .chain(LOADER)
            .chain(KERNEL)
            .map(|s| s.to_string()),
    );
    // arm64 has only the generic calls: the one each x86-64 call traced stands for there.
    let generic: Vec<&str> = allowed
        .iter()
        .filter_map(|n| GENERIC.iter().find(|(x86, _)| x86 == n).map(|(_, g)| *g))
        .collect();
    allowed.extend(generic.into_iter().map(String::from));
    allowed.remove("clone");
    allowed.remove("clone3");
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64"],
        "syscalls": [
            {"names": allowed, "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": CLONE_NAMESPACES, "valueTwo": 0,
                       "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
        ]
    })
}

/// The names of a `strace --summary-only -U name` file.
pub(crate) fn names_in(summary: &str) -> BTreeSet<String> {
    summary
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('-') && *l != "syscall" && *l != "total")
        .map(String::from)
        .collect()
}

/// `bin ARGS` under strace, its summary in `dir/NAME.strace`; not waited for.
fn traced(bin: &Path, dir: &Path, name: &str, args: &[&str]) -> Result<Child> {
    Command::new(STRACE)
        .args(["-f", "-qq", "--summary-only", "-U", "name", "-o"])
        .arg(dir.join(format!("{name}.strace")))
        .arg(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.join(format!("{name}.out")))?)
        .stderr(fs::File::create(dir.join(format!("{name}.err")))?)
        .spawn()
        .context("cannot run strace")
}

/// `bin ARGS` under strace, to its end; fails on a non-zero exit.
fn traced_run(bin: &Path, dir: &Path, name: &str, args: &[&str]) -> Result<()> {
    eprintln!("==> strace fdprof {}", args.join(" "));
    let status = traced(bin, dir, name, args)?.wait()?;
    if !status.success() {
        let err = fs::read_to_string(dir.join(format!("{name}.err"))).unwrap_or_default();
        bail!(
            "fdprof {} failed ({status}): {}",
            args.join(" "),
            err.trim()
        );
    }
    Ok(())
}

/// Every command of the scenario; the union of the calls they made.
fn scenario(bin: &Path, dir: &Path) -> Result<BTreeSet<String>> {
    let data = dir.join("record.data");
    let trace = dir.join("trace.data");
    let (data_s, trace_s) = (data.display().to_string(), trace.display().to_string());
    let me = bin.display().to_string();
    traced_run(bin, dir, "version", &["--version"])?;
    traced_run(bin, dir, "doctor", &["doctor"])?;
    traced_run(bin, dir, "doctor-json", &["doctor", "--json"])?;
    traced_run(
        bin,
        dir,
        "workload",
        &["workload", "opensock", "-t", "2", "-d", "1s"],
    )?;
    let load = Command::new(bin)
        .args(["workload", "accept", "-t", "2", "-d", "6s"])
        .stdout(Stdio::null())
        .spawn()?;
    traced_run(
        bin,
        dir,
        "record",
        &["record", "-a", "--cpu", "-d", "3s", "-o", &data_s],
    )?;
    let record_trace = [
        "record",
        "--trace",
        "--interval",
        "100ms",
        "-d",
        "3s",
        "-o",
        &trace_s,
        "--",
        me.as_str(),
        "workload",
        "dup2-worst",
        "-d",
        "2s",
    ];
    traced_run(bin, dir, "record-trace", &record_trace)?;
    wait_quietly(load);
    traced_run(bin, dir, "report", &["report", &data_s])?;
    traced_run(bin, dir, "report-json", &["report", "--json", &trace_s])?;
    traced_run(bin, dir, "flamegraph", &["flamegraph", "--cpu", &data_s])?;
    traced_run(bin, dir, "replay", &["replay", &trace_s])?;
    traced_run(bin, dir, "top", &["top", "--batch", "-n", "2", "-a"])?;
    daemon(bin, dir)?;
    let mut all = BTreeSet::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "strace") {
            all.extend(names_in(&fs::read_to_string(&path)?));
        }
    }
    Ok(all)
}

fn wait_quietly(mut child: Child) {
    let _ = child.wait();
}

/// The daemon under `--config` (all, cpu, full tier, a capture rule), asked at every endpoint,
/// given a window of full tracing by POST and by SIGUSR1, reloaded at SIGHUP, stopped at
/// SIGTERM.
fn daemon(bin: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let token = "0123456789abcdef".repeat(4);
    let token_file = dir.join("token");
    fs::write(&token_file, format!("{token}\n"))?;
    fs::set_permissions(&token_file, fs::Permissions::from_mode(0o600))?;
    let captures = dir.join("captures");
    fs::create_dir_all(&captures)?;
    fs::set_permissions(&captures, fs::Permissions::from_mode(0o700))?;
    let config = dir.join("daemon.toml");
    fs::write(
        &config,
        format!(
            "all = true\ncpu = true\ntier = \"full\"\ninterval = \"500ms\"\n\
             capture_on = [\"shared-table\"]\ncapture_dir = \"{}\"\ncapture_after = \"1s\"\n",
            captures.display()
        ),
    )?;
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644))?;
    let listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    // An OTLP receiver that takes connections and never answers: the push connects, sends,
    // times out and retries.
    let receiver = std::net::TcpListener::bind("127.0.0.1:0")?;
    let otlp = format!("http://{}", receiver.local_addr()?);
    let (config_s, token_s, listen_s) = (
        config.display().to_string(),
        token_file.display().to_string(),
        listen.to_string(),
    );
    eprintln!("==> strace fdprof daemon --config {config_s} (every endpoint, signals)");
    let mut strace = traced(
        bin,
        dir,
        "daemon",
        &[
            "daemon",
            "--config",
            &config_s,
            "--listen",
            &listen_s,
            "--token-file",
            &token_s,
            "--otlp-endpoint",
            &otlp,
            "--otlp-timeout",
            "1s",
            "-v",
        ],
    )?;
    let pid = daemon_pid(strace.id())?;
    let result = exercise(bin, dir, &mut strace, pid, listen, &token);
    if result.is_err() {
        // SAFETY: stopping the daemon this task started, by its pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let _ = strace.wait();
    }
    result
}

/// The daemon's part of the scenario, once started.
fn exercise(
    bin: &Path,
    dir: &Path,
    strace: &mut Child,
    pid: u32,
    listen: SocketAddr,
    token: &str,
) -> Result<()> {
    let log = dir.join("daemon.err");
    let up = Instant::now();
    while !fs::read_to_string(&log)?.contains("listening on") {
        if up.elapsed() > Duration::from_secs(120) || strace.try_wait()?.is_some() {
            bail!("the daemon never listened: {}", fs::read_to_string(&log)?);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let load = Command::new(bin)
        .args(["workload", "opensock", "-t", "2", "-d", "4s"])
        .stdout(Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(3));
    let signal = |sig| {
        // SAFETY: signalling the daemon this task started.
        unsafe { libc::kill(pid as i32, sig) };
        std::thread::sleep(Duration::from_secs(1));
    };
    for path in ENDPOINTS {
        http(listen, "GET", path, token)?;
    }
    http(listen, "POST", "/api/v1/trace?seconds=1", token)?;
    signal(libc::SIGUSR1);
    signal(libc::SIGHUP);
    // Under strace the main loop may lag (every call of every process it traces is strace's
    // too): the reload is waited for, and SIGTERM repeated until the daemon stops.
    logged(&log, "reloaded", Duration::from_secs(90))?;
    wait_quietly(load);
    for path in ["/metrics", "/report.json?seconds=2", "/captures"] {
        http(listen, "GET", path, token)?;
    }
    let stopping = Instant::now();
    while strace.try_wait()?.is_none() {
        if stopping.elapsed() > Duration::from_secs(120) {
            bail!("the daemon did not stop at SIGTERM");
        }
        signal(libc::SIGTERM);
        let waited = Instant::now();
        while waited.elapsed() < Duration::from_secs(15) && strace.try_wait()?.is_none() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let status = strace.wait()?;
    if !status.success() {
        bail!("the daemon exited {status}: {}", fs::read_to_string(&log)?);
    }
    Ok(())
}

/// Waits until the daemon's log at `log` holds `what` (`config reloaded`, or `config not
/// reloaded` where strace slowed the read past its 5 s: the reload ran either way).
fn logged(log: &Path, what: &str, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    while !fs::read_to_string(log)?.contains(what) {
        if start.elapsed() > timeout {
            bail!("the daemon never logged {what:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// What the scenario asks the daemon (the stream: what comes in two seconds).
const ENDPOINTS: &[&str] = &[
    "/healthz",
    "/",
    "/static/page.js",
    "/static/page.css",
    "/metrics",
    "/report.json?seconds=2",
    "/report.json?top=1000",
    "/flamegraph.svg?seconds=2",
    "/flamegraph.svg?cpu=1",
    "/debug/pprof/",
    "/debug/pprof/profile?seconds=1",
    "/debug/pprof/mutex",
    "/api/v1/targets",
    "/api/v1/timeline",
    "/api/v1/compare",
    "/api/v1/stream",
    "/captures",
];

/// The first child of `parent` (strace's: the command it traces).
fn daemon_pid(parent: u32) -> Result<u32> {
    let children = format!("/proc/{parent}/task/{parent}/children");
    let start = Instant::now();
    loop {
        let text = fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = text.split_whitespace().next() {
            return Ok(pid.parse()?);
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("strace ({parent}) started no daemon");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request with the token, its answer read for up to 2 s (the stream never ends).
fn http(addr: SocketAddr, method: &str, path: &str, token: &str) -> Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    // At most 2 s of the answer: the stream sends an event each interval and never ends.
    let mut buf = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    let mut chunk = [0u8; 16 * 1024];
    while Instant::now() < until {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf[..buf.len().min(12)]).to_string();
    eprintln!("    {method} {path}: {head}");
    Ok(())
}
