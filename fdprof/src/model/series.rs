//! The per-interval series of `record --interval`: one compact [`Sample`] per interval, enough
//! for rates over time (counts, sums, maxima), never a full report: no stacks, histograms or
//! quantiles. Zero counters and empty rows are left out of the file, so an idle interval costs
//! a few dozen bytes and a busy one a few hundred.

use serde::{Deserialize, Serialize};

use fdprof_common::{contention::LockKind, fnops::Operation};

use super::bounded;
use super::build::{self, Symbolizers};
use super::recording::{ContentionSite, DropCount, Recording, ScanStats, SyscallStats, TableStats};
use crate::collect::Snapshot;

/// The series: the interval asked for and one sample per interval, oldest first. The last
/// sample is the partial interval up to the end of the recording; the samples' counts add up
/// to the recording's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// `record --interval`, ns.
    pub interval_ns: u64,
    #[serde(deserialize_with = "bounded::samples")]
    pub samples: Vec<Sample>,
}

/// What happened in one interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Start since the probes were attached, ns.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Waits per (lock, operation) with at least one wait.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::sample_waits"
    )]
    pub waits: Vec<SampleWaits>,
    /// Syscalls called at least once.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::syscalls"
    )]
    pub syscalls: Vec<SampleSyscall>,
    /// `alloc_fd` allocations and those that took `files->next_fd` as it was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub allocations: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_fd_hits: u64,
    /// The largest `fdt->max_fds` seen so far (a maximum is of the run, not the interval).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_fds: u64,
    /// Syscalls during which the table grew.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expansions: u64,
    /// Events lost, every drop counter together.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drops: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleWaits {
    pub lock: LockKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_name: Option<super::lock::LockName>,
    pub operation: Operation,
    pub count: u64,
    pub total_wait_ns: u64,
    /// The longest wait of the run so far at this (lock, operation)'s stacks.
    pub max_wait_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleSyscall {
    #[serde(deserialize_with = "bounded::name")]
    pub name: String,
    pub calls: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub errors: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The sample of one interval from its delta snapshot. Kernel stacks are symbolized (through
/// `sym`) only to tell the operation; user stacks are not looked at.
pub fn sample(start_ns: u64, duration_ns: u64, delta: &Snapshot, sym: &mut Symbolizers) -> Sample {
    let mut kernel_only = Symbolizers {
        kernel: sym.kernel,
        user: sym.user,
        user_pid: None,
        raw_addrs: false,
    };
    let mut waits: Vec<SampleWaits> = Vec::new();
    for site in build::contention_sites(delta, &mut kernel_only) {
        add_waits(
            &mut waits,
            SampleWaits {
                lock: site.lock,
                lock_name: site.lock_name,
                operation: site.operation,
                count: site.count,
                total_wait_ns: site.total_wait_ns,
                max_wait_ns: site.max_wait_ns,
            },
        );
    }
    let waits = bound_waits(waits);
    let syscalls = build::syscalls(delta)
        .into_iter()
        .map(|s| SampleSyscall {
            name: s.name,
            calls: s.calls,
            errors: s.errors,
        })
        .collect();
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

/// Wait rows added up per (lock, name, operation), within the sample's bound.
pub fn grouped_waits(rows: Vec<SampleWaits>) -> Vec<SampleWaits> {
    let mut waits = Vec::new();
    for w in rows {
        add_waits(&mut waits, w);
    }
    bound_waits(waits)
}

/// Adds `w` to its (lock, operation) row of `waits`.
fn add_waits(waits: &mut Vec<SampleWaits>, w: SampleWaits) {
    match waits
        .iter_mut()
        .find(|a| (a.lock, &a.lock_name, a.operation) == (w.lock, &w.lock_name, w.operation))
    {
        Some(a) => {
            a.count = a.count.saturating_add(w.count);
            a.total_wait_ns = a.total_wait_ns.saturating_add(w.total_wait_ns);
            a.max_wait_ns = a.max_wait_ns.max(w.max_wait_ns);
        }
        None => waits.push(w),
    }
}

/// At most [`bounded::SAMPLE_WAITS`] rows: past that, the named locks of least wait are
/// folded into their kind's rows. Sorted by lock, name and operation.
fn bound_waits(mut waits: Vec<SampleWaits>) -> Vec<SampleWaits> {
    let kinds = LockKind::ALL.len() * Operation::ALL.len();
    if waits.len() > bounded::SAMPLE_WAITS {
        waits.sort_by_key(|w| std::cmp::Reverse(w.total_wait_ns));
        let folded = waits.split_off(bounded::SAMPLE_WAITS - kinds);
        for mut w in folded {
            w.lock_name = None;
            add_waits(&mut waits, w);
        }
    }
    waits.sort_by_key(|w| {
        let name = w.lock_name.as_ref().map(|n| n.name.clone());
        (w.lock, name, w.operation)
    });
    waits
}

/// One sample of everything in `samples` (consecutive): counts and sums added, the maxima's
/// maximum, from the first start for their durations together.
pub fn merged(samples: &[Sample]) -> Sample {
    let mut all = Sample {
        start_ns: samples.first().map_or(0, |s| s.start_ns),
        ..Default::default()
    };
    for s in samples {
        all.duration_ns = all.duration_ns.saturating_add(s.duration_ns);
        for w in &s.waits {
            add_waits(&mut all.waits, w.clone());
        }
        for c in &s.syscalls {
            match all.syscalls.iter_mut().find(|a| a.name == c.name) {
                Some(a) => {
                    a.calls = a.calls.saturating_add(c.calls);
                    a.errors = a.errors.saturating_add(c.errors);
                }
                None => all.syscalls.push(c.clone()),
            }
        }
        all.allocations = all.allocations.saturating_add(s.allocations);
        all.next_fd_hits = all.next_fd_hits.saturating_add(s.next_fd_hits);
        all.max_fds = all.max_fds.max(s.max_fds);
        all.expansions = all.expansions.saturating_add(s.expansions);
        all.drops = all.drops.saturating_add(s.drops);
    }
    all.waits = bound_waits(all.waits);
    all
}

/// A recording of one sample of `rec`'s series: `rec`'s facts, the sample's figures. Its
/// contention sites have no stacks and empty histograms, its syscalls no latencies, its drops
/// one counter (`all`, `total`): what a sample does not keep.
pub fn sample_recording(rec: &Recording, sample: &Sample, last: bool) -> Recording {
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
        contention::SiteKey,
        counters::{global, per_syscall},
        syscalls::FD_SYSCALLS,
    };

    use super::*;
    use crate::collect::snapshot::Contention;
    use crate::symbolize::{KernelSymbols, UserSymbolizer};

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
        let s = sample(5, 1_000, &snap, &mut sym);
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
    fn an_idle_sample_is_small_and_reads_back() {
        let idle = Sample {
            start_ns: 1_000_000_000,
            duration_ns: 1_000_000_000,
            max_fds: 64,
            ..Default::default()
        };
        let text = serde_json::to_string(&idle).unwrap();
        assert_eq!(
            text,
            r#"{"start_ns":1000000000,"duration_ns":1000000000,"max_fds":64}"#
        );
        assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), idle);
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
        let one = sample_recording(&rec, &sample, false);
        assert_eq!(one.target.describe(), rec.target.describe());
        assert_eq!(one.started_unix_ms, rec.started_unix_ms + 2_000);
        assert_eq!(one.duration_ns, 1_000_000_000);
        assert_eq!(one.end_reason, fdprof_common::session::EndReason::Duration);
        assert_eq!(
            sample_recording(&rec, &sample, true).end_reason,
            rec.end_reason
        );
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
