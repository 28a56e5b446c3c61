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

use super::work::Work;
use super::{TableSnapshot, Trace, codec::Row};

use super::ordered::{AMBIGUOUS, SNAPSHOT, Step, snapshot_event, trace_op};
pub use super::ordered::{MAX_SNAPSHOT_FDS, ORDER_BYTES_PER_ROW, Ordered};

/// How many later operations are searched for the one an inconsistent operation must follow
/// (a thread preempted inside close for milliseconds lets thousands pass): a bound on the work
/// a hostile trace can cause.
const PARTNERS: usize = 1 << 16;
/// Tables with more threads than this look for overlaps among the nearest operations only.
const MAX_THREADS_EXACT: usize = 256;
const NEIGHBOURS: usize = 1024;

/// The trace's rows, decoded, in the order they replay, within the work the trace is worth.
pub fn events(trace: &Trace) -> Result<Ordered, String> {
    let mut work = Work::bound(trace);
    order(trace, trace.rows()?, &mut work).map_err(|e| match work.over() {
        true => work.refusal("the trace", "while ordering its rows"),
        false => e,
    })
}

/// `rows`, the trace's rows as decoded ([`Trace::rows`]), in the order they replay. What it
/// visits (rows, open fds, candidates) is added to `work`; past its bound it stops with `Err`
/// and `work.over()`.
pub fn order(trace: &Trace, mut rows: Vec<Row>, work: &mut Work) -> Result<Ordered, String> {
    let tables = trace.tables.len();
    if rows.len() >= AMBIGUOUS as usize {
        return Err(format!("{} rows", rows.len()));
    }
    for s in &trace.snapshots {
        if s.table as usize >= tables {
            return Err(format!("a snapshot of unknown table {}", s.table));
        }
    }
    // A fork names another known table. Ids are given in order of first use, so the child's
    // is later and its operations are ordered from the parent's fds at the fork (unless its
    // address was an earlier table's, since freed: then from none).
    if let Some(r) = rows
        .iter()
        .filter(|r| r.op == op::FORK && (r.arg as usize >= tables || r.arg == r.table))
        .min_by_key(|r| r.table)
    {
        return Err(format!("a fork of table {} to table {}", r.table, r.arg));
    }
    let mut tids: Vec<u32> = rows.iter().map(|r| r.tid).collect();
    tids.sort_unstable();
    tids.dedup();
    let threads = tids.len() as u64;
    drop(tids);
    // Each table's rows together, in the order its operations most likely changed it (a
    // stable sort: rows of the same moment keep the order they were recorded in).
    rows.sort_by_key(|r| (r.table, key(r)));
    let mut out = Ordered {
        threads,
        steps: Vec::with_capacity(rows.len() + trace.snapshots.len()),
        ..Ordered::default()
    };
    let mut start = 0;
    for table in 0..tables {
        let end = start + rows[start..].partition_point(|r| r.table as usize == table);
        let snap = trace.snapshots.iter().find(|s| s.table as usize == table);
        let mut shadow = Shadow::default();
        if let Some(open) = out.forked.remove(&(table as u32)) {
            shadow.open = open;
        }
        if let Some(s) = snap {
            let (event, open) = snapshot_event(s, table as u64)?;
            work.add(open.len() as u64);
            shadow.open = open;
            shadow.last_ns = event.time_ns;
            out.steps.push(Step {
                time_ns: event.time_ns,
                what: SNAPSHOT | out.snapshots.len() as u32,
            });
            out.snapshots.push(event);
        }
        shadow.left = work.left();
        let done = order_table(&rows[start..end], start, snap, &mut shadow, &mut out);
        work.add(shadow.work);
        if !done {
            work.add(1);
            return Err("over its work bound".into());
        }
        start = end;
    }
    // Tables interleave by time; within one, the order found above is kept (stable sort).
    if !out.steps.is_sorted_by_key(|s| s.time_ns) {
        out.steps.sort_by_key(|s| s.time_ns);
    }
    out.rows = rows;
    Ok(out)
}

