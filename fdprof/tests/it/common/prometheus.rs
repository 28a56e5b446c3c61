//! A real Prometheus (`/usr/bin/prometheus`, installed by `cargo xtask bootstrap`) for the
//! daemon's and the dashboard's tests: it scrapes the given addresses every second as job
//! `fdprof`, listens on a free loopback port, keeps its data in a temporary directory and is
//! killed (its own child, by PID) when dropped. Queries go over plain HTTP/1.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

/// A loopback address with a port free now (the kernel's pick, released at once).
pub fn free_loopback_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("cannot bind a loopback port")
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `scrape`.
    pub fn start(scrape: &[SocketAddr]) -> Prometheus {
        Self::start_on(free_loopback_addr(), scrape)
    }

    /// Starts Prometheus listening on `listen` (which `scrape` may name: it scrapes itself),
    /// and waits until it is ready.
    pub fn start_on(listen: SocketAddr, scrape: &[SocketAddr]) -> Prometheus {
        Self::launch(listen, scrape, None)
    }

    /// [`Prometheus::start`], evaluating the alerting rules of `rules` every second.
    pub fn start_with_rules(scrape: &[SocketAddr], rules: &Path) -> Prometheus {
        Self::launch(free_loopback_addr(), scrape, Some(rules))
    }

    /// Starts Prometheus with one scrape job of its own (YAML, indented as an item of
    /// `scrape_configs`), every second.
    pub fn start_with_job(job: &str) -> Prometheus {
        let text = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{job}"
        );
        Self::launch_with(free_loopback_addr(), text)
    }

    fn launch(listen: SocketAddr, scrape: &[SocketAddr], rules: Option<&Path>) -> Prometheus {
        let mut text = scrape_config(scrape);
        if let Some(rules) = rules {
            text.push_str(&format!("rule_files: [\"{}\"]\n", rules.display()));
        }
        Self::launch_with(listen, text)
    }

    fn launch_with(listen: SocketAddr, text: String) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: run `cargo xtask bootstrap`"
        );
        let dir = super::tmp(&format!("prometheus-{}", listen.port()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, text).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--web.listen-address={listen}"))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {PROMETHEUS}: {e}"));
        let mut prometheus = Prometheus {
            child,
            addr: listen,
            dir,
        };
        prometheus.wait_ready();
        prometheus
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            if http_get(self.addr, "/-/ready").is_ok_and(|(code, _)| code == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Prometheus's own output so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Evaluates `expr` now (`/api/v1/query`) and returns `data.result`: for an instant vector,
    /// an array of `{"metric": {labels}, "value": [time, "value"]}`. Panics with Prometheus's
    /// error if it refuses the expression.
    pub fn query(&self, expr: &str) -> Value {
        let path = format!("/api/v1/query?query={}", url_encode(expr));
        let (code, body) = http_get(self.addr, &path)
            .unwrap_or_else(|e| panic!("query {expr}: cannot reach prometheus: {e}"));
        let reply: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("query {expr}: HTTP {code}, not JSON ({e}): {body}"));
        assert_eq!(
            reply["status"], "success",
            "query {expr}: HTTP {code}: {} {}",
            reply["errorType"], reply["error"]
        );
        reply["data"]["result"].clone()
    }

    /// Queries `expr` every 250 ms until `done` accepts its result, and returns that result;
    /// panics with the last result after `timeout`.
    pub fn wait_for(&self, expr: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.query(expr);
            if done(&result) {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "{expr} still {result} after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // Our own child, by PID; wait() reaps it so no zombie is left.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The sample values of an instant-vector result (Prometheus writes them as strings: "NaN",
/// "+Inf" included).
pub fn sample_values(result: &Value) -> Vec<f64> {
    result
        .as_array()
        .expect("an instant vector")
        .iter()
        .map(|s| {
            let v = s["value"][1].as_str().expect("a sample value");
            v.parse()
                .unwrap_or_else(|e| panic!("sample value {v}: {e}"))
        })
        .collect()
}

/// Scrapes every second with the daemons' token, as `dashboards/prometheus.yml` shows.
fn scrape_config(scrape: &[SocketAddr]) -> String {
    let targets: Vec<String> = scrape.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: fdprof\n    authorization:\n      type: Bearer\n      \
         credentials_file: {}\n    static_configs:\n      - targets: [{}]\n",
        super::daemon::token_file().display(),
        targets.join(", ")
    )
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` over HTTP/1.1 (one request, `Connection: close`): the status code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http_get_with(addr, path, &[]).map(|(code, _, body)| (code, body))
}

/// [`http_get`] with these request headers (`Name: value`): the status code, the response's
/// headers (one string, as sent) and the body.
pub fn http_get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(u16, String, String)> {
    http_request(addr, "GET", path, headers)
}

/// One request with no body: status code, response head and body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Content-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(|| bad("bad chunked body"))?
    } else {
        body.to_string()
    };
    Ok((code, head.to_string(), body))
}

/// Decodes a chunked body (RFC 9112 §7.1): hex size, CRLF, data, CRLF, ..., size 0.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size_line, after) = rest.split_once("\r\n")?;
        let size_hex = size_line.split(';').next()?.trim();
        let size = usize::from_str_radix(size_hex, 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// The Grafana dashboard, parsed.
pub fn dashboard() -> Value {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn dashboard_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/fdprof.json")
}

/// Every panel's query as the dashboard has it (rows' nested panels included), in order.
pub fn dashboard_raw_expressions() -> Vec<String> {
    fn collect(panels: &Value, out: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                out.push(
                    target["expr"]
                        .as_str()
                        .expect("a target without expr")
                        .into(),
                );
            }
            collect(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    collect(&dashboard()["panels"], &mut out);
    out
}

/// Every panel's query as Grafana would send it with all jobs and instances selected, `target`
/// chosen (a regex: the name of one target, or `.*` for all) and a 5 s rate interval (at least
/// four of `start`'s 1 s scrapes): ready for `Prometheus::query`.
pub fn dashboard_expressions(target: &str) -> Vec<String> {
    dashboard_raw_expressions()
        .into_iter()
        .map(|e| {
            e.replace("$__rate_interval", "5s")
                .replace("$job", ".*")
                .replace("$instance", ".*")
                .replace("$target", target)
        })
        .collect()
}
