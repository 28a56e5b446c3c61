//! `fdprof replay`: the allocator what-if. Runs a trace of fd-table operations through the
//! kernel's allocator (by version), Al Viro's multi-level bitmap and `O_FD_FASTALLOC`, and
//! prints each one's cost side by side. `--synthetic` generates the seeds' patterns without
//! a kernel, for tables beyond this machine's fd limit; a recording made with `record --trace`
//! replays what the target did, with mainline the recording's kernel's allocator.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use fdprof_recording::Recording;

use fdprof_profiler::analysis::replay::{self, ModelChoice, ReplayReport};
use fdprof_replay::Version;
use fdprof_replay::synthetic::{Params, Pattern};

#[derive(Args)]
#[command(group(clap::ArgGroup::new("trace").required(true).args(["recording", "synthetic"])))]
pub(crate) struct ReplayArgs {
    /// A recording made with `record --trace` (- for standard input)
    recording: Option<PathBuf>,
    /// Generate this pattern of the 2015 threads instead of reading a trace
    #[arg(long, value_enum)]
    synthetic: Option<Synthetic>,
    /// Models to run (mainline: the allocator of --kernel)
    #[arg(long, value_enum, default_value = "all")]
    model: ModelArg,
    /// fds held (the table's size), up to 2^27 (134217728, Al Viro's worst case)
    #[arg(long, default_value_t = 100_000)]
    fds: u32,
    /// Operations (each a close and an allocation, or the pattern's unit), up to 100 million
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Threads sharing the table (opensock)
    #[arg(long, default_value_t = 16)]
    threads: u32,
    /// Kernel release whose allocator is "mainline" for --synthetic (default: the running
    /// kernel's; a recording's is the kernel it was recorded on)
    #[arg(long, value_name = "RELEASE")]
    kernel: Option<String>,
    /// Seed of the synthetic pattern's and fastalloc's random draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the figures as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Synthetic {
    LinusLoop,
    Opensock,
    Holes,
    Dup2Worst,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModelArg {
    Mainline,
    Linear,
    Fb61,
    Fb613,
    Viro,
    Fastalloc,
    All,
}

/// Bounds a synthetic trace stays in (memory: ~56 bytes an event, a few events an op; a table
/// of 2^27 fds, the one of Al Viro's worst case, is 16 MiB a bitmap).
const MAX_FDS: u32 = 1 << 27;
const MAX_OPS: u64 = 100_000_000;

pub(crate) fn run(args: &ReplayArgs) -> Result<()> {
    let choice = match args.model {
        ModelArg::Mainline => ModelChoice::Mainline,
        ModelArg::Linear => ModelChoice::Linear,
        ModelArg::Fb61 => ModelChoice::Fb61,
        ModelArg::Fb613 => ModelChoice::Fb613,
        ModelArg::Viro => ModelChoice::Viro,
        ModelArg::Fastalloc => ModelChoice::Fastalloc,
        ModelArg::All => ModelChoice::All,
    };
    let report = match (&args.recording, args.synthetic) {
        (Some(path), _) => {
            let rec = Recording::read(path)?;
            let shown = path.display().to_string();
            let name = fdprof_recording::escape::name(&shown);
            replay::recorded(&rec, &name, choice, args.seed).map_err(|e| anyhow!(e))?
        }
        (None, Some(pattern)) => synthetic(args, pattern, choice)?,
        (None, None) => bail!("give a recording or --synthetic"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!(
            "{}",
            fdprof_recording::escape::text(&fdprof_profiler::render::replay::text(&report))
        );
    }
    Ok(())
}

fn synthetic(args: &ReplayArgs, pattern: Synthetic, choice: ModelChoice) -> Result<ReplayReport> {
    if args.fds == 0 || args.fds > MAX_FDS {
        bail!("--fds must be 1 to {MAX_FDS}, not {}", args.fds);
    }
    if args.ops == 0 || args.ops > MAX_OPS {
        bail!("--ops must be 1 to {MAX_OPS}, not {}", args.ops);
    }
    if args.threads == 0 || args.threads > 4096 {
        bail!("--threads must be 1 to 4096, not {}", args.threads);
    }
    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => fdprof_profiler::procfs::kernel_setting("osrelease")
            .context("cannot read the running kernel's release (give --kernel)")?,
    };
    let Some(mainline) = Version::for_kernel(&kernel) else {
        bail!("--kernel {kernel:?} is not a kernel release such as 6.1.0 or 6.12.5");
    };
    let pattern = match pattern {
        Synthetic::LinusLoop => Pattern::LinusLoop,
        Synthetic::Opensock => Pattern::Opensock,
        Synthetic::Holes => Pattern::Holes,
        Synthetic::Dup2Worst => Pattern::Dup2Worst,
    };
    let params = Params {
        fds: args.fds,
        ops: args.ops,
        threads: args.threads,
        seed: args.seed,
        ..Params::default()
    };
    Ok(replay::synthetic(
        pattern, &params, choice, &kernel, mainline,
    ))
}
