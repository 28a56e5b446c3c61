//! What a run is asked to do ([`Options`]) and its check into a [`Config`]: every refusal here
//! is a [`UsageError`](crate::error::UsageError), found before anything is set up.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::error::usage;
use crate::phase::Plan;
use crate::scenarios::{Scenario, Variant};
use crate::setup::Config;

/// The most tasks a run may have (threads or processes).
pub const MAX_TASKS: u32 = 4096;

/// The measured phase's length when neither a duration nor an op count is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);

/// Everything `fdprof workload` takes; [`Default`] gives the command line's defaults.
#[derive(Clone, Debug)]
pub struct Options {
    pub scenario: Scenario,
    /// Tasks: threads sharing one fd table, or with `processes` one process (and table) each.
    /// Ignored by a `sweep`.
    pub threads: u32,
    /// Fds held open (`-n`); `None`: the scenario's default ([`Scenario::default_fds`]).
    pub fds: Option<u32>,
    /// How long the measured phase lasts.
    pub plan: Plan,
    /// One process per task, each with its own fd table.
    pub processes: bool,
    /// Pin task i to CPU i % (CPUs this process may use).
    pub pin: bool,
    /// Print one JSON object instead of the summary (a sweep: JSON instead of CSV).
    pub json: bool,
    /// Run at each of these task counts instead of once with `threads`.
    pub sweep: Option<Vec<u32>>,
    /// Print a ready line after setup and wait for SIGUSR1 before the measured phase.
    pub wait_signal: bool,
    /// A progress line on stderr every second even when stderr is not a terminal.
    pub progress: bool,
    /// The file open-close and holes open.
    pub path: PathBuf,
    /// The fd holes and dup2-worst close and refill.
    pub hole: u32,
    /// Pre-expand the fd table to this many slots first.
    pub prealloc: Option<u32>,
    /// Re-read the table size after the run and fail unless it is the predicted one.
    pub verify_table: bool,
    /// A remedy applied to the scenario's load (`--reserve`, `--close-range`).
    pub variant: Variant,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scenario: Scenario::Opensock,
            threads: 1,
            fds: None,
            plan: Plan::Timed(DEFAULT_DURATION),
            processes: false,
            pin: false,
            json: false,
            sweep: None,
            wait_signal: false,
            progress: false,
            path: PathBuf::from("/dev/null"),
            hole: 3,
            prealloc: None,
            verify_table: false,
            variant: Variant::Plain,
        }
    }
}

impl Options {
    /// The task count the table must fit: a sweep's largest, else `threads`.
    pub(crate) fn max_tasks(&self) -> u32 {
        self.sweep
            .as_ref()
            .and_then(|c| c.iter().copied().max())
            .unwrap_or(self.threads)
    }

    /// Checks the options, fixed ranges first (the command line's parser already enforces
    /// those), then what depends on the scenario.
    pub(crate) fn config(&self) -> Result<Config> {
        self.check_ranges()?;
        let scenario = self.scenario;
        let fds = self.fds.unwrap_or(scenario.default_fds());
        self.check_mode()?;
        self.check_scenario_args(fds)?;
        let path = CString::new(self.path.as_os_str().as_bytes())
            .map_err(|_| usage("--path contains a NUL byte"))?;
        if self.verify_table && self.processes {
            return Err(usage("--verify-table works in threads mode only"));
        }
        Ok(Config {
            scenario,
            fds,
            hole: self.hole,
            path,
            prealloc: self.prealloc,
            processes: self.processes,
            pin: self.pin,
            variant: self.variant,
        })
    }

    /// The ranges the command line's parser enforces: task counts, `--ops`, `--prealloc`.
    fn check_ranges(&self) -> Result<()> {
        let in_range = |n: u32| (1..=MAX_TASKS).contains(&n);
        if !in_range(self.threads) {
            return Err(usage(format!(
                "-t {} is not in 1..={MAX_TASKS}",
                self.threads
            )));
        }
        if let Some(counts) = &self.sweep {
            if let Some(bad) = counts.iter().find(|&&n| !in_range(n)) {
                return Err(usage(format!("--sweep {bad} is not in 1..={MAX_TASKS}")));
            }
            if counts.is_empty() {
                return Err(usage("--sweep needs at least one task count"));
            }
            if self.wait_signal {
                return Err(usage("--sweep cannot be used with --wait-signal"));
            }
        }
        if matches!(self.plan, Plan::Ops(0)) {
            return Err(usage("--ops 0: a run needs at least one op"));
        }
        if self.prealloc == Some(0) {
            return Err(usage("--prealloc 0: a table has at least one slot"));
        }
        Ok(())
    }

    /// Whether the scenario runs as the tasks are asked to: threads sharing a table, or
    /// processes.
    fn check_mode(&self) -> Result<()> {
        let scenario = self.scenario;
        let name = scenario.name();
        if !self.processes && self.max_tasks() > 1 && !scenario.threads_share_table() {
            return Err(usage(format!(
                "{name} owns fixed fd numbers and cannot share a table between threads: use -t 1 or --processes"
            )));
        }
        if self.processes && scenario == Scenario::Accept {
            return Err(usage("accept runs threads only: drop --processes"));
        }
        if self.processes && scenario == Scenario::UdpLoopback {
            return Err(usage(
                "udp-loopback's threads share one receiving socket: drop --processes",
            ));
        }
        if self.processes && scenario.reads_peer_threads() {
            return Err(usage(format!(
                "{name} reads the clocks of threads of its own process: drop --processes"
            )));
        }
        Ok(())
    }

