//! The screen rendered from the fixture recordings on ratatui's `TestBackend`, and every key's
//! effect on the state.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::Update;
use super::draw;
use super::state::{Action, Pane, SortColumn, State, View};
use crate::analysis::{self, Event, EventKind, Interval, LockKind, Operation, ReportOptions};
use crate::testdata;

/// The fixture recording (10 s) as interval `index`; its cumulative report is the command
/// fixture's, so the two views differ.
fn update(index: u64) -> Update {
    let report = analysis::report(&testdata::recording(), &ReportOptions::default());
    let cumulative = analysis::report(&testdata::command_recording(), &ReportOptions::default());
    Update::Interval {
        interval: Interval {
            index,
            start_ns: index * 10_000_000_000,
            duration_ns: report.header.duration_ns,
            report,
            events: vec![],
        },
        cumulative,
    }
}

fn slow_wait(at_ns: u64, wait_ns: u64) -> Event {
    Event {
        at_ns,
        pid: 4242,
        tid: 4243,
        what: EventKind::SlowWait {
            lock: LockKind::FileLock,
            operation: Operation::Alloc,
            wait_ns,
            kernel_stack: vec![
                analysis::Frame {
                    function: "_raw_spin_lock".into(),
                    ..Default::default()
                },
                analysis::Frame {
                    function: "alloc_fd".into(),
                    ..Default::default()
                },
            ],
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

/// A state fed two intervals and two events.
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
    let width = buffer.area.width as usize;
    let cells: Vec<&str> = buffer.content.iter().map(|c| c.symbol()).collect();
    cells.chunks(width.max(1)).map(|row| row.concat()).collect()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn show() {
    for (w, h) in [(100, 30), (80, 24)] {
        let screen = render(&fed(), w, h);
        println!("{}", screen.join("\n"));
    }
    let mut s = fed();
    s.on_key(key(KeyCode::Char('?')));
    println!("{}", render(&s, 80, 24).join("\n"));
    println!("{}", render(&s, 40, 10).join("\n"));
}
