//! `cargo xtask bench overhead`: what profiling costs the profiled program. The built-in
//! opensock workload (2 threads × 4000 fds) runs bare, under `fdprof record`, under
//! `perf lock record` and under a bpftrace contention-stacks one-liner, each run between two bare
//! runs; medians of ops/s and of the ratios to the mean of the bare runs around are printed, with
//! the recording size per second of profile. `fdprof record --latency` also times every fd
//! syscall: its row shows what that costs; `fdprof record --trace` sends every fd-table
//! operation through the trace ring buffer (its size per second is the trace's). A floor row runs the workload bare under empty
//! programs on the same tracepoints: the most any tracepoint-mode profiler could reach. Then
//! the cost of one syscall, bare, under the floor and under `fdprof record`. Another floor row
//! measures the waits with the least any profiler can do (`lock_reference.rs`): the mean
//! `file_lock` wait each variant reports is compared with it, beside the lock probes' own time
//! per wait. A second reference also makes, after begin's clock, the three helper calls any
//! profiler that keys a wait by task and call site must make there (who is waiting, its task,
//! a read of its saved user registers): the floor of a per-site mean wait.
//! `fdprof top` (1 s intervals) runs the same probes as `record`: its ratio should match.
//! Options: `--rounds N` (default 5), `--only NAME,NAME` (the baseline and these variants),
//! `--only syscost` (the cost of one syscall alone).

mod measure;
mod rounds;
mod tables;
mod variants;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::harness::args::rounds_arg;
use super::harness::release_and_dir;
use super::syscost;
use variants::{TRACE_OUTPUT, selected, variants};

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = rounds_arg(args, 5)?;
    ensure_tools()?;
    let (fdprof, out) = release_and_dir("overhead")?;
    let before = before_arg(args)?;
    if only_syscost(args) {
        return syscost::run(&fdprof, before.as_deref(), &out, rounds);
    }
    let variants = selected(variants(), args)?;
    let mut columns = rounds::ratio_rounds(&variants, &fdprof, &out, rounds)?;
    tables::ratio_table(&variants, rounds, &mut columns);
    rounds::probe_rounds(&variants, &fdprof, &out, rounds, &mut columns)?;
    tables::wait_table(&variants, rounds, &mut columns);
    if variants.iter().any(|v| v.output == Some(TRACE_OUTPUT)) {
        tables::trace_size(&out.join(TRACE_OUTPUT))?;
    }
    if args.iter().any(|a| a == "--only") {
        return Ok(());
    }
    syscost::run(&fdprof, before.as_deref(), &out, rounds)
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn ensure_tools() -> Result<()> {
    let missing: Vec<&str> = [("perf", "linux-perf"), ("bpftrace", "bpftrace")]
        .iter()
        .filter(|(tool, _)| !have(tool))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> installing reference profilers: {}", missing.join(" "));
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(&missing);
    crate::bootstrap::apt_get(&args)
}

/// `--before PATH`: another build of fdprof (an executable file) for the syscost statistics'
/// `record -a` row, so a change is measured against what it changed in the same run.
fn before_arg(args: &[String]) -> Result<Option<PathBuf>> {
    let Some(i) = args.iter().position(|a| a == "--before") else {
        return Ok(None);
    };
    let path = PathBuf::from(args.get(i + 1).context("--before takes a path to fdprof")?);
    if !path.is_file() {
        bail!("--before {}: not a file", path.display());
    }
    Ok(Some(path))
}

/// `--only syscost`: the syscall-cost bench alone.
fn only_syscost(args: &[String]) -> bool {
    args.iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .is_some_and(|names| names == "syscost")
}
