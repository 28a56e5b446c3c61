//! Lock contention from `lock:contention_begin/end` (tp_btf, or classic tracepoints where
//! tp_btf is refused): wait per task, aggregated per (lock identity, stacks, log2 slot).
//!
//! Spinning waiters cannot migrate or sleep, so their open wait is kept per CPU (a few nesting
//! levels for interrupts); sleeping locks may emit several begins per end, so theirs is kept per
//! task and only the first begin counts.
//!
//! Both programs take their clock first, so that what they do after it (begin) or before it
//! (end) is all the probe time a measured wait can contain; the rare stack walk is timed and
//! left out. `contention_end` runs with the lock
//! held: it finds its open wait and adds it up, nothing more; the lock's identity and the stacks
//! are worked out at `contention_begin`, while the task waits anyway.
//!
//! Walking the kernel stack and finding the user stack's copy (`copies`) costs microseconds,
//! far longer than a typical file_lock wait. So the stacks taken at a site (thread, syscall,
//! user return point, lock) are kept in a per-CPU cache and reused for the next contentions
//! there, taken again every [`STACK_REFRESH`]th.
//! A spin wait nested in another on the same CPU (an interrupt's, landed on a spinning task)
//! is a site of its own: user space attributes it to `irq`/`softirq` from its own stack.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map, tracepoint},
    maps::{HashMap, PerCpuArray, StackTrace},
    programs::tracing::StackIdContext,
    programs::{BtfTracePointContext, TracePointContext},
};
use fdprof_common::{
    contention::{
        KnownLock, LockIdentity, OpenWait, SITES, STACK_REFRESH, SiteKey, SiteWaits, WAIT_SLOTS,
        lcb, lock_class,
    },
    counters::{drop, global},
    events::{EventRecord, kind},
    log2_slot,
};

use crate::{
    copies::{self, UserRegs},
    counters::{GLOBALS, add, dropped},
    filter,
    kernel::{self, OwnLock},
    settings::{setting, slow_ns},
    streams,
};

/// Nesting depth of spin waits on one CPU (task, softirq, hardirq, NMI).
const SPIN_LEVELS: u32 = 4;

/// This CPU's open spin waits, one per nesting level, in one element: one lookup finds them all.
#[repr(C)]
#[derive(Clone, Copy)]
struct SpinWaits {
    levels: [OpenWait; SPIN_LEVELS as usize],
}

#[map]
static SPIN_WAITS: PerCpuArray<SpinWaits> = PerCpuArray::with_max_entries(1, 0);

#[map]
static SLEEP_WAITS: HashMap<u32, OpenWait> = HashMap::with_max_entries(16384, 0);

/// Site → its element of `SITE_WAITS`.
#[map]
static SITE_INDEX: HashMap<SiteKey, u32> = HashMap::with_max_entries(SITES, 0);

#[map]
static SITE_WAITS: PerCpuArray<SiteWaits> = PerCpuArray::with_max_entries(SITES, 0);

/// Element → the site it was given to.
#[map]
static SITE_OWNERS: HashMap<u32, SiteKey> = HashMap::with_max_entries(SITES, 0);

/// The stacks of the contention sites (`SiteKey`'s ids).
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(16384, 0);

const BPF_NOEXIST: u64 = 1;

/// Where a contention happens, as far as can be told without walking a stack.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
struct StackSite {
    lock: u64,
    /// From the task's user registers: syscall number (`orig_ax`), return point and stack.
    syscall: u64,
    user_ip: u64,
    user_sp: u64,
    tid: u32,
    flags: u32,
}

/// A stack site, and what was made of it at its last walk: the lock and stacks that key its
/// waits, and their element of `SITE_WAITS`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CachedSite {
    site: StackSite,
    key: SiteKey,
    index: u32,
    uses: u32,
}

/// Sites cached per CPU, direct-mapped by a hash of the site: an array slot costs a few loads
/// where a shared hash map costs a hashed lookup and, to insert, a lock. A spinning waiter
/// stays on its CPU, and a thread that moved walks again once.
const SITE_SLOTS: u32 = 1024;

