//! `fdprof export`: a recording's lock waits or on-CPU samples in a standard profile format
//! (pprof, speedscope) or as folded stacks, for the tools that read those; its fd trace as
//! JSON lines.

use std::path::PathBuf;

use anyhow::{Result, bail};
use fdprof_recording::Recording;

use super::args::{LockArg, OpArg};
use crate::analysis::{self, FlamegraphOptions, NoProfile, ProfileKind, ProfileOptions};
use crate::output::Output;
use crate::render;

#[derive(clap::Args, Debug)]
pub(crate) struct ExportArgs {
    /// The recording to read
    #[arg(default_value = "fdprof.data")]
    pub input: PathBuf,
    /// The format to write
    #[arg(long, value_enum)]
    pub format: Format,
    /// Where to write it, mode 0600; - for standard output [default: fdprof.pb.gz,
    /// fdprof.speedscope.json, fdprof.folded or fdprof.trace.jsonl]
    #[arg(short, long)]
    pub output: Option<Output>,
    /// Export the lock waits, weighted by wait time (the default)
    #[arg(long, conflicts_with = "cpu")]
    pub contention: bool,
    /// Export the on-CPU samples (recorded with `record --cpu`)
    #[arg(long)]
    pub cpu: bool,
    /// Only waits of this fd-table operation
    #[arg(long, value_enum, default_value = "all", conflicts_with = "cpu")]
    pub op: OpArg,
    /// Only waits on the target's file_lock, or on every lock
    #[arg(long, value_enum, default_value = "all", conflicts_with = "cpu")]
    pub lock: LockArg,
    /// Keep the frames' addresses, if the recording has them (`record --raw-addrs`); kernel
    /// addresses reveal where KASLR put the kernel
    #[arg(long)]
    pub raw_addrs: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// gzipped perftools.profiles.Profile protobuf (go tool pprof, Pyroscope, Parca)
    Pprof,
    /// speedscope's JSON file format
    Speedscope,
    /// Folded stacks, as `flamegraph --folded` writes them
    Folded,
    /// The fd trace (`record --trace`): one JSON object a line, the tables at attach first,
    /// then every operation
    TraceJsonl,
}

impl Format {
    fn default_output(self) -> &'static str {
        match self {
            Format::Pprof => "fdprof.pb.gz",
            Format::Speedscope => "fdprof.speedscope.json",
            Format::Folded => "fdprof.folded",
            Format::TraceJsonl => "fdprof.trace.jsonl",
        }
    }
}

pub(crate) fn run(args: &ExportArgs) -> Result<()> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| Output::File(args.format.default_output().into()));
    output.check()?;
    let rec = Recording::read(&args.input)?;
    let kind = if args.cpu {
        ProfileKind::Cpu
    } else {
        ProfileKind::Contention
    };
    if args.raw_addrs && !rec.raw_addrs {
        eprintln!("fdprof: the recording has no addresses (record it with --raw-addrs)");
    }
    let data = match args.format {
        Format::TraceJsonl => {
            let Some(trace) = &rec.trace else {
                bail!(
                    "{} has no fd trace: record with --trace",
                    crate::escape::name(&args.input.display().to_string())
                );
            };
            // Written as it is made: the lines take several times the rows they come from.
            let lines = render::trace::lines(trace)
                .map_err(|e| anyhow::anyhow!("corrupt fd trace: {e}"))?;
            output.write_with(|out| lines.write(out))?;
            eprintln!("fdprof: wrote {output}");
            return Ok(());
        }
        Format::Folded => {
            let opts = FlamegraphOptions {
                op: args.op.into(),
                lock: args.lock.into(),
                offsets: false,
            };
            let graph = if kind == ProfileKind::Cpu {
                match analysis::folded_cpu(&rec, &opts) {
                    Some(graph) => graph,
                    None => bail!(
                        "{} has no on-CPU samples: record with `fdprof record --cpu` to export them",
                        crate::escape::name(&args.input.display().to_string())
                    ),
                }
            } else {
                analysis::folded(&rec, &opts)
            };
            render::folded(&graph).into_bytes()
        }
        Format::Pprof | Format::Speedscope => {
            let opts = ProfileOptions {
                kind,
                op: args.op.into(),
                lock: args.lock.into(),
                raw_addrs: args.raw_addrs,
            };
            let profile = match analysis::profile(&rec, &opts) {
                Ok(p) => p,
                Err(NoProfile::NoCpuSamples) => bail!(
                    "{} has no on-CPU samples: record with `fdprof record --cpu` to export them",
                    crate::escape::name(&args.input.display().to_string())
                ),
            };
            if args.format == Format::Pprof {
                render::pprof(&profile)
            } else {
                render::speedscope(&profile)
            }
        }
    };
    output.write(&data)?;
    eprintln!("fdprof: wrote {output}");
    Ok(())
}
