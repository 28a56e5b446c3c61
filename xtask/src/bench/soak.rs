//! `cargo xtask bench soak [--hours H] [--cpu]`: months on a busy node, compressed. A release
//! daemon (`-a`, with `--cpu` sampling too, 1 s intervals, so its 300 kept intervals fill in
//! five minutes) runs while
//! `fdprof workload churn` (uid 65534) starts short processes, each making 2 sockets, a window
//! of full tracing is asked for every minute, and every endpoint and the page are fetched every
//! 15 s, with two busy loops on the host's CPUs while they are. Each period (an hour, or the
//! whole run when shorter; default 10 minutes) prints the daemon's RSS, its CPU share, the
//! processes churned, and per endpoint the longest answer and the most daemon CPU one took.
//! Then the churn stops, and after one idle minute the RSS is set against the fresh daemon's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::harness::args::value_arg;
use super::harness::daemon::Daemon;
use super::harness::process::{cpu_secs, named_copy, rss_kb};
use super::harness::release_and_dir;

const NAME: &str = "fdpd-soak";
/// Processes a churn batch starts, and the pause after it: about 300 a second.
const BATCH: u64 = 1000;
const BATCH_PAUSE: Duration = Duration::from_secs(2);
const SCRAPE_EVERY: Duration = Duration::from_secs(15);
const WINDOW_EVERY: Duration = Duration::from_secs(60);

/// What each scrape fetches, by name; `{from}`/`{to}` are the kept range's halves.
const ENDPOINTS: [(&str, &str); 10] = [
    ("/metrics", "/metrics"),
    ("/report.json", "/report.json"),
    ("/flamegraph.svg", "/flamegraph.svg"),
    ("pprof/mutex", "/debug/pprof/mutex"),
    ("pprof/profile", "/debug/pprof/profile"),
    ("timeline", "/api/v1/timeline"),
    (
        "compare",
        "/api/v1/compare?base_from={from}&base_to={mid}&from={mid}&to={to}",
    ),
    ("page", "/"),
    ("404 target", "/debug/pprof/mutex?target=no-such-name"),
    ("/healthz", "/healthz"),
];

