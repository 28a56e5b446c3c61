//! The fd-table trace of a recording (`record --trace`): every operation of the target on its
//! tables, as compact rows ([`codec`]), the tables renumbered so no kernel address is kept
//! unless `--raw-addrs`, and each table's state at attach. [`order`] turns it into the
//! `fdprof_replay` events a replay runs, within the [`work`] the trace is worth.

pub mod codec;
pub mod order;
pub mod ordered;
pub mod work;

use serde::{Deserialize, Serialize};

use super::bounded;
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
