//! Maps shared by the program families, and small helpers to bump per-CPU counters.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, Queue, RingBuf, StackTrace},
};
use fdprof_common::{
    HIST_SLOTS,
    counters::{
        DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, drop, global, hist, per_syscall,
    },
    events::{EventRecord, RING_BYTES},
    log2_slot,
    process::{
        COMM_LEN, EXITED_SLOTS, PROCESS_ROWS, PROCESSES, ProcessCounts, ProcessScan, ProcessStart,
        ProcessSyscall, STARTS_RING_BYTES, THREAD_SLOTS, THREAD_SYSCALLS, ThreadRow, add_counts,
    },
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

/// Each process's fd syscall counters under `-a`.
#[map]
pub static PROCESS_SYSCALLS: PerCpuHashMap<ProcessSyscall, ProcessCounts> =
    PerCpuHashMap::with_max_entries(PROCESS_ROWS, 0);

/// Each process's name under `-a`, as it was at its latest first use of a syscall (after an
/// exec, the new program's).
#[map]
pub static PROCESS_COMMS: HashMap<u32, [u8; COMM_LEN]> = HashMap::with_max_entries(PROCESSES, 0);

/// Each process's allocator scans and table size under `-a`.
#[map]
pub static PROCESS_SCANS: PerCpuHashMap<u32, ProcessScan> =
    PerCpuHashMap::with_max_entries(PROCESSES, 0);

/// `BPF_F_MMAPABLE`: user space reads the array through a mapping, without a call per slot.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Running threads' figures not yet in their process's rows (`process::ThreadRow`).
#[map]
pub static THREAD_ROWS: Array<ThreadRow> = Array::with_max_entries(THREAD_SLOTS, BPF_F_MMAPABLE);

/// Processes that ended (`-a`, a target set): user space frees their rows above once it has
/// read them.
#[map]
pub static EXITED: Queue<u32> = Queue::with_max_entries(EXITED_SLOTS, 0);

/// Process `tgid` ended: its rows are for user space to free after its next read; a full queue
/// is a counted drop (user space then finds the ended processes among the rows itself).
#[inline(always)]
pub fn ended(tgid: u32) {
    if EXITED.push(&tgid, 0).is_err() {
        dropped(drop::PROBE_PROCESSES, drop::EXITED_FULL);
    }
}

/// The events that each deserve a record of their own (slow waits, expansions, exits).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Processes to snapshot now (`-a`): new processes and execs.
#[map]
pub static PROCESS_STARTS: RingBuf = RingBuf::with_byte_size(STARTS_RING_BYTES, 0);

/// Tells user space that process `tgid` started (`how`: a `process::start` value), when every
/// process is profiled or `tgid` is in the target set, and user space reads the starts; a full
/// buffer is a counted drop.
#[inline(always)]
pub fn started(tgid: u32, how: u16) {
    if crate::kernel::process_of_all().is_none() || !crate::kernel::starts_on() {
        return;
    }
    let mut slot = 0;
    if crate::kernel::target_is_set() {
        // SAFETY: the value is copied out at once.
        match unsafe { crate::kernel::TARGETS.get(&tgid) } {
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
    record_scan_in(fd, origin, current_process_scan());
}

/// [`record_scan`], with the current process's scan row (`-a`, a set) already looked up.
#[inline(always)]
pub fn record_scan_in(fd: u32, origin: u32, row: Option<*mut ProcessScan>) {
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
    hist(hist::SCAN_BITS, bits);
    if let Some(s) = row {
        // SAFETY: per-CPU value, this CPU only; the slot is bounded.
        unsafe {
            (*s).allocations += 1;
            (*s).next_fd_hits += u64::from(bits == 0);
            let slot = log2_slot(bits) as usize & (fdprof_common::process::SCAN_SLOTS - 1);
            (*s).bits[slot] += 1;
        }
    }
    hist(hist::OPEN_FDS_WORDS, u64::from(fd / 64 - origin / 64 + 1));
    hist(
        hist::FULL_FDS_WORDS,
        u64::from(fd / 4096 - origin / 4096 + 1),
    );
}

/// Process `tgid`'s row of `per_syscall` counters for syscall `index`, created zeroed (and the
/// process's name kept) if new; a full map is a counted drop. Looked up once per syscall.
#[inline(always)]
pub fn process_row(tgid: u32, index: u32) -> Option<*mut ProcessCounts> {
    let key = ProcessSyscall { tgid, index };
    if let Some(p) = PROCESS_SYSCALLS.get_ptr_mut(&key) {
        return Some(p);
    }
    const BPF_NOEXIST: u64 = 1;
    let zero: ProcessCounts = [0; per_syscall::COUNT as usize];
    if PROCESS_SYSCALLS.insert(&key, &zero, BPF_NOEXIST).is_ok()
        && let Ok(comm) = aya_ebpf::helpers::bpf_get_current_comm()
        && PROCESS_COMMS.insert(&tgid, &comm, 0).is_err()
    {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_COMMS_FULL);
    }
    let p = PROCESS_SYSCALLS.get_ptr_mut(&key);
    if p.is_none() {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_SYSCALLS_FULL);
    }
    p
}

/// Process `tgid`'s scan row (`-a`), created zeroed; a full map is a counted drop.
#[inline(always)]
pub fn process_scan(tgid: u32) -> Option<*mut ProcessScan> {
    if let Some(p) = PROCESS_SCANS.get_ptr_mut(&tgid) {
        return Some(p);
    }
    const BPF_NOEXIST: u64 = 1;
    let _ = PROCESS_SCANS.insert(&tgid, &ProcessScan::default(), BPF_NOEXIST);
    let p = PROCESS_SCANS.get_ptr_mut(&tgid);
    if p.is_none() {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_SCANS_FULL);
    }
    p
}

