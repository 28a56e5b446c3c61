//! Thread exits of the target from `sched:sched_process_exit` (tp_btf, or classic tracepoint):
//! one event per thread, marked `PROCESS` once, when the whole process has ended.
//!
//! Which exit ends the process: `do_exit` decrements `signal->live` before this tracepoint on
//! every kernel from 6.1 to 6.18, and the thread that takes it to 0 is the last (its
//! `group_dead`, which only recent kernels pass to the tracepoint: 6.18 does, 6.1 does not). `pid == tid`
//! is not it: the leader may exit first. Reading `live == 0` is not enough alone: two threads
//! exiting together may both read 0 after the last decrement. So the first thread that reads 0
//! claims the process in `ENDED`, keyed by its `signal_struct` and tgid, and only that one is
//! marked: exactly one `PROCESS` event per process.
//!
//! Execs and forks of the target from `sched:sched_process_exec` and `sched_process_fork`, for
//! the fd trace (`record --trace`) and a launched command's children (`children`: followed from
//! their fork, unfollowed at their end); under `-a`, the same as process starts for user space to
//! snapshot the maps of (`PROCESS_STARTS`). Forks are seen with tp_btf only (the classic
//! tracepoint gives no task to tell a thread from a process by); execs in every mode.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, map, tracepoint},
    maps::LruHashMap,
    programs::{BtfTracePointContext, TracePointContext},
};
use fdprof_common::{
    counters::drop,
    events::{EventRecord, flag, kind},
    process::start,
};

use crate::{
    config, contention,
    counters::dropped,
    filter, kernel, processes,
    settings::{children_on, target_is_set, trace_on},
    streams, targets, trace,
};

const BPF_NOEXIST: u64 = 1;

/// Processes whose end was sent: (`signal_struct` address, tgid).
#[map]
static ENDED: LruHashMap<[u64; 2], u8> = LruHashMap::with_max_entries(4096, 0);

#[inline(always)]
fn exited() {
    // First, whatever it is now: a thread that left the target set still holds its slot.
    let current = bpf_get_current_pid_tgid();
    if filter::process_of(current).is_some() {
        processes::flush_thread(current as u32, (current >> 32) as u32);
    }
    let Some(pid_tgid) = filter::target_pid_tgid() else {
        return;
    };
    // A thread that ends inside a sleeping wait (it never saw the lock) leaves no open wait.
    contention::thread_ended(pid_tgid as u32);
    let tgid = pid_tgid >> 32;
    let ends_process = match kernel::current_signal_live() {
        Some((signal, 0)) => ENDED.insert([signal, tgid], 1, BPF_NOEXIST).is_ok(),
        _ => false,
    };
    if ends_process && (trace_on() || children_on()) {
        filter::unfollow(tgid as u32);
    }
    if ends_process {
        targets::ended(tgid as u32);
        // Its per-process rows are freed by user space once read.
        if filter::process_of(pid_tgid).is_some() {
            streams::ended(tgid as u32);
        }
    }
    streams::emit(EventRecord {
        kind: kind::EXIT,
        flags: if ends_process { flag::PROCESS } else { 0 },
        ..EventRecord::default()
    });
}

#[btf_tracepoint(function = "sched_process_exit")]
pub(crate) fn fdprof_task_exit(_ctx: BtfTracePointContext) -> i32 {
    exited();
    0
}

#[tracepoint]
pub(crate) fn fdprof_tp_task_exit(_ctx: TracePointContext) -> u32 {
    exited();
    0
}

/// The trace's exec events come from here in every mode: direct modes probe no raw syscall
/// exit, and this fires once the exec has closed its close-on-exec fds.
#[btf_tracepoint(function = "sched_process_exec")]
pub(crate) fn fdprof_task_exec(ctx: BtfTracePointContext) -> i32 {
    let old_pid: i32 = ctx.arg(1);
    executed(old_pid as u32);
    0
}

/// `old_pid` at 16 in the record.
#[tracepoint]
pub(crate) fn fdprof_tp_task_exec(ctx: TracePointContext) -> u32 {
    let old_pid = unsafe { ctx.read_at::<i32>(16) }.unwrap_or(0);
    executed(old_pid as u32);
    0
}

