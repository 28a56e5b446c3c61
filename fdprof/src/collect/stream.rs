//! The streaming collector of a live profile (`fdprof top`): a tokio runtime owns the attached
//! [`Profiler`]; one task switches its statistics sampler when due and, every interval, takes a snapshot and
//! sends what happened since the last one ([`Snapshot::delta`]) down a channel. Stopping takes
//! the final snapshot (the last, partial interval) and detaches.
//!
//! The consumer (a screen, a JSON printer) reads [`Update`]s with [`Collector::recv_timeout`]
//! on its own thread, so turning deltas into figures never delays a tick.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use tokio::{
    runtime::{Handle, Runtime},
    sync::{mpsc, watch},
    task::JoinHandle,
    time::{self, Instant, MissedTickBehavior},
};

use super::{
    Profiler, Snapshot,
    events::{EventStream, RawEvent},
    starts::{StartBatch, StartStream},
    stats::own_cpu_ns,
};

/// How the collector runs.
#[derive(Debug, Clone, Copy)]
pub struct StreamOptions {
    /// Time between snapshots.
    pub interval: Duration,
    /// Stop by itself after this many intervals.
    pub count: Option<u64>,
    /// Read the kernel's ring-buffer events ([`Profiler::take_events`]) and send them as
    /// [`Update::Events`]; the programs send none until then.
    pub events: bool,
    /// Read the process starts ([`Profiler::take_starts`], system-wide only) and send them as
    /// [`Update::Started`] as they come; the programs send none until then.
    pub starts: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            count: None,
            events: false,
            starts: false,
        }
    }
}

/// What happened between two snapshots.
#[derive(Debug, Clone)]
pub struct IntervalDelta {
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
    /// The last interval of the profile (partial unless `count` ended it).
    pub last: bool,
}

/// What the collector sends.
#[derive(Debug)]
pub enum Update {
    Interval(Box<IntervalDelta>),
    /// Events read from the ring buffer, with the addresses of the stacks they refer to. An
    /// event sent before an interval's boundary arrives before that [`Update::Interval`].
    Events {
        events: Vec<RawEvent>,
        stacks: HashMap<i32, Vec<u64>>,
    },
    /// Processes that forked or exec'd, sent as soon as the kernel tells: snapshot their maps
    /// now. Dropping the batch tells the collector it was handled.
    Started(StartBatch),
}

/// What [`Collector::recv_timeout`] found.
#[derive(Debug)]
pub enum Received {
    Update(Update),
    /// Nothing within the wait.
    Idle,
    /// The collector has stopped and everything it sent has been received.
    Ended,
}

/// A running collector. Dropping it stops the task and detaches the profiler.
pub struct Collector {
    runtime: Runtime,
    updates: mpsc::UnboundedReceiver<Update>,
    sender: mpsc::UnboundedSender<Update>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Snapshot>>,
}

impl Collector {
    /// Starts the collector on a runtime of its own (one worker thread), which takes over
    /// `profiler`.
    pub fn start(profiler: Profiler, opts: StreamOptions) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fdprof-collect")
            .enable_time()
            .enable_io()
            .build()
            .context("cannot start the collector's runtime")?;
        let mut profiler = profiler;
        // Taken before the runtime runs anything, inside it (the stream registers the ring
        // buffer's fd with it): the programs send events from here on, so a command let go
        // after `start` returns is seen from its first instruction.
        let (events, starts) = {
            let _inside = runtime.enter();
            let events = match opts.events {
                true => profiler.take_events().transpose()?,
                false => None,
            };
            let starts = match opts.starts {
                true => profiler.take_starts().transpose()?,
                false => None,
            };
            (events, starts)
        };
        let (sender, updates) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let task = runtime.spawn(collect(
            profiler,
            Sources { events, starts },
            opts,
            sender.clone(),
            stopped,
        ));
        Ok(Self {
            runtime,
            updates,
            sender,
            stop,
            task,
        })
    }

    /// Waits up to `wait` for the next update.
    pub fn recv_timeout(&mut self, wait: Duration) -> Received {
        // The channel never closes (`sender` keeps one end open for more sources): the task
        // having ended with nothing left queued is the end.
        if let Ok(update) = self.updates.try_recv() {
            return Received::Update(update);
        }
        if self.task.is_finished() {
            return match self.updates.try_recv() {
                Ok(update) => Received::Update(update),
                Err(_) => Received::Ended,
            };
        }
        let updates = &mut self.updates;
        self.runtime.block_on(async {
            match time::timeout(wait, updates.recv()).await {
                Ok(Some(update)) => Received::Update(update),
                Ok(None) => Received::Ended,
                Err(_) => Received::Idle,
            }
        })
    }

    /// Asks the collector to stop: it sends the last, partial interval, then detaches.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Where further sources of updates (the events reader) send.
    pub fn sender(&self) -> mpsc::UnboundedSender<Update> {
        self.sender.clone()
    }

    /// The runtime, to spawn further tasks on (the events reader).
    pub fn handle(&self) -> &Handle {
        self.runtime.handle()
    }

    /// Stops the collector (if it has not stopped) and waits for it: the whole run's final
    /// snapshot, taken as the profiler detached.
    pub fn finish(self) -> Result<Snapshot> {
        self.stop();
        let Collector { runtime, task, .. } = self;
        runtime
            .block_on(task)
            .map_err(|e| anyhow!("the collector failed: {e}"))?
    }
}

