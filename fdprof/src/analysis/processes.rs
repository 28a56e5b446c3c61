//! Per-process figures of a system-wide recording: each process's waits and fd syscalls, from
//! the recording narrowed to it (`model::process::only`), by the same functions as the
//! whole-machine figures.

use fdprof_figures::{LockKind, Process};
use fdprof_recording::Recording;

use super::{by_lock_operation, scan, sum, syscalls, table};
use crate::model::process;

/// Every process of the recording (none unless `-a`), most `file_lock` wait first, then most
/// wait on all locks, most fd syscalls, lowest pid.
pub(crate) fn processes(rec: &Recording) -> Vec<Process> {
    let mut rows: Vec<Process> = rec
        .processes
        .iter()
        .map(|p| {
            let own = process::only(rec, |q| q.pid == p.pid);
            let file_lock = || {
                own.contention
                    .iter()
                    .filter(|s| s.lock == LockKind::FileLock)
            };
            let syscalls = syscalls(&own);
            let scan = p.scan.is_some().then(|| scan(&own));
            Process {
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
            }
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
