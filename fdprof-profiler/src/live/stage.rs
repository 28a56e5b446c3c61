//! The live stage: the attached [`Profiler`], its rings and its symbolizers, driven on the
//! caller's tokio runtime. [`Stage::next`] does what the programs ask for between intervals (the
//! statistics sampler, events symbolized as they come, the maps of processes that start) and
//! hands back each interval as its clock passes; its [`Assembler`] assembles an interval,
//! [`Stage::finish`] detaches and gives the last one and the whole.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Result;
use fdprof_figures::Event;
use tokio::time::{self, Instant, Sleep};

use super::{Assembler, Clock, Facts, Symbols};
use crate::collect::{
    EventStream, Profiler, RawEvent, Snapshot,
    cgroups::CgroupSet,
    starts::{StartBatch, StartStream},
    stats::own_cpu_ns,
};

/// How the stage runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StageOptions {
    /// The stage's own clock: [`Stage::next`] hands back an interval each time it passes.
    /// `None`: the caller ends intervals with [`Stage::interval`] (the daemon's clock).
    pub interval: Option<Duration>,
    /// The clock stops after this many intervals (the last one says so).
    pub count: Option<u64>,
    /// Read the slow-wait events, at most this many an interval (the rest are counted).
    pub events: Option<usize>,
    /// Read the process starts (a target set, system-wide), to read their maps at once.
    pub starts: bool,
    /// Bound the symbolizers' caches each interval: a live view, which symbolizes each
    /// interval while its processes live. A recording keeps every snapshot for its end.
    pub trim: bool,
    /// Where the statistics sampler's windows are timed from (`None`: the stage's start);
    /// profilers that share it share their windows.
    pub stats_origin: Option<std::time::Instant>,
    /// Keep the figures of processes that ended to the end (a recording's whole, a live
    /// view's cumulative view); else they go once an interval has read them (the daemon).
    pub keep_ended: bool,
}

/// What happened between two snapshots.
#[derive(Debug, Clone)]
pub struct LiveInterval {
    /// 0 for the first interval.
    pub index: u64,
    /// Start, since the probes were attached.
    pub start: Duration,
    pub duration: Duration,
    /// The interval's counts and sums (maxima are those of the run so far).
    pub delta: Snapshot,
    /// Everything since attach, at the interval's end (for cumulative views).
    pub total: Snapshot,
    /// fdprof's CPU time during the interval (every thread).
    pub collector_cpu_ns: u64,
    /// The interval's events, symbolized, oldest first.
    pub events: Vec<Event>,
    /// Events past the bound of an interval.
    pub events_dropped: u64,
    /// The last interval of the profile.
    pub last: bool,
}

/// What [`Stage::next`] found.
#[derive(Debug)]
pub enum Tick {
    /// An interval ended on the stage's clock.
    Interval(Box<LiveInterval>),
    /// Processes that forked or exec'd (their maps read already), for the caller's membership.
    Started(StartBatch),
    /// Nothing within the wait.
    Idle,
    /// The clock ran `count` intervals: only [`Stage::finish`] is left.
    Ended,
}

/// The end of a profile: the programs detached.
pub struct Finished {
    /// The last, partial interval (`None` when the clock's count had ended the profile).
    pub last: Option<LiveInterval>,
    /// Everything since attach.
    pub total: Snapshot,
    pub assembler: Assembler,
}

pub struct Stage {
    profiler: Profiler,
    assembler: Assembler,
    opts: StageOptions,
    cuts: Cuts,
    events: Option<EventStream>,
    starts: Option<StartStream>,
    clock: Option<Clock>,
    sampler: Pin<Box<Sleep>>,
    stats_origin: std::time::Instant,
    /// Cgroups followed (`--cgroup`), read again every [`CGROUP_PASS`].
    cgroups: Option<(CgroupSet, Instant)>,
    /// The next look at whether a sweep of the rows of processes that ended is due.
    sweep: Pin<Box<Sleep>>,
    ended: bool,
}

/// How often the collector looks whether the rows of processes that ended are due to be taken
/// out of the kernel maps: a sweep a second, or at every look while contention sites fill.
const SWEEP: Duration = Duration::from_millis(100);

/// How often followed cgroups are read again: new descendants, and moves where the programs
/// cannot see them.
const CGROUP_PASS: Duration = Duration::from_secs(1);