/// The collector's task: ticks, snapshots every interval, and the final snapshot at the end.
async fn collect(
    mut profiler: Profiler,
    sources: Sources,
    opts: StreamOptions,
    updates: mpsc::UnboundedSender<Update>,
    mut stopped: watch::Receiver<bool>,
) -> Result<Snapshot> {
    let Sources {
        mut events,
        mut starts,
    } = sources;
    // The sampler switches twice every 10 s: sleeping until then, not polling, keeps an idle
    // collector asleep.
    let sampler = time::sleep(profiler.tick());
    tokio::pin!(sampler);
    let mut boundaries = time::interval_at(Instant::now() + opts.interval, opts.interval);
    boundaries.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut earlier = Snapshot::default();
    let mut cpu_earlier = own_cpu_ns();
    let mut index = 0u64;
    let mut send = |now: &Snapshot, earlier: &Snapshot, index: u64, last: bool| {
        let cpu = own_cpu_ns();
        let delta = IntervalDelta {
            index,
            start: earlier.elapsed,
            duration: now.elapsed.saturating_sub(earlier.elapsed),
            delta: now.delta(earlier),
            total: now.clone(),
            collector_cpu_ns: cpu.saturating_sub(cpu_earlier),
            last,
        };
        cpu_earlier = cpu;
        // A consumer that has gone has nothing left to show: the stop follows from it.
        let _ = updates.send(Update::Interval(Box::new(delta)));
    };
    loop {
        tokio::select! {
            _ = &mut sampler => sampler.as_mut().reset(Instant::now() + profiler.tick()),
            batch = next_events(&mut events) => {
                let events = batch?;
                if !events.is_empty() {
                    let stacks = profiler.stacks(events.iter().flat_map(RawEvent::stack_ids))?;
                    let _ = updates.send(Update::Events { events, stacks });
                }
            }
            batch = next_starts(&mut starts) => {
                let _ = updates.send(Update::Started(batch?));
            }
            _ = boundaries.tick() => {
                let now = profiler.snapshot()?;
                let last = opts.count.is_some_and(|n| index + 1 >= n);
                send(&now, &earlier, index, last);
                if last {
                    return profiler.finish();
                }
                earlier = now;
                index += 1;
            }
            // A stop asked for, or the collector dropped.
            _ = stopped.wait_for(|&stop| stop) => break,
        }
    }
    let last = profiler.finish()?;
    // The starts sent up to the detach are read too (the ring outlives the programs): none
    // is lost uncounted.
    if let Some(stream) = starts.as_mut() {
        let _ = updates.send(Update::Started(stream.try_batch()));
    }
    send(&last, &earlier, index, true);
    Ok(last)
}

/// The ring buffers the collector reads besides its snapshots, each when asked for.
struct Sources {
    events: Option<EventStream>,
    starts: Option<StartStream>,
}

/// The next batch of process starts, or never when they are not read.
async fn next_starts(starts: &mut Option<StartStream>) -> Result<StartBatch> {
    match starts {
        Some(stream) => stream.next_batch().await,
        None => std::future::pending().await,
    }
}

/// The next batch of events, or never when events are not read.
async fn next_events(events: &mut Option<EventStream>) -> Result<Vec<RawEvent>> {
    match events {
        Some(stream) => stream.next_batch().await,
        None => std::future::pending().await,
    }
}
