//! Per-process figures of a recording kept per process: each process's waits and fd syscalls,
//! from the recording narrowed to it (`model::process::split_by`, one pass for all of them), by
//! the same functions as the whole-machine figures; and the row of the processes a bounded
//! recording folded together.

use fdprof_figures::{LockKind, OtherProcesses, Process};
use fdprof_recording::Recording;

use super::{by_lock_operation, scan, sum, syscalls, table};
use crate::model::process;

/// Every process of the recording (none unless `-a`), most `file_lock` wait first, then most
/// wait on all locks, most fd syscalls, lowest pid.
pub fn processes(rec: &Recording) -> Vec<Process> {
    let mut own = process::split_by(rec, |p| p.pid);
    let mut rows: Vec<Process> = rec
        .processes
        .iter()
        // A container's gone processes, in one row: in its container's figures, not a process.
        .filter(|p| !process::is_gone_in_container(p.pid))
        .filter_map(|p| {
            let own = own.remove(&p.pid)?;
            let file_lock = || {
                own.contention
                    .iter()
                    .filter(|s| s.lock == LockKind::FileLock)
            };
            let syscalls = syscalls(&own);
            let scan = p.scan.is_some().then(|| scan(&own));
            Some(Process {
                scan_bits_at_least: scan.as_ref().map_or(0, |s| scan::bits_at_least(&s.bits)),
                far_scans: scan.as_ref().map_or(0, |s| scan::far_scans(&s.bits)),
                scan,
                table: p.table.is_some().then(|| table(&own)),
                pid: p.pid,
                comm: p.comm.clone(),
                identity: p.identity.clone(),
                file_lock_wait_ns: sum(file_lock().map(|s| s.total_wait_ns)),
                file_lock_count: sum(file_lock().map(|s| s.count)),
                wait_ns: sum(own.contention.iter().map(|s| s.total_wait_ns)),
                wait_count: sum(own.contention.iter().map(|s| s.count)),
                by_lock_operation: by_lock_operation(&own),
                fd_syscalls: sum(syscalls.iter().map(|s| s.calls)),
                allocations: sum(syscalls.iter().map(|s| s.allocs)),
                fds_closed: sum(syscalls.iter().map(|s| s.fds_closed)),
                syscalls,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        b.file_lock_wait_ns
            .cmp(&a.file_lock_wait_ns)
            .then(b.wait_ns.cmp(&a.wait_ns))
            .then(b.fd_syscalls.cmp(&a.fd_syscalls))
            .then(a.pid.cmp(&b.pid))
    });
    rows
}

/// The processes folded out of a bounded recording, as one row; `None` when none were.
pub(crate) fn others(rec: &Recording) -> Option<OtherProcesses> {
    let folded = rec.processes_folded.as_ref()?;
    // Their syscall rows, shaped as a process's (counted, not timed).
    let narrowed = Recording {
        syscall_latency: false,
        syscalls: folded.syscalls.clone(),
        ..rec.facts_only()
    };
    let syscalls = syscalls(&narrowed);
    Some(OtherProcesses {
        processes: folded.processes,
        file_lock_wait_ns: folded.file_lock_wait_ns,
        file_lock_count: folded.file_lock_count,
        wait_ns: folded.wait_ns,
        wait_count: folded.wait_count,
        fd_syscalls: sum(syscalls.iter().map(|s| s.calls)),
        allocations: sum(syscalls.iter().map(|s| s.allocs)),
        fds_closed: sum(syscalls.iter().map(|s| s.fds_closed)),
        syscalls,
    })
}
