//! `cargo xtask bench churn`: what process churn costs the daemon. A release daemon follows a
//! name (`--comm`) and then every process (`-a`), 1 s intervals, while `fdprof workload churn`
//! (run by uid 65534) starts short processes of that name, each opening and closing 2 sockets;
//! at 1k, 10k, 50k and 100k processes seen (`--to N` stops earlier) it states the cost of a scrape
//! (`/metrics`, the first after an interval: the figures are made once an interval) and of
//! `/report.json` (every interval kept), medians and maxima of 5 each, the daemon's VmRSS and
//! the processes its figures hold (`fdprof_processes`), and the longest `/healthz` answer
//! during the churn. `--daemon PATH` measures another build's daemon (an older one, to
//! compare); the churn is always this build's.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::harness::args::value_arg;
use super::harness::daemon::Daemon;
use super::harness::process::{named_copy, rss_kb};
use super::harness::release_and_dir;
use super::harness::stats::{highest, median};

/// The churned processes' comm.
const NAME: &str = "fdpd-churn";
/// Processes seen at which the figures are taken.
const CHECKPOINTS: [u64; 4] = [1_000, 10_000, 50_000, 100_000];
/// Sockets each churned process opens and closes.
const SOCKETS: &str = "2";
const SAMPLES: usize = 5;

pub(crate) fn run(args: &[String]) -> Result<()> {
    let to = value_arg(args, "--to")?
        .map(|v| v.parse::<u64>().context("--to takes a number of processes"))
        .transpose()?
        .unwrap_or(100_000);
    let interval = value_arg(args, "--interval")?.unwrap_or("1s");
    let (fdprof, dir) = release_and_dir("churn")?;
    let daemon = value_arg(args, "--daemon")?.map_or_else(|| fdprof.clone(), Into::into);
    let churn = named_copy(&fdprof, &dir, NAME)?;
    println!("daemon: {}", daemon.display());
    println!(
        "{:<7} {:>8} {:>14} {:>18} {:>9} {:>10} {:>12}",
        "mode", "seen", "/metrics ms", "/report.json ms", "RSS MB", "processes", "/healthz max"
    );
    for (mode, follow) in [("comm", vec!["--comm", NAME]), ("all", vec!["-a"])] {
        let mut args = follow;
        args.extend(["--interval", interval]);
        let d = Daemon::start_with(&daemon, &dir, &args)?;
        std::thread::sleep(Duration::from_secs(3));
        let mut seen = 0;
        row(mode, seen, &d, Duration::ZERO)?;
        for checkpoint in CHECKPOINTS.into_iter().filter(|&c| c <= to) {
            let health = HealthWatch::start(d.addr());
            spawn(&churn, checkpoint - seen)?;
            seen = checkpoint;
            // Every exit read, and the interval after that lets them go.
            std::thread::sleep(Duration::from_secs(3));
            row(mode, seen, &d, health.longest())?;
        }
    }
    println!("(medians and maxima of {SAMPLES}; the churn's processes each make 2 sockets)");
    Ok(())
}

/// `n` short processes of the churn, started by uid 65534.
fn spawn(churn: &Path, n: u64) -> Result<()> {
    let out = Command::new(churn)
        .args([
            "workload",
            "churn",
            "--spawn",
            &n.to_string(),
            "--ops",
            SOCKETS,
        ])
        .args(["--uid", "65534", "--json"])
        .output()
        .context("cannot run the churn")?;
    if !out.status.success() {
        bail!("the churn failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// One line of figures, `seen` processes in.
fn row(mode: &str, seen: u64, d: &Daemon, health: Duration) -> Result<()> {
    // The first scrape after an interval makes the figures; the rest reuse them.
    let next_interval = Duration::from_millis(1100);
    let metrics = timed(SAMPLES, next_interval, || d.get("/metrics").map(drop))?;
    let report = timed(SAMPLES, Duration::ZERO, || d.get("/report.json").map(drop))?;
    let body = d.get("/metrics")?;
    // A sum of series values, printed whole (an empty sum is -0.0).
    let held = body
        .lines()
        .filter(|l| l.starts_with("fdprof_processes{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum::<f64>() as u64;
    println!(
        "{mode:<7} {seen:>8} {:>6.1} / {:>5.1} {:>9.1} / {:>6.1} {:>9.1} {held:>10} {:>9.1} ms",
        metrics.0,
        metrics.1,
        report.0,
        report.1,
        rss_kb(d.pid())? as f64 / 1024.0,
        health.as_secs_f64() * 1000.0,
    );
    Ok(())
}

/// `f` run `n` times, `pause` before each: the median and the longest time, ms.
fn timed(n: usize, pause: Duration, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(pause);
        let began = Instant::now();
        f()?;
        ms.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    let max = highest(&ms);
    Ok((median(&mut ms), max))
}

/// Polls `/healthz` every 100 ms until [`HealthWatch::longest`]: the longest answer.
struct HealthWatch {
    stop: Arc<AtomicBool>,
    longest_us: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl HealthWatch {
    fn start(addr: SocketAddr) -> Self {
        let (stop, longest_us) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (stopped, longest) = (stop.clone(), longest_us.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let began = Instant::now();
                let took = match health(addr) {
                    true => began.elapsed(),
                    false => Duration::from_secs(30),
                };
                longest.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        HealthWatch {
            stop,
            longest_us,
            thread,
        }
    }

    fn longest(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        Duration::from_micros(self.longest_us.load(Ordering::Relaxed))
    }
}

/// Whether `/healthz` answers 200 within 30 s.
fn health(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(30)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let sent = write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut head = [0u8; 12];
    sent.is_ok() && s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}
