//! A recording's series (`record --interval`): the rates over time `report` shows, and the
//! intervals `top --from` plays back.

use fdprof_common::{contention::LockKind, fnops::Operation};
use fdprof_figures::{Interval, RateRow, Rates, Report, ReportOptions};
use fdprof_recording::{
    Recording,
    series::{self, Sample},
};

use super::{live::per_second, share, sum};
use crate::model::sample;

/// One row per sample of `rec`'s series; `None` without a series.
pub(crate) fn rates(rec: &Recording) -> Option<Rates> {
    let series = rec.series.as_ref()?;
    let fd_activity = rec.fd_activity_recorded();
    let rows = series
        .samples
        .iter()
        .enumerate()
        .map(|(index, s)| rate_row(index as u64, s, fd_activity))
        .collect();
    Some(Rates {
        interval_ns: series.interval_ns,
        rows,
    })
}

/// The rates of one sample.
fn rate_row(index: u64, s: &Sample, fd_activity: bool) -> RateRow {
    let d = s.duration_ns;
    let file_lock = || s.waits.iter().filter(|w| w.lock == LockKind::FileLock);
    let at = |op: Operation| file_lock().filter(move |w| w.operation == op);
    let count = |op| sum(at(op).map(|w| w.count));
    let wait = |op| sum(at(op).map(|w| w.total_wait_ns));
    let activity = |n: u64| per_second(n, d).filter(|_| fd_activity);
    RateRow {
        index,
        start_ns: s.start_ns,
        duration_ns: d,
        alloc_contentions_per_s: per_second(count(Operation::Alloc), d),
        alloc_wait_ns_per_s: per_second(wait(Operation::Alloc), d),
        close_contentions_per_s: per_second(count(Operation::Close), d),
        close_wait_ns_per_s: per_second(wait(Operation::Close), d),
        file_lock_contentions_per_s: per_second(sum(file_lock().map(|w| w.count)), d),
        file_lock_wait_ns_per_s: per_second(sum(file_lock().map(|w| w.total_wait_ns)), d),
        fd_syscalls_per_s: activity(sum(s.syscalls.iter().map(|c| c.calls))),
        allocations_per_s: activity(s.allocations),
        // A hit and its allocation are counted at different points of the syscall, so an
        // interval's boundary may split them: at most every allocation hit.
        next_fd_hit_rate: share(s.next_fd_hits, s.allocations).map(|r| r.min(1.0)),
        expansions: s.expansions,
        max_fds: s.max_fds,
        drops: s.drops,
    }
}

/// How many intervals `rec`'s series has; `None` without a series.
pub fn series_len(rec: &Recording) -> Option<usize> {
    rec.series.as_ref().map(|s| s.samples.len())
}

/// Interval `index` of `rec`'s series as `top` shows a live one: a report of that sample alone
/// (header from the recording). A sample keeps no stacks, histograms or latencies, so the
/// contention rows have no quantiles and there are no top stacks. `None` past the end.
pub fn playback(rec: &Recording, index: usize) -> Option<Interval> {
    let samples = &rec.series.as_ref()?.samples;
    let sample = samples.get(index)?;
    let one = sample::as_recording(rec, sample, index + 1 == samples.len());
    let mut report = super::report(&one, &ReportOptions::default());
    report.top_stacks.clear();
    report.stacks_total = 0;
    Some(Interval {
        index: index as u64,
        start_ns: sample.start_ns,
        duration_ns: sample.duration_ns,
        report,
        events: Vec::new(),
    })
}

