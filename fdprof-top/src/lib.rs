//! `fdprof top`'s screen: a terminal UI over the intervals a live profiler streams.
//!
//! [`state`] holds what the screen shows and turns keys into changes (no drawing); `draw`
//! lays one frame out from a `State` (no state changes); `app` runs the terminal: raw
//! mode, the alternate screen, keys and updates multiplexed. Figures come computed from
//! `fdprof_profiler::analysis` (one [`Report`] per interval and one cumulative); the screen only chooses,
//! orders and formats them.
//!
//! The API: [`run`] drives the screen over a channel of [`Update`]s (an interval with the
//! cumulative report, or what a save came to) and hands each key the screen does not keep to
//! its caller as an [`Action`]; it ends with an [`Exit`]. [`state::HISTORY`] is how many
//! intervals the screen keeps, which the caller keeps too.

#![warn(unreachable_pub)]

pub(crate) mod app;
pub(crate) mod draw;
pub mod state;

#[cfg(test)]
mod tests;

#[cfg(test)]
use fdprof_profiler::analysis::Event;
use fdprof_profiler::analysis::{Interval, Report};

pub use app::{Exit, run};
pub use state::Action;

/// What the collector sends the screen.
#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one interval a second: moving a few kilobytes is nothing, boxing is noise"
)]
pub enum Update {
    /// One interval, with the report over every interval since the start (or the last reset
    /// the collector heard of). Events in `interval.events` go to the events pane too: send
    /// each event once, here or (the tests) as `Update::Event`.
    Interval {
        interval: Interval,
        cumulative: Report,
    },
    /// What came of a `w`: the path written, or the one-line reason nothing was.
    Saved(Result<String, String>),
    /// One event as soon as it is read (the tests feed the events pane so).
    #[cfg(test)]
    Event(Event),
}
