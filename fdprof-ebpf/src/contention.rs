//! Lock contention from `lock:contention_begin/end` (tp_btf, or classic tracepoints where
//! tp_btf is refused): wait per task, aggregated per (lock identity, stacks, log2 slot).
//!
//! Spinning waiters cannot migrate or sleep, so their open wait is kept per CPU (a few nesting
//! levels for interrupts); sleeping locks may emit several begins per end, so theirs is kept per
//! task and only the first begin counts.
//!
//! Walking both stacks costs ~4 µs here, far longer than a typical file_lock wait. Walked at
//! every contention, that cost both slows the target and lands inside the wait it measures. So
//! the stacks walked at a site (thread, syscall, user return point, lock) are reused for the
//! next contentions there and walked again every [`STACK_REFRESH`]th; a wait is timed from
//! after the walk.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_get_current_task_btf, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_task_pt_regs,
    },
    macros::{btf_tracepoint, map, tracepoint},
    maps::{HashMap, LruHashMap, PerCpuArray, PerCpuHashMap},
    programs::tracing::StackIdContext,
    programs::{BtfTracePointContext, TracePointContext},
};
use fdprof_common::{
    contention::{ContentionKey, ContentionValue, OpenWait, STACK_REFRESH, lcb, lock_class},
    counters::{drop, global},
    events::{EventRecord, kind},
    log2_slot,
};

use crate::{kernel, maps};

/// Nesting depth of spin waits on one CPU (task, softirq, hardirq, NMI).
const SPIN_LEVELS: u32 = 4;

#[map]
static SPIN_WAITS: PerCpuArray<OpenWait> = PerCpuArray::with_max_entries(SPIN_LEVELS, 0);

#[map]
static SLEEP_WAITS: HashMap<u32, OpenWait> = HashMap::with_max_entries(16384, 0);

#[map]
pub static CONTENTION: PerCpuHashMap<ContentionKey, ContentionValue> =
    PerCpuHashMap::with_max_entries(16384, 0);

const BPF_NOEXIST: u64 = 1;

/// Where a contention happens, as far as can be told without walking a stack.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackSite {
    lock: u64,
    /// From the task's user registers: syscall number (`orig_ax`), return point and stack.
    syscall: u64,
    user_ip: u64,
    user_sp: u64,
    tid: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct SiteStacks {
    kernel: i32,
    user: i32,
    uses: u32,
    _pad: u32,
}

#[map]
static STACK_SITES: LruHashMap<StackSite, SiteStacks> = LruHashMap::with_max_entries(16384, 0);

/// x86_64 `struct pt_regs` offset of `orig_ax`, followed by ip, cs, flags and sp.
const PT_REGS_ORIG_AX: u64 = 120;

#[inline(always)]
fn site(tid: u32, lock: u64, flags: u32) -> StackSite {
    // SAFETY: the helper returns the current task's saved user registers; the read copes with
    // any address.
    let regs: [u64; 5] = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as u64;
        bpf_probe_read_kernel((regs + PT_REGS_ORIG_AX) as *const [u64; 5]).unwrap_or([0; 5])
    };
    StackSite {
        lock,
        syscall: regs[0],
        user_ip: regs[1],
        user_sp: regs[4],
        tid,
        flags,
    }
}

#[inline(always)]
fn stack_id<C: StackIdContext>(ctx: &C, flags: u64, reason: u32) -> i32 {
    match ctx.get_stackid(&maps::STACKS, flags) {
        Ok(id) => id as i32,
        Err(_) => {
            maps::dropped(drop::PROBE_CONTENTION, reason);
            -1
        }
    }
}

/// The stacks of a contention at `site`: those last walked there, or walked now.
#[inline(always)]
fn stacks<C: StackIdContext>(ctx: &C, site: &StackSite) -> (i32, i32) {
    // A kernel thread has no user registers to tell its sites apart: always walk.
    let cached = if site.user_ip != 0 {
        STACK_SITES.get_ptr_mut(site)
    } else {
        None
    };
    if let Some(c) = cached {
        // SAFETY: a map value; its key holds this thread's tid, so only this thread uses it.
        unsafe {
            (*c).uses += 1;
            if (*c).uses % STACK_REFRESH != 0 && (*c).kernel >= 0 {
                maps::add(&maps::GLOBALS, global::STACK_REUSES, 1);
                return ((*c).kernel, (*c).user);
            }
        }
    }
    let kernel = stack_id(ctx, 0, drop::KERNEL_STACK);
    let user = stack_id(ctx, u64::from(BPF_F_USER_STACK), drop::USER_STACK);
    maps::add(&maps::GLOBALS, global::STACK_WALKS, 1);
    match cached {
        // SAFETY: as above.
        Some(c) => unsafe {
            (*c).kernel = kernel;
            (*c).user = user;
        },
        None if site.user_ip != 0 => {
            let fresh = SiteStacks {
                kernel,
                user,
                uses: 0,
                _pad: 0,
            };
            let _ = STACK_SITES.insert(site, &fresh, 0);
        }
        None => {}
    }
    (kernel, user)
}

