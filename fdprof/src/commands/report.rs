//! `fdprof report`: a recording's figures as text for people or JSON for machines.

use std::path::PathBuf;

use std::io::Write;

use anyhow::Result;
use fdprof_recording::Recording;

use fdprof_profiler::analysis::{self, ReportOptions, SortKey};
use fdprof_profiler::model;
use fdprof_profiler::render;

#[derive(clap::Args, Debug)]
pub(crate) struct ReportArgs {
    /// The recording to read
    #[arg(default_value = "fdprof.data")]
    pub input: PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// How many top stacks to show (0 = all)
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Order of the top stacks
    #[arg(long, value_enum, default_value = "wait")]
    pub sort: SortArg,
    /// Only the on-CPU section (record --cpu), with the header and the drops
    #[arg(long, conflicts_with = "json")]
    pub cpu: bool,
    /// Show function offsets (`alloc_fd+0x4a`) and keep stacks that differ only in them apart
    #[arg(long)]
    pub offsets: bool,
    /// Only these processes of a system-wide recording (record -a): their waits, stacks and
    /// fd syscalls (repeatable)
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Only the processes of this name (comm) of a system-wide recording (repeatable)
    #[arg(long, value_name = "NAME")]
    pub comm: Vec<String>,
    /// Only the processes in this cgroup (or below it) of a system-wide recording, by its path
    /// as `/proc/PID/cgroup` shows it (repeatable)
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// Only the processes of this container of a system-wide recording: its id, or a prefix
    /// of at least 12 characters (repeatable)
    #[arg(long, value_name = "ID", value_parser = model::process::container_prefix)]
    pub container: Vec<String>,
}

pub(crate) fn run(args: &ReportArgs) -> Result<()> {
    let mut rec = Recording::read(&args.input)?;
    if !args.pid.is_empty()
        || !args.comm.is_empty()
        || !args.cgroup.is_empty()
        || !args.container.is_empty()
    {
        rec = only_processes(rec, args)?;
    }
    if args.cpu && rec.cpu.is_none() {
        anyhow::bail!(
            "{} has no on-CPU samples: record with `fdprof record --cpu` to report them",
            fdprof_recording::escape::name(&args.input.display().to_string())
        );
    }
    let opts = ReportOptions {
        top: args.top,
        sort: args.sort.into(),
        offsets: args.offsets,
    };
    let report = analysis::report(&rec, &opts);
    if args.json {
        // Streamed: the JSON of every stack (`--top 0`) can be many times the recording's size.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        out.flush()?;
    } else if args.cpu {
        print!(
            "{}",
            fdprof_recording::escape::text(&render::cpu_text(&report))
        );
    } else {
        print!("{}", fdprof_recording::escape::text(&render::text(&report)));
    }
    Ok(())
}

/// The recording narrowed to the processes `--pid`/`--comm`/`--cgroup`/`--container` select
/// (any selects).
fn only_processes(rec: Recording, args: &ReportArgs) -> Result<Recording> {
    let path = args.input.display().to_string();
    let file = fdprof_recording::escape::name(&path);
    if rec.processes.is_empty() {
        anyhow::bail!(
            "{file} has no per-process figures: --pid/--comm/--cgroup/--container select \
             processes of a system-wide recording (fdprof record -a)"
        );
    }
    let in_cgroup = |p: &_| args.cgroup.iter().any(|c| model::process::in_cgroup(p, c));
    let in_container = |p: &_| {
        args.container
            .iter()
            .any(|c| model::process::in_container(p, c))
    };
    let mut narrowed = model::process::only(&rec, |p| {
        args.pid.contains(&p.pid) || args.comm.contains(&p.comm) || in_cgroup(p) || in_container(p)
    });
    if narrowed.processes.is_empty() {
        anyhow::bail!("{file} has no process with {}", selection(args));
    }
    let kept_scans = rec
        .processes
        .iter()
        .any(|p| p.scan.is_some() || p.table.is_some());
    narrowed.notes.push(format!(
        "only {}: contention, stacks and syscalls are theirs; {}functions, drops and costs are \
         the whole machine's",
        selection(args),
        if kept_scans {
            "so are scan and table; "
        } else {
            "scan, table, "
        }
    ));
    Ok(narrowed)
}

/// `--pid`/`--comm`/`--cgroup`/`--container` as words, names escaped.
fn selection(args: &ReportArgs) -> String {
    let pids = args.pid.iter().map(|p| format!("pid {p}"));
    let comms = args
        .comm
        .iter()
        .map(|c| format!("comm {}", fdprof_recording::escape::name(c)));
    let cgroups = args
        .cgroup
        .iter()
        .map(|c| format!("cgroup {}", fdprof_recording::escape::name(c)));
    let containers = args.container.iter().map(|c| format!("container {c}"));
    pids.chain(comms)
        .chain(cgroups)
        .chain(containers)
        .collect::<Vec<_>>()
        .join(" or ")
}

// The command line's names for the analysis options (clap stays out of analysis and render).

/// Order of the top stacks.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortArg {
    /// Total wait time.
    Wait,
    /// Number of waits.
    Count,
    /// Longest single wait.
    Max,
    /// Average wait.
    Avg,
}

impl From<SortArg> for SortKey {
    fn from(arg: SortArg) -> Self {
        match arg {
            SortArg::Wait => SortKey::Wait,
            SortArg::Count => SortKey::Count,
            SortArg::Max => SortKey::Max,
            SortArg::Avg => SortKey::Avg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn clap_names() {
        assert_eq!(SortArg::from_str("avg", false), Ok(SortArg::Avg));
    }
}
