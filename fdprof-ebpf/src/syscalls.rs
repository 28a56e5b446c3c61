//! fd syscalls seen through `raw_syscalls:sys_enter/sys_exit` (tp_btf, or classic tracepoints):
//! at entry `next_fd` and `max_fds` (not for close), at exit the fd(s), giving per-syscall counts,
//! scan lengths from the origin read at entry, and table growth; latency with `--latency` only.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user},
    macros::{btf_tracepoint, map, tracepoint},
    maps::Array,
    programs::{BtfTracePointContext, TracePointContext},
};
use fdprof_common::{
    counters::{drop, global, per_syscall},
    events::{EventRecord, kind},
    process::{ProcessCounts, ProcessScan, ThreadRow},
    syscalls::{
        CLOSE_RANGE_CLOEXEC, Effect, F_DUPFD, F_DUPFD_CLOEXEC, IN_FLIGHT_SLOTS, SyscallEntry,
    },
};

use crate::{
    config,
    counters::{self, GLOBALS, SYSCALL_COUNTERS, dropped},
    filter, kernel, processes, scans,
    settings::{direct_loads, latency_on, trace_on},
    streams,
    syscall_table::{effect_of, index_of, needs_args},
    trace,
};

/// Syscalls between entry and exit. A thread never has two, so its slot is its own unless
/// another thread with the same low tid bits is inside an fd syscall at the same moment: that
/// collision is counted as a drop.
#[map]
static IN_FLIGHT: Array<SyscallEntry> = Array::with_max_entries(IN_FLIGHT_SLOTS, 0);

#[inline(always)]
fn slot(tid: u32) -> Option<*mut SyscallEntry> {
    IN_FLIGHT.get_ptr_mut(tid & (IN_FLIGHT_SLOTS - 1))
}

/// The counters one syscall's exit adds to: the machine's, and (`-a`, a target set) its
/// process's, in the thread's slot (`THREAD_ROWS`) or else its process's row, found once for
/// all of them. The pointers are null for none, not `Option`s: an `Option` of a pointer kept on
/// the stack leaves its pointer unwritten when `None`, a read 5.10's verifier refuses.
#[derive(Clone, Copy)]
struct Counts {
    index: u32,
    /// The process the figures are kept under (`-a`, a target set).
    tgid: Option<u32>,
    /// The thread's slot, when it holds it.
    thread: *mut ThreadRow,
    row: *mut ProcessCounts,
}

impl Counts {
    /// `pid_tgid`: the current thread's, already asked for.
    #[inline(always)]
    fn of(index: u32, pid_tgid: u64) -> Self {
        let tgid = filter::process_of(pid_tgid);
        let thread = match tgid {
            Some(_) => processes::thread_row(pid_tgid).unwrap_or(core::ptr::null_mut()),
            None => core::ptr::null_mut(),
        };
        let row = match tgid {
            Some(_) if !thread.is_null() => processes::thread_counts(thread, index),
            Some(tgid) => processes::process_row(tgid, index),
            None => None,
        };
        Self {
            index,
            tgid,
            thread,
            row: row.unwrap_or(core::ptr::null_mut()),
        }
    }

    /// The process's scan figures (`-a`, a target set): in the thread's slot, or its row.
    #[inline(always)]
    fn scan(self) -> Option<*mut ProcessScan> {
        match self.thread.is_null() {
            false => Some(processes::thread_scan(self.thread)),
            true => self.tgid.and_then(processes::process_scan),
        }
    }

    #[inline(always)]
    fn add(self, counter: u32, n: u64) {
        counters::add(
            &SYSCALL_COUNTERS,
            self.index * per_syscall::COUNT + counter,
            n,
        );
        if !self.row.is_null() && counter < per_syscall::COUNT {
            // SAFETY: per-CPU value, this CPU only; the counter is checked above.
            unsafe { (*self.row)[counter as usize] += n };
        }
    }
}

