//! Rates over time: a recording made with `record --interval`, one row per interval.

use serde::{Deserialize, Serialize};

/// Per-interval rates of a recording's series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// The interval the recording was made with, ns.
    pub interval_ns: u64,
    /// One row per interval, oldest first (the last one may be partial).
    pub rows: Vec<RateRow>,
}

/// What happened per second of one interval. A rate is `null` for an interval of no length.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RateRow {
    /// 0 for the first interval.
    pub index: u64,
    /// Start since the probes were attached, ns.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Waits on the target's `file_lock` in `alloc_fd` per second, and time spent waiting there
    /// per second (ns/s: 1e9 is one thread waiting all along).
    pub alloc_contentions_per_s: Option<f64>,
    pub alloc_wait_ns_per_s: Option<f64>,
    /// The same in close.
    pub close_contentions_per_s: Option<f64>,
    pub close_wait_ns_per_s: Option<f64>,
    /// The same over every `file_lock` wait (all operations).
    pub file_lock_contentions_per_s: Option<f64>,
    pub file_lock_wait_ns_per_s: Option<f64>,
    /// Traced fd syscalls per second, all together; `null` also with `--lock-only`.
    pub fd_syscalls_per_s: Option<f64>,
    /// `alloc_fd` allocations per second; `null` also with `--lock-only`.
    pub allocations_per_s: Option<f64>,
    /// Allocations that took `files->next_fd` as it was, as a share of all (0..=1); `null`
    /// when there were none.
    pub next_fd_hit_rate: Option<f64>,
    /// Syscalls during which the fd table grew, in the interval.
    pub expansions: u64,
    /// The largest `max_fds` seen so far.
    pub max_fds: u64,
    /// Events lost in the interval.
    pub drops: u64,
}
