//! Per-process figures of a system-wide recording (`-a`): each process's fd syscalls and its
//! name, kept in the kernel from its first fd syscall on, so a process that exits before the
//! end is still there.

use crate::counters::per_syscall;

/// `PROCESS_SYSCALLS` key: a process (tgid) and a syscall index of `FD_SYSCALLS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessSyscall {
    pub tgid: u32,
    pub index: u32,
}

/// `PROCESS_SYSCALLS` value, per CPU: the `per_syscall` counters of that process and syscall.
pub type ProcessCounts = [u64; per_syscall::COUNT as usize];

/// (process, syscall) rows kept: a process uses a handful of fd syscalls, so a few thousand
/// processes. Each row takes 40 bytes a CPU. Rows past it are counted as drops
/// (`processes`/`process_syscalls_full`) and stay in the whole-machine counts. The rows of a
/// process that ended are freed once read (`EXITED`), so the bound is on processes alive (and
/// ended since the last read), not on processes ever seen.
pub const PROCESS_ROWS: u32 = 16384;

/// Processes whose name and scans are kept (`PROCESS_COMMS`, `PROCESS_SCANS`), freed as
/// `PROCESS_ROWS` are.
pub const PROCESSES: u32 = 4096;

/// `EXITED`: processes that ended and whose rows user space has not yet freed. User space
/// empties it every second; past it a process's end is a counted drop
/// (`processes`/`exited_full`), after which user space finds the ended processes among the
/// rows by itself.
pub const EXITED_SLOTS: u32 = 16384;

/// Log2 slots of a process's scan-distance histogram: a distance is below `nr_open`'s
/// ceiling (2^30), so it has at most 30 significant bits. A power of two, so the programs
/// bound a slot with a mask the verifier follows.
pub const SCAN_SLOTS: usize = 32;

/// `PROCESS_SCANS` value, per CPU: a process's allocator scans (as `record_scan` counts the
/// machine's) and its table's size.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessScan {
    pub allocations: u64,
    pub next_fd_hits: u64,
    pub below_origin: u64,
    /// The largest `max_fds` seen (combined over CPUs with max).
    pub max_fds: u64,
    /// Syscalls during which its `max_fds` grew.
    pub expansions: u64,
    /// Scan distances past the origin, in bits: `bits[k]` counts those with `k` significant
    /// bits.
    pub bits: [u32; SCAN_SLOTS],
}

impl Default for ProcessScan {
    fn default() -> Self {
        Self {
            allocations: 0,
            next_fd_hits: 0,
            below_origin: 0,
            max_fds: 0,
            expansions: 0,
            bits: [0; SCAN_SLOTS],
        }
    }
}

impl ProcessScan {
    /// Adds `other` (another CPU's, thread's or process's row): counts add, the table size is
    /// the largest.
    #[inline(always)]
    pub fn add(&mut self, other: &Self) {
        self.allocations += other.allocations;
        self.next_fd_hits += other.next_fd_hits;
        self.below_origin += other.below_origin;
        if self.max_fds < other.max_fds {
            self.max_fds = other.max_fds;
        }
        self.expansions += other.expansions;
        for k in 0..SCAN_SLOTS {
            self.bits[k] += other.bits[k];
        }
    }
}

/// Adds `other`'s `per_syscall` counters (another CPU's, thread's or process's) to `sum`.
#[inline(always)]
pub fn add_counts(sum: &mut ProcessCounts, other: &ProcessCounts) {
    for k in 0..per_syscall::COUNT as usize {
        sum[k] += other[k];
    }
}

/// `THREAD_ROWS` slots: a thread's figures are kept in the slot of its tid's low bits while
/// it runs (a plain array the programs index without a call, where a row of the hashes above
/// costs a lookup call on every fd syscall), and added to its process's rows when it ends. A
/// thread whose slot another thread holds counts straight into the hashes. 376 bytes a slot,
/// not per CPU: a thread runs on one CPU at a time.
pub const THREAD_SLOTS: u32 = 4096;

/// Syscalls a thread's slot keeps apart; a thread's other fd syscalls count straight into
/// its process's rows.
pub const THREAD_SYSCALLS: usize = 4;

/// One syscall of a thread's slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSyscall {
    /// The syscall's index in `FD_SYSCALLS` plus one; 0 when free.
    pub index_plus_one: u32,
    pub _pad: u32,
    pub counts: ProcessCounts,
}

/// `THREAD_ROWS` value: what one thread counted that is not yet in its process's rows. User
/// space adds a slot to the rows of the process it names, when they exist (they are made when
/// a slot first counts for them, so a slot left by a thread whose end was missed is never
/// added to a process that ended).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadRow {
    /// The thread holding the slot; 0 when free.
    pub tid: u32,
    pub tgid: u32,
    pub syscalls: [ThreadSyscall; THREAD_SYSCALLS],
    /// 1 when `scan` counts for the process's `PROCESS_SCANS` row.
    pub has_scan: u32,
    pub _pad: u32,
    pub scan: ProcessScan,
}

/// `TASK_COMM_LEN`.
pub const COMM_LEN: usize = 16;

/// How a process came to need a snapshot of its maps (`ProcessStart::how`).
pub mod start {
    /// A new process forked (not a thread): its maps are its parent's until it execs.
    pub const FORK: u16 = 1;
    /// A process exec'd a new program.
    pub const EXEC: u16 = 2;
    /// A process moved into a followed cgroup (`--cgroup`).
    pub const MOVED: u16 = 3;
}

/// One record of the `PROCESS_STARTS` ring buffer (`-a` and target sets): a process to
/// snapshot now, so its user stacks are symbolized even if it ends before the next pass over
/// `/proc`; in a target set, one that is in the set (it may have just joined).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStart {
    pub tgid: u32,
    /// A `start` value.
    pub how: u16,
    /// In a target set, its entry's `targets::TargetEntry::slot` (which target it is of); 0
    /// otherwise.
    pub slot: u16,
}

/// `PROCESS_STARTS` size in bytes (a power of two number of pages): each record takes 16
/// bytes with the ring's header, so 4096 starts wait at most; past that they are counted as
/// `processes`/`ringbuf_full` drops.
pub const STARTS_RING_BYTES: u32 = 64 * 1024;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data without padding.
    unsafe impl aya::Pod for super::ProcessSyscall {}
    unsafe impl aya::Pod for super::ProcessScan {}
    unsafe impl aya::Pod for super::ProcessStart {}
    unsafe impl aya::Pod for super::ThreadRow {}
}
