//! The target set in the kernel (`target_kind::SET`): processes join at the moment they match,
//! not at user space's next look. A `--comm` name's processes join at exec and at a rename of
//! their main thread, and leave at an exec or rename to another name; a target's new processes
//! join at fork when its entry says so (`flag::CHILDREN`, or `BY_COMM`: a fork carries its
//! parent's name); a followed cgroup's processes join when moved in, and leave when moved out;
//! a process leaves when it ends. Its per-process rows stay for user space to
//! read (and delete).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::map,
    maps::{Array, HashMap},
};
use fdprof_common::{
    counters::drop,
    targets::{CgroupKey, MAX_CGROUPS, MAX_COMMS, MAX_TARGETS, TargetEntry, flag},
};

use crate::{
    config::{cgroups_on, comms_on},
    counters::dropped,
    settings::{own_tgid, target_is_set},
};

/// The target set (`target_kind::SET`): tgid → how it joined. User space fills it; the
/// programs add `--comm` names' processes at exec and rename and targets' children at fork, and
/// remove processes that end. Its size is set at load (`--max-processes`).
#[map]
pub(crate) static TARGETS: HashMap<u32, TargetEntry> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// The set's membership by pid, what the filter reads (see `MAX_MEMBER_PIDS` in
/// `fdprof_common::targets`); its size is set at load. Written with `TARGETS`, each pid's
/// element by that pid's joins and leaves alone.
#[map]
static MEMBERS: Array<u8> = Array::with_max_entries(1, 0);

/// Whether process `tgid` is in the set: an array load, or a `TARGETS` lookup for a pid past
/// `MEMBERS`.
#[inline(always)]
pub(crate) fn is_member(tgid: u32) -> bool {
    match MEMBERS.get(tgid) {
        Some(&m) => m != 0,
        // SAFETY: the value is not kept.
        None => unsafe { TARGETS.get(tgid).is_some() },
    }
}

/// Marks process `tgid` in or out of the set (`TARGETS` says how it joined).
#[inline(always)]
fn mark_member(tgid: u32, member: bool) {
    if let Some(m) = MEMBERS.get_ptr_mut(tgid) {
        // SAFETY: a valid map value; the element is this pid's alone.
        unsafe { *m = u8::from(member) };
    }
}

/// Names whose processes join the set (comm, NUL-padded → slot), when `CONFIG[COMMS]` is on.
#[map]
static TARGET_COMMS: HashMap<[u8; 16], u32> = HashMap::with_max_entries(MAX_COMMS, 0);

/// Cgroups whose processes join the set when moved in (and their hierarchies' marks), when
/// `CONFIG[CGROUPS]` is on.
#[map]
static TARGET_CGROUPS: HashMap<CgroupKey, u32> = HashMap::with_max_entries(MAX_CGROUPS, 0);

/// `TASK_COMM_LEN`.
const COMM_LEN: usize = 16;

/// The current process after an exec: it joins under its new name, or leaves if it had joined
/// by its old one.
#[inline(always)]
pub(crate) fn executed() {
    if !target_is_set() || !comms_on() {
        return;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if let Ok(comm) = bpf_get_current_comm() {
        named(tgid, comm);
    }
}

/// A rename of a task of the current process (`task_rename`): only its main thread's name is
/// the process's. `comm` may hold bytes past its NUL (prctl's buffer): they are cleared.
#[inline(always)]
pub(crate) fn renamed(leader: bool, mut comm: [u8; COMM_LEN]) {
    if !leader || !target_is_set() || !comms_on() {
        return;
    }
    let mut end = false;
    for b in comm.iter_mut() {
        end |= *b == 0;
        if end {
            *b = 0;
        }
    }
    named((bpf_get_current_pid_tgid() >> 32) as u32, comm);
}

/// Process `tgid` is now named `comm`.
#[inline(always)]
fn named(tgid: u32, comm: [u8; COMM_LEN]) {
    if tgid == own_tgid() {
        return;
    }
    // SAFETY: the values are copied out at once.
    let slot = unsafe { TARGET_COMMS.get(comm).copied() };
    let entry = unsafe { TARGETS.get(tgid).copied() };
    match (slot, entry) {
        (Some(slot), None) => join(
            tgid,
            &TargetEntry {
                slot,
                flags: flag::BY_COMM,
            },
        ),
        // Joined by another name, or for another reason: it stays as it joined.
        (Some(_), Some(_)) => {}
        (None, Some(e)) if e.flags & flag::BY_COMM != 0 && e.flags & flag::CHILDREN == 0 => {
            leave(tgid);
        }
        (None, _) => {}
    }
}

/// A fork by the current task: `child_tgid` joins with its parent's entry when that says so.
#[inline(always)]
pub(crate) fn forked(child_tgid: u32) {
    if !target_is_set() {
        return;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    if child_tgid == parent {
        return; // a thread
    }
    // SAFETY: the value is copied out at once.
    let Some(entry) = (unsafe { TARGETS.get(parent).copied() }) else {
        return;
    };
    if entry.flags & (flag::CHILDREN | flag::BY_COMM) != 0 {
        join(child_tgid, &entry);
    }
}

/// Process `tgid` was moved into cgroup `to` (each of its threads, or one): it joins when `to`
/// is followed, and one that joined by its cgroup leaves when moved elsewhere in a hierarchy
/// followed. Returns whether it joined.
#[inline(always)]
pub(crate) fn moved(tgid: u32, to: CgroupKey) -> bool {
    if !target_is_set() || !cgroups_on() || tgid == own_tgid() {
        return false;
    }
    // SAFETY: the values are copied out at once.
    if let Some(slot) = unsafe { TARGET_CGROUPS.get(to).copied() } {
        let joined = unsafe { TARGETS.get(tgid).is_none() };
        join(
            tgid,
            &TargetEntry {
                slot,
                flags: flag::CHILDREN | flag::BY_CGROUP,
            },
        );
        return joined;
    }
    let hierarchy = CgroupKey {
        hierarchy: to.hierarchy,
        _pad: 0,
        id: 0,
    };
    let followed_here = unsafe { TARGET_CGROUPS.get(hierarchy).is_some() };
    let entry = unsafe { TARGETS.get(tgid).copied() };
    if followed_here && entry.is_some_and(|e| e.flags & flag::BY_CGROUP != 0) {
        leave(tgid);
    }
    false
}

/// The current process ended: it leaves (its pid may be reused by anything).
#[inline(always)]
pub(crate) fn ended(tgid: u32) {
    if target_is_set() {
        leave(tgid);
    }
}

/// `tgid` joins the set; a full set is a counted drop.
#[inline(always)]
fn join(tgid: u32, entry: &TargetEntry) {
    const BPF_NOEXIST: u64 = 1;
    if TARGETS.insert(tgid, entry, BPF_NOEXIST).is_err()
        // SAFETY: the value is not kept.
        && unsafe { TARGETS.get(tgid).is_none() }
    {
        dropped(drop::PROBE_TARGETS, drop::MAP_FULL);
        return;
    }
    mark_member(tgid, true);
}

/// `tgid` leaves the set.
#[inline(always)]
fn leave(tgid: u32) {
    let _ = TARGETS.remove(tgid);
    mark_member(tgid, false);
}
