//! A trace in the order it replays: each table's rows kept once, sorted, with the order of the
//! events they make ([`super::order`] finds it); each `fdprof_replay` event is made from its row
//! as a replay reads it, so a trace costs its rows and 16 bytes a step, not an event each.

use std::borrow::Cow;
use std::collections::HashMap;

use fdprof_common::trace::{flag, op};
use fdprof_replay::{TraceEvent, TraceOp, event::Snapshot};

use super::{TableSnapshot, codec::Row};

/// The largest table a snapshot may describe (bits); larger is a corrupt trace.
pub const MAX_SNAPSHOT_FDS: u32 = crate::bounded::TRACE_MAX_FDS;

/// The events, and what ordering them took. The events are not held as such: each table's
/// rows are kept (sorted), with the order they replay in, and [`Ordered::events`] makes each
/// event from its row as a replay reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ordered {
    /// The rows, grouped by table and sorted within each by when they changed it.
    pub(super) rows: Vec<Row>,
    /// Each table's snapshot event, in the order the tables were ordered.
    pub(super) snapshots: Vec<TraceEvent>,
    /// What replays, in order.
    pub(super) steps: Vec<Step>,
    /// Allocations marked ambiguous.
    pub ambiguous: u64,
    /// Operations moved before an overlapping one of another thread.
    pub reordered: u64,
    /// Operations dropped because the snapshot already showed them.
    pub in_snapshot: u64,
    /// Distinct threads seen.
    pub threads: u64,
    /// The highest fd seen (0 when none).
    pub highest_fd: u32,
    /// Each forked table's open fds as its parent's were at the fork, until its own
    /// operations are ordered from them.
    pub(super) forked: HashMap<u32, HashMap<u32, bool>>,
}

/// One event of the replay: a row (its index, and whether the alloc is ambiguous) or a
/// snapshot (its index), at the time it sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) time_ns: u64,
    pub(super) what: u32,
}

/// In [`Step::what`]: a snapshot's index rather than a row's, and an ambiguous alloc.
pub(super) const SNAPSHOT: u32 = 1 << 31;
pub(super) const AMBIGUOUS: u32 = 1 << 30;

/// What ordering keeps a row for, beyond the row: its step, a span of its thread's for the
/// overlap search, and a flag (the memory budget counts these, [`crate::budget`]).
pub const ORDER_BYTES_PER_ROW: u64 =
    (size_of::<Row>() + size_of::<Step>() + size_of::<(u64, u64)>() + size_of::<bool>()) as u64;

impl Ordered {
    /// How many events replay.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The events in replay order, each made as it is read (a snapshot is lent).
    pub fn events(&self) -> impl Iterator<Item = Cow<'_, TraceEvent>> + '_ {
        self.steps.iter().filter_map(|s| {
            let index = (s.what & !(SNAPSHOT | AMBIGUOUS)) as usize;
            if s.what & SNAPSHOT != 0 {
                return self.snapshots.get(index).map(Cow::Borrowed);
            }
            let r = self.rows.get(index)?;
            Some(Cow::Owned(TraceEvent {
                time_ns: s.time_ns,
                tid: r.tid,
                table: u64::from(r.table),
                op: trace_op(r, s.what & AMBIGUOUS != 0)?,
            }))
        })
    }
}

/// The operation a row replays as; `None` for an op fdprof does not know.
pub(super) fn trace_op(r: &Row, ambiguous: bool) -> Option<TraceOp> {
    let cloexec = r.flags & flag::CLOEXEC != 0;
    Some(match r.op {
        op::ALLOC => TraceOp::Alloc {
            start: r.arg,
            cloexec,
            fd: if r.fd >= 0 {
                Ok(r.fd as u32)
            } else {
                Err(r.fd.wrapping_neg())
            },
            ambiguous,
        },
        op::RELEASE => TraceOp::Release { fd: r.fd as u32 },
        op::INSTALL => TraceOp::InstallAt {
            fd: r.fd as u32,
            cloexec,
        },
        op::CLOSE_RANGE => TraceOp::CloseRange {
            lo: r.fd as u32,
            hi: r.arg,
            cloexec_only: r.flags & flag::CLOEXEC_ONLY != 0,
            unshare: None,
        },
        op::EXEC => TraceOp::Exec { unshare: None },
        op::EXPAND => TraceOp::Expand {
            max_fds: r.fd as u32,
        },
        op::FORK => TraceOp::Fork {
            child: u64::from(r.arg),
        },
        _ => return None,
    })
}

/// The snapshot event of `s`, and its open fds with their close-on-exec flags.
pub(super) fn snapshot_event(
    s: &TableSnapshot,
    table: u64,
) -> Result<(TraceEvent, HashMap<u32, bool>), String> {
    let bad = |what: &str| format!("snapshot of table {table}: {what}");
    if s.max_fds == 0 || s.max_fds > MAX_SNAPSHOT_FDS || !s.max_fds.is_multiple_of(64) {
        return Err(bad("max_fds is not a table size"));
    }
    let words = (s.max_fds / 64) as usize;
    let mut open_bits = vec![0u64; words];
    let mut cloexec_bits = vec![0u64; words];
    let mut open = HashMap::new();
    let mut set = |runs: &[[u32; 2]], bits: &mut Vec<u64>, cloexec: bool| -> Result<(), String> {
        // Ascending, disjoint runs: at most max_fds fds set in all.
        let mut prev_end = 0;
        for &[first, count] in runs {
            let end = first
                .checked_add(count)
                .filter(|&e| e <= s.max_fds)
                .ok_or_else(|| bad("an fd beyond max_fds"))?;
            if first < prev_end {
                return Err(bad("runs not ascending"));
            }
            prev_end = end;
            for fd in first..end {
                bits[fd as usize / 64] |= 1 << (fd % 64);
                if cloexec {
                    open.insert(fd, true);
                } else {
                    open.entry(fd).or_insert(false);
                }
            }
        }
        Ok(())
    };
    set(&s.open, &mut open_bits, false)?;
    set(&s.cloexec, &mut cloexec_bits, true)?;
    let event = TraceEvent {
        time_ns: s.from_ns,
        tid: 0,
        table,
        op: TraceOp::Snapshot(Box::new(Snapshot {
            open: open_bits,
            cloexec: cloexec_bits,
            next_fd: s.next_fd.min(s.max_fds),
            max_fds: s.max_fds,
        })),
    };
    Ok((event, open))
}
