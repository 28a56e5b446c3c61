//! Per-process series of a system-wide daemon (`daemon -a`): the first
//! [`PROCESS_SERIES`] processes of each target's running total in the report's order (most
//! `file_lock` wait first), labelled `pid` and `comm`. The label set stays bounded however many
//! processes come and go: the rest get no series of their own (their counts stay in the
//! target's series), and `fdprof_processes` says how many processes the figures hold. No
//! `other` series: a process moving in or out of the first K would make its sum go down,
//! which a counter must not.

use std::fmt;

use fdprof_figures::{Process, Report};
use prometheus_client::registry::Unit;

use super::{Exposition, Families, seconds};

/// Processes with series of their own, per target (stated in `daemon --help` and the docs).
pub(crate) const PROCESS_SERIES: usize = 20;

/// The processes of `r` that get series: the first of the report's, which ranks them (most
/// `file_lock` wait first, `analysis::processes`).
pub(crate) fn exposed(r: &Report) -> impl Iterator<Item = &Process> {
    r.processes.iter().take(PROCESS_SERIES)
}

pub(super) fn write(e: &Exposition, out: &mut Families) -> fmt::Result {
    let rows = || {
        e.targets.iter().flat_map(|(_, r)| {
            exposed(r).map(|p| {
                let pid = p.pid.to_string();
                ([("pid", pid), ("comm", p.comm.clone())], p)
            })
        })
    };
    out.counters(
        "fdprof_process_file_lock_contentions",
        "Waits on each process's own files->file_lock (daemon -a, the first processes).",
        None,
        rows().map(|(labels, p)| (labels, p.file_lock_count)),
    )?;
    out.counters(
        "fdprof_process_file_lock_wait",
        "Time waited on each process's own files->file_lock (daemon -a, the first processes).",
        Some(&Unit::Seconds),
        rows().map(|(labels, p)| (labels, seconds(p.file_lock_wait_ns))),
    )?;
    out.counters(
        "fdprof_process_fd_syscalls",
        "fd syscalls each process made (daemon -a, the first processes).",
        None,
        rows().map(|(labels, p)| (labels, p.fd_syscalls)),
    )?;
    out.counters(
        "fdprof_process_fd_allocations",
        "fds each process took with alloc_fd (daemon -a, the first processes).",
        None,
        rows().map(|(labels, p)| (labels, p.allocations)),
    )?;
    out.counters(
        "fdprof_process_fd_closes",
        "fds removed from each process's table (daemon -a, the first processes).",
        None,
        rows().map(|(labels, p)| (labels, p.fds_closed)),
    )?;
    out.gauges(
        "fdprof_process_fd_table_size",
        "The largest max_fds of each process's fd table (daemon -a, the first processes).",
        rows().filter_map(|(labels, p)| p.table.as_ref().map(|t| (labels, t.max_fds_max))),
    )?;
    out.gauges(
        "fdprof_processes",
        "Processes the figures hold (daemon -a); the first ones have series of their own.",
        e.targets
            .iter()
            .filter(|(_, r)| !r.processes.is_empty())
            .map(|(target, r)| ([("target", target.as_str())], r.processes.len() as u64)),
    )
}
