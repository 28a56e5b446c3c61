//! What `record` and `top` share: the start-up (privileges, target, command, then the live
//! stage's own start-up), the loop over the stage's ticks, the stop signals passed on to a
//! launched command, and the checks that end a profile (signal, the target's or the command's
//! exit, a duration).
//!
//! Everything that can be refused is refused before anything is attached.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fdprof_common::{
    probes::Mode,
    session::{EndReason, TargetKind},
};
use fdprof_recording::recording::Target;

use fdprof_profiler::collect::{
    Kernel, ProfilerOptions, Resolved, TargetSpec,
    cgroups::CgroupSet,
    launch::{self, Launched, Program},
    target,
};
use fdprof_profiler::live::{
    self, LiveInterval, Maps, Stage, StageOptions, SymbolsFrom, Tick, start::Started,
};
use fdprof_profiler::privileges::{self, Capability};
use fdprof_profiler::symbolize::{KernelSymbols, SystemMaps};

/// Stop signals (SIGINT, SIGTERM, SIGHUP) received.
static STOP_SIGNALS: AtomicU32 = AtomicU32::new(0);
/// The last stop signal sent by a process (kill(2)), to pass on to a launched command; 0 when it
/// came from the terminal, which signals the whole foreground process group, command included.
static FORWARD_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let sent_by_a_process = unsafe { (*info).si_code } <= 0;
    FORWARD_SIGNAL.store(if sent_by_a_process { sig } else { 0 }, Ordering::Relaxed);
    STOP_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// How many stop signals fdprof has received.
pub(crate) fn stop_signals() -> u32 {
    STOP_SIGNALS.load(Ordering::Relaxed)
}

pub(super) fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics; the sigaction struct is fully set.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

pub(crate) use fdprof_profiler::collect::launch::Streams;

/// What to profile and how to attach.
pub(crate) struct Request<'a> {
    /// The subcommand, as privilege errors name it (`fdprof record`).
    pub command_name: &'a str,
    pub spec: TargetSpec,
    pub forced: Option<Mode>,
    pub lock_only: bool,
    /// The slow-wait threshold of the events (`None`: the profiler's default).
    pub slow: Option<Duration>,
    /// Time the fd syscalls entry to exit (`--latency`).
    pub latency: bool,
    /// Sample the target on CPU this many times a second per CPU (`--cpu`).
    pub cpu_hz: Option<u64>,
    /// How user stacks are walked (`--call-graph`).
    pub call_graph: fdprof_profiler::collect::CallGraph,
    /// Trace every fd-table operation (`record --trace`).
    pub trace: bool,
    /// Where a launched command's output goes.
    pub streams: Streams,
    /// Keep raw addresses in what is assembled (`--raw-addrs`).
    pub raw_addrs: bool,
    /// Where stripped binaries' names are looked for (`--debug-dir`, `--debuginfod`, …).
    pub debug: fdprof_profiler::symbolize::DebugOptions,
    /// A live view (`top`), which symbolizes each interval while its processes live; else a
    /// recording, which reads every process's maps to symbolize them at its end.
    pub live: bool,
    /// The stage's clock (`None`: one interval, ended by the stop) and the intervals it runs.
    pub interval: Option<Duration>,
    pub count: Option<u64>,
    /// The slow-wait events an interval keeps at most (`None`: they are not read).
    pub events: Option<usize>,
}

/// A profile under way: the target, a launched command and the start.
pub(crate) struct Session {
    pub resolved: Resolved,
    pub launched: Option<Launched>,
    pub target: Target,
    /// fdprof's CPU time at attach.
    pub cpu_start: u64,
    pub started: Instant,
}

/// The live stage on a current-thread runtime of its own, driven from the main thread.
pub(crate) struct Live {
    /// Before the runtime: its rings go before the reactor they are registered with.
    pub stage: Stage,
    pub runtime: tokio::runtime::Runtime,
}

/// What [`Live::next`] found.
pub(crate) enum Next {
    Interval(Box<LiveInterval>),
    /// The profile ends, for this reason.
    End(EndReason),
}

