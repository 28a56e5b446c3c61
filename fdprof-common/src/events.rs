//! Events that each deserve a record of their own, streamed through the `EVENTS` ring buffer
//! (everything else is aggregated in the kernel).

/// `EventRecord::kind` values.
pub mod kind {
    /// A wait of at least `Settings::slow_ns` for a lock, seen at `contention_end`.
    pub const SLOW_WAIT: u32 = 1;
    /// The target's fd table grew.
    pub const EXPANSION: u32 = 2;
    /// A thread of the target exited.
    pub const EXIT: u32 = 3;
}

/// `EventRecord::flags` bits.
pub mod flag {
    /// Exit: the thread was the last of its process.
    pub const PROCESS: u32 = 1 << 0;
    /// Expansion: `value` holds the duration of `expand_files` (direct probes only).
    pub const DURATION: u32 = 1 << 1;
}

/// Ring buffer size in bytes: a power of two number of pages.
pub const RING_BYTES: u32 = 256 * 1024;

/// One event. The fields a kind does not use are 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventRecord {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) when it happened.
    pub at_ns: u64,
    /// Slow wait: the wait in ns; expansion: the duration when `flag::DURATION` is set.
    pub value: u64,
    /// Slow wait: the lock waited for.
    pub lock: crate::contention::LockIdentity,
    pub kind: u32,
    pub pid: u32,
    pub tid: u32,
    pub flags: u32,
    /// Expansion: `max_fds` before and after.
    pub old_max_fds: u32,
    pub new_max_fds: u32,
    /// Slow wait: ids in the `STACKS` map (the user stack's: its copy's, `copies`); negative
    /// when the stack could not be taken.
    pub kernel_stack: i32,
    pub user_stack: i32,
}

#[cfg(feature = "user")]
// SAFETY: plain #[repr(C)] data, all fields 4- or 8-byte aligned, no padding holes.
unsafe impl aya::Pod for EventRecord {}
