//! A recorded trace as the `fdprof_replay` events a replay runs: each table's operations in
//! the order the kernel applied them, as far as the probes can tell.
//!
//! The tracepoints see a syscall's entry and exit, not the moment inside it when the bit
//! changed. Sorted by exit, two threads' operations that overlap can come out in the wrong
//! order: a close and the alloc that took its fd, or an fd closed before the snapshot was read.
//! Each table's operations are therefore checked against the open fds they imply: an alloc of
//! an fd still open, or a close of an fd not open, takes the overlapping operation of another
//! thread that makes it consistent first; an operation the `/proc` snapshot already shows is
//! dropped. An alloc overlapping another thread's operation on the same table is marked
//! ambiguous: its fd may depend on an order no probe saw.

use std::collections::HashMap;

use fdprof_common::trace::{flag, op};
use fdprof_replay::{TraceEvent, TraceOp, event::Snapshot};

use super::{TableSnapshot, Trace, codec::Row};

/// The largest table a snapshot may describe (bits); larger is a corrupt trace.
pub const MAX_SNAPSHOT_FDS: u32 = crate::model::bounded::TRACE_MAX_FDS;

/// How many later operations are searched for the one an inconsistent operation must follow
/// (a thread preempted inside close for milliseconds lets thousands pass): a bound on the work
/// a hostile trace can cause.
const PARTNERS: usize = 1 << 16;
/// Tables with more threads than this look for overlaps among the nearest operations only.
const MAX_THREADS_EXACT: usize = 256;
const NEIGHBOURS: usize = 1024;

/// The events, and what ordering them took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ordered {
    pub events: Vec<TraceEvent>,
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
    forked: HashMap<u32, HashMap<u32, bool>>,
}

pub fn events(trace: &Trace) -> Result<Ordered, String> {
    let rows = trace.rows()?;
    let mut by_table: Vec<Vec<Row>> = vec![Vec::new(); trace.tables.len()];
    let mut tids = std::collections::HashSet::new();
    for r in rows {
        tids.insert(r.tid);
        by_table[r.table as usize].push(r);
    }
    let mut out = Ordered {
        threads: tids.len() as u64,
        ..Ordered::default()
    };
    for s in &trace.snapshots {
        if s.table as usize >= by_table.len() {
            return Err(format!("a snapshot of unknown table {}", s.table));
        }
    }
    // A fork names another known table. Ids are given in order of first use, so the child's
    // is later and its operations are ordered from the parent's fds at the fork (unless its
    // address was an earlier table's, since freed: then from none).
    for (table, rows) in by_table.iter().enumerate() {
        if let Some(r) = rows.iter().find(|r| {
            r.op == op::FORK && (r.arg as usize >= by_table.len() || r.arg as usize == table)
        }) {
            return Err(format!("a fork of table {table} to table {}", r.arg));
        }
    }
    for (table, mut rows) in by_table.into_iter().enumerate() {
        let snap = trace.snapshots.iter().find(|s| s.table as usize == table);
        rows.sort_by_key(key);
        let mut shadow = Shadow::default();
        if let Some(open) = out.forked.remove(&(table as u32)) {
            shadow.open = open;
        }
        if let Some(s) = snap {
            let (event, open) = snapshot_event(s, table as u64)?;
            shadow.open = open;
            shadow.last_ns = event.time_ns;
            out.events.push(event);
        }
        order_table(&rows, snap, &mut shadow, &mut out);
    }
    // Tables interleave by time; within one, the order found above is kept (stable sort).
    out.events.sort_by_key(|e| e.time_ns);
    Ok(out)
}

/// The open fds the table's operations imply so far, and their close-on-exec flags.
#[derive(Default)]
struct Shadow {
    open: HashMap<u32, bool>,
    /// The last event's time: an operation moved ahead takes it, so sorting by time keeps
    /// the order found.
    last_ns: u64,
}

impl Shadow {
    /// Whether `r` fits the open fds: an alloc of a free fd, a close of an open one.
    fn fits(&self, r: &Row) -> bool {
        match r.op {
            op::ALLOC => r.fd < 0 || !self.open.contains_key(&(r.fd as u32)),
            op::RELEASE => self.open.contains_key(&(r.fd as u32)),
            _ => true,
        }
    }

