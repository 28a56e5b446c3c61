//! Reading the current task's fd table through offsets handed in as load-time globals (the Rust
//! eBPF side has no CO-RE relocations), and the target filter.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel},
    macros::map,
    maps::{Array, HashMap},
};
use fdprof_common::{
    counters::drop,
    probes::target_kind,
    targets::{CgroupKey, MAX_CGROUPS, MAX_COMMS, MAX_TARGETS, TargetEntry},
    trace::MAX_FOLLOWED,
};

// Set by user space before load (`EbpfLoader::override_global`), under the names of
// `fdprof_common::probes::setting`.
#[unsafe(no_mangle)]
static TARGET_KIND: u32 = 0;
#[unsafe(no_mangle)]
static TARGET_ID: u32 = 0;
#[unsafe(no_mangle)]
static OFF_TASK_FILES: u32 = 0;
#[unsafe(no_mangle)]
static OFF_FILES_NEXT_FD: u32 = 0;
#[unsafe(no_mangle)]
static OFF_FILES_FDT: u32 = 0;
#[unsafe(no_mangle)]
static OFF_FILES_FILE_LOCK: u32 = 0;
#[unsafe(no_mangle)]
static OFF_FDT_MAX_FDS: u32 = 0;
#[unsafe(no_mangle)]
static OFF_FDT_OPEN_FDS: u32 = 0;
#[unsafe(no_mangle)]
static OFF_TASK_SIGNAL: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SIGNAL_LIVE: u32 = 0;
#[unsafe(no_mangle)]
static OFF_TASK_TGID: u32 = 0;
/// Waits of at least this many ns are sent as events; never unless set.
#[unsafe(no_mangle)]
static SLOW_NS: u64 = u64::MAX;
/// Locks recognised by kind; `u32::MAX` where the kernel has no such field.
#[unsafe(no_mangle)]
static OFF_TASK_MM: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_MM_MMAP_LOCK: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_TASK_SIGHAND: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_SIGHAND_SIGLOCK: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_TASK_CFS_RQ: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_CFS_RQ_RQ: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_RQ_LOCK: u32 = u32::MAX;
/// The kernel image's data: a lock inside is static.
#[unsafe(no_mangle)]
static IMAGE_START: u64 = 0;
#[unsafe(no_mangle)]
static IMAGE_END: u64 = 0;
/// 1: fd syscalls are timed, entry to exit (two clock reads each); 0: only counted.
#[unsafe(no_mangle)]
static LATENCY: u32 = 0;
/// 1: every fd-table operation of the target is sent to the `TRACE` ring buffer.
#[unsafe(no_mangle)]
static TRACE_ON: u32 = 0;
/// 1 (`target_kind::TGID` only): the processes the target starts are followed from their fork
/// (`FOLLOWED`), their figures added to its own.
#[unsafe(no_mangle)]
static CHILDREN: u32 = 0;
/// A cgroup's id and hierarchy (`--cgroup`); `u32::MAX` where the kernel lacks a field.
#[unsafe(no_mangle)]
static OFF_CGROUP_KN: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_KERNFS_ID: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_CGROUP_ROOT: u32 = u32::MAX;
#[unsafe(no_mangle)]
static OFF_ROOT_HIERARCHY: u32 = u32::MAX;
/// 1 where the kernel has `bpf_get_current_task_btf` (5.11+). Without it the BTF-typed
/// programs take the read-helper path; a frozen global, so the verifier never walks the direct
/// loads' branch and the helper it lacks is never seen.
#[unsafe(no_mangle)]
static TASK_BTF: u32 = 0;

/// Settings user space writes after attaching (a global is fixed before load, but which
/// probes attach is only known after): `CONFIG[DIRECT_ALLOC]` = 1 once the allocator itself
/// is probed, so scans are measured there and not from the syscall tracepoints.
#[map]
pub static CONFIG: Array<u32> = Array::with_max_entries(fdprof_common::fnops::CONFIG_ENTRIES, 0);

/// Processes followed besides the target (`target_kind::TGID`): under the trace, its forks with
/// tables of their own; under `CHILDREN`, every process it or a followed one starts; each until
/// it ends. Written only at fork and exit, read (lock-free) by the target filter.
#[map]
static FOLLOWED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_FOLLOWED, 0);

/// 1 once any process went into `FOLLOWED`: until then the filter answers for other processes
/// with this array read, which the verifier inlines, and not a hash lookup (a launched server
/// that never forks costs the rest of the machine nothing). Set at the fork, before the child
/// first runs; never cleared (closing it again would need a count kept atomically).
#[map]
static ANY_FOLLOWED: Array<u32> = Array::with_max_entries(1, 0);

