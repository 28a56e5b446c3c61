//! One budget for what a recording's claims cost once expanded. Each list of a recording is
//! bounded on its own while it is parsed ([`super::bounded`]), and the file's size bounds what
//! is parsed; but some numbers claim more than the file holds: a trace's rows (a few bytes each
//! deflated, a few hundred once ordered and replayed, and all-zero rows deflate a thousand to
//! one), a snapshot's table size and open fds (eight bytes of text for a table of 2^27 fds),
//! the tables a replay models, the frames a report folds. [`cost`] adds up what expanding each
//! would take, from the parsed recording before anything is expanded, and [`check`] refuses, in
//! one line naming the largest claim, a recording whose claims together come to more than
//! [`BUDGET`]. The reader checks the declared sizes ([`super::read`]); a replay checks again
//! once the rows are decoded and show which tables they grow, before it builds any.
//!
//! The costs are upper bounds of what fdprof's own structures take, and are added up although
//! no command expands everything at once (`replay` orders and models the trace, `report` folds
//! the stacks).
//!
//! Memory is not all a file can claim: a few bytes can ask for much work. So work has a budget
//! too ([`Work`], defined with the trace whose ordering counts it: [`crate::trace::work`]).

use std::collections::HashSet;
use std::fmt;

use fdprof_common::trace::op;

use super::bounded::TRACE_MAX_FDS;
use super::recording::{Frame, Recording};
use super::trace::{Trace, codec::Row, order::ORDER_BYTES_PER_ROW};
// The work budget, defined with the trace whose ordering counts it, beside the memory budget.
pub use super::trace::work::{WORK_FLOOR, WORK_PER_BYTE, Work, trace_bytes};

/// What a recording may take once expanded: 512 MiB. fdprof's commands run within 1 GiB of
/// address space (`fdprof/tests/it/reader_fuzz/`); besides the expansion that holds the program (~20 MB)
/// and the recording as parsed, at most ~260 MB (a 64 MiB file of empty stack frames: the text
/// and its parse, measured), which leaves a quarter of the space for the allocator's slack and
/// what is not counted here (names of tables and sites, small lists).
pub const BUDGET: u64 = 512 << 20;

/// A trace row, decoded and ordered for a replay: the row, its step and thread span, a flag
/// (`order::ORDER_BYTES_PER_ROW`). Sorting the rows (a stable sort's scratch is half the list),
/// exporting them (the rows and that scratch) and a report's search for close loops (the
/// closes alone) take less.
const ROW_BYTES: u64 = ORDER_BYTES_PER_ROW;
/// Inflating a trace: the decoder's 32 KiB window and state, and its two read buffers. Inflated
/// bytes are read as they come, never held.
const INFLATE_BYTES: u64 = 128 << 10;
/// An open fd the ordering tracks (a `HashMap<u32, bool>` entry: 8 bytes and a control byte,
/// at most 7/8 full, and the old table beside the new one while it grows).
const OPEN_FD_BYTES: u64 = 32;
/// A snapshot's bitmaps (open and close-on-exec), per 64 fds, held while a replay runs.
const SNAPSHOT_BYTES_PER_64_FDS: u64 = 16;
/// A model's table, per 64 fds: its open and close-on-exec words (16 bytes), fastalloc's
/// identity map (8), the summary words (under 1), and the old words beside the new while it
/// grows (a model runs at a time, so one model's tables count).
const MODEL_BYTES_PER_64_FDS: u64 = 40;
/// An fd fastalloc's model holds elsewhere than the traced one: an entry in each direction
/// (`HashMap<u32, u32>`) and one in the set of fds a collision made stale, each as for
/// [`OPEN_FD_BYTES`].
const MAPPED_FD_BYTES: u64 = 96;
/// A stack frame once a report or flamegraph is made of it, beyond its parse: `report --json
/// --top 0` of a 64 MiB recording of 2.4 million empty frames takes 396 MB more than reading
/// it, 164 bytes a frame.
const FRAME_BYTES: u64 = 170;
/// A frame's function and module names are copied into the folded stacks and the report's
/// stacks: 64 MiB of names take 69 to 139 MB more than reading them (measured).
const NAME_COPIES: u64 = 2;

/// What expanding a recording would take, claim by claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cost {
    pub parts: Vec<Part>,
}

