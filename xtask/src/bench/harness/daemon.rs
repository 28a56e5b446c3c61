//! A `fdprof daemon` started for a bench: on a free loopback port with a token of its own,
//! ready once `/healthz` answers, scraped over plain HTTP, stopped on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A daemon started for the bench, stopped (SIGTERM) on drop.
pub(crate) struct Daemon {
    child: Child,
    addr: SocketAddr,
    /// The token its endpoints need (`--token-file`).
    token: String,
}

impl Daemon {
    /// `fdprof daemon --comm COMMS`, with `extra` options before them.
    pub(crate) fn start(
        fdprof: &Path,
        dir: &Path,
        comms: &[String],
        extra: &[&str],
    ) -> Result<Self> {
        let mut args: Vec<&str> = extra.to_vec();
        args.push("--comm");
        args.extend(comms.iter().map(String::as_str));
        Self::start_with(fdprof, dir, &args)
    }

    /// `fdprof daemon ARGS` on a free loopback port with a token of its own, once `/healthz`
    /// answers.
    pub(crate) fn start_with(fdprof: &Path, dir: &Path, args: &[&str]) -> Result<Self> {
        let addr = free_port()?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let token_file = dir.join("daemon.token");
        let token = write_token(&token_file)?;
        let child = Command::new(fdprof)
            .args(["daemon", "--listen", &addr.to_string(), "--token-file"])
            .arg(&token_file)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start fdprof daemon")?;
        let daemon = Daemon { child, addr, token };
        let started = Instant::now();
        while daemon.get("/healthz").is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the daemon did not answer within 30 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(daemon)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET `path` with the token; the body of a 200 answer.
    pub(crate) fn get(&self, path: &str) -> Result<String> {
        let auth = format!("Authorization: Bearer {}", self.token);
        get(self.addr, &auth, path)
    }

    /// `METHOD path` with the token: the answer's status code and body, whatever they are.
    pub(crate) fn answer(&self, method: &str, path: &str) -> Result<(u16, String)> {
        let auth = format!("Authorization: Bearer {}", self.token);
        let (head, body) = exchange(self.addr, &auth, method, path)?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("{method} {path}: no status in {head:?}"))?;
        Ok((status, body))
    }

    /// The token its endpoints need.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until `n` processes are attached (`fdprof_targets`).
    pub(crate) fn wait_attached(&self, n: usize) -> Result<()> {
        let started = Instant::now();
        loop {
            let body = self.get("/metrics")?;
            let attached = body
                .lines()
                .find_map(|l| l.strip_prefix("fdprof_targets "))
                .and_then(|v| v.trim().parse::<f64>().ok());
            if attached.is_some_and(|a| a as usize >= n) {
                return Ok(());
            }
            // The programs load once, then running processes join at each interval's look
            // through /proc: seconds on a host as loaded as the scrape bench makes it.
            if started.elapsed() > Duration::from_secs(180) {
                bail!("the daemon attached to fewer than {n} processes within 180 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: signalling the daemon this bench started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A random token in `file`, root-only, as `--token-file` requires.
fn write_token(file: &Path) -> Result<String> {
    let mut random = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(file, format!("{token}\n"))?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))?;
    Ok(token)
}

/// `METHOD path` with the `auth` header: the answer's head and body.
fn exchange(addr: SocketAddr, auth: &str, method: &str, path: &str) -> Result<(String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header")?;
    Ok((head.to_string(), body.to_string()))
}

/// GET `path` with the `auth` header; the body of a 200 answer.
fn get(addr: SocketAddr, auth: &str, path: &str) -> Result<String> {
    let (head, body) = exchange(addr, auth, "GET", path)?;
    let body = body.as_str();
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(unchunked(body));
    }
    Ok(body.to_string())
}

/// A chunked body's data: the sizes go, the data stays.
fn unchunked(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_lose_their_sizes() {
        assert_eq!(
            unchunked("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
        assert_eq!(unchunked("0\r\n\r\n"), "");
    }
}
