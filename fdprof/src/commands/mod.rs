//! The command line: one file per subcommand, each with its arguments (clap lives only here)
//! and the sequence of library calls it makes; [`main`] parses and dispatches.

pub mod args;
pub mod command_output;
pub mod daemon;
pub mod doctor;
pub mod duration;
pub mod export;
pub mod flamegraph;
pub mod generate;
pub mod playback;
pub mod record;
pub mod replay;
pub mod report;
pub mod session;
pub mod top;
pub mod trace;
pub mod workload;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::error::Fatal;

#[derive(Parser)]
#[command(
    name = "fdprof",
    version = crate::VERSION,
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
pub fn cli() -> clap::Command {
    Cli::command()
}

/// Runs the program; every error becomes one line on stderr and a non-zero exit code.
pub fn main() -> ExitCode {
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
                crate::escape::name(&format!("{err:#}"))
            );
            let code = err.downcast_ref::<Fatal>().map_or(1, |f| f.code);
            ExitCode::from(code)
        }
    }
}
