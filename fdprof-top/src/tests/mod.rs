//! The screen rendered from the fixture recordings on ratatui's `TestBackend`, every key's
//! effect on the state, and the terminal loop driven by hand-made keys and updates.

mod app;
mod keys;
mod processes;
mod screen;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::Update;
use super::draw;
use super::state::State;
use fdprof_profiler::analysis::{self, Event, EventKind, Frame, Interval, Operation};
use fdprof_profiler::analysis::{Report, ReportOptions};
use fdprof_recording::testdata;

/// The fixture recording (pid 4242, 10 s) through the analysis.
fn interval_report() -> Report {
    analysis::report(&testdata::recording(), &ReportOptions::default())
}

/// Interval `index` of `report`; the cumulative report is the command fixture's (`./server`,
/// 2.5 s, a mutex row), so the two views differ.
fn update_with(index: u64, report: Report) -> Update {
    Update::Interval {
        interval: Interval {
            index,
            start_ns: index * 10_000_000_000,
            duration_ns: report.header.duration_ns,
            report,
            events: vec![],
        },
        cumulative: analysis::report(&testdata::command_recording(), &ReportOptions::default()),
    }
}

fn update(index: u64) -> Update {
    update_with(index, interval_report())
}

fn frame(function: &str) -> Frame {
    Frame {
        function: function.into(),
        ..Default::default()
    }
}

fn slow_wait(at_ns: u64, wait_ns: u64) -> Event {
    Event {
        at_ns,
        pid: 4242,
        tid: 4243,
        what: EventKind::SlowWait {
            lock: fdprof_figures::Lock::file_lock(),
            operation: Operation::Alloc,
            wait_ns,
            kernel_stack: vec![frame("_raw_spin_lock"), frame("alloc_fd")],
            user_stack: vec![],
        },
    }
}

fn expansion(at_ns: u64) -> Event {
    Event {
        at_ns,
        pid: 4242,
        tid: 4244,
        what: EventKind::Expansion {
            old_max_fds: 64,
            new_max_fds: 128,
            duration_ns: Some(12_000),
        },
    }
}

/// A state fed two intervals, then an expansion and a slow wait.
fn fed() -> State {
    let mut state = State::default();
    state.on_update(update(0));
    state.on_update(update(1));
    state.on_update(Update::Event(expansion(12_345_000_000)));
    state.on_update(Update::Event(slow_wait(13_000_000_000, 1_200_000)));
    state
}

/// The screen as text, one string per row.
fn render(state: &State, width: u16, height: u16) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| draw::screen(f, state)).unwrap();
    rows(terminal.backend())
}

fn rows(backend: &TestBackend) -> Vec<String> {
    let buffer = backend.buffer();
    let width = usize::from(buffer.area.width).max(1);
    let cells: Vec<&str> = buffer.content.iter().map(|c| c.symbol()).collect();
    cells.chunks(width).map(|row| row.concat()).collect()
}

/// The index of the first row containing `needle`; panics with the screen when none does.
fn row_with(screen: &[String], needle: &str) -> usize {
    screen
        .iter()
        .position(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("no row with {needle:?} in\n{}", screen.join("\n")))
}

/// The row containing `needle`, without the pane borders and trailing blanks.
fn text_of(screen: &[String], needle: &str) -> String {
    let row = &screen[row_with(screen, needle)];
    row.trim_matches(|c: char| c == '│' || c.is_whitespace())
        .to_string()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ch(c: char) -> KeyEvent {
    key(KeyCode::Char(c))
}
