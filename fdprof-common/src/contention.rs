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

/// A lock the programs recognise from the waiting task itself (`ContentionKey::known`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum KnownLock {
    #[default]
    None = 0,
    /// `current->mm->mmap_lock`.
    MmapLock = 1,
    /// `current->sighand->siglock`.
    Siglock = 2,
    /// The lock of the runqueue the waiting task runs on (`current->se.cfs_rq->rq->__lock`):
    /// in `__schedule` the lock call is a tail call, so no frame names it.
    RqLock = 3,
}

impl KnownLock {
    /// The kind of a key's `known`; unknown values are `None`.
    pub const fn from_code(code: u32) -> Self {
        match code {
            1 => KnownLock::MmapLock,
            2 => KnownLock::Siglock,
            3 => KnownLock::RqLock,
            _ => KnownLock::None,
        }
    }
}

/// A contention site's stacks are walked at its first contention and again at every this
/// many; in between they are reused (walking costs more than most file_lock waits).
pub const STACK_REFRESH: u32 = 4096;

/// The lock of a wait, as far as the programs tell it at `contention_begin`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockIdentity {
    /// A [`lock_class`] value.
    pub class: u32,
    /// A [`KnownLock`] code.
    pub known: u32,
    /// The lock's address when it lies in the kernel image (a static lock, named by its
    /// symbol in user space); 0 for locks in allocated objects (one row per address would be
    /// one row per socket, inode, …).
    pub static_addr: u64,
}

/// What waits are added up by: which lock, from which stacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SiteKey {
    pub lock: LockIdentity,
    /// Stack ids in the stack-trace map; negative when the stack could not be taken.
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// The waiting process, under `-a` (each process's `file_lock` is its own); 0 otherwise.
    pub tgid: u32,
    pub _pad: u32,
}

/// Sites the programs add waits up for (`SITE_INDEX` entries, `SITE_WAITS` elements). Each
/// element is per CPU (184 bytes): 2048 of them take 368 KiB a CPU.
pub const SITES: u32 = 2048;

/// Log2 slots of a site's wait histogram: waits of 2^39 ns (9 minutes) and more share the last.
pub const WAIT_SLOTS: usize = 40;

/// The waits of one site on one CPU: an element of the per-CPU array `SITE_WAITS`, at the index
/// `SITE_INDEX` gives the site. Array elements are reached without hashing, so
/// `contention_end`, which runs with the lock held, adds a wait with a few stores.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SiteWaits {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub slots: [u32; WAIT_SLOTS],
}

impl Default for SiteWaits {
    fn default() -> Self {
        Self {
            count: 0,
            total_ns: 0,
            max_ns: 0,
            slots: [0; WAIT_SLOTS],
        }
    }
}

/// An open wait, kept from `contention_begin` to `contention_end`. Everything `contention_end`
/// needs is worked out at `contention_begin`, while the task waits anyway.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenWait {
    pub lock_addr: u64,
    pub start_ns: u64,
    pub site: SiteKey,
    /// The site's element of `SITE_WAITS`.
    pub index: u32,
    pub _pad: u32,
}

/// Slow-path sites each CPU has (`SLOW_SITES` holds this many per CPU, at `cpu * this`).
pub const SLOW_SITES_PER_CPU: u32 = 128;
/// Frames a slow-path site keeps of each stack.
pub const SLOW_FRAMES: usize = 32;

/// A spinlock wait site seen by the slow-path probe (kernels without the lock contention
/// tracepoints), with its stacks and its waits on one CPU. The probe runs inside a spinlock's
/// slow path, so it takes no lock: no stack map (its free list has locks), no hash map (bucket
/// locks); each CPU fills only its own range of this array, and the stacks are kept as frames.
/// User space frees a site when its process ends.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SlowSite {
    /// What the site is (lock identity, kernel frames, process), hashed; 0 while free.
    pub hash: u64,
    pub lock: LockIdentity,
    pub tgid: u32,
    pub kernel_frames: u32,
    pub user_frames: u32,
    /// The user stack's copy (`copies`), unless walked by frame pointers into `user`; -1:
    /// none.
    pub user_copy: i32,
    pub kernel: [u64; SLOW_FRAMES],
    pub user: [u64; SLOW_FRAMES],
    pub waits: SiteWaits,
}

impl Default for SlowSite {
    fn default() -> Self {
        Self {
            hash: 0,
            lock: LockIdentity::default(),
            tgid: 0,
            kernel_frames: 0,
            user_frames: 0,
            user_copy: -1,
            kernel: [0; SLOW_FRAMES],
            user: [0; SLOW_FRAMES],
            waits: SiteWaits::default(),
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data without padding holes that matter to the kernel.
    unsafe impl aya::Pod for super::SiteKey {}
    unsafe impl aya::Pod for super::SiteWaits {}
    unsafe impl aya::Pod for super::SlowSite {}
}

impl core::fmt::Display for LockKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