/// The target set (`target_kind::SET`): tgid → how it joined. User space fills it; the
/// programs add `--comm` names' processes at exec and rename and targets' children at fork, and
/// remove processes that end. Its size is set at load (`--max-processes`).
#[map]
pub static TARGETS: HashMap<u32, TargetEntry> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// The set's membership by pid, what the filter reads (see `targets::MAX_MEMBER_PIDS`); its
/// size is set at load. Written with `TARGETS`, each pid's element by that pid's joins and
/// leaves alone.
#[map]
static MEMBERS: Array<u8> = Array::with_max_entries(1, 0);

/// Whether process `tgid` is in the set: an array load, or a `TARGETS` lookup for a pid past
/// `MEMBERS`.
#[inline(always)]
pub fn is_member(tgid: u32) -> bool {
    match MEMBERS.get(tgid) {
        Some(&m) => m != 0,
        // SAFETY: the value is not kept.
        None => unsafe { TARGETS.get(&tgid).is_some() },
    }
}

/// Marks process `tgid` in or out of the set (`TARGETS` says how it joined).
#[inline(always)]
pub fn mark_member(tgid: u32, member: bool) {
    if let Some(m) = MEMBERS.get_ptr_mut(tgid) {
        // SAFETY: a valid map value; the element is this pid's alone.
        unsafe { *m = u8::from(member) };
    }
}

/// Names whose processes join the set (comm, NUL-padded → slot), when `CONFIG[COMMS]` is on.
#[map]
pub static TARGET_COMMS: HashMap<[u8; 16], u32> = HashMap::with_max_entries(MAX_COMMS, 0);

/// Cgroups whose processes join the set when moved in (and their hierarchies' marks), when
/// `CONFIG[CGROUPS]` is on.
#[map]
pub static TARGET_CGROUPS: HashMap<CgroupKey, u32> = HashMap::with_max_entries(MAX_CGROUPS, 0);

/// Whether cgroups are followed in the kernel (a `--cgroup` target set).
#[inline(always)]
pub fn cgroups_on() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_CGROUPS)
        .is_some_and(|&v| v != 0)
}

/// `struct cgroup *cgrp` as `TARGET_CGROUPS` keys it; `None` where the kernel's fields are
/// unknown or unreadable.
#[inline(always)]
pub fn cgroup_key(cgrp: u64) -> Option<CgroupKey> {
    let (kn_off, id_off) = (global(&OFF_CGROUP_KN), global(&OFF_KERNFS_ID));
    let (root_off, hier_off) = (global(&OFF_CGROUP_ROOT), global(&OFF_ROOT_HIERARCHY));
    if kn_off == u32::MAX || id_off == u32::MAX || root_off == u32::MAX || hier_off == u32::MAX {
        return None;
    }
    let kn = read::<u64>(cgrp + u64::from(kn_off)).filter(|&k| k != 0)?;
    let root = read::<u64>(cgrp + u64::from(root_off)).filter(|&r| r != 0)?;
    Some(CgroupKey {
        hierarchy: read::<u32>(root + u64::from(hier_off))?,
        _pad: 0,
        id: read::<u64>(kn + u64::from(id_off))?,
    })
}

/// Whether names are matched in the kernel (a `--comm` target set).
#[inline(always)]
pub fn comms_on() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_COMMS)
        .is_some_and(|&v| v != 0)
}

/// Whether the target is a set (`TARGETS`).
#[inline(always)]
pub fn target_is_set() -> bool {
    global(&TARGET_KIND) == target_kind::SET
}

/// fdprof's own pid under `-a` and a set (never profiled).
#[inline(always)]
pub fn own_tgid() -> u32 {
    global(&TARGET_ID)
}

#[inline(always)]
pub fn scan_in_syscalls() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_DIRECT_ALLOC)
        .is_none_or(|&v| v == 0)
}

/// Whether `expand_files` is probed directly: expansion events come from there.
#[inline(always)]
pub fn expand_probed() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_DIRECT_EXPAND)
        .is_some_and(|&v| v != 0)
}

/// Whether user space reads the events ring buffer.
#[inline(always)]
pub fn events_on() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_EVENTS)
        .is_some_and(|&v| v != 0)
}

/// Whether the slow-path probe is the source of every spinlock's waits (no lock tracepoints).
#[inline(always)]
pub fn slowpath_all() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_SLOWPATH_ALL)
        .is_some_and(|&v| v != 0)
}