#[map]
static SITE_CACHE: PerCpuArray<CachedSite> = PerCpuArray::with_max_entries(SITE_SLOTS, 0);

#[inline(always)]
fn site(tid: u32, lock: u64, flags: u32, regs: &UserRegs) -> StackSite {
    StackSite {
        lock,
        syscall: regs.orig_ax,
        user_ip: regs.ip,
        user_sp: regs.sp,
        tid,
        flags,
    }
}

#[inline(always)]
fn slot_of(s: &StackSite) -> u32 {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = (s.lock ^ s.user_ip.rotate_left(17) ^ s.user_sp.rotate_left(31))
        .wrapping_add(s.syscall ^ (u64::from(s.tid) << 32) ^ u64::from(s.flags))
        .wrapping_mul(MIX);
    (h >> 54) as u32 & (SITE_SLOTS - 1)
}

#[inline(always)]
fn stack_id<C: StackIdContext>(ctx: &C, flags: u64, reason: u32) -> i32 {
    match ctx.get_stackid(&STACKS, flags) {
        Ok(id) => id as i32,
        Err(_) => {
            dropped(drop::PROBE_CONTENTION, reason);
            -1
        }
    }
}

/// What a contention at a site is added to: the site key and its `SITE_WAITS` element.
struct Cell {
    key: SiteKey,
    index: u32,
    /// How long walking the stacks took, if they were walked now.
    walk_ns: u64,
}

/// The cell of a contention at `site`: that of the last walk there, or walked now. `None` when
/// the site has no element (all [`SITES`] given out).
#[inline(always)]
fn site_waits<C: StackIdContext>(
    ctx: &C,
    site: &StackSite,
    regs: &UserRegs,
    lock: u64,
    btf: bool,
) -> Option<Cell> {
    let c = SITE_CACHE.get_ptr_mut(slot_of(site))?;
    // SAFETY: a per-CPU slot: only this CPU uses it, and the program does not nest on a CPU.
    unsafe {
        if (*c).site == *site && (*c).index < SITES {
            (*c).uses += 1;
            if (*c).uses % STACK_REFRESH != 0 {
                add(&GLOBALS, global::STACK_REUSES, 1);
                return Some(Cell {
                    key: (*c).key,
                    index: (*c).index,
                    walk_ns: 0,
                });
            }
        } else {
            (*c).site = *site;
            (*c).uses = 0;
        }
    }
    let walk_start = unsafe { bpf_ktime_get_ns() };
    let key = SiteKey {
        lock: identify(lock, site.flags, btf),
        kernel_stack: stack_id(ctx, 0, drop::KERNEL_STACK),
        user_stack: if setting(|s| &s.user_fp) != 0 {
            stack_id(ctx, u64::from(BPF_F_USER_STACK), drop::USER_STACK)
        } else {
            copies::user_stack(
                drop::PROBE_CONTENTION,
                (bpf_get_current_pid_tgid() >> 32) as u32,
                regs,
            )
        },
        tgid: filter::process_of_all().unwrap_or(0),
        _pad: 0,
    };
    add(&GLOBALS, global::STACK_WALKS, 1);
    let index = index_of(&key);
    // SAFETY: as above.
    unsafe {
        (*c).key = key;
        (*c).index = index.unwrap_or(SITES);
    }
    let walk_ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(walk_start);
    add(&GLOBALS, global::WALK_NS, walk_ns);
    Some(Cell {
        key,
        index: index?,
        walk_ns,
    })
}

/// Elements tried for a new site, from its hash on: with 8, a new site found no free one in
/// about 1 of 100 tries with only 40% of them given out (linear probing's runs).
const SITE_PROBES: u32 = 32;

