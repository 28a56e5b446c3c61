//! `fdprof record`: attach to a process, a thread, a command or the whole system; stop on
//! `-d`, Ctrl-C or the target's exit; write one recording atomically.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

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
    /// Stop after this long (e.g. 10s, 500ms, 2m); otherwise at Ctrl-C or when the target exits
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
    /// Launch and profile this command; recording stops when it exits
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

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// `/proc/PID/stat` fields after the command name.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s != "Z" && s != "X"))
}

fn tgid_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Checks that `id` is a live user task; returns its thread-group id.
fn check_task(id: u32, what: &str) -> Result<u32> {
    let Some(fields) = stat_fields(id) else {
        return Err(fatal(EXIT_USAGE, format!("no {what} with id {id}")));
    };
    const PF_KTHREAD: u64 = 0x0020_0000;
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    if flags & PF_KTHREAD != 0 {
        return Err(fatal(
            EXIT_USAGE,
            format!("{what} {id} is a kernel thread: it has no fd table of its own to profile"),
        ));
    }
    tgid_of(id).with_context(|| format!("cannot read /proc/{id}/status"))
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

/// A command forked and held before `exec` until the probes are attached.
struct Launched {
    pid: u32,
    gate: libc::c_int,
}

fn launch(command: &[String]) -> Result<Launched> {
    let args: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("command contains a NUL byte")?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the child only calls async-signal-safe functions before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // Child: wait for the go byte, then exec; on a closed pipe (fdprof gave up), exit.
        unsafe {
            libc::close(fds[1]);
            let mut b = 0u8;
            if libc::read(fds[0], (&mut b as *mut u8).cast(), 1) != 1 {
                libc::_exit(127);
            }
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::execvp(argv[0], argv.as_ptr());
            let msg = b"fdprof: error: cannot execute the command\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the read end.
    unsafe { libc::close(fds[0]) };
    Ok(Launched {
        pid: pid as u32,
        gate: fds[1],
    })
}

impl Launched {
    fn go(&self) {
        // SAFETY: writing one byte to our pipe; then closing it.
        unsafe {
            libc::write(self.gate, b"x".as_ptr().cast(), 1);
            libc::close(self.gate);
        }
    }

    /// Reaps the child if it exited; true when it has.
    fn exited(&self) -> bool {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) == self.pid as i32 }
    }

    /// Gives up on a command that never ran (closing the gate makes it exit) and reaps it.
    fn abandon(&self) {
        let mut status = 0;
        // SAFETY: our own pipe and child.
        unsafe {
            libc::close(self.gate);
            libc::waitpid(self.pid as i32, &mut status, 0);
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
    check_output(&args.output)?;

    let (filter, mut target) = if let Some(pid) = args.pid {
        let tgid = check_task(pid, "process")?;
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
            },
        )
    } else if let Some(tid) = args.tid {
        let tgid = check_task(tid, "thread")?;
        (
            Filter::Tid(tid),
            Target {
                kind: "tid".into(),
                pid: Some(tgid),
                tid: Some(tid),
                command: vec![],
                comm: comm_of(tid),
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
            },
        )
    };

    let btf = Btf::from_sys_fs()?;
    let offsets = KernelOffsets::from_btf(&btf)?;
    let aya_btf = aya::Btf::from_sys_fs().context("cannot read the kernel's BTF")?;
    // Read once: it is several MB, and both the stack symbolizer and the probe roles need it.
    let kallsyms =
        std::fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
    let kernel_syms = KernelSymbols::from_kallsyms(&kallsyms)?;
    let mut user_syms = UserSymbolizer::new();

    let launched = if target.kind == "command" {
        Some(launch(&args.command)?)
    } else {
        None
    };
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
            if let Some(l) = &launched {
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
    if let Some(l) = &launched {
        l.go();
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
        if STOP.load(Ordering::Relaxed) {
            break "interrupted";
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break "duration";
        }
        match (&launched, args.pid.or(args.tid)) {
            (Some(l), _) if l.exited() => break "command_exited",
            (None, Some(id)) if !alive(id) => break "target_exited",
            _ => {}
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
    if let Some(pid) = user_pid.filter(|&p| alive(p)) {
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
    eprintln!(
        "fdprof: wrote {} ({:.2}s, {end_reason}): {calls} fd syscalls, {waits} lock waits, {} dropped",
        args.output.display(),
        duration_ns as f64 / 1e9,
        recording.total_drops()
    );
    Ok(())
}
