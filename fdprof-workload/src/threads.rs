//! Threads mode: all tasks are threads of this process, sharing one fd table.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use crate::control::{Control, announce_and_wait, supervise};
use crate::fd_model::table_size_after;
use crate::ground_truth::{Fast, Lockstep, LoopError, Tracker};
use crate::outcome::{Outcome, TaskResult};
use crate::phase::{Plan, TaskSlot};
use crate::setup::{Config, Prepared, prepare, teardown};
use crate::table::{Baseline, snapshot_and_reset};
use crate::task::{TaskOp, allowed_cpus, pin_to};

enum AnyTracker {
    Fast(Fast),
    Lockstep(Box<Lockstep>),
}

struct Finished {
    op: TaskOp,
    /// The CPU it was pinned to (`--pin`).
    cpu: Option<usize>,
    tracker: AnyTracker,
    result: Result<u64, LoopError>,
    started: Instant,
    ended: Instant,
}

/// Tasks that finished, for the supervisor to wait on.
#[derive(Default)]
struct DoneCount {
    count: Mutex<usize>,
    cv: Condvar,
}

impl DoneCount {
    fn finish(&self) {
        *self.count.lock().unwrap() += 1;
        self.cv.notify_all();
    }

    fn wait(&self, all: usize, timeout: Duration) -> bool {
        let guard = self.count.lock().unwrap();
        let (guard, _) = self
            .cv
            .wait_timeout_while(guard, timeout, |n| *n < all)
            .unwrap();
        *guard >= all
    }

    /// Waits until all tasks are done, however long that takes.
    fn wait_all(&self, all: usize) {
        let guard = self.count.lock().unwrap();
        drop(self.cv.wait_while(guard, |n| *n < all).unwrap());
    }
}

/// What the worker threads and the supervisor share, each part in its own allocation: the
/// stop flag every loop polls shares no cache line with the barriers or the done count.
#[derive(Clone)]
struct Crew {
    slots: Arc<Vec<TaskSlot>>,
    stop: Arc<AtomicBool>,
    ready: Arc<Barrier>,
    go: Arc<Barrier>,
    done: Arc<DoneCount>,
}

impl Crew {
    /// For `n` workers, the supervisor joining them at both barriers.
    fn new(n: usize) -> Crew {
        Crew {
            slots: Arc::new((0..n).map(|_| TaskSlot::default()).collect()),
            stop: Arc::new(AtomicBool::new(false)),
            ready: Arc::new(Barrier::new(n + 1)),
            go: Arc::new(Barrier::new(n + 1)),
            done: Arc::new(DoneCount::default()),
        }
    }

    /// The ops done so far by the tasks whose count is the scenario's (`counts`).
    fn ops(&self, counts: &[bool]) -> u64 {
        self.slots
            .iter()
            .zip(counts)
            .filter(|(_, c)| **c)
            .map(|(s, _)| s.ops.load(Relaxed))
            .sum()
    }
}

impl AnyTracker {
    fn max_fd(&self) -> i32 {
        match self {
            AnyTracker::Fast(t) => t.max_fd(),
            AnyTracker::Lockstep(t) => t.max_fd(),
        }
    }
}

/// One worker thread's part: task `index`, pinned to `cpu` if any.
struct Worker {
    index: usize,
    cpu: Option<usize>,
    plan: Plan,
    /// Stay until every peer is done (peers read this thread's clock).
    linger: bool,
    crew: Crew,
}

impl Worker {
    /// The thread's body: pin, publish, wait at both barriers, run the measured loop.
    fn work(self, mut op: TaskOp, mut tracker: AnyTracker) -> Finished {
        let Worker {
            index,
            cpu,
            plan,
            linger,
            crew,
        } = self;
        let pin_result = cpu.map(pin_to).transpose();
        op.publish();
        crew.ready.wait();
        crew.go.wait();
        let started = Instant::now();
        let (slot, stop) = (&crew.slots[index], &*crew.stop);
        let result = match (pin_result, cpu) {
            (Err(e), Some(cpu)) => Err(LoopError::Pin {
                cpu,
                errno: e.raw_os_error().unwrap_or(0),
            }),
            _ => match &mut tracker {
                AnyTracker::Fast(t) => op.drive(t, plan, slot, stop),
                AnyTracker::Lockstep(t) => op.drive(&mut **t, plan, slot, stop),
            },
        };
        let ended = Instant::now();
        if result.is_err() {
            crew.stop.store(true, Relaxed);
        }
        crew.done.finish();
        if linger {
            // Peers may still be reading this thread's clock.
            crew.done.wait_all(crew.slots.len());
        }
        Finished {
            op,
            cpu,
            tracker,
            result,
            started,
            ended,
        }
    }
}

