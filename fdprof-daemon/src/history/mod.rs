//! The daemon's figures as they accumulate, per target name and for the whole daemon: a running
//! total since the daemon started (processes that exited included, so a counter only goes up)
//! and the last intervals, for "the last N seconds". Everything is a [`Recording`], added with
//! [`merge::add`]; the front ends turn them into figures with the analysis every command uses.
//!
//! Per process, nothing outlives its process but its rows in the kept intervals it took part
//! in: the running total holds the processes alive and those of the last two intervals
//! ([`process::forget`] lets the rest go, their counts staying in the name's own figures), and each kept interval, and each window of them, at most [`PROCESS_ROWS`]
//! processes ([`process::bound`]: the rest folded into one row). So the daemon's memory and a
//! request's time grow with the processes alive, not with every process it ever saw.
//!
//! The kept intervals hold their stacks once ([`stacks`]) and their rows packed ([`kept`]):
//! 300 intervals of churn held 50 MB a name as plain rows. A window adds them up with each
//! stack a stand-in, and puts back only the stacks its bounds keep.

mod kept;
mod stacks;

use std::collections::{HashMap, HashSet, VecDeque};

use fdprof_figures::TimelinePoint;
use fdprof_recording::Recording;

use fdprof_profiler::model::{merge, process, window};

use super::config::bounds;
use kept::Kept;
use stacks::Stacks;

/// Process rows a kept interval, and a window of them, holds at most: the first half by
/// `file_lock` wait, the rest by fd syscalls; the others are folded into one row
/// (`processes_others`), their counts staying in the name's own figures.
pub(crate) const PROCESS_ROWS: usize = 64;

/// One interval of one name (or of the daemon).
#[derive(Debug, Clone)]
pub(crate) struct Interval {
    /// Start, since the daemon started.
    pub start_ns: u64,
    pub rec: Recording,
}

/// Which kept intervals a request reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// Those that end within the last `seconds`.
    Last { seconds: u64 },
    /// Those that overlap `[from_ms, to_ms)`, Unix time in ms.
    Range { from_ms: u64, to_ms: u64 },
}

/// Why a span has no figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanError {
    /// No interval has ended yet.
    NoneYet,
    /// The range overlaps no kept interval; the kept ones cover `[kept_from_ms, kept_to_ms)`.
    Outside { kept_from_ms: u64, kept_to_ms: u64 },
}

/// A recording's start and end, Unix time in ms.
fn unix_ms(rec: &Recording) -> (u64, u64) {
    let start = rec.started_unix_ms;
    (start, start + rec.duration_ns / 1_000_000)
}

/// A name's figures so far.
#[derive(Debug, Clone)]
pub(crate) struct History {
    /// Everything since the daemon started (or since the name first appeared), its sites
    /// bounded to [`bounds::SITES`] (folded, so no count is lost).
    pub total: Recording,
    /// The last [`bounds::INTERVALS`] intervals, oldest first.
    recent: VecDeque<Kept>,
    stacks: Stacks,
    /// Intervals since each container with a row of gone processes last had a live one: its
    /// row stays as long as its intervals are kept ([`bounds::INTERVALS`]).
    containers_idle: HashMap<String, usize>,
}

impl History {
    /// A history starting from `empty` (no counts, the run's facts).
    pub(crate) fn new(mut empty: Recording) -> Self {
        // No time yet, so no steal: each interval's adds to it.
        empty.steal = Some(Default::default());
        Self {
            total: empty,
            recent: VecDeque::new(),
            stacks: Stacks::default(),
            containers_idle: HashMap::new(),
        }
    }

    /// Counts an interval for each container whose processes are all gone (or about to be);
    /// those with a live process start again from 0.
    fn age_containers(&mut self, gone: &HashSet<u32>) {
        let mut live = HashSet::new();
        let mut folded = HashSet::new();
        for p in &self.total.processes {
            let Some(c) = &p.identity.container else {
                continue;
            };
            if process::is_gone_in_container(p.pid) || gone.contains(&p.pid) {
                folded.insert(c.id.as_str());
            } else {
                live.insert(c.id.as_str());
            }
        }
        self.containers_idle
            .retain(|id, _| folded.contains(id.as_str()));
        for id in folded {
            let idle = self.containers_idle.entry(id.to_string()).or_default();
            *idle = if live.contains(id) { 0 } else { *idle + 1 };
        }
    }

