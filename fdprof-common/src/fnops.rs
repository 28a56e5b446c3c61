//! Direct probes on the fd-table functions (fentry/fexit or kprobe/kretprobe) and on the
//! qspinlock slow path: per-operation counts and histograms, in per-CPU arrays.

use crate::HIST_SLOTS;

/// An fd-table operation: what a waiter was doing, and what a direct probe measured. In report
/// order (`Ord`), `Other` last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Operation {
    Alloc,
    Close,
    Expand,
    Dup2,
    CloseRange,
    /// Closing the close-on-exec fds at exec.
    Exec,
    /// Copying the table at fork.
    Fork,
    /// In a hardware interrupt handler that landed on the waiting task, whatever the task was
    /// doing beneath it.
    Irq,
    /// In softirq processing (on interrupt exit, or where bottom halves were re-enabled),
    /// whatever the task was doing beneath it.
    Softirq,
    /// Outside any fd-table operation.
    #[default]
    Other,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Operation::Alloc,
        Operation::Close,
        Operation::Expand,
        Operation::Dup2,
        Operation::CloseRange,
        Operation::Exec,
        Operation::Fork,
        Operation::Irq,
        Operation::Softirq,
        Operation::Other,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Operation::Alloc => "alloc",
            Operation::Close => "close",
            Operation::Expand => "expand",
            Operation::Dup2 => "dup2",
            Operation::CloseRange => "close_range",
            Operation::Exec => "exec",
            Operation::Fork => "fork",
            Operation::Irq => "irq",
            Operation::Softirq => "softirq",
            Operation::Other => "other",
        }
    }

    /// Whether the wait happened in interrupt context rather than in the task's own work.
    pub const fn is_interrupt(self) -> bool {
        matches!(self, Operation::Irq | Operation::Softirq)
    }
}

/// Op ids of the operations probed directly: the index in the maps below.
pub mod op {
    use super::Operation;
    pub const ALLOC: u32 = 0;
    pub const CLOSE: u32 = 1;
    pub const EXPAND: u32 = 2;
    pub const DUP2: u32 = 3;
    pub const CLOSE_RANGE: u32 = 4;
    pub const COUNT: u32 = 5;
    /// Slow-path waits outside any probed operation.
    pub const NONE: u32 = COUNT;
    /// The operation of each op id, `NONE` included.
    pub const OPERATIONS: [Operation; COUNT as usize + 1] = [
        Operation::Alloc,
        Operation::Close,
        Operation::Expand,
        Operation::Dup2,
        Operation::CloseRange,
        Operation::Other,
    ];
}

/// Per-op counters: `FN_COUNTERS[op * counter::COUNT + counter]` (ops include `op::NONE`).
pub mod counter {
    pub const CALLS: u32 = 0;
    /// `expand_files` calls that grew the table (returned 1).
    pub const EXPANDED: u32 = 1;
    /// Waits for the target's `file_lock` seen on the spinlock slow path.
    pub const SLOWPATH_WAITS: u32 = 2;
    pub const SLOWPATH_WAIT_NS: u32 = 3;
    pub const SLOWPATH_WAIT_MAX: u32 = 4;
    /// Calls whose entry and exit did not pair up (nested or lost state).
    pub const UNPAIRED: u32 = 5;
    pub const COUNT: u32 = 6;
}

/// Per-op histograms: `FN_HISTS[(op * kind::COUNT + kind) * HIST_SLOTS + slot]`.
pub mod kind {
    /// Entry to exit of the function.
    pub const DURATION: u32 = 0;
    /// Locked section: duration minus the slow-path wait inside it.
    pub const HOLD: u32 = 1;
    /// Slow-path waits for the target's file_lock inside this op.
    pub const SLOWPATH_WAIT: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// Index in the `CONFIG` array: 1 when the allocator is probed directly.
pub const CONFIG_DIRECT_ALLOC: u32 = 0;
/// Index in the `CONFIG` array: 1 when `expand_files` is probed directly, so expansion events
/// come from there (with their duration) and not from the syscall tracepoints.
pub const CONFIG_DIRECT_EXPAND: u32 = 1;
/// Index in the `CONFIG` array: 1 once user space reads the events ring buffer; until then
/// nothing is sent (a `record` never reads it, and a buffer nobody reads only counts drops).
pub const CONFIG_EVENTS: u32 = 2;
/// Index in the `CONFIG` array: 1 once user space reads the `PROCESS_STARTS` ring buffer
/// (`record -a`); until then no start is sent.
pub const CONFIG_STARTS: u32 = 3;
/// Index in the `CONFIG` array: 1 when `TARGET_COMMS` holds names to match at exec and rename.
pub const CONFIG_COMMS: u32 = 4;
/// Index in the `CONFIG` array: 1 when `TARGET_CGROUPS` holds cgroups whose processes join when
/// moved in.
pub const CONFIG_CGROUPS: u32 = 5;
/// Index in the `CONFIG` array: 1 when the spinlock slow-path probe is the source of every
/// spinlock's waits (`SLOW_SITES`), there being no lock contention tracepoints to attach.
pub const CONFIG_SLOWPATH_ALL: u32 = 6;
/// Entries of the `CONFIG` array.
pub const CONFIG_ENTRIES: u32 = 8;

pub const FN_COUNTER_ENTRIES: u32 = (op::COUNT + 1) * counter::COUNT;
pub const FN_HIST_ENTRIES: u32 = (op::COUNT + 1) * kind::COUNT * HIST_SLOTS;

/// An fd-table function in progress on one thread (tid-indexed slots, like syscalls).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpState {
    pub tid: u32,
    pub op: u32,
    pub start_ns: u64,
    /// Slow-path wait accumulated inside this call.
    pub wait_ns: u64,
    /// Scan origin read at allocator entry: `max(start, files->next_fd)`; for `expand_files`,
    /// `max_fds` at entry.
    pub origin: u32,
    pub _pad: u32,
}

impl core::fmt::Display for Operation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
