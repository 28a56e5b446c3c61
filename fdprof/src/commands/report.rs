//! `fdprof report`: a recording's figures as text for people or JSON for machines.

use std::path::PathBuf;

use std::io::Write;

use anyhow::Result;

use crate::analysis::{self, ReportOptions, SortKey};
use crate::model::Recording;
use crate::render;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
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
}

pub fn run(args: &ReportArgs) -> Result<()> {
    let rec = Recording::read(&args.input)?;
    if args.cpu && rec.cpu.is_none() {
        anyhow::bail!(
            "{} has no on-CPU samples: record with `fdprof record --cpu` to report them",
            crate::escape::name(&args.input.display().to_string())
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
        print!("{}", crate::escape::text(&render::cpu_text(&report)));
    } else {
        print!("{}", crate::escape::text(&render::text(&report)));
    }
    Ok(())
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
