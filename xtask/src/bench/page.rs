//! `cargo xtask bench page`: what the page's requests cost with everything kept: 32 target
//! names (one `opensock -t 2` each, nice 19) and 300 kept intervals each (`--interval 100ms`,
//! so they fill in 30 s). Each endpoint the page reads is asked 20 times; its latency (p50,
//! max), its size and the daemon's CPU per request (less its idle rate), against `/healthz`
//! in the same run. Then the page itself in headless Chromium, with a range and a base range
//! chosen: Chromium's CPU (it and its helpers, user + system) against the same Chromium on an
//! empty page.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::harness::daemon::Daemon;
use super::harness::process::CpuSince;
use super::harness::release_and_dir;
use super::harness::stats::{highest, median};
use super::harness::workloads::niced_opensock;

const NAMES: usize = 32;
const KEPT: usize = 300;
const ASKS: usize = 20;
const CHROMIUM: &str = "/usr/bin/chromium";

pub(crate) fn run(_args: &[String]) -> Result<()> {
    let (fdprof, dir) = release_and_dir("page")?;
    let names: Vec<String> = (0..NAMES).map(|i| format!("fdpd-p{i:02}")).collect();
    let daemon = Daemon::start(
        &fdprof,
        &dir,
        &names,
        &["--tier", "full", "--interval", "100ms"],
    )?;
    let _workloads = niced_opensock(&fdprof, &dir, &names, "600s")?;
    measure(&daemon, &dir)
}

/// The kept intervals' span once every name keeps [`KEPT`]: Unix ms.
fn filled(daemon: &Daemon) -> Result<(u64, u64)> {
    let started = Instant::now();
    loop {
        let t: serde_json::Value = serde_json::from_str(&daemon.get("/api/v1/timeline")?)?;
        let points = t["points"].as_array().context("no points")?;
        if points.len() >= KEPT {
            let first = points[0]["start_unix_ms"].as_u64().unwrap_or(0);
            let last = &points[points.len() - 1];
            let end = last["start_unix_ms"].as_u64().unwrap_or(0)
                + last["duration_ms"].as_u64().unwrap_or(0);
            return Ok((first, end));
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("{} intervals kept after 300 s, not {KEPT}", points.len());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn measure(daemon: &Daemon, dir: &Path) -> Result<()> {
    daemon.wait_attached(NAMES)?;
    filled(daemon)?;
    let idle = CpuSince::start(daemon.pid())?;
    std::thread::sleep(Duration::from_secs(5));
    let idle_rate = idle.share()?;
    // {base} and {range} are filled in from the kept intervals just before a path's asks: the
    // intervals roll on while earlier paths are asked.
    let paths = [
        "/healthz",
        "/api/v1/timeline",
        "/api/v1/timeline?target=fdpd-p00",
        "/report.json",
        "/report.json?{range}",
        "/api/v1/compare?{base}&{range}",
        "/flamegraph.svg?{range}",
        "/flamegraph.svg?{range}&{base}",
    ];
    println!(
        "\nthe page's requests: {NAMES} names (opensock -t 2 each, nice 19), {KEPT} kept \
         intervals of 100 ms each; {ASKS} asks each; a range and a base range of a quarter of \
         the kept time each"
    );
    println!(
        "{:<44} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "request", "p50 ms", "max ms", "CPU ms/ask", "kB", "x healthz"
    );
    let mut baseline = None;
    for template in paths {
        let (base, range) = ranges(daemon)?;
        let path = template.replace("{base}", &base).replace("{range}", &range);
        let mut times = Vec::new();
        let mut bytes = 0;
        let cpu = CpuSince::start(daemon.pid())?;
        for _ in 0..ASKS {
            let started = Instant::now();
            bytes = daemon.get(&path)?.len();
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let spent = cpu.beyond(idle_rate)?;
        let max = highest(&times);
        let p50 = median(&mut times);
        let base = *baseline.get_or_insert(p50);
        let shown: String = template.chars().take(44).collect();
        println!(
            "{shown:<44} {p50:>10.2} {max:>10.2} {:>12.2} {:>10.1} {:>10.1}",
            (spent.max(0.0) / ASKS as f64) * 1e3,
            bytes as f64 / 1e3,
            p50 / base
        );
    }
    let (base, range) = ranges(daemon)?;
    browser(daemon, dir, &format!("{base}&{range}"))
}

/// A base range (the kept time's second quarter: the first rolls away while it is asked) and a
/// range (its last quarter), as query parameters.
fn ranges(daemon: &Daemon) -> Result<(String, String)> {
    let (first, end) = filled(daemon)?;
    let quarter = (end - first) / 4;
    Ok((
        format!(
            "base_from={}&base_to={}",
            first + quarter,
            first + 2 * quarter
        ),
        format!("from={}&to={}", end - quarter, end),
    ))
}

/// Chromium's CPU (user + system, its helpers included) loading the page with `query`, and
/// loading an empty page, each the median of 3.
fn browser(daemon: &Daemon, dir: &Path, query: &str) -> Result<()> {
    if !Path::new(CHROMIUM).exists() {
        bail!("{CHROMIUM} is missing: `cargo xtask bootstrap` installs it");
    }
    let page = format!("http://{}/?token={}&{query}", daemon.addr(), daemon.token());
    let cpu = |url: &str, run: usize| -> Result<f64> {
        let before = children_cpu();
        let status = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.join(format!("chromium-{run}")).display()
            ))
            .args(["--virtual-time-budget=3000", "--dump-dom"])
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("chromium failed on {url}");
        }
        Ok(children_cpu() - before)
    };
    let (mut page_cpu, mut blank_cpu) = (Vec::new(), Vec::new());
    for run in 0..3 {
        page_cpu.push(cpu(&page, run)?);
        blank_cpu.push(cpu("about:blank", run)?);
    }
    let (page_cpu, blank_cpu) = (median(&mut page_cpu), median(&mut blank_cpu));
    println!(
        "\nheadless Chromium loading the page (range and base range, {KEPT} intervals on the \
         timeline): {page_cpu:.2} s of CPU; an empty page: {blank_cpu:.2} s; ratio {:.2}",
        page_cpu / blank_cpu
    );
    Ok(())
}

/// CPU seconds (user + system) of the children waited for so far, and theirs.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes one rusage into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
