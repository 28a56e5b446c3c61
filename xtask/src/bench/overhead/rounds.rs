//! The overhead bench's rounds: each variant between two baseline runs, for the ratios; then
//! the variants whose lock probes are timed, again, with the statistics on throughout.

use std::path::Path;

use anyhow::Result;

use super::measure::{Stats, run_once};
use super::variants::{PROBE_TIME, Variant};

/// Each variant's figures over the rounds, in the variants' order.
pub(crate) struct Columns {
    pub ops: Vec<Vec<f64>>,
    /// Ops/s to the mean of the baseline runs before and after.
    pub ratios: Vec<Vec<f64>>,
    /// Recording bytes per second of profile.
    pub bytes_per_s: Vec<Vec<f64>>,
    /// Mean `file_lock` waits, ns.
    pub waits: Vec<Vec<f64>>,
    /// The lock probes' run time per wait, and `contention_end`'s alone, ns.
    pub probes: Vec<Vec<(f64, f64)>>,
}

/// `rounds` rounds of every variant, each run between two baseline runs (the baseline first).
/// This VM's speed drifts by ±10% within a minute, which medians of separate columns do not
/// cancel: each variant is compared with the mean of the baseline runs around it.
pub(crate) fn ratio_rounds(
    variants: &[Variant],
    fdprof: &Path,
    out: &Path,
    rounds: usize,
) -> Result<Columns> {
    let n = variants.len();
    let mut c = Columns {
        ops: vec![Vec::new(); n],
        ratios: vec![Vec::new(); n],
        bytes_per_s: vec![Vec::new(); n],
        waits: vec![Vec::new(); n],
        probes: vec![Vec::new(); n],
    };
    let (base, others) = variants.split_first().expect("a baseline variant");
    for round in 1..=rounds {
        let mut before = run_once(base, fdprof, out, Stats::Sampled)?.ops;
        eprintln!(
            "round {round}/{rounds}  {:<28} {:>12.0} ops/s",
            base.name, before
        );
        c.ops[0].push(before);
        for (i, v) in others.iter().enumerate().map(|(i, v)| (i + 1, v)) {
            let run = run_once(v, fdprof, out, Stats::Sampled)?;
            let (o, size) = (run.ops, run.size);
            c.waits[i].extend(run.avg_wait_ns);
            let after = run_once(base, fdprof, out, Stats::Sampled)?.ops;
            let ratio = o / ((before + after) / 2.0);
            eprintln!(
                "round {round}/{rounds}  {:<28} {:>12.0} ops/s  ratio {ratio:.3}  (baseline {after:.0})",
                v.name, o
            );
            c.ops[i].push(o);
            c.ops[0].push(after);
            c.ratios[i].push(ratio);
            if let Some(size) = size {
                c.bytes_per_s[i].push(size as f64 / 4.0);
            }
            before = after;
        }
    }
    c.ratios[0] = vec![1.0];
    Ok(c)
}

/// The lock probes' own time, from runs of their own with the statistics on throughout.
pub(crate) fn probe_rounds(
    variants: &[Variant],
    fdprof: &Path,
    out: &Path,
    rounds: usize,
    c: &mut Columns,
) -> Result<()> {
    for (i, v) in variants.iter().enumerate() {
        if !PROBE_TIME.contains(&v.name) {
            continue;
        }
        for round in 1..=rounds {
            let run = run_once(v, fdprof, out, Stats::Whole)?;
            if let Some((per_wait, end)) = run.probe_ns {
                eprintln!(
                    "probe time {round}/{rounds}  {:<28} {per_wait:>6.0} ns/wait  end {end:.0} ns/run",
                    v.name
                );
            }
            c.probes[i].extend(run.probe_ns);
        }
    }
    Ok(())
}