    fn apply(&mut self, r: &Row) {
        let cloexec = r.flags & flag::CLOEXEC != 0;
        match r.op {
            op::ALLOC if r.fd >= 0 => {
                self.open.insert(r.fd as u32, cloexec);
            }
            op::INSTALL => {
                self.open.insert(r.fd as u32, cloexec);
            }
            op::RELEASE => {
                self.open.remove(&(r.fd as u32));
            }
            op::CLOSE_RANGE => {
                let (lo, hi) = (r.fd as u32, r.arg);
                if r.flags & flag::CLOEXEC_ONLY != 0 {
                    for (_, c) in self
                        .open
                        .iter_mut()
                        .filter(|(fd, _)| (lo..=hi).contains(*fd))
                    {
                        *c = true;
                    }
                } else {
                    self.open.retain(|fd, _| !(lo..=hi).contains(fd));
                }
            }
            op::EXEC => self.open.retain(|_, cloexec| !*cloexec),
            _ => {}
        }
    }
}

/// When the operation most likely changed the table: close and close_range release their fds
/// first thing (the flush and the last fput come after), an allocating syscall takes its fd
/// late (socket, accept) or at least has it by its exit.
fn key(r: &Row) -> u64 {
    match r.op {
        op::RELEASE | op::CLOSE_RANGE => r.enter_ns,
        _ => r.exit_ns,
    }
}

/// Each thread's table-changing operations, to find what overlaps an alloc in `log n`: a
/// thread runs one syscall at a time, so its intervals sorted by entry have their running
/// maximum exit, and one overlaps `[enter, exit]` exactly when the maximum over those entered
/// by `exit` reaches `enter`.
struct Busy {
    by_thread: HashMap<u32, (Vec<u64>, Vec<u64>)>,
}

impl Busy {
    fn new(rows: &[Row]) -> Option<Busy> {
        let mut by_thread: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for r in rows.iter().filter(|r| changes_table(r)) {
            by_thread
                .entry(r.tid)
                .or_default()
                .push((r.enter_ns, r.exit_ns));
            if by_thread.len() > MAX_THREADS_EXACT {
                return None;
            }
        }
        let by_thread = by_thread
            .into_iter()
            .map(|(tid, mut spans)| {
                spans.sort_unstable();
                let enters = spans.iter().map(|s| s.0).collect();
                let max_exits = spans
                    .iter()
                    .scan(0, |m, s| {
                        *m = s.1.max(*m);
                        Some(*m)
                    })
                    .collect();
                (tid, (enters, max_exits))
            })
            .collect();
        Some(Busy { by_thread })
    }

    fn overlaps_another(&self, r: &Row) -> bool {
        self.by_thread
            .iter()
            .filter(|(tid, _)| **tid != r.tid)
            .any(|(_, (enters, max_exits))| {
                let n = enters.partition_point(|&e| e <= r.exit_ns);
                n > 0 && max_exits[n - 1] >= r.enter_ns
            })
    }
}

/// Whether `a` and `b` ran at the same time on different threads.
fn overlap(a: &Row, b: &Row) -> bool {
    a.tid != b.tid && a.enter_ns <= b.exit_ns && b.enter_ns <= a.exit_ns
}

/// Whether `r` changes the table (what an alloc can race with).
fn changes_table(r: &Row) -> bool {
    matches!(
        r.op,
        op::ALLOC | op::RELEASE | op::INSTALL | op::CLOSE_RANGE
    )
}

