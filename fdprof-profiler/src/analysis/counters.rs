//! The target's per-thread counters: totals (scaled where the kernel multiplexed a counter),
//! per-thread rows, and fdprof's cost beside the target's task-clock.

use fdprof_figures::{CounterName, CounterTotal, Counters, OwnCost, TargetCpu, ThreadRow};
use fdprof_recording::{
    Recording,
    counters::{Reading, ThreadCounters},
};

use super::{share, sum};

/// The counters' figures; `None` for a recording without counters.
pub(crate) fn counters(rec: &Recording) -> Option<Counters> {
    let c = rec.counters.as_ref()?;
    let totals: Vec<CounterTotal> = c
        .events
        .iter()
        .map(|e| {
            let readings = || c.threads.iter().filter_map(|t| t.reading(e.name));
            let available = e.unavailable.is_none();
            let time_enabled_ns = sum(readings().map(|r| r.time_enabled_ns));
            let time_running_ns = sum(readings().map(|r| r.time_running_ns));
            CounterTotal {
                name: e.name,
                unavailable: e.unavailable.clone(),
                value: available.then(|| sum(readings().map(scaled))),
                raw: sum(readings().map(|r| r.count)),
                time_enabled_ns,
                time_running_ns,
                multiplexed: readings().any(|r| r.time_running_ns < r.time_enabled_ns),
                running_share: share(time_running_ns, time_enabled_ns),
            }
        })
        .collect();
    let threads = c
        .threads
        .iter()
        .map(|t| ThreadRow {
            tid: t.tid,
            comm: t.comm.clone(),
            threads: t.threads,
            values: totals.iter().map(|total| value(t, total)).collect(),
        })
        .collect();
    Some(Counters {
        totals,
        threads,
        folded_threads: sum(c
            .threads
            .iter()
            .filter(|t| t.tid.is_none())
            .map(|t| t.threads)),
    })
}

/// A thread's value of one counter: scaled; `None` where the counter was not counted.
fn value(t: &ThreadCounters, total: &CounterTotal) -> Option<u64> {
    total.unavailable.is_none().then_some(())?;
    t.reading(total.name).map(scaled)
}

/// The count scaled to the time the counter was enabled, when it was on the PMU for less
/// (multiplexed); the count itself otherwise. Never on the PMU: 0.
fn scaled(r: &Reading) -> u64 {
    if r.time_running_ns >= r.time_enabled_ns {
        return r.count;
    }
    if r.time_running_ns == 0 {
        return 0;
    }
    (r.count as u128 * r.time_enabled_ns as u128 / r.time_running_ns as u128)
        .try_into()
        .unwrap_or(u64::MAX)
}

/// fdprof's cost beside the target's CPU time: the programs' run time extrapolated from the
/// sampled statistics windows to the whole recording, and the collector's CPU time, each as a
/// share of the target's task-clock. `None` without a task-clock.
pub(crate) fn target_cpu(
    rec: &Recording,
    counters: Option<&Counters>,
    cost: &OwnCost,
) -> Option<TargetCpu> {
    let task_clock = counters?
        .totals
        .iter()
        .find(|t| t.name == CounterName::TaskClock)?
        .value?;
    let programs_ns = (cost.stats_window_ns > 0).then(|| {
        let whole = cost.run_time_ns as f64 * rec.duration_ns as f64 / cost.stats_window_ns as f64;
        whole.min(u64::MAX as f64) as u64
    });
    Some(TargetCpu {
        target_cpu_ns: task_clock,
        programs_ns,
        programs_share: programs_ns.and_then(|p| share(p, task_clock)),
        collector_share: share(cost.collector_cpu_ns, task_clock),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(count: u64, enabled: u64, running: u64) -> Reading {
        Reading {
            name: CounterName::Cycles,
            count,
            time_enabled_ns: enabled,
            time_running_ns: running,
        }
    }

    #[test]
    fn multiplexed_counts_are_scaled_to_the_time_enabled() {
        assert_eq!(scaled(&reading(100, 10, 10)), 100);
        assert_eq!(scaled(&reading(100, 20, 10)), 200);
        assert_eq!(scaled(&reading(100, 20, 0)), 0);
    }

    #[test]
    fn a_recording_without_counters_has_no_figures() {
        let rec = crate::testdata::recording();
        assert!(counters(&rec).is_none());
        assert!(target_cpu(&rec, None, &OwnCost::default()).is_none());
    }
}
