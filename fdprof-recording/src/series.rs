//! The per-interval series of `record --interval`: one compact [`Sample`] per interval, enough
//! for rates over time (counts, sums, maxima), never a full report: no stacks, histograms or
//! quantiles. Zero counters and empty rows are left out of the file, so an idle interval costs
//! a few dozen bytes and a busy one a few hundred.

use serde::{Deserialize, Serialize};

use fdprof_common::{contention::LockKind, fnops::Operation};

use super::bounded;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
