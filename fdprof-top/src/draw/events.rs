//! The latest events, newest first: slow waits and table expansions with time and thread.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::{lock_frames, pane_block, scrolled};
use crate::state::{Pane, State};
use fdprof_profiler::analysis::{Event, EventKind};
use fdprof_profiler::render::human;
use fdprof_recording::escape;

pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let events = &state.shown().events;
    let block = pane_block(format!("events ({})", events.len()), Pane::Events, state);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines: Vec<Line> = events.iter().rev().map(|e| Line::from(line(e))).collect();
    if lines.is_empty() {
        lines.push(Line::from("no slow waits or expansions yet"));
    }
    frame.render_widget(scrolled(lines, Pane::Events, state), inner);
}

fn line(e: &Event) -> String {
    let at = format!(
        "{:>10.3}s pid {} tid {}",
        e.at_ns as f64 / 1e9,
        e.pid,
        e.tid
    );
    match &e.what {
        EventKind::SlowWait {
            lock,
            operation,
            wait_ns,
            kernel_stack,
            ..
        } => {
            let place = kernel_stack
                .get(lock_frames(kernel_stack))
                .map_or(String::new(), |f| {
                    format!(" in {}", escape::name(&f.function))
                });
            format!(
                "{at}  slow wait {lock} {operation} {}{place}",
                human::duration(*wait_ns)
            )
        }
        EventKind::Expansion {
            old_max_fds,
            new_max_fds,
            duration_ns,
        } => {
            let took = duration_ns.map_or(String::new(), |d| format!(" in {}", human::duration(d)));
            format!("{at}  expansion {old_max_fds} → {new_max_fds} fds{took}")
        }
        EventKind::Exit { process: true } => format!("{at}  process exited"),
        EventKind::Exit { process: false } => format!("{at}  thread exited"),
    }
}
