//! `fdprof report` and `fdprof flamegraph`: sinks on a recording.

use std::path::PathBuf;

use anyhow::Result;

use crate::model::Recording;
use crate::output::write_atomically;
use crate::render::{self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions, SortKey};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The recording to read (`-`: standard input)
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
    pub sort: SortKey,
    /// Show function offsets (`alloc_fd+0x4a`) and keep stacks that differ only in them apart
    #[arg(long)]
    pub offsets: bool,
}

pub fn report(args: &ReportArgs) -> Result<()> {
    let rec = Recording::read(&args.input)?;
    let opts = ReportOptions {
        top: args.top,
        sort: args.sort,
        offsets: args.offsets,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&render::json(&rec, &opts))?
        );
    } else {
        print!("{}", render::text(&rec, &opts));
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct FlamegraphArgs {
    /// The recording to read (`-`: standard input)
    #[arg(default_value = "fdprof.data")]
    pub input: PathBuf,
    /// Where to write the SVG (or the folded stacks with --folded)
    #[arg(short, long, default_value = "fdprof.svg")]
    pub output: PathBuf,
    /// Write folded stacks (`frame;frame;... wait_ns`) instead of an SVG
    #[arg(long)]
    pub folded: bool,
    /// Only waits of this fd-table operation
    #[arg(long, value_enum, default_value = "all")]
    pub op: OpFilter,
    /// Only waits on the target's file_lock, or on every lock
    #[arg(long, value_enum, default_value = "file_lock")]
    pub lock: LockFilter,
    /// Keep function offsets in frame names
    #[arg(long)]
    pub offsets: bool,
}

pub fn flamegraph(args: &FlamegraphArgs) -> Result<()> {
    let rec = Recording::read(&args.input)?;
    let opts = FlamegraphOptions {
        op: args.op,
        lock: args.lock,
        offsets: args.offsets,
    };
    let data = if args.folded {
        render::folded(&rec, &opts).into_bytes()
    } else {
        render::svg(&rec, &opts)?
    };
    write_atomically(&args.output, &data)?;
    eprintln!("fdprof: wrote {}", args.output.display());
    Ok(())
}
