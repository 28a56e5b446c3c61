//! Direct probes (fentry/fexit, else kprobe/kretprobe) on the fd-table functions and on the
//! qspinlock slow path: exact allocation durations, scan origins read at allocator entry,
//! `file_lock` waits seen on the slow path (pending-bit spinners included), and hold times.
//!
//! The slow-path programs run while the task spins on a lock: they keep per-CPU state only and
//! aggregate into per-CPU arrays (or each CPU's own range of one, `slowpath`), never into maps
//! with bucket locks.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{Array, PerCpuArray},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use fdprof_common::{
    HIST_SLOTS,
    events::{self, EventRecord, flag},
    fnops::{FN_COUNTER_ENTRIES, FN_HIST_ENTRIES, OpState, counter, kind, op},
    log2_slot,
};

use crate::{
    config,
    counters::{add, set_max},
    filter, kernel, scans,
    settings::setting,
    slowpath, streams,
    syscalls::{allocator_returned, locked_now},
};

/// Threads are spread over this many slots per op (tid & (SLOTS - 1)).
const TID_SLOTS: u32 = 1 << 14;
/// Ops per thread slot, a power of two ≥ op::COUNT.
const OP_STRIDE: u32 = 8;

#[map]
static OPS: Array<OpState> = Array::with_max_entries(TID_SLOTS * OP_STRIDE, 0);

#[map]
static FN_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(FN_COUNTER_ENTRIES, 0);

#[map]
static FN_HISTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(FN_HIST_ENTRIES, 0);

/// Slow-path waits in progress on this CPU (interrupts can nest a few deep).
#[repr(C)]
#[derive(Clone, Copy)]
struct SpinStack {
    depth: u32,
    _pad: u32,
    start_ns: [u64; 4],
    /// 1 when the lock waited for is the target's `file_lock`.
    ours: [u8; 4],
    _pad2: u32,
    /// The wait's `SLOW_SITES` element where the slow path sees every lock, else `NO_SITE`.
    site: [u32; 4],
}

#[map]
static SPIN_STACK: PerCpuArray<SpinStack> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn bump(o: u32, c: u32, n: u64) {
    add(&FN_COUNTERS, o * counter::COUNT + c, n);
}

#[inline(always)]
fn fn_hist(o: u32, k: u32, v: u64) {
    let slot = log2_slot(v).min(HIST_SLOTS - 1);
    add(&FN_HISTS, (o * kind::COUNT + k) * HIST_SLOTS + slot, 1);
}

#[inline(always)]
fn op_slot(tid: u32, o: u32) -> Option<*mut OpState> {
    OPS.get_ptr_mut((tid & (TID_SLOTS - 1)) * OP_STRIDE + o)
}

/// Entry of op `o`; `origin` is the allocator's scan origin (0 for other ops).
#[inline(always)]
fn op_enter(o: u32, origin: u32) {
    let Some(tid) = filter::target_tid() else {
        return;
    };
    let Some(slot) = op_slot(tid, o) else { return };
    // SAFETY: a valid map value; this thread owns the slot while its tid is in it.
    unsafe {
        if (*slot).tid != 0 {
            bump(o, counter::UNPAIRED, 1);
        }
        *slot = OpState {
            tid,
            op: o,
            start_ns: bpf_ktime_get_ns(),
            wait_ns: 0,
            origin,
            _pad: 0,
        };
    }
}

/// Exit of op `o`: duration, hold (= duration − slow-path wait inside) and the call itself.
#[inline(always)]
fn op_exit(o: u32) -> Option<OpState> {
    let tid = filter::target_tid()?;
    let slot = op_slot(tid, o)?;
    // SAFETY: as in op_enter.
    let state = unsafe {
        if (*slot).tid != tid {
            return None;
        }
        (*slot).tid = 0;
        *slot
    };
    let duration = unsafe { bpf_ktime_get_ns() }.saturating_sub(state.start_ns);
    bump(o, counter::CALLS, 1);
    fn_hist(o, kind::DURATION, duration);
    fn_hist(o, kind::HOLD, duration.saturating_sub(state.wait_ns));
    Some(state)
}

