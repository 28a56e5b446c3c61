//! The daemon's figures as they accumulate, per target name and for the whole daemon: a running
//! total since the daemon started (processes that exited included, so a counter only goes up)
//! and the last intervals, for "the last N seconds". Everything is a [`Recording`], added with
//! [`merge::add`]; the front ends turn them into figures with the analysis every command uses.

use std::collections::VecDeque;

use crate::model::{Recording, merge};

use super::config::bounds;

/// One interval of one name (or of the daemon).
#[derive(Debug, Clone)]
pub struct Interval {
    pub index: u64,
    /// Start, since the daemon started.
    pub start_ns: u64,
    pub rec: Recording,
}

/// A name's figures so far.
#[derive(Debug, Clone)]
pub struct History {
    /// Everything since the daemon started (or since the name first appeared), its sites
    /// bounded to [`bounds::SITES`] (folded, so no count is lost).
    pub total: Recording,
    /// The last [`bounds::INTERVALS`] intervals, oldest first.
    pub recent: VecDeque<Interval>,
}

impl History {
    /// A history starting from `empty` (no counts, the run's facts).
    pub fn new(empty: Recording) -> Self {
        Self {
            total: empty,
            recent: VecDeque::new(),
        }
    }

    /// Adds an interval, whose sites are bounded first.
    pub fn push(&mut self, mut interval: Interval) {
        merge::bound_sites(&mut interval.rec, bounds::SITES);
        merge::add(&mut self.total, &interval.rec);
        // The daemon's own figures are named after its targets, which come and go.
        self.total.target = interval.rec.target.clone();
        merge::bound_sites(&mut self.total, bounds::SITES);
        self.total.duration_ns += interval.rec.duration_ns;
        self.total.own_cost.stats_window_ns = self
            .total
            .own_cost
            .stats_window_ns
            .min(self.total.duration_ns);
        self.recent.push_back(interval);
        while self.recent.len() > bounds::INTERVALS {
            self.recent.pop_front();
        }
    }

    /// The intervals that end within the last `seconds`, added up: their recording, starting
    /// with the first of them. `None` when no interval is kept yet.
    pub fn window(&self, seconds: u64) -> Option<Recording> {
        let last = self.recent.back()?;
        let end = last.start_ns + last.rec.duration_ns;
        let since = end.saturating_sub(seconds.saturating_mul(1_000_000_000));
        let mut within = self
            .recent
            .iter()
            .skip_while(|iv| iv.start_ns + iv.rec.duration_ns <= since);
        let first = within.next()?;
        let mut rec = first.rec.clone();
        for iv in within {
            merge::add(&mut rec, &iv.rec);
            rec.duration_ns += iv.rec.duration_ns;
            rec.end_reason = iv.rec.end_reason;
        }
        merge::bound_sites(&mut rec, bounds::SITES);
        rec.target = last.rec.target.clone();
        Some(rec)
    }

    /// The seconds of figures [`History::window`] can give at most.
    pub fn kept_seconds(&self) -> u64 {
        let ns: u64 = self.recent.iter().map(|iv| iv.rec.duration_ns).sum();
        ns.div_ceil(1_000_000_000)
    }
}
