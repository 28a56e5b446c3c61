//! The fd-table load generators behind `fdprof workload` (the 2015 threads' benchmarks): they
//! know exactly what they did, so a profile of them can be checked against ground truth.
//!
//! A run: raise RLIMIT_NOFILE, check the scenario fits, set up the table (pre-fill, prealloc,
//! listener), snapshot it and reset `files->next_fd`, start the tasks parked on a barrier,
//! optionally announce readiness and wait for SIGUSR1, then the measured phase: only the
//! scenario's system calls. The process then exits with its fds open, so the measured phase
//! holds exactly the counted ops.
//!
//! The API is [`Options`] and [`run`]; the command line lives in `fdprof` (`commands::workload`),
//! which maps a [`UsageError`] to exit code 2. [`fd_model`] is public for other crates that
//! replay fd allocations.
//!
//! Modules, each after every module it uses (so they form no circle; `lib.rs` uses any of them;
//! the test `module_graph_is_documented_and_acyclic` checks this list against the sources):
//!
//! - `error`: —
//! - `sys`: —
//! - `fd_model`: —
//! - `phase`: —
//! - `ground_truth`: fd_model, sys
//! - `table`: fd_model, sys
//! - `scenarios`: ground_truth, sys
//! - `accept`: ground_truth, phase, sys
//! - `cputime`: ground_truth, scenarios
//! - `udp`: ground_truth, scenarios, sys
//! - `uring`: ground_truth, scenarios
//! - `task`: accept, cputime, ground_truth, phase, scenarios, udp, uring
//! - `setup`: accept, cputime, error, scenarios, sys, task, udp, uring
//! - `options`: error, phase, scenarios, setup
//! - `limits`: error, scenarios, setup, table
//! - `outcome`: ground_truth
//! - `output`: ground_truth, outcome, setup
//! - `control`: output, phase
//! - `churn`: control
//! - `threads`: control, fd_model, ground_truth, outcome, phase, setup, table, task
//! - `processes`: control, fd_model, ground_truth, outcome, phase, setup, table, task
//! - `sweep`: control, output, processes, setup, threads
#![warn(unreachable_pub)]

mod accept;
pub mod churn;
mod control;
mod cputime;
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
mod udp;
mod uring;

use anyhow::Result;

use control::{Control, block_sigusr1, progress_wanted};
pub use error::UsageError;
pub use options::{DEFAULT_DURATION, MAX_TASKS, Options};
pub use phase::Plan;
pub use scenarios::{Scenario, Variant};

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The sibling modules `code` names through `crate::` (comments skipped).
    fn uses(code: &str) -> BTreeSet<String> {
        let mut used = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (_, rest) in line
                .match_indices("crate::")
                .map(|(i, m)| line.split_at(i + m.len()))
            {
                // `crate::{a, b::C}` names a and b; `crate::a::...` names a.
                let items: Vec<&str> = match rest.strip_prefix('{') {
                    Some(list) => list.split('}').next().unwrap_or("").split(',').collect(),
                    None => vec![rest],
                };
                for item in items {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        used.insert(name);
                    }
                }
            }
        }
        used
    }

    #[test]
    fn module_graph_is_documented_and_acyclic() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut listed: Vec<String> = Vec::new();
        for line in include_str!("lib.rs").lines() {
            let Some(entry) = line.strip_prefix("//! - `") else {
                continue;
            };
            let (name, deps) = entry.split_once("`: ").expect("- `module`: uses");
            let documented: BTreeSet<String> = match deps {
                "—" => BTreeSet::new(),
                _ => deps.split(", ").map(String::from).collect(),
            };
            for dep in &documented {
                assert!(
                    listed.contains(dep),
                    "{name} uses {dep}, which is not listed above it"
                );
            }
            let source = std::fs::read_to_string(format!("{dir}/{name}.rs")).unwrap();
            let code = source.split("#[cfg(test)]").next().unwrap();
            assert_eq!(
                uses(code),
                documented,
                "module {name}: uses in the code vs the doc"
            );
            listed.push(name.to_string());
        }
        let files: BTreeSet<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|f| f.strip_suffix(".rs").map(String::from))
            .filter(|m| m != "lib")
            .collect();
        assert_eq!(
            files,
            listed.into_iter().collect(),
            "every module is listed"
        );
    }

    #[test]
    fn uses_reads_paths_and_lists() {
        let code = "use crate::a::X;\nuse crate::{b, c::Y};\n// crate::d\nlet v = crate::e::f();";
        let names: Vec<String> = uses(code).into_iter().collect();
        assert_eq!(names, ["a", "b", "c", "e"]);
    }
}
