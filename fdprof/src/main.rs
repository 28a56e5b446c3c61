//! The `fdprof` binary: the command line, one file per subcommand (`commands/`), over the
//! `fdprof_profiler`, `fdprof_daemon` and `fdprof_top` crates.

#![warn(unreachable_pub)]

mod commands;

fn main() -> std::process::ExitCode {
    commands::main()
}