/// The open fds the table's operations imply so far, and their close-on-exec flags.
#[derive(Default)]
struct Shadow {
    open: HashMap<u32, bool>,
    /// The last event's time: an operation moved ahead takes it, so sorting by time keeps
    /// the order found.
    last_ns: u64,
    /// Rows, open fds and candidate rows visited ([`Work`]), and how many may be.
    work: u64,
    left: u64,
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
        // Each row, and each open fd an exec or close_range goes through.
        self.work += 1;
        if matches!(r.op, op::CLOSE_RANGE | op::EXEC) {
            self.work += self.open.len() as u64;
        }
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
/// by `exit` reaches `enter`. Each span is `(entry, the running maximum exit)`.
struct Busy {
    by_thread: HashMap<u32, Vec<(u64, u64)>>,
}

impl Busy {
    fn new(rows: &[Row]) -> Option<Busy> {
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for r in rows.iter().filter(|r| changes_table(r)) {
            *counts.entry(r.tid).or_default() += 1;
            if counts.len() > MAX_THREADS_EXACT {
                return None;
            }
        }
        // One thread overlaps no other.
        if counts.len() < 2 {
            return Some(Busy {
                by_thread: HashMap::new(),
            });
        }
        let mut by_thread: HashMap<u32, Vec<(u64, u64)>> = counts
            .into_iter()
            .map(|(tid, n)| (tid, Vec::with_capacity(n)))
            .collect();
        for r in rows.iter().filter(|r| changes_table(r)) {
            if let Some(spans) = by_thread.get_mut(&r.tid) {
                spans.push((r.enter_ns, r.exit_ns));
            }
        }
        for spans in by_thread.values_mut() {
            spans.sort_unstable();
            let mut max_exit = 0;
            for span in spans.iter_mut() {
                max_exit = max_exit.max(span.1);
                span.1 = max_exit;
            }
        }
        Some(Busy { by_thread })
    }

    fn overlaps_another(&self, r: &Row) -> bool {
        self.by_thread
            .iter()
            .filter(|(tid, _)| **tid != r.tid)
            .any(|(_, spans)| {
                let n = spans.partition_point(|&(enter, _)| enter <= r.exit_ns);
                n > 0 && spans[n - 1].1 >= r.enter_ns
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

/// Orders one table's `rows`, which start at index `first` of all rows; `false` when it
/// stopped at `shadow.left` operations.
fn order_table(
    rows: &[Row],
    first: usize,
    snap: Option<&TableSnapshot>,
    shadow: &mut Shadow,
    out: &mut Ordered,
) -> bool {
    let longest = rows
        .iter()
        .map(|r| r.exit_ns - r.enter_ns)
        .max()
        .unwrap_or(0);
    let in_window = |r: &Row| snap.is_some_and(|s| r.enter_ns <= s.until_ns);
    let busy = Busy::new(rows);
    let ctx = Context {
        rows,
        first,
        longest,
        busy: busy.as_ref(),
    };
    let mut done = vec![false; rows.len()];
    let mut i = 0;
    while i < rows.len() {
        if shadow.work > shadow.left {
            return false;
        }
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
            let mut tried = 0u64;
            let partner = (i + 1..rows.len().min(i + 1 + PARTNERS))
                .take_while(|&j| key(&rows[j]) <= r.exit_ns.saturating_add(longest))
                .inspect(|_| tried += 1)
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
            shadow.work += tried;
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
    true
}

/// A table's operations, sorted, and what finds overlaps among them.
struct Context<'a> {
    rows: &'a [Row],
    /// The index of `rows[0]` among all rows.
    first: usize,
    /// The longest operation (entry to exit).
    longest: u64,
    busy: Option<&'a Busy>,
}

impl Context<'_> {
    /// Whether `rows[i]` overlaps a table-changing operation of another thread; the rows it
    /// looks at are added to `work`.
    fn overlapped(&self, i: usize, work: &mut u64) -> bool {
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
            .inspect(|_| *work += 1)
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
    if trace_op(r, false).is_none() {
        return;
    }
    let ambiguous = r.op == op::ALLOC && (in_window || ctx.overlapped(i, &mut shadow.work));
    out.ambiguous += u64::from(ambiguous);
    // A child ordered before its parent (an earlier table's address, reused) starts from
    // none: a copy for it would never be read.
    if r.op == op::FORK && r.arg > r.table {
        shadow.work += shadow.open.len() as u64;
        out.forked.insert(r.arg, shadow.open.clone());
    }
    shadow.last_ns = shadow.last_ns.max(key(r));
    out.steps.push(Step {
        time_ns: shadow.last_ns,
        what: (ctx.first + i) as u32 | if ambiguous { AMBIGUOUS } else { 0 },
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ENCODING, TraceTable, codec};
    use fdprof_replay::TraceOp;

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
                open: crate::trace::runs(open),
                cloexec: Vec::new(),
                next_fd: 0,
                max_fds: 64,
            }],
            notes: Vec::new(),
            data: codec::encode(rows),
        }
    }

    fn ops(o: &Ordered) -> Vec<(u32, String)> {
        o.events()
            .skip(1)
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
