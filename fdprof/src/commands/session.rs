//! What `record` and `top` share: the start-up (privileges, target, command, kallsyms, kernel
//! discovery, attach), the stop signals passed on to a launched command, and the checks that
//! end a profile (signal, the target's or the command's exit, a duration).
//!
//! Everything that can be refused is refused before anything is attached.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use fdprof_common::{
    probes::Mode,
    session::{EndReason, TargetKind},
};

use crate::collect::{
    Kernel, Profiler, ProfilerOptions, Resolved, TargetSpec,
    cgroups::CgroupSet,
    launch::{self, Launched, Program},
    stats::own_cpu_ns,
    target,
};
use crate::live::{Maps, Symbols};
use crate::model::recording::Target;
use crate::privileges::{self, Capability};
use crate::probe::kallsyms::Kallsyms;
use crate::symbolize::{KernelSymbols, SystemMaps, UserSymbolizer};

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
pub fn stop_signals() -> u32 {
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

pub use crate::collect::launch::Streams;

/// What to profile and how to attach.
pub struct Request<'a> {
    /// The subcommand, as privilege errors name it (`fdprof record`).
    pub command_name: &'a str,
    pub spec: TargetSpec,
    pub forced: Option<Mode>,
    pub lock_only: bool,
    /// The slow-wait threshold of the events (`None`: the profiler's default).
    pub slow: Option<std::time::Duration>,
    /// Time the fd syscalls entry to exit (`--latency`).
    pub latency: bool,
    /// Sample the target on CPU this many times a second per CPU (`--cpu`).
    pub cpu_hz: Option<u64>,
    /// Trace every fd-table operation (`record --trace`).
    pub trace: bool,
    /// Where a launched command's output goes.
    pub streams: Streams,
    /// Keep raw addresses in what is assembled (`--raw-addrs`).
    pub raw_addrs: bool,
    /// A live view (`top`), which symbolizes each interval while its processes live; else a
    /// recording, which reads every process's maps to symbolize them at its end.
    pub live: bool,
}

/// A profile under way: the target, a launched command and the start.
pub struct Session {
    pub resolved: Resolved,
    /// The cgroups followed (`--cgroup`), for the live stage to read again each second.
    pub cgroups: Option<CgroupSet>,
    pub launched: Option<Launched>,
    pub target: Target,
    /// fdprof's CPU time at attach.
    pub cpu_start: u64,
    pub started: Instant,
    pub started_unix_ms: u64,
}

/// Checks privileges, runs the subcommand's own `checks`, resolves the target and the command,
/// discovers the kernel, launches the command (held before `exec`) and attaches; then lets the
/// command run. A command that cannot run is refused and reaped; nothing stays attached.
/// Returns the symbolizers for the live stage, the target's maps read.
pub fn start(
    request: Request,
    checks: impl FnOnce() -> Result<()>,
) -> Result<(Session, Profiler, Symbols)> {
    install_signal_handlers();
    // Kernel stacks are symbolized from /proc/kallsyms, whose addresses may need CAP_SYSLOG.
    let mut needed = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        needed.push(Capability::Syslog);
    }
    privileges::require(request.command_name, &needed)?;
    checks()?;
    let spec = request.spec;
    let mut resolved = target::resolve(&spec)?;
    let (program, command) = match &spec {
        TargetSpec::Command(command) => (Some(Program::resolve(command)?), command.clone()),
        _ => (None, Vec::new()),
    };

    // Read once: it is several MB, and both the stack symbolizer and the probe roles need it.
    let kallsyms = crate::procfs::kallsyms()?;
    let mut kernel_syms = KernelSymbols::from_kallsyms(&kallsyms)?;
    let kernel = Kernel::discover(&Kallsyms::parse(&kallsyms))?;
    drop(kallsyms);

    // Forked from the main thread: the parent-death signal follows the thread that forked.
    let launched = program
        .as_ref()
        .map(|p| launch::launch(p, request.streams))
        .transpose()?;
    if let Some(l) = &launched {
        resolved.launched(l.pid);
    }
    let defaults = ProfilerOptions::default();
    let options = ProfilerOptions {
        filter: resolved.filter,
        forced: request.forced,
        lock_only: request.lock_only,
        slow: request.slow.unwrap_or(defaults.slow),
        latency: request.latency,
        cpu_hz: request.cpu_hz,
        trace: request.trace,
        children: resolved.children,
    };
    let mut cgroups =
        (!resolved.cgroups.is_empty()).then(|| CgroupSet::new(resolved.cgroups.clone()));
    let profiler = match Profiler::attach(&kernel, options)
        .and_then(|mut p| fill_set(&mut p, &resolved, cgroups.as_mut()).map(|()| p))
    {
        Ok(p) => p,
        Err(e) => {
            if let Some(l) = launched {
                l.abandon();
            }
            return Err(e);
        }
    };
    // fdprof's own programs exist from now on: name their frames (an interrupt can land while
    // one runs). Without them, such frames stay `[unknown]`.
    if let Ok(now) = crate::procfs::kallsyms() {
        kernel_syms.add_bpf_programs(&now);
    }
    let target = Target {
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
    };
    let cpu_start = own_cpu_ns();
    let started = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let maps = match (resolved.kind, resolved.pid) {
        (TargetKind::All, _) if request.live => Maps::Starts,
        (TargetKind::All, _) => Maps::System(SystemMaps::new()),
        (TargetKind::Pids | TargetKind::Cgroup, _) | (_, None) => Maps::set(),
        (_, Some(pid)) => Maps::One(pid),
    };
    let mut symbols = Symbols::new(
        kernel_syms,
        UserSymbolizer::new(),
        maps,
        profiler.attached_ns(),
        request.raw_addrs,
    );
    symbols.follow(&resolved.pids);
    if let Some(set) = &cgroups {
        symbols.follow(&set.joined);
    }
    let session = Session {
        cgroups,
        resolved,
        launched,
        target,
        cpu_start,
        started,
        started_unix_ms,
    };
    Ok((session, profiler, symbols))
}

