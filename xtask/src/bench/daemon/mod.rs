//! `cargo xtask bench daemon`: what `fdprof daemon` costs and how it holds up.
//! 1. Overhead: opensock -t 2 bare and with the daemon attached to it (`--comm`, 1 s
//!    intervals), each daemon run between two bare runs; the ratio to the bare runs around, and
//!    the daemon's CPU as a share of one CPU while the workload ran.
//!    The runs are short, so that CPU includes attaching (loading and verifying the programs).
//! 2. Scrapes: 20 target names (one opensock process each), then `/metrics` fetched 200 times,
//!    one every 100 ms (the figures are made once an interval, so about one scrape in ten makes
//!    them): latency p50/p90/p99/max, with the live stacks the daemon held.
//! 3. Memory: VmRSS every 10 s for `--minutes N` (default 1) while the daemon follows the
//!    largest N of `--targets` processes of one name (one opensock, the rest idle), and the
//!    daemon's CPU over that steady state.
//! 4. Targets: for each N of `--targets`, N idle processes followed at once; the programs the
//!    daemon holds, an unrelated process's slowdown, the daemon's idle CPU and memory, and the
//!    programs' cost per syscall while a target is busy ([`targets`]).
//!
//! 5. Tiers: nginx and an unrelated socket/close loop under the daemon at rest and in full
//!    ([`tiers`]).
//!
//! Options: `--rounds N` (default 5), `--minutes N`, `--targets 1,32,256` (the default),
//! `--only overhead,scrapes,memory,targets,tiers`.

mod targets;
mod tiers;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::harness::args::{list_arg, minutes_arg, rounds_arg};
use super::harness::daemon::Daemon;
use super::harness::figures::FigureTable;
use super::harness::process::{Children, CpuSince, cpu_secs, named_copy, rss_kb, spawn_idle};
use super::harness::release_and_dir;
use super::harness::stats::{highest, median, range};
use super::harness::workloads::{niced_opensock, opensock};

/// The comm of the benchmarked workload (a copy of fdprof under this name).
const NAME: &str = "fdpd-bench";
/// How long each opensock run lasts, here and in [`targets`].
const WORKLOAD_SECS: &str = "4s";
const PHASES: [&str; 5] = ["overhead", "scrapes", "memory", "targets", "tiers"];
const SCRAPE_TARGETS: usize = 20;
const SCRAPES: usize = 200;

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = rounds_arg(args, 5)?;
    let minutes = minutes_arg(args)?;
    let counts = targets::counts_arg(args)?;
    let only = only_arg(args)?;
    let (fdprof, dir) = release_and_dir("daemon")?;
    let wanted = |phase: &str| only.as_ref().is_none_or(|o| o.contains(&phase));
    if wanted("overhead") {
        overhead(&fdprof, &dir, rounds)?;
    }
    if wanted("scrapes") {
        scrapes(&fdprof, &dir)?;
    }
    if wanted("memory") {
        let followed = counts.iter().copied().max().unwrap_or(1);
        memory(&fdprof, &dir, minutes, followed)?;
    }
    if wanted("targets") {
        targets::run(&fdprof, &dir, rounds, &counts)?;
    }
    if wanted("tiers") {
        tiers::run(&fdprof, &dir, rounds)?;
    }
    Ok(())
}

/// `--only PHASE,PHASE`: the phases to run (all by default).
fn only_arg(args: &[String]) -> Result<Option<Vec<&str>>> {
    let Some(phases) = list_arg(args, "--only", "--only takes phases, comma-separated")? else {
        return Ok(None);
    };
    if let Some(p) = phases.iter().find(|p| !PHASES.contains(p)) {
        bail!("--only: no phase {p:?} (phases: {})", PHASES.join(", "));
    }
    Ok(Some(phases))
}

fn overhead(fdprof: &Path, dir: &Path, rounds: usize) -> Result<()> {
    let named = named_copy(fdprof, dir, NAME)?;
    let duration = ["-d", WORKLOAD_SECS];
    let (mut ratios, mut shares) = (Vec::new(), Vec::new());
    let mut before = opensock(fdprof, &duration, None)?;
    for round in 1..=rounds {
        // A daemon per round: its programs see every syscall on the host while loaded, so the
        // bare runs around it run without one.
        let daemon = Daemon::start(fdprof, dir, &[NAME.to_string()], &[])?;
        let cpu = CpuSince::start(daemon.pid())?;
        let under = opensock(&named, &duration, Some(&daemon))?;
        let share = cpu.share()?;
        drop(daemon);
        let after = opensock(fdprof, &duration, None)?;
        let ratio = under / ((before + after) / 2.0);
        eprintln!(
            "round {round}/{rounds}  daemon {under:>10.0} ops/s  ratio {ratio:.3}  daemon CPU \
             {:.2}%  (bare {before:.0}, {after:.0})",
            100.0 * share
        );
        ratios.push(ratio);
        shares.push(share);
        before = after;
    }
    let (lo, hi) = range(&ratios);
    println!(
        "\nfdprof daemon --comm {NAME} (1 s intervals) on opensock -t 2 -n 4000 -d \
         {WORKLOAD_SECS}, {rounds} rounds, each between two bare runs (medians)"
    );
    let table = FigureTable::start(44, 14);
    table.row(
        "ratio to bare",
        format!("{:.3} ({lo:.3}–{hi:.3})", median(&mut ratios)),
    );
    table.row(
        "daemon CPU, share of one CPU",
        format!("{:.2}%", 100.0 * median(&mut shares)),
    );
    Ok(())
}