/// One claim: what it is and the bytes expanding it would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub what: String,
    pub bytes: u64,
}

impl Cost {
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
    }
}

/// What expanding `rec` would take. `rows`, a trace's rows once decoded, show which tables its
/// replay grows and shares by forks; without them, the tables are taken at their snapshots.
pub fn cost(rec: &Recording, rows: Option<&[Row]>) -> Cost {
    let mut parts = Vec::new();
    let (mut sites, mut frames, mut names) = (0u64, 0u64, 0u64);
    let stacks = rec
        .contention
        .iter()
        .map(|s| [&s.kernel_stack, &s.user_stack])
        .chain(
            rec.cpu
                .iter()
                .flat_map(|c| c.samples.iter().map(|s| [&s.kernel_stack, &s.user_stack])),
        );
    for [kernel, user] in stacks {
        sites += 1;
        for f in kernel.iter().chain(user) {
            frames += 1;
            names += name_bytes(f);
        }
    }
    parts.push(Part {
        what: format!("the {frames} frames of its {sites} stacks"),
        bytes: frames
            .saturating_mul(FRAME_BYTES)
            .saturating_add(names.saturating_mul(NAME_COPIES)),
    });
    if let Some(trace) = &rec.trace {
        trace_parts(trace, rows, &mut parts);
    }
    Cost { parts }
}

fn name_bytes(f: &Frame) -> u64 {
    (f.function.len() + f.module.as_ref().map_or(0, String::len)) as u64
}

/// Refuses, in one line naming `name` and the largest claim, a recording whose claims come to
/// more than [`BUDGET`].
pub fn check(rec: &Recording, rows: Option<&[Row]>, name: &str) -> Result<(), String> {
    let cost = cost(rec, rows);
    let total = cost.total();
    if total <= BUDGET {
        return Ok(());
    }
    let largest = cost
        .parts
        .iter()
        .max_by_key(|p| p.bytes)
        .expect("a recording has stacks");
    Err(format!(
        "{name}: {} would take {} once expanded ({} for the whole recording), {} more than \
         the {} fdprof expands a recording to",
        largest.what,
        Bytes(largest.bytes),
        Bytes(total),
        Bytes(total - BUDGET),
        Bytes(BUDGET)
    ))
}

/// A trace's claims: its rows, its snapshots' bitmaps, the open fds the ordering tracks, and
/// the tables the models build.
fn trace_parts(trace: &Trace, rows: Option<&[Row]>, parts: &mut Vec<Part>) {
    parts.push(Part {
        what: format!("its fd trace's {} rows", trace.events),
        bytes: trace
            .events
            .saturating_mul(ROW_BYTES)
            .saturating_add(INFLATE_BYTES),
    });
    let tables = tables(trace, rows);
    let (mut snapshots, mut snapshot_fds) = (0u64, 0u64);
    let (mut open, mut mapped, mut largest, mut model_words) = (0u64, 0u64, 0u64, 0u64);
    for t in &tables {
        if t.snapshot_fds > 0 {
            snapshots += 1;
            snapshot_fds = snapshot_fds.saturating_add(t.snapshot_fds);
        }
        open = open.saturating_add(t.open);
        mapped = mapped.saturating_add(t.mapped);
        largest = largest.max(t.model_fds);
        model_words = model_words.saturating_add(t.model_fds / 64);
    }
    parts.push(Part {
        what: format!("the bitmaps of its fd trace's {snapshots} table snapshots"),
        bytes: snapshot_fds / 64 * SNAPSHOT_BYTES_PER_64_FDS,
    });
    parts.push(Part {
        what: format!("the {open} open fds of its fd trace's tables"),
        bytes: open.saturating_mul(OPEN_FD_BYTES),
    });
    parts.push(Part {
        what: format!(
            "the {} fd tables a replay of its trace models (up to {largest} fds each)",
            tables.len()
        ),
        bytes: model_words
            .saturating_mul(MODEL_BYTES_PER_64_FDS)
            .saturating_add(mapped.saturating_mul(MAPPED_FD_BYTES)),
    });
}

