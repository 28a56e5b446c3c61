//! Maps shared by the program families, and small helpers to bump per-CPU counters.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{PerCpuArray, RingBuf, StackTrace},
};
use fdprof_common::{
    HIST_SLOTS,
    counters::{DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, drop, global, hist},
    events::{EventRecord, RING_BYTES},
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

/// The events that each deserve a record of their own (slow waits, expansions, exits).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Sends `record`, stamped with the time and the current pid/tid, when user space reads the
/// events. The ring buffer's reserve takes its own short spinlock (no lock of the target's); a
/// full buffer is a counted drop, never a wait.
#[inline(always)]
pub fn emit(mut record: EventRecord) {
    if !crate::kernel::events_on() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    record.at_ns = unsafe { bpf_ktime_get_ns() };
    record.pid = (pid_tgid >> 32) as u32;
    record.tid = pid_tgid as u32;
    if EVENTS.output::<EventRecord>(&record, 0).is_err() {
        dropped(drop::PROBE_EVENTS, drop::RINGBUF_FULL);
    }
}

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