    /// Adds an interval, whose sites are bounded first, and lets the running total's rows of
    /// processes `gone` go (ended before this interval, or no longer followed). The interval is
    /// kept with at most [`PROCESS_ROWS`] processes.
    pub(crate) fn push(&mut self, interval: Interval, gone: &HashSet<u32>) {
        let Interval { start_ns, mut rec } = interval;
        merge::bound_sites(&mut rec, bounds::SITES);
        merge::add(&mut self.total, &rec);
        self.age_containers(gone);
        let idle = &self.containers_idle;
        process::forget(&mut self.total, gone, |id| {
            idle.get(id).is_none_or(|&n| n < bounds::INTERVALS)
        });
        process::bound(&mut rec, PROCESS_ROWS);
        // The daemon's own figures are named after its targets, which come and go.
        self.total.target = rec.target.clone();
        merge::bound_sites(&mut self.total, bounds::SITES);
        window::add_full_tracing_in_time(&mut self.total, &rec);
        self.total.duration_ns += rec.duration_ns;
        merge::add_steal_in_time(&mut self.total.steal, rec.steal.as_ref());
        self.total.own_cost.stats_window_ns = self
            .total
            .own_cost
            .stats_window_ns
            .min(self.total.duration_ns);
        self.recent
            .push_back(Kept::new(start_ns, rec, &mut self.stacks));
        while self.recent.len() > bounds::INTERVALS {
            if let Some(old) = self.recent.pop_front() {
                old.release(&mut self.stacks);
            }
        }
    }

    /// A kept interval's recording, its stacks put back.
    fn whole(&self, kept: &Kept) -> Recording {
        let mut rec = kept.with_stand_ins(&self.stacks);
        self.stacks.put_back_all(&mut rec);
        rec
    }

    /// The kept intervals `span` covers, oldest first; or why there is none.
    fn chosen(&self, span: Span) -> Result<Vec<&Kept>, SpanError> {
        let last = self.recent.back().ok_or(SpanError::NoneYet)?;
        let chosen: Vec<&Kept> = match span {
            Span::Last { seconds } => {
                let since = last
                    .end_ns()
                    .saturating_sub(seconds.saturating_mul(1_000_000_000));
                self.recent
                    .iter()
                    .skip_while(|kept| kept.end_ns() <= since)
                    .collect()
            }
            Span::Range { from_ms, to_ms } => self
                .recent
                .iter()
                .filter(|kept| {
                    let (start, end) = unix_ms(&kept.facts);
                    start < to_ms && end > from_ms
                })
                .collect(),
        };
        if chosen.is_empty() {
            let first = self.recent.front().map_or((0, 0), |k| unix_ms(&k.facts));
            return Err(SpanError::Outside {
                kept_from_ms: first.0,
                kept_to_ms: unix_ms(&last.facts).1,
            });
        }
        Ok(chosen)
    }

    /// The kept intervals `span` covers, added up: their recording, starting with the first of
    /// them; or why there is none.
    #[cfg(test)]
    pub(crate) fn span(&self, span: Span) -> Result<Recording, SpanError> {
        self.span_folding(span).map(|(rec, _)| rec)
    }

    /// [`History::span`], and the waits whose stacks the window's own bound folded away (in
    /// its drops with those its intervals' bounds folded).
    pub(crate) fn span_folding(&self, span: Span) -> Result<(Recording, u64), SpanError> {
        let chosen = self.chosen(span)?;
        // Added up and bounded with stand-ins, so that only the stacks kept are put back.
        let stand_ins = chosen.into_iter().map(|k| k.with_stand_ins(&self.stacks));
        let Some(mut rec) = window::total(stand_ins) else {
            return Err(SpanError::NoneYet);
        };
        process::bound(&mut rec, PROCESS_ROWS);
        let before = merge::stack_bound_waits(&rec);
        merge::bound_sites(&mut rec, bounds::SITES);
        let folded = merge::stack_bound_waits(&rec) - before;
        self.stacks.put_back_all(&mut rec);
        self.name_as_now(&mut rec);
        Ok((rec, folded))
    }

    /// The facts of the kept intervals `span` covers, added up without their rows (sites,
    /// samples, processes): what a profile made of each name's window states beside them.
    pub(crate) fn span_facts(&self, span: Span) -> Result<Recording, SpanError> {
        let chosen = self.chosen(span)?;
        let mut rec =
            window::total(chosen.into_iter().map(|k| k.facts.clone())).ok_or(SpanError::NoneYet)?;
        self.name_as_now(&mut rec);
        Ok(rec)
    }

    /// Applies `f` to the facts of the running total and of every kept interval: the
    /// daemon's history made a name's.
    pub(crate) fn read_as(&mut self, f: impl Fn(&mut Recording)) {
        f(&mut self.total);
        for kept in &mut self.recent {
            f(&mut kept.facts);
        }
    }

