//! The fd-table trace of a recording (`record --trace`): every operation of the target on its
//! tables, as compact rows ([`codec`]), the tables renumbered so no kernel address is kept
//! unless `--raw-addrs`, and each table's state at attach. [`order`] turns it into the
//! `fdprof_replay` events a replay runs.

pub mod codec;
pub mod order;
pub mod ordered;

use std::collections::HashMap;

use fdprof_common::trace::{TraceRecord, op};
use serde::{Deserialize, Serialize};

use super::bounded;
use crate::collect::trace::{Drained, ProcTable};
use codec::Row;

/// The rows' encoding, as the `encoding` field names it.
pub const ENCODING: &str = "varint-rows-deflate-base64-1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    #[serde(deserialize_with = "bounded::name")]
    pub encoding: String,
    /// Operations kept (rows in `data`).
    #[serde(deserialize_with = "bounded::trace_rows")]
    pub events: u64,
    /// `record --trace-limit`, and the operations past it, not kept.
    pub limit: u64,
    pub over_limit: u64,
    /// Operations the kernel could not send (a full ring buffer) or read: the trace has gaps.
    pub lost: u64,
    /// The tables, by the index the rows use.
    #[serde(deserialize_with = "bounded::trace_tables")]
    pub tables: Vec<TraceTable>,
    /// Each table's state when tracing began, as `/proc/PID/fd` showed it.
    #[serde(deserialize_with = "bounded::trace_tables")]
    pub snapshots: Vec<TableSnapshot>,
    /// What the probes could not see.
    #[serde(deserialize_with = "bounded::notes")]
    pub notes: Vec<String>,
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTable {
    /// The process whose thread first used it.
    pub pid: u32,
    /// The `files_struct` address (`--raw-addrs` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    pub table: u32,
    /// The `/proc` read began and ended (ns on the rows' clock): operations that ended before
    /// `from_ns` are in it, those that began after `until_ns` are not.
    pub from_ns: u64,
    pub until_ns: u64,
    /// Open fds as runs `[first, count]`, and the close-on-exec ones.
    #[serde(deserialize_with = "bounded::trace_runs")]
    pub open: Vec<[u32; 2]>,
    #[serde(deserialize_with = "bounded::trace_runs")]
    pub cloexec: Vec<[u32; 2]>,
    /// The lowest free fd (`/proc` does not show `next_fd`; every fd below it is open).
    pub next_fd: u32,
    /// The kernel's `max_fds` read by the first operation's probe, or else the smallest
    /// table the kernel makes for the highest open fd.
    #[serde(deserialize_with = "bounded::trace_max_fds")]
    pub max_fds: u32,
}

/// What the recording notes for a trace, in every mode: it is taken at the fd syscalls' entries
/// and exits (the raw syscall tracepoints, or in the direct modes the syscalls' own functions).
pub const SYSCALL_TRACE_NOTE: &str = "fd trace from the fd syscalls' entries and exits: an fd \
taken and given back inside a failed syscall (open of a missing file) is not seen, and an alloc \
that overlaps another thread's operation on the same table cannot be ordered against it \
(replayed as ambiguous) unless both carry their moment inside file_lock (the direct modes' \
locked_sections probes); a fork's child is followed from its fork, its table a copy of its \
parent's as the fork returned (another thread of the parent may change the parent's in \
between); CLOSE_RANGE_UNSHARE and an exec unsharing its table are not traced";

