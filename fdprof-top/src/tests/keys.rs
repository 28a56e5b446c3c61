//! Each key's documented effect on the state.

use crossterm::event::KeyEventKind;

use super::*;
use crate::state::{Action, EVENTS, HISTORY, Pane, SortColumn, View};

#[test]
fn q_and_ctrl_c_quit_from_any_screen() {
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    let mut state = fed();
    assert_eq!(state.on_key(ch('q')), Action::Quit);
    assert_eq!(state.on_key(ctrl_c), Action::Quit);
    state.help = true;
    assert_eq!(state.on_key(ch('q')), Action::Quit);
    assert_eq!(state.on_key(ctrl_c), Action::Quit);
    state.help = false;
    state.on_key(ch('p'));
    assert_eq!(state.on_key(ch('q')), Action::Quit);
    // In the filter prompt q is text; Ctrl-C still quits.
    state.on_key(ch('/'));
    assert_eq!(state.on_key(ch('q')), Action::Continue);
    assert_eq!(state.editing.as_deref(), Some("q"));
    assert_eq!(state.on_key(ctrl_c), Action::Quit);
}

#[test]
fn p_and_space_pause_while_intervals_are_kept() {
    let mut state = fed();
    assert!(!state.paused());
    assert_eq!(state.on_key(ch('p')), Action::Continue);
    assert!(state.paused());
    state.on_update(update(7));
    state.on_update(Update::Event(expansion(99)));
    assert_eq!(state.shown().interval.as_ref().unwrap().index, 1);
    assert_eq!(state.shown().events.len(), 2);
    assert_eq!(state.live().interval.as_ref().unwrap().index, 7);
    assert_eq!(state.live().events.len(), 3);
    assert_eq!(state.live().history.len(), 3);
    state.on_key(ch(' '));
    assert!(!state.paused());
    assert_eq!(state.shown().interval.as_ref().unwrap().index, 7);
    state.on_key(ch(' '));
    assert!(state.paused());
}

#[test]
fn question_mark_opens_help_and_question_mark_or_esc_closes_it() {
    let mut state = fed();
    state.on_key(ch('?'));
    assert!(state.help);
    // Other keys do nothing under the help.
    state.on_key(ch('s'));
    state.on_key(ch('z'));
    assert_eq!(state.sort, SortColumn::TotalWait);
    assert_eq!(state.view, View::Interval);
    state.on_key(ch('?'));
    assert!(!state.help);
    state.on_key(ch('?'));
    state.on_key(key(KeyCode::Esc));
    assert!(!state.help);
}

#[test]
fn s_cycles_the_sort_column() {
    let mut state = fed();
    let mut seen = vec![state.sort];
    for _ in 0..3 {
        state.on_key(ch('s'));
        seen.push(state.sort);
    }
    assert_eq!(
        seen,
        [
            SortColumn::TotalWait,
            SortColumn::Count,
            SortColumn::Max,
            SortColumn::TotalWait
        ]
    );
}

#[test]
fn tab_and_arrows_move_between_panes_and_scroll() {
    let mut state = fed();
    assert_eq!(state.focus, Pane::Contention);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.focus, Pane::Stacks);
    state.on_key(key(KeyCode::Right));
    assert_eq!(state.focus, Pane::Fd);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.focus, Pane::Events);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.focus, Pane::Contention);
    state.on_key(key(KeyCode::Left));
    assert_eq!(state.focus, Pane::Events);
    state.on_key(key(KeyCode::BackTab));
    assert_eq!(state.focus, Pane::Fd);
    state.on_key(key(KeyCode::Down));
    state.on_key(key(KeyCode::Down));
    state.on_key(key(KeyCode::Up));
    assert_eq!(state.scroll(Pane::Fd), 1);
    assert_eq!(state.scroll(Pane::Stacks), 0);
    state.on_key(key(KeyCode::Up));
    state.on_key(key(KeyCode::Up));
    assert_eq!(state.scroll(Pane::Fd), 0);
}

#[test]
fn r_resets_the_totals() {
    let mut state = fed();
    assert_eq!(state.on_key(ch('r')), Action::ResetTotals);
    assert_eq!(state.reset_after, Some(1));
    assert_eq!(state.resets, 1);
    assert!(state.live().cumulative.is_none());
    state.view = View::Cumulative;
    assert!(state.report().is_none());
    let screen = render(&state, 80, 24);
    assert!(screen[0].contains("totals reset: waiting for the next interval"));
    // The collector's next interval brings the new totals.
    state.on_update(update(2));
    assert!(state.report().is_some());
    // Before any interval there is nothing to reset after.
    assert_eq!(State::default().on_key(ch('r')), Action::ResetTotals);
}

