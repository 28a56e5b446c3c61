//! The command line: one file per subcommand, each with its arguments (clap lives only here)
//! and the sequence of library calls it makes; [`main`] parses and dispatches.

pub(crate) mod args;
pub(crate) mod command_output;
pub(crate) mod daemon;
pub(crate) mod doctor;
pub(crate) mod export;
pub(crate) mod flamegraph;
pub(crate) mod generate;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod session;
pub(crate) mod top;
pub(crate) mod workload;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use fdprof_profiler::error::Fatal;

#[derive(Parser)]
#[command(
    name = "fdprof",
    version = fdprof_profiler::VERSION,
    about = "Profile the Linux fd table: alloc_fd, close and files->file_lock"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what this kernel offers and which probes `record` will use
    Doctor(self::doctor::DoctorArgs),
    /// Run a built-in fd-table load generator (the 2015 threads' benchmarks)
    Workload(self::workload::WorkloadArgs),
    /// Record fd-table activity and file_lock contention of a process, thread, command or system
    Record(self::record::RecordArgs),
    /// Watch fd-table activity and file_lock contention live, one interval at a time
    Top(self::top::TopArgs),
    /// Print a recording's contention breakdown, top stacks, scan and syscall figures
    Report(self::report::ReportArgs),
    /// Draw a recording's waiting stacks as a flamegraph weighted by wait time
    Flamegraph(self::flamegraph::FlamegraphArgs),
    /// Write a recording's lock waits or on-CPU samples as pprof, speedscope or folded stacks
    Export(self::export::ExportArgs),
    /// Replay fd-table operations through the kernel's allocator and the variants proposed for
    /// it, and compare their cost (bitmap words, cache lines)
    Replay(self::replay::ReplayArgs),
    /// Serve the figures of processes as they come and go: Prometheus metrics, reports,
    /// flamegraphs and a live stream over HTTP
    Daemon(Box<self::daemon::DaemonArgs>),
    /// Write the man pages or a shell's completions (for packaging)
    #[command(hide = true)]
    Generate(self::generate::GenerateArgs),
}

/// The whole command line, for the man pages and completions generated from it.
pub(crate) fn cli() -> clap::Command {
    Cli::command()
}

/// Runs the program; every error becomes one line on stderr and a non-zero exit code.
pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor(args) => self::doctor::run(&args),
        Command::Workload(args) => self::workload::run(args),
        Command::Record(args) => self::record::run(args),
        Command::Top(args) => self::top::run(args),
        Command::Report(args) => self::report::run(&args),
        Command::Flamegraph(args) => self::flamegraph::run(&args),
        Command::Export(args) => self::export::run(&args),
        Command::Daemon(args) => self::daemon::run(*args),
        Command::Replay(args) => self::replay::run(&args),
        Command::Generate(args) => self::generate::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Errors quote paths, names and file contents: escape them like any name.
            eprintln!(
                "fdprof: error: {}",
                fdprof_recording::escape::name(&format!("{err:#}"))
            );
            ExitCode::from(exit_code(&err))
        }
    }
}

/// The exit code of an error: usage errors and the typed errors callers decide on, each its
/// own; 1 for anything else (a probe the kernel refused, an I/O error).
fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(f) = err.downcast_ref::<Fatal>() {
        return f.code;
    }
    if err.is::<fdprof_profiler::collect::target::TargetError>()
        || err.is::<fdprof_profiler::privileges::MissingPrivileges>()
    {
        return fdprof_profiler::error::EXIT_USAGE;
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_profiler::collect::target::{TargetError, TaskKind};

    #[test]
    fn each_typed_error_keeps_its_exit_code_through_context() {
        use anyhow::Context;
        let gone: anyhow::Result<()> = Err(TargetError::Gone {
            kind: TaskKind::Process,
            id: 7,
        }
        .into());
        let gone = gone.context("cannot profile").unwrap_err();
        assert_eq!(exit_code(&gone), 2);
        assert_eq!(format!("{gone:#}"), "cannot profile: no process with id 7");
        // MissingPrivileges gets 2 too, but only a process lacking them gets one from the
        // library: tests/it/record.rs's `record_without_root_fails_clearly` checks it.
        // Any other error, a probe the kernel refused among them: 1.
        let refused = anyhow::anyhow!("kprobe alloc_fd: ENOENT");
        assert_eq!(exit_code(&refused), 1);
        assert_eq!(
            exit_code(&fdprof_profiler::error::fatal(127, "x: not found")),
            127
        );
    }
}
