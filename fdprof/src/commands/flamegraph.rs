//! `fdprof flamegraph`: a recording's waiting stacks as an SVG flamegraph weighted by wait
//! time, or its on-CPU stacks weighted by samples (`--cpu`), or as folded stacks.

use std::path::PathBuf;

use anyhow::{Result, bail};
use fdprof_recording::Recording;

use super::args::{LockArg, OpArg};
use fdprof_profiler::analysis::{self, FlamegraphOptions};
use fdprof_profiler::output::Output;
use fdprof_profiler::render;

#[derive(clap::Args, Debug)]
pub(crate) struct FlamegraphArgs {
    /// The recording to read
    #[arg(default_value = "fdprof.data")]
    pub input: PathBuf,
    /// Where to write the SVG (or the folded stacks with --folded), mode 0600; - for standard
    /// output
    #[arg(short, long, default_value = "fdprof.svg")]
    pub output: Output,
    /// Write folded stacks (`frame;frame;... wait_ns`) instead of an SVG
    #[arg(long)]
    pub folded: bool,
    /// Only waits of this fd-table operation
    #[arg(long, value_enum, default_value = "all")]
    pub op: OpArg,
    /// Only waits on the target's file_lock, or on every lock
    #[arg(long, value_enum, default_value = "file_lock")]
    pub lock: LockArg,
    /// Keep function offsets in frame names
    #[arg(long)]
    pub offsets: bool,
    /// Draw a differential flamegraph against this older recording (red: more wait, or
    /// samples with --cpu, than in it; blue: less); with --folded, write the two-column
    /// folded form
    #[arg(long, value_name = "OLD")]
    pub diff: Option<PathBuf>,
    /// Draw the on-CPU samples (`record --cpu`), weighted by samples, instead of the lock waits
    /// (--lock does not apply)
    #[arg(long)]
    pub cpu: bool,
}

pub(crate) fn run(args: &FlamegraphArgs) -> Result<()> {
    args.output.check()?;
    let rec = Recording::read(&args.input)?;
    let opts = FlamegraphOptions {
        op: args.op.into(),
        lock: args.lock.into(),
        offsets: args.offsets,
    };
    let graph = graph_of(&rec, &args.input, &opts, args.cpu)?;
    let old = match &args.diff {
        Some(path) => Some(graph_of(&Recording::read(path)?, path, &opts, args.cpu)?),
        None => None,
    };
    let data = match (&old, args.folded) {
        (None, true) => render::folded(&graph).into_bytes(),
        (None, false) => render::svg(&graph)?,
        (Some(old), true) => render::flamegraph::diff_folded(&graph, old)?.into_bytes(),
        (Some(old), false) => render::flamegraph::diff_svg(&graph, old)?,
    };
    args.output.write(&data)?;
    eprintln!("fdprof: wrote {}", args.output);
    Ok(())
}

/// The folded lock waits of `rec`, or its on-CPU samples with `cpu`.
fn graph_of(
    rec: &Recording,
    path: &std::path::Path,
    opts: &FlamegraphOptions,
    cpu: bool,
) -> Result<analysis::Folded> {
    if !cpu {
        return Ok(analysis::folded(rec, opts));
    }
    match analysis::folded_cpu(rec, opts) {
        Some(graph) => Ok(graph),
        None => bail!(
            "{} has no on-CPU samples: record with `fdprof record --cpu` to draw them",
            fdprof_recording::escape::name(&path.display().to_string())
        ),
    }
}

// The command line's names for the analysis options (clap stays out of analysis and render).
