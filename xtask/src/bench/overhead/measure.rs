//! One run of a variant: the workload's ops/s, the recording's size, and the waits measured
//! (by the recording, or by the lock reference).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use fdprof_common::probes::program;

use super::variants::Variant;
use crate::bench::bpf::StatsWindow;
use crate::bench::floor::EmptyPrograms;
use crate::bench::harness::workloads::{ops_per_sec, report_of, result_line};
use crate::bench::lock_reference::LockReference;

const WORKLOAD: &[&str] = &[
    "workload", "opensock", "-t", "2", "-n", "4000", "-d", "4s", "--json",
];

/// How long the reference's run-time statistics are on at the start of a run: what fdprof's
/// sampler gives the start of a recording (`collect::stats`).
const STATS_WINDOW: Duration = Duration::from_millis(250);

/// What one run of a variant measured.
pub(crate) struct Run {
    pub ops: f64,
    /// Recording bytes.
    pub size: Option<u64>,
    /// The mean `file_lock` wait, ns: from the recording, or the reference's busiest lock.
    pub avg_wait_ns: Option<f64>,
    /// The lock probes' mean run time per wait, and `contention_end`'s alone (recordings and
    /// the reference).
    pub probe_ns: Option<(f64, f64)>,
}

/// When the kernel's BPF run-time statistics are on during a run.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Stats {
    /// As `record` has them: the first 250 ms (fdprof's sampler; the reference gets the same).
    Sampled,
    /// The whole run, held on by the bench: the probes' run time in steady state, walks and
    /// all, not only at the start where every contention site is new. Costs the run its
    /// statistics' clock reads, so these runs give no ratio.
    Whole,
}

/// Runs one variant once.
pub(crate) fn run_once(v: &Variant, fdprof: &Path, out: &Path, stats: Stats) -> Result<Run> {
    let workload: Vec<String> = std::iter::once(fdprof.display().to_string())
        .chain(WORKLOAD.iter().map(|s| s.to_string()))
        .collect();
    let argv = v.argv(fdprof, out, workload);
    let _floor = EmptyPrograms::attach(v.empty_hooks)?;
    let reference = v.lock_reference.map(LockReference::attach).transpose()?;
    let stats = match (stats, &reference) {
        (Stats::Whole, _) => Some(StatsWindow::start(None)?),
        (Stats::Sampled, Some(_)) => Some(StatsWindow::start(Some(STATS_WINDOW))?),
        (Stats::Sampled, None) => None,
    };
    let line = result_line(&argv, "\"ops_per_sec\"").with_context(|| v.name)?;
    drop(stats);
    let mut run = Run {
        ops: ops_per_sec(&line)?,
        size: v
            .output
            .and_then(|f| std::fs::metadata(out.join(f)).ok())
            .map(|m| m.len()),
        avg_wait_ns: None,
        probe_ns: None,
    };
    if let Some(r) = reference {
        run.avg_wait_ns = r
            .busiest()?
            .filter(|w| w.count > 0)
            .map(|w| w.total_ns as f64 / w.count as f64);
        run.probe_ns = match r.run_times()? {
            [Some(begin), Some(end)] => Some((begin + end, end)),
            _ => None,
        };
    }
    if let Some(file) = v.output.filter(|f| f.starts_with("fdprof")) {
        (run.avg_wait_ns, run.probe_ns) = recorded_waits(fdprof, &out.join(file))?;
    }
    Ok(run)
}

/// The mean `file_lock` wait, and the lock probes' run time per wait with `contention_end`'s
/// alone.
type WaitFigures = (Option<f64>, Option<(f64, f64)>);

/// [`WaitFigures`] from a recording's report.
fn recorded_waits(fdprof: &Path, file: &Path) -> Result<WaitFigures> {
    let r = report_of(fdprof, file)?;
    let c = &r.contention;
    let avg =
        (c.file_lock_count > 0).then(|| c.file_lock_wait_ns as f64 / c.file_lock_count as f64);
    // From the programs' own mean run times, walks included: with the statistics on
    // throughout ([`Stats::Whole`]), these cover the whole run.
    let per_run = |name: &str| {
        r.own_cost
            .programs
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.ns_per_run)
    };
    let begin = per_run(program::LOCK_BEGIN);
    let end = per_run(program::LOCK_END);
    Ok((avg, begin.zip(end).map(|(b, e)| (b + e, e))))
}
