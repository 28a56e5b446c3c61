//! The fd-table trace (`record --trace`): one `TraceRecord` per operation of the target on its
//! table, sent from the fd syscalls' exits. Every caller checks `settings::trace_on()` first, a
//! frozen setting, so without `--trace` the verifier removes all of this.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::map,
    maps::RingBuf,
};
use fdprof_common::{
    counters::drop,
    syscalls::{CLOSE_RANGE_CLOEXEC, CLOSE_RANGE_UNSHARE, Effect, F_DUPFD_CLOEXEC, SyscallEntry},
    trace::{CLOEXEC_BY_INDEX, EBADF, EMFILE, TraceRecord, flag, op},
};

use crate::{counters::dropped, filter, kernel, syscall_table::effect_of};

/// Sized by user space when tracing (`trace::RING_BYTES`); one page otherwise.
#[map]
static TRACE: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Sends `r`, stamped with the exit time, the current table and task; a full buffer is a
/// counted drop (the replay then says the trace has a gap).
#[inline(always)]
fn send(mut r: TraceRecord) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if r.flags & flag::LOCKED == 0 {
        r.exit_ns = unsafe { bpf_ktime_get_ns() };
    }
    r.table = kernel::current_files().unwrap_or(0);
    r.pid = (pid_tgid >> 32) as u32;
    r.tid = pid_tgid as u32;
    if TRACE.output::<TraceRecord>(&r, 0).is_err() {
        dropped(drop::PROBE_TRACE, drop::RINGBUF_FULL);
    }
}

/// Whether the syscall `index` with arguments `args` asks for a close-on-exec fd.
#[inline(always)]
pub(crate) fn cloexec(index: u32, args: [u64; 4]) -> bool {
    let rule = CLOEXEC_BY_INDEX[(index & 63) as usize];
    let asked = (args[0] & rule.masks[0])
        | (args[1] & rule.masks[1])
        | (args[2] & rule.masks[2])
        | (args[3] & rule.masks[3]);
    rule.always || asked != 0
}

#[inline(always)]
fn record(entry: &SyscallEntry, op: u8, fd: i32) -> TraceRecord {
    TraceRecord {
        enter_ns: entry.start_ns,
        fd,
        op,
        flags: if entry.cloexec != 0 { flag::CLOEXEC } else { 0 },
        syscall: entry.index,
        next_fd: entry.next_fd,
        max_fds: entry.max_fds,
        ..TraceRecord::default()
    }
}

/// `r` done at `locked_ns` inside its table's `file_lock` section, when an in-lock probe saw
/// it (0: none did, the syscall's entry and exit bound it).
#[inline(always)]
fn locked(mut r: TraceRecord, locked_ns: u64) -> TraceRecord {
    if locked_ns != 0 {
        r.enter_ns = locked_ns;
        r.exit_ns = locked_ns;
        r.flags |= flag::LOCKED;
    }
    r
}

/// The moment of the syscall's one allocator call inside `file_lock`, if it made exactly one.
#[inline(always)]
fn one_alloc(entry: &SyscallEntry) -> u64 {
    if entry.allocs == 1 {
        entry.locked_ns[0]
    } else {
        0
    }
}

/// What [`syscall_exit`] needs kept from the entry, in the entry's fields that the syscall
/// does not otherwise use: `fd_pair` holds arg 0 (close's fd, close_range's low end), `start`
/// close_range's high end, `cloexec` close-on-exec (close_range: its `flag` bits).
#[inline(always)]
pub(crate) fn keep(entry: &mut SyscallEntry, index: u32, args: [u64; 4]) {
    entry.cloexec = match effect_of(index) {
        Effect::CloseRange => {
            entry.start = args[1] as u32;
            let mut f = 0;
            if args[2] & CLOSE_RANGE_CLOEXEC != 0 {
                f |= flag::CLOEXEC_ONLY;
            }
            if args[2] & CLOSE_RANGE_UNSHARE != 0 {
                f |= flag::UNSHARE;
            }
            f
        }
        Effect::FcntlDup => u8::from(args[1] == F_DUPFD_CLOEXEC),
        _ => u8::from(cloexec(index, args)),
    };
}

/// The exit of a traced fd syscall whose entry is `entry` (see [`keep`]).
#[inline(always)]
pub(crate) fn syscall_exit(entry: &SyscallEntry, ret: i64) {
    let effect = effect_of(u32::from(entry.index));
    match effect {
        Effect::Alloc | Effect::FcntlDup => {
            // Only EMFILE is the allocator's failure; other failures leave no trace (an fd
            // taken and given back inside the syscall is not visible here).
            if ret >= 0 || ret == -EMFILE {
                let mut r = record(entry, op::ALLOC, ret as i32);
                r.arg = entry.start;
                send(locked(r, one_alloc(entry)));
            }
        }
        Effect::AllocPair => {
            if ret == -EMFILE {
                send(record(entry, op::ALLOC, ret as i32));
            } else if ret >= 0 {
                let [first, second] = if entry.allocs == 2 {
                    entry.locked_ns
                } else {
                    [0; 2]
                };
                match unsafe { bpf_probe_read_user(entry.fd_pair as *const [i32; 2]) } {
                    Ok([a, b]) => {
                        send(locked(record(entry, op::ALLOC, a), first));
                        send(locked(record(entry, op::ALLOC, b), second));
                    }
                    Err(_) => dropped(drop::PROBE_TRACE, drop::READ_FAILED),
                }
            }
        }
        Effect::Install => {
            if ret >= 0 {
                send(locked(
                    record(entry, op::INSTALL, ret as i32),
                    entry.pending_ns,
                ));
            }
        }
        // close releases the fd even when it reports a flush error; EBADF: nothing was open.
        Effect::Close => {
            if ret != -EBADF {
                let mut r = record(entry, op::RELEASE, entry.fd_pair as i32);
                r.flags = 0;
                send(locked(r, entry.pending_ns));
            }
        }
        Effect::CloseRange => {
            if ret == 0 {
                let mut r = record(entry, op::CLOSE_RANGE, entry.fd_pair as i32);
                r.arg = entry.start;
                send(r);
            }
        }
    }
}

/// A growth of the table to `max_fds`, seen at a syscall's exit.
#[inline(always)]
pub(crate) fn expanded(max_fds: u32) {
    send(TraceRecord {
        op: op::EXPAND,
        fd: max_fds as i32,
        max_fds,
        ..TraceRecord::default()
    });
}

/// An exec of the target, from `sched_process_exec`: the new image is in place and the
/// close-on-exec pass is done.
#[inline(always)]
pub(crate) fn executed() {
    if filter::target_tid().is_none() {
        return;
    }
    send(TraceRecord {
        op: op::EXEC,
        syscall: u8::MAX,
        ..TraceRecord::default()
    });
}

/// A fork by the target. A child with a table of its own (no `CLONE_FILES`) is followed, and
/// its table starts as a copy of the parent's; threads and `CLONE_FILES` children share the
/// parent's table, which the trace already has.
#[inline(always)]
pub(crate) fn forked(child: u64) {
    if filter::target_tid().is_none() {
        return;
    }
    let (Some(parent), Some(table), Some(tgid)) = (
        kernel::current_files(),
        kernel::task_files(child),
        kernel::task_tgid(child),
    ) else {
        dropped(drop::PROBE_TRACE, drop::READ_FAILED);
        return;
    };
    if table == parent {
        return;
    }
    filter::follow(tgid, drop::PROBE_TRACE);
    send(TraceRecord {
        op: op::FORK,
        fd: tgid as i32,
        child_table: table,
        syscall: u8::MAX,
        ..TraceRecord::default()
    });
}
