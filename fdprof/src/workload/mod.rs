//! `fdprof workload`: built-in fd-table load generators (the 2015 threads' benchmarks) that know
//! exactly what they did, so a profile of them can be checked against ground truth.
//!
//! A run: raise RLIMIT_NOFILE, check the scenario fits, set up the table (pre-fill, prealloc,
//! listener), snapshot it and reset `files->next_fd`, start the tasks parked on a barrier,
//! optionally announce readiness and wait for SIGUSR1, then the measured phase: only the
//! scenario's system calls. The process then exits with its fds open, so the measured phase
//! holds exactly the counted ops.

mod accept;
mod control;

pub mod fd_model;
pub mod ground_truth;
mod limits;
mod outcome;
mod output;
mod phase;
mod processes;
pub mod scenarios;
mod setup;
mod sweep;
mod sys;
mod table;
mod task;
mod threads;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::error::{EXIT_USAGE, fatal};
use control::{Control, block_sigusr1, progress_wanted};
use phase::Plan;
pub use scenarios::Scenario;
use setup::Config;

const DEFAULT_DURATION: Duration = Duration::from_secs(5);

const AFTER_HELP: &str = "\
An op is one iteration of the scenario's loop (see SCENARIO above); ops/s and --ops count them.

Deterministic runs (--ops K, one thread, not --processes, any scenario but accept) add to the \
--json output an `expected` object: the successful system calls, fds created and closed per \
system call, every alloc_fd allocation grouped by (syscall, fd, origin) with its scan distance, \
and the table size, exactly as the kernel sees them in the measured phase. The phase starts at \
SIGUSR1 with --wait-signal (after a ready line on stdout), else when the loop starts.

The soft RLIMIT_NOFILE is raised to the hard limit; a run that would not fit under it is \
refused before it starts.";

#[derive(clap::Args, Debug)]
#[command(after_long_help = AFTER_HELP)]
pub struct WorkloadArgs {
    /// The load to generate
    #[arg(value_enum)]
    pub scenario: Scenario,

    /// Tasks (threads sharing one fd table; with --processes, processes with one table each)
    #[arg(short = 't', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: u32,

    /// Fds held open: opensock's sockets in total (default 1000); holes and dup2-worst keep fds
    /// 0..N-1 open (default 1000); other scenarios: idle fds held besides the loop's (default 0)
    #[arg(short = 'n', long = "fds", value_name = "N")]
    pub fds: Option<u32>,

    /// How long to run (e.g. 5s, 500ms, 1m) [default: 5s]
    #[arg(short = 'd', long, value_parser = crate::duration::parse_run_length, conflicts_with = "ops")]
    pub duration: Option<Duration>,

    /// Exactly K ops per task instead of a duration (deterministic runs)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: Option<u64>,

    /// One process per task, each with its own fd table (will-it-scale's _processes variant)
    #[arg(long)]
    pub processes: bool,

    /// Pin task i to CPU i % (CPUs this process may use)
    #[arg(long)]
    pub pin: bool,

    /// Print one JSON object at the end instead of the summary
    #[arg(long)]
    pub json: bool,

    /// Run at each task count (e.g. 1,2,4) and print tasks, ops/s, ops/s per task and % of
    /// linear scaling (CSV; JSON with --json)
    #[arg(long, value_delimiter = ',', value_name = "TASKS", conflicts_with_all = ["threads", "wait_signal"],
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub sweep: Option<Vec<u32>>,

    /// After setup print {"event":"ready","pid":PID} on stdout and wait for SIGUSR1 before the
    /// measured phase (attach a profiler with -p PID meanwhile)
    #[arg(long)]
    pub wait_signal: bool,

    /// A progress line on stderr every second (default when stderr is a terminal)
    #[arg(long)]
    pub progress: bool,

    /// The file open-close and holes open (O_RDONLY)
    #[arg(long, default_value = "/dev/null")]
    pub path: PathBuf,

