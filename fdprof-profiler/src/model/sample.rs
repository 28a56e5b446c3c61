//! A series' sample of one interval: from its delta snapshot (`record --interval`, `top`), or
//! from its assembled recording (the daemon's captures, `top`'s `w`); and back, a sample as a
//! recording of its own (`top --from`). The series' types are the format's
//! ([`fdprof_recording::series`]); making them needs the collector's snapshot and the symbolizers.

use fdprof_recording::recording::{
    ContentionSite, DropCount, Recording, ScanStats, SyscallStats, TableStats,
};
use fdprof_recording::series::{Sample, SampleSyscall, SampleWaits, grouped_waits};

use super::build::{self, Symbolizers};
use crate::collect::Snapshot;

/// The sample of one interval from its delta snapshot. Kernel stacks are symbolized (through
/// `sym`) only to tell the operation; user stacks are not looked at.
pub(crate) fn of_snapshot(
    start_ns: u64,
    duration_ns: u64,
    delta: &Snapshot,
    sym: &mut Symbolizers,
) -> Sample {
    let mut kernel_only = Symbolizers {
        kernel: sym.kernel,
        user: sym.user,
        user_pid: None,
        raw_addrs: false,
    };
    let waits = waits(&build::contention_sites(delta, &mut kernel_only));
    let syscalls = syscalls(&build::syscalls(delta));
    let scan = build::scan(delta);
    let table = build::table(delta);
    Sample {
        start_ns,
        duration_ns,
        waits,
        syscalls,
        allocations: scan.allocations,
        next_fd_hits: scan.next_fd_hits,
        max_fds: table.max_fds_max,
        expansions: table.expansions,
        drops: build::drops(delta)
            .iter()
            .fold(0, |sum, d| sum.saturating_add(d.count)),
    }
}

/// The sample of one interval's recording: what [`of_snapshot`] takes from a snapshot,
/// taken from the assembled figures.
pub(crate) fn of_recording(rec: &Recording, start_ns: u64) -> Sample {
    Sample {
        start_ns,
        duration_ns: rec.duration_ns,
        waits: waits(&rec.contention),
        syscalls: syscalls(&rec.syscalls),
        allocations: rec.scan.allocations,
        next_fd_hits: rec.scan.next_fd_hits,
        max_fds: rec.table.max_fds_max,
        expansions: rec.table.expansions,
        drops: rec.total_drops(),
    }
}

/// The sites' waits, one row per (lock, name, operation), within a sample's bound.
fn waits(sites: &[ContentionSite]) -> Vec<SampleWaits> {
    grouped_waits(
        sites
            .iter()
            .map(|site| SampleWaits {
                lock: site.lock,
                lock_name: site.lock_name.clone(),
                operation: site.operation,
                count: site.count,
                total_wait_ns: site.total_wait_ns,
                max_wait_ns: site.max_wait_ns,
            })
            .collect(),
    )
}

/// The syscalls called (or failed) at least once.
fn syscalls(stats: &[SyscallStats]) -> Vec<SampleSyscall> {
    stats
        .iter()
        .filter(|s| s.calls > 0 || s.errors > 0)
        .map(|s| SampleSyscall {
            name: s.name.clone(),
            calls: s.calls,
            errors: s.errors,
        })
        .collect()
}

