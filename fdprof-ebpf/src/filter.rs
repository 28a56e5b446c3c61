//! The target filter: whether the current thread belongs to what is being profiled (the
//! settings' `target_kind` and `target_id`, the target set, the processes followed), and the
//! process figures are kept under.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{Array, HashMap},
};
use fdprof_common::{counters::drop, settings::target_kind, trace::MAX_FOLLOWED};

use crate::{
    counters::dropped,
    settings::{children_on, per_process, setting, trace_on},
    targets::is_member,
};

/// Processes followed besides the target (`target_kind::TGID`): under the trace, its forks with
/// tables of their own; under `children`, every process it or a followed one starts; each until
/// it ends. Written only at fork and exit, read (lock-free) by the target filter.
#[map]
static FOLLOWED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_FOLLOWED, 0);

/// 1 once any process went into `FOLLOWED`: until then the filter answers for other processes
/// with this array read, which the verifier inlines, and not a hash lookup (a launched server
/// that never forks costs the rest of the machine nothing). Set at the fork, before the child
/// first runs; never cleared (closing it again would need a count kept atomically).
#[map]
static ANY_FOLLOWED: Array<u32> = Array::with_max_entries(1, 0);

/// The current process when figures are kept per process (`-a`, a target set): what they are
/// keyed by. `None` for a single target, whose figures are all one process's.
#[inline(always)]
pub(crate) fn process_of_all() -> Option<u32> {
    per_process().then(|| (bpf_get_current_pid_tgid() >> 32) as u32)
}

/// [`process_of_all`] of a `pid_tgid` already asked for.
#[inline(always)]
pub(crate) fn process_of(pid_tgid: u64) -> Option<u32> {
    per_process().then_some((pid_tgid >> 32) as u32)
}

/// The current thread's tid when it belongs to what is being profiled. Programs take the tid
/// from here rather than asking again: a helper call costs ~15 ns here.
#[inline(always)]
pub(crate) fn target_tid() -> Option<u32> {
    target_pid_tgid().map(|pid_tgid| pid_tgid as u32)
}

/// [`target_tid`], as the whole `pid_tgid` for callers that need the process too.
#[inline(always)]
pub(crate) fn target_pid_tgid() -> Option<u64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let ours = match setting(|s| &s.target_kind) {
        // Every process but fdprof itself (its pid is the id then).
        target_kind::ALL => (pid_tgid >> 32) as u32 != setting(|s| &s.target_id),
        target_kind::TGID => {
            let tgid = (pid_tgid >> 32) as u32;
            tgid == setting(|s| &s.target_id) || ((trace_on() || children_on()) && followed(tgid))
        }
        target_kind::SET => is_member((pid_tgid >> 32) as u32),
        _ => tid == setting(|s| &s.target_id),
    };
    ours.then_some(pid_tgid)
}

/// Whether process `tgid` is followed (started by the target, or by one followed).
#[inline(always)]
fn followed(tgid: u32) -> bool {
    // SAFETY: the value is not kept.
    ANY_FOLLOWED.get(0).is_some_and(|&v| v != 0) && unsafe { FOLLOWED.get(tgid).is_some() }
}

/// Follows process `tgid` from now on; a full map is a counted drop of `probe` (the trace's:
/// its operations are missing from the trace; the targets': from the figures).
#[inline(always)]
pub(crate) fn follow(tgid: u32, probe: u32) {
    if FOLLOWED.insert(tgid, 1, 0).is_err() {
        dropped(probe, drop::MAP_FULL);
    } else if let Some(any) = ANY_FOLLOWED.get_ptr_mut(0) {
        // SAFETY: a valid map value; every writer writes the same 1.
        unsafe { *any = 1 };
    }
}

/// Stops following `tgid` (it has ended: its pid may be reused).
#[inline(always)]
pub(crate) fn unfollow(tgid: u32) {
    let _ = FOLLOWED.remove(tgid);
}