/// Checks privileges, runs the subcommand's own `checks`, resolves the target and the command,
/// discovers the kernel, launches the command (held before `exec` until [`Session::go`]) and
/// starts the live stage (`live::start`). A command that cannot run is refused and reaped;
/// nothing stays attached.
pub(crate) fn start(
    request: Request,
    checks: impl FnOnce() -> Result<()>,
) -> Result<(Session, Live)> {
    install_signal_handlers();
    // Kernel stacks are symbolized from /proc/kallsyms, whose addresses may need CAP_SYSLOG.
    let mut needed = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        needed.push(Capability::Syslog);
    }
    privileges::require(request.command_name, &needed)?;
    for gap in fdprof_profiler::probe::pod_spec::check_at_start()? {
        eprintln!("fdprof: in a container: add {}", gap.line());
    }
    checks()?;
    let debug = request.debug.sources()?;
    let mut resolved = target::resolve(&request.spec)?;
    let (program, command) = match &request.spec {
        TargetSpec::Command(command) => (Some(Program::resolve(command)?), command.clone()),
        _ => (None, Vec::new()),
    };
    let (kernel, kernel_syms) = live::read_kernel()?;
    // Forked from the main thread: the parent-death signal follows the thread that forked.
    let launched = program
        .as_ref()
        .map(|p| launch::launch(p, request.streams))
        .transpose()?;
    if let Some(l) = &launched {
        resolved.launched(l.pid);
    }
    let target = target_of(&resolved, command);
    let stage = stage_request(&request, &resolved, target.clone(), kernel_syms, debug);
    let (live, started, cpu_start) = match Live::start(&kernel, stage) {
        Ok(started) => started,
        Err(e) => {
            if let Some(l) = launched {
                l.abandon();
            }
            return Err(e);
        }
    };
    let session = Session {
        resolved,
        launched,
        target,
        cpu_start,
        started,
    };
    Ok((session, live))
}

/// What the live stage attaches, follows and reads for `request` on the `resolved` target.
fn stage_request(
    request: &Request,
    resolved: &Resolved,
    target: Target,
    kernel_syms: KernelSymbols,
    debug: fdprof_profiler::symbolize::DebugSources,
) -> live::Request {
    let kind = resolved.kind;
    let maps = match (kind, resolved.pid) {
        (TargetKind::All, _) if request.live => Maps::Starts,
        (TargetKind::All, _) => Maps::System(SystemMaps::new()),
        (TargetKind::Pids | TargetKind::Cgroup, _) | (_, None) => Maps::set(),
        (_, Some(pid)) => Maps::One(pid),
    };
    let mut notes = Vec::new();
    if request.live && kind == TargetKind::All {
        notes.push("user stacks are not symbolized in system-wide mode".into());
    }
    live::Request {
        options: ProfilerOptions {
            filter: resolved.filter,
            forced: request.forced,
            lock_only: request.lock_only,
            rest: false,
            slow: request.slow.unwrap_or(ProfilerOptions::default().slow),
            latency: request.latency,
            cpu_hz: request.cpu_hz,
            call_graph: request.call_graph,
            trace: request.trace,
            children: resolved.children,
        },
        symbols: SymbolsFrom::Kernel(kernel_syms, debug),
        maps,
        pids: resolved.pids.clone(),
        cgroups: (!resolved.cgroups.is_empty()).then(|| CgroupSet::new(resolved.cgroups.clone())),
        target,
        raw_addrs: request.raw_addrs,
        notes: Some(notes),
        stage: StageOptions {
            interval: request.interval,
            count: request.count,
            events: request.events,
            // The kernel tells of each fork and exec, to read the process's maps at once: a
            // recording's every process (its stacks symbolize after it exits), a set's members
            // as they join.
            starts: match request.live {
                true => matches!(kind, TargetKind::Pids | TargetKind::Cgroup),
                false => kind.per_process(),
            },
            // A live view symbolizes each interval while its processes live; a recording keeps
            // every snapshot for its end.
            trim: request.live,
            stats_origin: None,
            // A recording's whole and a live view's cumulative view hold every process seen.
            keep_ended: true,
        },
    }
}

/// The target as a recording names it.
fn target_of(resolved: &Resolved, command: Vec<String>) -> Target {
    Target {
        kind: resolved.kind,
        pid: resolved.pid,
        pids: resolved.pids.clone(),
        children: resolved.children,
        cgroups: resolved.cgroups.iter().map(|c| c.path.clone()).collect(),
        tid: resolved.tid,
        command,
        comm: resolved.comm.clone(),
        exit_status: None,
        threads: None,
    }
}

