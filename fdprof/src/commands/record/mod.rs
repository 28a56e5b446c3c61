//! `fdprof record`: attach to a process, a thread, a command or the whole system; stop on
//! `-d`, a signal or the target's exit; write one recording.
//!
//! Everything that can be refused is refused before anything is attached: privileges, the
//! output path, the target, the command.

use std::time::Duration;

use anyhow::Result;
use fdprof_common::session::{EndReason, TargetKind};
use fdprof_recording::{Recording, counters::Counters, series::Series};

use super::args::TargetArgs;
use super::args::{DebugArgs, ProbeArgs};
use super::session::{self, Live, Next, Request, Session, Streams};
mod trace;
use fdprof_profiler::collect::{TargetSpec, counters::ThreadCounters, stats::own_cpu_ns};
use fdprof_profiler::live::stage::Finished;
use fdprof_profiler::output::Output;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "cgroup", "tid", "all", "command"])))]
pub(crate) struct RecordArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this long (e.g. 10s, 500ms, 2m; 1 ms to 365 days); otherwise at Ctrl-C or when
    /// the target exits. A command still running then is sent SIGTERM (SIGKILL 5 s later)
    #[arg(short, long, value_parser = fdprof_profiler::duration::parse_run_length)]
    pub duration: Option<Duration>,
    /// Where to write the recording, mode 0600; - for standard output. Only a regular file is
    /// ever replaced
    #[arg(short, long, default_value = "fdprof.data")]
    pub output: Output,
    /// Also keep a per-interval series of this length (10 ms to 1 h): counts, waits and table
    /// figures per interval, which `report` shows as rates over time and `top --from` plays back.
    /// About 0.1 to 2 KB an interval: at 1 s, hours fit in the 64 MiB `report` reads
    #[arg(long, value_parser = fdprof_profiler::duration::parse_interval)]
    pub interval: Option<Duration>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub debug: DebugArgs,
    /// At the end, wait up to this long (1 ms to 10 min) for debug files debuginfod is still
    /// sending; frames of the files that are not in by then are written unnamed, with their
    /// build id and file offset
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = fdprof_profiler::duration::parse_names_wait)]
    pub debuginfod_wait: Duration,
    /// Do not count the target's threads' task-clock, context switches, migrations, page faults
    /// (and cycles, instructions, cache misses where there is a PMU)
    #[arg(long)]
    pub no_counters: bool,
    /// Also record every operation of the target on its fd table (allocs, closes, dup2s,
    /// close_range, exec) with the table's state at attach, for `fdprof replay RECORDING`.
    /// About 5 bytes an operation in the recording
    #[arg(long, conflicts_with_all = ["lock_only", "all", "tid"])]
    pub trace: bool,
    /// Keep at most this many trace operations (64 bytes each in memory while recording, 4 to
    /// 11 in the recording, which `replay` reads up to 64 MiB); the rest are counted as dropped
    #[arg(long, value_name = "N", requires = "trace", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1..=fdprof_recording::bounded::TRACE_ROWS))]
    pub trace_limit: u64,
    /// Keep raw kernel and user addresses in the recording (they reveal the KASLR layout)
    #[arg(long)]
    pub raw_addrs: bool,
    /// Launch and profile this command, and the processes it starts (a shell's children, a
    /// pipeline's), each followed from its fork, their figures added to the command's;
    /// recording stops when the command itself exits. Its exit status (code or signal) is kept
    /// in the recording; record's own exit status is 0 when the recording succeeded, whatever
    /// the command's. 126/127: the command cannot run / was not found. SIGINT, SIGTERM and
    /// SIGHUP to fdprof are passed on to it (SIGKILL 5 s later or at a second signal); it never
    /// outlives fdprof
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl RecordArgs {
    fn target(&self) -> TargetSpec {
        self.target.spec(&self.command)
    }
}

pub(crate) fn run(args: RecordArgs) -> Result<()> {
    if args.trace && matches!(args.target(), TargetSpec::Pids { .. }) {
        return Err(fdprof_profiler::error::fatal(
            fdprof_profiler::error::EXIT_USAGE,
            "--trace follows one process and its forks: give -p once, without --children",
        ));
    }
    let (mut session, mut live) = session::start(request(&args), || args.output.check())?;
    // The table is read while a launched command is still held, before its first operation.
    let tracing = match args.trace {
        true => Some(trace::start(
            live.stage.profiler_mut(),
            &session,
            args.trace_limit,
        )?),
        false => None,
    };
    // Opened on a launched command's held thread, so its whole run is counted.
    let counted = (!args.no_counters)
        .then(|| session.counted_threads())
        .flatten();
    let counters = counted.as_deref().map(ThreadCounters::open);
    session.go()?;
    // One line once everything is live, the stage's rings included (with -a, a process
    // started before them would not be told of), which scripts wait for.
    eprintln!("{}", attached(&args, &live, &session));
    let mut series = args.interval.map(|interval| Series {
        interval_ns: interval.as_nanos() as u64,
        samples: Vec::new(),
    });
    let end = record_until_the_end(&args, &mut live, &mut session, series.as_mut())?;
    let duration = session.started.elapsed();
    let finished = live.stage.finish()?; // detached before the slow part
    let kept = Kept {
        tracing,
        counters,
        series,
    };
    let recording = whole(&args, finished, &mut session, kept, end, duration);
    args.output.write_with(|out| recording.write(out))?;
    let waits: u64 = recording.contention.iter().map(|c| c.count).sum();
    let calls: u64 = recording.syscalls.iter().map(|s| s.calls).sum();
    let command_status = recording
        .target
        .exit_status
        .map(|s| format!(", command {s}"))
        .unwrap_or_default();
    eprintln!(
        "fdprof: wrote {} ({:.2}s, {}{command_status}): {calls} fd syscalls, {waits} lock waits, {} dropped",
        fdprof_recording::escape::name(&args.output.to_string()),
        duration.as_secs_f64(),
        end.name(),
        recording.total_drops()
    );
    Ok(())
}

