//! `fdprof top`: a live view of a process, a thread, a command or the whole system, one
//! interval at a time: on a terminal, the screen (`tui`); `--jsonl` prints each interval's
//! figures as one JSON line, `--batch` (or no terminal) as a plain-text block, like `top -b`.
//! `q`, `-n`, a signal or the target's exit ends it, after the last (partial) interval.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};
use std::time::Duration;

use anyhow::{Context, Result};
use fdprof_common::{counters::drop, session::EndReason};

mod playback;

use super::args::TargetArgs;
use super::args::{DebugArgs, ProbeArgs};
use super::command_output::CommandOutput;
use super::session::{self, Live, Next, Request, Session, Streams};
use fdprof_profiler::analysis::{self, Interval, ReportOptions};
use fdprof_profiler::collect::{Snapshot, TargetSpec, target};
use fdprof_profiler::live::{Assembler, LiveInterval};
use fdprof_profiler::model::{merge, window};
use fdprof_profiler::output::Output;
use fdprof_profiler::render::human;
use fdprof_top::Action;

#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("target").required(true).args(["pid", "cgroup", "tid", "all", "command", "from"])),
    after_help = "Keys on the screen (? lists them): q quit, p or space pause, z last interval / \
                  totals since the start, r reset the totals, s sort the stacks, / filter them \
                  by function, Tab and the arrows move between the panes and scroll them, o \
                  order and g group the processes pane (-a), w write the last 60 intervals as \
                  a recording (fdprof-top-STAMP.data in the current directory: report, \
                  flamegraph and top --from read it)."
)]
pub(crate) struct TopArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Time between updates (10 ms to 1 h)
    #[arg(long, default_value = "1s", value_parser = fdprof_profiler::duration::parse_interval)]
    pub interval: Duration,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub debug: DebugArgs,
    /// Report each file_lock wait longer than this as an event (1 µs to 10 s)
    #[arg(long, value_parser = fdprof_profiler::duration::parse_slow)]
    pub slow: Option<Duration>,
    /// Print one plain-text block per interval, as `top -b` does (the default when standard
    /// output is not a terminal); otherwise the interactive screen
    #[arg(long, conflicts_with = "jsonl")]
    pub batch: bool,
    /// Print one JSON object per interval and line: that interval's figures, the fields of
    /// `report --json` at the top level
    #[arg(long)]
    pub jsonl: bool,
    /// Play back a recording made with `record --interval` (no privileges, nothing attached):
    /// on the screen at the recorded pace; with --jsonl or --batch as fast as they are written
    #[arg(long, value_name = "RECORDING",
          conflicts_with_all = ["mode", "lock_only", "slow", "latency", "interval", "cpu"])]
    pub from: Option<std::path::PathBuf>,
    /// Stop after this many intervals
    #[arg(short = 'n', long = "count", value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Launch and watch this command until it exits, with the processes it starts, each from
    /// its fork, their figures added to the command's; it is sent SIGTERM when top stops first.
    /// Under the screen, its input is /dev/null and its output (the last 64 KiB) is printed
    /// once the screen is gone
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl TopArgs {
    fn target(&self) -> TargetSpec {
        self.target.spec(&self.command)
    }
}

/// Events an interval carries at most (the rest are counted as `events`/`limit` drops).
const EVENTS: usize = 100_000;

/// Stacks each interval kept for `w` holds at most, as the daemon bounds its history's (the
/// rest are folded, no count lost): 60 intervals of a busy system-wide view stay small.
const KEPT_SITES: usize = 128;

/// How often the end of the profile (signal, exit, `q`) is checked: often enough to feel
/// immediate, rarely enough that an idle view stays asleep (every 20 ms cost a tenth of its CPU).
const POLL: Duration = Duration::from_millis(100);

/// Where the intervals go.
pub(super) enum Sink {
    Jsonl,
    Batch,
    /// The screen, on a thread of its own; it sets `quit` when the user quits, `reset` when
    /// the totals are to start anew and `save` when the intervals kept are to be written.
    Screen {
        updates: tokio::sync::mpsc::Sender<fdprof_top::Update>,
        quit: Arc<AtomicBool>,
        reset: Arc<AtomicBool>,
        save: Arc<AtomicBool>,
        thread: std::thread::JoinHandle<Result<fdprof_top::Exit>>,
    },
}

impl Sink {
    /// Whether `args` ask for the screen (not `--jsonl`, not `--batch`, on a terminal).
    pub(super) fn is_screen(args: &TopArgs) -> bool {
        !args.jsonl && !args.batch && std::io::stdout().is_terminal()
    }

