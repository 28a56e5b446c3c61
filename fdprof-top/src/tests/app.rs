//! The terminal loop on `TestBackend`, keys from a channel instead of a terminal.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use crossterm::event::Event as TermEvent;
use futures_core::Stream;
use tokio::sync::mpsc;

use super::*;
use crate::app::{Exit, drive};
use crate::state::Action;

/// Terminal events from a channel: pending while the sender lives, ended when it is dropped.
struct Keys(mpsc::UnboundedReceiver<io::Result<TermEvent>>);

impl Stream for Keys {
    type Item = io::Result<TermEvent>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

struct Run {
    exit: Exit,
    /// What the collector was asked, in order.
    asked: Vec<Action>,
    screen: Vec<String>,
    state: State,
}

/// Runs the loop on an 80×24 `TestBackend` over `events` and `updates`; the key sender is
/// dropped after the events only when `end_input`, the update sender after the updates only
/// when `end_feed`.
fn run(events: Vec<TermEvent>, updates: Vec<Update>, end_input: bool, end_feed: bool) -> Run {
    // Time: a notice goes after a while.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (key_tx, key_rx) = mpsc::unbounded_channel();
        let (update_tx, update_rx) = mpsc::channel(16);
        for e in events {
            key_tx.send(Ok(e)).unwrap();
        }
        for u in updates {
            update_tx.send(u).await.unwrap();
        }
        let _keep_input = (!end_input).then_some(key_tx);
        let _keep_feed = (!end_feed).then_some(update_tx);
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let mut state = State::default();
        let mut asked = Vec::new();
        let exit = drive(
            &mut terminal,
            Keys(key_rx),
            update_rx,
            |action| asked.push(action),
            &mut state,
        )
        .await
        .unwrap();
        Run {
            exit,
            asked,
            screen: rows(terminal.backend()),
            state,
        }
    })
}

#[test]
fn the_feed_ending_ends_the_screen() {
    let run = run(vec![], vec![update(0), update(1)], false, true);
    assert_eq!(run.exit, Exit::FeedEnded);
    assert_eq!(run.state.live().history.len(), 2);
    row_with(&run.screen, "file_lock alloc         59.1");
}

#[test]
fn keys_reach_the_state_and_q_quits() {
    let events = vec![
        TermEvent::Key(ch('?')),
        TermEvent::Resize(80, 24),
        TermEvent::Key(ch('r')),
        TermEvent::Key(ch('r')),
        TermEvent::Key(ch('q')),
        TermEvent::Key(ch('s')),
    ];
    let run = run(events, vec![], false, false);
    assert_eq!(run.exit, Exit::Quit);
    // Under the help r does nothing; the loop stopped at q, before s.
    assert_eq!(run.asked, []);
    assert!(run.state.help);
    assert_eq!(run.state.sort, crate::state::SortColumn::TotalWait);
    row_with(&run.screen, "keys");
}

#[test]
fn r_calls_back_and_the_input_ending_ends_the_screen() {
    let events = vec![TermEvent::Key(ch('r')), TermEvent::Key(ch('r'))];
    let run = run(events, vec![], true, false);
    assert_eq!(run.exit, Exit::InputEnded);
    assert_eq!(run.asked, [Action::ResetTotals, Action::ResetTotals]);
}

#[test]
fn w_calls_back_and_the_answer_shows_in_the_header() {
    let saved = Update::Saved(Ok("fdprof-top-20261203T113800Z.data".into()));
    let run = run(
        vec![TermEvent::Key(ch('w'))],
        vec![update(0), saved],
        false,
        true,
    );
    assert_eq!(run.asked, [Action::Save]);
    assert!(
        run.screen[0].starts_with("fdprof top  wrote fdprof-top-20261203T113800Z.data  interval"),
        "{}",
        run.screen[0]
    );
}
