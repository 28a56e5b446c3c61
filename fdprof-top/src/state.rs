//! What the screen shows and how keys change it; nothing here draws. The figures come whole
//! from the collector (one [`Report`] per interval, one over all intervals since the start or
//! the last reset): the state only keeps, bounds and chooses among them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use fdprof_profiler::analysis::{Event, Interval, Report};

use super::Update;

/// Intervals of `file_lock` wait kept for the sparkline.
pub const HISTORY: usize = 60;
/// Events kept for the events pane, newest last.
pub(crate) const EVENTS: usize = 200;
/// How long a notice stays up when no key comes.
pub(crate) const NOTICE: Duration = Duration::from_secs(5);

/// What the key asks of the loop beyond changing the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond the state: redraw.
    Continue,
    /// Leave the screen now.
    Quit,
    /// Start the cumulative totals anew: the collector must hear of it.
    ResetTotals,
    /// Write the intervals the collector keeps as a recording (`w`); it answers with
    /// [`Update::Saved`].
    Save,
}

/// The pane that scrolls with Up/Down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pane {
    Contention,
    Stacks,
    Fd,
    /// Per process: shown only when the session is system-wide.
    Processes,
    Events,
}

impl Pane {
    pub(crate) const ALL: [Pane; 5] = [
        Pane::Contention,
        Pane::Stacks,
        Pane::Fd,
        Pane::Processes,
        Pane::Events,
    ];

    fn index(self) -> usize {
        Pane::ALL.iter().position(|&p| p == self).unwrap_or(0)
    }

    fn step(self, forward: bool) -> Pane {
        let n = Pane::ALL.len();
        let i = if forward {
            self.index() + 1
        } else {
            self.index() + n - 1
        };
        Pane::ALL[i % n]
    }
}

/// How the stacks pane is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortColumn {
    TotalWait,
    Count,
    Max,
}

impl SortColumn {
    fn next(self) -> SortColumn {
        match self {
            SortColumn::TotalWait => SortColumn::Count,
            SortColumn::Count => SortColumn::Max,
            SortColumn::Max => SortColumn::TotalWait,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            SortColumn::TotalWait => "total wait",
            SortColumn::Count => "count",
            SortColumn::Max => "max",
        }
    }
}

/// How the processes pane is ordered: the two rankings the report's per-process figures
/// answer (whose fd table is contended, whose allocator scans far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcessOrder {
    FileLockWait,
    ScanWork,
}

impl ProcessOrder {
    fn next(self) -> ProcessOrder {
        match self {
            ProcessOrder::FileLockWait => ProcessOrder::ScanWork,
            ProcessOrder::ScanWork => ProcessOrder::FileLockWait,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            ProcessOrder::FileLockWait => "file_lock wait",
            ProcessOrder::ScanWork => "scan work",
        }
    }
}

/// Which report the panes show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// The last interval.
    Interval,
    /// Every interval since the start or the last reset.
    Cumulative,
}

/// `file_lock` wait in one interval, for the sparkline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitSample {
    pub file_lock_wait_ns: u64,
    pub duration_ns: u64,
}

/// What `w` came to, shown in the header until the next key or for [`NOTICE`].
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    /// The path written, or why nothing was.
    pub saved: Result<String, String>,
    pub at: Instant,
}

/// What arrived from the collector. Paused, the screen shows a copy frozen at the pause.
#[derive(Debug, Clone, Default)]
pub(crate) struct Feed {
    pub interval: Option<Interval>,
    /// `None` before the first interval and after a reset until the collector's next one.
    pub cumulative: Option<Report>,
    pub history: VecDeque<WaitSample>,
    /// Oldest first.
    pub events: VecDeque<Event>,
}

/// The whole screen's state.
#[derive(Debug, Clone)]
pub(crate) struct State {
    live: Feed,
    frozen: Option<Feed>,
    pub help: bool,
    pub sort: SortColumn,
    pub process_order: ProcessOrder,
    /// The processes pane groups them by container (or cgroup): `g`.
    pub by_container: bool,
    pub focus: Pane,
    /// Lines scrolled, per pane (in [`Pane::ALL`] order).
    scroll: [u16; 5],
    pub view: View,
    /// The applied stack filter: a stack is shown when one of its functions contains it.
    pub filter: String,
    /// The filter being typed after `/`, until Enter or Esc.
    pub editing: Option<String>,
    /// The index of the last interval before the latest reset (`None`: never reset, or reset
    /// before any interval).
    pub reset_after: Option<u64>,
    pub resets: u32,
    /// The recording played back (`top --from`), as shown: `w` has nothing new to write.
    pub playing: Option<String>,
    pub notice: Option<Notice>,
}

impl Default for State {
    fn default() -> Self {
        State {
            live: Feed::default(),
            frozen: None,
            help: false,
            sort: SortColumn::TotalWait,
            process_order: ProcessOrder::FileLockWait,
            by_container: false,
            focus: Pane::Contention,
            scroll: [0; 5],
            view: View::Interval,
            filter: String::new(),
            editing: None,
            reset_after: None,
            resets: 0,
            playing: None,
            notice: None,
        }
    }
}

impl State {
    /// A screen of a live view, or of the recording `playing` played back.
    pub(crate) fn new(playing: Option<String>) -> Self {
        State {
            playing,
            ..State::default()
        }
    }

    pub(crate) fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// What the panes draw: the live feed, or its copy from the moment of the pause.
    pub(crate) fn shown(&self) -> &Feed {
        self.frozen.as_ref().unwrap_or(&self.live)
    }

