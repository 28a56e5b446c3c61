//! `fdprof workload`: the command line of the load generator. It parses into
//! [`Options`] and maps the generator's [`UsageError`] to exit code 2.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::ValueEnum;
use clap::builder::PossibleValue;

use fdprof_profiler::error::{EXIT_USAGE, fatal};
use fdprof_workload::{DEFAULT_DURATION, MAX_TASKS, Options, Plan, Scenario, UsageError, Variant};

const AFTER_HELP: &str = "\
An op is one iteration of the scenario's loop (see SCENARIO above); ops/s and --ops count them.

Deterministic runs (--ops K, one thread (cputime, udp-loopback: any number), not --processes, any scenario but \
accept) add to the \
--json output an `expected` object: the successful system calls, fds created and closed per \
system call, every alloc_fd allocation grouped by (syscall, fd, origin) with its scan distance, \
and the table size, exactly as the kernel sees them in the measured phase. The phase starts at \
SIGUSR1 with --wait-signal (after a ready line on stdout), else when the loop starts.

The soft RLIMIT_NOFILE is raised to the hard limit; a run that would not fit under it is \
refused before it starts.";

#[derive(clap::Args, Debug)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct WorkloadArgs {
    /// The load to generate
    #[arg(value_enum)]
    pub scenario: ScenarioArg,

    /// Tasks (threads sharing one fd table; with --processes, processes with one table each)
    #[arg(short = 't', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_TASKS)))]
    pub threads: u32,

    /// Fds held open: opensock's sockets in total (default 1000); holes and dup2-worst keep fds
    /// 0..N-1 open (default 1000); other scenarios: idle fds held besides the loop's (default 0)
    #[arg(short = 'n', long = "fds", value_name = "N")]
    pub fds: Option<u32>,

    /// How long to run (e.g. 5s, 500ms, 1m) [default: 5s]
    #[arg(short = 'd', long, value_parser = fdprof_profiler::duration::parse_run_length, conflicts_with = "ops")]
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
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_TASKS)))]
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

    /// holes: refill the hole's slot with dup2 from a fresh fd at next_fd instead of close then
    /// open (the reserved-slot remedy: no hole, no long scan)
    #[arg(long, conflicts_with = "close_range")]
    pub reserve: bool,

    /// close-loop: close the op's N fds with one close_range(2) instead of N close(2)s
    #[arg(long, conflicts_with = "io_uring_direct")]
    pub close_range: bool,

    /// opensock: each task's sockets are io_uring direct descriptors, created by
    /// IORING_OP_SOCKET into fixed slots of its own ring and closed through it, 16 ops a
    /// submission (Linux 5.19 or later): they never enter the fd table
    #[arg(long, conflicts_with = "reserve")]
    pub io_uring_direct: bool,

    /// churn: processes to start, one after another (each opens and closes --ops K sockets,
    /// default 1, and exits)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub spawn: u64,

    /// churn: run as this user (and group), as any user could
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,

    /// Re-read the table size after the run and fail unless it is the predicted one (opens
    /// /proc/self/status after the measured phase)
    #[arg(long, hide = true)]
    pub verify_table: bool,
}

/// A [`Scenario`] on the command line (its name, with its help from the generator), or
/// `churn`, the short processes of [`fdprof_workload::churn`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum ScenarioArg {
    Loop(Scenario),
    Churn,
}

const SCENARIO_ARGS: [ScenarioArg; Scenario::ALL.len() + 1] = {
    let mut out = [ScenarioArg::Churn; Scenario::ALL.len() + 1];
    let mut i = 0;
    while i < Scenario::ALL.len() {
        out[i] = ScenarioArg::Loop(Scenario::ALL[i]);
        i += 1;
    }
    out
};

impl ValueEnum for ScenarioArg {
    fn value_variants<'a>() -> &'a [Self] {
        &SCENARIO_ARGS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            ScenarioArg::Loop(s) => PossibleValue::new(s.name()).help(s.help()),
            ScenarioArg::Churn => PossibleValue::new("churn").help(
                "--spawn N short processes, forked one after another, each socket()+close() \
                 --ops K times (default 1), then exit",
            ),
        })
    }
}

