//! `fdprof daemon` under what a local user can throw at it: thousands of idle connections from
//! an unprivileged client, and config paths that would block a reader (`/proc/kmsg`, a FIFO).
//! It must go on profiling exactly, answer, count what it refused, and keep its memory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::daemon::{Daemon, authorization, fdprof_as, poll};
use crate::common::prometheus::free_loopback_addr;
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections the flood holds: over ten times `--max-connections`' default of 256.
const FLOOD: usize = 3000;

/// Opens `n` connections to a port and holds them, sending nothing, until its standard input
/// closes; prints `ready` once all are open.
const FLOOD_SCRIPT: &str = "
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.socket()
    s.settimeout(30)
    s.connect(('127.0.0.1', port))
    held.append(s)
print('ready', flush=True)
sys.stdin.read()
";

/// GET `path` with the token, allowing 3 s to connect and 3 s for each read (a starved daemon
/// would answer after the flood's 10 s idle timeout, if at all): the status code.
fn get_soon(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let soon = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, soon)?;
    stream.set_read_timeout(Some(soon))?;
    stream.set_write_timeout(Some(soon))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{}\r\nConnection: close\r\n\r\n",
        authorization()
    )?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    let code = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
    Ok(code)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn an_idle_flood_from_another_user_neither_blinds_nor_starves_the_daemon() {
    require_root();
    let _guard = kernel_lock();
    let (comm, ops) = ("fdpd-flood", 5000u64);
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "1s"]);
    daemon.stream(1);
    let rss_before = rss_kb(daemon.pid());
    let mut flood = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", FLOOD_SCRIPT])
        .args([daemon.addr.port().to_string(), FLOOD.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start the flood (setpriv, /usr/bin/python3)");
    let mut ready = String::new();
    BufReader::new(flood.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(
        ready.trim(),
        "ready",
        "the flood could not open its connections"
    );

    // Under the flood: health and an authorised scrape answer at once.
    for path in ["/healthz", "/metrics"] {
        let code = get_soon(daemon.addr, path);
        assert!(
            matches!(code, Ok(200)),
            "{path}: {code:?}\n{}",
            daemon.log()
        );
    }
    // A workload started now is found and counted exactly.
    let w = start_workload_with(
        fdprof_as(comm),
        &["socket-close", "-t", "1", "--ops", &ops.to_string()],
    );
    daemon.wait_line("INFO", &format!("profiling pid {} ({comm})", w.pid));
    w.go();
    let expected = w.finish()["expected"].clone();
    assert_eq!(expected["fds_created"]["socket"], ops);
    daemon.wait_metric(
        &format!("fdprof_fd_allocations_total{{target=\"{comm}\",syscall=\"socket\"}}"),
        ops as f64,
    );
    // What was refused is counted and logged, once.
    let refused = daemon
        .metric("fdprof_http_connections_refused_total{reason=\"limit\"}")
        .unwrap();
    assert!(refused >= (FLOOD - 256) as f64, "{refused} refused");
    assert_eq!(
        daemon.lines("WARN", "--max-connections 256").len(),
        1,
        "{}",
        daemon.log()
    );
    // The idle connections that got in are closed 10 s after they opened.
    let closed = poll(TIMEOUT, || {
        let open = daemon.metric("fdprof_http_connections").unwrap();
        let timeouts = daemon
            .metric("fdprof_http_connections_refused_total{reason=\"timeout\"}")
            .unwrap();
        (open <= 2.0 && timeouts > 0.0)
            .then_some(())
            .ok_or((open, timeouts))
    });
    assert!(closed.is_ok(), "idle connections not closed: {closed:?}");
    drop(flood.stdin.take());
    let _ = flood.wait();
    let rss_after = rss_kb(daemon.pid());
    assert!(
        rss_after < rss_before + 50 * 1024,
        "VmRSS {rss_before} kB before the flood, {rss_after} kB after"
    );
    let mut daemon = daemon;
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_no_programs_left();
}

/// A config the daemon may read: root's, mode 0644.
fn config(name: &str, text: &str) -> std::path::PathBuf {
    let path = tmp(name);
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_config_that_could_block_is_refused_and_the_daemon_goes_on() {
    require_root();
    let _guard = kernel_lock();
    let kmsg = tmp("kmsg.toml");
    let _ = std::fs::remove_file(&kmsg);
    std::os::unix::fs::symlink("/proc/kmsg", &kmsg).unwrap();
    let fifo = tmp("fifo.toml");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let open = config("open.toml", "comm = [\"fdpd-cfg\"]\n");
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    // At start: one line, exit 2, at once.
    for (path, why) in [
        (&kmsg, "a file of procfs"),
        (&fifo, "not a regular file"),
        (&open, "writable by group or others"),
    ] {
        let addr = free_loopback_addr();
        let mut daemon = Daemon::spawn(
            &addr.to_string(),
            addr,
            &["--config", path.to_str().unwrap()],
        );
        let status = daemon.wait_exit();
        let log = daemon.log();
        assert_eq!(status.code(), Some(2), "{log}");
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("bad config") && log.contains(why), "{log}");
    }
    // At SIGHUP: an ERROR line, the old config stays, the intervals go on, SIGTERM ends it.
    let path = config(
        "daemon.toml",
        "comm = [\"fdpd-cfg\"]\ninterval = \"300ms\"\n",
    );
    let mut daemon = Daemon::start(&["--tier", "full", "--config", path.to_str().unwrap()]);
    for (target, why) in [(&kmsg, "a file of procfs"), (&fifo, "not a regular file")] {
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(target, &path).unwrap();
        let before = daemon.lines("ERROR", why).len();
        daemon.signal(libc::SIGHUP);
        let reported = poll(TIMEOUT, || {
            (daemon.lines("ERROR", why).len() > before)
                .then_some(())
                .ok_or(())
        });
        assert!(reported.is_ok(), "no ERROR for {why}:\n{}", daemon.log());
        assert_eq!(daemon.stream(2).len(), 2);
    }
    let status = daemon.stop();
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert!(
        daemon.lines("INFO", "config reloaded").is_empty(),
        "{}",
        daemon.log()
    );
}

/// A secret the config tests put where a value goes: no error may quote it.
const SECRET: &str = "hunter2SECRET";

/// `fdprof daemon --config PATH`: it must exit 2 at once, in one line (no kernel is touched: the
/// config is read first).
fn refused_config(path: &std::path::Path) -> String {
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn(
        &addr.to_string(),
        addr,
        &["--config", path.to_str().unwrap()],
    );
    let status = daemon.wait_exit();
    let log = daemon.log();
    assert_eq!(status.code(), Some(2), "{log}");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("bad config"), "{log}");
    assert!(!log.contains(SECRET), "a value quoted back: {log}");
    log
}

#[test]
fn a_config_kept_from_others_is_refused_and_errors_never_quote_values() {
    require_root();
    // Root's, mode 0640 (as /etc/shadow): another program's secret, not a config.
    let hidden = config("hidden.toml", &format!("mode = \"{SECRET}\"\n"));
    std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let log = refused_config(&hidden);
    assert!(
        log.contains("not readable by group and others (mode 0640)"),
        "{log}"
    );
    // A root file readable by all: each bad value named by its line and key, never quoted.
    for (text, said) in [
        (
            format!("mode = \"{SECRET}\"\n"),
            "line 1, key mode: a value it does not take",
        ),
        (
            format!("comm = [\"x\"]\ninterval = \"{SECRET}\"\n"),
            "interval is not a duration",
        ),
        (
            format!("comm = \"{SECRET}\"\n"),
            "line 1, key comm: a value it does not take",
        ),
        (
            format!("pid = [\"{SECRET}\"]\n"),
            "line 1, key pid: a value it does not take",
        ),
        (format!("{SECRET}\n"), "line 1: key with no value"),
        (
            format!("comm = [\"{SECRET}-and-more\"]\n"),
            "comm entry 1 can never match",
        ),
        (
            format!("comm = [\"x\"]\ncapture_on = [\"{SECRET}\"]\ncapture_dir = \"/tmp\"\n"),
            "capture_on names no rule",
        ),
        (
            format!("cgroup = [\"/{SECRET}\"]\n"),
            "cgroup entry 1 is not a cgroup",
        ),
    ] {
        let path = config("values.toml", &text);
        let log = refused_config(&path);
        assert!(log.contains(said), "{text:?}: {log}");
    }
}
