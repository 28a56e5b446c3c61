//! Lock contention from `lock:contention_begin/end` (tp_btf, or classic tracepoints where
//! tp_btf is refused): wait per task, aggregated per (lock identity, stacks, log2 slot).
//!
//! Spinning waiters cannot migrate or sleep, so their open wait is kept per CPU (a few nesting
//! levels for interrupts); sleeping locks may emit several begins per end, so theirs is kept per
//! task and only the first begin counts.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map, tracepoint},
    maps::{HashMap, PerCpuArray, PerCpuHashMap},
    programs::tracing::StackIdContext,
    programs::{BtfTracePointContext, TracePointContext},
};
use fdprof_common::{
    contention::{ContentionKey, ContentionValue, OpenWait, lcb, lock_class},
    counters::drop,
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

#[inline(always)]
fn begin<C: StackIdContext>(ctx: &C, lock: u64, flags: u32) {
    if !kernel::is_target() {
        return;
    }
    let wait = OpenWait {
        lock,
        start_ns: unsafe { bpf_ktime_get_ns() },
        flags,
        kernel_stack: stack_id(ctx, 0, drop::KERNEL_STACK),
        user_stack: stack_id(ctx, u64::from(BPF_F_USER_STACK), drop::USER_STACK),
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
        let tid = bpf_get_current_pid_tgid() as u32;
        // Only the first begin of a sleeping wait counts.
        if SLEEP_WAITS.insert(tid, wait, BPF_NOEXIST).is_err() && SLEEP_WAITS.get_ptr(tid).is_none()
        {
            maps::dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
        }
    }
}

/// Takes the open wait for `lock`, spin or sleeping.
#[inline(always)]
fn take_open_wait(lock: u64) -> Option<OpenWait> {
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
    let tid = bpf_get_current_pid_tgid() as u32;
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
    if !kernel::is_target() {
        return;
    }
    let Some(wait) = take_open_wait(lock) else {
        return;
    };
    let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(wait.start_ns);
    let key = ContentionKey {
        lock_class: classify(lock, wait.flags),
        kernel_stack: wait.kernel_stack,
        user_stack: wait.user_stack,
        slot: log2_slot(ns),
    };
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