/// A recording of one sample of `rec`'s series: `rec`'s facts, the sample's figures. Its
/// contention sites have no stacks and empty histograms, its syscalls no latencies, its drops
/// one counter (`all`, `total`): what a sample does not keep.
pub(crate) fn as_recording(rec: &Recording, sample: &Sample, last: bool) -> Recording {
    let contention = sample
        .waits
        .iter()
        .map(|w| ContentionSite {
            lock: w.lock,
            lock_name: w.lock_name.clone(),
            operation: w.operation,
            kernel_stack: Vec::new(),
            user_stack: Vec::new(),
            count: w.count,
            total_wait_ns: w.total_wait_ns,
            max_wait_ns: w.max_wait_ns,
            wait: Default::default(),
            pid: None,
        })
        .collect();
    let syscalls = sample
        .syscalls
        .iter()
        .map(|s| SyscallStats {
            name: s.name.clone(),
            calls: s.calls,
            errors: s.errors,
            ..Default::default()
        })
        .collect();
    Recording {
        started_unix_ms: rec.started_unix_ms + sample.start_ns / 1_000_000,
        duration_ns: sample.duration_ns,
        end_reason: match last {
            true => rec.end_reason,
            false => fdprof_common::session::EndReason::Duration,
        },
        contention,
        syscalls,
        scan: ScanStats {
            allocations: sample.allocations,
            next_fd_hits: sample.next_fd_hits,
            origin: rec.scan.origin.clone(),
            ..Default::default()
        },
        table: TableStats {
            max_fds_first: rec.table.max_fds_first,
            max_fds_max: sample.max_fds,
            expansions: sample.expansions,
        },
        drops: vec![DropCount {
            probe: "all".into(),
            reason: "total".into(),
            count: sample.drops,
        }],
        ..rec.facts_only()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fdprof_common::{
        contention::{LockKind, SiteKey},
        counters::{global, per_syscall},
        fnops::Operation,
        syscalls::FD_SYSCALLS,
    };

    use super::*;
    use crate::collect::snapshot::Contention;
    use crate::symbolize::{KernelSymbols, UserSymbolizer};
    use fdprof_recording::series::merged;

    fn empty() -> Snapshot {
        Snapshot {
            elapsed: Duration::from_millis(1000),
            ..crate::collect::Snapshot::zeroed()
        }
    }

    fn key(stack: i32) -> SiteKey {
        SiteKey {
            lock: Default::default(),
            kernel_stack: stack,
            user_stack: -1,
            ..SiteKey::default()
        }
    }

    #[test]
    fn a_sample_merges_sites_per_lock_and_operation_and_keeps_counts() {
        let mut snap = empty();
        let socket = FD_SYSCALLS.iter().position(|s| s.name == "socket").unwrap() as u32;
        let at = |c: u32| (socket * per_syscall::COUNT + c) as usize;
        snap.syscall_counters[at(per_syscall::CALLS)] = 40;
        snap.syscall_counters[at(per_syscall::ERRORS)] = 2;
        snap.globals[global::NEXT_FD_HITS as usize] = 30;
        snap.globals[global::EXPANSIONS as usize] = 1;
        snap.globals[global::MAX_FDS_SEEN as usize] = 256;
        snap.drops[0] = 3;
        // Two stacks in alloc_fd (two slots each) and one in file_close_fd.
        snap.stacks.insert(1, vec![0xffffffff81000110]);
        snap.stacks.insert(2, vec![0xffffffff81000110]);
        snap.stacks.insert(3, vec![0xffffffff81000210]);
        let waits = Contention::in_slot;
        snap.contention = vec![
            (
                key(1),
                waits(10, 4, 4_000, 1_500).plus(waits(12, 1, 5_000, 5_000)),
            ),
            (key(2), waits(10, 2, 2_000, 1_100)),
            (key(3), waits(10, 7, 7_000, 1_200)),
        ];
        let kernel =
            KernelSymbols::parse("ffffffff81000100 T alloc_fd\nffffffff81000200 T file_close_fd\n")
                .unwrap();
        let mut user = UserSymbolizer::new();
        let mut sym = Symbolizers {
            kernel: &kernel,
            user: &mut user,
            user_pid: Some(1),
            raw_addrs: true,
        };
        let s = of_snapshot(5, 1_000, &snap, &mut sym);
        assert_eq!((s.start_ns, s.duration_ns), (5, 1_000));
        let rows: Vec<_> = s
            .waits
            .iter()
            .map(|w| (w.operation, w.count, w.total_wait_ns, w.max_wait_ns))
            .collect();
        assert_eq!(
            rows,
            [
                (Operation::Alloc, 7, 11_000, 5_000),
                (Operation::Close, 7, 7_000, 1_200)
            ]
        );
        assert!(s.waits.iter().all(|w| w.lock == LockKind::FileLock));
        assert_eq!(s.syscalls.len(), 1);
        assert_eq!(
            (
                s.syscalls[0].name.as_str(),
                s.syscalls[0].calls,
                s.syscalls[0].errors
            ),
            ("socket", 40, 2)
        );
        assert_eq!(
            (s.next_fd_hits, s.max_fds, s.expansions, s.drops),
            (30, 256, 1, 3)
        );
    }

    #[test]
    fn a_sample_recording_keeps_the_facts_and_the_sample() {
        let rec = crate::testdata::recording();
        let sample = Sample {
            start_ns: 2_000_000_000,
            duration_ns: 1_000_000_000,
            waits: vec![SampleWaits {
                lock: LockKind::FileLock,
                lock_name: None,
                operation: Operation::Close,
                count: 3,
                total_wait_ns: 900,
                max_wait_ns: 400,
            }],
            syscalls: vec![SampleSyscall {
                name: "close".into(),
                calls: 9,
                errors: 1,
            }],
            drops: 2,
            ..Default::default()
        };
        let one = as_recording(&rec, &sample, false);
        assert_eq!(one.target.describe(), rec.target.describe());
        assert_eq!(one.started_unix_ms, rec.started_unix_ms + 2_000);
        assert_eq!(one.duration_ns, 1_000_000_000);
        assert_eq!(one.end_reason, fdprof_common::session::EndReason::Duration);
        assert_eq!(as_recording(&rec, &sample, true).end_reason, rec.end_reason);
        assert_eq!(one.contention.len(), 1);
        assert_eq!(one.contention[0].count, 3);
        assert_eq!(one.syscalls[0].calls, 9);
        assert_eq!(one.total_drops(), 2);
        let both = merged(&[sample.clone(), sample]);
        assert_eq!(
            (both.start_ns, both.duration_ns),
            (2_000_000_000, 2_000_000_000)
        );
        assert_eq!((both.waits.len(), both.waits[0].count), (1, 6));
        assert_eq!((both.syscalls[0].calls, both.syscalls[0].errors), (18, 2));
        assert_eq!(both.drops, 4);
    }
}
