//! The fd-table trace (`record --trace`): one [`TraceRecord`] per operation of the target on
//! its fd table, streamed through the `TRACE` ring buffer. The programs send none unless the
//! load-time setting `TRACE` is 1, so nothing else pays for it.

use crate::syscalls::{Effect, FD_SYSCALLS};

/// `TraceRecord::op` values.
pub mod op {
    /// An `alloc_fd`-backed allocation: `fd` is the fd (or `-errno`), `arg` its `start`.
    pub const ALLOC: u8 = 1;
    /// `fd`'s open bit cleared (close).
    pub const RELEASE: u8 = 2;
    /// dup2/dup3 installed at exactly `fd`.
    pub const INSTALL: u8 = 3;
    /// close_range(`fd`, `arg`).
    pub const CLOSE_RANGE: u8 = 4;
    /// A successful execve/execveat: the close-on-exec pass.
    pub const EXEC: u8 = 5;
    /// The table grew to `max_fds`.
    pub const EXPAND: u8 = 6;
    /// A fork with a table of its own (no `CLONE_FILES`): `child_table` starts as a copy of
    /// `table`, and `fd` is the child's pid, followed from then on.
    pub const FORK: u8 = 7;
}

/// The most processes followed besides a single target at once: the trace's forks, a launched
/// command's children; a fork past this is a counted drop (`trace`, or `targets` for the
/// children's figures).
pub const MAX_FOLLOWED: u32 = 1024;

/// `TraceRecord::flags` bits.
pub mod flag {
    /// The new fd is close-on-exec (alloc, install).
    pub const CLOEXEC: u8 = 1 << 0;
    /// close_range only marks the range close-on-exec.
    pub const CLOEXEC_ONLY: u8 = 1 << 1;
    /// close_range with `CLOSE_RANGE_UNSHARE`.
    pub const UNSHARE: u8 = 1 << 2;
    /// `enter_ns` and `exit_ns` are both the moment the operation was inside the table's
    /// `file_lock` section (direct modes' in-lock probes): operations on one table are then
    /// in the kernel's order by that moment alone.
    pub const LOCKED: u8 = 1 << 3;
}

/// The trace ring buffer's size when tracing (a power of two number of pages): ~115,000
/// records, so a burst of a few hundred ms is absorbed between two reads. Without `--trace` the
/// map is loaded at its declared minimum, one page.
pub const RING_BYTES: u32 = 8 * 1024 * 1024;

/// `close`'s return when the fd was not open (only then did it release nothing).
pub const EBADF: i64 = 9;
/// `alloc_fd`'s refusal: the one failure of an allocating syscall that is the allocator's.
pub const EMFILE: i64 = 24;

/// One fd-table operation. Times are `bpf_ktime_get_ns` (CLOCK_MONOTONIC).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// The syscall's entry; 0 where unknown.
    pub enter_ns: u64,
    /// The syscall's exit: when the operation was complete.
    pub exit_ns: u64,
    /// The `files_struct` address: the table's identity.
    pub table: u64,
    /// fork: the child's `files_struct`; 0 otherwise.
    pub child_table: u64,
    pub pid: u32,
    pub tid: u32,
    /// The fd (alloc: the fd or `-errno`; close_range: its low end; expand: the new max_fds).
    pub fd: i32,
    /// alloc: the lowest fd it may return; close_range: the high end.
    pub arg: u32,
    /// `files->next_fd` and `fdt->max_fds` at the syscall's entry; 0 where not read.
    pub next_fd: u32,
    pub max_fds: u32,
    pub op: u8,
    pub flags: u8,
    /// The syscall's index in `FD_SYSCALLS`; `u8::MAX` for exec.
    pub syscall: u8,
    pub _pad: [u8; 5],
}

#[cfg(feature = "user")]
// SAFETY: plain #[repr(C)] data, no padding holes (the tail is explicit).
unsafe impl aya::Pod for TraceRecord {}

/// Where a syscall's close-on-exec request is: a mask per argument (any bit set in its
/// argument asks for it), and whether the syscall always makes close-on-exec fds. Masks, not
/// an argument index: the programs test all four arguments branch-free, as the verifier
/// refuses a stack read at a variable offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloexecRule {
    pub masks: [u64; 4],
    pub always: bool,
}

pub const NEVER: CloexecRule = CloexecRule {
    masks: [0; 4],
    always: false,
};
pub const ALWAYS: CloexecRule = CloexecRule {
    masks: [0; 4],
    always: true,
};

const fn arg(index: usize, mask: u64) -> CloexecRule {
    let mut masks = [0; 4];
    masks[index] = mask;
    CloexecRule {
        masks,
        always: false,
    }
}

/// `O_CLOEXEC`, which `SOCK_CLOEXEC`, `EPOLL_CLOEXEC`, `EFD_CLOEXEC`, `IN_CLOEXEC`,
/// `SFD_CLOEXEC`, `TFD_CLOEXEC` and `OPEN_TREE_CLOEXEC` equal.
pub const O_CLOEXEC: u64 = 0o2_000_000;

/// The close-on-exec rule of the syscall `name`. openat2 (flags in a user struct) and
/// perf_event_open are taken as never: a replay then sees their fds as inherited by exec.
pub const fn cloexec_rule(name: &str) -> CloexecRule {
    let b = name.as_bytes();
    match b {
        b"open" => arg(1, O_CLOEXEC),
        b"openat" | b"open_by_handle_at" | b"open_tree" => arg(2, O_CLOEXEC),
        b"socket" | b"socketpair" | b"eventfd2" | b"timerfd_create" => arg(1, O_CLOEXEC),
        b"accept4" | b"signalfd4" => arg(3, O_CLOEXEC),
        b"dup3" => arg(2, O_CLOEXEC),
        b"pipe2" => arg(1, O_CLOEXEC),
        b"epoll_create1" | b"inotify_init1" | b"userfaultfd" | b"memfd_secret" => arg(0, O_CLOEXEC),
        // MFD_CLOEXEC, FAN_CLOEXEC
        b"memfd_create" => arg(1, 1),
        b"fanotify_init" => arg(0, 1),
        b"pidfd_open" | b"pidfd_getfd" | b"bpf" | b"io_uring_setup" => ALWAYS,
        _ => NEVER,
    }
}

/// [`cloexec_rule`] by syscall index, padded like `EFFECT_BY_INDEX` (fcntl's is its command,
/// decided at entry).
pub const CLOEXEC_BY_INDEX: [CloexecRule; 64] = {
    let mut table = [NEVER; 64];
    let mut i = 0;
    while i < FD_SYSCALLS.len() {
        table[i] = cloexec_rule(FD_SYSCALLS[i].name);
        i += 1;
    }
    table
};

/// Whether a syscall of `effect` sends allocation records.
pub const fn allocates(effect: Effect) -> bool {
    matches!(effect, Effect::Alloc | Effect::AllocPair | Effect::FcntlDup)
}