/// Whether user space reads the process starts (`record -a`).
#[inline(always)]
pub fn starts_on() -> bool {
    CONFIG
        .get(fdprof_common::fnops::CONFIG_STARTS)
        .is_some_and(|&v| v != 0)
}

#[inline(always)]
fn global<T: Copy>(v: &'static T) -> T {
    // SAFETY: a valid static; volatile so the loader's value is read, not the compile-time one.
    unsafe { core::ptr::read_volatile(v) }
}

/// The slow-wait threshold.
#[inline(always)]
pub fn slow_ns() -> u64 {
    global(&SLOW_NS)
}

/// Whether fd syscall latency is measured. A frozen global: the verifier drops the clock
/// reads from the programs when it is off.
#[inline(always)]
pub fn latency_on() -> bool {
    global(&LATENCY) != 0
}

/// Whether `btf` (a BTF-typed program's direct loads) can be used here: the kernel has
/// `bpf_get_current_task_btf`.
#[inline(always)]
pub fn direct_loads(btf: bool) -> bool {
    btf && global(&TASK_BTF) != 0
}

/// Whether the fd-table trace is on (`record --trace`). A frozen global: the verifier drops
/// every trace path from the programs when it is off.
#[inline(always)]
pub fn trace_on() -> bool {
    global(&TRACE_ON) != 0
}

/// Whether the processes a single target starts are followed (a launched command). A frozen
/// global: with it and the trace off, the verifier drops the `FOLLOWED` lookup from the filter.
#[inline(always)]
pub fn children_on() -> bool {
    global(&CHILDREN) != 0
}

/// The current process when figures are kept per process (`-a`, a target set): what they are
/// keyed by. `None` for a single target, whose figures are all one process's.
#[inline(always)]
pub fn process_of_all() -> Option<u32> {
    per_process().then(|| (bpf_get_current_pid_tgid() >> 32) as u32)
}

/// [`process_of_all`] of a `pid_tgid` already asked for.
#[inline(always)]
pub fn process_of(pid_tgid: u64) -> Option<u32> {
    per_process().then_some((pid_tgid >> 32) as u32)
}

#[inline(always)]
fn per_process() -> bool {
    let kind = global(&TARGET_KIND);
    kind == target_kind::ALL || kind == target_kind::SET
}

/// `current->signal` and its `live` count (threads that have not yet passed `do_exit`'s
/// decrement).
#[inline(always)]
pub fn current_signal_live() -> Option<(u64, i32)> {
    let task = unsafe { bpf_get_current_task() };
    let signal = read::<u64>(task + u64::from(global(&OFF_TASK_SIGNAL))).filter(|&s| s != 0)?;
    let live = read::<i32>(signal + u64::from(global(&OFF_SIGNAL_LIVE)))?;
    Some((signal, live))
}

/// The current thread's tid when it belongs to what is being profiled. Programs take the tid
/// from here rather than asking again: a helper call costs ~15 ns here.
#[inline(always)]
pub fn target_tid() -> Option<u32> {
    target_pid_tgid().map(|pid_tgid| pid_tgid as u32)
}

/// [`target_tid`], as the whole `pid_tgid` for callers that need the process too.
#[inline(always)]
pub fn target_pid_tgid() -> Option<u64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let ours = match global(&TARGET_KIND) {
        // Every process but fdprof itself (its pid is the id then).
        target_kind::ALL => (pid_tgid >> 32) as u32 != global(&TARGET_ID),
        target_kind::TGID => {
            let tgid = (pid_tgid >> 32) as u32;
            tgid == global(&TARGET_ID) || ((trace_on() || children_on()) && followed(tgid))
        }
        target_kind::SET => is_member((pid_tgid >> 32) as u32),
        _ => tid == global(&TARGET_ID),
    };
    ours.then_some(pid_tgid)
}

#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(addr as *const T).ok() }
}

/// Whether the current task has a user address space (`current->mm`): kernel threads have
/// none, so no user stack. True when the kernel's offsets are unknown.
#[inline(always)]
pub fn current_has_mm() -> bool {
    let off = global(&OFF_TASK_MM);
    if off == u32::MAX {
        return true;
    }
    let task = unsafe { bpf_get_current_task() };
    read::<u64>(task + u64::from(off)).is_none_or(|mm| mm != 0)
}

/// `current->files`.
#[inline(always)]
pub fn current_files() -> Option<u64> {
    task_files(unsafe { bpf_get_current_task() })
}

