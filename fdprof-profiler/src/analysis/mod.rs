//! Every figure a report, a flamegraph or any other front end shows, computed once from a
//! [`Recording`] into the typed structs of [`fdprof_figures`] (re-exported here). Front ends
//! only format these; none computes a figure of its own.
//!
//! One module per figure group; [`report`] assembles them into the [`Report`] that
//! `fdprof report --json` prints as it is.

pub(crate) mod cgroups;
mod compare;
mod contention;
mod counters;
mod cpu;
mod diagnosis;
mod drops;
mod flamegraph;
mod functions;
mod header;
mod histogram;
mod live;
mod own_cost;
mod processes;
mod profile;
pub mod replay;
mod scan;
mod series;
mod stacks;
mod syscalls;
mod timeline;
mod waits;

#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod tests;

pub use fdprof_figures::*;

pub use compare::compare;
pub(crate) use contention::{by_lock_operation, contention, stack_walks};
pub(crate) use counters::{counters, target_cpu};
pub(crate) use cpu::cpu;
pub(crate) use diagnosis::diagnosis;
pub(crate) use drops::drops;
pub use flamegraph::{FlamegraphOptions, LockFilter, OpFilter, folded};
pub use flamegraph::{Folded, Weight, folded_cpu};
pub(crate) use functions::functions;
pub(crate) use header::{fd_activity_recorded, header, steal};
#[cfg(test)]
pub(crate) use histogram::summary;
pub(crate) use live::{IntervalRates, rates};
pub(crate) use own_cost::own_cost;
pub use processes::processes;
pub use profile::{
    NoProfile, Profile, ProfileFrame, ProfileKind, ProfileOptions, Space, ValueType, ValueUnit,
    WaitLabels, profile, targets_profile,
};
pub(crate) use scan::{scan, table};
pub(crate) use series::rates as series_rates;
pub use series::{playback, playback_total, series_len};
pub(crate) use stacks::top_stacks;
pub(crate) use syscalls::{latency_level, syscalls, syscalls_by_calls};
pub use timeline::{timeline, timeline_point};

use fdprof_recording::Recording;

/// The whole report: every figure `fdprof report` shows, text or JSON, and the diagnosis read
/// from them.
pub fn report(rec: &Recording, opts: &ReportOptions) -> Report {
    let mut report = figures(rec, opts);
    report.diagnosis = diagnosis(rec, &report);
    report
}

/// Every figure but the diagnosis.
fn figures(rec: &Recording, opts: &ReportOptions) -> Report {
    let contention = contention(rec);
    let (top_stacks, stacks_total) = top_stacks(rec, opts);
    let syscalls = syscalls(rec);
    Report {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        header: header(rec),
        options: *opts,
        functions: functions(rec, &contention.by_lock_operation),
        contention,
        stack_walks: stack_walks(rec),
        top_stacks,
        stacks_total,
        fd_activity_recorded: fd_activity_recorded(rec),
        scan: scan(rec),
        syscall_latency_level: latency_level(rec),
        syscalls_by_calls: syscalls_by_calls(&syscalls),
        syscalls,
        table: table(rec),
        drops: drops(rec),
        own_cost: own_cost(rec),
        diagnosis: Diagnosis::default(),
        rates: series_rates(rec),
        counters: counters(rec),
        cpu: cpu(rec, opts),
        steal: steal(rec),
        full_tracing: rec.full_tracing.clone(),
        processes: processes(rec),
        processes_others: processes::others(rec),
        cgroups: cgroups::cgroups(rec),
    }
}

/// The sum of `values`, saturating: a corrupt recording's counts may add up past `u64`.
pub(crate) fn sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// `part` as a share of `whole` (0..=1), `None` when `whole` is zero.
pub(crate) fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// `total / count`, `None` when `count` is zero.
pub(crate) fn mean(total: u64, count: u64) -> Option<f64> {
    (count > 0).then(|| total as f64 / count as f64)
}
