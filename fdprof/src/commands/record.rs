//! `fdprof record`: attach to a process, a thread, a command or the whole system; stop on
//! `-d`, a signal or the target's exit; write one recording.
//!
//! Everything that can be refused is refused before anything is attached: privileges, the
//! output path, the target, the command.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use fdprof_common::{
    probes::Mode,
    session::{EndReason, TargetKind},
};

use crate::collect::{
    Kernel, Profiler, ProfilerOptions, Resolved, TargetSpec,
    launch::{self, Launched, Program},
    target,
};
use crate::model::{
    assemble::{self, Run},
    build::Symbolizers,
    recording::Target,
};
use crate::output::Output;
use crate::privileges::{self, Capability};
use crate::probe::kallsyms::Kallsyms;
use crate::symbolize::{KernelSymbols, UserSymbolizer};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "tid", "all", "command"])))]
pub struct RecordArgs {
    /// Profile this process (all its threads, including ones created later)
    #[arg(short, long)]
    pub pid: Option<u32>,
    /// Profile this thread only
    #[arg(short, long)]
    pub tid: Option<u32>,
    /// Profile every process
    #[arg(short, long)]
    pub all: bool,
    /// Stop after this long (e.g. 10s, 500ms, 2m; 1 ms to 365 days); otherwise at Ctrl-C or when
    /// the target exits. A command still running then is sent SIGTERM (SIGKILL 5 s later)
    #[arg(short, long, value_parser = super::duration::parse_run_length)]
    pub duration: Option<Duration>,
    /// Where to write the recording, mode 0600; - for standard output. Only a regular file is
    /// ever replaced
    #[arg(short, long, default_value = "fdprof.data")]
    pub output: Output,
    /// Probe mode: auto picks the most direct one this kernel allows
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// Record lock contention only: no fd syscall or fd function probes, so no scan, syscall or
    /// table figures, at the lowest cost to the target
    #[arg(long)]
    pub lock_only: bool,
    /// Keep raw kernel and user addresses in the recording (they reveal the KASLR layout)
    #[arg(long)]
    pub raw_addrs: bool,
    /// Launch and profile this command; recording stops when it exits. Its exit status (code
    /// or signal) is kept in the recording; record's own exit status is 0 when the recording
    /// succeeded, whatever the command's. 126/127: the command cannot run / was not found.
    /// SIGINT, SIGTERM and SIGHUP to fdprof are passed on to it (SIGKILL 5 s later or at a
    /// second signal); it never outlives fdprof
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

impl ModeArg {
    /// The mode forced on every function role; `None` lets each take the most direct one.
    fn forced(self) -> Option<Mode> {
        match self {
            ModeArg::Auto => None,
            ModeArg::Fentry => Some(Mode::Fentry),
            ModeArg::Kprobe => Some(Mode::Kprobe),
            ModeArg::Tracepoint => Some(Mode::Tracepoint),
        }
    }
}

impl RecordArgs {
    fn target(&self) -> TargetSpec {
        match (self.pid, self.tid, self.all) {
            (Some(pid), _, _) => TargetSpec::Pid(pid),
            (None, Some(tid), _) => TargetSpec::Tid(tid),
            (None, None, true) => TargetSpec::All,
            _ => TargetSpec::Command(self.command.clone()),
        }
    }
}

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

fn stop_signals() -> u32 {
    STOP_SIGNALS.load(Ordering::Relaxed)
}

fn install_signal_handlers() {
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

fn cpu_time_ns() -> u64 {
    // SAFETY: valid out-pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub fn run(args: RecordArgs) -> Result<()> {
    install_signal_handlers();
    // Kernel stacks are symbolized from /proc/kallsyms, whose addresses may need CAP_SYSLOG.
    let mut needed = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        needed.push(Capability::Syslog);
    }
    privileges::require("fdprof record", &needed)?;
    args.output.check()?;
    let spec = args.target();
    let mut resolved = target::resolve(&spec)?;
    let program = match &spec {
        TargetSpec::Command(command) => Some(Program::resolve(command)?),
        _ => None,
    };

    // Read once: it is several MB, and both the stack symbolizer and the probe roles need it.
    let kallsyms =
        std::fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
    let kernel_syms = KernelSymbols::from_kallsyms(&kallsyms)?;
    let kernel = Kernel::discover(&Kallsyms::parse(&kallsyms))?;
    drop(kallsyms);
    let mut user_syms = UserSymbolizer::new();

    // Forked from the main thread: the parent-death signal follows the thread that forked.
    let mut launched = program.as_ref().map(launch::launch).transpose()?;
    if let Some(l) = &launched {
        resolved.launched(l.pid);
    }
    let options = ProfilerOptions {
        filter: resolved.filter,
        forced: args.mode.forced(),
        lock_only: args.lock_only,
        ..ProfilerOptions::default()
    };
    let mut profiler = match Profiler::attach(&kernel, options) {
        Ok(p) => p,
        Err(e) => {
            if let Some(l) = launched {
                l.abandon();
            }
            return Err(e);
        }
    };
    let mut target = Target {
        kind: resolved.kind,
        pid: resolved.pid,
        tid: resolved.tid,
        command: args.command.clone(),
        comm: resolved.comm.clone(),
        exit_status: None,
    };
    let cpu_start = cpu_time_ns();
    let started = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    if let Some(pid) = resolved.pid {
        user_syms.snapshot_maps(pid);
    }
    if let Some(l) = &mut launched {
        // An exec that fails (detaching as the profiler drops) leaves nothing to record.
        l.go()?;
    }
    eprintln!(
        "fdprof: recording {} ({} mode{}); Ctrl-C to stop",
        target.describe(),
        profiler.mode(),
        args.duration
            .map(|d| format!(", for {d:?}"))
            .unwrap_or_default()
    );

    let end_reason = record_until_the_end(
        &args,
        &mut profiler,
        &resolved,
        &mut launched,
        &mut target,
        &mut user_syms,
        started,
    );
    let duration_ns = started.elapsed().as_nanos() as u64;
    let probes = profiler.attachments().clone();
    let mode = profiler.mode();
    let mut notes = profiler.notes().to_vec();
    let snap = profiler.finish()?; // detached before the slow part
    if let Some(pid) = resolved.pid.filter(|&p| target::process_alive(p)) {
        user_syms.snapshot_maps(pid);
    }
    if snap.stats_window.is_zero() {
        // BPF_ENABLE_STATS takes CAP_SYS_ADMIN, which CAP_BPF and CAP_PERFMON do not give.
        notes.push(
            "BPF run-time statistics could not be switched on (that takes CAP_SYS_ADMIN): \
             the programs' run times were not measured"
                .into(),
        );
    }
    if let Some(l) = &mut launched
        && target.exit_status.is_none()
    {
        // The recording ended first (-d): the command must not outlive fdprof.
        target.exit_status = Some(l.terminate(stop_signals));
    }
    notes.push(
        "aggregated in the kernel: no ring buffer, so nothing is lost to a full buffer".into(),
    );
    let all = target.kind == TargetKind::All;
    if all {
        notes.push("user stacks are not symbolized in system-wide mode".into());
    }

    let mut sym = Symbolizers {
        kernel: &kernel_syms,
        user: &mut user_syms,
        user_pid: if all { None } else { resolved.pid },
        raw_addrs: args.raw_addrs,
    };
    let run = Run {
        target,
        started_unix_ms,
        duration_ns,
        end_reason,
        mode,
        probes,
        raw_addrs: args.raw_addrs,
        notes,
        collector_cpu_ns: cpu_time_ns().saturating_sub(cpu_start),
    };
    let recording = assemble::recording(&snap, run, &mut sym);
    recording.write(&args.output)?;
    let waits: u64 = recording.contention.iter().map(|c| c.count).sum();
    let calls: u64 = recording.syscalls.iter().map(|s| s.calls).sum();
    let command_status = recording
        .target
        .exit_status
        .map(|s| format!(", command {s}"))
        .unwrap_or_default();
    eprintln!(
        "fdprof: wrote {} ({:.2}s, {}{command_status}): {calls} fd syscalls, {waits} lock waits, {} dropped",
        crate::escape::name(&args.output.to_string()),
        duration_ns as f64 / 1e9,
        end_reason.name(),
        recording.total_drops()
    );
    Ok(())
}

/// Polls until the recording ends, keeping the statistics sampler and the user symbolizer's map
/// snapshots current; a launched command's exit status goes into `target`.
fn record_until_the_end(
    args: &RecordArgs,
    profiler: &mut Profiler,
    resolved: &Resolved,
    launched: &mut Option<Launched>,
    target: &mut Target,
    user_syms: &mut UserSymbolizer,
    started: Instant,
) -> EndReason {
    let mut last_maps = Instant::now();
    loop {
        profiler.tick();
        std::thread::sleep(Duration::from_millis(20));
        let signals = stop_signals();
        if let Some(l) = launched {
            // A stopped command is recorded until it has exited, whatever it does meanwhile.
            let status = if signals > 0 {
                l.stop(signals, FORWARD_SIGNAL.load(Ordering::Relaxed))
            } else {
                l.try_wait()
            };
            if let Some(status) = status {
                target.exit_status = Some(status);
                return if signals > 0 {
                    EndReason::Interrupted
                } else {
                    EndReason::CommandExited
                };
            }
        } else if signals > 0 {
            return EndReason::Interrupted;
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            return EndReason::Duration;
        }
        if resolved.exited() {
            return EndReason::TargetExited;
        }
        if let Some(pid) = resolved.pid
            && last_maps.elapsed() >= Duration::from_secs(1)
        {
            user_syms.snapshot_maps(pid);
            last_maps = Instant::now();
        }
    }
}