    /// Whether `--hole`, `-n` (`fds`) and the variant fit the scenario.
    fn check_scenario_args(&self, fds: u32) -> Result<()> {
        let scenario = self.scenario;
        let name = scenario.name();
        if scenario.fills_below_n() {
            if self.hole < 3 {
                return Err(usage(format!(
                    "--hole {} is stdio: use 3 or more",
                    self.hole
                )));
            }
            if fds <= self.hole {
                return Err(usage(format!(
                    "{name} keeps fds 0..N-1 open around hole {}: -n must be more than {}",
                    self.hole, self.hole
                )));
            }
        }
        if let (Some(flag), Some(wanted)) = (self.variant.flag(), self.variant.scenario())
            && wanted != scenario
        {
            return Err(usage(format!(
                "{flag} is a variant of {}, not of {name}",
                wanted.name()
            )));
        }
        if scenario == Scenario::CloseLoop && fds == 0 {
            return Err(usage(
                "close-loop closes -n fds an op: -n must be at least 1",
            ));
        }
        let max_tasks = self.max_tasks();
        if scenario == Scenario::Opensock && fds < max_tasks {
            return Err(usage(format!(
                "opensock needs at least one socket per task: -n {fds} is less than {max_tasks} tasks"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::UsageError;

    /// The message of the usage error `opts` is refused with.
    fn refusal(opts: &Options) -> String {
        let err = opts.config().expect_err("refused");
        err.downcast_ref::<UsageError>()
            .expect("a usage error")
            .to_string()
    }

    #[test]
    fn defaults_are_the_command_line_defaults() {
        let cfg = Options::default().config().unwrap();
        assert_eq!(cfg.scenario, Scenario::Opensock);
        assert_eq!((cfg.fds, cfg.hole), (1000, 3));
        assert_eq!(cfg.path.as_bytes(), b"/dev/null");
        assert!(matches!(Options::default().plan, Plan::Timed(d) if d == DEFAULT_DURATION));
    }

    #[test]
    fn ranges_the_parser_enforces_are_checked_here_too() {
        let with = |f: fn(&mut Options)| {
            let mut o = Options::default();
            f(&mut o);
            refusal(&o)
        };
        assert_eq!(with(|o| o.threads = 0), "-t 0 is not in 1..=4096");
        assert_eq!(with(|o| o.threads = 4097), "-t 4097 is not in 1..=4096");
        assert_eq!(
            with(|o| o.sweep = Some(vec![1, 0])),
            "--sweep 0 is not in 1..=4096"
        );
        assert!(with(|o| o.sweep = Some(vec![])).contains("at least one"));
        assert!(with(|o| o.plan = Plan::Ops(0)).starts_with("--ops 0"));
        assert!(with(|o| o.prealloc = Some(0)).starts_with("--prealloc 0"));
        assert!(
            with(|o| {
                o.sweep = Some(vec![1]);
                o.wait_signal = true;
            })
            .contains("--wait-signal")
        );
    }

    #[test]
    fn scenario_rules() {
        let opts = |scenario, threads, fds| Options {
            scenario,
            threads,
            fds,
            ..Options::default()
        };
        assert!(refusal(&opts(Scenario::Holes, 2, None)).contains("use -t 1 or --processes"));
        assert_eq!(
            refusal(&opts(Scenario::Opensock, 4, Some(3))),
            "opensock needs at least one socket per task: -n 3 is less than 4 tasks"
        );
        // A sweep is checked at its largest task count.
        let mut sweep = opts(Scenario::Opensock, 1, Some(3));
        sweep.sweep = Some(vec![1, 4, 2]);
        assert!(refusal(&sweep).contains("less than 4 tasks"));
        let mut nul = opts(Scenario::OpenClose, 1, None);
        nul.path = PathBuf::from("a\0b");
        assert_eq!(refusal(&nul), "--path contains a NUL byte");
        assert!(opts(Scenario::Pipe, 8, None).config().is_ok());
        let mut reserve = opts(Scenario::Dup2Worst, 1, None);
        reserve.variant = Variant::Reserve;
        assert_eq!(
            refusal(&reserve),
            "--reserve is a variant of holes, not of dup2-worst"
        );
        reserve.scenario = Scenario::Holes;
        assert!(reserve.config().is_ok());
        assert!(refusal(&opts(Scenario::CloseLoop, 2, None)).contains("use -t 1"));
        assert!(refusal(&opts(Scenario::CloseLoop, 1, Some(0))).contains("at least 1"));
        let mut cputime = opts(Scenario::Cputime, 2, None);
        assert_eq!(cputime.config().unwrap().fds, 0);
        cputime.processes = true;
        assert_eq!(
            refusal(&cputime),
            "cputime reads the clocks of threads of its own process: drop --processes"
        );
    }
}