/// `args` are the first four syscall arguments; `btf` selects direct BTF loads (tp_btf only).
#[inline(always)]
pub(crate) fn on_enter(nr: u64, args: [u64; 4], btf: bool) {
    let Some(index) = index_of(nr) else { return };
    let Some(tid) = filter::target_tid() else {
        return;
    };
    let effect = effect_of(index);
    let mut start = 0;
    if effect == Effect::FcntlDup {
        if args[1] != F_DUPFD && args[1] != F_DUPFD_CLOEXEC {
            return;
        }
        start = args[2] as u32;
    }
    // close needs nothing of the table (it cannot grow it, and what it closes is its
    // return): half the fd syscalls of a typical loop skip these reads.
    let (next_fd, fdt, max_fds) = if effect == Effect::Close {
        (0, 0, 0)
    } else {
        let state = if direct_loads(btf) {
            kernel::current_table_state_btf()
        } else {
            kernel::current_files().and_then(kernel::table_state)
        };
        let Some(state) = state else {
            dropped(drop::PROBE_SYSCALLS, drop::READ_FAILED);
            return;
        };
        let max_fds = u64::from(state.2);
        counters::set_min_nonzero(&GLOBALS, global::MAX_FDS_FIRST, max_fds);
        counters::set_max(&GLOBALS, global::MAX_FDS_SEEN, max_fds);
        state
    };
    let closes_target = effect == Effect::Install
        && args[0] != args[1]
        && kernel::fd_is_open(fdt, max_fds, args[1] as u32);
    // close_range closes what is open in its range, unless it only marks it close-on-exec.
    let mut in_range = 0;
    if effect == Effect::CloseRange && args[2] & CLOSE_RANGE_CLOEXEC == 0 {
        let (open, whole) = kernel::open_in_range(fdt, max_fds, args[0] as u32, args[1] as u32);
        if !whole {
            dropped(drop::PROBE_SYSCALLS, drop::READ_FAILED);
        }
        in_range = open;
    }
    let mut entry = SyscallEntry {
        tid,
        in_range,
        start_ns: if latency_on() || trace_on() {
            unsafe { bpf_ktime_get_ns() }
        } else {
            0
        },
        fd_pair: args[fdprof_common::syscalls::fd_pair_arg(nr as u32) & 3],
        next_fd,
        max_fds,
        start,
        index: index as u8,
        closes_target: closes_target as u8,
        cloexec: 0,
        allocs: 0,
        pending_ns: 0,
        locked_ns: [0; 2],
    };
    if trace_on() {
        trace::keep(&mut entry, index, args);
    }
    let Some(slot) = slot(tid) else { return };
    // SAFETY: a valid map value; only this thread's syscalls use a slot holding its tid.
    unsafe {
        if (*slot).tid != 0 {
            dropped(drop::PROBE_SYSCALLS, drop::MAP_FULL);
        }
        store(&mut *slot, &entry);
    }
}

/// Stores `e` in its slot, field by field, and the fields only the trace reads only under it:
/// stored whole, the struct's zero tail starts at an odd offset and was written a byte at a
/// time (a memset loop of 25 stores) on every fd syscall.
#[inline(always)]
fn store(slot: &mut SyscallEntry, e: &SyscallEntry) {
    slot.tid = e.tid;
    slot.in_range = e.in_range;
    slot.start_ns = e.start_ns;
    slot.fd_pair = e.fd_pair;
    slot.next_fd = e.next_fd;
    slot.max_fds = e.max_fds;
    slot.start = e.start;
    slot.index = e.index;
    slot.closes_target = e.closes_target;
    if trace_on() {
        slot.cloexec = e.cloexec;
        slot.allocs = e.allocs;
        slot.pending_ns = e.pending_ns;
        slot.locked_ns = e.locked_ns;
    }
}

/// The current thread's fd syscall in flight, when it is traced (`record --trace`).
#[inline(always)]
fn traced_entry() -> Option<*mut SyscallEntry> {
    if !trace_on() {
        return None;
    }
    let tid = filter::target_tid()?;
    let s = slot(tid)?;
    // SAFETY: a valid map value; its tid says whose it is.
    (unsafe { (*s).tid } == tid).then_some(s)
}

/// An in-lock probe (direct modes, `record --trace`): the current syscall is now inside its
/// table's `file_lock` section. The probes sit just after each `spin_lock(&files->file_lock)`
/// of the allocator and close paths (expansion's re-locking included), so the last moment
/// seen is in the section that completes the operation.
#[inline(always)]
pub(crate) fn locked_now() {
    if let Some(s) = traced_entry() {
        // SAFETY: this thread's own slot.
        unsafe { (*s).pending_ns = bpf_ktime_get_ns() };
    }
}

/// The allocator returned: its moment is the last one seen inside `file_lock`.
#[inline(always)]
pub(crate) fn allocator_returned() {
    if let Some(s) = traced_entry() {
        // SAFETY: this thread's own slot.
        unsafe {
            let n = (*s).allocs;
            if n < 2 {
                (*s).locked_ns[n as usize] = (*s).pending_ns;
            }
            (*s).allocs = n.saturating_add(1);
            (*s).pending_ns = 0;
        }
    }
}

