//! fdprof's own cost.

use fdprof_figures::{OwnCost, ProgramCost};
use fdprof_recording::{Recording, recording::ProgramCost as RecordedCost};

use super::{mean, share, sum};

/// Per program and in sum: run time, runs, ns per run and recursion misses; the programs' share
/// of one CPU over the statistics window and the collector's over the recording; both beside
/// the target's task-clock where counters were recorded.
pub(crate) fn own_cost(rec: &Recording) -> OwnCost {
    let c = &rec.own_cost;
    let run_time_ns = sum(c.programs.iter().map(|p| p.run_time_ns));
    let run_count = sum(c.programs.iter().map(|p| p.run_count));
    let window = stats_window(rec);
    let mut cost = OwnCost {
        programs: grouped(&c.programs)
            .into_iter()
            .map(|p| ProgramCost {
                ns_per_run: mean(p.run_time_ns, p.run_count),
                name: p.name,
                run_time_ns: p.run_time_ns,
                run_count: p.run_count,
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
        target_cpu: None,
    };
    cost.target_cpu = super::target_cpu(rec, super::counters(rec).as_ref(), &cost);
    cost
}

/// The programs, with the per-syscall fentry and fexit programs of the direct modes (one pair
/// per syscall function, 36 each) summed into one row each: `fdprof_fes_* (36 programs)`.
fn grouped(programs: &[RecordedCost]) -> Vec<RecordedCost> {
    use fdprof_common::probes::program::SYSCALL_FENTRY;
    let mut out: Vec<(RecordedCost, usize)> = Vec::new();
    for p in programs {
        let entry = SYSCALL_FENTRY.iter().any(|(e, _)| *e == p.name);
        let exit = SYSCALL_FENTRY.iter().any(|(_, x)| *x == p.name);
        let key = match (entry, exit) {
            (true, _) => "fdprof_fes_*".to_string(),
            (_, true) => "fdprof_fxs_*".to_string(),
            _ => p.name.clone(),
        };
        match out.iter_mut().find(|(g, _)| g.name == key) {
            Some((g, n)) => {
                g.run_time_ns = g.run_time_ns.saturating_add(p.run_time_ns);
                g.run_count = g.run_count.saturating_add(p.run_count);
                g.recursion_misses = g.recursion_misses.saturating_add(p.recursion_misses);
                *n += 1;
            }
            None => out.push((
                RecordedCost {
                    name: key,
                    ..p.clone()
                },
                1,
            )),
        }
    }
    out.into_iter()
        .map(|(mut g, n)| {
            if g.name.ends_with('*') {
                g.name = format!("{} ({n} programs)", g.name);
            }
            g
        })
        .collect()
}

/// The time the programs' run-time statistics cover: none when they could not be switched on
/// (that takes CAP_SYS_ADMIN), and then their share of a CPU is unknown.
fn stats_window(rec: &Recording) -> u64 {
    rec.own_cost.stats_window_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(name: &str, run_time_ns: u64, run_count: u64) -> RecordedCost {
        RecordedCost {
            name: name.into(),
            run_time_ns,
            run_count,
            recursion_misses: 0,
        }
    }

    #[test]
    fn the_per_syscall_programs_are_one_row_each() {
        let rows = grouped(&[
            cost("fdprof_fe_alloc", 10, 1),
            cost("fdprof_fes_0", 100, 10),
            cost("fdprof_fxs_0", 50, 10),
            cost("fdprof_fes_32", 300, 20),
            cost("fdprof_fxs_32", 70, 20),
        ]);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "fdprof_fe_alloc",
                "fdprof_fes_* (2 programs)",
                "fdprof_fxs_* (2 programs)"
            ]
        );
        assert_eq!((rows[1].run_time_ns, rows[1].run_count), (400, 30));
    }
}
