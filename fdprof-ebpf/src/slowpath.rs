//! Every spinlock's waits from the slow-path probe, on kernels without the lock contention
//! tracepoints (before 5.19): each wait added to a site (lock identity, kernel stack, process)
//! with the stacks kept as frames.
//!
//! These run inside `queued_spin_lock_slowpath`, so they take no lock that can contend: the
//! stacks are taken with `bpf_get_stack` (per-CPU buffers) instead of a stack map (whose free
//! list has locks), and the sites live in a plain array of which each CPU fills only its own
//! range (a spinning waiter does not migrate), found by probing a few elements from the site's
//! hash instead of a hash map (bucket locks). With no lock taken, a program that runs nested in
//! another (5.10's trampolines have no recursion guard) cannot deadlock.

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_get_stack},
    macros::map,
    maps::{Array, PerCpuArray},
};
use fdprof_common::{
    contention::{LockIdentity, SLOW_FRAMES, SLOW_SITES_PER_CPU, SlowSite, WAIT_SLOTS, lcb},
    counters::drop,
    log2_slot,
};

use crate::{contention::identify, copies, counters::dropped, filter, settings::setting};

/// No site: the wait is not added anywhere.
pub(crate) const NO_SITE: u32 = u32::MAX;

/// Resized at load to `SLOW_SITES_PER_CPU` × the possible CPUs.
#[map]
static SLOW_SITES: Array<SlowSite> = Array::with_max_entries(SLOW_SITES_PER_CPU, 0);

/// The wait being placed, before its site is known: its kernel stack, lock and process.
#[repr(C)]
#[derive(Clone, Copy)]
struct Placing {
    frames: [u64; SLOW_FRAMES],
    lock: LockIdentity,
    tgid: u32,
    kernel_frames: u32,
}

#[map]
static PLACING: PerCpuArray<Placing> = PerCpuArray::with_max_entries(1, 0);

/// Elements tried for a site, from its hash on.
const PROBES: u32 = 8;
const STACK_BYTES: u32 = (SLOW_FRAMES * 8) as u32;

/// The `SLOW_SITES` element of a wait for `lock` at the current stack, given out now if the
/// site has none; [`NO_SITE`] when this CPU's range has no free element near its hash.
#[inline(always)]
pub(crate) fn site<C: EbpfContext>(ctx: &C, lock: u64) -> u32 {
    let Some(p) = PLACING.get_ptr_mut(0) else {
        return NO_SITE;
    };
    // SAFETY: this CPU's own element: STACK_BYTES of frames, zeroed by the helper past those
    // it fills.
    let got = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            (*p).frames.as_mut_ptr() as *mut _,
            STACK_BYTES,
            0,
        )
    };
    if got < 0 {
        dropped(drop::PROBE_CONTENTION, drop::KERNEL_STACK);
    }
    // Stored, then read back as plain numbers: the identity's many branches end here for the
    // verifier, instead of multiplying the paths through what follows (5.10's verifier, under
    // emulation, took seconds otherwise).
    // SAFETY: as above.
    let (lock_id, tgid) = unsafe {
        (*p).lock = identify(lock, lcb::F_SPIN, false);
        (*p).tgid = filter::process_of_all().unwrap_or(0);
        (*p).kernel_frames = (got.max(0) / 8) as u32;
        (
            core::ptr::read_volatile(&(*p).lock),
            core::ptr::read_volatile(&(*p).tgid),
        )
    };
    let mut h = lock_id.static_addr
        ^ u64::from(lock_id.class) << 40
        ^ u64::from(lock_id.known) << 48
        ^ u64::from(tgid) << 8;
    for i in 0..SLOW_FRAMES {
        // SAFETY: this CPU's own element.
        let ip = unsafe { (*p).frames[i] };
        h = (h ^ ip).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    let h = h | 1;
    let base = unsafe { bpf_get_smp_processor_id() } * SLOW_SITES_PER_CPU;
    let start = (h >> 40) as u32;
    let mut free = NO_SITE;
    for probe in 0..PROBES {
        let index = base + (start.wrapping_add(probe) % SLOW_SITES_PER_CPU);
        let Some(s) = SLOW_SITES.get_ptr_mut(index) else {
            return NO_SITE;
        };
        // SAFETY: this CPU's own range: no other CPU writes it, and user space only frees
        // sites of processes that ended.
        let (hash, owner) = unsafe { ((*s).hash, (*s).tgid) };
        if hash == h && owner == tgid {
            return index;
        }
        if hash == 0 {
            free = index;
            break;
        }
    }
    // Claimed after the search, so the verifier (5.10's under emulation is slow) walks the
    // claim once, not once per element tried.
    let Some(s) = SLOW_SITES.get_ptr_mut(free) else {
        dropped(drop::PROBE_CONTENTION, drop::MAP_FULL);
        return NO_SITE;
    };
    // SAFETY: a free element of this CPU's range, as above.
    unsafe { claim(ctx, s, p, h) };
    free
}

/// Gives the free element `s` to the site being placed: its lock, process and both stacks.
///
/// # Safety
/// `s` is a free element of this CPU's range, `p` this CPU's wait being placed.
#[inline(always)]
unsafe fn claim<C: EbpfContext>(ctx: &C, s: *mut SlowSite, p: *const Placing, h: u64) {
    unsafe {
        (*s).lock = (*p).lock;
        (*s).tgid = (*p).tgid;
        (*s).kernel_frames = (*p).kernel_frames;
        for i in 0..SLOW_FRAMES {
            (*s).kernel[i] = (*p).frames[i];
        }
        if setting(|s| &s.user_fp) != 0 {
            let user = bpf_get_stack(
                ctx.as_ptr(),
                (*s).user.as_mut_ptr() as *mut _,
                STACK_BYTES,
                u64::from(BPF_F_USER_STACK),
            );
            if user < 0 {
                dropped(drop::PROBE_CONTENTION, drop::USER_STACK);
            }
            (*s).user_frames = (user.max(0) / 8) as u32;
            (*s).user_copy = -1;
        } else {
            (*s).user_frames = 0;
            let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
            (*s).user_copy = copies::slow_user_stack(ctx, drop::PROBE_CONTENTION, tgid);
        }
        (*s).hash = h;
    }
}

/// Adds a wait of `ns` to the site `index` (this CPU's: the waiter did not migrate).
#[inline(always)]
pub(crate) fn add_wait(index: u32, ns: u64) {
    let Some(s) = SLOW_SITES.get_ptr_mut(index) else {
        return;
    };
    let slot = (log2_slot(ns) as usize).min(WAIT_SLOTS - 1);
    // SAFETY: this CPU's own range, as in `site`.
    unsafe {
        let w = &mut (*s).waits;
        w.count += 1;
        w.total_ns += ns;
        if w.max_ns < ns {
            w.max_ns = ns;
        }
        w.slots[slot] += 1;
    }
}
