//! The machine's per-CPU counters (`fdprof_common::counters`): per-syscall counts, globals,
//! histograms and drops, and the small helpers every program family bumps them with.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use fdprof_common::{
    HIST_SLOTS,
    counters::{DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, drop, global},
    log2_slot,
};

#[map]
pub(crate) static SYSCALL_COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(SYSCALL_COUNTER_ENTRIES, 0);

#[map]
pub(crate) static GLOBALS: PerCpuArray<u64> = PerCpuArray::with_max_entries(global::COUNT, 0);

#[map]
static HISTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(HIST_ENTRIES, 0);

#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_ENTRIES, 0);

#[inline(always)]
pub(crate) fn add(map: &PerCpuArray<u64>, index: u32, n: u64) {
    if let Some(p) = map.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, this CPU only.
        unsafe { *p += n };
    }
}

#[inline(always)]
pub(crate) fn set_max(map: &PerCpuArray<u64>, index: u32, v: u64) {
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
pub(crate) fn set_min_nonzero(map: &PerCpuArray<u64>, index: u32, v: u64) {
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
pub(crate) fn hist(id: u32, value: u64) {
    let slot = log2_slot(value).min(HIST_SLOTS - 1);
    add(&HISTS, id * HIST_SLOTS + slot, 1);
}

#[inline(always)]
pub(crate) fn dropped(probe: u32, reason: u32) {
    add(&DROPS, probe * drop::COUNT + reason, 1);
}
