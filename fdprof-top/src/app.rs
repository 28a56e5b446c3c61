//! The terminal loop of a live feed: raw mode and the alternate screen entered through a
//! guard that restores the terminal on every way out (return, error, drop, panic); keys and
//! updates multiplexed; a redraw after each update, key and resize.
//!
//! When the feed ends (the target exited, the collector stopped) the loop returns at once,
//! like `top` when its process goes: the command then exits 0 and the terminal is back as it
//! was. Keeping the last screen until a key would leave a dead view open beside a load test.

use std::io::{self, IsTerminal, stdout};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::event::{Event as TermEvent, EventStream};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use crossterm::{cursor, execute};
use futures_core::Stream;
use ratatui::Terminal;
use ratatui::backend::{Backend, CrosstermBackend};
use tokio::sync::mpsc::Receiver;

use super::Update;
use super::draw;
use super::state::{Action, State};
use fdprof_profiler::error::{EXIT_USAGE, fatal};

/// Why the screen closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `q` or Ctrl-C.
    Quit,
    /// The sender of updates was dropped: the feed ended.
    FeedEnded,
    /// The terminal's input ended.
    InputEnded,
}

/// Shows `updates` on this process's terminal until the user quits or the feed ends.
/// `on_action` hears what the collector must do: start its cumulative report anew (`r`),
/// write the intervals it keeps (`w`). `playing` is the recording played back, if it is one.
/// Must run inside a tokio runtime (crossterm's event stream).
pub async fn run(
    updates: Receiver<Update>,
    playing: Option<String>,
    on_action: impl FnMut(Action),
) -> anyhow::Result<Exit> {
    if !stdout().is_terminal() {
        return Err(fatal(
            EXIT_USAGE,
            "fdprof top: standard output is not a terminal (use --jsonl or --batch)",
        ));
    }
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(stdout()))?;
    let exit = drive(
        &mut terminal,
        EventStream::new(),
        updates,
        on_action,
        &mut State::new(playing),
    )
    .await;
    drop(guard);
    exit
}

/// The loop itself over any backend and any source of terminal events, so tests drive it on
/// ratatui's `TestBackend`. Draws first, then after every key, resize and update, and when a
/// notice goes.
pub(crate) async fn drive<B, I>(
    terminal: &mut Terminal<B>,
    mut input: I,
    mut updates: Receiver<Update>,
    mut on_action: impl FnMut(Action),
    state: &mut State,
) -> anyhow::Result<Exit>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    I: Stream<Item = io::Result<TermEvent>> + Unpin,
{
    loop {
        terminal.draw(|frame| draw::screen(frame, state))?;
        let notice_until = state.notice_until();
        tokio::select! {
            // Keys first: a quit is never kept waiting behind a burst of updates.
            biased;
            event = std::future::poll_fn(|cx| Pin::new(&mut input).poll_next(cx)) => {
                match event {
                    Some(Ok(TermEvent::Key(key))) => match state.on_key(key) {
                        Action::Quit => return Ok(Exit::Quit),
                        Action::Continue => {}
                        asked => on_action(asked),
                    },
                    // A resize (and anything else) only redraws, at the new size.
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => return Ok(Exit::InputEnded),
                }
            }
            update = updates.recv() => match update {
                Some(update) => state.on_update(update),
                None => return Ok(Exit::FeedEnded),
            },
            () = until(notice_until) => state.notice = None,
        }
    }
}

/// Sleeps until `at`; forever without one.
async fn until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Set while fdprof holds the terminal in raw mode: the panic hook restores it only then.
static HELD: AtomicBool = AtomicBool::new(false);

/// Raw mode and the alternate screen, left when dropped or on a panic.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        enable_raw_mode()?;
        HELD.store(true, Ordering::SeqCst);
        // From here on the guard exists: a failure below still restores through its drop.
        let guard = TerminalGuard;
        execute!(stdout(), EnterAlternateScreen)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves raw mode and the alternate screen and shows the cursor, once.
fn restore() {
    if HELD.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(stdout(), LeaveAlternateScreen, cursor::Show);
    }
}
