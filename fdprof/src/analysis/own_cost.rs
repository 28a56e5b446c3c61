//! fdprof's own cost.

use fdprof_figures::{OwnCost, ProgramCost};

use super::{mean, share, sum};
use crate::model::Recording;

/// Per program and in sum: run time, runs, ns per run and recursion misses; the programs' share
/// of one CPU over the statistics window and the collector's over the recording.
pub fn own_cost(rec: &Recording) -> OwnCost {
    let c = &rec.own_cost;
    let run_time_ns = sum(c.programs.iter().map(|p| p.run_time_ns));
    let run_count = sum(c.programs.iter().map(|p| p.run_count));
    let window = stats_window(rec);
    OwnCost {
        programs: c
            .programs
            .iter()
            .map(|p| ProgramCost {
                name: p.name.clone(),
                run_time_ns: p.run_time_ns,
                run_count: p.run_count,
                ns_per_run: mean(p.run_time_ns, p.run_count),
                recursion_misses: p.recursion_misses,
            })
            .collect(),
        run_time_ns,
        run_count,
        ns_per_run: mean(run_time_ns, run_count),
        recursion_misses: sum(c.programs.iter().map(|p| p.recursion_misses)),
        programs_cpu_share: share(run_time_ns, window),
        stats_window_ns: window,
        collector_cpu_ns: c.collector_cpu_ns,
        collector_cpu_share: share(c.collector_cpu_ns, rec.duration_ns),
    }
}

/// The time the programs' run-time statistics cover: none when they could not be switched on
/// (that takes CAP_SYS_ADMIN), and then their share of a CPU is unknown.
fn stats_window(rec: &Recording) -> u64 {
    rec.own_cost.stats_window_ns
}
