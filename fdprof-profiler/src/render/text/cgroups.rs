//! By container / cgroup (`-a`, a target set): the top groups by `file_lock` wait and by fd
//! syscalls.

use fdprof_figures::CgroupGroup;

use crate::analysis::Report;
use crate::render::human::duration;
use crate::render::layout::{columns, section};

pub(super) fn cgroups(out: &mut Vec<String>, r: &Report) {
    // One group of processes whose cgroup is not known says nothing a process table does not.
    if r.cgroups.is_empty() || (r.cgroups.len() == 1 && r.cgroups[0].path.is_none()) {
        return;
    }
    let top = match r.options.top {
        0 => r.cgroups.len(),
        n => n,
    };
    let head = [
        "container / cgroup",
        "processes",
        "file_lock wait",
        "waits",
        "fd syscalls",
        "busiest syscalls",
    ];
    section(
        out,
        &format!(
            "by container / cgroup: top {} of {} by file_lock wait",
            top.min(r.cgroups.len()),
            r.cgroups.len()
        ),
    );
    let rows = |groups: Vec<&CgroupGroup>| -> Vec<Vec<String>> {
        groups.into_iter().take(top).map(row).collect()
    };
    out.extend(columns(&head, 1, &rows(r.cgroups.iter().collect()), 2));
    section(out, "by container / cgroup: by fd syscalls");
    let mut by_calls: Vec<&CgroupGroup> = r.cgroups.iter().collect();
    by_calls.sort_by(|a, b| b.fd_syscalls.cmp(&a.fd_syscalls).then(a.path.cmp(&b.path)));
    out.extend(columns(&head, 1, &rows(by_calls), 2));
    out.push("  (report --container ID / --cgroup PATH: one group's figures)".into());
}

fn row(g: &CgroupGroup) -> Vec<String> {
    vec![
        g.name(),
        g.processes.len().to_string(),
        duration(g.file_lock.wait_ns),
        g.file_lock.count.to_string(),
        g.fd_syscalls.to_string(),
        super::processes::busiest(&g.syscalls),
    ]
}