/// The scan origin at allocator entry: `max(start, files->next_fd)`.
#[inline(always)]
fn alloc_origin(start: u32) -> u32 {
    let next_fd = kernel::current_files()
        .and_then(kernel::table_state)
        .map_or(0, |(next_fd, _, _)| next_fd);
    if start > next_fd { start } else { next_fd }
}

#[inline(always)]
fn alloc_exit(ret: i64) {
    allocator_returned();
    if let Some(state) = op_exit(op::ALLOC)
        && ret >= 0
    {
        scans::record_scan(ret as u32, state.origin);
    }
}

/// The current table's `max_fds` (0 when unreadable).
#[inline(always)]
fn current_max_fds() -> u32 {
    kernel::current_files()
        .and_then(kernel::table_state)
        .map_or(0, |(_, _, max_fds)| max_fds)
}

/// `expand_files` entry: its op state keeps `max_fds` before (in `origin`), read only while
/// events are read. `alloc_fd` calls `expand_files` on every allocation, inside its locked
/// section: two table reads there on every allocation doubled the hold times `record` measures
/// under qemu TCG (6.1 guest: alloc hold p50 4 µs → 16 µs).
#[inline(always)]
fn expand_enter() {
    let origin = if config::events_on() {
        current_max_fds()
    } else {
        0
    };
    op_enter(op::EXPAND, origin);
}

/// `expand_files` exit: an expansion event when `max_fds` grew during the call (whatever the
/// kernel's return convention), with the call's duration.
#[inline(always)]
fn expand_exit(ret: i64) {
    let Some(state) = op_exit(op::EXPAND) else {
        return;
    };
    if ret == 1 {
        bump(op::EXPAND, counter::EXPANDED, 1);
    }
    // No size before (events were off at entry): no event.
    if state.origin == 0 || !config::events_on() {
        return;
    }
    let new_max_fds = current_max_fds();
    if new_max_fds > state.origin {
        streams::emit(EventRecord {
            kind: events::kind::EXPANSION,
            flags: flag::DURATION,
            value: unsafe { bpf_ktime_get_ns() }.saturating_sub(state.start_ns),
            old_max_fds: state.origin,
            new_max_fds,
            ..EventRecord::default()
        });
    }
}

/// The innermost op this thread is in (expand runs inside alloc and dup2).
#[inline(always)]
fn current_op(tid: u32) -> u32 {
    for o in [op::EXPAND, op::DUP2, op::ALLOC, op::CLOSE, op::CLOSE_RANGE] {
        if let Some(slot) = op_slot(tid, o)
            && unsafe { (*slot).tid } == tid
        {
            return o;
        }
    }
    op::NONE
}

#[inline(always)]
fn spin_enter<C: EbpfContext>(ctx: &C, lock: u64) {
    // The wait starts here: the stack walk that places it (every lock's waits) is left out.
    let start = unsafe { bpf_ktime_get_ns() };
    if filter::target_tid().is_none() {
        return;
    }
    let Some(stack) = SPIN_STACK.get_ptr_mut(0) else {
        return;
    };
    let (site, start) = if config::slowpath_all() {
        let site = slowpath::site(ctx, lock);
        (site, unsafe { bpf_ktime_get_ns() })
    } else {
        (slowpath::NO_SITE, start)
    };
    let ours = kernel::current_file_lock() == Some(lock);
    // SAFETY: per-CPU value, this CPU only.
    unsafe {
        let d = (*stack).depth as usize;
        if d < 4 {
            (*stack).start_ns[d] = start;
            (*stack).ours[d] = ours as u8;
            (*stack).site[d] = site;
        }
        (*stack).depth += 1;
    }
}

