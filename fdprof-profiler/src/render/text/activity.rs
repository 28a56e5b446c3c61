//! fd-table activity: the scan, the syscalls, the table.

use crate::analysis::{LatencyLevel, Report};
use crate::render::human::{self, duration, percent};
use crate::render::layout::{columns, key_values, section};

/// How many syscalls get a latency histogram.
const SYSCALL_HISTOGRAMS: usize = 3;

pub(super) fn scan(out: &mut Vec<String>, r: &Report) {
    let s = &r.scan;
    section(out, "scan (lowest-free-fd search in alloc_fd)");
    let hit = match s.next_fd_hit_rate {
        Some(rate) => format!(
            "{} ({} of allocations)",
            s.next_fd_hits,
            percent(Some(rate))
        ),
        None => s.next_fd_hits.to_string(),
    };
    let origin = if s.origin.is_empty() {
        "not recorded".to_string()
    } else {
        s.origin.clone()
    };
    out.extend(key_values(
        &[
            ("allocations".into(), s.allocations.to_string()),
            ("next_fd hits".into(), hit),
            ("below origin".into(), s.below_origin.to_string()),
            ("origin".into(), origin),
        ],
        2,
    ));
    let count = |v: u64| v.to_string();
    for (title, hist, unit) in [
        ("scan distance past origin", &s.bits, "bits"),
        ("open_fds words read", &s.open_fds_words, "words"),
        ("full_fds_bits words read", &s.full_fds_words, "words"),
    ] {
        out.push(String::new());
        out.push(format!(
            "  {title} ({unit}): {}",
            human::quantiles_line(hist, count)
        ));
        out.extend(human::log2_hist_lines(hist, unit, 2));
    }
}

/// What the latencies span; `None` when they were not measured.
fn level(level: LatencyLevel) -> Option<&'static str> {
    match level {
        LatencyLevel::SyscallLevel => Some("syscall-level"),
        LatencyLevel::EntryToExit => Some("entry-to-exit"),
        LatencyLevel::NotMeasured => None,
    }
}

/// Counts of every traced syscall; with latency measured, its quantiles and the busiest
/// syscalls' histograms.
pub(super) fn syscalls(out: &mut Vec<String>, r: &Report) {
    let level = level(r.syscall_latency_level);
    match level {
        Some(level) => section(out, &format!("syscalls (latency: {level})")),
        None => section(out, "syscalls"),
    }
    if r.syscalls.is_empty() {
        out.push("  no traced syscalls were called".into());
        return;
    }
    let body: Vec<Vec<String>> = r
        .syscalls
        .iter()
        .map(|s| {
            let latency = &s.latency.histogram;
            let mut row = vec![
                s.name.clone(),
                s.calls.to_string(),
                s.errors.to_string(),
                s.fds_created.to_string(),
                s.fds_closed.to_string(),
                s.allocs.to_string(),
            ];
            if level.is_some() {
                row.extend(
                    [latency.p50, latency.p99, latency.max].map(|v| human::opt(v, duration)),
                );
            }
            row
        })
        .collect();
    let header = [
        "syscall",
        "calls",
        "errors",
        "fds created",
        "fds closed",
        "allocs",
        "p50",
        "p99",
        "max",
    ];
    let shown = if level.is_some() { 9 } else { 6 };
    out.extend(columns(&header[..shown], 1, &body, 2));
    let Some(level) = level else {
        out.push(format!("  syscall latency: {NOT_MEASURED}"));
        return;
    };
    let busiest = r.syscalls_by_calls.iter().take(SYSCALL_HISTOGRAMS);
    for s in busiest.filter_map(|name| r.syscalls.iter().find(|s| &s.name == name)) {
        let latency = &s.latency.histogram;
        out.push(String::new());
        out.push(format!(
            "  {} latency ({level}): {}",
            s.name,
            human::quantiles_line(latency, duration)
        ));
        out.extend(human::log2_hist_lines(latency, "nsecs", 2));
    }
}

/// What the report says in place of the latency figures of a recording made without them.
const NOT_MEASURED: &str = "not measured (record --latency)";

pub(super) fn table(out: &mut Vec<String>, r: &Report) {
    let t = &r.table;
    section(out, "fd table");
    let max_fds = if t.max_fds_first == 0 && t.max_fds_max == 0 {
        "not observed".to_string()
    } else {
        format!(
            "{} at first syscall, {} max",
            t.max_fds_first, t.max_fds_max
        )
    };
    out.extend(key_values(
        &[
            ("max_fds".into(), max_fds),
            ("expansions".into(), t.expansions.to_string()),
        ],
        2,
    ));
}
