//! What the overhead bench prints: ops/s and ratios by variant, the mean `file_lock` waits
//! against the reference's, and what the trace takes on disk.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::rounds::Columns;
use super::variants::Variant;
use crate::bench::harness::stats::{median, range};
use crate::bench::lock_reference::Reference;

/// Ops/s, the ratio to the baseline runs around and its range, and the recording per second.
pub(crate) fn ratio_table(variants: &[Variant], rounds: usize, c: &mut Columns) {
    println!(
        "\nopensock -t 2 -n 4000, 4 s per run, {rounds} rounds; each variant between two baseline \
         runs (medians)"
    );
    println!(
        "{:<28} {:>12} {:>8} {:>16} {:>16}",
        "variant", "ops/s", "ratio", "ratio range", "recording/s"
    );
    for (i, v) in variants.iter().enumerate() {
        let m = median(&mut c.ops[i]);
        let (lo, hi) = range(&c.ratios[i]);
        let size = if c.bytes_per_s[i].is_empty() {
            "-".to_string()
        } else {
            format!("{:.1} kB/s", median(&mut c.bytes_per_s[i]) / 1e3)
        };
        println!(
            "{:<28} {:>12.0} {:>8.3} {:>16} {:>16}",
            v.name,
            m,
            median(&mut c.ratios[i]),
            format!("{lo:.3}–{hi:.3}"),
            size
        );
    }
}

/// The mean `file_lock` wait each variant measured, against the timestamp-only reference's,
/// and the lock probes' own time per wait.
pub(crate) fn wait_table(variants: &[Variant], rounds: usize, c: &mut Columns) {
    let (waits, probes) = (&mut c.waits, &c.probes);
    let reference = variants
        .iter()
        .position(|v| v.lock_reference == Some(Reference::Timestamps))
        .filter(|&i| !waits[i].is_empty())
        .map(|i| median(&mut waits[i]));
    println!(
        "\nfile_lock waits (medians): the mean wait each measured in the rounds above, against \
         the reference's (clock + one store at begin, clock + one add at end); the lock probes' \
         run time per wait (begin + end) and end's alone, from {rounds} more runs each with BPF \
         run-time statistics on throughout"
    );
    println!(
        "{:<28} {:>12} {:>14} {:>16} {:>12}",
        "variant", "avg wait", "/ reference", "probe ns/wait", "end ns/run"
    );
    for (i, v) in variants.iter().enumerate() {
        if waits[i].is_empty() && probes[i].is_empty() {
            continue;
        }
        let avg = (!waits[i].is_empty()).then(|| median(&mut waits[i]));
        let vs = match (avg, reference) {
            (Some(avg), Some(r)) => format!("{:.3}", avg / r),
            _ => "-".into(),
        };
        let avg = avg.map_or("-".into(), |a| format!("{a:.0} ns"));
        let (per_wait, end) = if probes[i].is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let mut p: Vec<f64> = probes[i].iter().map(|p| p.0).collect();
            let mut e: Vec<f64> = probes[i].iter().map(|p| p.1).collect();
            (
                format!("{:.0}", median(&mut p)),
                format!("{:.0}", median(&mut e)),
            )
        };
        println!(
            "{:<28} {:>12} {:>14} {:>16} {:>12}",
            v.name, avg, vs, per_wait, end
        );
    }
}

/// What the last `record --trace` run's trace takes on disk, per traced operation: its rows
/// (varints, deflated, base64) and the whole recording.
pub(crate) fn trace_size(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let rec: serde_json::Value = serde_json::from_slice(&bytes)?;
    let events = rec["trace"]["events"].as_u64().unwrap_or(0);
    let rows = rec["trace"]["data"].as_str().map_or(0, str::len);
    if events == 0 {
        bail!("{} holds no traced operation", file.display());
    }
    println!(
        "\nrecord --trace, last run: {events} operations traced; {:.1} bytes an operation in the \
         trace's rows, {:.1} in the whole recording ({} bytes)",
        rows as f64 / events as f64,
        bytes.len() as f64 / events as f64,
        bytes.len()
    );
    Ok(())
}
