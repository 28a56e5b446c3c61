//! The help overlay: every key.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph};

use super::head_style;

/// Every key and what it does, as `State::on_key` handles it.
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit (in the filter prompt q is text)"),
    ("p, space", "pause the display; intervals are still kept"),
    ("?, Esc", "open / close this help"),
    ("s", "sort stacks by total wait, count, max"),
    ("o", "order processes by file_lock wait, scan work"),
    ("g", "group processes by container / cgroup"),
    ("Tab, ←, →", "move between panes"),
    ("↑, ↓", "scroll the focused pane"),
    ("r", "reset the cumulative totals"),
    ("z", "per interval / cumulative"),
    ("w", "write the last 60 intervals as a recording"),
    ("/", "filter stacks by function"),
    ("Enter, Esc", "apply / cancel the filter being typed"),
    ("Esc", "clear the applied filter"),
];

pub(crate) fn draw(frame: &mut Frame, area: Rect) {
    let height = KEYS.len() as u16 + 2;
    let [row] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(60)])
        .flex(Flex::Center)
        .areas(row);
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(keys, what)| Line::from(format!("{keys:<11} {what}")))
        .collect();
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("keys").title_style(head_style())),
        popup,
    );
}
