//! What every task's measured loop shares: how long the phase lasts and the per-task progress
//! counter. Kept apart from the loops (`task`, `accept`) so neither has to import the other.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// How long the measured phase lasts.
#[derive(Clone, Copy, Debug)]
pub enum Plan {
    /// Exactly this many ops per task.
    Ops(u64),
    /// Until the stop flag, set after this long.
    Timed(Duration),
}

/// A task's progress counter, alone on its cache lines (128 bytes: adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct TaskSlot {
    pub ops: AtomicU64,
}