/// Runs `cfg` with `tasks` threads.
///
/// A `single` run (not a sweep point) leaves its fds open, since the process exits with them
/// open and exit-time teardown makes no system calls, and tracks the ground truth when it is
/// deterministic; a sweep point closes its fds afterwards.
pub(crate) fn run(cfg: &Config, tasks: u32, ctl: &Control, single: bool) -> Result<Outcome> {
    let prepared = prepare(cfg, 0, tasks, tasks)?;
    let Prepared {
        ops,
        held,
        fds_held,
    } = prepared;
    let baseline = snapshot_and_reset()?;
    // Several threads interleave on one table, unless the scenario makes no fd call (then
    // every thread's ground truth is the same, empty one).
    let deterministic = single
        && matches!(ctl.plan, Plan::Ops(_))
        && (ops.len() == 1 || !cfg.scenario.makes_fd_calls())
        && !cfg.processes
        && cfg.scenario.deterministic();

    let crew = Crew::new(ops.len());
    let counts: Vec<bool> = ops.iter().map(TaskOp::counts_ops).collect();
    let lockstep = deterministic.then_some(&baseline);
    let handles = spawn(cfg, ctl.plan, ops, lockstep, &crew)?;
    let start = measure(cfg, ctl, &crew, &counts)?;
    let finished = join(handles)?;

    let outcome = outcome(&finished, &baseline, start, fds_held);
    let prepared = Prepared {
        ops: finished.into_iter().map(|f| f.op).collect(),
        held,
        fds_held,
    };
    // Kept open for a single run: the process exits with them open, and exit-time teardown
    // closes them without system calls.
    if !single {
        teardown(&prepared)?;
    }
    Ok(outcome)
}

/// Starts a worker thread for each of `ops`, parked at the ready barrier, each tracking the
/// ground truth in lockstep from `lockstep` when given.
fn spawn(
    cfg: &Config,
    plan: Plan,
    ops: Vec<TaskOp>,
    lockstep: Option<&Baseline>,
    crew: &Crew,
) -> Result<Vec<JoinHandle<Finished>>> {
    let linger = cfg.scenario.reads_peer_threads();
    let cpus = allowed_cpus();
    let mut handles = Vec::with_capacity(ops.len());
    for (index, op) in ops.into_iter().enumerate() {
        let cpu = cfg.pin.then(|| cpus[index % cpus.len()]);
        let tracker = match lockstep {
            Some(baseline) => AnyTracker::Lockstep(Box::new(Lockstep::new(baseline.model()))),
            None => AnyTracker::Fast(Fast::default()),
        };
        let worker = Worker {
            index,
            cpu,
            plan,
            linger,
            crew: crew.clone(),
        };
        // Unnamed: naming another thread may open /proc/self/task/TID/comm.
        let handle = std::thread::Builder::new()
            .spawn(move || worker.work(op, tracker))
            .context("creating a worker thread")?;
        handles.push(handle);
    }
    Ok(handles)
}

/// Releases the parked workers (after the `--wait-signal` handshake) and supervises the
/// measured phase until every one is done; returns when it started.
fn measure(cfg: &Config, ctl: &Control, crew: &Crew, counts: &[bool]) -> Result<Instant> {
    crew.ready.wait();
    if ctl.wait_signal {
        announce_and_wait(&[])?;
    }
    crew.go.wait();
    let start = Instant::now();
    supervise(
        ctl,
        cfg.scenario.name(),
        start,
        |timeout| crew.done.wait(crew.slots.len(), timeout),
        || crew.ops(counts),
        || crew.stop.store(true, Relaxed),
    );
    Ok(start)
}

/// Joins the workers; the first one's failure, if any, fails the run.
fn join(handles: Vec<JoinHandle<Finished>>) -> Result<Vec<Finished>> {
    let mut finished = Vec::with_capacity(handles.len());
    for h in handles {
        finished.push(h.join().map_err(|_| anyhow!("a worker thread panicked"))?);
    }
    if let Some((i, err)) = finished
        .iter()
        .enumerate()
        .find_map(|(i, f)| f.result.err().map(|e| (i, e)))
    {
        return Err(anyhow!("measured phase, thread {i}: {err}"));
    }
    Ok(finished)
}

/// What the workers did, from the table's `baseline` and the phase's `start`.
fn outcome(finished: &[Finished], baseline: &Baseline, start: Instant, fds_held: u64) -> Outcome {
    let first = finished.iter().map(|f| f.started).min().unwrap_or(start);
    let last = finished.iter().map(|f| f.ended).max().unwrap_or(start);
    let max_fd = finished
        .iter()
        .map(|f| f.tracker.max_fd())
        .max()
        .unwrap_or(-1);
    let max_fds = if max_fd < 0 {
        baseline.max_fds
    } else {
        table_size_after(baseline.max_fds, max_fd as u32, baseline.nr_open)
    };
    let expected = finished.iter().find_map(|f| match &f.tracker {
        AnyTracker::Lockstep(t) => Some(t.expected()),
        AnyTracker::Fast(_) => None,
    });
    let mut results = Vec::new();
    let mut connects = None;
    for f in finished {
        let ops = f.result.unwrap_or(0);
        if f.op.counts_ops() {
            results.push(TaskResult {
                ops,
                secs: f.ended.duration_since(f.started).as_secs_f64(),
                cpu: f.cpu,
            });
        } else {
            *connects.get_or_insert(0) += ops;
        }
    }
    Outcome {
        tasks: results,
        secs: last.duration_since(first).as_secs_f64(),
        fds_held,
        max_fds,
        connects,
        expected,
    }
}
