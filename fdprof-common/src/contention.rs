//! Lock-contention aggregation keys and values.

/// Lock identity, from the lock address and the tracepoint's flags. The discriminant is the
/// `lock_class` of a [`ContentionKey`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[repr(u32)]
pub enum LockKind {
    /// The target's own `files->file_lock`.
    FileLock = 0,
    Spinlock = 1,
    Mutex = 2,
    Rwsem = 3,
    #[default]
    Other = 4,
}

impl LockKind {
    pub const ALL: [LockKind; 5] = [
        LockKind::FileLock,
        LockKind::Spinlock,
        LockKind::Mutex,
        LockKind::Rwsem,
        LockKind::Other,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            LockKind::FileLock => "file_lock",
            LockKind::Spinlock => "spinlock",
            LockKind::Mutex => "mutex",
            LockKind::Rwsem => "rwsem",
            LockKind::Other => "other",
        }
    }

    /// The kind of a key's `lock_class`; unknown classes are `Other`.
    pub const fn from_class(class: u32) -> Self {
        match class {
            0 => LockKind::FileLock,
            1 => LockKind::Spinlock,
            2 => LockKind::Mutex,
            3 => LockKind::Rwsem,
            _ => LockKind::Other,
        }
    }
}

/// `lock_class` values of a [`ContentionKey`], as the programs store them.
pub mod lock_class {
    use super::LockKind;
    pub const FILE_LOCK: u32 = LockKind::FileLock as u32;
    pub const SPINLOCK: u32 = LockKind::Spinlock as u32;
    pub const MUTEX: u32 = LockKind::Mutex as u32;
    pub const RWSEM: u32 = LockKind::Rwsem as u32;
    pub const OTHER: u32 = LockKind::Other as u32;
}

/// `contention_begin` flags (include/trace/events/lock.h).
pub mod lcb {
    pub const F_SPIN: u32 = 1 << 0;
    pub const F_READ: u32 = 1 << 1;
    pub const F_WRITE: u32 = 1 << 2;
    pub const F_RT: u32 = 1 << 3;
    pub const F_PERCPU: u32 = 1 << 4;
    pub const F_MUTEX: u32 = 1 << 5;
}

/// A contention site's stacks are walked at its first contention and again at every this
/// many; in between they are reused (walking costs more than most file_lock waits).
pub const STACK_REFRESH: u32 = 16;

/// One waiting site: which lock, from which stacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContentionKey {
    pub lock_class: u32,
    /// Stack ids in the stack-trace map; negative when the stack could not be taken.
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// Log2 slot of the wait, so the key also is a histogram cell.
    pub slot: u32,
}

/// Aggregate for one key (one cell of one histogram).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ContentionValue {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// An open wait, kept from `contention_begin` to `contention_end`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenWait {
    pub lock: u64,
    pub start_ns: u64,
    pub flags: u32,
    /// Stacks are taken at `contention_begin`, while the task spins anyway, not at
    /// `contention_end`, where the lock is already held and every ns would lengthen the hold.
    pub kernel_stack: i32,
    pub user_stack: i32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data without padding holes that matter to the kernel.
    unsafe impl aya::Pod for super::ContentionKey {}
    unsafe impl aya::Pod for super::ContentionValue {}
}

impl core::fmt::Display for LockKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
