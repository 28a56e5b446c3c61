//! Lock waits per lock class and fd-table operation, per lock class, and how the stacks were
//! taken.

use std::collections::BTreeMap;

use fdprof_common::probes::{Attachment, Role};
use fdprof_figures::{
    Contention, Lock, LockOperation, LockTotal, Operation, StackWalks, Unit, WaitShare, WaitSource,
};
use fdprof_recording::Recording;
use fdprof_recording::recording::ContentionSite;

use super::waits::{Waits, all_wait_ns};
use super::{histogram, share, sum};
use crate::model::own;

/// Totals over all waits, the `file_lock` totals, and the rows of [`by_lock`] and
/// [`by_lock_operation`].
pub(crate) fn contention(rec: &Recording) -> Contention {
    let file_lock = rec
        .contention
        .iter()
        .filter(|c| c.lock == fdprof_figures::LockKind::FileLock);
    Contention {
        count: sum(rec.contention.iter().map(|c| c.count)),
        total_wait_ns: all_wait_ns(&rec.contention),
        file_lock_wait_ns: rec.file_lock_wait_ns(),
        file_lock_count: sum(file_lock.map(|c| c.count)),
        by_lock: by_lock(rec),
        by_lock_operation: by_lock_operation(rec),
        probe_ns_per_wait: probe_ns_per_wait(rec),
        irq: waits_where(rec, |s| s.operation == Operation::Irq),
        softirq: waits_where(rec, |s| s.operation == Operation::Softirq),
        fdprof_on_stack: waits_where(rec, |s| {
            own::on_stack(s.kernel_stack.iter().map(|f| f.function.as_str()))
        }),
        source: wait_source(rec),
    }
}

/// The lock tracepoints where attached; else the slow-path probe where it is direct (it sees
/// `file_lock`'s waits); else nothing.
fn wait_source(rec: &Recording) -> WaitSource {
    let attached = |role| rec.probes.get(&role);
    match attached(Role::LockTracepoints) {
        Some(Attachment::Off) if attached(Role::LockSlowpath).is_some_and(|a| a.is_direct()) => {
            WaitSource::SlowPath
        }
        Some(Attachment::Off) => WaitSource::Unavailable,
        _ => WaitSource::LockTracepoints,
    }
}

/// The waits of the sites `keep` selects, with their share of all wait.
fn waits_where(rec: &Recording, keep: impl Fn(&ContentionSite) -> bool) -> WaitShare {
    let sites = || rec.contention.iter().filter(|s| keep(s));
    let total_wait_ns = sum(sites().map(|s| s.total_wait_ns));
    WaitShare {
        count: sum(sites().map(|s| s.count)),
        total_wait_ns,
        share_of_all: share(total_wait_ns, all_wait_ns(&rec.contention)),
    }
}

/// The probe time a wait can contain: the lock tracepoints' begin and end programs' mean run
/// times, added, less the stack walks (timed by the begin program and left out of its wait).
fn probe_ns_per_wait(rec: &Recording) -> Option<f64> {
    use fdprof_common::probes::program;
    let totals = |names: [&str; 2]| {
        rec.own_cost
            .programs
            .iter()
            .filter(|p| names.contains(&p.name.as_str()))
            .fold((0u64, 0u64), |(t, n), p| {
                (
                    t.saturating_add(p.run_time_ns),
                    n.saturating_add(p.run_count),
                )
            })
    };
    let (begin_ns, begins) = totals([program::LOCK_BEGIN, program::TP_LOCK_BEGIN]);
    let (end_ns, ends) = totals([program::LOCK_END, program::TP_LOCK_END]);
    let begin_ns = begin_ns.saturating_sub(rec.own_cost.walk_ns_sampled);
    Some(super::mean(begin_ns, begins)? + super::mean(end_ns, ends)?)
}

/// Merged waits per lock: `file_lock` first, then by total wait, then by name.
fn lock_waits(rec: &Recording) -> Vec<(Lock, Waits)> {
    let mut locks: BTreeMap<Lock, Waits> = BTreeMap::new();
    for site in &rec.contention {
        locks.entry(site.figure_lock()).or_default().add(site);
    }
    let mut locks: Vec<(Lock, Waits)> = locks.into_iter().collect();
    locks.sort_by(|(a, wa), (b, wb)| {
        b.is_file_lock()
            .cmp(&a.is_file_lock())
            .then(wb.total_wait_ns.cmp(&wa.total_wait_ns))
            .then(a.cmp(b))
    });
    locks
}

/// Totals per lock class with their share of all wait, in [`lock_waits`] order.
pub(crate) fn by_lock(rec: &Recording) -> Vec<LockTotal> {
    let all = all_wait_ns(&rec.contention);
    lock_waits(rec)
        .into_iter()
        .map(|(lock, w)| LockTotal {
            lock,
            count: w.count,
            total_wait_ns: w.total_wait_ns,
            max_wait_ns: w.max_wait_ns,
            share_of_all: share(w.total_wait_ns, all),
        })
        .collect()
}

/// Rows per (lock, operation), all stacks merged, with quantiles and their share of the lock's
/// and of all wait: locks in [`by_lock`] order; within a lock, operations by total wait (ties
/// in [`Operation`] order).
pub(crate) fn by_lock_operation(rec: &Recording) -> Vec<LockOperation> {
    let all = all_wait_ns(&rec.contention);
    let locks = lock_waits(rec);
    let mut rows: BTreeMap<(Lock, Operation), Waits> = BTreeMap::new();
    for site in &rec.contention {
        rows.entry((site.figure_lock(), site.operation))
            .or_default()
            .add(site);
    }
    let lock_rank = |lock: &Lock| {
        locks
            .iter()
            .position(|(l, _)| l == lock)
            .unwrap_or(usize::MAX)
    };
    let mut rows: Vec<((Lock, Operation), Waits)> = rows.into_iter().collect();
    rows.sort_by(|((la, oa), wa), ((lb, ob), wb)| {
        lock_rank(la)
            .cmp(&lock_rank(lb))
            .then(wb.total_wait_ns.cmp(&wa.total_wait_ns))
            .then(oa.cmp(ob))
    });
    rows.into_iter()
        .map(|((lock, operation), w)| {
            let lock_wait = locks
                .iter()
                .find(|(l, _)| *l == lock)
                .map_or(0, |(_, l)| l.total_wait_ns);
            LockOperation {
                lock,
                operation,
                sites: w.sites,
                count: w.count,
                total_wait_ns: w.total_wait_ns,
                avg_wait_ns: w.avg_wait_ns(),
                p50_wait_ns: w.wait.quantile(0.5),
                p99_wait_ns: w.wait.quantile(0.99),
                p999_wait_ns: w.wait.quantile(0.999),
                max_wait_ns: w.max_wait_ns,
                share_of_lock: share(w.total_wait_ns, lock_wait),
                share_of_all: share(w.total_wait_ns, all),
                wait: histogram::summary(&w.wait, Unit::Ns),
            }
        })
        .collect()
}

/// How many contention stacks were walked and how many reused.
pub(crate) fn stack_walks(rec: &Recording) -> StackWalks {
    let w = &rec.stack_walks;
    StackWalks {
        walked: w.walked,
        reused: w.reused,
        refresh_every: w.refresh_every,
        user: w.user.clone(),
    }
}
