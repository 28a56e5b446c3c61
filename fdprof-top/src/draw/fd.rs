//! fd-table activity: allocations and closes per syscall, the lowest-free-fd scan (with a log2
//! histogram of its distance), the `next_fd` hit rate, the table's size and growth; with
//! `top --cpu`, where the target's CPU went (its share in the fd-table paths, by operation, and
//! the top on-CPU functions).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::{head_style, pane_block, rate, scrolled, waiting};
use crate::state::{Pane, State};
use fdprof_profiler::analysis::{Histogram, Report};
use fdprof_profiler::render::human;
use fdprof_recording::escape;

/// Widest histogram bar, in characters.
const BAR: u64 = 12;

pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let sampled = state.report().is_some_and(|(r, _)| r.cpu.is_some());
    let title = if sampled {
        "fd table · on CPU ↓"
    } else {
        "fd table"
    };
    let block = pane_block(title.into(), Pane::Fd, state);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines = match state.report() {
        None => vec![waiting(state)],
        Some((report, _)) if !report.fd_activity_recorded => {
            let mut out = vec![Line::from("fd activity not recorded (lock only)")];
            out.extend(cpu_lines(report));
            out
        }
        Some((report, duration_ns)) => {
            let mut out = lines(report, duration_ns);
            out.extend(cpu_lines(report));
            out
        }
    };
    frame.render_widget(scrolled(lines, Pane::Fd, state), inner);
}

fn lines(r: &Report, duration_ns: u64) -> Vec<Line<'static>> {
    let mut out = vec![Line::styled(
        "syscall    call/s alloc/s close/s",
        head_style(),
    )];
    for s in &r.syscalls {
        out.push(Line::from(format!(
            "{:<10} {:>6} {:>7} {:>7}",
            escape::name(&s.name),
            rate(s.calls, duration_ns),
            rate(s.allocs, duration_ns),
            rate(s.fds_closed, duration_ns),
        )));
    }
    if r.syscalls.is_empty() {
        out.push(Line::from("no fd syscalls"));
    }
    let scan = &r.scan;
    out.push(Line::from(format!(
        "next_fd hit {}  below origin {}",
        human::percent(scan.next_fd_hit_rate),
        scan.below_origin
    )));
    let t = &r.table;
    out.push(Line::from(format!(
        "table {} → {} fds, {} expansions",
        t.max_fds_first, t.max_fds_max, t.expansions
    )));
    out.push(Line::from(format!(
        "scan bits p50 {} p99 {} max {}",
        opt_count(scan.bits.p50),
        opt_count(scan.bits.p99),
        opt_count(scan.bits.max),
    )));
    out.extend(bars(&scan.bits).into_iter().map(Line::from));
    out
}

/// Top on-CPU stacks shown, by their innermost function.
const CPU_STACKS: usize = 3;

/// The interval's on-CPU figures, when sampled: the samples, the share in the fd-table paths
/// and spinning there, the share per operation, and the top stacks' innermost functions.
fn cpu_lines(r: &Report) -> Vec<Line<'static>> {
    let Some(c) = &r.cpu else {
        return vec![];
    };
    let mut out = vec![Line::styled(
        format!(
            "on CPU: {} samples ({}, {} Hz)",
            c.samples, c.event, c.frequency_hz
        ),
        head_style(),
    )];
    out.push(Line::from(format!(
        "fd paths {}  spinning there {}",
        human::percent(c.fd_table.share_of_all),
        human::percent(c.fd_table_spinning.share_of_all)
    )));
    let ops: Vec<String> = c
        .by_operation
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o.operation.name(),
                human::percent(o.samples.share_of_all)
            )
        })
        .collect();
    if !ops.is_empty() {
        out.push(Line::from(ops.join("  ")));
    }
    for s in c.top_stacks.iter().take(CPU_STACKS) {
        // The innermost frame that is not the lock's own says where the CPU went.
        let kernel = &s.kernel_stack[super::lock_frames(&s.kernel_stack)..];
        let leaf = kernel
            .first()
            .or(s.user_stack.first())
            .map_or("[unknown]".into(), |f| escape::name(&f.function));
        out.push(Line::from(format!(
            "{:>6} {leaf}",
            human::percent(s.samples.share_of_all)
        )));
    }
    out
}

fn opt_count(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// One line per non-empty log2 bucket, bars scaled to the fullest.
fn bars(h: &Histogram) -> Vec<String> {
    let fullest = h.buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    h.buckets
        .iter()
        .map(|b| {
            // At least one block for a non-empty bucket, so a lone outlier stays visible.
            let width = (b.count.saturating_mul(BAR) / fullest).max(1) as usize;
            format!(
                "{:>6}-{:<6} {:<bar$} {}",
                b.low,
                b.high,
                "█".repeat(width),
                b.count,
                bar = BAR as usize
            )
        })
        .collect()
}
