//! Rates over time (`record --interval`): one row per interval; a long series shows its first
//! and last [`SHOWN`]/2 intervals and a line counting those left out (`report --json` has all).

use crate::analysis::{RateRow, Report};
use crate::render::human::{duration, duration_f, percent};
use crate::render::layout::{columns, section};
use crate::render::live::rate;

/// At most this many rows.
pub(super) const SHOWN: usize = 60;

pub(super) fn rates(out: &mut Vec<String>, r: &Report) {
    let Some(rates) = &r.rates else {
        return;
    };
    section(
        out,
        &format!("rates over time (every {})", duration(rates.interval_ns)),
    );
    if rates.rows.is_empty() {
        out.push("  no interval recorded".into());
        return;
    }
    let wait = |w: Option<f64>| w.map_or("-".into(), duration_f);
    let row = |x: &RateRow| {
        vec![
            duration(x.start_ns),
            rate(x.alloc_contentions_per_s),
            wait(x.alloc_wait_ns_per_s),
            rate(x.close_contentions_per_s),
            wait(x.close_wait_ns_per_s),
            rate(x.file_lock_contentions_per_s),
            wait(x.file_lock_wait_ns_per_s),
            rate(x.fd_syscalls_per_s),
            rate(x.allocations_per_s),
            percent(x.next_fd_hit_rate),
            x.expansions.to_string(),
            x.drops.to_string(),
        ]
    };
    let n = rates.rows.len();
    let left_out = n.saturating_sub(SHOWN);
    let mut body: Vec<Vec<String>> = Vec::new();
    for (i, x) in rates.rows.iter().enumerate() {
        if left_out > 0 && i == SHOWN / 2 {
            body.push(vec![format!("… {left_out} intervals")]);
        }
        if left_out == 0 || i < SHOWN / 2 || i >= n - SHOWN / 2 {
            body.push(row(x));
        }
    }
    out.extend(columns(
        &[
            "start",
            "alloc c/s",
            "alloc wait/s",
            "close c/s",
            "close wait/s",
            "file_lock c/s",
            "wait/s",
            "fd syscalls/s",
            "allocs/s",
            "next_fd hits",
            "expansions",
            "drops",
        ],
        1,
        &body,
        2,
    ));
    out.push(
        "  c/s: file_lock contentions per second; wait/s: time spent waiting per second".into(),
    );
    if left_out > 0 {
        out.push(format!(
            "  {left_out} of {n} intervals not shown: report --json has every one"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Rates;

    fn report(rows: usize) -> Report {
        Report {
            rates: Some(Rates {
                interval_ns: 1_000_000_000,
                rows: (0..rows)
                    .map(|i| RateRow {
                        index: i as u64,
                        start_ns: i as u64 * 1_000_000_000,
                        duration_ns: 1_000_000_000,
                        alloc_contentions_per_s: Some(20.0),
                        alloc_wait_ns_per_s: Some(4_000.0),
                        fd_syscalls_per_s: Some(1234.0),
                        next_fd_hit_rate: Some(0.5),
                        ..Default::default()
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_short_series_shows_every_interval() {
        let mut out = Vec::new();
        rates(&mut out, &report(3));
        let text = out.join("\n");
        assert!(
            text.contains("== rates over time (every 1.00 s) =="),
            "{text}"
        );
        let rows: Vec<&String> = out.iter().filter(|l| l.contains("1234")).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].contains("20.0") && rows[0].contains("4.00 µs"),
            "{text}"
        );
        assert!(!text.contains("not shown"));
    }

    #[test]
    fn a_long_series_shows_its_ends_and_counts_the_rest() {
        let mut out = Vec::new();
        rates(&mut out, &report(100));
        let text = out.join("\n");
        assert_eq!(out.iter().filter(|l| l.contains("1234")).count(), SHOWN);
        assert!(text.contains("… 40 intervals"), "{text}");
        assert!(text.contains("40 of 100 intervals not shown"), "{text}");
        assert!(
            text.contains("1 m 39 s") || text.contains("99.0 s"),
            "{text}"
        );
    }

    #[test]
    fn no_series_no_section() {
        let mut out = Vec::new();
        rates(&mut out, &Report::default());
        assert!(out.is_empty());
    }
}