/// What one table of a trace costs a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TableCost {
    /// Its snapshot's size, in fds (0: none).
    snapshot_fds: u64,
    /// The most fds the ordering may hold open for it.
    open: u64,
    /// The size its models may grow to, in fds.
    model_fds: u64,
    /// The most fds fastalloc may map elsewhere for it.
    mapped: u64,
}

/// What a table's snapshot and rows claim, before forks are followed.
#[derive(Debug, Clone, Copy, Default)]
struct Own {
    snapshot_fds: u64,
    /// The fds its snapshot opens (open and close-on-exec runs, counted apart).
    snapshot_open: u64,
    /// Allocations and dup2s among its rows.
    opened: u64,
    /// One past the highest fd its rows open or start a search from.
    reach: u64,
}

/// Each table's cost. A fork's child starts as a copy of its parent, so tables joined by forks
/// are taken together: each may hold the open fds of all of them, up to the highest.
fn tables(trace: &Trace, rows: Option<&[Row]>) -> Vec<TableCost> {
    let n = trace.tables.len();
    let mut own = vec![Own::default(); n];
    let mut seen = HashSet::new();
    for s in &trace.snapshots {
        // A replay starts a table from its first snapshot; one of an unknown table is refused.
        if (s.table as usize) < n && seen.insert(s.table) {
            let runs = s.open.iter().chain(&s.cloexec);
            let fds = runs.fold(0u64, |sum, &[_, count]| sum.saturating_add(count.into()));
            let o = &mut own[s.table as usize];
            o.snapshot_fds = u64::from(s.max_fds).div_ceil(64) * 64;
            o.snapshot_open = fds.min(o.snapshot_fds);
        }
    }
    let mut joined = Joined::new(n);
    for r in rows.unwrap_or_default() {
        let Some(o) = own.get_mut(r.table as usize) else {
            continue;
        };
        let fd = u64::from(r.fd as u32);
        match r.op {
            op::ALLOC if r.fd >= 0 => {
                o.opened += 1;
                o.reach = o.reach.max(fd + 1).max(u64::from(r.arg) + 1);
            }
            op::ALLOC => o.reach = o.reach.max(u64::from(r.arg) + 1),
            op::INSTALL => {
                o.opened += 1;
                o.reach = o.reach.max(fd + 1);
            }
            op::FORK if (r.arg as usize) < n => joined.join(r.table as usize, r.arg as usize),
            _ => {}
        }
    }
    // Per group of tables joined by forks: the fds opened in all, by rows alone, and one past
    // the highest.
    let mut group = vec![(0u64, 0u64, 0u64); n];
    for (t, o) in own.iter().enumerate() {
        let (all, by_rows, reach) = &mut group[joined.root(t)];
        *all = all.saturating_add(o.snapshot_open).saturating_add(o.opened);
        *by_rows = by_rows.saturating_add(o.opened);
        *reach = (*reach).max(o.reach).max(o.snapshot_fds);
    }
    (0..n)
        .map(|t| {
            let (all, by_rows, reach) = group[joined.root(t)];
            // Every fd a table of the group holds is below the group's highest.
            let model_fds = reach.max(64).next_power_of_two();
            TableCost {
                snapshot_fds: own[t].snapshot_fds,
                open: all.min(reach),
                model_fds: model_fds.min(u64::from(TRACE_MAX_FDS)),
                // Fastalloc maps the fds its rows open elsewhere (a snapshot's stay).
                mapped: by_rows.min(reach),
            }
        })
        .collect()
}

/// Tables joined by forks (union-find).
struct Joined {
    parent: Vec<usize>,
}

impl Joined {
    fn new(n: usize) -> Joined {
        Joined {
            parent: (0..n).collect(),
        }
    }

    fn root(&mut self, mut t: usize) -> usize {
        while self.parent[t] != t {
            self.parent[t] = self.parent[self.parent[t]];
            t = self.parent[t];
        }
        t
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        self.parent[a.max(b)] = a.min(b);
    }
}