#[inline(always)]
fn begin<C: StackIdContext>(ctx: &C, lock: u64, flags: u32) {
    let Some(tid) = kernel::target_tid() else {
        return;
    };
    let (kernel_stack, user_stack) = stacks(ctx, &site(tid, lock, flags));
    // Timed from here, so that a walk does not count as waiting.
    let wait = OpenWait {
        lock,
        start_ns: unsafe { bpf_ktime_get_ns() },
        flags,
        kernel_stack,
        user_stack,
        _pad: 0,
    };
    if flags & lcb::F_SPIN != 0 {
        for level in 0..SPIN_LEVELS {
            if let Some(slot) = SPIN_WAITS.get_ptr_mut(level) {
                // SAFETY: per-CPU slot, this CPU only.
                unsafe {
                    if (*slot).lock == 0 {
                        *slot = wait;
                        return;
                    }
                }
            }
        }
        maps::dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
    } else {
        // Only the first begin of a sleeping wait counts.
        if SLEEP_WAITS.insert(tid, wait, BPF_NOEXIST).is_err() && SLEEP_WAITS.get_ptr(tid).is_none()
        {
            maps::dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
        }
    }
}

/// Takes the open wait for `lock`, spin or sleeping.
#[inline(always)]
fn take_open_wait(tid: u32, lock: u64) -> Option<OpenWait> {
    for level in 0..SPIN_LEVELS {
        if let Some(slot) = SPIN_WAITS.get_ptr_mut(level) {
            // SAFETY: per-CPU slot, this CPU only.
            unsafe {
                if (*slot).lock == lock {
                    let wait = *slot;
                    (*slot).lock = 0;
                    return Some(wait);
                }
            }
        }
    }
    let wait = SLEEP_WAITS.get_ptr(tid).map(|p| unsafe { *p })?;
    let _ = SLEEP_WAITS.remove(tid);
    Some(wait)
}

#[inline(always)]
fn classify(lock: u64, flags: u32) -> u32 {
    if kernel::current_file_lock() == Some(lock) {
        lock_class::FILE_LOCK
    } else if flags & lcb::F_SPIN != 0 {
        lock_class::SPINLOCK
    } else if flags & lcb::F_MUTEX != 0 {
        lock_class::MUTEX
    } else if flags & (lcb::F_READ | lcb::F_WRITE) != 0 {
        lock_class::RWSEM
    } else {
        lock_class::OTHER
    }
}

#[inline(always)]
fn end(lock: u64) {
    let Some(tid) = kernel::target_tid() else {
        return;
    };
    let Some(wait) = take_open_wait(tid, lock) else {
        return;
    };
    let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(wait.start_ns);
    let key = ContentionKey {
        lock_class: classify(lock, wait.flags),
        kernel_stack: wait.kernel_stack,
        user_stack: wait.user_stack,
        slot: log2_slot(ns),
    };
    // The site's stacks already in hand; the operation is told from them in user space.
    if ns >= kernel::slow_ns() {
        maps::emit(EventRecord {
            kind: kind::SLOW_WAIT,
            value: ns,
            lock_class: key.lock_class,
            kernel_stack: key.kernel_stack,
            user_stack: key.user_stack,
            ..EventRecord::default()
        });
    }
    if let Some(v) = CONTENTION.get_ptr_mut(&key) {
        // SAFETY: per-CPU value, this CPU only.
        unsafe {
            (*v).count += 1;
            (*v).total_ns += ns;
            if (*v).max_ns < ns {
                (*v).max_ns = ns;
            }
        }
    } else {
        let v = ContentionValue {
            count: 1,
            total_ns: ns,
            max_ns: ns,
        };
        if CONTENTION.insert(&key, &v, 0).is_err() {
            maps::dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
        }
    }
}

#[btf_tracepoint(function = "contention_begin")]
pub fn fdprof_lock_begin(ctx: BtfTracePointContext) -> i32 {
    begin(&ctx, ctx.arg::<u64>(0), ctx.arg::<u32>(1));
    0
}

#[btf_tracepoint(function = "contention_end")]
pub fn fdprof_lock_end(ctx: BtfTracePointContext) -> i32 {
    end(ctx.arg::<u64>(0));
    0
}

/// Classic tracepoint layout: `lock_addr` at 8, `flags` at 16.
#[tracepoint]
pub fn fdprof_tp_lock_begin(ctx: TracePointContext) -> u32 {
    if let (Ok(lock), Ok(flags)) = unsafe { (ctx.read_at::<u64>(8), ctx.read_at::<u32>(16)) } {
        begin(&ctx, lock, flags);
    }
    0
}

#[tracepoint]
pub fn fdprof_tp_lock_end(ctx: TracePointContext) -> u32 {
    if let Ok(lock) = unsafe { ctx.read_at::<u64>(8) } {
        end(lock);
    }
    0
}
