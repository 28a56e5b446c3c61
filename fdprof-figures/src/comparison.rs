//! Two ranges of the daemon's kept intervals side by side: what changed most, by section
//! (lock waits by lock and operation, fd syscalls, the allocator's scan), each figure as the
//! report of its range has it.

use serde::{Deserialize, Serialize};

/// A range of kept intervals, Unix time in ms, and the time its intervals cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeRange {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
    /// The intervals' time, which may run past the range at both ends.
    pub duration_ns: u64,
}

/// `base` against `new`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeComparison {
    pub base: TimeRange,
    pub new: TimeRange,
    /// Lock waits first, then fd syscalls, then the scan; within each, the target's `file_lock`
    /// before other locks, then the largest change first. Figures that are 0 in both are left
    /// out.
    pub rows: Vec<Change>,
}

/// What a row compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// `total_wait_ns` of a lock and operation (`by_lock_operation`).
    LockWait,
    /// `count` of a lock and operation.
    LockWaits,
    /// `calls` of a syscall.
    Syscall,
    /// The scan's `allocations`, `next_fd_hits` and `below_origin`.
    Scan,
}

/// One figure in both ranges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub section: Section,
    /// `file_lock alloc`, `socket`, `next_fd_hits`.
    pub name: String,
    pub base: u64,
    pub new: u64,
    /// `new - base`.
    pub change: i64,
    /// The change against the larger of the two, -1..=1.
    pub relative: f64,
    /// Per second of each range's time, for ranges of different lengths.
    pub base_per_s: Option<f64>,
    pub new_per_s: Option<f64>,
}