impl Trace {
    /// The trace of `drained`, starting from `tables`, on a clock starting at `origin_ns`
    /// (CLOCK_MONOTONIC) or at the first operation if earlier.
    pub fn build(
        drained: &Drained,
        tables: &[ProcTable],
        origin_ns: u64,
        limit: u64,
        lost: u64,
        raw_addrs: bool,
    ) -> Trace {
        let origin_ns = drained
            .records
            .iter()
            .flat_map(|r| [r.enter_ns, r.exit_ns])
            .filter(|&t| t != 0)
            .fold(origin_ns, u64::min);
        let rel = |t: u64| t.saturating_sub(origin_ns);
        let mut index: HashMap<u64, u32> = HashMap::new();
        let mut list: Vec<TraceTable> = Vec::new();
        let mut id_of = |addr: u64, pid: u32, list: &mut Vec<TraceTable>| -> u32 {
            *index.entry(addr).or_insert_with(|| {
                list.push(TraceTable {
                    pid,
                    addr: raw_addrs.then_some(addr),
                });
                list.len() as u32 - 1
            })
        };
        let rows: Vec<Row> = drained
            .records
            .iter()
            .map(|r| {
                let mut row = row(r, id_of(r.table, r.pid, &mut list), rel);
                // A fork names its child's table, a new one the child's pid first used.
                if r.op == op::FORK {
                    row.arg = id_of(r.child_table, r.fd as u32, &mut list);
                }
                row
            })
            .collect();
        let snapshots = tables
            .iter()
            .map(|t| {
                // The table of the snapshot's process: the first one its threads used.
                let table = match rows
                    .iter()
                    .position(|r| list[r.table as usize].pid == t.pid)
                {
                    Some(i) => rows[i].table,
                    None => {
                        list.push(TraceTable {
                            pid: t.pid,
                            addr: None,
                        });
                        list.len() as u32 - 1
                    }
                };
                let seen_max = rows
                    .iter()
                    .find(|r| r.table == table && r.max_fds != 0)
                    .map(|r| r.max_fds);
                snapshot(t, table, seen_max, rel)
            })
            .collect();
        Trace {
            encoding: ENCODING.into(),
            events: rows.len() as u64,
            limit,
            over_limit: drained.over_limit,
            lost,
            tables: list,
            snapshots,
            notes: vec![SYSCALL_TRACE_NOTE.into()],
            data: codec::encode(&rows),
        }
    }

    /// The rows, checked.
    pub fn rows(&self) -> Result<Vec<Row>, String> {
        let tables = self.checked_tables()?;
        codec::decode(&self.data, self.events, tables)
    }

    /// The rows, checked, one at a time as they are decoded (nothing is held but a buffer).
    pub fn stream(&self) -> Result<codec::Rows<'_>, String> {
        let tables = self.checked_tables()?;
        codec::Rows::new(&self.data, self.events, tables)
    }

    /// The number of tables, once the encoding is known.
    fn checked_tables(&self) -> Result<u32, String> {
        if self.encoding != ENCODING {
            return Err(format!("unknown trace encoding {:?}", self.encoding));
        }
        u32::try_from(self.tables.len()).map_err(|_| "too many tables".into())
    }

    /// Whether operations are missing (a full ring buffer, or the limit).
    pub fn has_gaps(&self) -> bool {
        self.lost > 0 || self.over_limit > 0
    }
}

fn row(r: &TraceRecord, table: u32, rel: impl Fn(u64) -> u64) -> Row {
    let exit_ns = rel(r.exit_ns);
    Row {
        exit_ns,
        enter_ns: if r.enter_ns == 0 {
            exit_ns
        } else {
            rel(r.enter_ns).min(exit_ns)
        },
        tid: r.tid,
        table,
        op: r.op,
        flags: r.flags,
        syscall: r.syscall,
        fd: r.fd,
        arg: r.arg,
        next_fd: r.next_fd,
        max_fds: if r.op == op::EXPAND { 0 } else { r.max_fds },
    }
}

fn snapshot(
    t: &ProcTable,
    table: u32,
    seen_max: Option<u32>,
    rel: impl Fn(u64) -> u64,
) -> TableSnapshot {
    let open: Vec<u32> = t.fds.iter().map(|&(fd, _)| fd).collect();
    let cloexec: Vec<u32> = t.fds.iter().filter(|f| f.1).map(|&(fd, _)| fd).collect();
    let next_fd = (0..)
        .zip(&open)
        .find(|(i, fd)| i != *fd)
        .map_or(open.len() as u32, |(i, _)| i);
    let highest = open.last().copied().unwrap_or(0);
    TableSnapshot {
        table,
        from_ns: rel(t.read_from_ns),
        until_ns: rel(t.read_until_ns),
        open: runs(&open),
        cloexec: runs(&cloexec),
        next_fd,
        max_fds: seen_max.unwrap_or_else(|| kernel_table_size(highest)),
    }
}

/// The `max_fds` of a table the kernel sized for `fd`: 64, else a power of two of at least 128
/// above it (`alloc_fdtable` rounds to pages of pointers).
pub fn kernel_table_size(fd: u32) -> u32 {
    if fd < 64 {
        64
    } else {
        (fd + 1).next_power_of_two().max(128)
    }
}

/// Ascending fds as runs `[first, count]`.
pub fn runs(fds: &[u32]) -> Vec<[u32; 2]> {
    let mut out: Vec<[u32; 2]> = Vec::new();
    for &fd in fds {
        match out.last_mut() {
            Some([first, count]) if *first + *count == fd => *count += 1,
            _ => out.push([fd, 1]),
        }
    }
    out
}
