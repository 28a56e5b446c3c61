//! Figures kept per process (`-a`, a target set): each process's rows in per-CPU hashes, and
//! the running threads' slots (`THREAD_ROWS`) that hold their figures until the thread ends,
//! so that a syscall adds to its own slot and not to a hashed row.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuHashMap},
};
use fdprof_common::{
    counters::{drop, per_syscall},
    process::{
        COMM_LEN, PROCESS_ROWS, PROCESSES, ProcessCounts, ProcessScan, ProcessSyscall,
        THREAD_SLOTS, THREAD_SYSCALLS, ThreadRow, add_counts,
    },
};

use crate::{counters::dropped, filter};

/// Each process's fd syscall counters under `-a`.
#[map]
static PROCESS_SYSCALLS: PerCpuHashMap<ProcessSyscall, ProcessCounts> =
    PerCpuHashMap::with_max_entries(PROCESS_ROWS, 0);

/// Each process's name under `-a`, as it was at its latest first use of a syscall (after an
/// exec, the new program's).
#[map]
static PROCESS_COMMS: HashMap<u32, [u8; COMM_LEN]> = HashMap::with_max_entries(PROCESSES, 0);

/// Each process's allocator scans and table size under `-a`.
#[map]
static PROCESS_SCANS: PerCpuHashMap<u32, ProcessScan> =
    PerCpuHashMap::with_max_entries(PROCESSES, 0);

/// `BPF_F_MMAPABLE`: user space reads the array through a mapping, without a call per slot.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Running threads' figures not yet in their process's rows (`process::ThreadRow`).
#[map]
static THREAD_ROWS: Array<ThreadRow> = Array::with_max_entries(THREAD_SLOTS, BPF_F_MMAPABLE);

/// Process `tgid`'s row of `per_syscall` counters for syscall `index`, created zeroed (and the
/// process's name kept) if new; a full map is a counted drop. Looked up once per syscall.
#[inline(always)]
pub(crate) fn process_row(tgid: u32, index: u32) -> Option<*mut ProcessCounts> {
    let key = ProcessSyscall { tgid, index };
    if let Some(p) = PROCESS_SYSCALLS.get_ptr_mut(key) {
        return Some(p);
    }
    const BPF_NOEXIST: u64 = 1;
    let zero: ProcessCounts = [0; per_syscall::COUNT as usize];
    if PROCESS_SYSCALLS.insert(key, zero, BPF_NOEXIST).is_ok()
        && let Ok(comm) = aya_ebpf::helpers::bpf_get_current_comm()
        && PROCESS_COMMS.insert(tgid, comm, 0).is_err()
    {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_COMMS_FULL);
    }
    let p = PROCESS_SYSCALLS.get_ptr_mut(key);
    if p.is_none() {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_SYSCALLS_FULL);
    }
    p
}

/// Process `tgid`'s scan row (`-a`), created zeroed; a full map is a counted drop.
#[inline(always)]
pub(crate) fn process_scan(tgid: u32) -> Option<*mut ProcessScan> {
    if let Some(p) = PROCESS_SCANS.get_ptr_mut(tgid) {
        return Some(p);
    }
    const BPF_NOEXIST: u64 = 1;
    let _ = PROCESS_SCANS.insert(tgid, ProcessScan::default(), BPF_NOEXIST);
    let p = PROCESS_SCANS.get_ptr_mut(tgid);
    if p.is_none() {
        dropped(drop::PROBE_PROCESSES, drop::PROCESS_SCANS_FULL);
    }
    p
}

/// The current process's scan row when figures are kept per process (`-a`, a set).
#[inline(always)]
pub(crate) fn current_process_scan() -> Option<*mut ProcessScan> {
    filter::process_of_all().and_then(process_scan)
}
/// The current thread's slot of `THREAD_ROWS`, taken if free; `None` when another thread holds
/// it (its figures then go straight into the hashes). Two threads of the same low tid bits
/// taking a free slot in the same instant can both see it free: the one whose write lands
/// second holds it, and the other's first syscall counts in it.
#[inline(always)]
pub(crate) fn thread_row(pid_tgid: u64) -> Option<*mut ThreadRow> {
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
pub(crate) fn thread_counts(row: *mut ThreadRow, index: u32) -> Option<*mut ProcessCounts> {
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
pub(crate) fn thread_scan(row: *mut ThreadRow) -> *mut ProcessScan {
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
pub(crate) fn flush_thread(tid: u32, tgid: u32) {
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
            if let Some(p) = PROCESS_SYSCALLS.get_ptr_mut(key) {
                add_counts(&mut *p, &counts);
            }
        }
        if (*row).has_scan != 0 {
            let scan = (*row).scan;
            (*row).scan = ProcessScan::default();
            (*row).has_scan = 0;
            core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
            if let Some(p) = PROCESS_SCANS.get_ptr_mut(tgid) {
                (*p).add(&scan);
            }
        }
        (*row).tgid = 0;
        (*row).tid = 0;
    }
}
