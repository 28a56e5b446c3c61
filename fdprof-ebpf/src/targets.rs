//! The target set in the kernel (`target_kind::SET`): processes join at the moment they match,
//! not at user space's next look. A `--comm` name's processes join at exec and at a rename of
//! their main thread, and leave at an exec or rename to another name; a target's new processes
//! join at fork when its entry says so (`flag::CHILDREN`, or `BY_COMM`: a fork carries its
//! parent's name); a followed cgroup's processes join when moved in, and leave when moved out;
//! a process leaves when it ends. Its per-process rows stay for user space to
//! read (and delete).

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid};
use fdprof_common::{
    counters::drop,
    targets::{CgroupKey, TargetEntry, flag},
};

use crate::{kernel, maps};

/// `TASK_COMM_LEN`.
const COMM_LEN: usize = 16;

/// The current process after an exec: it joins under its new name, or leaves if it had joined
/// by its old one.
#[inline(always)]
pub fn executed() {
    if !kernel::target_is_set() || !kernel::comms_on() {
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
pub fn renamed(leader: bool, mut comm: [u8; COMM_LEN]) {
    if !leader || !kernel::target_is_set() || !kernel::comms_on() {
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
    if tgid == kernel::own_tgid() {
        return;
    }
    // SAFETY: the values are copied out at once.
    let slot = unsafe { kernel::TARGET_COMMS.get(&comm).copied() };
    let entry = unsafe { kernel::TARGETS.get(&tgid).copied() };
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
pub fn forked(child_tgid: u32) {
    if !kernel::target_is_set() {
        return;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    if child_tgid == parent {
        return; // a thread
    }
    // SAFETY: the value is copied out at once.
    let Some(entry) = (unsafe { kernel::TARGETS.get(&parent).copied() }) else {
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
pub fn moved(tgid: u32, to: CgroupKey) -> bool {
    if !kernel::target_is_set() || !kernel::cgroups_on() || tgid == kernel::own_tgid() {
        return false;
    }
    // SAFETY: the values are copied out at once.
    if let Some(slot) = unsafe { kernel::TARGET_CGROUPS.get(&to).copied() } {
        let joined = unsafe { kernel::TARGETS.get(&tgid).is_none() };
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
    let followed_here = unsafe { kernel::TARGET_CGROUPS.get(&hierarchy).is_some() };
    let entry = unsafe { kernel::TARGETS.get(&tgid).copied() };
    if followed_here && entry.is_some_and(|e| e.flags & flag::BY_CGROUP != 0) {
        leave(tgid);
    }
    false
}

/// The current process ended: it leaves (its pid may be reused by anything).
#[inline(always)]
pub fn ended(tgid: u32) {
    if kernel::target_is_set() {
        leave(tgid);
    }
}

/// `tgid` joins the set; a full set is a counted drop.
#[inline(always)]
fn join(tgid: u32, entry: &TargetEntry) {
    const BPF_NOEXIST: u64 = 1;
    if kernel::TARGETS.insert(&tgid, entry, BPF_NOEXIST).is_err()
        // SAFETY: the value is not kept.
        && unsafe { kernel::TARGETS.get(&tgid).is_none() }
    {
        maps::dropped(drop::PROBE_TARGETS, drop::MAP_FULL);
        return;
    }
    kernel::mark_member(tgid, true);
}

/// `tgid` leaves the set.
#[inline(always)]
fn leave(tgid: u32) {
    let _ = kernel::TARGETS.remove(&tgid);
    kernel::mark_member(tgid, false);
}
