//! `fdprof daemon` run by a test: its log (standard error) in a file, HTTP to it over plain
//! TCP with the test's token ([`token_file`]), signals by PID; SIGTERM (then SIGKILL) when
//! dropped if it still runs. Also: a copy of the fdprof binary under a chosen name, to start
//! workloads with that comm.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::prometheus::{free_loopback_addr, http_get, http_get_with, http_request};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// The token file every daemon a test starts is given (`--token-file`, unless the test gives
/// its own), and that Prometheus scrapes with: made once per test binary, mode 0600.
pub fn token_file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = super::tmp("daemon.token");
        let mut random = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .unwrap();
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&path, token + "\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    })
}

/// The token of [`token_file`].
pub fn token() -> String {
    std::fs::read_to_string(token_file())
        .unwrap()
        .trim()
        .to_string()
}

/// The request header that carries [`token`].
pub fn authorization() -> String {
    format!("Authorization: Bearer {}", token())
}

pub struct Daemon {
    child: Child,
    /// Where to reach it (loopback, even when it listens on every address).
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Daemon {
    /// `fdprof daemon ARGS --listen` a free loopback port, once `/healthz` answers.
    pub fn start(args: &[&str]) -> Daemon {
        let addr = free_loopback_addr();
        let mut daemon = Self::spawn(&addr.to_string(), addr, args);
        daemon.wait_healthy();
        daemon
    }

    /// `fdprof daemon ARGS --listen LISTEN`, not waited for; `addr` is where to reach it.
    /// Given the test's [`token_file`] unless ARGS name one.
    pub fn spawn(listen: &str, addr: SocketAddr, args: &[&str]) -> Daemon {
        let token: &[&str] = match args.contains(&"--token-file") {
            true => &[],
            false => &["--token-file", token_file().to_str().unwrap()],
        };
        let args: Vec<&str> = args.iter().chain(token).copied().collect();
        Self::spawn_env(listen, addr, &args, &[])
    }

    /// `fdprof daemon ARGS --listen LISTEN` with these environment variables, and no token
    /// file but what ARGS give.
    pub fn spawn_env(
        listen: &str,
        addr: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let log = super::tmp(&format!("daemon-{}.log", addr.port()));
        let file = std::fs::File::create(&log).unwrap();
        let child = super::fdprof()
            .arg("daemon")
            .args(args)
            .args(["--listen", listen])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("cannot start fdprof daemon");
        Daemon { child, addr, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/healthz` answers.
    pub fn wait_healthy(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the daemon exited ({status}):\n{}", self.log());
            }
            if self.try_get("/healthz").is_ok_and(|(code, _)| code == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no /healthz after {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get_with(self.addr, path, &[&authorization()]).map(|(code, _, body)| (code, body))
    }

    /// GET `path` without a token: status code and body.
    pub fn get_anonymous(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path).unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()))
    }

    /// GET `path` with the token: status code and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        self.try_get(path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()))
    }

    /// GET `path` with the token and these request headers: status code, response headers and
    /// body.
    pub fn get_with(&self, path: &str, headers: &[&str]) -> (u16, String, String) {
        let auth = authorization();
        let headers: Vec<&str> = headers.iter().copied().chain([auth.as_str()]).collect();
        http_get_with(self.addr, path, &headers)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()))
    }

    /// POST `path` (no body), with the token unless `anonymous`: status code, response head
    /// and body.
    pub fn post(&self, path: &str, anonymous: bool) -> (u16, String, String) {
        let auth = authorization();
        let headers: &[&str] = if anonymous { &[] } else { &[auth.as_str()] };
        http_request(self.addr, "POST", path, headers)
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.log()))
    }

    /// The value of one series of `/metrics` (text format), written exactly as the
    /// exposition writes it (`name{label="v",...}`); `None` when it is not served.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (code, body) = self.get("/metrics");
        assert_eq!(code, 200, "/metrics: {body}");
        body.lines()
            .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse().expect("a sample value"))
            .next()
    }

    /// Polls [`Daemon::metric`] until `series` has `value`.
    pub fn wait_metric(&self, series: &str, value: f64) {
        let got = poll(READY_TIMEOUT, || {
            let v = self.metric(series);
            (v == Some(value)).then_some(()).ok_or(v)
        });
        if let Err(last) = got {
            panic!("{series} is {last:?}, not {value}\n{}", self.log());
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Log lines at `level` (`INFO`, `WARN`, `ERROR`) that contain `needle`.
    pub fn lines(&self, level: &str, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(level) && l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// Waits until a log line at `level` contains `needle`, and returns it.
    pub fn wait_line(&self, level: &str, needle: &str) -> String {
        poll(READY_TIMEOUT, || {
            self.lines(level, needle).into_iter().next().ok_or(())
        })
        .unwrap_or_else(|()| panic!("no {level} line with {needle:?} in:\n{}", self.log()))
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling the child this test started, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits for it to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        poll(EXIT_TIMEOUT, || self.child.try_wait().unwrap().ok_or(()))
            .unwrap_or_else(|()| panic!("still running after {EXIT_TIMEOUT:?}:\n{}", self.log()))
    }

    /// SIGTERM, and the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    /// The first `n` `event: interval` events of `/api/v1/stream`: their data.
    pub fn stream(&self, n: usize) -> Vec<String> {
        sse_events(self.addr, "/api/v1/stream", "interval", n)
            .unwrap_or_else(|e| panic!("/api/v1/stream: {e}\n{}", self.log()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        self.signal(libc::SIGTERM);
        if poll(EXIT_TIMEOUT, || self.child.try_wait().unwrap().ok_or(())).is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A fresh `--capture-dir` under the tests' scratch directory: root's, mode 0700.
pub fn capture_dir(name: &str) -> PathBuf {
    let dir = super::tmp(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Calls `f` every 50 ms until it gives `Ok`, or its last `Err` after `timeout`.
pub fn poll<T, E>(timeout: Duration, mut f: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// What `read` gives once two readings `apart` agree (the figures have settled), or `None`
/// after `timeout`.
pub fn settled<T: PartialEq>(
    timeout: Duration,
    apart: Duration,
    read: impl Fn() -> T,
) -> Option<T> {
    poll(timeout, || {
        let before = read();
        std::thread::sleep(apart);
        let after = read();
        (after == before).then_some(after).ok_or(())
    })
    .ok()
}

/// The data of the first `n` events named `event` of a server-sent event stream (with the
/// token). Asked for over HTTP/1.0, so that the body comes as it is (not chunked) until the stream is dropped.
pub fn sse_events(
    addr: SocketAddr,
    path: &str,
    event: &str,
    n: usize,
) -> std::io::Result<Vec<String>> {
    let mut stream = TcpStream::connect_timeout(&addr, READY_TIMEOUT)?;
    stream.set_read_timeout(Some(READY_TIMEOUT))?;
    let auth = authorization();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let bad = |why| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
            if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
                return Err(bad(format!("not 200: {head}")));
            }
            // Complete events only: each ends with a blank line.
            let events: Vec<String> = body
                .split("\n\n")
                .collect::<Vec<_>>()
                .split_last()
                .map(|(_, done)| done.to_vec())
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.lines().any(|l| l == format!("event: {event}")))
                .map(|e| {
                    let data: Vec<&str> =
                        e.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                    data.join("\n")
                })
                .collect();
            if events.len() >= n {
                return Ok(events.into_iter().take(n).collect());
            }
        }
        let read = stream.read(&mut buf)?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the stream ended: {}", String::from_utf8_lossy(&raw)),
            ));
        }
        raw.extend_from_slice(&buf[..read]);
    }
}

/// The fdprof binary under the name `comm` (at most 15 bytes): a process run from it has that
/// comm. A hard link when the file system allows, else a copy; made afresh on each call (and
/// renamed over the last one), so it is the binary under test and old builds are not kept.
pub fn fdprof_named(comm: &str) -> PathBuf {
    assert!(comm.len() <= 15, "{comm} is longer than a comm");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fdprof-named");
    std::fs::create_dir_all(&dir).unwrap();
    let (path, fresh) = (
        dir.join(comm),
        dir.join(format!(".{comm}.{}", std::process::id())),
    );
    let _ = std::fs::remove_file(&fresh);
    let binary = env!("CARGO_BIN_EXE_fdprof");
    if std::fs::hard_link(binary, &fresh).is_err() {
        std::fs::copy(binary, &fresh).unwrap();
    }
    std::fs::rename(&fresh, &path).unwrap();
    // A rename onto a link to the same file does nothing: the fresh link is still there.
    let _ = std::fs::remove_file(&fresh);
    path
}

/// A command that runs the fdprof binary as `comm`.
pub fn fdprof_as(comm: &str) -> Command {
    Command::new(fdprof_named(comm))
}

/// BPF programs and links process `pid` holds open (`/proc/PID/fd`): other people's
/// programs loaded at the same time do not count.
pub fn bpf_programs_held(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            l == "anon_inode:bpf-prog" || l == "anon_inode:bpf_link"
        })
        .count()
}

/// `programs/spin.c` spinning for 20 s, and a daemon sampling it on CPU (`--cpu --freq 199`,
/// 250 ms intervals) once it follows it. The spinner is the caller's to end.
pub fn spinning_under_daemon(name: &str) -> (Child, Daemon) {
    let spin = super::tmp(name);
    super::cc("spin.c", &spin, &["-fno-omit-frame-pointer"]);
    let target = Command::new(&spin).arg("20").spawn().unwrap();
    let pid = target.id().to_string();
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--pid",
        &pid,
        "--cpu",
        "--freq",
        "199",
        "--interval",
        "250ms",
    ]);
    daemon.wait_line("INFO", &format!("profiling pid {pid}"));
    (target, daemon)
}
