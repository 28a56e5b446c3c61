//! Per-process figures of a system-wide recording (`-a`).

use serde::{Deserialize, Serialize};

use crate::{LockOperation, Scan, Syscall, Table};

/// One process: whose fd table was contended, whose fd syscalls ran. Rows have the shapes of
/// the whole-machine sections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    /// Empty when the process only waited and made no fd syscall (the kernel names a process
    /// at its first fd syscall).
    pub comm: String,
    /// Its cgroup, container and pid in its namespace, where known.
    #[serde(flatten)]
    pub identity: crate::Identity,
    /// Waits on this process's own `file_lock`, ns, and how many.
    pub file_lock_wait_ns: u64,
    pub file_lock_count: u64,
    /// Waits of this process's tasks on every lock (interrupt-time waits included), ns.
    pub wait_ns: u64,
    pub wait_count: u64,
    /// One row per (lock, operation) of this process's waits.
    pub by_lock_operation: Vec<LockOperation>,
    /// Its fd syscalls (counted, not timed: the latency histograms are empty).
    pub syscalls: Vec<Syscall>,
    /// All its fd syscalls.
    pub fd_syscalls: u64,
    /// fds its syscalls took with `alloc_fd`, and fds removed from its table (the sums of its
    /// syscall rows' `allocs` and `fds_closed`).
    #[serde(default)]
    pub allocations: u64,
    #[serde(default)]
    pub fds_closed: u64,
    /// Its allocator's scans (as the machine's `scan`, without the word counts) and its
    /// table's size (as `table`, without the first size); absent where it allocated nothing,
    /// and for recordings made before fdprof kept them per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<Scan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Table>,
    /// Bits its allocations scanned past `next_fd`, at least (each counted at its log2
    /// bucket's low end: no exact sum is kept): the scan work the top-processes table ranks by.
    #[serde(default)]
    pub scan_bits_at_least: u64,
    /// Its allocations that scanned a bitmap word (64 bits) or more past `next_fd`, as the
    /// long-scans rule counts them for the machine.
    #[serde(default)]
    pub far_scans: u64,
}

/// The processes a bounded report holds no row of, as one row: the daemon keeps at most so many
/// process rows per interval and per window (the first by `file_lock` wait and by fd syscalls)
/// and folds the rest into this. Their figures are in the report's own sections too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OtherProcesses {
    /// Process rows folded: over several intervals, a process folded in two of them counts in
    /// each.
    pub processes: u64,
    pub file_lock_wait_ns: u64,
    pub file_lock_count: u64,
    pub wait_ns: u64,
    pub wait_count: u64,
    /// Their fd syscalls (counted, not timed), and the sums of the rows.
    pub syscalls: Vec<Syscall>,
    pub fd_syscalls: u64,
    pub allocations: u64,
    pub fds_closed: u64,
}
