//! The trace a replay consumes: fd-table operations in the order the kernel applied them to
//! each table. Plain data, for the recorder to fill.

/// Which `files_struct` an event applies to (its kernel address, or any stable id).
pub type TableId = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub time_ns: u64,
    pub tid: u32,
    pub table: TableId,
    pub op: TraceOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// `alloc_fd(start, flags)` and what it returned (an fd, or the errno).
    Alloc {
        start: u32,
        cloexec: bool,
        fd: Result<u32, i32>,
        /// The recorder could not order this alloc against a concurrent close (tracepoint
        /// mode): a differing prediction is not counted as a model mismatch.
        ambiguous: bool,
    },
    /// An fd's open bit cleared: close, close_range, exec, or a failed open giving its fd back.
    Release { fd: u32 },
    /// dup2/dup3 (or `replace_fd`) installing at exactly `fd`.
    InstallAt { fd: u32, cloexec: bool },
    /// close_range(lo, hi, flags). `unshare` is the new table's id when CLOSE_RANGE_UNSHARE
    /// copied a shared table (the range then applies to the copy).
    CloseRange {
        lo: u32,
        hi: u32,
        cloexec_only: bool,
        unshare: Option<TableId>,
    },
    /// fork without CLONE_FILES: the child gets a copy of this table.
    Fork { child: TableId },
    /// exec's close-on-exec pass. `unshare` is the new table's id when exec copied a shared
    /// table first.
    Exec { unshare: Option<TableId> },
    /// The kernel grew this table to `max_fds`.
    Expand { max_fds: u32 },
    /// The table's whole state, at attach or after exec; replaces what a model had.
    Snapshot(Box<Snapshot>),
}

/// A table's state as the kernel holds it (boxed in the event: most events are small).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The open bitmap, `max_fds / 64` words.
    pub open: Vec<u64>,
    /// The close-on-exec bitmap, `max_fds / 64` words.
    pub cloexec: Vec<u64>,
    pub next_fd: u32,
    pub max_fds: u32,
}

impl TraceEvent {
    pub fn new(table: TableId, op: TraceOp) -> TraceEvent {
        TraceEvent {
            time_ns: 0,
            tid: 0,
            table,
            op,
        }
    }
}