impl Session {
    /// The launched command's output pipe, once (see [`Streams::Captured`]).
    pub fn take_output(&mut self) -> Option<std::os::fd::OwnedFd> {
        self.launched.as_mut().and_then(Launched::take_output)
    }

    /// Lets a launched command exec, once everything that must see it from its first
    /// instruction is attached and reading. An exec that fails (detaching as the profiler
    /// drops) leaves nothing to profile.
    pub fn go(&mut self) -> Result<()> {
        match &mut self.launched {
            Some(l) => l.go(),
            None => Ok(()),
        }
    }

    /// Why the profile ends now, if it does: a stop signal (once a launched command has exited:
    /// a stopped command is profiled until then), the command's or the target's exit, or
    /// `duration` run out. A launched command's exit status goes into `target`.
    pub fn end_reason(&mut self, duration: Option<Duration>) -> Option<EndReason> {
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
    pub fn end_command(&mut self) {
        if let Some(l) = &mut self.launched
            && self.target.exit_status.is_none()
        {
            self.target.exit_status = Some(l.terminate(stop_signals));
        }
    }

    /// The threads whose counters `record` opens (tid, comm): a process's threads now, the
    /// thread, or a launched command's one (held) thread, named after its program; none
    /// system-wide.
    pub fn counted_threads(&self) -> Option<Vec<(u32, String)>> {
        use crate::collect::counters::{comm, threads_of};
        use fdprof_common::session::TargetKind;
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

    /// Whether figures are kept per process (`-a`, a set of processes).
    pub fn per_process(&self) -> bool {
        self.target.kind.per_process()
    }
}

/// Puts a target set's processes in the programs' set (with `--children`, bringing the
/// processes they start; with `--cgroup`, the cgroups' processes and the cgroups to watch for
/// moves), before anything is read.
fn fill_set(
    profiler: &mut Profiler,
    resolved: &Resolved,
    cgroups: Option<&mut CgroupSet>,
) -> Result<()> {
    if let Some(set) = cgroups {
        set.pass(profiler)?;
    }
    use fdprof_common::targets::{TargetEntry, flag};
    let flags = if resolved.children { flag::CHILDREN } else { 0 };
    for (slot, &pid) in resolved.pids.iter().enumerate() {
        let entry = TargetEntry {
            slot: slot as u32,
            flags,
        };
        if profiler.add_target(pid, entry)?.is_err() {
            anyhow::bail!("cannot follow pid {pid}: the target set is full");
        }
    }
    Ok(())
}