#[inline(always)]
fn spin_exit() {
    let Some(tid) = filter::target_tid() else {
        return;
    };
    let Some(stack) = SPIN_STACK.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU value, this CPU only.
    let (start, ours, site) = unsafe {
        if (*stack).depth == 0 {
            bump(op::NONE, counter::UNPAIRED, 1);
            return;
        }
        (*stack).depth -= 1;
        let d = (*stack).depth as usize;
        if d >= 4 {
            return;
        }
        (
            (*stack).start_ns[d],
            (*stack).ours[d] != 0,
            (*stack).site[d],
        )
    };
    let wait = unsafe { bpf_ktime_get_ns() }.saturating_sub(start);
    if site != slowpath::NO_SITE {
        slowpath::add_wait(site, wait);
    }
    if !ours {
        return;
    }
    let o = current_op(tid);
    bump(o, counter::SLOWPATH_WAITS, 1);
    bump(o, counter::SLOWPATH_WAIT_NS, wait);
    set_max(
        &FN_COUNTERS,
        o * counter::COUNT + counter::SLOWPATH_WAIT_MAX,
        wait,
    );
    fn_hist(o, kind::SLOWPATH_WAIT, wait);
    if o != op::NONE
        && let Some(slot) = op_slot(tid, o)
    {
        // SAFETY: this thread's own slot.
        unsafe { (*slot).wait_ns += wait };
    }
}

/// The allocator's `start` from the context's argument words: two fixed-offset volatile loads
/// and a select of the values (the verifier refuses a ctx access at a computed offset).
#[inline(always)]
fn alloc_start(first: *const u64, second: *const u64) -> u32 {
    let index = setting(|s| &s.alloc_start_arg);
    // SAFETY: both point into the program's context at fixed offsets.
    let (a, b) = unsafe {
        (
            core::ptr::read_volatile(first),
            core::ptr::read_volatile(second),
        )
    };
    (if index == 1 { b } else { a }) as u32
}

/// x86_64 `struct pt_regs` word indices of the first two arguments (di, si).
const PT_REGS_DI: usize = 14;
const PT_REGS_SI: usize = 13;

// --- fentry / fexit ---

#[fentry]
pub(crate) fn fdprof_fe_alloc(ctx: FEntryContext) -> i32 {
    let args = ctx.as_ptr() as *const u64;
    // SAFETY: fentry contexts are arrays of u64 arguments.
    let start = unsafe { alloc_start(args, args.add(1)) };
    op_enter(op::ALLOC, alloc_origin(start));
    0
}

/// The return value in an fexit context of a function of `nargs` arguments: the word after
/// them, read at a fixed offset (`bpf_get_func_ret` is 5.17's, and 5.10 has fexit; a verifier
/// refuses a context read at a computed offset).
#[inline(always)]
fn fexit_ret(ctx: &FExitContext, nargs: usize) -> i64 {
    let words = ctx.as_ptr() as *const u64;
    // SAFETY: an fexit context is the function's argument words, then its return value.
    unsafe { core::ptr::read_volatile(words.add(nargs)) as i64 }
}

/// `alloc_fd(start, end, flags)`: the return value follows its 3 arguments.
#[fexit]
pub(crate) fn fdprof_fx_alloc(ctx: FExitContext) -> i32 {
    alloc_exit(fexit_ret(&ctx, 3) as i32 as i64);
    0
}

/// `__alloc_fd(files, start, end, flags)` (5.10 and older): after its 4. A program of its own,
/// as the verifier refuses a context read past the function's arguments, even in a branch
/// not taken.
#[fexit]
pub(crate) fn fdprof_fx_alloc4(ctx: FExitContext) -> i32 {
    alloc_exit(fexit_ret(&ctx, 4) as i32 as i64);
    0
}

/// An fentry/fexit pair for op `$op`; `$first`, if given, runs first at entry.
macro_rules! fentry_pair {
    ($enter:ident, $exit:ident, $op:expr $(, $first:path)?) => {
        #[fentry]
        pub(crate) fn $enter(_ctx: FEntryContext) -> i32 {
            $($first();)?
            op_enter($op, 0);
            0
        }

        #[fexit]
        pub(crate) fn $exit(_ctx: FExitContext) -> i32 {
            op_exit($op);
            0
        }
    };
}

fentry_pair!(fdprof_fe_close, fdprof_fx_close, op::CLOSE);
fentry_pair!(fdprof_fe_crange, fdprof_fx_crange, op::CLOSE_RANGE);
// `do_dup2` is entered with `file_lock` held (it drops it): its entry is the dup's moment
// inside the lock.
fentry_pair!(fdprof_fe_dup2, fdprof_fx_dup2, op::DUP2, locked_now);

