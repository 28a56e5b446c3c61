//! `cargo xtask bench export`: how long `fdprof export` takes, each format, on the largest
//! recording the benches make: the largest `.data` under `target/bench/` (the overhead bench's
//! `record --trace` of opensock -t 2 × 4000 fds, when it ran), or, when there is none yet, a
//! recording of opensock -t 8 (the top bench's load, the most stacks) made here; then the
//! overhead bench's `--cpu` recording in each format with `--cpu`, and its `--trace` recording
//! as trace-jsonl. Wall time of the whole command, median of `--rounds N` (default 5); the aim
//! is well under a second for the profiles.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::harness::args::rounds_arg;
use super::harness::release_and_dir;
use super::harness::stats::median;
use crate::workspace::root;

const FORMATS: &[&str] = &["pprof", "speedscope", "folded"];

/// The largest `.data` file under `dir`, searched recursively.
fn largest_recording(dir: &Path) -> Option<(PathBuf, u64)> {
    let mut best: Option<(PathBuf, u64)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            largest_recording(&path)
        } else if path.extension().is_some_and(|e| e == "data") {
            entry.metadata().ok().map(|m| (path, m.len()))
        } else {
            None
        };
        if let Some((p, size)) = found
            && best.as_ref().is_none_or(|(_, b)| size > *b)
        {
            best = Some((p, size));
        }
    }
    best
}

fn record(fdprof: &Path, out: &Path) -> Result<()> {
    eprintln!("recording opensock -t 8 for 4 s into {}", out.display());
    let status = Command::new(fdprof)
        .args(["record", "--latency", "-o"])
        .arg(out)
        .arg("--")
        .arg(fdprof)
        .args(["workload", "opensock", "-t", "8", "-n", "4000", "-d", "4s"])
        .stdout(Stdio::null())
        .status()
        .context("cannot run fdprof record")?;
    if !status.success() {
        bail!("fdprof record failed ({status})");
    }
    Ok(())
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = rounds_arg(args, 5)?.max(1);
    let (fdprof, out) = release_and_dir("export")?;
    let recording = match largest_recording(&root().join("target/bench")) {
        Some((path, _)) => path,
        None => {
            let path = out.join("opensock-t8.data");
            record(&fdprof, &path)?;
            path
        }
    };
    let size = |p: &Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1024.0);
    println!(
        "fdprof export of {} ({:.1} KiB), every lock, median of {rounds}:",
        recording.display(),
        size(&recording)
    );
    for format in FORMATS {
        time_export(&fdprof, &recording, &["--format", format], &out, rounds)?;
    }
    // The overhead bench's on-CPU and traced recordings, where it made them.
    let overhead = root().join("target/bench/overhead");
    let cpu = overhead.join("fdprof-cpu.data");
    if cpu.is_file() {
        println!(
            "on-CPU samples of {} ({:.1} KiB):",
            cpu.display(),
            size(&cpu)
        );
        for format in FORMATS {
            time_export(&fdprof, &cpu, &["--cpu", "--format", format], &out, rounds)?;
        }
    }
    let trace = overhead.join("fdprof-trace.data");
    if trace.is_file() {
        println!(
            "the fd trace of {} ({:.1} KiB):",
            trace.display(),
            size(&trace)
        );
        time_export(&fdprof, &trace, &["--format", "trace-jsonl"], &out, rounds)?;
    }
    Ok(())
}

/// Times `fdprof export RECORDING ARGS -o FILE`, prints the median and what it wrote.
fn time_export(
    fdprof: &Path,
    recording: &Path,
    args: &[&str],
    out: &Path,
    rounds: usize,
) -> Result<()> {
    let what = args.join(" ");
    let target = out.join(format!("export.{}", what.replace([' ', '-'], "")));
    let mut secs = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let status = Command::new(fdprof)
            .arg("export")
            .arg(recording)
            .args(args)
            .arg("-o")
            .arg(&target)
            .stderr(Stdio::null())
            .status()
            .context("cannot run fdprof export")?;
        if !status.success() {
            bail!("fdprof export {what} failed ({status})");
        }
        secs.push(start.elapsed().as_secs_f64());
    }
    let written = std::fs::metadata(&target)?.len();
    println!(
        "  {what:<26} {:>8.1} ms  ({:.1} KiB written)",
        median(&mut secs) * 1000.0,
        written as f64 / 1024.0
    );
    Ok(())
}
