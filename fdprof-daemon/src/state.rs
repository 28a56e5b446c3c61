//! What the collector shares with the HTTP endpoints: the histories (behind a lock held only
//! to add an interval or to copy what a request needs) and the stream of interval JSON.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use fdprof_recording::Recording;
use fdprof_recording::recording::Target;
use serde::Serialize;
use tokio::sync::broadcast;

use fdprof_profiler::analysis::{self, ReportOptions};

use fdprof_profiler::model::{merge, process};

use super::history::{History, Interval, PROCESS_ROWS};
use super::interval::{Following, IntervalFigures, Names, Status, named};
use super::named::{self as name_of, NameView, Named};
use super::watcher::{CAPTURE_FAILED, DAEMON_PROBE};

/// Intervals the SSE stream buffers for a slow reader before it skips ahead.
const STREAM_BUFFER: usize = 16;

pub(crate) struct Histories {
    /// By target name.
    pub names: BTreeMap<String, Named>,
    /// Every name together, plus what only the daemon has (its drops, its CPU).
    pub daemon: History,
    /// Processes attached now.
    pub attached: usize,
    /// Whether the fd syscalls were traced at the last interval's end.
    pub full_tracing: bool,
    /// Time the fd syscalls were traced, over the daemon's life.
    pub full_tracing_ns: u64,
    pub interval: Duration,
    /// Intervals added so far: what a cached view of the histories was made from.
    pub intervals: u64,
}

impl Histories {
    /// A target name's figures.
    pub(crate) fn name(&self, name: &str) -> Option<NameView<'_>> {
        Some(self.names.get(name)?.view(&self.daemon))
    }

    /// Every target name's figures, by name.
    pub(crate) fn named(&self) -> impl Iterator<Item = (&String, NameView<'_>)> {
        self.names
            .iter()
            .map(|(n, named)| (n, named.view(&self.daemon)))
    }

    /// The name whose figures are the daemon's whole (`daemon`, pushed after it) reads the
    /// daemon's history; one that had its own keeps adding to it.
    fn push_whole(
        &mut self,
        name: String,
        target: Target,
        daemon: &Recording,
        start_ns: u64,
        gone: &HashSet<u32>,
    ) {
        let named = self
            .names
            .entry(name)
            .or_insert_with(|| Named::Daemon(target.clone()));
        match named {
            Named::Daemon(read_as) => *read_as = target,
            Named::Own(own) => {
                let mut rec = daemon.clone();
                name_of::as_target(&mut rec, &target);
                own.push(Interval { start_ns, rec }, gone);
            }
        }
    }

    /// Adds a name's own interval. A name that read the daemon's history, and no longer is its
    /// whole, starts its own from a copy of the daemon's, read as its.
    fn push_name(
        &mut self,
        name: String,
        rec: Recording,
        empty: &Recording,
        start_ns: u64,
        gone: &HashSet<u32>,
    ) {
        let Histories { names, daemon, .. } = self;
        let named = names
            .entry(name)
            .or_insert_with_key(|name| Named::Own(Box::new(History::new(named(empty, name)))));
        if let Named::Daemon(target) = named {
            let target = target.clone();
            let mut own = daemon.clone();
            own.read_as(|r| name_of::as_target(r, &target));
            *named = Named::Own(Box::new(own));
        }
        if let Named::Own(own) = named {
            own.push(Interval { start_ns, rec }, gone);
        }
    }
}

pub(crate) struct State {
    histories: RwLock<Histories>,
    /// Each interval's figures and each capture as JSON, one SSE event each.
    stream: broadcast::Sender<Streamed>,
    captures: Mutex<Captures>,
    /// The processes of the last interval: their rows stay in the running totals one interval
    /// more, so that a scrape every interval sees an exited process's last counts.
    last_pids: Mutex<HashSet<u32>>,
    /// When the last interval ended, and the programs unlinked then, for `/healthz`.
    pub(crate) health: super::health::Health,
}

/// One SSE event's JSON.
#[derive(Debug, Clone)]
pub(crate) enum Streamed {
    Interval(Arc<str>),
    Capture(Arc<str>),
}

/// What the `capture` SSE event and the log say of a capture written.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Written {
    pub name: String,
    pub path: String,
    pub target: String,
    pub rule: &'static str,
    pub fired_unix_ms: u64,
    pub intervals: usize,
    pub bytes: usize,
}

