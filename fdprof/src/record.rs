//! `fdprof record`: attach to a process, a thread, a command or the whole system; stop on
//! `-d`, Ctrl-C or the target's exit; write one recording atomically.

mod launch;
mod task;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::collect::{
    session::{AttachOptions, Filter, KernelFunctions, Session},
    snapshot,
};
use crate::error::{EXIT_USAGE, fatal};
use crate::model::{
    build::{self, Symbolizers},
    recording::{self, OwnCost, Recording, Target},
};
use crate::privileges::{self, Capability};
use crate::probe::{
    btf::Btf, capabilities::kernel_release, kallsyms::Kallsyms, offsets::KernelOffsets, roles::Mode,
};
use crate::symbolize::{KernelSymbols, UserSymbolizer};
use launch::Program;
use task::{TaskKind, check_task, comm_of, process_alive, thread_alive};

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
    /// Stop after this long (e.g. 10s, 500ms, 2m); otherwise at Ctrl-C or when the target exits.
    /// A command still running then is sent SIGTERM (SIGKILL 5 s later)
    #[arg(short, long, value_parser = crate::duration::parse_duration)]
    pub duration: Option<Duration>,
    /// Where to write the recording
    #[arg(short, long, default_value = "fdprof.data")]
    pub output: PathBuf,
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

