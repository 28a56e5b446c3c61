//! `fdprof export`: a recording's lock waits or on-CPU samples in a standard profile format
//! (pprof, speedscope) or as folded stacks, for the tools that read those; its fd trace as
//! JSON lines.

use std::path::PathBuf;

use anyhow::{Result, bail};

use super::args::{LockArg, OpArg};
use fdprof_profiler::analysis::{self, FlamegraphOptions, NoProfile, ProfileKind, ProfileOptions};
use fdprof_profiler::output::Output;
use fdprof_profiler::render;

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
    /// With --format trace-jsonl: write up to this much (bytes, or with a suffix K, M, G or T:
    /// 512M, 2G); a trace that makes more is refused before anything is written, its size
    /// stated [default: 64 times the recording's size, at least 16M]
    #[arg(long, value_name = "SIZE", value_parser = fdprof_profiler::size::parse)]
    pub max_output: Option<u64>,
}

/// How many times its recording's size a trace's JSON lines may take unless `--max-output`
/// says more: a real trace's rows deflate to a few bytes each and make lines of ~100 to 200.
const OUTPUT_PER_INPUT: u64 = 64;
/// What any recording's trace may make without `--max-output`.
const OUTPUT_FLOOR: u64 = 16 << 20;

/// The fd trace as JSON lines, counted first: more than `--max-output` is refused, and more
/// than [`OUTPUT_PER_INPUT`] times the recording said before it is written.
fn trace_jsonl(
    args: &ExportArgs,
    rec: &fdprof_recording::Recording,
    input_bytes: u64,
    output: &Output,
) -> Result<()> {
    let Some(trace) = &rec.trace else {
        bail!(
            "{} has no fd trace: record with --trace",
            fdprof_recording::escape::name(&args.input.display().to_string())
        );
    };
    // Written as it is made: the lines take several times the rows they come from.
    let lines =
        render::trace::lines(trace).map_err(|e| anyhow::anyhow!("corrupt fd trace: {e}"))?;
    let size = lines.size();
    let allowed = args.max_output.unwrap_or(
        input_bytes
            .saturating_mul(OUTPUT_PER_INPUT)
            .max(OUTPUT_FLOOR),
    );
    let shown = describe_output(size, lines.rows(), input_bytes);
    if size > allowed {
        bail!(
            "{shown}, more than --max-output allows ({}; by default {OUTPUT_PER_INPUT} times the \
             recording, at least {}): give --max-output {}M to write them",
            render::human::bytes(allowed),
            render::human::bytes(OUTPUT_FLOOR),
            size.div_ceil(1 << 20)
        );
    }
    if size > input_bytes.saturating_mul(OUTPUT_PER_INPUT) {
        eprintln!("fdprof: {shown}");
    }
    output.write_with(|out| lines.write(out))?;
    eprintln!("fdprof: wrote {output}");
    Ok(())
}

/// `the fd trace's 1000000 rows make 425.3 MiB of JSON lines, 2931 times the 145.0 KiB
/// recording`.
fn describe_output(size: u64, rows: usize, input: u64) -> String {
    format!(
        "the fd trace's {rows} rows make {} of JSON lines, {} times the {} recording",
        render::human::bytes(size),
        size / input.max(1),
        render::human::bytes(input)
    )
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// gzipped perftools.profiles.Profile protobuf (go tool pprof, Pyroscope, Parca)
    Pprof,
    /// One OTLP ExportProfilesServiceRequest, protobuf (OpenTelemetry's profiles signal), each
    /// wait with its process
    Otlp,
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
            Format::Otlp => "fdprof.otlp.pb",
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
    let (rec, input_bytes) = fdprof_recording::read::read_sized(&args.input)?;
    let kind = if args.cpu {
        ProfileKind::Cpu
    } else {
        ProfileKind::Contention
    };
    if args.raw_addrs && !rec.raw_addrs {
        eprintln!("fdprof: the recording has no addresses (record it with --raw-addrs)");
    }
    let data = match args.format {
        Format::TraceJsonl => return trace_jsonl(args, &rec, input_bytes, &output),
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
                        fdprof_recording::escape::name(&args.input.display().to_string())
                    ),
                }
            } else {
                analysis::folded(&rec, &opts)
            };
            render::folded(&graph).into_bytes()
        }
        Format::Pprof | Format::Otlp | Format::Speedscope => {
            let opts = ProfileOptions {
                kind,
                op: args.op.into(),
                lock: args.lock.into(),
                raw_addrs: args.raw_addrs,
                per_process: args.format == Format::Otlp,
            };
            let profile = match analysis::profile(&rec, &opts) {
                Ok(p) => p,
                Err(NoProfile::NoCpuSamples) => bail!(
                    "{} has no on-CPU samples: record with `fdprof record --cpu` to export them",
                    fdprof_recording::escape::name(&args.input.display().to_string())
                ),
            };
            match args.format {
                Format::Pprof => render::pprof(&profile),
                Format::Otlp => render::otlp(&profile, &render::otlp::Sender::this_host()),
                _ => render::speedscope(&profile),
            }
        }
    };
    output.write(&data)?;
    eprintln!("fdprof: wrote {output}");
    Ok(())
}