    /// What arrived, paused or not.
    #[cfg(test)]
    pub(crate) fn live(&self) -> &Feed {
        &self.live
    }

    /// The report of the current view, with the duration it covers (ns).
    pub(crate) fn report(&self) -> Option<(&Report, u64)> {
        let feed = self.shown();
        match self.view {
            View::Interval => feed.interval.as_ref().map(|i| (&i.report, i.duration_ns)),
            View::Cumulative => feed.cumulative.as_ref().map(|r| (r, r.header.duration_ns)),
        }
    }

    /// Whether the session's figures are per process (`top -a`, `top -p A -p B`): then the
    /// processes pane shows.
    pub(crate) fn system_wide(&self) -> bool {
        self.live
            .interval
            .as_ref()
            .is_some_and(|i| i.report.header.target.kind.per_process())
    }

    /// The panes on screen, in [`Pane::ALL`] order.
    pub(crate) fn panes(&self) -> Vec<Pane> {
        let all = self.system_wide();
        Pane::ALL
            .into_iter()
            .filter(|&p| all || p != Pane::Processes)
            .collect()
    }

    /// The pane after (or before) the focused one, among those on screen.
    fn step_focus(&self, forward: bool) -> Pane {
        let shown = self.panes();
        let mut next = self.focus.step(forward);
        while !shown.contains(&next) {
            next = next.step(forward);
        }
        next
    }

    pub(crate) fn scroll(&self, pane: Pane) -> u16 {
        self.scroll[pane.index()]
    }

    pub(crate) fn on_update(&mut self, update: Update) {
        let feed = &mut self.live;
        match update {
            Update::Interval {
                interval,
                cumulative,
            } => {
                if feed.history.len() == HISTORY {
                    feed.history.pop_front();
                }
                feed.history.push_back(WaitSample {
                    file_lock_wait_ns: interval.report.contention.file_lock_wait_ns,
                    duration_ns: interval.duration_ns,
                });
                for event in &interval.events {
                    push_event(&mut feed.events, event.clone());
                }
                feed.interval = Some(interval);
                feed.cumulative = Some(cumulative);
            }
            Update::Saved(saved) => self.notify(saved),
            #[cfg(test)]
            Update::Event(event) => push_event(&mut feed.events, event),
        }
    }

    fn notify(&mut self, saved: Result<String, String>) {
        self.notice = Some(Notice {
            saved,
            at: Instant::now(),
        });
    }

    /// When the notice goes, if one is up.
    pub(crate) fn notice_until(&self) -> Option<Instant> {
        self.notice.as_ref().map(|n| n.at + NOTICE)
    }

    /// One key: `q`/Ctrl-C quit (in the filter prompt `q` is text, Ctrl-C still quits),
    /// `p`/space pause, `?` help, `s` sort, `o` order processes, `g` group them by container,
    /// Tab/arrows panes and scrolling, `r` reset, `z` interval/cumulative, `/` stack filter,
    /// `w` write the intervals kept. Any key takes the notice down.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Continue;
        }
        self.notice = None;
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if self.editing.is_some() {
            self.on_filter_key(key.code);
            return Action::Continue;
        }
        if self.help {
            match key.code {
                KeyCode::Char('q') => return Action::Quit,
                KeyCode::Char('?') | KeyCode::Esc => self.help = false,
                _ => {}
            }
            return Action::Continue;
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.frozen = match self.frozen {
                    Some(_) => None,
                    None => Some(self.live.clone()),
                }
            }
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('o') => {
                self.process_order = self.process_order.next();
                self.scroll[Pane::Processes.index()] = 0;
            }
            KeyCode::Char('g') => {
                self.by_container = !self.by_container;
                self.scroll[Pane::Processes.index()] = 0;
            }
            KeyCode::Tab | KeyCode::Right => self.focus = self.step_focus(true),
            KeyCode::BackTab | KeyCode::Left => self.focus = self.step_focus(false),
            KeyCode::Down => {
                let s = &mut self.scroll[self.focus.index()];
                *s = s.saturating_add(1);
            }
            KeyCode::Up => {
                let s = &mut self.scroll[self.focus.index()];
                *s = s.saturating_sub(1);
            }
            KeyCode::Char('r') => {
                self.reset_after = self.live.interval.as_ref().map(|i| i.index);
                self.resets += 1;
                self.live.cumulative = None;
                return Action::ResetTotals;
            }
            KeyCode::Char('z') => {
                self.view = match self.view {
                    View::Interval => View::Cumulative,
                    View::Cumulative => View::Interval,
                }
            }
            KeyCode::Char('w') => match &self.playing {
                Some(file) => self.notify(Err(format!("this is a recording already: {file}"))),
                None => return Action::Save,
            },
            KeyCode::Char('/') => self.editing = Some(self.filter.clone()),
            KeyCode::Esc if !self.filter.is_empty() => self.filter.clear(),
            _ => {}
        }
        Action::Continue
    }

    /// A key while the stack filter is edited: Enter applies it, Esc drops the edit.
    fn on_filter_key(&mut self, code: KeyCode) {
        let Some(text) = &mut self.editing else {
            return;
        };
        match code {
            KeyCode::Enter => {
                self.filter = text.trim().to_string();
                self.editing = None;
                self.scroll[Pane::Stacks.index()] = 0;
            }
            KeyCode::Esc => self.editing = None,
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) if !c.is_control() => text.push(c),
            _ => {}
        }
    }
}

fn push_event(events: &mut VecDeque<Event>, event: Event) {
    if events.len() == EVENTS {
        events.pop_front();
    }
    events.push_back(event);
}
