//! Per-container series (`daemon -a`, `daemon --cgroup`): the first [`CONTAINER_SERIES`]
//! container groups of each target's running total in the report's order (most `file_lock`
//! wait first), labelled `container` (the full id), `runtime` and `pod_uid` (empty where not
//! known). Bounded as the per-process series are, for the same reason: the rest stay in the
//! target's series, and no `other` series could stay a counter.

use std::fmt;

use fdprof_figures::{CgroupGroup, Report};
use prometheus_client::registry::Unit;

use super::{Exposition, Families, seconds};

/// Containers with series of their own, per target (stated in `daemon --help` and the docs).
pub(crate) const CONTAINER_SERIES: usize = 50;

/// The container groups of `r` that get series.
pub(super) fn exposed(r: &Report) -> impl Iterator<Item = &CgroupGroup> {
    r.cgroups
        .iter()
        .filter(|g| g.container.is_some())
        .take(CONTAINER_SERIES)
}

pub(super) fn write(e: &Exposition, out: &mut Families) -> fmt::Result {
    let rows = || {
        e.targets.iter().flat_map(|(target, r)| {
            exposed(r).filter_map(move |g| {
                let c = g.container.as_ref()?;
                let labels = [
                    ("target", target.clone()),
                    ("container", c.id.clone()),
                    ("runtime", c.runtime.as_str().to_string()),
                    ("pod_uid", g.pod_uid.clone().unwrap_or_default()),
                ];
                Some((labels, g))
            })
        })
    };
    out.counters(
        "fdprof_container_file_lock_contentions",
        "Waits on the files->file_lock of each container's processes (the first containers).",
        None,
        rows().map(|(labels, g)| (labels, g.file_lock.count)),
    )?;
    out.counters(
        "fdprof_container_file_lock_wait",
        "Time waited on the files->file_lock of each container's processes (the first \
         containers).",
        Some(&Unit::Seconds),
        rows().map(|(labels, g)| (labels, seconds(g.file_lock.wait_ns))),
    )?;
    out.counters(
        "fdprof_container_fd_syscalls",
        "fd syscalls each container's processes made (the first containers).",
        None,
        rows().map(|(labels, g)| (labels, g.fd_syscalls)),
    )?;
    out.counters(
        "fdprof_container_fd_allocations",
        "fds each container's processes took with alloc_fd (the first containers).",
        None,
        rows().map(|(labels, g)| (labels, g.syscalls.iter().map(|s| s.allocs).sum::<u64>())),
    )?;
    out.gauges(
        "fdprof_containers",
        "Containers the figures hold; the first ones have series of their own.",
        e.targets
            .iter()
            .map(|(target, r)| {
                let n = r.cgroups.iter().filter(|g| g.container.is_some()).count();
                ([("target", target.as_str())], n as u64)
            })
            .filter(|(_, n)| *n > 0),
    )
}
