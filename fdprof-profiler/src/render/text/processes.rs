//! Per process (`-a`): the top processes by `file_lock` wait, by fd syscalls and by scan work.

use crate::analysis::{Process, Report};
use crate::render::human::duration;
use crate::render::layout::{columns, section};

pub(super) fn processes(out: &mut Vec<String>, r: &Report) {
    if r.processes.is_empty() {
        return;
    }
    let top = match r.options.top {
        0 => r.processes.len(),
        n => n,
    };
    let shown =
        |rows: Vec<&Process>| -> Vec<Vec<String>> { rows.into_iter().take(top).map(row).collect() };
    let head = [
        "pid",
        "comm",
        "file_lock wait",
        "waits",
        "all locks",
        "waits",
        "fd syscalls",
        "busiest syscalls",
    ];
    section(
        out,
        &format!(
            "processes: top {} of {} by file_lock wait (each process's own table)",
            top.min(r.processes.len()),
            r.processes.len()
        ),
    );
    let by_wait: Vec<&Process> = r.processes.iter().collect();
    out.extend(columns(&head, 2, &shown(by_wait), 2));
    if let Some(o) = &r.processes_others {
        out.push(format!(
            "  others: {} process rows folded (the daemon's bound), file_lock wait {} in {} \
             waits, all locks {} in {}, fd syscalls {} ({})",
            o.processes,
            duration(o.file_lock_wait_ns),
            o.file_lock_count,
            duration(o.wait_ns),
            o.wait_count,
            o.fd_syscalls,
            busiest(&o.syscalls)
        ));
    }
    section(out, "processes: by fd syscalls");
    let mut by_calls: Vec<&Process> = r.processes.iter().collect();
    by_calls.sort_by(|a, b| b.fd_syscalls.cmp(&a.fd_syscalls).then(a.pid.cmp(&b.pid)));
    out.extend(columns(&head, 2, &shown(by_calls), 2));
    let mut by_scan: Vec<&Process> = r.processes.iter().filter(|p| p.scan.is_some()).collect();
    if !by_scan.is_empty() {
        section(out, "processes: by scan work (bits scanned past next_fd)");
        by_scan.sort_by(|a, b| {
            b.scan_bits_at_least
                .cmp(&a.scan_bits_at_least)
                .then(a.pid.cmp(&b.pid))
        });
        let rows: Vec<Vec<String>> = by_scan.into_iter().take(top).map(scan_row).collect();
        let head = [
            "pid",
            "comm",
            "allocations",
            "next_fd hits",
            "scan p99",
            "bits ≥",
            "max_fds",
            "expansions",
        ];
        out.extend(columns(&head, 2, &rows, 2));
    }
    out.push(
        "  (report --pid/--comm: one process's waits, stacks and syscalls; --json: every \
         process)"
            .into(),
    );
}

fn comm(p: &Process) -> String {
    if p.comm.is_empty() {
        "?".into()
    } else {
        p.comm.clone()
    }
}

fn scan_row(p: &Process) -> Vec<String> {
    let (allocations, hits, p99) =
        p.scan
            .as_ref()
            .map_or(("-".into(), "-".into(), "-".into()), |s| {
                (
                    s.allocations.to_string(),
                    s.next_fd_hit_rate
                        .map_or("-".into(), |h| format!("{:.0}%", h * 100.0)),
                    s.bits.p99.map_or("-".into(), |b| b.to_string()),
                )
            });
    let (max_fds, expansions) = p.table.as_ref().map_or(("-".into(), "-".into()), |t| {
        (t.max_fds_max.to_string(), t.expansions.to_string())
    });
    vec![
        p.pid.to_string(),
        comm(p),
        allocations,
        hits,
        p99,
        p.scan_bits_at_least.to_string(),
        max_fds,
        expansions,
    ]
}

fn row(p: &Process) -> Vec<String> {
    vec![
        p.pid.to_string(),
        comm(p),
        duration(p.file_lock_wait_ns),
        p.file_lock_count.to_string(),
        duration(p.wait_ns),
        p.wait_count.to_string(),
        p.fd_syscalls.to_string(),
        busiest(&p.syscalls),
    ]
}

/// The three syscalls called most (`socket 120, close 118, …`): a row's busiest.
pub(super) fn busiest(syscalls: &[crate::analysis::Syscall]) -> String {
    let mut rows: Vec<_> = syscalls.iter().collect();
    rows.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    let top: Vec<String> = rows
        .iter()
        .take(3)
        .map(|s| format!("{} {}", s.name, s.calls))
        .collect();
    top.join(", ")
}
