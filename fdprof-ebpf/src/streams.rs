//! What is sent to user space as it happens: the events that each deserve a record of their
//! own, the process starts to snapshot, and the processes that ended.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Queue, RingBuf},
};
use fdprof_common::{
    counters::drop,
    events::{EventRecord, RING_BYTES},
    process::{EXITED_SLOTS, ProcessStart, STARTS_RING_BYTES},
};

use crate::{config, counters::dropped, filter, settings, targets};

/// Processes that ended (`-a`, a target set): user space frees their rows (`processes`) once
/// it has read them.
#[map]
static EXITED: Queue<u32> = Queue::with_max_entries(EXITED_SLOTS, 0);

/// Process `tgid` ended: its rows are for user space to free after its next read; a full queue
/// is a counted drop (user space then finds the ended processes among the rows itself).
#[inline(always)]
pub(crate) fn ended(tgid: u32) {
    if EXITED.push(tgid, 0).is_err() {
        dropped(drop::PROBE_PROCESSES, drop::EXITED_FULL);
    }
}

/// The events that each deserve a record of their own (slow waits, expansions, exits).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Processes to snapshot now (`-a`): new processes and execs.
#[map]
static PROCESS_STARTS: RingBuf = RingBuf::with_byte_size(STARTS_RING_BYTES, 0);

/// Tells user space that process `tgid` started (`how`: a `process::start` value), when every
/// process is profiled or `tgid` is in the target set, and user space reads the starts; a full
/// buffer is a counted drop.
#[inline(always)]
pub(crate) fn started(tgid: u32, how: u16) {
    if filter::process_of_all().is_none() || !config::starts_on() {
        return;
    }
    let mut slot = 0;
    if settings::target_is_set() {
        // SAFETY: the value is copied out at once.
        match unsafe { targets::TARGETS.get(tgid) } {
            Some(entry) => slot = entry.slot as u16,
            None => return,
        }
    }
    if PROCESS_STARTS
        .output::<ProcessStart>(&ProcessStart { tgid, how, slot }, 0)
        .is_err()
    {
        dropped(drop::PROBE_PROCESSES, drop::RINGBUF_FULL);
    }
}

/// Sends `record`, stamped with the time and the current pid/tid, when user space reads the
/// events. The ring buffer's reserve takes its own short spinlock (no lock of the target's); a
/// full buffer is a counted drop, never a wait.
#[inline(always)]
pub(crate) fn emit(mut record: EventRecord) {
    if !config::events_on() {
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
