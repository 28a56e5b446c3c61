//! `cargo xtask bench daemon --only tiers`: what the daemon costs the host at rest, its default
//! tier, against full tracing, on two loads that are nobody's contention:
//! - nginx with 16 worker processes under `ab -c 16` without keep-alive (a new connection, so
//!   an `accept4`, an `openat` and their closes, per request): requests a second;
//! - an unrelated single-threaded socket/close loop (`fdprof workload socket-close -t 1`): ops
//!   a second.
//!
//! Each round runs, for each daemon (`--comm nginx` and `-a`, each at rest and with `--tier
//! full`), both loads under it, between two bare runs without any daemon; the ratio is to the
//! mean of the bare runs around it. The medians of the rounds are checked: at rest at least
//! 0.97 of bare for nginx and 0.98 for the loop (issue 41).
//!
//! The table goes to stdout, the same as JSON to target/bench/daemon/tiers.json.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::bench::harness::daemon::Daemon;
use crate::bench::harness::stats::{median, range};
use crate::bench::harness::workloads::{ops_per_sec, result_line};

const WORKERS: usize = 16;
const REQUESTS: usize = 20_000;
const LOOP_SECS: &str = "3s";
/// Issue 41's floors for the medians at rest.
const NGINX_FLOOR: f64 = 0.97;
const LOOP_FLOOR: f64 = 0.98;

/// The daemons compared: their name in the table and their options.
const DAEMONS: [(&str, &[&str]); 4] = [
    ("--comm nginx, rest", &["--comm", "nginx"]),
    ("-a, rest", &["-a"]),
    ("--comm nginx, full", &["--comm", "nginx", "--tier", "full"]),
    ("-a, full", &["-a", "--tier", "full"]),
];

/// nginx in the foreground with `WORKERS` worker processes, everything it writes under `dir`.
struct Nginx {
    child: Child,
    addr: SocketAddr,
}

impl Nginx {
    fn start(dir: &Path) -> Result<Nginx> {
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        std::fs::create_dir_all(dir.join("www"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::write(dir.join("www/index.html"), "fdprof\n")?;
        let d = dir.display();
        let conf = format!(
            "daemon off;\nworker_processes {WORKERS};\npid {d}/nginx.pid;\n\
             error_log {d}/error.log;\nevents {{ worker_connections 1024; }}\nhttp {{\n\
             access_log off;\nclient_body_temp_path {d}/tmp;\nproxy_temp_path {d}/tmp;\n\
             fastcgi_temp_path {d}/tmp;\nuwsgi_temp_path {d}/tmp;\nscgi_temp_path {d}/tmp;\n\
             server {{ listen {addr}; root {d}/www; }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf)?;
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start nginx (Debian's nginx, installed by `cargo xtask bootstrap`)")?;
        let nginx = Nginx { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                bail!("nginx did not listen on {addr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }

    /// `ab -c 16 -n REQUESTS` without keep-alive: requests a second.
    fn ab(&self) -> Result<f64> {
        let out = Command::new("ab")
            .args([
                "-q",
                "-c",
                &WORKERS.to_string(),
                "-n",
                &REQUESTS.to_string(),
            ])
            .arg(format!("http://{}/index.html", self.addr))
            .stderr(Stdio::null())
            .output()
            .context("cannot run ab (Debian's apache2-utils)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.contains("Failed requests:        0") {
            bail!("ab failed:\n{text}");
        }
        text.lines()
            .find_map(|l| l.strip_prefix("Requests per second:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no requests per second in ab's output")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: the pid is this bench's own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

/// The unrelated loop: `fdprof workload socket-close -t 1`, its ops a second.
fn socket_loop(fdprof: &Path) -> Result<f64> {
    let line = result_line(
        &[
            fdprof.display().to_string(),
            "workload".into(),
            "socket-close".into(),
            "-t".into(),
            "1".into(),
            "-d".into(),
            LOOP_SECS.into(),
            "--json".into(),
        ],
        "ops_per_sec",
    )?;
    ops_per_sec(&line)
}

/// Both loads once: (nginx requests/s, loop ops/s).
fn loads(fdprof: &Path, nginx: &Nginx) -> Result<(f64, f64)> {
    Ok((nginx.ab()?, socket_loop(fdprof)?))
}

pub(crate) fn run(fdprof: &Path, dir: &Path, rounds: usize) -> Result<()> {
    let nginx = Nginx::start(&dir.join("nginx"))?;
    // Warm: the first connections and the page cache.
    nginx.ab()?;
    let mut ratios: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); DAEMONS.len()];
    let mut before = loads(fdprof, &nginx)?;
    for round in 1..=rounds {
        for (i, (name, args)) in DAEMONS.iter().enumerate() {
            let mut all = args.to_vec();
            all.extend(["--interval", "1s"]);
            let daemon = Daemon::start_with(fdprof, dir, &all)?;
            // The master and every worker followed (under -a: the programs loaded).
            daemon.wait_attached(if all.contains(&"-a") { 1 } else { WORKERS + 1 })?;
            let under = loads(fdprof, &nginx)?;
            drop(daemon);
            let after = loads(fdprof, &nginx)?;
            let nginx_ratio = under.0 / ((before.0 + after.0) / 2.0);
            let loop_ratio = under.1 / ((before.1 + after.1) / 2.0);
            eprintln!(
                "round {round}/{rounds}  {name:<20} nginx {:>8.0} req/s ({nginx_ratio:.3})  \
                 loop {:>9.0} ops/s ({loop_ratio:.3})",
                under.0, under.1
            );
            ratios[i].0.push(nginx_ratio);
            ratios[i].1.push(loop_ratio);
            before = after;
        }
    }
    println!(
        "\nthe daemon's cost to the host by tier: nginx ({WORKERS} workers, ab -c {WORKERS} -n \
         {REQUESTS}, no keep-alive) and an unrelated socket/close loop, to bare; {rounds} \
         rounds, each run between two bare runs (medians, range)"
    );
    println!(
        "{:<22} {:>24} {:>24}",
        "daemon", "nginx", "socket/close loop"
    );
    let mut rows = Vec::new();
    let mut short = Vec::new();
    for ((name, _), (n, l)) in DAEMONS.iter().zip(ratios.iter_mut()) {
        let (nr, lr) = (range(n), range(l));
        let (nm, lm) = (median(n), median(l));
        println!(
            "{name:<22} {:>24} {:>24}",
            format!("{nm:.3} ({:.3}–{:.3})", nr.0, nr.1),
            format!("{lm:.3} ({:.3}–{:.3})", lr.0, lr.1)
        );
        if name.ends_with("rest") {
            if nm < NGINX_FLOOR {
                short.push(format!("{name}: nginx {nm:.3} < {NGINX_FLOOR}"));
            }
            if lm < LOOP_FLOOR {
                short.push(format!("{name}: loop {lm:.3} < {LOOP_FLOOR}"));
            }
        }
        rows.push(json!({
            "daemon": name, "nginx_ratio": nm, "nginx_ratios": n,
            "loop_ratio": lm, "loop_ratios": l,
        }));
    }
    let path: PathBuf = dir.join("tiers.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({ "rounds": rows }))?,
    )?;
    if !short.is_empty() {
        bail!("at rest, below issue 41's floors: {}", short.join("; "));
    }
    Ok(())
}
