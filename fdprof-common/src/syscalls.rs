//! The fd-creating and fd-closing syscalls traced in tracepoint mode (x86_64 numbers).

/// What a syscall does to the fd table, which decides how its exit is read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Effect {
    /// Returns one new fd taken with `alloc_fd` from 0 (open, socket, dup, accept, …).
    Alloc = 0,
    /// Writes two new fds into the `int[2]` at arg `FD_PAIR_ARG` (pipe, pipe2, socketpair).
    AllocPair = 1,
    /// `fcntl(fd, F_DUPFD[_CLOEXEC], start)`: one fd taken with `alloc_fd` from `start`.
    FcntlDup = 2,
    /// Installs at a chosen fd without scanning (dup2, dup3); may close what was there.
    Install = 3,
    /// Closes one fd.
    Close = 4,
    /// Closes a range of fds.
    CloseRange = 5,
}

/// One traced syscall.
#[derive(Clone, Copy, Debug)]
pub struct FdSyscall {
    pub nr: u32,
    pub name: &'static str,
    pub effect: Effect,
}

const fn s(nr: u32, name: &'static str, effect: Effect) -> FdSyscall {
    FdSyscall { nr, name, effect }
}

use Effect::*;

/// Every traced syscall; its position is its index in the per-syscall maps.
pub const FD_SYSCALLS: [FdSyscall; 36] = [
    s(2, "open", Alloc),
    s(257, "openat", Alloc),
    s(437, "openat2", Alloc),
    s(85, "creat", Alloc),
    s(304, "open_by_handle_at", Alloc),
    s(41, "socket", Alloc),
    s(53, "socketpair", AllocPair),
    s(43, "accept", Alloc),
    s(288, "accept4", Alloc),
    s(32, "dup", Alloc),
    s(33, "dup2", Install),
    s(292, "dup3", Install),
    s(72, "fcntl", FcntlDup),
    s(22, "pipe", AllocPair),
    s(293, "pipe2", AllocPair),
    s(284, "eventfd", Alloc),
    s(290, "eventfd2", Alloc),
    s(213, "epoll_create", Alloc),
    s(291, "epoll_create1", Alloc),
    s(319, "memfd_create", Alloc),
    s(283, "timerfd_create", Alloc),
    s(282, "signalfd", Alloc),
    s(289, "signalfd4", Alloc),
    s(253, "inotify_init", Alloc),
    s(294, "inotify_init1", Alloc),
    s(434, "pidfd_open", Alloc),
    s(438, "pidfd_getfd", Alloc),
    s(425, "io_uring_setup", Alloc),
    s(298, "perf_event_open", Alloc),
    s(321, "bpf", Alloc),
    s(323, "userfaultfd", Alloc),
    s(300, "fanotify_init", Alloc),
    s(3, "close", Close),
    s(436, "close_range", CloseRange),
    s(447, "memfd_secret", Alloc),
    s(428, "open_tree", Alloc),
];

pub const N_SYSCALLS: u32 = FD_SYSCALLS.len() as u32;

/// Highest syscall number in the table, for the number → index lookup array.
pub const MAX_NR: u32 = 512;

/// Sentinel in the lookup array for syscalls that are not traced.
pub const NOT_TRACED: u8 = u8::MAX;

/// `fcntl` commands that allocate.
pub const F_DUPFD: u64 = 0;
pub const F_DUPFD_CLOEXEC: u64 = 1030;

/// `close_range` flag: mark the range close-on-exec instead of closing it.
pub const CLOSE_RANGE_CLOEXEC: u64 = 1 << 2;
/// `close_range` flag: unshare a shared table first.
pub const CLOSE_RANGE_UNSHARE: u64 = 1 << 1;

/// Index of the `int[2]` argument of the pair-creating syscalls (`socketpair`'s is the fourth).
pub const fn fd_pair_arg(nr: u32) -> usize {
    if nr == 53 { 3 } else { 0 }
}

/// `bpf(BPF_PROG_LOAD | BPF_MAP_CREATE | …)` only allocates for some commands; `perf_event_open`
/// and `bpf` are traced anyway: they return an fd when they succeed with a non-negative value.
/// `fdprof`'s own bpf(2) calls never match the target filter.
pub const fn returns_fd(effect: Effect) -> bool {
    matches!(effect, Alloc | FcntlDup | Install)
}

/// Syscall number → index in [`FD_SYSCALLS`], or [`NOT_TRACED`].
pub const SYSCALL_INDEX: [u8; MAX_NR as usize] = {
    let mut table = [NOT_TRACED; MAX_NR as usize];
    let mut i = 0;
    while i < FD_SYSCALLS.len() {
        table[FD_SYSCALLS[i].nr as usize] = i as u8;
        i += 1;
    }
    table
};

/// [`FD_SYSCALLS`]' effects by index, padded to a power of two: the programs look an effect up
/// as `EFFECT_BY_INDEX[index & 63]`, a bound the verifier keeps even where the compiler spills
/// the index to the stack between a range check and its use (6.1's verifier then loses the
/// check and refuses the load).
pub const EFFECT_BY_INDEX: [Effect; 64] = {
    let mut table = [Effect::Alloc; 64];
    let mut i = 0;
    while i < FD_SYSCALLS.len() {
        table[i] = FD_SYSCALLS[i].effect;
        i += 1;
    }
    table
};

/// Slots of the in-flight table, indexed by `tid & (IN_FLIGHT_SLOTS - 1)`: an array lookup
/// costs a fraction of a hash insert + delete on every syscall.
pub const IN_FLIGHT_SLOTS: u32 = 1 << 16;

/// Syscall state kept from entry to exit, per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SyscallEntry {
    /// The thread whose syscall this is; 0 when the slot is free.
    pub tid: u32,
    /// close_range: the open fds in its range at entry (what it will close).
    pub in_range: u32,
    pub start_ns: u64,
    /// User pointer to the `int[2]` of pipe/pipe2/socketpair.
    pub fd_pair: u64,
    /// `files->next_fd` and `fdt->max_fds` at entry.
    pub next_fd: u32,
    pub max_fds: u32,
    /// Lowest fd the allocation may return (`fcntl(F_DUPFD, start)`), else 0; with the trace
    /// on, close_range's high end.
    pub start: u32,
    pub index: u8,
    /// dup2/dup3 onto an fd that was open: it gets closed.
    pub closes_target: u8,
    /// The new fd is close-on-exec (`record --trace` only).
    pub cloexec: u8,
    /// `record --trace`: the allocator calls that returned so far, their moments in
    /// `locked_ns`.
    pub allocs: u8,
    /// `record --trace`: the last moment seen inside the table's `file_lock` section (0: none,
    /// or the lock was dropped since), from the in-lock probes of direct modes.
    pub pending_ns: u64,
    /// `record --trace`: each allocator call's moment inside its `file_lock` section, in call
    /// order (0 where none was seen).
    pub locked_ns: [u64; 2],
}