    /// The fd K that holes and dup2-worst close and refill (>= 3: 0-2 are stdio)
    #[arg(long, value_name = "K", default_value_t = 3)]
    pub hole: u32,

    /// Pre-expand the fd table to SIZE slots first (dup2 onto fd SIZE-1, then close it)
    #[arg(long, value_name = "SIZE", value_parser = clap::value_parser!(u32).range(1..))]
    pub prealloc: Option<u32>,

    /// Re-read the table size after the run and fail unless it is the predicted one (opens
    /// /proc/self/status after the measured phase)
    #[arg(long, hide = true)]
    pub verify_table: bool,
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    fatal(EXIT_USAGE, message)
}

fn config(args: &WorkloadArgs, max_tasks: u32) -> Result<Config> {
    let scenario = args.scenario;
    let name = scenario.name();
    let fds = args.fds.unwrap_or(scenario.default_fds());
    if !args.processes && max_tasks > 1 && !scenario.threads_share_table() {
        return Err(usage(format!(
            "{name} owns fixed fd numbers and cannot share a table between threads: use -t 1 or --processes"
        )));
    }
    if args.processes && scenario == Scenario::Accept {
        return Err(usage("accept runs threads only: drop --processes"));
    }
    if scenario.fills_below_n() {
        if args.hole < 3 {
            return Err(usage(format!(
                "--hole {} is stdio: use 3 or more",
                args.hole
            )));
        }
        if fds <= args.hole {
            return Err(usage(format!(
                "{name} keeps fds 0..N-1 open around hole {}: -n must be more than {}",
                args.hole, args.hole
            )));
        }
    }
    if scenario == Scenario::Opensock && fds < max_tasks {
        return Err(usage(format!(
            "opensock needs at least one socket per task: -n {fds} is less than {max_tasks} tasks"
        )));
    }
    let path = CString::new(args.path.as_os_str().as_bytes())
        .map_err(|_| usage("--path contains a NUL byte"))?;
    if args.verify_table && args.processes {
        return Err(usage("--verify-table works in threads mode only"));
    }
    Ok(Config {
        scenario,
        fds,
        hole: args.hole,
        path,
        prealloc: args.prealloc,
        processes: args.processes,
        pin: args.pin,
    })
}

/// Runs `fdprof workload`.
pub fn run(args: WorkloadArgs) -> Result<()> {
    let counts = args.sweep.clone();
    let max_tasks = counts
        .as_ref()
        .and_then(|c| c.iter().copied().max())
        .unwrap_or(args.threads);
    let cfg = config(&args, max_tasks)?;
    let plan = match (args.ops, args.duration) {
        (Some(k), _) => Plan::Ops(k),
        (None, d) => Plan::Timed(d.unwrap_or(DEFAULT_DURATION)),
    };
    let ctl = Control {
        plan,
        wait_signal: args.wait_signal,
        progress: progress_wanted(args.progress),
    };

    let nofile = limits::raise_nofile()?;
    if args.wait_signal {
        block_sigusr1()?;
    }
    let open = table::list_open_fds()?;
    limits::check_fit(&cfg, max_tasks, &open, nofile)?;

    if let Some(counts) = counts {
        let report = sweep::run(&cfg, &counts, &ctl)?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.csv());
        }
        return Ok(());
    }

    let outcome = if cfg.processes {
        processes::run(&cfg, args.threads, &ctl)?
    } else {
        threads::run(&cfg, args.threads, &ctl, true)?
    };
    if args.verify_table {
        let measured = table::read_fd_size()?;
        if measured != outcome.max_fds {
            anyhow::bail!(
                "table size check failed: /proc/self/status says FDSize {measured}, the prediction was {}",
                outcome.max_fds
            );
        }
    }
    let report = output::Report::new(&cfg, outcome);
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.human());
    }
    Ok(())
}