fn scrapes(fdprof: &Path, dir: &Path) -> Result<()> {
    let names: Vec<String> = (0..SCRAPE_TARGETS)
        .map(|i| format!("fdpd-s{i:02}"))
        .collect();
    let daemon = Daemon::start(fdprof, dir, &names, &[])?;
    let _workloads = niced_opensock(fdprof, dir, &names, "90s")?;
    daemon.wait_attached(SCRAPE_TARGETS)?;
    // Some intervals for the stacks to build up, and the daemon's CPU without scrapes.
    let idle = CpuSince::start(daemon.pid())?;
    std::thread::sleep(Duration::from_secs(10));
    let idle_rate = idle.share()?;
    let scraping = CpuSince::start(daemon.pid())?;
    let mut latencies = Vec::new();
    let mut bytes = 0;
    for _ in 0..SCRAPES {
        let started = Instant::now();
        bytes = daemon.get("/metrics")?.len();
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(100).saturating_sub(started.elapsed()));
    }
    let per_scrape = scraping.beyond(idle_rate)? / SCRAPES as f64;
    // Each target's stack groups, added up (the daemon-wide report is bounded as one name).
    let mut stacks = 0;
    for name in &names {
        let path = format!("/report.json?seconds=10&target={name}");
        let report: serde_json::Value = serde_json::from_str(&daemon.get(&path)?)?;
        stacks += report["stacks_total"].as_u64().unwrap_or(0);
    }
    let max = highest(&latencies);
    latencies.sort_by(f64::total_cmp);
    let at = |q: usize| latencies[latencies.len() * q / 100];
    println!(
        "\n/metrics with {SCRAPE_TARGETS} targets (opensock -t 2 each, nice 19), {SCRAPES} \
         scrapes, one every 100 ms"
    );
    let table = FigureTable::start(44, 14);
    table.row("stacks, last 10 s, summed over targets", stacks);
    table.row("exposition size", format!("{:.1} kB", bytes as f64 / 1e3));
    table.row(
        "daemon CPU per scrape (less its idle rate)",
        format!("{:.2} ms", per_scrape * 1e3),
    );
    for (name, q) in [
        ("latency p50", 50),
        ("latency p90", 90),
        ("latency p99", 99),
    ] {
        table.row(name, format!("{:.2} ms", at(q)));
    }
    table.row("latency max", format!("{max:.2} ms"));
    Ok(())
}

/// The daemon's memory over `--minutes`, following `followed` processes of one name: one busy
/// (opensock -t 2), the rest idle (sleep).
fn memory(fdprof: &Path, dir: &Path, minutes: u64, followed: usize) -> Result<()> {
    let named = named_copy(fdprof, dir, NAME)?;
    let sleep_dir = dir.join("sleep-memory");
    std::fs::create_dir_all(&sleep_dir)?;
    let sleep = named_copy(Path::new("/bin/sleep"), &sleep_dir, NAME)?;
    let mut load = Children::default();
    spawn_idle(&sleep, followed.saturating_sub(1), "7200", &mut load)?;
    let daemon = Daemon::start(fdprof, dir, &[NAME.to_string()], &[])?;
    let total = Duration::from_secs(60 * minutes);
    load.0.push(
        Command::new(&named)
            .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d"])
            .arg(format!("{}s", total.as_secs() + 15))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run the workload")?,
    );
    daemon.wait_attached(followed)?;
    let what = format!(
        "fdprof daemon following {followed} processes (opensock -t 2 and {} idle) for {minutes} \
         min",
        followed - 1
    );
    eprintln!("==> {what}, VmRSS every 10 s");
    let started = Instant::now();
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let mut cpu = Vec::new();
    while started.elapsed() < total {
        std::thread::sleep(Duration::from_secs(10));
        let kb = rss_kb(daemon.pid())?;
        let at = started.elapsed().as_secs_f64();
        eprintln!("    {at:>5.0} s {kb:>9} kB");
        samples.push((at, kb));
        cpu.push(cpu_secs(daemon.pid())?);
    }
    // The processes followed end before the daemon does.
    drop(load);
    println!("\n{what}: VmRSS every 10 s");
    let table = FigureTable::start(44, 14);
    table.rss_rows(&samples);
    let (first, last) = (samples[0].0, samples[samples.len() - 1].0);
    let steady = (cpu[cpu.len() - 1] - cpu[0]) / (last - first).max(1.0);
    table.row(
        "daemon CPU from first to last sample",
        format!("{:.2}%", 100.0 * steady),
    );
    Ok(())
}
