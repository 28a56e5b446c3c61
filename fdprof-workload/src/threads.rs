//! Threads mode: all tasks are threads of this process, sharing one fd table.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use crate::control::{Control, announce_and_wait, supervise};
use crate::fd_model::table_size_after;
use crate::ground_truth::{Fast, Lockstep, LoopError, Tracker};
use crate::outcome::{Outcome, TaskResult};
use crate::phase::{Plan, TaskSlot};
use crate::setup::{Config, Prepared, prepare, teardown};
use crate::table::snapshot_and_reset;
use crate::task::{TaskOp, allowed_cpus, pin_to};

enum AnyTracker {
    Fast(Fast),
    Lockstep(Box<Lockstep>),
}

struct Finished {
    op: TaskOp,
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
    let linger = cfg.scenario.reads_peer_threads();

    let n = ops.len();
    let slots: Arc<Vec<TaskSlot>> = Arc::new((0..n).map(|_| TaskSlot::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(n + 1));
    let go = Arc::new(Barrier::new(n + 1));
    let done = Arc::new(DoneCount::default());
    let cpus = allowed_cpus();
    let plan = ctl.plan;
    let counts: Vec<bool> = ops.iter().map(TaskOp::counts_ops).collect();
    let mut pinned = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for (i, mut op) in ops.into_iter().enumerate() {
        let cpu = cfg.pin.then(|| cpus[i % cpus.len()]);
        pinned.push(cpu);
        let mut tracker = if deterministic {
            AnyTracker::Lockstep(Box::new(Lockstep::new(baseline.model())))
        } else {
            AnyTracker::Fast(Fast::default())
        };
        let (slots, stop, ready, go, done) = (
            slots.clone(),
            stop.clone(),
            ready.clone(),
            go.clone(),
            done.clone(),
        );
        // Unnamed: naming another thread may open /proc/self/task/TID/comm.
        let handle = std::thread::Builder::new()
            .spawn(move || {
                let pin_result = cpu.map(pin_to).transpose();
                op.publish();
                ready.wait();
                go.wait();
                let started = Instant::now();
                let result = match (pin_result, cpu) {
                    (Err(e), Some(cpu)) => Err(LoopError::Pin {
                        cpu,
                        errno: e.raw_os_error().unwrap_or(0),
                    }),
                    _ => match &mut tracker {
                        AnyTracker::Fast(t) => op.drive(t, plan, &slots[i], &stop),
                        AnyTracker::Lockstep(t) => op.drive(&mut **t, plan, &slots[i], &stop),
                    },
                };
                let ended = Instant::now();
                if result.is_err() {
                    stop.store(true, Relaxed);
                }
                done.finish();
                if linger {
                    // Peers may still be reading this thread's clock.
                    done.wait_all(n);
                }
                Finished {
                    op,
                    tracker,
                    result,
                    started,
                    ended,
                }
            })
            .context("creating a worker thread")?;
        handles.push(handle);
    }

    ready.wait();
    if ctl.wait_signal {
        announce_and_wait(&[])?;
    }
    go.wait();
    let start = Instant::now();
    supervise(
        ctl,
        cfg.scenario.name(),
        start,
        |timeout| done.wait(n, timeout),
        || {
            slots
                .iter()
                .zip(&counts)
                .filter(|(_, c)| **c)
                .map(|(s, _)| s.ops.load(Relaxed))
                .sum()
        },
        || stop.store(true, Relaxed),
    );

    let mut finished = Vec::with_capacity(n);
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

    let first = finished.iter().map(|f| f.started).min().unwrap_or(start);
    let last = finished.iter().map(|f| f.ended).max().unwrap_or(start);
    let max_fd = finished
        .iter()
        .map(|f| match &f.tracker {
            AnyTracker::Fast(t) => t.max_fd(),
            AnyTracker::Lockstep(t) => t.max_fd(),
        })
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
    for (f, cpu) in finished.iter().zip(pinned) {
        let ops = f.result.unwrap_or(0);
        if f.op.counts_ops() {
            results.push(TaskResult {
                ops,
                secs: f.ended.duration_since(f.started).as_secs_f64(),
                cpu,
            });
        } else {
            *connects.get_or_insert(0) += ops;
        }
    }

    let ops_back: Vec<TaskOp> = finished.into_iter().map(|f| f.op).collect();
    let outcome = Outcome {
        tasks: results,
        secs: last.duration_since(first).as_secs_f64(),
        fds_held,
        max_fds,
        connects,
        expected,
    };
    let prepared = Prepared {
        ops: ops_back,
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
