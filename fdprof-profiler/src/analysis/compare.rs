//! Two reports side by side: the daemon's comparison of two ranges.

use std::collections::BTreeMap;

use fdprof_common::contention::LockKind;
use fdprof_figures::{Change, RangeComparison, Report, Section, TimeRange};

use super::live::per_second;

/// `base` against `new`, the reports of the ranges `ranges` (base, new).
pub fn compare(base: &Report, new: &Report, ranges: (TimeRange, TimeRange)) -> RangeComparison {
    // Keyed by section, then the target's file_lock before other locks (every report of
    // fdprof puts it first: the fd table is its subject), then name.
    let mut figures: BTreeMap<(Section, bool, String), (u64, u64)> = BTreeMap::new();
    for (report, side) in [(base, 0), (new, 1)] {
        let mut put = |section, other_lock: bool, name: String, value: u64| {
            let entry = figures.entry((section, other_lock, name)).or_default();
            if side == 0 {
                entry.0 += value;
            } else {
                entry.1 += value;
            }
        };
        for row in &report.contention.by_lock_operation {
            let name = format!("{} {}", row.lock.name, row.operation.name());
            let other = row.lock.kind != LockKind::FileLock;
            put(Section::LockWait, other, name.clone(), row.total_wait_ns);
            put(Section::LockWaits, other, name, row.count);
        }
        for s in &report.syscalls {
            put(Section::Syscall, false, s.name.clone(), s.calls);
        }
        let scan = &report.scan;
        put(Section::Scan, false, "allocations".into(), scan.allocations);
        put(
            Section::Scan,
            false,
            "next_fd_hits".into(),
            scan.next_fd_hits,
        );
        put(
            Section::Scan,
            false,
            "below_origin".into(),
            scan.below_origin,
        );
    }
    let (base_ns, new_ns) = (ranges.0.duration_ns, ranges.1.duration_ns);
    let mut rows: Vec<(bool, Change)> = figures
        .into_iter()
        .filter(|(_, (b, n))| *b > 0 || *n > 0)
        .map(|((section, other_lock, name), (b, n))| {
            let change = n as i64 - b as i64;
            let row = Change {
                section,
                name,
                base: b,
                new: n,
                change,
                relative: change as f64 / b.max(n) as f64,
                base_per_s: per_second(b, base_ns),
                new_per_s: per_second(n, new_ns),
            };
            (other_lock, row)
        })
        .collect();
    rows.sort_by(|(a_other, a), (b_other, b)| {
        (a.section, a_other)
            .cmp(&(b.section, b_other))
            .then(b.change.unsigned_abs().cmp(&a.change.unsigned_abs()))
            .then(a.name.cmp(&b.name))
    });
    RangeComparison {
        base: ranges.0,
        new: ranges.1,
        rows: rows.into_iter().map(|(_, row)| row).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_changed_most_comes_first_in_each_section() {
        let rec = crate::testdata::recording();
        let report = super::super::report(&rec, &Default::default());
        let mut less = report.clone();
        for row in &mut less.contention.by_lock_operation {
            row.total_wait_ns /= 2;
        }
        for s in &mut less.syscalls {
            s.calls = 0;
        }
        let range = |from: u64| TimeRange {
            from_unix_ms: from,
            to_unix_ms: from + 1_000,
            duration_ns: 1_000_000_000,
        };
        let c = compare(&report, &less, (range(0), range(1_000)));
        let first = &c.rows[0];
        assert_eq!(first.section, Section::LockWait);
        assert!(first.change < 0 && first.new * 2 <= first.base, "{first:?}");
        let waits = c
            .rows
            .iter()
            .find(|r| r.section == Section::LockWaits)
            .unwrap();
        assert_eq!((waits.change, waits.relative), (0, 0.0));
        let syscall = c
            .rows
            .iter()
            .find(|r| r.section == Section::Syscall)
            .unwrap();
        assert_eq!((syscall.new, syscall.relative), (0, -1.0));
        assert_eq!(syscall.base_per_s, Some(syscall.base as f64));
        let sections: Vec<Section> = c.rows.iter().map(|r| r.section).collect();
        assert!(sections.is_sorted(), "{sections:?}");
    }
}
