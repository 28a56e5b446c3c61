//! The switches user space writes after attaching, in the `CONFIG` array: a load-time setting
//! is fixed before load, but which probes attach is only known after.

use aya_ebpf::{macros::map, maps::Array};
use fdprof_common::fnops::{
    CONFIG_CGROUPS, CONFIG_COMMS, CONFIG_DIRECT_ALLOC, CONFIG_DIRECT_EXPAND, CONFIG_ENTRIES,
    CONFIG_EVENTS, CONFIG_SLOWPATH_ALL, CONFIG_STARTS,
};

/// `CONFIG[DIRECT_ALLOC]` = 1 once the allocator itself is probed, so scans are measured there
/// and not from the syscall tracepoints; and so on for each switch below.
#[map]
static CONFIG: Array<u32> = Array::with_max_entries(CONFIG_ENTRIES, 0);

/// Whether switch `index` is on.
#[inline(always)]
fn on(index: u32) -> bool {
    CONFIG.get(index).is_some_and(|&v| v != 0)
}

/// Whether cgroups are followed in the kernel (a `--cgroup` target set).
#[inline(always)]
pub(crate) fn cgroups_on() -> bool {
    on(CONFIG_CGROUPS)
}

/// Whether names are matched in the kernel (a `--comm` target set).
#[inline(always)]
pub(crate) fn comms_on() -> bool {
    on(CONFIG_COMMS)
}

/// Whether scans are measured from the syscalls: the allocator is not probed directly.
#[inline(always)]
pub(crate) fn scan_in_syscalls() -> bool {
    !on(CONFIG_DIRECT_ALLOC)
}

/// Whether `expand_files` is probed directly: expansion events come from there.
#[inline(always)]
pub(crate) fn expand_probed() -> bool {
    on(CONFIG_DIRECT_EXPAND)
}

/// Whether user space reads the events ring buffer.
#[inline(always)]
pub(crate) fn events_on() -> bool {
    on(CONFIG_EVENTS)
}

/// Whether the slow-path probe is the source of every spinlock's waits (no lock tracepoints).
#[inline(always)]
pub(crate) fn slowpath_all() -> bool {
    on(CONFIG_SLOWPATH_ALL)
}

/// Whether user space reads the process starts (`record -a`).
#[inline(always)]
pub(crate) fn starts_on() -> bool {
    on(CONFIG_STARTS)
}