/// `task->files`.
#[inline(always)]
pub fn task_files(task: u64) -> Option<u64> {
    read::<u64>(task + u64::from(global(&OFF_TASK_FILES))).filter(|&f| f != 0)
}

/// `task->tgid`.
#[inline(always)]
pub fn task_tgid(task: u64) -> Option<u32> {
    read::<u32>(task + u64::from(global(&OFF_TASK_TGID))).filter(|&t| t != 0)
}

/// Whether process `tgid` is followed (started by the target, or by one followed).
#[inline(always)]
fn followed(tgid: u32) -> bool {
    // SAFETY: the value is not kept.
    ANY_FOLLOWED.get(0).is_some_and(|&v| v != 0) && unsafe { FOLLOWED.get(&tgid).is_some() }
}

/// Follows process `tgid` from now on; a full map is a counted drop of `probe` (the trace's:
/// its operations are missing from the trace; the targets': from the figures).
#[inline(always)]
pub fn follow(tgid: u32, probe: u32) {
    if FOLLOWED.insert(&tgid, &1, 0).is_err() {
        crate::maps::dropped(probe, drop::MAP_FULL);
    } else if let Some(any) = ANY_FOLLOWED.get_ptr_mut(0) {
        // SAFETY: a valid map value; every writer writes the same 1.
        unsafe { *any = 1 };
    }
}

/// Stops following `tgid` (it has ended: its pid may be reused).
#[inline(always)]
pub fn unfollow(tgid: u32) {
    let _ = FOLLOWED.remove(&tgid);
}

/// `&current->files->file_lock`.
#[inline(always)]
pub fn current_file_lock() -> Option<u64> {
    Some(own_lock(OwnLock::FileLock, false)).filter(|&lock| lock != 0)
}

/// `files->next_fd`, `files->fdt` and `fdt->max_fds`.
#[inline(always)]
pub fn table_state(files: u64) -> Option<(u32, u64, u32)> {
    let next_fd = read::<u32>(files + u64::from(global(&OFF_FILES_NEXT_FD)))?;
    let fdt = read::<u64>(files + u64::from(global(&OFF_FILES_FDT)))?;
    let max_fds = read::<u32>(fdt + u64::from(global(&OFF_FDT_MAX_FDS)))?;
    Some((next_fd, fdt, max_fds))
}

/// [`table_state`] of the current task through BTF-checked direct loads, for tp_btf programs:
/// the verifier turns them into plain loads with an exception fixup, much cheaper than
/// `bpf_probe_read_kernel`. The offsets are constants to the verifier (frozen `.rodata`).
#[inline(always)]
pub fn current_table_state_btf() -> Option<(u32, u64, u32)> {
    // SAFETY: a trusted BTF pointer to the current task; every load below is checked by the
    // verifier against the kernel's BTF and fixed up on fault.
    unsafe {
        let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
        let files = *(task.add(global(&OFF_TASK_FILES) as usize) as *const *const u8);
        if files.is_null() {
            return None;
        }
        let next_fd = *(files.add(global(&OFF_FILES_NEXT_FD) as usize) as *const u32);
        let fdt = *(files.add(global(&OFF_FILES_FDT) as usize) as *const *const u8);
        if fdt.is_null() {
            return None;
        }
        let max_fds = *(fdt.add(global(&OFF_FDT_MAX_FDS) as usize) as *const u32);
        Some((next_fd, fdt as u64, max_fds))
    }
}

/// `open_fds` words between the first and the last that [`open_in_range`] reads at most:
/// close_range over ~32k fds.
const RANGE_WORDS: u32 = 512;

/// How many fds in `first..=last` are open in `fdt`, and whether the range was read whole (not
/// when wider than [`RANGE_WORDS`] words: then the count is a floor). Branch-free per word, so
/// the verifier walks the loop once per iteration, not once per path.
#[inline(always)]
pub fn open_in_range(fdt: u64, max_fds: u32, first: u32, last: u32) -> (u32, bool) {
    if first >= max_fds || first > last {
        return (0, true);
    }
    let last = if last < max_fds { last } else { max_fds - 1 };
    let Some(bitmap) = read::<u64>(fdt + u64::from(global(&OFF_FDT_OPEN_FDS))) else {
        return (0, false);
    };
    // An unreadable word counts as empty.
    let word = |w: u32| -> u64 {
        let mut v = 0u64;
        // SAFETY: the helper copes with any source address and writes 8 bytes to `v`.
        unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                (&mut v as *mut u64).cast(),
                8,
                (bitmap + u64::from(w) * 8) as *const _,
            )
        };
        v
    };
    let (w0, w1) = (first / 64, last / 64);
    let low = !0u64 << (first % 64);
    let high = !0u64 >> (63 - last % 64);
    if w0 == w1 {
        return ((word(w0) & low & high).count_ones(), true);
    }
    let mut open = (word(w0) & low).count_ones() + (word(w1) & high).count_ones();
    let middle = w1 - w0 - 1;
    for i in 0..RANGE_WORDS {
        if i >= middle {
            break;
        }
        open += word(w0 + 1 + i).count_ones();
    }
    (open, middle <= RANGE_WORDS)
}