/// One allocation of `fd` scanned from `origin`; `scan` is the process's scan row.
#[inline(always)]
fn allocated(counts: Counts, scan: Option<*mut ProcessScan>, fd: u32, origin: u32) {
    counts.add(per_syscall::ALLOCS, 1);
    // With direct probes on the allocator the origin is read there, exactly.
    if config::scan_in_syscalls() {
        scans::record_scan_in(fd, origin, scan);
    }
}

/// Exit of any syscall of the current thread: ours when its slot holds an entry of this thread.
#[inline(always)]
pub(crate) fn on_exit(ret: i64) {
    let Some(pid_tgid) = filter::target_pid_tgid() else {
        return;
    };
    let tid = pid_tgid as u32;
    let Some(slot) = slot(tid) else { return };
    // SAFETY: a valid map value, owned by this thread while it holds its tid.
    let entry = unsafe {
        if (*slot).tid != tid {
            return;
        }
        (*slot).tid = 0;
        *slot
    };
    let index = u32::from(entry.index);
    if latency_on() {
        let now = unsafe { bpf_ktime_get_ns() };
        counters::hist(index, now.saturating_sub(entry.start_ns));
    }
    let counts = Counts::of(index, pid_tgid);
    counts.add(per_syscall::CALLS, 1);
    if trace_on() {
        trace::syscall_exit(&entry, ret);
    }
    let effect = effect_of(index);
    // Per process (`-a`, a set), the table size seen at entry goes into its scan row, looked
    // up here once for that and the scan figures rather than at entry and again here.
    let scan = match effect {
        Effect::Close => None,
        _ => counts.scan(),
    };
    scans::process_table(scan, u64::from(entry.max_fds), false);
    if ret < 0 {
        counts.add(per_syscall::ERRORS, 1);
        return;
    }
    let origin = if entry.start > entry.next_fd {
        entry.start
    } else {
        entry.next_fd
    };
    match effect {
        Effect::Alloc | Effect::FcntlDup => {
            counts.add(per_syscall::FDS_CREATED, 1);
            allocated(counts, scan, ret as u32, origin);
            check_growth(ret as u32, &entry, scan);
        }
        Effect::AllocPair => {
            counts.add(per_syscall::FDS_CREATED, 2);
            match unsafe { bpf_probe_read_user(entry.fd_pair as *const [i32; 2]) } {
                Ok([a, b]) => {
                    allocated(counts, scan, a as u32, origin);
                    // The second allocation starts where the first left next_fd.
                    let second = (a as u32 + 1).max(origin);
                    allocated(counts, scan, b as u32, second);
                    check_growth((a as u32).max(b as u32), &entry, scan);
                }
                Err(_) => dropped(drop::PROBE_SYSCALLS, drop::READ_FAILED),
            }
        }
        Effect::Install => {
            counts.add(per_syscall::FDS_CREATED, 1);
            counts.add(per_syscall::FDS_CLOSED, u64::from(entry.closes_target));
            check_growth(ret as u32, &entry, scan);
        }
        Effect::Close => counts.add(per_syscall::FDS_CLOSED, 1),
        Effect::CloseRange => counts.add(per_syscall::FDS_CLOSED, u64::from(entry.in_range)),
    }
}

/// The table grows exactly when the new fd does not fit the table seen at entry; only then is
/// `max_fds` read again. Each counted growth is also an event, unless `expand_files` is probed
/// directly: that probe sends it, with its duration, so a growth is never sent twice.
#[inline(always)]
fn check_growth(fd: u32, entry: &SyscallEntry, scan: Option<*mut ProcessScan>) {
    if fd < entry.max_fds {
        return;
    }
    counters::add(&GLOBALS, global::EXPANSIONS, 1);
    let new_max_fds = kernel::current_files()
        .and_then(kernel::table_state)
        .map_or(0, |(_, _, max_fds)| max_fds);
    counters::set_max(&GLOBALS, global::MAX_FDS_SEEN, u64::from(new_max_fds));
    scans::process_table(scan, u64::from(new_max_fds), true);
    if trace_on() {
        trace::expanded(new_max_fds);
    }
    if !config::expand_probed() {
        streams::emit(EventRecord {
            kind: kind::EXPANSION,
            old_max_fds: entry.max_fds,
            new_max_fds,
            ..EventRecord::default()
        });
    }
}

