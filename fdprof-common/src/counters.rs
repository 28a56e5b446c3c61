//! Indices into the per-CPU counter and histogram arrays of the syscall and contention programs.

use crate::syscalls::N_SYSCALLS;

/// Per-syscall counters: `SYSCALL_COUNTERS[index * per_syscall::COUNT + counter]`.
pub mod per_syscall {
    pub const CALLS: u32 = 0;
    pub const ERRORS: u32 = 1;
    pub const FDS_CREATED: u32 = 2;
    pub const FDS_CLOSED: u32 = 3;
    /// Allocations that went through `alloc_fd` (not dup2/dup3).
    pub const ALLOCS: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// Global counters: `GLOBALS[counter]`.
pub mod global {
    /// Allocations whose fd equalled the scan origin (`next_fd` hit).
    pub const NEXT_FD_HITS: u32 = 0;
    /// Allocations below the origin read at entry (another thread moved `next_fd`).
    pub const BELOW_ORIGIN: u32 = 1;
    /// Syscalls during which `fdt->max_fds` grew.
    pub const EXPANSIONS: u32 = 2;
    /// Largest `max_fds` seen (stored with max, not add).
    pub const MAX_FDS_SEEN: u32 = 3;
    /// Smallest `max_fds` seen at a syscall entry (0 = none yet; stored with min).
    pub const MAX_FDS_FIRST: u32 = 4;
    /// Contentions whose stacks were walked, and those that reused the stacks of their site.
    pub const STACK_WALKS: u32 = 5;
    /// Largest scan distance in bits.
    pub const SCAN_MAX: u32 = 6;
    pub const STACK_REUSES: u32 = 7;
    /// Time spent walking stacks, ns: left out of the waits, so left out of the probe time a
    /// wait can contain.
    pub const WALK_NS: u32 = 8;
    /// Contention sites given a `SITE_WAITS` element: how fast the site map fills, which
    /// user space sweeps ended processes' sites out of sooner by.
    pub const SITES_GIVEN: u32 = 9;
    pub const COUNT: u32 = 10;
}

/// Histograms: `HISTS[hist * HIST_SLOTS + slot]`; the first `N_SYSCALLS` are syscall latencies.
pub mod hist {
    use super::N_SYSCALLS;
    pub const SCAN_BITS: u32 = N_SYSCALLS;
    pub const OPEN_FDS_WORDS: u32 = N_SYSCALLS + 1;
    pub const FULL_FDS_WORDS: u32 = N_SYSCALLS + 2;
    pub const COUNT: u32 = N_SYSCALLS + 3;
}

/// Probes that count drops, and why: `DROPS[probe * drop::COUNT + reason]`.
pub mod drop {
    pub const PROBE_CONTENTION: u32 = 0;
    pub const PROBE_SYSCALLS: u32 = 1;
    /// Events lost to a full `EVENTS` ring buffer.
    pub const PROBE_EVENTS: u32 = 2;
    /// On-CPU samples (`record --cpu`).
    pub const PROBE_CPU: u32 = 3;
    /// fd-table trace records lost (`record --trace`).
    pub const PROBE_TRACE: u32 = 4;
    /// Per-process rows of a system-wide recording (`process::PROCESS_ROWS`), and its process
    /// starts (`PROCESS_STARTS` full, or past the snapshot bounds).
    pub const PROBE_PROCESSES: u32 = 5;
    /// Processes that should have joined the target set (`targets::MAX_TARGETS` full), or been
    /// followed from their fork as a launched command's children (`trace::MAX_FOLLOWED` full).
    pub const PROBE_TARGETS: u32 = 6;
    pub const PROBES: u32 = 7;

    /// A map had no room (for syscalls: another thread's entry took the in-flight slot).
    pub const MAP_FULL: u32 = 0;
    pub const KERNEL_STACK: u32 = 1;
    pub const USER_STACK: u32 = 2;
    /// A value could not be read from the kernel or user memory.
    pub const READ_FAILED: u32 = 3;
    /// The events ring buffer had no room (user space reads too slowly).
    pub const RINGBUF_FULL: u32 = 4;
    /// Trace records past `record --trace-limit`; process starts not snapshotted, past the
    /// snapshot bounds of `record -a` (both counted by user space).
    pub const LIMIT: u32 = 5;
    /// The per-process maps, each named (`processes` only): `PROCESS_SYSCALLS` had no room for
    /// a (process, syscall) row (the syscall stays in the machine's figures), `PROCESS_COMMS`
    /// for a process's name, `PROCESS_SCANS` for its scan row.
    pub const PROCESS_SYSCALLS_FULL: u32 = 6;
    pub const PROCESS_COMMS_FULL: u32 = 7;
    pub const PROCESS_SCANS_FULL: u32 = 8;
    /// `EXITED` had no room for a process that ended (`processes` only): user space then looks
    /// for the ended processes among every row's instead.
    pub const EXITED_FULL: u32 = 9;
    /// Cgroups below the followed ones past `targets::CGROUP_BOUND`, not followed (`targets`
    /// only, counted by user space once per cgroup).
    pub const CGROUP_BOUND: u32 = 10;
    /// A user stack not copied: its CPU had copied its bytes a second
    /// (`copies::BUDGET_BYTES_PER_CPU_SEC`) (`contention` and `cpu` only).
    pub const COPY_BUDGET: u32 = 11;
    pub const COUNT: u32 = 12;

    /// Whether counter `reason` of `probe` exists: the first reasons are every probe's, the
    /// reasons that name a map or bound only their own probe's.
    pub const fn exists(probe: u32, reason: u32) -> bool {
        match reason {
            PROCESS_SYSCALLS_FULL..=EXITED_FULL => probe == PROBE_PROCESSES,
            CGROUP_BOUND => probe == PROBE_TARGETS,
            COPY_BUDGET => probe == PROBE_CONTENTION || probe == PROBE_CPU,
            _ => reason < COUNT,
        }
    }

    pub const PROBE_NAMES: [&str; PROBES as usize] = [
        "contention",
        "syscalls",
        "events",
        "cpu",
        "trace",
        "processes",
        "targets",
    ];
    pub const REASON_NAMES: [&str; COUNT as usize] = [
        "map_full",
        "kernel_stack",
        "user_stack",
        "read_failed",
        "ringbuf_full",
        "limit",
        "process_syscalls_full",
        "process_comms_full",
        "process_scans_full",
        "exited_full",
        "cgroup_bound",
        "copy_budget",
    ];
}

pub const SYSCALL_COUNTER_ENTRIES: u32 = N_SYSCALLS * per_syscall::COUNT;
pub const HIST_ENTRIES: u32 = hist::COUNT * crate::HIST_SLOTS;
pub const DROP_ENTRIES: u32 = drop::PROBES * drop::COUNT;
