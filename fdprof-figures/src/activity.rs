//! fd-table activity: the lowest-free-fd scan, the traced syscalls, the table's growth.

use serde::{Deserialize, Serialize};

use crate::{Histogram, LatencyLevel};

/// The search in `alloc_fd` for the lowest free fd, from `next_fd`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    pub allocations: u64,
    /// Allocations that got `next_fd` itself.
    pub next_fd_hits: u64,
    /// `next_fd_hits` of `allocations`, 0..=1.
    pub next_fd_hit_rate: Option<f64>,
    /// Allocations that returned an fd below the origin read at entry (other threads at work).
    pub below_origin: u64,
    /// Where the origin was read and how exact it is; empty when not recorded.
    pub origin: String,
    /// Distance past the origin (bits).
    pub bits: Histogram,
    /// `open_fds` words read (words).
    pub open_fds_words: Histogram,
    /// `full_fds_bits` words read (words).
    pub full_fds_words: Histogram,
}

/// One traced syscall.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Syscall {
    pub name: String,
    pub calls: u64,
    pub errors: u64,
    pub fds_created: u64,
    pub fds_closed: u64,
    /// fds taken with `alloc_fd` (not dup2/dup3).
    pub allocs: u64,
    pub latency: SyscallLatency,
}

/// A syscall's latency histogram (ns) and what it spans.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyscallLatency {
    #[serde(flatten)]
    pub histogram: Histogram,
    pub level: LatencyLevel,
}

/// The fd table's size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    /// `fdt->max_fds` at the first traced syscall; 0 when not observed.
    pub max_fds_first: u64,
    /// The largest `fdt->max_fds` seen.
    pub max_fds_max: u64,
    /// Syscalls during which the table grew.
    pub expansions: u64,
}