/// The current process's scan row when figures are kept per process (`-a`, a set).
#[inline(always)]
pub fn current_process_scan() -> Option<*mut ProcessScan> {
    crate::kernel::process_of_all().and_then(process_scan)
}

/// A process's table size seen at `max_fds`, in its scan `row` (`-a`, a set); `grew` when a
/// syscall grew it.
#[inline(always)]
pub fn process_table(row: Option<*mut ProcessScan>, max_fds: u64, grew: bool) {
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

/// The current thread's slot of `THREAD_ROWS`, taken if free; `None` when another thread holds
/// it (its figures then go straight into the hashes). Two threads of the same low tid bits
/// taking a free slot in the same instant can both see it free: the one whose write lands
/// second holds it, and the other's first syscall counts in it.
#[inline(always)]
pub fn thread_row(pid_tgid: u64) -> Option<*mut ThreadRow> {
    let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    let row = THREAD_ROWS.get_ptr_mut(tid & (THREAD_SLOTS - 1))?;
    // SAFETY: a valid map value; the tid says whose it is.
    unsafe {
        if (*row).tid != tid || (*row).tgid != tgid {
            if (*row).tid != 0 {
                return None;
            }
            (*row).tgid = tgid;
            (*row).tid = tid;
        }
    }
    Some(row)
}

/// The counters of syscall `index` in the thread's `row`, taken if a place is free: the
/// process's row is made first (with its name), since user space adds a slot only to rows
/// that exist. With every place taken, the process's row itself; `None` when the hash is full.
#[inline(always)]
pub fn thread_counts(row: *mut ThreadRow, index: u32) -> Option<*mut ProcessCounts> {
    let want = index + 1;
    // SAFETY: this thread's own slot.
    unsafe {
        for k in 0..THREAD_SYSCALLS {
            if (*row).syscalls[k].index_plus_one == want {
                return Some(&mut (*row).syscalls[k].counts);
            }
        }
        for k in 0..THREAD_SYSCALLS {
            if (*row).syscalls[k].index_plus_one == 0 {
                process_row((*row).tgid, index)?;
                (*row).syscalls[k].index_plus_one = want;
                return Some(&mut (*row).syscalls[k].counts);
            }
        }
        process_row((*row).tgid, index)
    }
}

/// The scan figures of the thread's `row`, the process's `PROCESS_SCANS` row made first. Where
/// the hash is full (a counted drop), the slot's figures are not marked for user space and are
/// cleared when they are (always a pointer: an `Option` here left the verifier a register
/// without a value on the `None` path).
#[inline(always)]
pub fn thread_scan(row: *mut ThreadRow) -> *mut ProcessScan {
    // SAFETY: this thread's own slot.
    unsafe {
        if (*row).has_scan == 0 && process_scan((*row).tgid).is_some() {
            (*row).scan = ProcessScan::default();
            (*row).has_scan = 1;
        }
        &mut (*row).scan
    }
}

/// Thread `tid` of `tgid` ended (or exec'd under its leader's tid): what its slot holds goes
/// into its process's rows, and the slot is freed. Each part is cleared before it is added, so
/// user space (which reads the hashes, then the slots) can miss it for one read, never count it
/// twice. Rows user space already freed are not made again.
#[inline(always)]
pub fn flush_thread(tid: u32, tgid: u32) {
    let Some(row) = THREAD_ROWS.get_ptr_mut(tid & (THREAD_SLOTS - 1)) else {
        return;
    };
    // SAFETY: the slot of thread `tid`, which has ended or is the current thread.
    unsafe {
        if (*row).tid != tid || (*row).tgid != tgid {
            return;
        }
        for k in 0..THREAD_SYSCALLS {
            let place = &mut (*row).syscalls[k];
            if place.index_plus_one == 0 {
                continue;
            }
            let key = ProcessSyscall {
                tgid,
                index: place.index_plus_one - 1,
            };
            let counts = place.counts;
            place.counts = [0; per_syscall::COUNT as usize];
            place.index_plus_one = 0;
            core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
            if let Some(p) = PROCESS_SYSCALLS.get_ptr_mut(&key) {
                add_counts(&mut *p, &counts);
            }
        }
        if (*row).has_scan != 0 {
            let scan = (*row).scan;
            (*row).scan = ProcessScan::default();
            (*row).has_scan = 0;
            core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
            if let Some(p) = PROCESS_SCANS.get_ptr_mut(&tgid) {
                (*p).add(&scan);
            }
        }
        (*row).tgid = 0;
        (*row).tid = 0;
    }
}