impl WorkloadArgs {
    /// The generator's options; `--ops` wins over the default duration (clap refuses both).
    pub(crate) fn options(&self) -> Options {
        let plan = match (self.ops, self.duration) {
            (Some(k), _) => Plan::Ops(k),
            (None, d) => Plan::Timed(d.unwrap_or(DEFAULT_DURATION)),
        };
        Options {
            scenario: match self.scenario {
                ScenarioArg::Loop(s) => s,
                ScenarioArg::Churn => Scenario::SocketClose,
            },
            threads: self.threads,
            fds: self.fds,
            plan,
            processes: self.processes,
            pin: self.pin,
            json: self.json,
            sweep: self.sweep.clone(),
            wait_signal: self.wait_signal,
            progress: self.progress,
            path: self.path.clone(),
            hole: self.hole,
            prealloc: self.prealloc,
            verify_table: self.verify_table,
            variant: if self.reserve {
                Variant::Reserve
            } else if self.close_range {
                Variant::CloseRange
            } else if self.io_uring_direct {
                Variant::IoUringDirect
            } else {
                Variant::Plain
            },
        }
    }
}

/// Runs `fdprof workload`: a usage error exits 2 with its message, as before the split.
pub(crate) fn run(args: WorkloadArgs) -> Result<()> {
    if let ScenarioArg::Churn = args.scenario {
        let churn = fdprof_workload::churn::Churn {
            processes: args.spawn,
            sockets: args.ops.unwrap_or(1),
            uid: args.uid,
            wait_signal: args.wait_signal,
        };
        return fdprof_workload::churn::run(&churn, args.json);
    }
    fdprof_workload::run(&args.options()).map_err(|err| {
        if err.downcast_ref::<UsageError>().is_some() {
            // `{:#}` keeps any context the error gathered on its way up.
            fatal(EXIT_USAGE, format!("{err:#}"))
        } else {
            err
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: WorkloadArgs,
    }

    fn parse(args: &[&str]) -> Options {
        Cli::try_parse_from(std::iter::once("workload").chain(args.iter().copied()))
            .unwrap()
            .args
            .options()
    }

    #[test]
    fn every_scenario_parses_by_its_name() {
        for s in Scenario::ALL {
            assert_eq!(parse(&[s.name()]).scenario, s);
        }
        assert_eq!(SCENARIO_ARGS.len(), Scenario::ALL.len() + 1);
    }

    #[test]
    fn plan_from_ops_or_duration() {
        assert!(matches!(parse(&["pipe"]).plan, Plan::Timed(d) if d == DEFAULT_DURATION));
        assert!(matches!(parse(&["pipe", "--ops", "7"]).plan, Plan::Ops(7)));
        assert!(matches!(
            parse(&["pipe", "-d", "200ms"]).plan,
            Plan::Timed(d) if d == Duration::from_millis(200)
        ));
    }

    #[test]
    fn usage_errors_exit_2_with_their_message() {
        let args = Cli::try_parse_from(["workload", "holes", "--hole", "2"])
            .unwrap()
            .args;
        let err = run(args).unwrap_err();
        let fatal = err
            .downcast_ref::<fdprof_profiler::error::Fatal>()
            .expect("exit code");
        assert_eq!(fatal.code, EXIT_USAGE);
        assert_eq!(fatal.to_string(), "--hole 2 is stdio: use 3 or more");
        let args = Cli::try_parse_from(["workload", "opensock", "--reserve"])
            .unwrap()
            .args;
        let err = run(args).unwrap_err();
        let fatal = err.downcast_ref::<fdprof_profiler::error::Fatal>().unwrap();
        assert_eq!(
            fatal.to_string(),
            "--reserve is a variant of holes, not of opensock"
        );
    }

    #[test]
    fn remedies_parse_into_variants() {
        assert_eq!(parse(&["holes", "--reserve"]).variant, Variant::Reserve);
        assert_eq!(
            parse(&["close-loop", "--close-range"]).variant,
            Variant::CloseRange
        );
        assert_eq!(parse(&["close-loop"]).variant, Variant::Plain);
    }
}
