//! `cargo xtask bench top`: what `fdprof top` itself costs at a 1 s interval. First its CPU,
//! as a share of one CPU, while it watches opensock -t 8 (about 50 live contention stacks) for
//! 30 s: from `/proc/PID/stat` (utime + stime) and from the intervals' own
//! `collector_cpu_share`. Then its resident memory while it watches the whole system for
//! `--minutes N` (default 1): VmRSS every 10 s, with start, end, max and the slope.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fdprof_figures::Interval;

use super::harness::args::minutes_arg;
use super::harness::figures::FigureTable;
use super::harness::process::{cpu_secs, rss_kb};
use super::harness::stats::{highest, median};
use crate::run::{build_release, fdprof_release};

const WORKLOAD_SECS: u64 = 30;
const RSS_EVERY: Duration = Duration::from_secs(10);

pub(crate) fn run(args: &[String]) -> Result<()> {
    let minutes = minutes_arg(args)?;
    build_release()?;
    let fdprof = fdprof_release();
    cpu(&fdprof)?;
    rss(&fdprof, minutes)
}

fn top(fdprof: &Path) -> Command {
    let mut c = Command::new(fdprof);
    c.args(["top", "--jsonl", "--interval", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

fn wait_ok(mut child: Child, what: &str) -> Result<()> {
    let status = child.wait()?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// top's CPU while it watches opensock -t 8 for 30 s: eight threads, each closing and
/// allocating from its own call sites, keep some 50 distinct stacks contended per interval.
fn cpu(fdprof: &Path) -> Result<()> {
    let workload = format!("{WORKLOAD_SECS}s");
    let mut child = top(fdprof)
        .arg("--")
        .arg(fdprof)
        .args([
            "workload", "opensock", "-t", "8", "-n", "4000", "-d", &workload,
        ])
        .spawn()
        .context("cannot run fdprof top")?;
    let pid = child.id();
    let started = Instant::now();
    let stdout = child.stdout.take().context("no stdout")?;
    // (seconds since start, top's CPU seconds) at each interval line, read as it arrives.
    let mut marks: Vec<(f64, f64)> = Vec::new();
    let (mut stacks, mut shares) = (Vec::new(), Vec::new());
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let Ok(interval) = serde_json::from_str::<Interval>(&line) else {
            continue;
        };
        if let Ok(cpu) = cpu_secs(pid) {
            marks.push((started.elapsed().as_secs_f64(), cpu));
        }
        // The last, partial interval is too short to count its stacks or share.
        if interval.duration_ns >= 900_000_000 {
            stacks.push(interval.report.stacks_total as f64);
            shares.extend(interval.report.own_cost.collector_cpu_share);
        }
    }
    let total = marks.last().context("top printed no interval")?;
    wait_ok(child, "fdprof top")?;
    let (first, last) = (marks[0], marks[marks.len() - 1]);
    let steady = (last.1 - first.1) / (last.0 - first.0);
    if stacks.is_empty() {
        bail!("top printed no whole interval");
    }
    let max_stacks = highest(&stacks);
    println!(
        "\nfdprof top --jsonl --interval 1s -- fdprof workload opensock -t 8 -n 4000 -d \
         {WORKLOAD_SECS}s ({} whole intervals)",
        stacks.len()
    );
    let table = FigureTable::start(44, 10);
    table.row(
        "live stacks per interval (median)",
        format!("{:.0}", median(&mut stacks)),
    );
    table.row("live stacks per interval (max)", format!("{max_stacks:.0}"));
    table.row(
        "CPU of one CPU, whole run (/proc stat)",
        format!("{:.2}%", 100.0 * total.1 / total.0),
    );
    table.row(
        "CPU of one CPU, first to last interval",
        format!("{:.2}%", 100.0 * steady),
    );
    if !shares.is_empty() {
        let max = highest(&shares);
        table.row(
            "collector_cpu_share per interval (median)",
            format!("{:.2}%", 100.0 * median(&mut shares)),
        );
        table.row(
            "collector_cpu_share per interval (max)",
            format!("{:.2}%", 100.0 * max),
        );
    }
    Ok(())
}

/// top's VmRSS every 10 s while it watches every process for `minutes`.
fn rss(fdprof: &Path, minutes: u64) -> Result<()> {
    let mut child = top(fdprof)
        .arg("-a")
        .spawn()
        .context("cannot run fdprof top -a")?;
    let pid = child.id();
    let stdout = child.stdout.take().context("no stdout")?;
    // Drain the intervals (top would block on a full pipe), keeping the largest stack count.
    let reader = std::thread::spawn(move || {
        let (mut intervals, mut max_stacks) = (0u64, 0usize);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(interval) = serde_json::from_str::<Interval>(&line) {
                intervals += 1;
                max_stacks = max_stacks.max(interval.report.stacks_total);
            }
        }
        (intervals, max_stacks)
    });
    eprintln!("==> fdprof top -a for {minutes} min, VmRSS every 10 s");
    let started = Instant::now();
    let end = started + Duration::from_secs(60 * minutes);
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let mut next = started + RSS_EVERY;
    while next <= end {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        if let Some(status) = child.try_wait()? {
            bail!("fdprof top -a ended early ({status})");
        }
        let kb = rss_kb(pid)?;
        let t = started.elapsed().as_secs_f64();
        if samples.len() % 6 == 5 {
            eprintln!("  {:>5.0} s  {kb:>8} kB", t);
        }
        samples.push((t, kb));
        next += RSS_EVERY;
    }
    // SAFETY: pid is our child, not yet waited for, so it cannot have been reused.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    wait_ok(child, "fdprof top -a")?;
    let (intervals, max_stacks) = reader.join().expect("the reader thread");
    println!(
        "\nfdprof top --jsonl --interval 1s -a for {minutes} min: {intervals} intervals, up to \
         {max_stacks} stacks in one; VmRSS every 10 s"
    );
    let table = FigureTable::start(28, 12);
    table.rss_rows(&samples);
    let points: Vec<(f64, f64)> = samples.iter().map(|&(t, kb)| (t, kb as f64)).collect();
    // A value wider than the column is printed whole: these keep their own width.
    table.row(
        "slope (least squares)",
        format!("{:>6.1} kB/min", slope(&points) * 60.0),
    );
    // Caches that fill up to a bound (the kernel's maps are bounded) grow early and then stop:
    // the second half's slope tells a plateau from a leak.
    let second_half = &points[points.len() / 2..];
    table.row(
        &format!("slope from {:.0} s", second_half[0].0),
        format!("{:>6.1} kB/min", slope(second_half) * 60.0),
    );
    Ok(())
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_a_flat_series() {
        let line: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 7.0)).collect();
        assert!((slope(&line) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(0.0, 5.0), (10.0, 5.0), (20.0, 5.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
    }
}