#[test]
fn z_switches_between_interval_and_cumulative() {
    let mut state = fed();
    assert_eq!(state.report().unwrap().1, 10_000_000_000);
    state.on_key(ch('z'));
    assert_eq!(state.view, View::Cumulative);
    let (report, duration_ns) = state.report().unwrap();
    assert_eq!(duration_ns, 2_500_000_000);
    assert!(report.header.target.description.contains("server"));
    state.on_key(ch('z'));
    assert_eq!(state.view, View::Interval);
}

#[test]
fn slash_types_a_filter_that_enter_applies_and_esc_cancels() {
    let mut state = fed();
    state.on_key(ch('/'));
    for c in "closx".chars() {
        state.on_key(ch(c));
    }
    state.on_key(key(KeyCode::Backspace));
    state.on_key(ch('e'));
    // Keys are text while typing.
    state.on_key(ch('s'));
    state.on_key(key(KeyCode::Backspace));
    assert_eq!(state.sort, SortColumn::TotalWait);
    assert_eq!(state.filter, "");
    state.on_key(key(KeyCode::Enter));
    assert_eq!(state.filter, "close");
    assert!(state.editing.is_none());
    state.on_key(ch('/'));
    assert_eq!(state.editing.as_deref(), Some("close"));
    state.on_key(ch('x'));
    state.on_key(key(KeyCode::Esc));
    assert_eq!(state.filter, "close");
    assert!(state.editing.is_none());
    // Esc outside the prompt clears the applied filter.
    state.on_key(key(KeyCode::Esc));
    assert_eq!(state.filter, "");
}

#[test]
fn key_releases_are_ignored() {
    let mut state = fed();
    let mut release = ch('q');
    release.kind = KeyEventKind::Release;
    assert_eq!(state.on_key(release), Action::Continue);
}

#[test]
fn history_and_events_are_bounded() {
    let mut state = State::default();
    for i in 0..HISTORY as u64 + 5 {
        state.on_update(update(i));
    }
    assert_eq!(state.live().history.len(), HISTORY);
    for i in 0..EVENTS as u64 + 7 {
        state.on_update(Update::Event(expansion(i)));
    }
    let events = &state.live().events;
    assert_eq!(events.len(), EVENTS);
    assert_eq!(events.front().unwrap().at_ns, 7);
    assert_eq!(events.back().unwrap().at_ns, EVENTS as u64 + 6);
}

#[test]
fn events_inside_an_interval_reach_the_pane() {
    let mut state = State::default();
    let Update::Interval {
        mut interval,
        cumulative,
    } = update(0)
    else {
        unreachable!()
    };
    interval.events = vec![expansion(1), slow_wait(2, 3)];
    state.on_update(Update::Interval {
        interval,
        cumulative,
    });
    assert_eq!(state.live().events.len(), 2);
}

#[test]
fn w_asks_for_the_intervals_to_be_written_but_not_in_a_playback() {
    let mut state = fed();
    assert_eq!(state.on_key(ch('w')), Action::Save);
    assert!(state.notice.is_none());
    // Under the help w does nothing; in the filter prompt it is text.
    state.help = true;
    assert_eq!(state.on_key(ch('w')), Action::Continue);
    state.help = false;
    state.on_key(ch('/'));
    assert_eq!(state.on_key(ch('w')), Action::Continue);
    assert_eq!(state.editing.as_deref(), Some("w"));
    state.on_key(key(KeyCode::Esc));
    // A playback's intervals are in its file already.
    state.playing = Some("old.data".into());
    assert_eq!(state.on_key(ch('w')), Action::Continue);
    let saved = &state.notice.as_ref().unwrap().saved;
    assert_eq!(
        saved,
        &Err("this is a recording already: old.data".to_string())
    );
}

#[test]
fn what_w_came_to_stays_through_intervals_until_a_key() {
    let mut state = fed();
    state.on_update(Update::Saved(Err("nothing to write yet".into())));
    state.on_update(update(2));
    assert!(state.notice.is_some());
    assert!(state.notice_until().unwrap() > state.notice.as_ref().unwrap().at);
    state.on_key(ch('s'));
    assert!(state.notice.is_none());
}
