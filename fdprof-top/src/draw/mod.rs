//! One frame from a [`State`]: the header, the four panes (five system-wide: the processes),
//! the help overlay; or, below the minimum size, a line saying so. Drawing changes nothing and
//! never panics at any size.
//!
//! Rates (per second, share of one CPU) are formatted here from a report's counts and the
//! duration it covers: the reports hold no rates, and dividing by the interval is presentation
//! of a figure, not a new one.

mod contention;
mod events;
mod fd;
mod header;
pub(crate) mod help;
pub(crate) mod processes;
mod stacks;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::state::{Pane, State};
use fdprof_profiler::render::human;

/// Below this the panes do not fit; the screen says so instead.
pub(crate) const MIN_WIDTH: u16 = 60;
pub(crate) const MIN_HEIGHT: u16 = 16;

/// Draws the whole screen.
pub(crate) fn screen(frame: &mut Frame, state: &State) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "terminal too small: {}×{}, fdprof top needs {MIN_WIDTH}×{MIN_HEIGHT} (q quits)",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let contention_rows = state
        .report()
        .map_or(1, |(r, _)| r.contention.by_lock_operation.len().max(1));
    // Borders, the column heads and the sparkline around the rows; the stacks keep the rest.
    let contention_height =
        (contention_rows as u16 + 4).min(if area.height >= 30 { 10 } else { 8 });
    let events_height = if area.height >= 30 { 6 } else { 4 };
    let [top, contention, middle, events] = Layout::vertical([
        Constraint::Length(header::HEIGHT),
        Constraint::Length(contention_height),
        Constraint::Min(4),
        Constraint::Length(events_height),
    ])
    .areas(area);
    // System-wide, the processes take the lower part of the middle: up to a third of the
    // screen, less when fewer processes are in the view.
    let (middle, below) = if state.system_wide() {
        let rows = state.report().map_or(1, |(r, _)| processes::rows(r, state));
        let height = (rows as u16 + processes::CHROME).min((area.height / 3).max(5));
        let [middle, below] =
            Layout::vertical([Constraint::Min(4), Constraint::Length(height)]).areas(middle);
        (middle, Some(below))
    } else {
        (middle, None)
    };
    let [stacks, fd] =
        Layout::horizontal([Constraint::Percentage(56), Constraint::Percentage(44)]).areas(middle);
    header::draw(frame, top, state);
    contention::draw(frame, contention, state);
    stacks::draw(frame, stacks, state);
    fd::draw(frame, fd, state);
    if let Some(area) = below {
        processes::draw(frame, area, state);
    }
    events::draw(frame, events, state);
    if state.help {
        help::draw(frame, area);
    }
}

/// A pane's frame: its title, highlighted when focused.
fn pane_block(title: String, pane: Pane, state: &State) -> Block<'static> {
    let block = Block::bordered().title(title);
    if state.focus == pane {
        block
            .border_style(Style::new().fg(Color::Cyan))
            .title_style(Style::new().add_modifier(Modifier::BOLD))
    } else {
        block
    }
}

/// Lines in a pane, scrolled as the state says (never past the last line).
fn scrolled(lines: Vec<Line<'static>>, pane: Pane, state: &State) -> Paragraph<'static> {
    let last = lines.len().saturating_sub(1) as u16;
    Paragraph::new(lines).scroll((state.scroll(pane).min(last), 0))
}

/// What a pane shows when its view has no report yet.
fn waiting(state: &State) -> Line<'static> {
    Line::from(waiting_text(state))
}

/// Before the first interval, or after a reset before the collector's new totals.
fn waiting_text(state: &State) -> &'static str {
    if state.shown().interval.is_some() {
        "totals reset: waiting for the next interval…"
    } else {
        "waiting for the first interval…"
    }
}

/// How many innermost frames of a kernel stack are the lock's own (`_raw_spin_lock`, the
/// slow path): the pane shows the stack from the first frame that says what was locking.
fn lock_frames(stack: &[fdprof_profiler::analysis::Frame]) -> usize {
    stack
        .iter()
        .take_while(|f| f.function.contains("lock") || f.function.contains("slowpath"))
        .count()
}

/// The column heads' style.
fn head_style() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// `count` per second over `duration_ns`, `None` for an empty duration.
fn per_second(count: u64, duration_ns: u64) -> Option<f64> {
    (duration_ns > 0).then(|| count as f64 * 1e9 / duration_ns as f64)
}

/// A rate with three significant digits: `0.50`, `59.1`, `1234`; `-` without a duration.
fn rate(count: u64, duration_ns: u64) -> String {
    match per_second(count, duration_ns) {
        None => "-".into(),
        Some(0.0) => "0".into(),
        Some(v) if v < 9.995 => format!("{v:.2}"),
        Some(v) if v < 99.95 => format!("{v:.1}"),
        Some(v) => format!("{v:.0}"),
    }
}

/// Time spent (ns) over `duration_ns`, as a share of one CPU: `0.06%`.
fn cpu(spent_ns: u64, duration_ns: u64) -> String {
    human::percent(per_second(spent_ns, duration_ns).map(|ns| ns / 1e9))
}

/// An optional duration (a quantile of an empty histogram is `-`).
fn opt_duration(ns: Option<u64>) -> String {
    human::opt(ns, human::duration)
}

/// `line` cut to `width` columns: where it is cut, its last column is an ellipsis, so a cut is
/// never mistaken for a word's end.
fn fit(line: Line<'static>, width: usize) -> Line<'static> {
    let total: usize = line.spans.iter().map(|s| s.content.chars().count()).sum();
    if total <= width || width == 0 {
        return line;
    }
    let mut room = width - 1;
    let mut spans = Vec::new();
    for span in line.spans {
        let n = span.content.chars().count();
        if n <= room {
            room -= n;
            spans.push(span);
            continue;
        }
        let kept: String = span.content.chars().take(room).collect();
        spans.push(ratatui::text::Span::styled(kept + "…", span.style));
        break;
    }
    Line::from(spans)
}
