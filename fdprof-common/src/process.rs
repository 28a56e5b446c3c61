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
/// (`processes`/`map_full`) and stay in the whole-machine counts.
pub const PROCESS_ROWS: u32 = 16384;

/// Processes whose name is kept (`PROCESS_COMMS`, tgid → comm).
pub const PROCESSES: u32 = 4096;

/// `TASK_COMM_LEN`.
pub const COMM_LEN: usize = 16;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data without padding.
    unsafe impl aya::Pod for super::ProcessSyscall {}
}