/// Whether `fd` is open in `fdt` (its bit in `open_fds`).
#[inline(always)]
pub fn fd_is_open(fdt: u64, max_fds: u32, fd: u32) -> bool {
    if fd >= max_fds {
        return false;
    }
    let Some(bitmap) = read::<u64>(fdt + u64::from(global(&OFF_FDT_OPEN_FDS))) else {
        return false;
    };
    read::<u64>(bitmap + u64::from(fd / 64) * 8).is_some_and(|w| w & (1 << (fd % 64)) != 0)
}

/// Whether `lock` lies in the kernel image (a static lock).
#[inline(always)]
pub fn is_static(lock: u64) -> bool {
    lock >= global(&IMAGE_START) && lock < global(&IMAGE_END)
}

/// The lock of the runqueue the current task runs on, `current->se.cfs_rq->rq->__lock` (0 where
/// the kernel has no such fields): the task is running, so that is this CPU's runqueue. As
/// [`own_lock`], `btf` selects direct loads.
#[inline(always)]
pub fn running_rq_lock(btf: bool) -> u64 {
    let (se_cfs_rq, cfs_rq_rq, rq_lock) = (
        global(&OFF_TASK_CFS_RQ),
        global(&OFF_CFS_RQ_RQ),
        global(&OFF_RQ_LOCK),
    );
    if se_cfs_rq == u32::MAX || cfs_rq_rq == u32::MAX || rq_lock == u32::MAX {
        return 0;
    }
    let rq = if direct_loads(btf) {
        // SAFETY: as in own_lock: loads the verifier checks against the kernel's BTF (a
        // `struct cfs_rq *`, then a `struct rq *`) and fixes up on fault.
        unsafe {
            let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
            let cfs_rq = *(task.add(se_cfs_rq as usize) as *const *const u8);
            if cfs_rq.is_null() {
                return 0;
            }
            *(cfs_rq.add(cfs_rq_rq as usize) as *const *const u8) as u64
        }
    } else {
        let task = unsafe { bpf_get_current_task() };
        read::<u64>(task + u64::from(se_cfs_rq))
            .filter(|&c| c != 0)
            .and_then(|c| read::<u64>(c + u64::from(cfs_rq_rq)))
            .unwrap_or(0)
    };
    if rq == 0 { 0 } else { rq + u64::from(rq_lock) }
}

/// A lock of the current task's own structures.
#[derive(Clone, Copy)]
pub enum OwnLock {
    /// `current->files->file_lock`
    FileLock,
    /// `current->mm->mmap_lock`
    MmapLock,
    /// `current->sighand->siglock`
    Siglock,
}

/// The address of `which` (0 when the task has no such structure); `btf` selects
/// BTF-checked direct loads (tp_btf programs only), much cheaper than `bpf_probe_read_kernel`.
#[inline(always)]
pub fn own_lock(which: OwnLock, btf: bool) -> u64 {
    let (off, inner) = match which {
        OwnLock::FileLock => (global(&OFF_TASK_FILES), global(&OFF_FILES_FILE_LOCK)),
        OwnLock::MmapLock => (global(&OFF_TASK_MM), global(&OFF_MM_MMAP_LOCK)),
        OwnLock::Siglock => (global(&OFF_TASK_SIGHAND), global(&OFF_SIGHAND_SIGLOCK)),
    };
    if off == u32::MAX || inner == u32::MAX {
        return 0;
    }
    let ptr = if direct_loads(btf) {
        // SAFETY: as in current_table_state_btf: a trusted BTF pointer and a load the verifier
        // checks against the kernel's BTF and fixes up on fault. Only an address is computed
        // from the loaded pointer.
        unsafe {
            let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
            *(task.add(off as usize) as *const *const u8) as u64
        }
    } else {
        let task = unsafe { bpf_get_current_task() };
        read::<u64>(task + u64::from(off)).unwrap_or(0)
    };
    if ptr == 0 { 0 } else { ptr + u64::from(inner) }
}