fn order_table(rows: &[Row], snap: Option<&TableSnapshot>, shadow: &mut Shadow, out: &mut Ordered) {
    let longest = rows
        .iter()
        .map(|r| r.exit_ns - r.enter_ns)
        .max()
        .unwrap_or(0);
    let in_window = |r: &Row| snap.is_some_and(|s| r.enter_ns <= s.until_ns);
    let busy = Busy::new(rows);
    let ctx = Context {
        rows,
        longest,
        busy: busy.as_ref(),
    };
    let mut done = vec![false; rows.len()];
    let mut i = 0;
    while i < rows.len() {
        if done[i] {
            i += 1;
            continue;
        }
        let r = &rows[i];
        if snap.is_some_and(|s| r.exit_ns < s.from_ns) {
            out.in_snapshot += 1;
            i += 1;
            continue;
        }
        if !shadow.fits(r) {
            // An overlapping operation of another thread that makes `r` fit goes first.
            let partner = (i + 1..rows.len().min(i + 1 + PARTNERS))
                .take_while(|&j| key(&rows[j]) <= r.exit_ns.saturating_add(longest))
                .find(|&j| {
                    let p = &rows[j];
                    !done[j] && overlap(r, p) && p.fd == r.fd && shadow.fits(p) && {
                        let wanted = if r.op == op::ALLOC {
                            op::RELEASE
                        } else {
                            op::ALLOC
                        };
                        p.op == wanted || (r.op == op::RELEASE && p.op == op::INSTALL)
                    }
                });
            if let Some(j) = partner {
                done[j] = true;
                out.reordered += 1;
                emit(&ctx, j, shadow, out, in_window(&rows[j]));
                continue;
            }
            if in_window(r) {
                out.in_snapshot += 1;
                i += 1;
                continue;
            }
        }
        emit(&ctx, i, shadow, out, in_window(r));
        i += 1;
    }
}

/// A table's operations, sorted, and what finds overlaps among them.
struct Context<'a> {
    rows: &'a [Row],
    /// The longest operation (entry to exit).
    longest: u64,
    busy: Option<&'a Busy>,
}

impl Context<'_> {
    /// Whether `rows[i]` overlaps a table-changing operation of another thread.
    fn overlapped(&self, i: usize) -> bool {
        let r = &self.rows[i];
        if let Some(busy) = self.busy {
            return busy.overlaps_another(r);
        }
        // Sorted by key, which lies within each operation: neighbours beyond these bounds
        // cannot overlap.
        let lo = r.enter_ns.saturating_sub(self.longest);
        let hi = r.exit_ns.saturating_add(self.longest);
        let rows = self.rows;
        rows[i.saturating_sub(NEIGHBOURS)..i]
            .iter()
            .rev()
            .take_while(|p| key(p) >= lo)
            .chain(
                rows[i + 1..rows.len().min(i + 1 + NEIGHBOURS)]
                    .iter()
                    .take_while(|p| key(p) <= hi),
            )
            .any(|p| changes_table(p) && overlap(r, p))
    }
}

fn emit(ctx: &Context, i: usize, shadow: &mut Shadow, out: &mut Ordered, in_window: bool) {
    let r = &ctx.rows[i];
    shadow.apply(r);
    // An expand's fd is a table size, a fork's a pid.
    if r.fd > 0 && r.op != op::EXPAND && r.op != op::FORK {
        out.highest_fd = out.highest_fd.max(r.fd as u32);
    }
    let cloexec = r.flags & flag::CLOEXEC != 0;
    let op = match r.op {
        op::ALLOC => {
            let ambiguous = in_window || ctx.overlapped(i);
            out.ambiguous += u64::from(ambiguous);
            TraceOp::Alloc {
                start: r.arg,
                cloexec,
                fd: if r.fd >= 0 {
                    Ok(r.fd as u32)
                } else {
                    Err(r.fd.wrapping_neg())
                },
                ambiguous,
            }
        }
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
        op::FORK => {
            out.forked.insert(r.arg, shadow.open.clone());
            TraceOp::Fork {
                child: u64::from(r.arg),
            }
        }
        _ => return,
    };
    shadow.last_ns = shadow.last_ns.max(key(r));
    out.events.push(TraceEvent {
        time_ns: shadow.last_ns,
        tid: r.tid,
        table: u64::from(r.table),
        op,
    });
}