/// Where the last interval ended, and what the next one holds so far.
struct Cuts {
    earlier: Snapshot,
    index: u64,
    cpu_earlier: u64,
    pending: Vec<Event>,
    events_dropped: u64,
}

impl Cuts {
    /// The interval from the last snapshot to `now`.
    fn cut(&mut self, now: Snapshot, last: bool) -> LiveInterval {
        let cpu = own_cpu_ns();
        let mut events = std::mem::take(&mut self.pending);
        events.sort_by_key(|e| e.at_ns);
        let interval = LiveInterval {
            index: self.index,
            start: self.earlier.elapsed,
            duration: now.elapsed.saturating_sub(self.earlier.elapsed),
            delta: now.delta(&self.earlier),
            total: now.clone(),
            collector_cpu_ns: cpu.saturating_sub(self.cpu_earlier),
            events,
            events_dropped: std::mem::take(&mut self.events_dropped),
            last,
        };
        self.cpu_earlier = cpu;
        self.earlier = now;
        self.index += 1;
        interval
    }
}

impl Stage {
    /// Takes over `profiler`; call it inside the runtime that will drive it (its rings register
    /// with that reactor). The programs send events and starts from here on.
    pub(crate) fn start(
        mut profiler: Profiler,
        symbols: Symbols,
        facts: Facts,
        opts: StageOptions,
    ) -> Result<Self> {
        let events = match opts.events {
            Some(_) => profiler.take_events().transpose()?,
            None => None,
        };
        let starts = match opts.starts {
            true => profiler.take_starts().transpose()?,
            false => None,
        };
        let clock = opts.interval.map(Clock::new);
        let stats_origin = opts.stats_origin.unwrap_or_else(std::time::Instant::now);
        // The sampler switches twice every 10 s: sleeping until then keeps an idle stage asleep.
        let first = profiler.tick_from(stats_origin);
        Ok(Self {
            profiler,
            assembler: Assembler { facts, symbols },
            opts,
            cuts: Cuts {
                earlier: Snapshot::default(),
                index: 0,
                cpu_earlier: own_cpu_ns(),
                pending: Vec::new(),
                events_dropped: 0,
            },
            events,
            starts,
            clock,
            sampler: Box::pin(time::sleep(first)),
            stats_origin,
            cgroups: None,
            sweep: Box::pin(time::sleep(SWEEP)),
            ended: false,
        })
    }

    /// Reads `cgroups` again every second from now on, their new processes followed.
    pub(crate) fn follow_cgroups(&mut self, cgroups: Option<CgroupSet>) {
        self.cgroups = cgroups.map(|set| (set, Instant::now() + CGROUP_PASS));
    }

    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// For a target set's membership.
    pub fn profiler_mut(&mut self) -> &mut Profiler {
        &mut self.profiler
    }

    /// What assembles the intervals: the facts (a live view updates the target's) and the
    /// symbolizers.
    pub fn assembler(&mut self) -> &mut Assembler {
        &mut self.assembler
    }