/// The `SITE_WAITS` element of `key`, given out now if it has none: the first free one from the
/// key's hash on, claimed by inserting it into `SITE_OWNERS`, which only one CPU can do (the
/// BPF target's compare-and-swap needs a newer instruction set than fdprof is built for).
#[inline(always)]
fn index_of(key: &SiteKey) -> Option<u32> {
    if let Some(&i) = unsafe { SITE_INDEX.get(key) } {
        return Some(i);
    }
    let h = (u64::from(key.kernel_stack as u32) << 32 | u64::from(key.user_stack as u32))
        ^ key.lock.static_addr
        ^ u64::from(key.lock.class) << 8
        ^ u64::from(key.lock.known) << 16
        ^ u64::from(key.tgid) << 24;
    let start = (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32;
    for probe in 0..SITE_PROBES {
        let i = start.wrapping_add(probe) % SITES;
        let claimed = SITE_OWNERS.insert(i, key, BPF_NOEXIST).is_ok();
        if claimed {
            add(&GLOBALS, global::SITES_GIVEN, 1);
        }
        if claimed || unsafe { SITE_OWNERS.get(i) } == Some(key) {
            // Another CPU may have given the key another element meanwhile: the first in
            // `SITE_INDEX` is the one used.
            let _ = SITE_INDEX.insert(key, i, BPF_NOEXIST);
            return unsafe { SITE_INDEX.get(key) }.copied();
        }
    }
    dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
    None
}

/// Which lock `lock` is: the target's `file_lock`, one recognised by kind, or else its class
/// from the tracepoint's flags, with its address when it is static.
#[inline(always)]
pub(crate) fn identify(lock: u64, flags: u32, btf: bool) -> LockIdentity {
    let mut known = KnownLock::None;
    let class = if flags & lcb::F_SPIN != 0 {
        if kernel::own_lock(OwnLock::FileLock, btf) == lock {
            lock_class::FILE_LOCK
        } else {
            if kernel::own_lock(OwnLock::Siglock, btf) == lock {
                known = KnownLock::Siglock;
            } else if kernel::running_rq_lock(btf) == lock {
                known = KnownLock::RqLock;
            }
            lock_class::SPINLOCK
        }
    } else if flags & lcb::F_MUTEX != 0 {
        lock_class::MUTEX
    } else if flags & (lcb::F_READ | lcb::F_WRITE) != 0 {
        if kernel::own_lock(OwnLock::MmapLock, btf) == lock {
            known = KnownLock::MmapLock;
        }
        lock_class::RWSEM
    } else {
        lock_class::OTHER
    };
    LockIdentity {
        class,
        known: known as u32,
        static_addr: if kernel::is_static(lock) { lock } else { 0 },
    }
}

/// A spin wait's nesting level (how many spin waits are open beneath it on this CPU) is kept
/// in the stack site's flags from this bit on: a nested wait is an interrupt's, whose stacks
/// must not be taken for those of the task it landed on (the task's user registers are the
/// same).
const NEST_SHIFT: u32 = 16;

/// The first free level of this CPU's open spin waits; `None` when all are taken.
#[inline(always)]
#[allow(
    clippy::manual_find,
    reason = "the loop the verifiers were checked with: `find` builds other code"
)]
fn free_spin_level() -> Option<u32> {
    let waits = SPIN_WAITS.get_ptr(0)?;
    for level in 0..SPIN_LEVELS {
        // SAFETY: per-CPU value, this CPU only.
        if unsafe { (*waits).levels[level as usize].lock_addr } == 0 {
            return Some(level);
        }
    }
    None
}

#[inline(always)]
fn begin<C: StackIdContext>(ctx: &C, lock: u64, flags: u32, btf: bool) {
    // The wait starts here: what follows is probe time inside the measured wait, but for a
    // stack walk (1 in STACK_REFRESH per site), which is left out.
    let start_ns = unsafe { bpf_ktime_get_ns() };
    let Some(tid) = filter::target_tid() else {
        return;
    };
    let spin = flags & lcb::F_SPIN != 0;
    let level = if spin {
        match free_spin_level() {
            Some(level) => level,
            None => {
                dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
                return;
            }
        }
    } else {
        0
    };
    let regs = UserRegs::current(btf);
    let at = site(tid, lock, flags | level << NEST_SHIFT, &regs);
    let Some(cell) = site_waits(ctx, &at, &regs, lock, btf) else {
        return;
    };
    let wait = OpenWait {
        lock_addr: lock,
        start_ns: start_ns + cell.walk_ns,
        site: cell.key,
        index: cell.index,
        _pad: 0,
    };
    if spin {
        if let Some(waits) = SPIN_WAITS.get_ptr_mut(0) {
            for l in 0..SPIN_LEVELS {
                if l == level {
                    // SAFETY: per-CPU value, this CPU only; the program does not nest on a CPU,
                    // so the level is still free.
                    unsafe { (*waits).levels[l as usize] = wait };
                    return;
                }
            }
        }
        dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
    } else {
        // Only the first begin of a sleeping wait counts.
        if SLEEP_WAITS.insert(tid, wait, BPF_NOEXIST).is_err() && SLEEP_WAITS.get_ptr(tid).is_none()
        {
            dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
        }
    }
}

