//! Maps shared by the program families, and small helpers to bump per-CPU counters.

use aya_ebpf::{
    macros::map,
    maps::{PerCpuArray, StackTrace},
};
use fdprof_common::{
    HIST_SLOTS,
    counters::{DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, drop, global, hist},
    log2_slot,
};

#[map]
pub static STACKS: StackTrace = StackTrace::with_max_entries(16384, 0);

#[map]
pub static SYSCALL_COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(SYSCALL_COUNTER_ENTRIES, 0);

#[map]
pub static GLOBALS: PerCpuArray<u64> = PerCpuArray::with_max_entries(global::COUNT, 0);

#[map]
pub static HISTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(HIST_ENTRIES, 0);

#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_ENTRIES, 0);

#[inline(always)]
pub fn add(map: &PerCpuArray<u64>, index: u32, n: u64) {
    if let Some(p) = map.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, this CPU only.
        unsafe { *p += n };
    }
}

#[inline(always)]
pub fn set_max(map: &PerCpuArray<u64>, index: u32, v: u64) {
    if let Some(p) = map.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, this CPU only.
        unsafe {
            if *p < v {
                *p = v
            }
        };
    }
}

/// Keeps the smallest non-zero value.
#[inline(always)]
pub fn set_min_nonzero(map: &PerCpuArray<u64>, index: u32, v: u64) {
    if let Some(p) = map.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, this CPU only.
        unsafe {
            if *p == 0 || v < *p {
                *p = v
            }
        };
    }
}

#[inline(always)]
pub fn hist(id: u32, value: u64) {
    let slot = log2_slot(value).min(HIST_SLOTS - 1);
    add(&HISTS, id * HIST_SLOTS + slot, 1);
}

#[inline(always)]
pub fn dropped(probe: u32, reason: u32) {
    add(&DROPS, probe * drop::COUNT + reason, 1);
}

/// One allocation of `fd` whose bitmap search began at `origin` (docs/figures.md, "scan").
#[inline(always)]
pub fn record_scan(fd: u32, origin: u32) {
    if fd < origin {
        add(&GLOBALS, global::BELOW_ORIGIN, 1);
        return;
    }
    let bits = u64::from(fd - origin);
    if bits == 0 {
        add(&GLOBALS, global::NEXT_FD_HITS, 1);
    }
    set_max(&GLOBALS, global::SCAN_MAX, bits);
    hist(hist::SCAN_BITS, bits);
    hist(hist::OPEN_FDS_WORDS, u64::from(fd / 64 - origin / 64 + 1));
    hist(
        hist::FULL_FDS_WORDS,
        u64::from(fd / 4096 - origin / 4096 + 1),
    );
}