/// The report over intervals `from..=to` of `rec`'s series (the screen's cumulative view);
/// `None` without a series or when `to` is past its end.
pub fn playback_total(rec: &Recording, from: usize, to: usize) -> Option<Report> {
    let samples = rec.series.as_ref()?.samples.get(from.min(to)..=to)?;
    let all = series::merged(samples);
    let last = to + 1 == rec.series.as_ref()?.samples.len();
    let mut report = super::report(
        &sample::as_recording(rec, &all, last),
        &ReportOptions::default(),
    );
    report.top_stacks.clear();
    report.stacks_total = 0;
    Some(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_recording::series::{SampleSyscall, SampleWaits, Series};

    fn waits(lock: LockKind, operation: Operation, count: u64, total: u64) -> SampleWaits {
        SampleWaits {
            lock,
            lock_name: None,
            operation,
            count,
            total_wait_ns: total,
            max_wait_ns: total,
        }
    }

    fn with_series() -> Recording {
        let mut rec = crate::testdata::recording();
        let busy = Sample {
            start_ns: 0,
            duration_ns: 500_000_000,
            waits: vec![
                waits(LockKind::FileLock, Operation::Alloc, 10, 4_000),
                waits(LockKind::FileLock, Operation::Close, 5, 1_000),
                waits(LockKind::FileLock, Operation::Other, 1, 500),
                waits(LockKind::Spinlock, Operation::Alloc, 99, 99_000),
            ],
            syscalls: vec![
                SampleSyscall {
                    name: "socket".into(),
                    calls: 300,
                    errors: 0,
                },
                SampleSyscall {
                    name: "close".into(),
                    calls: 200,
                    errors: 4,
                },
            ],
            allocations: 300,
            next_fd_hits: 240,
            max_fds: 256,
            expansions: 2,
            drops: 1,
        };
        let idle = Sample {
            start_ns: 500_000_000,
            duration_ns: 0,
            max_fds: 256,
            ..Default::default()
        };
        rec.series = Some(Series {
            interval_ns: 500_000_000,
            samples: vec![busy, idle],
        });
        rec
    }

    #[test]
    fn rates_are_per_second_of_each_interval() {
        assert_eq!(rates(&crate::testdata::recording()), None);
        let rates = rates(&with_series()).unwrap();
        assert_eq!(rates.interval_ns, 500_000_000);
        let r = &rates.rows[0];
        assert_eq!(r.alloc_contentions_per_s, Some(20.0));
        assert_eq!(r.alloc_wait_ns_per_s, Some(8_000.0));
        assert_eq!(r.close_contentions_per_s, Some(10.0));
        assert_eq!(r.close_wait_ns_per_s, Some(2_000.0));
        assert_eq!(
            r.file_lock_contentions_per_s,
            Some(32.0),
            "spinlock left out"
        );
        assert_eq!(r.file_lock_wait_ns_per_s, Some(11_000.0));
        assert_eq!(r.fd_syscalls_per_s, Some(1_000.0));
        assert_eq!(r.allocations_per_s, Some(600.0));
        assert_eq!(r.next_fd_hit_rate, Some(0.8));
        assert_eq!((r.expansions, r.max_fds, r.drops), (2, 256, 1));
        let idle = &rates.rows[1];
        assert_eq!((idle.index, idle.start_ns), (1, 500_000_000));
        assert_eq!(idle.fd_syscalls_per_s, None, "no length");
        assert_eq!(idle.next_fd_hit_rate, None, "no allocations");
    }

    #[test]
    fn lock_only_recordings_have_no_activity_rates() {
        let mut rec = with_series();
        rec.probes.insert(
            fdprof_common::probes::Role::FdSyscalls,
            fdprof_common::probes::Attachment::Off,
        );
        let r = &rates(&rec).unwrap().rows[0];
        assert_eq!((r.fd_syscalls_per_s, r.allocations_per_s), (None, None));
        assert_eq!(r.alloc_contentions_per_s, Some(20.0));
    }

    #[test]
    fn a_played_back_interval_is_the_report_of_its_sample() {
        let rec = with_series();
        assert_eq!(series_len(&rec), Some(2));
        let iv = playback(&rec, 0).unwrap();
        assert_eq!((iv.index, iv.duration_ns), (0, 500_000_000));
        let r = &iv.report;
        assert_eq!(r.header.duration_ns, 500_000_000);
        assert_eq!(
            r.header.end_reason,
            fdprof_common::session::EndReason::Duration
        );
        assert_eq!(r.contention.count, 115);
        assert_eq!(r.contention.file_lock_count, 16);
        let alloc = &r.contention.by_lock_operation[0];
        assert_eq!(
            (alloc.lock.kind, alloc.operation),
            (LockKind::FileLock, Operation::Alloc)
        );
        assert_eq!((alloc.count, alloc.total_wait_ns), (10, 4_000));
        assert_eq!(alloc.p99_wait_ns, None, "no histogram in a sample");
        assert!(r.top_stacks.is_empty());
        let calls: u64 = r.syscalls.iter().map(|s| s.calls).sum();
        assert_eq!(calls, 500);
        assert_eq!((r.scan.next_fd_hits, r.table.expansions), (240, 2));
        assert_eq!(r.drops.total, 1);
        let last = playback(&rec, 1).unwrap();
        assert_eq!(last.report.header.end_reason, rec.end_reason);
        assert_eq!(playback(&rec, 2), None);
        assert_eq!(playback(&crate::testdata::recording(), 0), None);
        let total = playback_total(&rec, 0, 1).unwrap();
        assert_eq!(total.header.duration_ns, 500_000_000);
        assert_eq!(total.contention.count, 115);
        assert_eq!(playback_total(&rec, 1, 1).unwrap().contention.count, 0);
        assert_eq!(playback_total(&rec, 0, 2), None);
    }
}
