//! RLIMIT_NOFILE: raised to the hard limit at start, and checked against what the scenario
//! needs before anything is set up, so no run dies of EMFILE half-way.
//!
//! The kernel refuses an fd number >= the soft limit (alloc_fd's `end`, dup2's check), so what
//! matters is the highest fd number a scenario reaches: new fds take the lowest free numbers,
//! so a scenario that needs `k` new fds at its peak reaches the `k`-th free number.

use anyhow::Result;

use crate::error::usage;
use crate::scenarios::Scenario;
use crate::setup::Config;
use crate::table::nth_free;

#[derive(Clone, Copy, Debug)]
pub(crate) struct NoFile {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the limits now in force.
pub(crate) fn raise_nofile() -> Result<NoFile> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        anyhow::bail!(
            "getrlimit(RLIMIT_NOFILE): {}",
            std::io::Error::last_os_error()
        );
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a live rlimit; raising soft up to hard needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Ok(NoFile {
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

/// New fds a table needs at its peak for `-n fds` with `tasks` tasks sharing it.
fn new_fds_at_peak(cfg: &Config, fds: u32, tasks: u32, open: &[u32]) -> u64 {
    let tasks_per_table = if cfg.processes { 1 } else { tasks };
    // Setup reads /proc and opens a scratch fd while everything is held: one more.
    let setup_scratch = 1;
    match cfg.scenario {
        Scenario::Opensock => {
            let per_table = if cfg.processes {
                fds.div_ceil(tasks)
            } else {
                fds
            };
            u64::from(per_table) + setup_scratch
        }
        // Every free fd below N gets filled; the far open/dup then takes the first free >= N.
        Scenario::Holes | Scenario::Dup2Worst => {
            let open_below = open.iter().filter(|&&fd| fd < fds).count() as u64;
            u64::from(fds) - open_below + 1
        }
        // The held source fd and the op's N dups.
        Scenario::CloseLoop => u64::from(fds) + 1 + setup_scratch,
        // Held fds + listener + per acceptor the accepted socket, per connector its socket.
        Scenario::Accept => u64::from(fds) + 1 + 2 * u64::from(tasks),
        tight => {
            let dup_src = u64::from(tight == Scenario::DupClose && fds == 0);
            let per_op = u64::from(tight.fds_per_op()) * u64::from(tasks_per_table);
            u64::from(fds) + dup_src + per_op.max(setup_scratch)
        }
    }
}

/// The smallest sensible `-n`.
pub(crate) fn min_fds(cfg: &Config, tasks: u32) -> u32 {
    match cfg.scenario {
        Scenario::Opensock => tasks,
        Scenario::Holes | Scenario::Dup2Worst => cfg.hole + 1,
        Scenario::CloseLoop => 1,
        _ => 0,
    }
}

/// Fails with a [`UsageError`](crate::error::UsageError) naming the limit and the largest `-n`
/// that fits, unless the scenario fits under the soft limit with `tasks` tasks (the largest of a
/// sweep).
pub(crate) fn check_fit(cfg: &Config, tasks: u32, open: &[u32], nofile: NoFile) -> Result<()> {
    let limit = nofile.soft;
    let name = cfg.scenario.name();
    let limit_text = if nofile.soft == nofile.hard {
        format!("RLIMIT_NOFILE {limit} (the hard limit)")
    } else {
        format!("RLIMIT_NOFILE {limit} (hard limit {})", nofile.hard)
    };
    if let Some(size) = cfg.prealloc
        && u64::from(size) > limit
    {
        return Err(usage(format!(
            "--prealloc {size} does not fit under {limit_text}: the largest --prealloc is {limit}"
        )));
    }
    let peak = |fds: u32| nth_free(open, new_fds_at_peak(cfg, fds, tasks, open) - 1);
    let fits = |fds: u32| peak(fds) < limit;
    if fits(cfg.fds) {
        return Ok(());
    }
    let min = min_fds(cfg, tasks);
    if !fits(min) {
        return Err(usage(format!(
            "{name} with {tasks} tasks does not fit under {limit_text} even with -n {min}: \
                 use fewer tasks"
        )));
    }
    // Largest fitting -n: peak() grows with -n.
    let (mut lo, mut hi) = (min, cfg.fds);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    Err(usage(format!(
        "-n {} does not fit under {limit_text}: {name} would need fd {} (fds must stay below the \
         limit, and {} are open already); the largest -n that fits is {lo}",
        cfg.fds,
        peak(cfg.fds),
        open.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(scenario: Scenario, fds: u32) -> Config {
        Config {
            scenario,
            fds,
            hole: 3,
            path: c"/dev/null".into(),
            prealloc: None,
            processes: false,
            pin: false,
            variant: Default::default(),
        }
    }

    const NOFILE: NoFile = NoFile {
        soft: 1000,
        hard: 1000,
    };

    fn largest(c: &Config, tasks: u32) -> Option<u32> {
        let err = check_fit(c, tasks, &[0, 1, 2], NOFILE).err()?;
        let msg = err.to_string();
        Some(msg.rsplit(' ').next().unwrap().parse().unwrap())
    }

    #[test]
    fn largest_n_is_exact() {
        // stdio open; opensock needs N sockets + 1 scratch: fds 3..N+3 < 1000.
        assert_eq!(largest(&cfg(Scenario::Opensock, 5000), 1), Some(996));
        assert_eq!(largest(&cfg(Scenario::Opensock, 996), 1), None);
        // holes: fds 0..N-1 plus fd N: N <= 999.
        assert_eq!(largest(&cfg(Scenario::Holes, 5000), 1), Some(999));
        assert_eq!(largest(&cfg(Scenario::Holes, 999), 1), None);
        // pipe, 2 threads: N held + 4 per-op fds.
        assert_eq!(largest(&cfg(Scenario::Pipe, 5000), 2), Some(993));
        // cputime, 2 threads: N idle fds held + the setup scratch fd, none per op.
        assert_eq!(largest(&cfg(Scenario::Cputime, 5000), 2), Some(996));
    }

    #[test]
    fn message_names_the_limit() {
        let err = check_fit(&cfg(Scenario::Holes, 5000), 1, &[0, 1, 2], NOFILE).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("RLIMIT_NOFILE 1000"), "{msg}");
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        let mut c = cfg(Scenario::Opensock, 10);
        c.prealloc = Some(1001);
        assert!(check_fit(&c, 1, &[0, 1, 2], NOFILE).is_err());
        c.prealloc = Some(1000);
        assert!(check_fit(&c, 1, &[0, 1, 2], NOFILE).is_ok());
    }
}