/// An exec: for the trace, and under `-a` a start to snapshot (the new program is mapped by
/// now; the libraries its loader maps are caught by the next pass if it lives that long).
/// `old_pid`: the thread's tid before the exec; a thread other than the leader takes the
/// leader's tid, so the slot of its old one is flushed here, or nothing would.
#[inline(always)]
fn executed(old_pid: u32) {
    let current = bpf_get_current_pid_tgid();
    if old_pid != current as u32 && filter::process_of(current).is_some() {
        processes::flush_thread(old_pid, (current >> 32) as u32);
    }
    targets::executed();
    if trace_on() {
        trace::executed();
    }
    streams::started((bpf_get_current_pid_tgid() >> 32) as u32, start::EXEC);
}

/// Forks of the target, for the trace and a launched command's children:
/// `sched_process_fork(parent, child)`, in the parent, before the child first runs. tp_btf
/// only: the classic tracepoint gives no task to read the child's table from.
#[btf_tracepoint(function = "sched_process_fork")]
pub(crate) fn fdprof_task_fork(ctx: BtfTracePointContext) -> i32 {
    let child: u64 = ctx.arg(1);
    if trace_on() {
        trace::forked(child);
    }
    if children_on() {
        child_started(child);
    }
    if (config::starts_on() || target_is_set())
        && let Some(tgid) = kernel::task_tgid(child)
        && u64::from(tgid) != bpf_get_current_pid_tgid() >> 32
    {
        targets::forked(tgid);
        // A new process (not a thread of this one) to snapshot: one that never execs runs its
        // parent's program under a pid of its own.
        streams::started(tgid, start::FORK);
    }
    0
}

/// A fork by the target or a process followed (`children`): a new process (not a thread) is
/// followed from now on, its figures added to the target's; a full `FOLLOWED` is a
/// `targets`/`map_full` drop. Any new process, whatever its table: unlike the trace, which
/// follows only the forks with tables of their own, these count what every process does.
#[inline(always)]
fn child_started(child: u64) {
    if filter::target_tid().is_none() {
        return;
    }
    let Some(tgid) = kernel::task_tgid(child) else {
        dropped(drop::PROBE_TARGETS, drop::READ_FAILED);
        return;
    };
    if u64::from(tgid) != bpf_get_current_pid_tgid() >> 32 {
        filter::follow(tgid, drop::PROBE_TARGETS);
    }
}

/// `cgroup_attach_task(dst_cgrp, path, task, threadgroup)`, once per task moved, in the task
/// that wrote the move: a process moved into a followed cgroup joins the set from now on.
/// tp_btf only (the classic tracepoint names the thread, not its process): elsewhere user
/// space reads the cgroups again each second.
#[btf_tracepoint(function = "cgroup_attach_task")]
pub(crate) fn fdprof_cgroup_attach(ctx: BtfTracePointContext) -> i32 {
    if !target_is_set() || !config::cgroups_on() {
        return 0;
    }
    let cgrp: u64 = ctx.arg(0);
    let task: u64 = ctx.arg(2);
    if let (Some(to), Some(tgid)) = (kernel::cgroup_key(cgrp), kernel::task_tgid(task))
        && targets::moved(tgid, to)
    {
        streams::started(tgid, start::MOVED);
    }
    0
}

/// `task_rename(task, comm)`: the renamer is of the renamed task's process (prctl, or
/// `/proc/PID/comm` within a process), so the current tgid is its.
#[btf_tracepoint(function = "task_rename")]
pub(crate) fn fdprof_task_rename(ctx: BtfTracePointContext) -> i32 {
    if !target_is_set() || !config::comms_on() {
        return 0;
    }
    let task: u64 = ctx.arg(0);
    let name: *const u8 = ctx.arg(1);
    let leader = task == unsafe { aya_ebpf::helpers::bpf_get_current_task() } && {
        let pid_tgid = bpf_get_current_pid_tgid();
        pid_tgid as u32 == (pid_tgid >> 32) as u32
    };
    let mut comm = [0u8; 16];
    // SAFETY: the helper copes with any source address and writes at most 16 bytes.
    if unsafe { aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(name, &mut comm) }.is_ok() {
        targets::renamed(leader, comm);
    }
    0
}

/// Classic `task:task_rename`: the renamed task's `pid` at 8, `newcomm` at 28.
#[tracepoint]
pub(crate) fn fdprof_tp_task_rename(ctx: TracePointContext) -> u32 {
    if !target_is_set() || !config::comms_on() {
        return 0;
    }
    // SAFETY: the verifier checks context loads against the tracepoint record's size.
    let (pid, comm) = unsafe {
        (
            ctx.read_at::<i32>(8).unwrap_or(0),
            ctx.read_at::<[u8; 16]>(28).unwrap_or([0; 16]),
        )
    };
    let leader = pid as u64 == bpf_get_current_pid_tgid() >> 32;
    targets::renamed(leader, comm);
    0
}
