//! The fd-table load generators behind `fdprof workload` (the 2015 threads' benchmarks): they
//! know exactly what they did, so a profile of them can be checked against ground truth.
//!
//! A run: raise RLIMIT_NOFILE, check the scenario fits, set up the table (pre-fill, prealloc,
//! listener), snapshot it and reset `files->next_fd`, start the tasks parked on a barrier,
//! optionally announce readiness and wait for SIGUSR1, then the measured phase: only the
//! scenario's system calls. The process then exits with its fds open, so the measured phase
//! holds exactly the counted ops.

mod accept;
mod control;
mod error;
pub mod fd_model;
mod ground_truth;
mod limits;
mod options;
mod outcome;
mod output;
mod phase;
mod processes;
mod scenarios;
mod setup;
mod sweep;
mod sys;
mod table;
mod task;
mod threads;

use anyhow::Result;

use control::{Control, block_sigusr1, progress_wanted};
pub use error::UsageError;
pub use options::{DEFAULT_DURATION, MAX_TASKS, Options};
pub use phase::Plan;
pub use scenarios::Scenario;

/// Runs the generator as `opts` says and prints its report on stdout.
///
/// Errors: a [`UsageError`] for options the run cannot work with (found before anything is set
/// up), other errors for failures of the run itself.
pub fn run(opts: &Options) -> Result<()> {
    let cfg = opts.config()?;
    let max_tasks = opts.max_tasks();
    let ctl = Control {
        plan: opts.plan,
        wait_signal: opts.wait_signal,
        progress: progress_wanted(opts.progress),
    };

    let nofile = limits::raise_nofile()?;
    if opts.wait_signal {
        block_sigusr1()?;
    }
    let open = table::list_open_fds()?;
    limits::check_fit(&cfg, max_tasks, &open, nofile)?;

    if let Some(counts) = &opts.sweep {
        let report = sweep::run(&cfg, counts, &ctl)?;
        if opts.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.csv());
        }
        return Ok(());
    }

    let outcome = if cfg.processes {
        processes::run(&cfg, opts.threads, &ctl)?
    } else {
        threads::run(&cfg, opts.threads, &ctl, true)?
    };
    if opts.verify_table {
        let measured = table::read_fd_size()?;
        if measured != outcome.max_fds {
            anyhow::bail!(
                "table size check failed: /proc/self/status says FDSize {measured}, the prediction was {}",
                outcome.max_fds
            );
        }
    }
    let report = output::Report::new(&cfg, outcome);
    if opts.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.human());
    }
    Ok(())
}
