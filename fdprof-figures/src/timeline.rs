//! The daemon's kept intervals as points in time: what the page's timeline draws, one point
//! an interval, oldest first.

use serde::{Deserialize, Serialize};

/// A target's (or every target's) kept intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The target asked for; none for every target together.
    pub target: Option<String>,
    pub points: Vec<TimelinePoint>,
}

/// One kept interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Its start, Unix time in ms (what `from` and `to` take).
    pub start_unix_ms: u64,
    pub duration_ms: u64,
    /// Waits on the target's `file_lock`, and their time.
    pub file_lock_waits: u64,
    pub file_lock_wait_ns: u64,
    /// That time as a share of one CPU over the interval (1.0: a CPU spent it all waiting).
    pub file_lock_wait_cpus: Option<f64>,
    /// fd syscalls made, and per second of the time they were traced; `None` where they were
    /// not traced at all (the daemon at rest).
    pub fd_syscalls: u64,
    pub fd_syscalls_per_s: Option<f64>,
    /// Time of the interval traced in full (fd syscalls, scans); all of it under `--tier full`.
    pub traced_in_full_ns: u64,
}
