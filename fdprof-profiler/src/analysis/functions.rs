//! Direct-probe figures per fd-table operation (fentry/kprobe modes).

use fdprof_figures::{Function, LockOperation, Unit};
use fdprof_recording::Recording;

use super::histogram::summary;

/// Per operation: calls, duration, hold and slow-path-wait histograms, unpaired entries, and
/// the `file_lock` waits the contention tracepoint attributed to the same operation (from
/// `rows`, the [`super::by_lock_operation`] rows). Empty in tracepoint mode.
pub(crate) fn functions(rec: &Recording, rows: &[LockOperation]) -> Vec<Function> {
    rec.functions
        .iter()
        .map(|f| {
            let tp = rows
                .iter()
                .find(|r| r.lock.is_file_lock() && r.operation == f.operation);
            Function {
                operation: f.operation,
                calls: f.calls,
                expanded: f.expanded,
                duration: summary(&f.duration, Unit::Ns),
                hold: summary(&f.hold, Unit::Ns),
                slowpath_wait: summary(&f.slowpath_wait, Unit::Ns),
                unpaired: f.unpaired,
                tracepoint_waits: tp.map_or(0, |r| r.count),
                tracepoint_wait_ns: tp.map_or(0, |r| r.total_wait_ns),
            }
        })
        .collect()
}