    pub(super) fn choose(args: &TopArgs) -> Self {
        if args.jsonl {
            Sink::Jsonl
        } else if !Self::is_screen(args) {
            Sink::Batch
        } else {
            let (updates, feed) = tokio::sync::mpsc::channel(64);
            let quit = Arc::new(AtomicBool::new(false));
            let reset = Arc::new(AtomicBool::new(false));
            let save = Arc::new(AtomicBool::new(false));
            let (quit_seen, reset_asked, save_asked) = (quit.clone(), reset.clone(), save.clone());
            let playing = args.from.as_ref().map(|p| p.display().to_string());
            let thread = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let exit =
                    runtime.block_on(fdprof_top::run(feed, playing, |action| match action {
                        Action::ResetTotals => reset_asked.store(true, Ordering::Relaxed),
                        Action::Save => save_asked.store(true, Ordering::Relaxed),
                        Action::Quit | Action::Continue => {}
                    }));
                quit_seen.store(true, Ordering::Relaxed);
                exit
            });
            Sink::Screen {
                updates,
                quit,
                reset,
                save,
                thread,
            }
        }
    }

    /// Ends the output: a screen gets no more intervals and its thread is joined (with
    /// `linger`, only once the user has closed it or a signal came); a write error other than
    /// a closed pipe (`| head`) is the result.
    pub(super) fn close(self, write_error: Option<std::io::Error>, linger: bool) -> Result<()> {
        if let Sink::Screen {
            updates, thread, ..
        } = self
        {
            while linger && !thread.is_finished() && session::stop_signals() == 0 {
                std::thread::sleep(POLL);
            }
            drop(updates);
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("the screen failed"))??;
        }
        match write_error {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(e).context("cannot write to standard output")
            }
            _ => Ok(()),
        }
    }

    /// Writes `interval` as a JSON line (`--jsonl`) or a text block (`--batch`); the screen is
    /// fed by its caller. The write's outcome (a closed pipe ends the profile quietly).
    pub(super) fn print(&self, interval: &Interval) -> Result<std::io::Result<()>> {
        Ok(match self {
            Sink::Jsonl => {
                let line =
                    serde_json::to_string(interval).context("cannot serialize an interval")?;
                print(&(line + "\n"))
            }
            // Names (the target's command line, comms, symbols) escaped, as report does.
            Sink::Batch => print(&fdprof_recording::escape::text(
                &fdprof_profiler::render::live::interval(interval),
            )),
            Sink::Screen { .. } => Ok(()),
        })
    }

    /// Whether the screen was closed (`q`): the profile ends.
    pub(super) fn closed(&self) -> bool {
        matches!(self, Sink::Screen { quit, .. } if quit.load(Ordering::Relaxed))
    }
}

pub(crate) fn run(args: TopArgs) -> Result<()> {
    if let Some(path) = &args.from {
        return playback::run(&args, path);
    }
    let (mut session, mut live) = session::start(request(&args), || Ok(()))?;
    let command_output = session.take_output().map(CommandOutput::start);
    let sink = Sink::choose(&args);
    if !matches!(sink, Sink::Screen { .. }) {
        eprintln!(
            "fdprof: watching {} ({} mode, every {:?}); Ctrl-C to stop",
            session.target.describe(),
            live.stage.profiler().mode(),
            args.interval
        );
    }
    // The events are read from here on: a launched command runs now.
    session.go()?;
    let mut view = View {
        sink,
        since: Snapshot::default(),
        write_error: None,
        kept: VecDeque::new(),
        interval_ns: args.interval.as_nanos() as u64,
    };
    let end = watch(&mut live, &mut session, &mut view)?;
    let mut finished = live.stage.finish()?;
    session.end_command();
    if let Some(last) = finished.last.take()
        && view.write_error.is_none()
    {
        view.show(&last, end, &mut finished.assembler, &session)?;
    }
    // The feed ends: the screen restores the terminal and returns.
    let closed = view.sink.close(view.write_error, false);
    if let Some(text) = command_output.and_then(CommandOutput::finish) {
        eprint!("{text}");
    }
    closed
}

/// What `args` ask of the start-up.
fn request(args: &TopArgs) -> Request<'static> {
    Request {
        command_name: "fdprof top",
        spec: args.target(),
        forced: args.probe.mode.forced(),
        lock_only: args.probe.lock_only,
        slow: args.slow,
        latency: args.probe.latency,
        cpu_hz: args.probe.cpu_hz(),
        call_graph: args.probe.call_graph.walk(),
        trace: false,
        streams: match Sink::is_screen(args) {
            true => Streams::Captured,
            false => Streams::Inherit,
        },
        raw_addrs: false,
        // A live view never waits: a file's frames are named once it arrives.
        debug: args.debug.options(Duration::ZERO),
        live: true,
        interval: Some(args.interval),
        count: args.count,
        events: Some(EVENTS),
    }
}

