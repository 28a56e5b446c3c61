//! Per process (`top -a` only): the view's processes by `file_lock` wait or by scan work, one
//! line each: pid and comm (escaped: whoever runs a process names it), its own `file_lock`
//! waits and their time, its allocations, how many of them scanned far (a bitmap word or more
//! past `next_fd`) and the bits they scanned in all, and its table's size.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::{cpu, head_style, pane_block, rate, scrolled, waiting};
use crate::state::{Pane, ProcessOrder, State};
use fdprof_figures::CgroupGroup;
use fdprof_profiler::analysis::Process;
use fdprof_recording::escape;

const HEAD: &str =
    "    pid comm             fl wait/s fl wait/CPU  alloc/s far scans  scan bits≥  max_fds";

/// Lines the pane takes besides its rows: the borders and the column heads.
pub(crate) const CHROME: u16 = 3;

pub(crate) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let shown = state.report().map_or(0, |(r, _)| r.processes.len());
    let title = format!(
        "processes by {}{} ({shown}) · o orders · g groups",
        state.process_order.label(),
        if state.by_container {
            ", by container / cgroup"
        } else {
            ""
        }
    );
    let block = pane_block(title, Pane::Processes, state);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some((report, duration_ns)) = state.report() else {
        frame.render_widget(
            scrolled(vec![waiting(state)], Pane::Processes, state),
            inner,
        );
        return;
    };
    let mut lines = vec![Line::styled(HEAD, head_style())];
    if report.processes.is_empty() {
        lines.push(Line::from("no process used the fd table"));
    }
    let rows = ordered(&report.processes, state.process_order);
    if state.by_container {
        // Each group (the report's order: most file_lock wait first), its processes under it.
        for g in &report.cgroups {
            lines.push(Line::styled(group_row(g, duration_ns), head_style()));
            lines.extend(
                rows.iter()
                    .filter(|p| g.processes.contains(&p.pid))
                    .map(|p| Line::from(row(p, duration_ns))),
            );
        }
    } else {
        lines.extend(rows.into_iter().map(|p| Line::from(row(p, duration_ns))));
    }
    frame.render_widget(scrolled(lines, Pane::Processes, state), inner);
}

/// Lines the pane's body wants: a row per process, and grouped, a line per group.
pub(crate) fn rows(report: &fdprof_profiler::analysis::Report, state: &State) -> usize {
    let groups = if state.by_container {
        report.cgroups.len()
    } else {
        0
    };
    (report.processes.len() + groups).max(1)
}

/// The processes in `order`: the report's own order (most `file_lock` wait first), or most scan
/// work first; ties by pid.
pub(crate) fn ordered(processes: &[Process], order: ProcessOrder) -> Vec<&Process> {
    let mut rows: Vec<&Process> = processes.iter().collect();
    if order == ProcessOrder::ScanWork {
        rows.sort_by(|a, b| {
            b.scan_bits_at_least
                .cmp(&a.scan_bits_at_least)
                .then(a.pid.cmp(&b.pid))
        });
    }
    rows
}

/// A group's line: its name (escaped: a cgroup path is anyone's to choose), its processes,
/// its `file_lock` waits and its fd syscalls.
fn group_row(g: &CgroupGroup, duration_ns: u64) -> String {
    format!(
        "{} · {} processes · file_lock {} waits/s, {} CPU · {} fd syscalls/s",
        truncate(&escape::name(&g.name()), 48),
        g.processes.len(),
        rate(g.file_lock.count, duration_ns).trim(),
        cpu(g.file_lock.wait_ns, duration_ns).trim(),
        rate(g.fd_syscalls, duration_ns).trim(),
    )
}

fn row(p: &Process, duration_ns: u64) -> String {
    let comm = if p.comm.is_empty() {
        "?".to_string()
    } else {
        escape::name(&p.comm).into_owned()
    };
    let allocations = p.scan.as_ref().map_or(0, |s| s.allocations);
    let max_fds = p
        .table
        .as_ref()
        .map_or("-".into(), |t| t.max_fds_max.to_string());
    format!(
        "{:>7} {:<16} {:>9} {:>11} {:>8} {:>9} {:>11} {:>8}",
        p.pid,
        truncate(&comm, 16),
        rate(p.file_lock_count, duration_ns),
        cpu(p.file_lock_wait_ns, duration_ns),
        rate(allocations, duration_ns),
        p.far_scans,
        p.scan_bits_at_least,
        max_fds,
    )
}

/// At most `width` characters (an escaped comm can be four times the kernel's 15 bytes).
fn truncate(text: &str, width: usize) -> String {
    match text.char_indices().nth(width) {
        Some((end, _)) => text[..end].to_string(),
        None => text.to_string(),
    }
}