#[fentry]
pub(crate) fn fdprof_fe_expand(_ctx: FEntryContext) -> i32 {
    expand_enter();
    0
}

#[fexit]
pub(crate) fn fdprof_fx_expand(ctx: FExitContext) -> i32 {
    // expand_files(files, nr)
    expand_exit(fexit_ret(&ctx, 2) as i32 as i64);
    0
}

/// The slow path exists as native and PV functions; both are attached, so two program pairs.
macro_rules! fentry_spin {
    ($enter:ident, $exit:ident) => {
        #[fentry]
        pub(crate) fn $enter(ctx: FEntryContext) -> i32 {
            // Read as a number: loaded from the context, the `struct qspinlock *` is a typed
            // pointer that the verifier lets no arithmetic touch (the site's hash).
            // SAFETY: word 0 of the context, the first argument.
            let lock = unsafe { bpf_probe_read_kernel(ctx.as_ptr() as *const u64) }.unwrap_or(0);
            spin_enter(&ctx, lock);
            0
        }

        #[fexit]
        pub(crate) fn $exit(_ctx: FExitContext) -> i32 {
            spin_exit();
            0
        }
    };
}

fentry_spin!(fdprof_fe_spin, fdprof_fx_spin);
fentry_spin!(fdprof_fe_spin2, fdprof_fx_spin2);

// --- kprobe / kretprobe (one program can attach to several functions) ---

#[kprobe]
pub(crate) fn fdprof_kp_alloc(ctx: ProbeContext) -> u32 {
    let regs = ctx.as_ptr() as *const u64;
    // SAFETY: a kprobe context is the task's pt_regs.
    let start = unsafe { alloc_start(regs.add(PT_REGS_DI), regs.add(PT_REGS_SI)) };
    op_enter(op::ALLOC, alloc_origin(start));
    0
}

#[kretprobe]
pub(crate) fn fdprof_kr_alloc(ctx: RetProbeContext) -> u32 {
    alloc_exit(ctx.ret::<i64>() as i32 as i64);
    0
}

/// A kprobe/kretprobe pair for op `$op`; `$first`, if given, runs first at entry.
macro_rules! kprobe_pair {
    ($enter:ident, $exit:ident, $op:expr $(, $first:path)?) => {
        #[kprobe]
        pub(crate) fn $enter(_ctx: ProbeContext) -> u32 {
            $($first();)?
            op_enter($op, 0);
            0
        }

        #[kretprobe]
        pub(crate) fn $exit(_ctx: RetProbeContext) -> u32 {
            op_exit($op);
            0
        }
    };
}

kprobe_pair!(fdprof_kp_close, fdprof_kr_close, op::CLOSE);
kprobe_pair!(fdprof_kp_crange, fdprof_kr_crange, op::CLOSE_RANGE);
kprobe_pair!(fdprof_kp_dup2, fdprof_kr_dup2, op::DUP2, locked_now);

/// Just after a `spin_lock(&files->file_lock)` inside the allocator or close function (an
/// offset into it found at attach, `record --trace` in the direct modes): the operation's
/// moment inside the lock, which orders it against other threads' on the same table.
#[kprobe]
pub(crate) fn fdprof_kp_locked(_ctx: ProbeContext) -> u32 {
    locked_now();
    0
}

#[kprobe]
pub(crate) fn fdprof_kp_expand(_ctx: ProbeContext) -> u32 {
    expand_enter();
    0
}

#[kretprobe]
pub(crate) fn fdprof_kr_expand(ctx: RetProbeContext) -> u32 {
    expand_exit(ctx.ret::<i64>() as i32 as i64);
    0
}

#[kprobe]
pub(crate) fn fdprof_kp_spin(ctx: ProbeContext) -> u32 {
    spin_enter(&ctx, ctx.arg::<u64>(0).unwrap_or(0));
    0
}

#[kretprobe]
pub(crate) fn fdprof_kr_spin(_ctx: RetProbeContext) -> u32 {
    spin_exit();
    0
}
