//! One row per (lock, operation) of the view, and a sparkline of `file_lock` wait per second
//! over the last intervals.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Sparkline};

use super::{cpu, head_style, opt_duration, pane_block, rate, scrolled, waiting};
use crate::state::{Pane, State};
use fdprof_profiler::analysis::LockOperation;
use fdprof_profiler::render::human;

/// The lock column: as wide as the longest name, from 9 to [`LOCK_WIDTH`] characters; a longer
/// name is cut with an ellipsis, so every figure stays in its column.
const LOCK_WIDTH: usize = 24;
const HEAD: &str = "operation   cont/s wait/CPU     avg     p50     p99     max of lock";

pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let block = pane_block("contention".into(), Pane::Contention, state);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [table, spark] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(inner);
    let Some((report, duration_ns)) = state.report() else {
        frame.render_widget(Paragraph::new(waiting(state)), table);
        return;
    };
    let rows = &report.contention.by_lock_operation;
    let width = rows
        .iter()
        .map(|r| r.lock.to_string().chars().count())
        .max()
        .unwrap_or(0)
        .clamp(9, LOCK_WIDTH);
    let mut lines = vec![Line::styled(
        format!("{:<width$} {HEAD}", "lock"),
        head_style(),
    )];
    if let Some(limit) = report.contention.source.limit() {
        lines.push(Line::from(fdprof_recording::escape::name(limit)));
    }
    if rows.is_empty() && report.contention.source != fdprof_figures::WaitSource::Unavailable {
        lines.push(Line::from("no lock waits"));
    }
    lines.extend(rows.iter().map(|r| Line::from(row(r, duration_ns, width))));
    frame.render_widget(scrolled(lines, Pane::Contention, state), table);
    sparkline(frame, spark, state);
}

fn row(r: &LockOperation, duration_ns: u64, width: usize) -> String {
    let mut lock = r.lock.to_string();
    if lock.chars().count() > width {
        lock = lock.chars().take(width - 1).collect::<String>() + "…";
    }
    format!(
        "{:<width$} {:<11} {:>6} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7}",
        lock,
        r.operation.to_string(),
        rate(r.count, duration_ns),
        cpu(r.total_wait_ns, duration_ns),
        r.avg_wait_ns.map_or("-".into(), human::duration_f),
        opt_duration(r.p50_wait_ns),
        opt_duration(r.p99_wait_ns),
        human::duration(r.max_wait_ns),
        human::percent(r.share_of_lock),
    )
}

/// `file_lock` wait per second of each kept interval (ns/s), newest right, with the latest.
fn sparkline(frame: &mut Frame, area: Rect, state: &State) {
    let history = &state.shown().history;
    let values: Vec<u64> = history
        .iter()
        .map(|s| super::per_second(s.file_lock_wait_ns, s.duration_ns).unwrap_or(0.0) as u64)
        .collect();
    let now = history
        .back()
        .map_or("-".into(), |s| cpu(s.file_lock_wait_ns, s.duration_ns));
    let label = format!("file_lock wait/s {now:>6} ");
    let [text, bars] = Layout::horizontal([
        Constraint::Length(label.chars().count() as u16),
        Constraint::Min(0),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(label), text);
    // The newest intervals when the line is narrower than the history.
    let shown = &values[values.len().saturating_sub(bars.width as usize)..];
    frame.render_widget(
        Sparkline::default()
            .data(shown)
            .style(Style::new().fg(Color::Magenta)),
        bars,
    );
}