    /// Works until the next interval on the stage's clock, a batch of starts, or `wait`.
    /// Cancel-safe.
    pub async fn next(&mut self, wait: Option<Duration>) -> Result<Tick> {
        if self.ended {
            return Ok(Tick::Ended);
        }
        // Maps are read again where due, whatever the clock (a recording may be one interval).
        self.assembler.symbols.refresh();
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            tokio::select! {
                _ = &mut self.sampler => {
                    let next = self.profiler.tick_from(self.stats_origin);
                    self.sampler.as_mut().reset(Instant::now() + next);
                }
                batch = next_events(&mut self.events) => {
                    let raw = batch?;
                    self.take_events(raw);
                }
                batch = next_starts(&mut self.starts) => {
                    let batch = batch?;
                    let pids: Vec<u32> = batch.starts.iter().map(|s| s.pid).collect();
                    self.assembler.symbols.started(&pids);
                    return Ok(Tick::Started(batch));
                }
                _ = next_tick(&mut self.clock) => {
                    let last = self.opts.count.is_some_and(|n| self.cuts.index + 1 >= n);
                    let mut interval = self.interval()?;
                    if let Some(clock) = self.clock.as_mut() {
                        clock.cut();
                    }
                    interval.last = last;
                    self.ended = last;
                    return Ok(Tick::Interval(Box::new(interval)));
                }
                _ = &mut self.sweep => {
                    self.sweep.as_mut().reset(Instant::now() + SWEEP);
                    self.profiler.check_exited()?;
                }
                _ = next_pass(&self.cgroups) => {
                    if let Some((set, at)) = self.cgroups.as_mut() {
                        *at = Instant::now() + CGROUP_PASS;
                        let joined = set.pass(&mut self.profiler)?;
                        self.assembler.symbols.follow(joined);
                    }
                }
                _ = until(deadline) => return Ok(Tick::Idle),
            }
        }
    }

    /// Ends an interval now: the snapshot's delta, with the events read up to now.
    pub fn interval(&mut self) -> Result<LiveInterval> {
        if let Some(stream) = self.events.as_mut() {
            let raw = stream.try_batch();
            self.take_events(raw);
        }
        self.profiler.sweep()?;
        let now = self.profiler.snapshot()?;
        if self.opts.trim {
            self.assembler.symbols.trim();
        }
        self.assembler.symbols.refresh();
        let interval = self.cuts.cut(now, false);
        if !self.opts.keep_ended {
            // Read: the rows of the processes that ended go from here on.
            let gone = self.profiler.release_exited();
            self.cuts.earlier.forget(&gone);
            if self.opts.trim {
                self.assembler.symbols.ended(&gone);
            }
        }
        Ok(interval)
    }

    /// Forgets processes whose figures were read: in the kernel, in the last snapshot, and in
    /// the maps read again.
    pub fn forget(&mut self, tgids: &[u32]) -> Result<()> {
        self.cuts.earlier.forget(tgids);
        self.assembler.symbols.unfollow(tgids);
        self.profiler.forget(tgids)
    }

    /// Detaches: the last snapshot, its interval (unless the clock's count ended the profile),
    /// and the starts sent up to the detach (their maps read too: none is lost uncounted).
    pub fn finish(mut self) -> Result<Finished> {
        if let Some(stream) = self.events.as_mut() {
            let raw = stream.try_batch();
            self.take_events(raw);
        }
        let Stage {
            profiler,
            mut assembler,
            mut cuts,
            mut starts,
            ended,
            ..
        } = self;
        let total = profiler.finish()?;
        if let Some(stream) = starts.as_mut() {
            let batch = stream.try_batch();
            let pids: Vec<u32> = batch.starts.iter().map(|s| s.pid).collect();
            assembler.symbols.started(&pids);
        }
        assembler.symbols.read_all();
        let last = (!ended).then(|| cuts.cut(total.clone(), true));
        Ok(Finished {
            last,
            total,
            assembler,
        })
    }

    /// Symbolizes events now, within the interval's bound.
    fn take_events(&mut self, raw: Vec<RawEvent>) {
        if raw.is_empty() {
            return;
        }
        let bound = self.opts.events.unwrap_or(usize::MAX);
        let room = bound.saturating_sub(self.cuts.pending.len());
        self.cuts.events_dropped += raw.len().saturating_sub(room) as u64;
        let raw = &raw[..raw.len().min(room)];
        let stacks: HashMap<i32, Vec<u64>> = self
            .profiler
            .stacks(raw.iter().flat_map(RawEvent::stack_ids))
            .unwrap_or_default();
        let events = self.assembler.symbols.events(raw, &stacks);
        self.cuts.pending.extend(events);
    }
}

async fn next_starts(starts: &mut Option<StartStream>) -> Result<StartBatch> {
    match starts {
        Some(stream) => stream.next_batch().await,
        None => std::future::pending().await,
    }
}

async fn next_pass(cgroups: &Option<(CgroupSet, Instant)>) {
    match cgroups {
        Some((_, at)) => time::sleep_until(*at).await,
        None => std::future::pending().await,
    }
}

async fn next_events(events: &mut Option<EventStream>) -> Result<Vec<RawEvent>> {
    match events {
        Some(stream) => stream.next_batch().await,
        None => std::future::pending().await,
    }
}

async fn next_tick(clock: &mut Option<Clock>) {
    match clock {
        Some(clock) => clock.tick().await,
        None => std::future::pending().await,
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
