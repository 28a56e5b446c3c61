//! The top stacks of the view in the chosen order, those matching the filter: a line of
//! figures, then the kernel and the user frames, innermost first.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;

use super::{cpu, lock_frames, pane_block, rate, scrolled, waiting};
use crate::state::{Pane, SortColumn, State};
use fdprof_profiler::analysis::{Frame as StackFrame, TopStack};
use fdprof_profiler::render::human;
use fdprof_recording::escape;

pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let mut title = format!("stacks by {}", state.sort.label());
    if let Some(text) = &state.editing {
        title.push_str(&format!(" filter: /{}_", escape::name(text)));
    } else if !state.filter.is_empty() {
        title.push_str(&format!(" filter: {}", escape::name(&state.filter)));
    }
    let block = pane_block(title, Pane::Stacks, state);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some((report, duration_ns)) = state.report() else {
        frame.render_widget(scrolled(vec![waiting(state)], Pane::Stacks, state), inner);
        return;
    };
    let stacks = ordered(&report.top_stacks, state);
    let mut lines = Vec::new();
    if stacks.is_empty() {
        lines.push(Line::from(if report.top_stacks.is_empty() {
            "no stacks"
        } else {
            "no stack matches the filter"
        }));
    }
    for s in stacks {
        lines.push(Line::styled(
            format!(
                "#{} {} {} {}/s {} max {}",
                s.rank,
                s.lock,
                s.operation,
                rate(s.count, duration_ns),
                cpu(s.total_wait_ns, duration_ns),
                human::duration(s.max_wait_ns),
            ),
            Style::new().fg(Color::Yellow),
        ));
        lines.push(Line::from(frames("  k: ", &s.kernel_stack)));
        if !s.user_stack.is_empty() {
            lines.push(Line::from(frames("  u: ", &s.user_stack)));
        }
    }
    frame.render_widget(scrolled(lines, Pane::Stacks, state), inner);
}

/// The stacks that match the filter, in the state's order (ties in the report's rank).
fn ordered<'a>(stacks: &'a [TopStack], state: &State) -> Vec<&'a TopStack> {
    let needle = state.filter.to_lowercase();
    let mut kept: Vec<&TopStack> = stacks
        .iter()
        .filter(|s| {
            needle.is_empty()
                || s.kernel_stack
                    .iter()
                    .chain(&s.user_stack)
                    .any(|f| f.function.to_lowercase().contains(&needle))
        })
        .collect();
    kept.sort_by_key(|s| {
        let key = match state.sort {
            SortColumn::TotalWait => s.total_wait_ns,
            SortColumn::Count => s.count,
            SortColumn::Max => s.max_wait_ns,
        };
        (std::cmp::Reverse(key), s.rank)
    });
    kept
}

/// Function names, innermost first, each called from the next.
fn frames(prefix: &str, stack: &[StackFrame]) -> String {
    if stack.is_empty() {
        return format!("{prefix}(not captured)");
    }
    let skipped = lock_frames(stack);
    let names: Vec<_> = stack[skipped..]
        .iter()
        .map(|f| escape::name(&f.function))
        .collect();
    let elided = if skipped > 0 { "… ← " } else { "" };
    format!("{prefix}{elided}{}", names.join(" ← "))
}