    /// A window is named as the name's last interval is: its targets come and go.
    fn name_as_now(&self, rec: &mut Recording) {
        if let Some(last) = self.recent.back() {
            rec.target = last.facts.target.clone();
        }
    }

    /// Each kept interval's point of the timeline, oldest first.
    pub(crate) fn points(&self) -> impl Iterator<Item = TimelinePoint> + '_ {
        self.recent.iter().map(|kept| kept.point.clone())
    }

    /// The kept intervals that overlap `[from_ns, until_ns)`, whole, oldest first: a capture's.
    pub(crate) fn between(&self, from_ns: u64, until_ns: u64) -> Vec<window::Timed> {
        self.recent
            .iter()
            .filter(|k| k.end_ns() > from_ns && k.start_ns < until_ns)
            .map(|k| window::Timed {
                start_ns: k.start_ns,
                rec: self.whole(k),
            })
            .collect()
    }

    /// The seconds of figures [`History::window`] can give at most.
    pub(crate) fn kept_seconds(&self) -> u64 {
        let ns: u64 = self.recent.iter().map(|kept| kept.facts.duration_ns).sum();
        ns.div_ceil(1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_recording::recording::{ContentionSite, Frame};

    fn frame(f: &str) -> Frame {
        Frame {
            function: f.into(),
            ..Default::default()
        }
    }

    /// An interval of `duration_ms` whose sites wait `waits` ns under the stacks named.
    fn interval(index: u64, sites: &[(&str, u64)]) -> Interval {
        let mut rec = fdprof_recording::testdata::recording();
        rec.contention = sites
            .iter()
            .map(|&(f, wait)| ContentionSite {
                kernel_stack: vec![frame(f), frame("alloc_fd")],
                user_stack: vec![frame("main")],
                count: 1,
                total_wait_ns: wait,
                max_wait_ns: wait,
                ..rec.contention[0].clone()
            })
            .collect();
        rec.duration_ns = 1_000_000_000;
        rec.started_unix_ms = 1_700_000_000_000 + index * 1_000;
        Interval {
            start_ns: index * 1_000_000_000,
            rec,
        }
    }

    /// The wait of the site under the stack `f` in `r`.
    fn wait_of(r: &Recording, f: &str) -> Option<u64> {
        r.contention
            .iter()
            .find(|s| s.kernel_stack[0].function == f)
            .map(|s| s.total_wait_ns)
    }

    #[test]
    fn a_range_covers_the_intervals_it_overlaps_and_says_when_it_covers_none() {
        let mut h = History::new(fdprof_recording::testdata::recording());
        let range = |from_ms, to_ms| Span::Range { from_ms, to_ms };
        assert_eq!(h.span(range(0, 1)).unwrap_err(), SpanError::NoneYet);
        for (i, wait) in [10, 20, 40].into_iter().enumerate() {
            h.push(interval(i as u64, &[("a", wait)]), &HashSet::new());
        }
        let t0 = 1_700_000_000_000;
        let wait = |span| wait_of(&h.span(span).unwrap(), "a");
        // Within the second interval; across its end into the third; all three.
        assert_eq!(wait(range(t0 + 1_200, t0 + 1_300)), Some(20));
        assert_eq!(wait(range(t0 + 1_999, t0 + 2_001)), Some(60));
        assert_eq!(wait(range(t0 - 5_000, t0 + 9_000)), Some(70));
        // Ends where the first begins: none.
        let outside = SpanError::Outside {
            kept_from_ms: t0,
            kept_to_ms: t0 + 3_000,
        };
        assert_eq!(h.span(range(t0 - 5_000, t0)).unwrap_err(), outside);
        assert_eq!(h.span(range(t0 + 3_000, t0 + 4_000)).unwrap_err(), outside);
        assert_eq!(h.points().count(), 3);
    }

    #[test]
    fn windows_give_back_the_stacks_and_old_intervals_free_theirs() {
        let mut h = History::new(fdprof_recording::testdata::recording());
        h.push(interval(0, &[("a", 10), ("b", 20)]), &HashSet::new());
        h.push(interval(1, &[("a", 5)]), &HashSet::new());
        let last = h.span(Span::Last { seconds: 1 }).unwrap();
        assert_eq!(last.contention.len(), 1);
        assert_eq!(last.contention[0].kernel_stack[0].function, "a");
        assert_eq!(last.contention[0].user_stack, vec![frame("main")]);
        let both = h.span(Span::Last { seconds: 2 }).unwrap();
        assert_eq!(wait_of(&both, "a"), Some(15));
        assert_eq!(wait_of(&both, "b"), Some(20));
        assert_eq!(both.duration_ns, 2_000_000_000);
        let second = h.between(1_000_000_000, 1_500_000_000);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].rec.contention[0].kernel_stack[0].function, "a");
        // Two kernel stacks and one user stack, each held once.
        assert_eq!(h.stacks.ids.len(), 3);
        for i in 2..2 + bounds::INTERVALS as u64 {
            h.push(interval(i, &[("c", 1)]), &HashSet::new());
        }
        // a and b rolled out with their intervals: only c's stacks remain.
        assert_eq!(h.stacks.ids.len(), 2);
        assert_eq!(h.recent.len(), bounds::INTERVALS);
        assert_eq!(
            wait_of(&h.span(Span::Last { seconds: u64::MAX }).unwrap(), "c"),
            Some(300)
        );
    }

    /// An interval of processes `pids`, each with one socket call.
    fn of_processes(index: u64, pids: std::ops::Range<u32>) -> Interval {
        let mut i = interval(index, &[]);
        i.rec.processes = pids
            .map(|pid| fdprof_recording::recording::ProcessRecord {
                pid,
                syscalls: vec![fdprof_recording::recording::SyscallStats {
                    name: "socket".into(),
                    calls: 1,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        i
    }

    #[test]
    fn processes_gone_leave_the_total_and_kept_intervals_hold_a_bounded_number() {
        let mut h = History::new(fdprof_recording::testdata::recording());
        h.push(of_processes(0, 1..1001), &HashSet::new());
        assert_eq!(h.total.processes.len(), 1000);
        // The next interval: 1..=1000 exited, 1001..=1010 run.
        let gone: HashSet<u32> = (1..1001).collect();
        h.push(of_processes(1, 1001..1011), &gone);
        assert_eq!(h.total.processes.len(), 10);
        let first = h.span(Span::Last { seconds: 2 }).unwrap();
        assert_eq!(first.processes.len(), PROCESS_ROWS);
        let folded = first.processes_folded.as_ref().unwrap();
        assert_eq!(folded.processes, 1010 - PROCESS_ROWS as u64);
        let calls: u64 = first
            .processes
            .iter()
            .chain([])
            .flat_map(|p| &p.syscalls)
            .chain(&folded.syscalls)
            .map(|s| s.calls)
            .sum();
        assert_eq!(calls, 1010);
        assert!(
            h.recent
                .iter()
                .all(|k| k.with_stand_ins(&h.stacks).processes.len() <= PROCESS_ROWS)
        );
    }

    #[test]
    fn a_window_of_packed_intervals_is_the_window_of_the_intervals_themselves() {
        use fdprof_recording::recording::{CpuEvent, CpuProfile, CpuSite};
        let mut h = History::new(fdprof_recording::testdata::recording());
        let mut plain = Vec::new();
        for i in 0..4u64 {
            let mut iv = of_processes(i, (100 + i as u32 * 50)..(200 + i as u32 * 50));
            iv.rec.contention = interval(i, &[("a", 10 + i), ("b", 7), ("c", i)])
                .rec
                .contention;
            for (n, site) in iv.rec.contention.iter_mut().enumerate() {
                site.pid = Some(100 + i as u32 * 50 + n as u32);
            }
            iv.rec.cpu = Some(CpuProfile {
                event: CpuEvent::CpuClock,
                frequency_hz: 99,
                samples: vec![CpuSite {
                    kernel_stack: vec![frame("irq")],
                    user_stack: vec![frame(if i % 2 == 0 { "even" } else { "odd" })],
                    count: i + 1,
                }],
            });
            // As it is kept: its sites and processes bounded.
            let mut kept = iv.rec.clone();
            merge::bound_sites(&mut kept, bounds::SITES);
            process::bound(&mut kept, PROCESS_ROWS);
            plain.push(kept);
            h.push(iv, &HashSet::new());
        }
        let mut want = window::total(plain).unwrap();
        process::bound(&mut want, PROCESS_ROWS);
        merge::bound_sites(&mut want, bounds::SITES);
        let got = h.span(Span::Last { seconds: u64::MAX }).unwrap();
        let json = |r: &Recording| {
            let mut j = serde_json::to_value(r).unwrap();
            j.as_object_mut().unwrap().remove("target");
            j
        };
        let (got_j, want_j) = (json(&got), json(&want));
        for (k, v) in want_j.as_object().unwrap() {
            assert_eq!(&got_j[k], v, "{k}");
        }
        assert_eq!(got_j, want_j);
        assert_eq!(got.processes.len(), PROCESS_ROWS);
        assert_eq!(
            got.cpu.as_ref().unwrap().samples[0].user_stack,
            vec![frame("odd")]
        );
        let points: Vec<u64> = h.points().map(|p| p.file_lock_waits).collect();
        assert_eq!(points.len(), 4);
    }
}