fn check_output(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).context("bad output path")?;
    // SAFETY: valid C string.
    if !dir.is_dir() || unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(fatal(
            EXIT_USAGE,
            format!(
                "cannot write {}: {} is not a writable directory",
                path.display(),
                dir.display()
            ),
        ));
    }
    if path.is_dir() {
        return Err(fatal(
            EXIT_USAGE,
            format!("cannot write {}: it is a directory", path.display()),
        ));
    }
    Ok(())
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
    check_output(&args.output)?;

    let (filter, mut target) = if let Some(pid) = args.pid {
        let tgid = check_task(pid, TaskKind::Process)?;
        if tgid != pid {
            return Err(fatal(
                EXIT_USAGE,
                format!(
                    "{pid} is a thread of process {tgid}: use -p {tgid}, or -t {pid} for this thread alone"
                ),
            ));
        }
        (
            Filter::Tgid(pid),
            Target {
                kind: "pid".into(),
                pid: Some(pid),
                tid: None,
                command: vec![],
                comm: comm_of(pid),
                exit_status: None,
            },
        )
    } else if let Some(tid) = args.tid {
        let tgid = check_task(tid, TaskKind::Thread)?;
        (
            Filter::Tid(tid),
            Target {
                kind: "tid".into(),
                pid: Some(tgid),
                tid: Some(tid),
                command: vec![],
                comm: comm_of(tid),
                exit_status: None,
            },
        )
    } else if args.all {
        (
            Filter::All,
            Target {
                kind: "all".into(),
                pid: None,
                tid: None,
                command: vec![],
                comm: None,
                exit_status: None,
            },
        )
    } else {
        (
            Filter::All,
            Target {
                kind: "command".into(),
                pid: None,
                tid: None,
                command: args.command.clone(),
                comm: None,
                exit_status: None,
            },
        )
    };

    let program = if target.kind == "command" {
        Some(Program::resolve(&args.command)?)
    } else {
        None
    };

    let btf = Btf::from_sys_fs()?;
    let offsets = KernelOffsets::from_btf(&btf)?;
    let aya_btf = aya::Btf::from_sys_fs().context("cannot read the kernel's BTF")?;
    // Read once: it is several MB, and both the stack symbolizer and the probe roles need it.
    let kallsyms =
        std::fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
    let kernel_syms = KernelSymbols::from_kallsyms(&kallsyms)?;
    let mut user_syms = UserSymbolizer::new();

    // Forked from the main thread: the parent-death signal follows the thread that forked.
    let mut launched = program.as_ref().map(launch::launch).transpose()?;
    let filter = match &launched {
        Some(l) => {
            target.pid = Some(l.pid);
            Filter::Tgid(l.pid)
        }
        None => filter,
    };
    let functions = KernelFunctions::resolve(&btf, &Kallsyms::parse(&kallsyms));
    drop(kallsyms);
    let forced = match args.mode {
        ModeArg::Auto => None,
        ModeArg::Fentry => Some(Mode::Fentry),
        ModeArg::Kprobe => Some(Mode::Kprobe),
        ModeArg::Tracepoint => Some(Mode::Tracepoint),
    };
    let attach = AttachOptions {
        forced,
        lock_only: args.lock_only,
    };
    let mut session = match Session::attach(filter, &offsets, &aya_btf, &functions, attach) {
        Ok(s) => s,
        Err(e) => {
            if let Some(l) = launched {
                l.abandon();
            }
            return Err(e);
        }
    };
    let cpu_start = cpu_time_ns();
    let started = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let user_pid = target.pid;
    if let Some(pid) = user_pid {
        user_syms.snapshot_maps(pid);
    }
    if let Some(l) = &mut launched {
        // An exec that fails (detaching as the session drops) leaves nothing to record.
        l.go()?;
    }
    // The allocator's mode names the recording's mode (the role the product is about); with
    // --lock-only, the slow path's.
    let lead_role = if args.lock_only {
        "lock_slowpath"
    } else {
        "allocate"
    };
    let overall_mode = session
        .modes
        .get(lead_role)
        .and_then(|m| m.split_whitespace().next())
        .unwrap_or("tracepoint")
        .to_string();
    eprintln!(
        "fdprof: recording {} ({} mode{}); Ctrl-C to stop",
        target.describe(),
        overall_mode,
        args.duration
            .map(|d| format!(", for {d:?}"))
            .unwrap_or_default()
    );

    let mut last_maps = Instant::now();
    let end_reason = loop {
        session.stats.tick(started.elapsed());
        std::thread::sleep(Duration::from_millis(20));
        let signals = stop_signals();
        if let Some(l) = &mut launched {
            // A stopped command is recorded until it has exited, whatever it does meanwhile.
            let status = if signals > 0 {
                l.stop(signals, FORWARD_SIGNAL.load(Ordering::Relaxed))
            } else {
                l.try_wait()
            };
            if let Some(status) = status {
                target.exit_status = Some(status);
                break if signals > 0 {
                    "interrupted"
                } else {
                    "command_exited"
                };
            }
        } else if signals > 0 {
            break "interrupted";
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break "duration";
        }
        let exited = match (args.pid, args.tid) {
            (Some(pid), _) => !process_alive(pid),
            (None, Some(tid)) => !thread_alive(tid),
            _ => false,
        };
        if exited {
            break "target_exited";
        }
        if let Some(pid) = user_pid
            && last_maps.elapsed() >= Duration::from_secs(1)
        {
            user_syms.snapshot_maps(pid);
            last_maps = Instant::now();
        }
    };
    let duration_ns = started.elapsed().as_nanos() as u64;
    session.stats.stop();
    let stats_window_ns = session.stats.sampled.as_nanos() as u64;
    if let Some(pid) = user_pid.filter(|&p| process_alive(p)) {
        user_syms.snapshot_maps(pid);
    }

    let snap = snapshot::read(&session.ebpf)?;
    let costs = session.program_costs();
    let modes = session.modes.clone();
    let direct = modes
        .values()
        .any(|m| m.starts_with("fentry") || m.starts_with("kprobe"));
    let functions = build::functions(&snap, direct);
    let mut notes = session.notes.clone();
    if stats_window_ns == 0 {
        // BPF_ENABLE_STATS takes CAP_SYS_ADMIN, which CAP_BPF and CAP_PERFMON do not give.
        notes.push(
            "BPF run-time statistics could not be switched on (that takes CAP_SYS_ADMIN): \
             the programs' run times were not measured"
                .into(),
        );
    }
    drop(session); // detach before the slow part
    if let Some(l) = &mut launched
        && target.exit_status.is_none()
    {
        // The recording ended first (-d): the command must not outlive fdprof.
        target.exit_status = Some(l.terminate(stop_signals));
    }
    notes.push(
        "aggregated in the kernel: no ring buffer, so nothing is lost to a full buffer".into(),
    );
    if target.kind == "all" {
        notes.push("user stacks are not symbolized in system-wide mode".into());
    }

    let mut sym = Symbolizers {
        kernel: &kernel_syms,
        user: &mut user_syms,
        user_pid: if target.kind == "all" { None } else { user_pid },
        raw_addrs: args.raw_addrs,
    };
    let recording = Recording {
        format: recording::FORMAT.into(),
        version: recording::VERSION,
        fdprof_version: env!("CARGO_PKG_VERSION").into(),
        kernel_release: kernel_release(),
        target,
        started_unix_ms,
        duration_ns,
        end_reason: end_reason.into(),
        mode: overall_mode,
        modes,
        raw_addrs: args.raw_addrs,
        contention: build::contention_sites(&snap, &mut sym),
        stack_walks: build::stack_walks(&snap),
        functions,
        syscalls: build::syscalls(&snap),
        scan: build::scan(&snap),
        table: build::table(&snap),
        drops: build::drops(&snap, &costs),
        own_cost: OwnCost {
            programs: costs,
            collector_cpu_ns: cpu_time_ns().saturating_sub(cpu_start),
            stats_window_ns,
        },
        notes,
    };
    recording.write(&args.output)?;
    let waits: u64 = recording.contention.iter().map(|c| c.count).sum();
    let calls: u64 = recording.syscalls.iter().map(|s| s.calls).sum();
    let command_status = recording
        .target
        .exit_status
        .map(|s| format!(", command {}", s.describe()))
        .unwrap_or_default();
    eprintln!(
        "fdprof: wrote {} ({:.2}s, {end_reason}{command_status}): {calls} fd syscalls, {waits} lock waits, {} dropped",
        args.output.display(),
        duration_ns as f64 / 1e9,
        recording.total_drops()
    );
    Ok(())
}