/// What the flight recorder ([`super::capture`]) has done, for `/metrics` and `/captures`.
#[derive(Debug, Default)]
struct Captures {
    /// `--capture-dir` now.
    dir: Option<PathBuf>,
    /// Captures written, by target and rule.
    written: BTreeMap<(String, &'static str), u64>,
    /// Captures that could not be written since the last interval took them.
    failed: u64,
}

impl State {
    pub(crate) fn new(daemon: Recording, interval: Duration) -> Arc<Self> {
        Arc::new(Self {
            histories: RwLock::new(Histories {
                names: BTreeMap::new(),
                daemon: History::new(daemon),
                attached: 0,
                full_tracing: false,
                full_tracing_ns: 0,
                interval,
                intervals: 0,
            }),
            stream: broadcast::channel(STREAM_BUFFER).0,
            captures: Mutex::default(),
            last_pids: Mutex::default(),
            health: super::health::Health::new(interval),
        })
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Histories> {
        self.histories.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Streamed> {
        self.stream.subscribe()
    }

    fn captures(&self) -> std::sync::MutexGuard<'_, Captures> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where captures go now (`None`: no `--capture-dir`).
    pub(crate) fn set_capture_dir(&self, dir: Option<PathBuf>) {
        self.captures().dir = dir;
    }

    pub(crate) fn capture_dir(&self) -> Option<PathBuf> {
        self.captures().dir.clone()
    }

    /// Counts a capture written and tells the stream.
    pub(crate) fn capture_written(&self, written: Written) {
        *self
            .captures()
            .written
            .entry((written.target.clone(), written.rule))
            .or_default() += 1;
        if let Ok(json) = serde_json::to_string(&written) {
            let _ = self.stream.send(Streamed::Capture(json.into()));
        }
    }

    pub(crate) fn capture_failed(&self) {
        self.captures().failed += 1;
    }

    /// The captures that failed since the last call: a drop of the next interval.
    pub(crate) fn take_capture_failures(&self) -> u64 {
        std::mem::take(&mut self.captures().failed)
    }

    /// Captures written so far, by target and rule.
    pub(crate) fn capture_counts(&self) -> Vec<(String, &'static str, u64)> {
        self.captures()
            .written
            .iter()
            .map(|((target, rule), n)| (target.clone(), *rule, *n))
            .collect()
    }

    /// Adds an interval's figures, with the collector's status as the interval left it: a new
    /// name's history starts from `figures.empty`; the running totals keep the rows of the
    /// processes still followed and of this interval's and the last one's. The captures that
    /// could not be written since are counted with the daemon's drops. Sends the daemon's
    /// interval to the stream.
    pub(crate) fn push(&self, mut figures: IntervalFigures, status: Status) {
        merge::add_drop(
            &mut figures.daemon.drops,
            DAEMON_PROBE,
            CAPTURE_FAILED,
            self.take_capture_failures(),
        );
        let IntervalFigures {
            index,
            start_ns,
            names,
            daemon,
            events,
            full_tracing_ns,
            empty,
        } = figures;
        let Status {
            attached,
            full_tracing,
            interval,
            following,
            unlinked,
        } = status;
        self.health.ended(interval, unlinked);
        // Made only for a reader, and outside the lock: a scrape never waits for it.
        let json = (self.stream.receiver_count() > 0).then(|| {
            let mut shown = daemon.clone();
            process::bound(&mut shown, PROCESS_ROWS);
            serde_json::to_string(&fdprof_figures::Interval {
                index,
                start_ns,
                duration_ns: daemon.duration_ns,
                report: analysis::report(&shown, &ReportOptions::default()),
                events,
            })
        });
        let gone = self.gone(&daemon, &following);
        {
            let mut h = self.histories.write().unwrap_or_else(|e| e.into_inner());
            match names {
                Names::Whole { name, target } => {
                    h.push_whole(name, target, &daemon, start_ns, &gone)
                }
                Names::Each(names) => {
                    for (name, rec) in names {
                        h.push_name(name, rec, &empty, start_ns, &gone);
                    }
                }
            }
            h.daemon.push(
                Interval {
                    start_ns,
                    rec: daemon,
                },
                &gone,
            );
            h.attached = attached;
            h.full_tracing = full_tracing;
            h.full_tracing_ns = h.full_tracing_ns.saturating_add(full_tracing_ns);
            h.interval = interval;
            h.intervals += 1;
        }
        if let Some(Ok(json)) = json {
            // Nobody listening is not an error.
            let _ = self.stream.send(Streamed::Interval(json.into()));
        }
    }

    /// The processes of the running totals that are in neither `interval` nor the one before
    /// and are not followed any more: their rows go. Checked outside the lock (under `-a`, each
    /// one's `/proc`).
    fn gone(&self, interval: &Recording, following: &Following) -> HashSet<u32> {
        let now: HashSet<u32> = interval.processes.iter().map(|p| p.pid).collect();
        let last = std::mem::replace(
            &mut *self.last_pids.lock().unwrap_or_else(|e| e.into_inner()),
            now.clone(),
        );
        let held: Vec<u32> = {
            let h = self.read();
            // The daemon's total holds every name's processes.
            h.daemon
                .total
                .processes
                .iter()
                .map(|p| p.pid)
                .filter(|&pid| !process::is_gone_in_container(pid))
                .filter(|pid| !now.contains(pid) && !last.contains(pid))
                .collect()
        };
        held.into_iter()
            .filter(|&pid| !following.contains(pid))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Span;
    use fdprof_recording::recording::DropCount;

    /// An interval of `target` whose one site waits `wait` ns, with a drop of the daemon's own.
    fn interval(index: u64, target: &str, wait: u64) -> Recording {
        let mut rec = fdprof_recording::testdata::recording();
        rec.contention.truncate(1);
        rec.contention[0].count = 1;
        rec.contention[0].total_wait_ns = wait;
        rec.target.comm = Some(target.into());
        rec.drops = vec![DropCount {
            probe: DAEMON_PROBE.into(),
            reason: CAPTURE_FAILED.into(),
            count: 1,
        }];
        rec.duration_ns = 1_000_000_000;
        rec.started_unix_ms = 1_700_000_000_000 + index * 1_000;
        rec
    }

    fn wait(rec: &Recording) -> u64 {
        rec.contention.iter().map(|s| s.total_wait_ns).sum()
    }

    #[test]
    fn the_only_name_reads_the_daemons_history_and_keeps_it_when_another_comes() {
        let mut base = fdprof_recording::testdata::recording();
        base.contention.clear();
        let mut h = Histories {
            names: BTreeMap::new(),
            daemon: History::new(base.clone()),
            attached: 0,
            full_tracing: false,
            full_tracing_ns: 0,
            interval: Duration::from_secs(1),
            intervals: 0,
        };
        let gone = HashSet::new();
        let all = Span::Last { seconds: 60 };
        for i in 0..2 {
            let rec = interval(i, "a", 10);
            h.push_whole(
                "a".into(),
                rec.target.clone(),
                &rec,
                i * 1_000_000_000,
                &gone,
            );
            h.daemon.push(
                Interval {
                    start_ns: i * 1_000_000_000,
                    rec,
                },
                &gone,
            );
        }
        assert!(matches!(h.names["a"], Named::Daemon(_)), "not kept twice");
        let a = h.name("a").unwrap().span(all).unwrap();
        assert_eq!((wait(&a), a.target.comm.as_deref()), (20, Some("a")));
        assert!(
            a.drops.is_empty(),
            "the daemon's own drops are not a name's"
        );
        assert!(h.daemon.total.drops.iter().any(|d| d.probe == DAEMON_PROBE));
        // A second name: "a" now keeps its own, its past with it.
        h.push_name("a".into(), interval(2, "a", 5), &base, 2_000_000_000, &gone);
        h.push_name("b".into(), interval(2, "b", 7), &base, 2_000_000_000, &gone);
        assert!(matches!(h.names["a"], Named::Own(_)));
        let a = h.name("a").unwrap().span(all).unwrap();
        assert_eq!(
            (wait(&a), a.drops.len()),
            (25, 1),
            "its third interval's own drop"
        );
        assert_eq!(wait(&h.name("b").unwrap().total()), 7);
        assert_eq!(wait(&h.name("a").unwrap().total()), 25);
    }
}