/// The longest answer and the most daemon CPU of each endpoint over a period, and the
/// answers that were neither 200 nor 404.
#[derive(Default, Clone, Copy)]
struct Worst {
    wall: f64,
    cpu: f64,
    failed: u32,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let hours: f64 = match value_arg(args, "--hours")? {
        None => 1.0 / 6.0,
        Some(h) => h
            .parse()
            .ok()
            .filter(|h: &f64| *h > 0.0 && *h <= 24.0 * 90.0)
            .context("--hours takes a number of hours > 0")?,
    };
    let (fdprof, dir) = release_and_dir("soak")?;
    let churn = named_copy(&fdprof, &dir, NAME)?;
    let mut follow = vec!["-a", "--interval", "1s"];
    if args.iter().any(|a| a == "--cpu") {
        follow.push("--cpu");
    }
    let d = Daemon::start_with(&fdprof, &dir, &follow)?;
    std::thread::sleep(Duration::from_secs(10));
    let fresh = rss_kb(d.pid())?;
    println!("fresh daemon: {:.1} MB", fresh as f64 / 1024.0);
    let churned = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let churner = {
        let (churned, stop) = (churned.clone(), stop.clone());
        std::thread::spawn(move || churn_until(&churn, &churned, &stop))
    };
    let total = Duration::from_secs_f64(hours * 3600.0);
    // Six rows at least, so that a short run shows whether memory still grows.
    let period = (total / 6).min(Duration::from_secs(3600));
    let started = Instant::now();
    header();
    while started.elapsed() < total {
        let left = total - started.elapsed();
        soak_period(&d, period.min(left), &churned, started)?;
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().expect("the churn thread")?;
    std::thread::sleep(Duration::from_secs(60));
    let idle = rss_kb(d.pid())?;
    println!(
        "after {} processes and one idle minute: {:.1} MB, {:+.1} MB on the fresh daemon",
        churned.load(Ordering::Relaxed),
        idle as f64 / 1024.0,
        (idle as f64 - fresh as f64) / 1024.0
    );
    Ok(())
}

fn header() {
    let names: Vec<String> = ENDPOINTS.iter().map(|(n, _)| format!("{n:>16}")).collect();
    println!(
        "{:>6} {:>9} {:>7} {:>6}  ms / daemon CPU ms, the worst of the period:\n{:30}{}",
        "hours",
        "churned",
        "RSS MB",
        "CPU %",
        "",
        names.join("")
    );
}

/// Starts churn batches until `stop`; `churned` counts the processes started.
fn churn_until(churn: &Path, churned: &AtomicU64, stop: &AtomicBool) -> Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let out = std::process::Command::new(churn)
            .args(["workload", "churn", "--spawn", &BATCH.to_string()])
            .args(["--ops", "2", "--uid", "65534", "--json"])
            .output()
            .context("cannot run the churn")?;
        if !out.status.success() {
            bail!("the churn failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        churned.fetch_add(BATCH, Ordering::Relaxed);
        std::thread::sleep(BATCH_PAUSE);
    }
    Ok(())
}

/// One period: windows asked for and scrapes timed; then its row.
/// `run` is when the run started: each row says the hours since.
fn soak_period(d: &Daemon, length: Duration, churned: &AtomicU64, run: Instant) -> Result<()> {
    let start = Instant::now();
    let cpu0 = cpu_secs(d.pid())?;
    let mut worst = [Worst::default(); ENDPOINTS.len()];
    let mut last_window: Option<Instant> = None;
    while start.elapsed() < length {
        if last_window.is_none_or(|t| t.elapsed() >= WINDOW_EVERY) {
            let (status, body) = d.answer("POST", "/api/v1/trace?seconds=10")?;
            if status != 200 {
                bail!("POST /api/v1/trace: {status} {}", body.trim());
            }
            last_window = Some(Instant::now());
        }
        let busy = Busy::start();
        for (w, (name, path)) in worst.iter_mut().zip(ENDPOINTS) {
            let (wall, cpu, failure) = timed(d, &fill(path))?;
            w.wall = w.wall.max(wall);
            w.cpu = w.cpu.max(cpu);
            if let Some(f) = failure {
                w.failed += 1;
                eprintln!("{name}: {f}");
            }
        }
        drop(busy);
        std::thread::sleep(SCRAPE_EVERY);
    }
    let cpu = (cpu_secs(d.pid())? - cpu0) / start.elapsed().as_secs_f64() * 100.0;
    let cells: Vec<String> = worst
        .iter()
        .map(|w| {
            let failed = match w.failed {
                0 => String::new(),
                n => format!(" ({n} failed)"),
            };
            format!("{:>16}", format!("{:.0} / {:.0}{failed}", w.wall, w.cpu))
        })
        .collect();
    println!(
        "{:>6.2} {:>9} {:>7.1} {:>6.1}\n{:30}{}",
        run.elapsed().as_secs_f64() / 3600.0,
        churned.load(Ordering::Relaxed),
        rss_kb(d.pid())? as f64 / 1024.0,
        cpu,
        "",
        cells.join("")
    );
    Ok(())
}

/// A path with the kept range's bounds put in: its first half against its second.
fn fill(path: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let from = now - 300_000;
    path.replace("{from}", &from.to_string())
        .replace("{mid}", &(from + 150_000).to_string())
        .replace("{to}", &now.to_string())
}

/// Milliseconds `GET path` took, the daemon's CPU meanwhile (ms), and the answer when it was
/// neither 200 nor 404 (an answer too: an unknown target's).
fn timed(d: &Daemon, path: &str) -> Result<(f64, f64, Option<String>)> {
    let cpu0 = cpu_secs(d.pid())?;
    let t = Instant::now();
    let (status, body) = d.answer("GET", path)?;
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    let failure = (status != 200 && status != 404).then(|| format!("{status} {}", body.trim()));
    Ok((wall, (cpu_secs(d.pid())? - cpu0) * 1000.0, failure))
}

/// Two busy loops, one a CPU of this 2-CPU host, while it lives: the scrapes meet a busy host.
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