/// Whether the syscall `index` is counted at its exit alone, from its number and return, with
/// nothing kept from its entry: close, unless timed or traced. The tracepoints give the number
/// at exit.
#[inline(always)]
fn counted_at_exit(index: u32) -> bool {
    effect_of(index) == Effect::Close && !latency_on() && !trace_on()
}

/// The exit of the fd syscall `index` as the tracepoints see it.
#[inline(always)]
fn exit_of(index: u32, ret: i64) {
    if !counted_at_exit(index) {
        return on_exit(ret);
    }
    let Some(pid_tgid) = filter::target_pid_tgid() else {
        return;
    };
    let counts = Counts::of(index, pid_tgid);
    counts.add(per_syscall::CALLS, 1);
    if ret < 0 {
        counts.add(per_syscall::ERRORS, 1);
    } else {
        counts.add(per_syscall::FDS_CLOSED, 1);
    }
}

/// x86_64 `struct pt_regs` offsets of the first four syscall arguments.
pub(crate) const PT_REGS_ARGS: [usize; 4] = [112, 104, 96, 56]; // di, si, dx, r10
/// x86_64 `pt_regs.orig_ax`: the syscall number, still there at exit.
const PT_REGS_ORIG_AX: usize = 120;

/// A register of a `struct pt_regs *` known only as an address (the syscall functions'
/// argument), through the read helper, which copes with any address.
#[inline(always)]
pub(crate) fn reg_at(regs: u64, off: usize) -> u64 {
    unsafe { bpf_probe_read_kernel((regs + off as u64) as *const u64) }.unwrap_or(0)
}

/// A register of the tracepoint's `struct pt_regs *` argument, through a BTF-checked direct
/// load (a plain load with an exception fixup, no helper call).
#[inline(always)]
fn reg(regs: *const u8, off: usize) -> u64 {
    // SAFETY: `regs` is the tp_btf argument, typed `struct pt_regs *` in the kernel's BTF; the
    // verifier checks the load against that type and fixes it up on fault.
    unsafe { *(regs.add(off) as *const u64) }
}

#[btf_tracepoint(function = "sys_enter")]
pub(crate) fn fdprof_sys_enter(ctx: BtfTracePointContext) -> i32 {
    let nr: u64 = ctx.arg(1);
    if let Some(index) = index_of(nr)
        && !counted_at_exit(index)
    {
        // Most fd syscalls need no argument: read registers only for those that do.
        let mut args = [0u64; 4];
        if needs_args(effect_of(index)) || trace_on() {
            let regs: *const u8 = ctx.arg(0);
            args = [
                reg(regs, PT_REGS_ARGS[0]),
                reg(regs, PT_REGS_ARGS[1]),
                reg(regs, PT_REGS_ARGS[2]),
                reg(regs, PT_REGS_ARGS[3]),
            ];
        }
        on_enter(nr, args, true);
    }
    0
}

/// Most syscalls are not fd syscalls: their exits return before any helper call.
#[btf_tracepoint(function = "sys_exit")]
pub(crate) fn fdprof_sys_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const u8 = ctx.arg(0);
    let nr = reg(regs, PT_REGS_ORIG_AX);
    if let Some(index) = index_of(nr) {
        exit_of(index, ctx.arg::<i64>(1));
    }
    0
}

/// Classic `raw_syscalls:sys_enter`: `id` at 8, `args[6]` at 16, read directly from the record.
#[tracepoint]
pub(crate) fn fdprof_tp_sys_enter(ctx: TracePointContext) -> u32 {
    let record = ctx.as_ptr() as *const u64;
    // SAFETY: the verifier checks context loads against the tracepoint record's size.
    unsafe {
        let nr = *record.add(1);
        if let Some(index) = index_of(nr)
            && !counted_at_exit(index)
        {
            let args = [
                *record.add(2),
                *record.add(3),
                *record.add(4),
                *record.add(5),
            ];
            on_enter(nr, args, false);
        }
    }
    0
}

/// Classic `raw_syscalls:sys_exit`: `id` at 8, `ret` at 16, read directly from the record
/// (context loads, no helper call); exits of other syscalls return at once.
#[tracepoint]
pub(crate) fn fdprof_tp_sys_exit(ctx: TracePointContext) -> u32 {
    let record = ctx.as_ptr() as *const i64;
    // SAFETY: the verifier checks context loads against the tracepoint record's size.
    let (nr, ret) = unsafe { (*record.add(1), *record.add(2)) };
    if let Some(index) = index_of(nr as u64) {
        exit_of(index, ret);
    }
    0
}
