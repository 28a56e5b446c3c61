//! Direct-probe figures (fentry/kprobe modes): durations, hold times, slow-path waits, and the
//! file_lock waits each source saw, side by side.

use crate::analysis::{Histogram, Report};
use crate::render::human::{self, duration};
use crate::render::layout::{columns, section};

pub(super) fn functions(out: &mut Vec<String>, r: &Report) {
    if r.functions.is_empty() {
        return;
    }
    section(out, "fd-table functions (direct probes)");
    let body: Vec<Vec<String>> = r
        .functions
        .iter()
        .map(|f| {
            vec![
                f.operation.to_string(),
                f.calls.to_string(),
                quantiles(&f.duration),
                quantiles(&f.hold),
                f.slowpath_wait.count.to_string(),
                duration(f.slowpath_wait.sum),
                f.unpaired.to_string(),
            ]
        })
        .collect();
    out.extend(columns(
        &[
            "operation",
            "calls",
            "duration p50/p99/max",
            "hold p50/p99/max",
            "slow-path waits",
            "wait",
            "unpaired",
        ],
        1,
        &body,
        2,
    ));
    out.push(
        "  (hold = duration − slow-path wait inside the call; p50/p99: log2 bucket bound)".into(),
    );
    // Only the expand operation (expand_files) has growths to tell.
    for f in &r.functions {
        if f.expanded > 0 {
            out.push(format!(
                "  expand_files grew the table {} times",
                f.expanded
            ));
        }
    }
    out.push(String::new());
    out.push("  file_lock waits by source:".into());
    let body: Vec<Vec<String>> = r
        .functions
        .iter()
        .map(|f| {
            vec![
                f.operation.to_string(),
                f.tracepoint_waits.to_string(),
                duration(f.tracepoint_wait_ns),
                f.slowpath_wait.count.to_string(),
                duration(f.slowpath_wait.sum),
            ]
        })
        .collect();
    out.extend(columns(
        &[
            "operation",
            "tracepoint waits",
            "wait",
            "slow-path waits",
            "wait",
        ],
        1,
        &body,
        2,
    ));
}

/// `p50 / p99 / max`.
fn quantiles(h: &Histogram) -> String {
    format!(
        "{} / {} / {}",
        human::opt(h.p50, duration),
        human::opt(h.p99, duration),
        human::opt(h.max, duration)
    )
}