impl Live {
    /// [`live::start`] on a runtime of its own; when it started, and fdprof's CPU time then.
    fn start(kernel: &Kernel, request: live::Request) -> Result<(Self, Instant, u64)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the collector's runtime")?;
        let Started { stage, at, cpu_ns } = {
            let _inside = runtime.enter();
            live::start(kernel, request).map_err(|failed| failed.error)?
        };
        Ok((Self { stage, runtime }, at, cpu_ns))
    }

    /// Drives the stage until its next interval or the end of the profile: `ended` says why the
    /// profile ends now, if it does, before each wait of at most `poll`. The stage's count run
    /// out ends it as interrupted.
    pub(crate) fn next(
        &mut self,
        poll: Duration,
        mut ended: impl FnMut() -> Option<EndReason>,
    ) -> Result<Next> {
        loop {
            if let Some(reason) = ended() {
                return Ok(Next::End(reason));
            }
            match self.runtime.block_on(self.stage.next(Some(poll)))? {
                Tick::Interval(interval) => return Ok(Next::Interval(interval)),
                // The maps of processes that started are read by the stage.
                Tick::Started(_) | Tick::Idle => {}
                Tick::Ended => return Ok(Next::End(EndReason::Interrupted)),
            }
        }
    }
}

impl Session {
    /// The launched command's output pipe, once (see [`Streams::Captured`]).
    pub(crate) fn take_output(&mut self) -> Option<std::os::fd::OwnedFd> {
        self.launched.as_mut().and_then(Launched::take_output)
    }

    /// Lets a launched command exec, once everything that must see it from its first
    /// instruction is attached and reading. An exec that fails (detaching as the profiler
    /// drops) leaves nothing to profile.
    pub(crate) fn go(&mut self) -> Result<()> {
        match &mut self.launched {
            Some(l) => l.go(),
            None => Ok(()),
        }
    }

    /// Why the profile ends now, if it does: a stop signal (once a launched command has exited:
    /// a stopped command is profiled until then), the command's or the target's exit, or
    /// `duration` run out. A launched command's exit status goes into `target`.
    pub(crate) fn end_reason(&mut self, duration: Option<Duration>) -> Option<EndReason> {
        let signals = stop_signals();
        if let Some(l) = &mut self.launched {
            let status = if signals > 0 {
                l.stop(signals, FORWARD_SIGNAL.load(Ordering::Relaxed))
            } else {
                l.try_wait()
            };
            if let Some(status) = status {
                self.target.exit_status = Some(status);
                return Some(if signals > 0 {
                    EndReason::Interrupted
                } else {
                    EndReason::CommandExited
                });
            }
        } else if signals > 0 {
            return Some(EndReason::Interrupted);
        }
        if duration.is_some_and(|d| self.started.elapsed() >= d) {
            return Some(EndReason::Duration);
        }
        if self.resolved.exited() {
            return Some(EndReason::TargetExited);
        }
        None
    }

    /// Ends a launched command that outlived the profile (SIGTERM, SIGKILL after a grace
    /// period): it never outlives fdprof. Its exit status goes into `target`.
    pub(crate) fn end_command(&mut self) {
        if let Some(l) = &mut self.launched
            && self.target.exit_status.is_none()
        {
            self.target.exit_status = Some(l.terminate(stop_signals));
        }
    }

    /// The threads whose counters `record` opens (tid, comm): a process's threads now, the
    /// thread, or a launched command's one (held) thread, named after its program; none
    /// system-wide.
    pub(crate) fn counted_threads(&self) -> Option<Vec<(u32, String)>> {
        use fdprof_common::session::TargetKind;
        use fdprof_profiler::collect::counters::{comm, threads_of};
        let pid = self.resolved.pid?;
        Some(match self.target.kind {
            TargetKind::All | TargetKind::Name | TargetKind::Pids | TargetKind::Cgroup => {
                return None;
            }
            TargetKind::Pid => threads_of(pid),
            TargetKind::Tid => {
                let tid = self.resolved.tid?;
                vec![(tid, comm(tid))]
            }
            TargetKind::Command => {
                let program = self
                    .target
                    .command
                    .first()
                    .map_or("", |p| p.rsplit('/').next().unwrap_or(p));
                // As the kernel names it after exec: 15 bytes (TASK_COMM_LEN - 1).
                let name: String = program
                    .chars()
                    .scan(0, |bytes, c| {
                        *bytes += c.len_utf8();
                        (*bytes <= 15).then_some(c)
                    })
                    .collect();
                vec![(pid, name)]
            }
        })
    }
}
