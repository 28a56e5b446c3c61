//! What an allocation's scan and a table's size add to: the machine's counters and, per
//! process (`-a`, a set), its scan row.

use fdprof_common::{
    counters::{global, hist},
    log2_slot,
    process::ProcessScan,
};

use crate::{
    counters::{self, GLOBALS, add, set_max},
    processes::current_process_scan,
};

/// One allocation of `fd` whose bitmap search began at `origin` (docs/figures.md, "scan").
#[inline(always)]
pub(crate) fn record_scan(fd: u32, origin: u32) {
    record_scan_in(fd, origin, current_process_scan());
}

/// [`record_scan`], with the current process's scan row (`-a`, a set) already looked up.
#[inline(always)]
pub(crate) fn record_scan_in(fd: u32, origin: u32, row: Option<*mut ProcessScan>) {
    if fd < origin {
        add(&GLOBALS, global::BELOW_ORIGIN, 1);
        if let Some(s) = row {
            // SAFETY: per-CPU value, this CPU only.
            unsafe { (*s).below_origin += 1 };
        }
        return;
    }
    let bits = u64::from(fd - origin);
    if bits == 0 {
        add(&GLOBALS, global::NEXT_FD_HITS, 1);
    }
    set_max(&GLOBALS, global::SCAN_MAX, bits);
    counters::hist(hist::SCAN_BITS, bits);
    if let Some(s) = row {
        // SAFETY: per-CPU value, this CPU only; the slot is bounded.
        unsafe {
            (*s).allocations += 1;
            (*s).next_fd_hits += u64::from(bits == 0);
            let slot = log2_slot(bits) as usize & (fdprof_common::process::SCAN_SLOTS - 1);
            (*s).bits[slot] += 1;
        }
    }
    counters::hist(hist::OPEN_FDS_WORDS, u64::from(fd / 64 - origin / 64 + 1));
    counters::hist(
        hist::FULL_FDS_WORDS,
        u64::from(fd / 4096 - origin / 4096 + 1),
    );
}
/// A process's table size seen at `max_fds`, in its scan `row` (`-a`, a set); `grew` when a
/// syscall grew it.
#[inline(always)]
pub(crate) fn process_table(row: Option<*mut ProcessScan>, max_fds: u64, grew: bool) {
    if let Some(s) = row {
        // SAFETY: per-CPU value, this CPU only.
        unsafe {
            if (*s).max_fds < max_fds {
                (*s).max_fds = max_fds;
            }
            (*s).expansions += u64::from(grew);
        }
    }
}
