//! Lock waits: per lock class and fd-table operation, per lock class, and the direct-probe
//! figures per operation.

use fdprof_common::fnops::Operation;
use serde::{Deserialize, Serialize};

use crate::{Histogram, Lock};

/// Every lock wait of the recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// Waits on all locks.
    pub count: u64,
    /// Wait on all locks, ns.
    pub total_wait_ns: u64,
    /// Wait on the target's `file_lock`, ns.
    pub file_lock_wait_ns: u64,
    /// Waits on the target's `file_lock`.
    pub file_lock_count: u64,
    /// One row per lock class: `file_lock` first, then by total wait, then by name.
    pub by_lock: Vec<LockTotal>,
    /// One row per (lock, operation): locks in `by_lock` order; within a lock, operations by
    /// total wait (ties in the order alloc, close, expand, dup2, close_range, exec, fork, irq, softirq,
    /// other).
    pub by_lock_operation: Vec<LockOperation>,
    /// The most probe time one measured wait can contain, ns: the mean run times of the lock
    /// tracepoints' programs together (`contention_begin` reads the clock first, so all of its
    /// run after that is inside the wait, and `contention_end` reads it once it has found the
    /// wait), less the stack walks, which are timed and left out of the wait. `null` where run
    /// times were not measured.
    #[serde(default)]
    pub probe_ns_per_wait: Option<f64>,
    /// Waits in a hardware interrupt handler (operation `irq`), whatever the task beneath it
    /// was doing: the interrupt's waits, not the fd table's.
    #[serde(default)]
    pub irq: WaitShare,
    /// Waits in softirq processing (operation `softirq`).
    #[serde(default)]
    pub softirq: WaitShare,
    /// Waits whose kernel stack holds one of fdprof's own BPF programs (an interrupt landed
    /// while it ran): fdprof itself was part of what waited.
    #[serde(default)]
    pub fdprof_on_stack: WaitShare,
    /// What saw the waits. Where nothing could (`unavailable`), every figure above is absent
    /// rather than measured as 0.
    #[serde(default)]
    pub source: WaitSource,
}

/// What sees the lock waits of a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitSource {
    /// `lock:contention_begin/end` (5.19+): every lock's waits, with stacks.
    #[default]
    LockTracepoints,
    /// The spinlock slow-path probe alone (no lock tracepoints): every spinlock's waits, with
    /// stacks; no sleeping lock's (mutex, rwsem).
    SlowPath,
    /// Neither: a kernel without the lock tracepoints, in tracepoint mode.
    Unavailable,
}

impl WaitSource {
    /// The name in JSON and in metrics' labels.
    pub fn name(self) -> &'static str {
        match self {
            WaitSource::LockTracepoints => "lock_tracepoints",
            WaitSource::SlowPath => "slow_path",
            WaitSource::Unavailable => "unavailable",
        }
    }

    /// Why the lock waits are what they are, in one line, where they are not every lock's.
    pub fn limit(self) -> Option<&'static str> {
        match self {
            WaitSource::LockTracepoints => None,
            WaitSource::SlowPath => Some(
                "spinlock waits only, from the spinlock slow-path probe (no mutex or rwsem \
                 waits, no slow-wait events): this kernel has no lock:contention_begin/end (5.19+)",
            ),
            WaitSource::Unavailable => Some(
                "lock waits unavailable on this kernel in this mode: no lock:contention_begin/end \
                 (5.19+), and the spinlock slow-path probe needs fentry or kprobe",
            ),
        }
    }
}

/// Some of the waits: how many, how long, and their share of the wait on all locks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitShare {
    pub count: u64,
    pub total_wait_ns: u64,
    /// Of the wait on all locks, 0..=1.
    pub share_of_all: Option<f64>,
}

/// Waits on one lock class, all operations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LockTotal {
    /// The lock: `lock`, `lock_kind` and `lock_named_by` in JSON.
    #[serde(flatten)]
    pub lock: Lock,
    pub count: u64,
    pub total_wait_ns: u64,
    /// The longest single wait (exact), ns.
    pub max_wait_ns: u64,
    /// Of the wait on all locks, 0..=1.
    pub share_of_all: Option<f64>,
}

/// Waits on one lock class in one fd-table operation, all stacks merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LockOperation {
    #[serde(flatten)]
    pub lock: Lock,
    /// `alloc`, `close`, `expand`, `dup2`, `close_range`, `exec`, `fork`, `irq`, `softirq` or
    /// `other`.
    pub operation: Operation,
    /// Contention sites (distinct stack pairs) merged into this row.
    pub sites: usize,
    pub count: u64,
    pub total_wait_ns: u64,
    pub avg_wait_ns: Option<f64>,
    /// Quantiles: the upper bound of the log2 bucket holding them (capped at the max), ns.
    pub p50_wait_ns: Option<u64>,
    pub p99_wait_ns: Option<u64>,
    pub p999_wait_ns: Option<u64>,
    /// Exact, ns.
    pub max_wait_ns: u64,
    /// Of the wait on this lock class, 0..=1.
    pub share_of_lock: Option<f64>,
    /// Of the wait on all locks, 0..=1.
    pub share_of_all: Option<f64>,
    /// The wait histogram (ns).
    pub wait: Histogram,
}

/// How the contention stacks were obtained: walked, or reused from the same site (thread,
/// syscall, user return point, lock) walked before. All zero in recordings made before fdprof
/// reused stacks: then every one was walked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackWalks {
    pub walked: u64,
    pub reused: u64,
    /// A site's stacks are walked again at every this many contentions there.
    pub refresh_every: u32,
    /// The user stacks unwound from call-frame information.
    #[serde(default)]
    pub user: UserWalks,
}

/// The user stacks' walks from copies of the stack and call-frame information: each copy is
/// walked once, whole (to the thread's start) or cut short, ending in a `[truncated: …]` frame
/// that says why. Zero in recordings made before fdprof unwound copies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserWalks {
    pub copies: u64,
    pub whole: u64,
    pub truncated: std::collections::BTreeMap<fdprof_common::copies::WalkEnd, u64>,
    /// Call-frame information held by the unwinder at the end: bytes, and the files they are
    /// of.
    pub held_bytes: u64,
    pub held_files: u64,
}

impl UserWalks {
    pub fn add(&mut self, other: &UserWalks) {
        self.copies = self.copies.saturating_add(other.copies);
        self.whole = self.whole.saturating_add(other.whole);
        for (end, n) in &other.truncated {
            let t = self.truncated.entry(*end).or_default();
            *t = t.saturating_add(*n);
        }
        self.held_bytes = self.held_bytes.max(other.held_bytes);
        self.held_files = self.held_files.max(other.held_files);
    }
}

/// An fd-table operation seen by direct probes (fentry/kprobe modes) on its function and on
/// the spinlock slow path. Operation `other` holds slow-path waits outside any probed call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub operation: Operation,
    pub calls: u64,
    /// `expand_files` calls that grew the table.
    pub expanded: u64,
    /// Entry to exit of the function (ns).
    pub duration: Histogram,
    /// The locked section: duration minus the slow-path wait inside it (ns).
    pub hold: Histogram,
    /// Waits for the target's `file_lock` seen on the qspinlock slow path (ns).
    pub slowpath_wait: Histogram,
    /// Entries and exits that did not pair up.
    pub unpaired: u64,
    /// The same operation's `file_lock` waits as the contention tracepoint saw them, to set
    /// beside `slowpath_wait`.
    pub tracepoint_waits: u64,
    pub tracepoint_wait_ns: u64,
}
