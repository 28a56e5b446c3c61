//! `fdprof top`: a live view of a process, a thread, a command or the whole system, one
//! interval at a time: `--jsonl` prints each interval's figures as one JSON line, `--batch` as a
//! plain-text block (like `top -b`). `-n`, a signal or the target's exit ends it, after the last
//! (partial) interval.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fdprof_common::session::EndReason;

use super::live::{self, Facts};
use super::record::ModeArg;
use super::session::{self, Request};
use crate::collect::{
    TargetSpec,
    stream::{Collector, Received, StreamOptions, Update},
    target,
};
use crate::model::build::Symbolizers;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "tid", "all", "command"])))]
pub struct TopArgs {
    /// Watch this process (all its threads, including ones created later)
    #[arg(short, long)]
    pub pid: Option<u32>,
    /// Watch this thread only
    #[arg(short, long)]
    pub tid: Option<u32>,
    /// Watch every process
    #[arg(short, long)]
    pub all: bool,
    /// Time between updates (10 ms to 1 h)
    #[arg(long, default_value = "1s", value_parser = super::duration::parse_interval)]
    pub interval: Duration,
    /// Probe mode: auto picks the most direct one this kernel allows
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// Lock contention only: no fd syscall or fd function probes
    #[arg(long)]
    pub lock_only: bool,
    /// Report each file_lock wait longer than this as an event (1 µs to 10 s)
    #[arg(long, value_parser = super::duration::parse_slow)]
    pub slow: Option<Duration>,
    /// Print one plain-text block per interval (the default until the interactive screen)
    #[arg(long, conflicts_with = "jsonl")]
    pub batch: bool,
    /// Print one JSON object per interval and line: that interval's figures, the fields of
    /// `report --json` at the top level
    #[arg(long)]
    pub jsonl: bool,
    /// Stop after this many intervals
    #[arg(short = 'n', long = "count", value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Launch and watch this command until it exits; it is sent SIGTERM when top stops first
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl TopArgs {
    fn target(&self) -> TargetSpec {
        match (self.pid, self.tid, self.all) {
            (Some(pid), _, _) => TargetSpec::Pid(pid),
            (None, Some(tid), _) => TargetSpec::Tid(tid),
            (None, None, true) => TargetSpec::All,
            _ => TargetSpec::Command(self.command.clone()),
        }
    }
}

/// How often the end of the profile (signal, exit) is checked.
const POLL: Duration = Duration::from_millis(20);

pub fn run(args: TopArgs) -> Result<()> {
    if !args.jsonl && !args.batch && std::io::stdout().is_terminal() {
        eprintln!("fdprof: the interactive screen is not there yet: printing batch blocks");
    }
    // TODO(events): `args.slow` goes to the ring-buffer events (ProfilerOptions has no
    // threshold yet).
    let request = Request {
        command_name: "fdprof top",
        spec: args.target(),
        forced: args.mode.forced(),
        lock_only: args.lock_only,
    };
    let (mut session, profiler) = session::start(request, || Ok(()))?;
    let mut facts = Facts::of(&profiler, session.target.clone(), session.started_unix_ms);
    eprintln!(
        "fdprof: watching {} ({} mode, every {:?}); Ctrl-C to stop",
        session.target.describe(),
        profiler.mode(),
        args.interval
    );
    let options = StreamOptions {
        interval: args.interval,
        count: args.count,
        ..StreamOptions::default()
    };
    let mut collector = Collector::start(profiler, options)?;
    let user_pid = session.user_pid();
    let mut last_maps = Instant::now();
    let mut end = None;
    let mut write_error = None;
    loop {
        let received = collector.recv_timeout(POLL);
        if end.is_none()
            && let Some(reason) = session.end_reason(None)
        {
            end = Some(reason);
            collector.stop();
        }
        let delta = match received {
            Received::Idle => continue,
            Received::Ended => break,
            Received::Update(Update::Interval(delta)) => delta,
        };
        if write_error.is_some() {
            continue;
        }
        if let Some(pid) = user_pid.filter(|&p| target::process_alive(p))
            && last_maps.elapsed() >= Duration::from_secs(1)
        {
            session.user_syms.snapshot_maps(pid);
            last_maps = Instant::now();
        }
        let why = match (delta.last, end) {
            (true, Some(reason)) => reason,
            _ => EndReason::Duration,
        };
        facts.target.exit_status = session.target.exit_status;
        let mut sym = Symbolizers {
            kernel: &session.kernel_syms,
            user: &mut session.user_syms,
            user_pid,
            raw_addrs: false,
        };
        let interval = live::interval(&delta, &facts, why, &mut sym);
        let text = if args.jsonl {
            serde_json::to_string(&interval).context("cannot serialize an interval")? + "\n"
        } else {
            crate::render::live::interval(&interval)
        };
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            // Nobody reads any more (`| head`): stop, detach, and say nothing of a closed pipe.
            collector.stop();
            write_error = Some(e);
        }
    }
    collector.finish()?;
    session.end_command();
    match write_error {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}
