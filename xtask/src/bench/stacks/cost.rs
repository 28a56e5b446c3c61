//! The daemon's CPU and the cost of one on-CPU sample, each way.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::WAYS;
use crate::bench::harness::daemon::Daemon;
use crate::bench::harness::figures::FigureTable;
use crate::bench::harness::process::{CpuSince, named_copy, stat_cpu_secs};
use crate::bench::harness::stats::median;
use crate::bench::harness::workloads::{opensock, report_of};

/// The workload's name, which the daemon follows (`--comm`).
const COMM: &str = "stacksload";

/// The daemon's own CPU seconds while opensock -t 2 runs under it, each way (medians).
pub(super) fn daemon_cpu(
    fdprof: &Path,
    out: &Path,
    rounds: usize,
    table: &FigureTable,
) -> Result<()> {
    let program = named_copy(fdprof, out, COMM)?;
    let mut spent = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, way) in WAYS.iter().enumerate() {
            let daemon = Daemon::start(fdprof, out, &[COMM.to_string()], &["--call-graph", way])?;
            let cpu = CpuSince::start(daemon.pid())?;
            opensock(&program, &[], Some(&daemon))?;
            spent[i].push(cpu.spent()?);
        }
    }
    let fp = median(&mut spent[0]);
    let dwarf = median(&mut spent[1]);
    table.row("daemon CPU under opensock -t 2, fp (s)", format!("{fp:.3}"));
    table.row(
        "daemon CPU under opensock -t 2, dwarf (s)",
        format!("{dwarf:.3}"),
    );
    table.row("  dwarf / fp", format!("{:.2}", dwarf / fp));
    Ok(())
}

/// `record --cpu --freq 999 -d 5s` on opensock -t 2, each way: the sampling program's mean run
/// time and the unwinding thread's CPU per sample (read from its `/proc` entry while `record`
/// runs; idle but for its 10 ms polls with `fp`).
pub(super) fn per_sample(fdprof: &Path, out: &Path, table: &FigureTable) -> Result<()> {
    for way in WAYS {
        let mut load = Command::new(fdprof)
            .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d", "8s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run the workload")?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        let data = out.join(format!("cpu-{way}.data"));
        let mut record = Command::new(fdprof)
            .args([
                "record",
                "--lock-only",
                "--cpu",
                "--freq",
                "999",
                "-d",
                "5s",
            ])
            .args(["--call-graph", way, "-p", &load.id().to_string(), "-o"])
            .arg(&data)
            .stderr(Stdio::null())
            .spawn()?;
        let mut unwinder = 0.0;
        let status = loop {
            if let Some(status) = record.try_wait()? {
                break status;
            }
            unwinder = thread_cpu(record.id(), "fdprof-unwind").unwrap_or(unwinder);
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let _ = load.kill();
        let _ = load.wait();
        if !status.success() {
            bail!("record --cpu failed ({status})");
        }
        let report = report_of(fdprof, &data)?;
        let own = &report.own_cost;
        let sample = own
            .programs
            .iter()
            .find(|p| p.name.starts_with("fdprof_cpu_sam"))
            .context("no sampling program in the report")?;
        let samples = sample.run_count.max(1) as f64;
        table.row(
            &format!("record --cpu 999 Hz, {way}: kernel ns a sample"),
            format!("{:.0}", sample.run_time_ns as f64 / samples),
        );
        table.row(
            &format!("record --cpu 999 Hz, {way}: unwinder CPU ns a sample"),
            format!("{:.0}", unwinder * 1e9 / samples),
        );
        table.row(
            &format!("record --cpu 999 Hz, {way}: fdprof CPU ns a sample"),
            format!("{:.0}", own.collector_cpu_ns as f64 / samples),
        );
    }
    Ok(())
}

/// CPU seconds of `pid`'s thread named `name`: its own `task/TID/stat` (`/proc/TID/stat`
/// counts the whole process).
fn thread_cpu(pid: u32, name: &str) -> Option<f64> {
    let task = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name)
        })?;
    stat_cpu_secs(&task.path().join("stat")).ok()
}