/// Thread `tid` ended: an open sleeping wait of its own, whose end never came, goes.
#[inline(always)]
pub(crate) fn thread_ended(tid: u32) {
    let _ = SLEEP_WAITS.remove(tid);
}

/// Takes this CPU's open spin wait for `lock`: no helper call, so a task that is not profiled
/// (it has none) pays a few loads.
#[inline(always)]
fn take_spin_wait(lock: u64) -> Option<OpenWait> {
    let waits = SPIN_WAITS.get_ptr_mut(0)?;
    for level in 0..SPIN_LEVELS as usize {
        // SAFETY: per-CPU value, this CPU only.
        unsafe {
            if (*waits).levels[level].lock_addr == lock {
                let wait = (*waits).levels[level];
                (*waits).levels[level].lock_addr = 0;
                return Some(wait);
            }
        }
    }
    None
}

#[inline(always)]
fn take_sleep_wait(lock: u64) -> Option<OpenWait> {
    let tid = filter::target_tid()?;
    let wait = SLEEP_WAITS.get_ptr(tid).map(|p| unsafe { *p })?;
    if wait.lock_addr != lock {
        return None;
    }
    let _ = SLEEP_WAITS.remove(tid);
    Some(wait)
}

#[inline(always)]
fn end(lock: u64) {
    let Some(wait) = take_spin_wait(lock).or_else(|| take_sleep_wait(lock)) else {
        return;
    };
    let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(wait.start_ns);
    if let Some(w) = SITE_WAITS.get_ptr_mut(wait.index) {
        let slot = (log2_slot(ns) as usize).min(WAIT_SLOTS - 1);
        // SAFETY: per-CPU value, this CPU only.
        unsafe {
            (*w).count += 1;
            (*w).total_ns += ns;
            if (*w).max_ns < ns {
                (*w).max_ns = ns;
            }
            (*w).slots[slot] += 1;
        }
    }
    if ns >= slow_ns() {
        streams::emit(EventRecord {
            kind: kind::SLOW_WAIT,
            value: ns,
            lock: wait.site.lock,
            kernel_stack: wait.site.kernel_stack,
            user_stack: wait.site.user_stack,
            ..EventRecord::default()
        });
    }
}

#[btf_tracepoint(function = "contention_begin")]
pub(crate) fn fdprof_lock_begin(ctx: BtfTracePointContext) -> i32 {
    begin(&ctx, ctx.arg::<u64>(0), ctx.arg::<u32>(1), true);
    0
}

#[btf_tracepoint(function = "contention_end")]
pub(crate) fn fdprof_lock_end(ctx: BtfTracePointContext) -> i32 {
    end(ctx.arg::<u64>(0));
    0
}

/// Classic tracepoint layout: `lock_addr` at 8, `flags` at 16.
#[tracepoint]
pub(crate) fn fdprof_tp_lock_begin(ctx: TracePointContext) -> u32 {
    if let (Ok(lock), Ok(flags)) = unsafe { (ctx.read_at::<u64>(8), ctx.read_at::<u32>(16)) } {
        begin(&ctx, lock, flags, false);
    }
    0
}

#[tracepoint]
pub(crate) fn fdprof_tp_lock_end(ctx: TracePointContext) -> u32 {
    if let Ok(lock) = unsafe { ctx.read_at::<u64>(8) } {
        end(lock);
    }
    0
}