/// A size in bytes for people: KiB, MiB or GiB, with one decimal unless whole.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (unit, name) = match self.0 {
            b if b >= 1 << 30 => (1u64 << 30, "GiB"),
            b if b >= 1 << 20 => (1 << 20, "MiB"),
            _ => (1 << 10, "KiB"),
        };
        if self.0.is_multiple_of(unit) {
            write!(f, "{} {name}", self.0 / unit)
        } else {
            write!(f, "{:.1} {name}", self.0 as f64 / unit as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ENCODING, TableSnapshot, TraceTable, codec};

    fn snapshot(table: u32, open: u32, max_fds: u32) -> TableSnapshot {
        TableSnapshot {
            table,
            from_ns: 0,
            until_ns: 0,
            open: vec![[0, open]],
            cloexec: Vec::new(),
            next_fd: open,
            max_fds,
        }
    }

    fn traced(tables: u32, snapshots: Vec<TableSnapshot>, rows: &[Row]) -> Recording {
        let mut rec = crate::testdata::recording();
        rec.trace = Some(Trace {
            encoding: ENCODING.into(),
            events: rows.len() as u64,
            limit: 5_000_000,
            over_limit: 0,
            lost: 0,
            tables: (0..tables)
                .map(|pid| TraceTable { pid, addr: None })
                .collect(),
            snapshots,
            notes: Vec::new(),
            data: codec::encode(rows),
        });
        rec
    }

    fn part(cost: &Cost, what: &str) -> u64 {
        let p = cost.parts.iter().find(|p| p.what.contains(what));
        p.unwrap_or_else(|| panic!("no {what} in {cost:?}")).bytes
    }

    #[test]
    fn a_recording_without_a_trace_costs_its_stacks() {
        let rec = crate::testdata::recording();
        let cost = cost(&rec, None);
        assert_eq!(cost.parts.len(), 1);
        assert!(cost.total() < 1 << 20, "{cost:?}");
        assert_eq!(check(&rec, None, "r"), Ok(()));
    }

    #[test]
    fn a_snapshot_of_every_fd_open_is_refused_and_one_of_none_is_not() {
        let all = traced(1, vec![snapshot(0, (1 << 27) - 1, 1 << 27)], &[]);
        let cost = cost(&all, None);
        assert_eq!(part(&cost, "open fds"), ((1 << 27) - 1) * OPEN_FD_BYTES);
        assert_eq!(part(&cost, "bitmaps"), 32 << 20);
        assert_eq!(part(&cost, "models"), 80 << 20);
        let msg = check(&all, None, "f.data").unwrap_err();
        assert!(
            msg.starts_with(
                "f.data: the 134217727 open fds of its fd trace's tables would take 4.0 GiB \
                 once expanded"
            ),
            "{msg}"
        );
        assert!(msg.ends_with("more than the 512 MiB fdprof expands a recording to"));
        let none = traced(1, vec![snapshot(0, 0, 1 << 27)], &[]);
        assert_eq!(check(&none, None, "f.data"), Ok(()));
        // Five of those together are over (112 MiB each).
        let five = traced(5, (0..5).map(|t| snapshot(t, 0, 1 << 27)).collect(), &[]);
        assert!(check(&five, None, "f.data").is_err());
        // A table's second snapshot is not replayed: not counted.
        let twice = traced(1, vec![snapshot(0, 0, 1 << 27); 4], &[]);
        assert_eq!(check(&twice, None, "f.data"), Ok(()));
    }

    fn row(table: u32, op: u8, fd: i32, arg: u32) -> Row {
        Row {
            table,
            op,
            fd,
            arg,
            ..Row::default()
        }
    }

    #[test]
    fn rows_grow_the_tables_they_open_fds_in_and_forks_share_them() {
        let rows = [
            row(0, op::INSTALL, 1 << 20, 0),
            row(0, op::FORK, 42, 1),
            row(1, op::ALLOC, 5, 0),
            row(2, op::ALLOC, -24, 3000),
        ];
        let rec = traced(3, Vec::new(), &rows);
        let before = cost(&rec, None);
        assert_eq!(part(&before, "models"), 3 * 40);
        let after = cost(&rec, Some(&rows));
        // Tables 0 and 1 may grow to 2^21 fds, table 2 to 4096.
        assert_eq!(
            part(&after, "models"),
            2 * (1 << 21) / 64 * 40 + 4096 / 64 * 40 + 2 * 2 * MAPPED_FD_BYTES
        );
        assert_eq!(part(&after, "open fds"), 2 * 2 * OPEN_FD_BYTES);
        assert_eq!(part(&after, "rows"), 4 * ROW_BYTES + INFLATE_BYTES);
    }
}