/// Shows each interval until the profile ends (`q`, a signal, the target's exit, `-n`, nobody
/// reading any more); why it ended.
fn watch(live: &mut Live, session: &mut Session, view: &mut View) -> Result<EndReason> {
    loop {
        let next = live.next(POLL, || {
            let reason = match view.sink.closed() {
                true => Some(EndReason::Interrupted),
                false => session.end_reason(None),
            };
            if reason.is_none() {
                view.save_if_asked();
            }
            reason
        })?;
        let interval = match next {
            Next::Interval(interval) => interval,
            Next::End(reason) => return Ok(reason),
        };
        view.show(
            &interval,
            EndReason::Duration,
            live.stage.assembler(),
            session,
        )?;
        if view.write_error.is_some() || interval.last {
            return Ok(EndReason::Interrupted);
        }
    }
}

/// Where the intervals go, and what the cumulative view counts from.
struct View {
    sink: Sink,
    /// The total the screen's cumulative view counts from (the start, or the last reset).
    since: Snapshot,
    /// Nobody reads any more (`| head`): the profile stops, quietly for a closed pipe.
    write_error: Option<std::io::Error>,
    /// The screen's last intervals, oldest first, for `w`.
    kept: VecDeque<window::Timed>,
    interval_ns: u64,
}

impl View {
    /// Shows one interval, ended by `end`.
    fn show(
        &mut self,
        live: &LiveInterval,
        end: EndReason,
        assembler: &mut Assembler,
        session: &Session,
    ) -> Result<()> {
        let facts = &mut assembler.facts;
        facts.target.exit_status = session.target.exit_status;
        facts.target.threads = assembler.symbols.user_pid().and_then(target::live_threads);
        let mut recording = assembler.recording(live, end);
        merge::add_drop(
            &mut recording.drops,
            drop::PROBE_NAMES[drop::PROBE_EVENTS as usize],
            drop::REASON_NAMES[drop::LIMIT as usize],
            live.events_dropped,
        );
        let interval = Interval {
            index: live.index,
            start_ns: live.start.as_nanos() as u64,
            duration_ns: live.duration.as_nanos() as u64,
            report: analysis::report(&recording, &ReportOptions::default()),
            events: live.events.clone(),
        };
        let written = match &self.sink {
            Sink::Screen { updates, reset, .. } => {
                if reset.swap(false, Ordering::Relaxed) {
                    self.since = live.total.clone();
                }
                merge::bound_sites(&mut recording, KEPT_SITES);
                if self.kept.len() == fdprof_top::state::HISTORY {
                    self.kept.pop_front();
                }
                self.kept.push_back(window::Timed {
                    start_ns: interval.start_ns,
                    rec: recording,
                });
                let whole = assembler.cumulative(live, &self.since);
                let cumulative = analysis::report(&whole, &ReportOptions::default());
                // A closed screen is noticed at the top of the loop.
                let _ = updates.blocking_send(fdprof_top::Update::Interval {
                    interval,
                    cumulative,
                });
                Ok(())
            }
            text => text.print(&interval)?,
        };
        if let Err(e) = written {
            self.write_error = Some(e);
        }
        Ok(())
    }

    /// Writes the intervals kept if the screen asked (`w`) and tells it what came of that.
    fn save_if_asked(&self) {
        let Sink::Screen { updates, save, .. } = &self.sink else {
            return;
        };
        if save.swap(false, Ordering::Relaxed) {
            let saved = self.write_kept().map_err(|e| format!("{e:#}"));
            let _ = updates.blocking_send(fdprof_top::Update::Saved(saved));
        }
    }

    /// The intervals kept as one recording with their series, as `record --interval` writes
    /// it, in a new file of the current directory; its path.
    fn write_kept(&self) -> Result<String> {
        let first = self.kept.front().context("nothing to write yet")?;
        let stamp = human::utc_stamp(first.rec.started_unix_ms);
        let path = fdprof_profiler::output::unused_path(
            Path::new(""),
            &format!("fdprof-top-{stamp}"),
            "data",
        )?;
        let kept = self.kept.iter().cloned().collect();
        let rec = window::with_series(kept, self.interval_ns).context("nothing to write yet")?;
        Output::File(path.clone()).write_with(|out| rec.write(out))?;
        Ok(path.display().to_string())
    }
}

/// Writes `text` to standard output at once.
fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}