/// What `args` ask of the start-up.
fn request(args: &RecordArgs) -> Request<'static> {
    Request {
        command_name: "fdprof record",
        spec: args.target(),
        forced: args.probe.mode.forced(),
        lock_only: args.probe.lock_only,
        slow: None,
        latency: args.probe.latency,
        cpu_hz: args.probe.cpu_hz(),
        call_graph: args.probe.call_graph.walk(),
        trace: args.trace,
        streams: Streams::Inherit,
        debug: args.debug.options(args.debuginfod_wait),
        raw_addrs: args.raw_addrs,
        live: false,
        // Without --interval, the run is one interval, ended by the stop.
        interval: args.interval,
        count: None,
        events: None,
    }
}

/// The line that says the recording runs.
fn attached(args: &RecordArgs, live: &Live, session: &Session) -> String {
    let profiler = live.stage.profiler();
    format!(
        "fdprof: attached ({} mode{}), recording {}{}; Ctrl-C to stop",
        profiler.mode(),
        profiler
            .cpu_event()
            .map(|e| format!(", on-CPU samples on {e} at {} Hz", args.probe.freq))
            .unwrap_or_default(),
        session.target.describe(),
        args.duration
            .map(|d| format!(", for {d:?}"))
            .unwrap_or_default()
    )
}

/// How often the end of the recording (signal, exit, `-d`) is checked.
const POLL: Duration = Duration::from_millis(20);

/// Runs the stage until the recording ends, adding each interval's sample to `series`; a
/// launched command's exit status goes into the session's target. Why it ended.
fn record_until_the_end(
    args: &RecordArgs,
    live: &mut Live,
    session: &mut Session,
    mut series: Option<&mut Series>,
) -> Result<EndReason> {
    loop {
        match live.next(POLL, || session.end_reason(args.duration))? {
            Next::Interval(interval) => {
                if let Some(series) = series.as_deref_mut() {
                    series
                        .samples
                        .push(live.stage.assembler().sample(&interval));
                }
            }
            Next::End(reason) => return Ok(reason),
        }
    }
}

/// What record keeps besides the stage while it runs.
struct Kept {
    tracing: Option<trace::Tracing>,
    counters: Option<ThreadCounters>,
    series: Option<Series>,
}

/// The recording of the whole profile, `duration` long, ended by `end`: the stage's, with
/// the series, the counters and the trace; a command still running is ended.
fn whole(
    args: &RecordArgs,
    mut finished: Finished,
    session: &mut Session,
    kept: Kept,
    end: EndReason,
    duration: Duration,
) -> Recording {
    let Kept {
        tracing,
        counters,
        mut series,
    } = kept;
    if let (Some(series), Some(last)) = (series.as_mut(), finished.last.as_ref()) {
        series.samples.push(finished.assembler.sample(last));
    }
    let trace = tracing.map(|t| t.finish(&finished.total, args.raw_addrs));
    let counters = counters.map(ThreadCounters::read);
    // The recording ended first (-d): the command must not outlive fdprof.
    session.end_command();
    finished.assembler.facts.target.exit_status = session.target.exit_status;
    let cpu_ns = own_cpu_ns().saturating_sub(session.cpu_start);
    let mut recording = finished.whole(duration, end, cpu_ns, args.trace);
    // Said once each, not per frame; the note in the recording has the counts.
    for failure in finished.assembler.symbols.take_name_failures() {
        eprintln!("fdprof: {}", fdprof_recording::escape::name(&failure));
    }
    if session.target.kind == TargetKind::All && !args.no_counters {
        let note = "per-thread counters are not collected in system-wide mode (-a)";
        recording.notes.push(note.into());
    }
    if let Some(c) = &counters {
        recording.notes.extend(c.notes.iter().cloned());
    }
    recording.series = series;
    recording.counters = counters.as_ref().map(Counters::from);
    if let Some(t) = trace {
        eprintln!(
            "fdprof: traced {} fd-table operations ({} lost, {} past --trace-limit)",
            t.events, t.lost, t.over_limit
        );
        trace::add_to(&mut recording, t);
    }
    recording
}