/// The snapshot event of `s`, and its open fds with their close-on-exec flags.
fn snapshot_event(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::{ENCODING, TraceTable, codec};

    fn alloc(tid: u32, enter_ns: u64, exit_ns: u64, fd: i32) -> Row {
        Row {
            exit_ns,
            enter_ns,
            tid,
            op: op::ALLOC,
            fd,
            ..Row::default()
        }
    }

    fn release(tid: u32, enter_ns: u64, exit_ns: u64, fd: i32) -> Row {
        Row {
            op: op::RELEASE,
            ..alloc(tid, enter_ns, exit_ns, fd)
        }
    }

    fn trace(rows: &[Row], open: &[u32]) -> Trace {
        Trace {
            encoding: ENCODING.into(),
            events: rows.len() as u64,
            limit: 100,
            over_limit: 0,
            lost: 0,
            tables: vec![TraceTable { pid: 1, addr: None }],
            snapshots: vec![TableSnapshot {
                table: 0,
                from_ns: 0,
                until_ns: 0,
                open: crate::model::trace::runs(open),
                cloexec: Vec::new(),
                next_fd: 0,
                max_fds: 64,
            }],
            notes: Vec::new(),
            data: codec::encode(rows),
        }
    }

    fn ops(o: &Ordered) -> Vec<(u32, String)> {
        o.events[1..]
            .iter()
            .map(|e| {
                let what = match &e.op {
                    TraceOp::Alloc { fd, ambiguous, .. } => {
                        format!(
                            "alloc {} {}",
                            fd.unwrap(),
                            if *ambiguous { "?" } else { "" }
                        )
                    }
                    TraceOp::Release { fd } => format!("release {fd}"),
                    other => format!("{other:?}"),
                };
                (e.tid, what.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn overlapping_allocs_are_ambiguous_and_sequential_ones_not() {
        let rows = [
            alloc(1, 10, 20, 3),
            alloc(2, 15, 25, 4),
            alloc(1, 30, 40, 5),
        ];
        let o = events(&trace(&rows, &[0, 1, 2])).unwrap();
        assert_eq!(
            ops(&o),
            [
                (1, "alloc 3 ?".to_string()),
                (2, "alloc 4 ?".to_string()),
                (1, "alloc 5".to_string())
            ]
        );
        assert_eq!(o.ambiguous, 2);
    }

    /// What the direct modes' in-lock probes make of a row: its moment inside file_lock.
    fn locked(mut r: Row, at: u64) -> Row {
        (r.enter_ns, r.exit_ns) = (at, at);
        r.flags |= flag::LOCKED;
        r
    }

    #[test]
    fn locked_moments_order_overlapping_operations_exactly() {
        // Thread 2's close of 3 spans thread 1's alloc; inside the lock, the close came first
        // and the alloc took the fd it freed. Without the moments: ambiguous.
        let rows = [
            locked(alloc(1, 10, 30, 3), 25),
            locked(release(2, 5, 40, 3), 20),
            locked(alloc(2, 41, 50, 4), 45),
        ];
        let o = events(&trace(&rows, &[0, 1, 2, 3])).unwrap();
        assert_eq!(
            ops(&o),
            [
                (2, "release 3".to_string()),
                (1, "alloc 3".to_string()),
                (2, "alloc 4".to_string())
            ]
        );
        assert_eq!((o.ambiguous, o.reordered), (0, 0));
        // One operation without its moment still overlaps the others: that alloc stays
        // ambiguous.
        let rows = [alloc(1, 10, 30, 3), locked(release(2, 5, 40, 3), 20)];
        let o = events(&trace(&rows, &[0, 1, 2, 3])).unwrap();
        assert_eq!(o.ambiguous, 1);
    }

    #[test]
    fn a_close_is_ordered_at_its_entry() {
        // Thread 2's close of 3 ends after thread 1's alloc of 3, but released it first thing.
        let rows = [alloc(1, 10, 20, 3), release(2, 5, 30, 3)];
        let o = events(&trace(&rows, &[0, 1, 2, 3])).unwrap();
        assert_eq!(
            ops(&o),
            [(2, "release 3".to_string()), (1, "alloc 3 ?".to_string())]
        );
        assert_eq!(o.reordered, 0);
    }

    #[test]
    fn an_operation_is_moved_before_the_one_it_must_follow() {
        // Thread 2 closes the fd thread 1's open took early and returned late.
        let rows = [alloc(1, 10, 30, 3), release(2, 20, 25, 3)];
        let o = events(&trace(&rows, &[0, 1, 2])).unwrap();
        assert_eq!(
            ops(&o),
            [(1, "alloc 3 ?".to_string()), (2, "release 3".to_string())]
        );
        assert_eq!(o.reordered, 1);
    }

    #[test]
    fn operations_the_snapshot_shows_are_dropped() {
        let mut t = trace(&[alloc(1, 10, 20, 3), release(1, 30, 40, 3)], &[0, 1, 2, 3]);
        t.snapshots[0].from_ns = 15;
        t.snapshots[0].until_ns = 25;
        let o = events(&t).unwrap();
        assert_eq!(ops(&o), [(1, "release 3".to_string())]);
        assert_eq!(o.in_snapshot, 1);
    }
}
