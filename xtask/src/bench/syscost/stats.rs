//! What fdprof's syscall programs cost a run by the kernel's own statistics (`bpf_stats`),
//! against empty programs on the same tracepoints: the syscost loop's dup+close (`syscost
//! held`) under each profiler, the statistics on throughout, each program's run time and run
//! count read while it is still loaded, before and after the loop. The statistics add two clock
//! reads to every run, the empty programs' too: what is left above the floor is fdprof's own.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::bench::bpf::{StatsWindow, bpf, prog_info};
use crate::bench::floor::EmptyPrograms;
use crate::bench::harness::daemon::Daemon;
use crate::bench::harness::process::cpu_secs;
use crate::bench::harness::stats::median;

const BPF_PROG_GET_NEXT_ID: i64 = 11;
const BPF_PROG_GET_FD_BY_ID: i64 = 13;

/// What runs the syscall programs while the loop runs.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Floor,
    /// `record -a` of another build (`--before PATH`): the same row, before a change.
    BeforeRecordAll,
    /// `record -p PID` of the loop: one process, no per-process rows.
    Record,
    /// `record -a`: every process, each with its rows.
    RecordAll,
    /// The daemon's full tier, `-a`.
    DaemonAll,
    /// The daemon's full tier, `--comm syscost` (a target set).
    DaemonComm,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Floor,
        Variant::Record,
        Variant::RecordAll,
        Variant::DaemonAll,
        Variant::DaemonComm,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Floor => "floor: empty progs",
            Variant::BeforeRecordAll => "record -a (--before)",
            Variant::Record => "record -p",
            Variant::RecordAll => "record -a",
            Variant::DaemonAll => "daemon -a --tier full",
            Variant::DaemonComm => "daemon --comm --tier full",
        }
    }
}

/// One run: ns a run of the sys_enter and sys_exit programs, and the loop's ns per fd syscall.
struct Run {
    enter: f64,
    exit: f64,
    loop_ns: f64,
}

/// A loaded program's cumulative statistics.
#[derive(Clone, Copy, Debug, Default)]
struct ProgStats {
    id: u32,
    run_time_ns: u64,
    run_cnt: u64,
}

/// Every loaded program whose name starts with `prefix` and holds `part` (the kernel keeps 15
/// bytes of a name: `fdprof_sys_enter` is `fdprof_sys_ente` there).
fn programs(prefix: &str, part: &str) -> Result<Vec<ProgStats>> {
    let mut out = Vec::new();
    let mut id = 0u32;
    loop {
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr).is_err() {
            break;
        }
        id = u32::from_ne_bytes(attr[4..8].try_into().unwrap());
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) else {
            continue; // unloaded meanwhile
        };
        let info = prog_info(fd);
        // SAFETY: the fd the kernel just gave us, closed once.
        unsafe { libc::close(fd) };
        let info = info.context("cannot read a program's statistics")?;
        if info.name.starts_with(prefix) && info.name.contains(part) {
            out.push(ProgStats {
                id,
                run_time_ns: info.run_time_ns,
                run_cnt: info.run_cnt,
            });
        }
    }
    Ok(out)
}

/// The sys_enter and sys_exit programs of `variant` (the floor's are named alike: the first
/// loaded is sys_enter's).
fn pair(variant: Variant) -> Result<Option<[ProgStats; 2]>> {
    if variant == Variant::Floor {
        let mut p = programs("fdprof_floor", "")?;
        p.sort_by_key(|s| s.id);
        return Ok((p.len() == 2).then(|| [p[0], p[1]]));
    }
    let enter = programs("fdprof_", "sys_ent")?;
    let exit = programs("fdprof_", "sys_exi")?;
    Ok(match (enter.as_slice(), exit.as_slice()) {
        ([e], [x]) => Some([*e, *x]),
        _ => None,
    })
}

/// The loop, started held: attached to by pid, let go by a line.
struct HeldLoop {
    child: Child,
    /// Closed on drop: the loop ends at end of input, wherever it waits.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl HeldLoop {
    fn start(bin: &Path) -> Result<Self> {
        let mut child = Command::new(bin)
            .arg("held")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot run the syscost loop")?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    /// Runs the loop: its ns per fd syscall.
    fn run(&mut self) -> Result<f64> {
        let stdin = self.stdin.as_mut().context("no stdin")?;
        stdin.write_all(b"go\n")?;
        stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .with_context(|| format!("syscost held printed {line:?}"))?;
        v["fd_syscall_ns"]
            .as_f64()
            .context("syscost held: no fd_syscall_ns")
    }
}

impl Drop for HeldLoop {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A profiler this bench started, stopped (SIGINT, then waited for) on drop.
enum Profiler {
    Floor(#[allow(dead_code)] EmptyPrograms),
    Record(Child),
    Daemon(#[allow(dead_code)] Daemon),
}

impl Profiler {
    fn pid(&self) -> Option<u32> {
        match self {
            Profiler::Floor(_) => None,
            Profiler::Record(child) => Some(child.id()),
            Profiler::Daemon(daemon) => Some(daemon.pid()),
        }
    }
}

/// Waits until the profiler has settled (its start-up pass over `/proc` done: under 5 % of a
/// CPU over half a second), at most 30 s: on two CPUs its start-up work slows the loop and
/// preempts the programs it times.
fn wait_settled(profiler: &Profiler) {
    let Some(pid) = profiler.pid() else { return };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let Ok(before) = cpu_secs(pid) else {
            return;
        };
        std::thread::sleep(Duration::from_millis(500));
        let Ok(after) = cpu_secs(pid) else {
            return;
        };
        if after - before <= 0.025 {
            return;
        }
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if let Profiler::Record(child) = self {
            // SAFETY: signalling the recorder this bench started.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

/// The builds measured: this one, and another (`--before PATH`).
struct Builds<'a> {
    fdprof: &'a Path,
    before: Option<&'a Path>,
}

fn start(variant: Variant, builds: &Builds, out: &Path, target: u32) -> Result<Profiler> {
    let fdprof = match variant {
        Variant::BeforeRecordAll => builds.before.context("no --before build")?,
        _ => builds.fdprof,
    };
    let record = |args: &[&str]| -> Result<Profiler> {
        let child = Command::new(fdprof)
            .arg("record")
            .args(args)
            .arg("-o")
            .arg(out.join("syscost-stats.data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run fdprof record")?;
        Ok(Profiler::Record(child))
    };
    let full = ["--tier", "full", "--interval", "1s"];
    Ok(match variant {
        Variant::Floor => Profiler::Floor(EmptyPrograms::attach(&["sys_enter", "sys_exit"])?),
        Variant::Record => record(&["-p", &target.to_string()])?,
        Variant::RecordAll | Variant::BeforeRecordAll => record(&["-a"])?,
        Variant::DaemonAll => Profiler::Daemon(Daemon::start_with(
            fdprof,
            out,
            &[&full[..], &["-a"]].concat(),
        )?),
        Variant::DaemonComm => Profiler::Daemon(Daemon::start_with(
            fdprof,
            out,
            &[&full[..], &["--comm", "syscost"]].concat(),
        )?),
    })
}

/// Waits until `variant`'s programs are loaded and their sys_exit has run (the statistics
/// are on, and this bench's own syscalls pass through it).
fn wait_running(variant: Variant) -> Result<()> {
    let started = Instant::now();
    loop {
        if pair(variant)?.is_some_and(|[_, exit]| exit.run_cnt > 0) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "{}: its syscall programs did not run within 60 s (sys_enter {:?}, sys_exit {:?})",
                variant.name(),
                programs("fdprof_", "sys_ent")?,
                programs("fdprof_", "sys_exi")?
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_once(variant: Variant, builds: &Builds, bin: &Path, out: &Path) -> Result<Run> {
    let mut held = HeldLoop::start(bin)?;
    let profiler = start(variant, builds, out, held.child.id())?;
    wait_running(variant)?;
    // Under --comm the loop joins at the daemon's next look through /proc.
    std::thread::sleep(Duration::from_secs(2));
    wait_settled(&profiler);
    let before = pair(variant)?.context("the programs went away")?;
    let loop_ns = held.run()?;
    let after = pair(variant)?.context("the programs went away")?;
    let per_run = |b: ProgStats, a: ProgStats| {
        let runs = a.run_cnt.saturating_sub(b.run_cnt).max(1);
        a.run_time_ns.saturating_sub(b.run_time_ns) as f64 / runs as f64
    };
    Ok(Run {
        enter: per_run(before[0], after[0]),
        exit: per_run(before[1], after[1]),
        loop_ns,
    })
}

/// The table: ns a run of each program, and what fdprof adds above the floor per fd syscall
/// (each fd syscall runs both programs once). `before`: another build's `record -a` too.
pub(crate) fn run(
    fdprof: &Path,
    before: Option<&Path>,
    bin: &Path,
    out: &Path,
    rounds: usize,
) -> Result<()> {
    let _stats = StatsWindow::start(None)?;
    let builds = Builds { fdprof, before };
    let mut variants = Variant::ALL.to_vec();
    if before.is_some() {
        variants.insert(1, Variant::BeforeRecordAll);
    }
    let mut got: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        for (i, &variant) in variants.iter().enumerate() {
            let r = run_once(variant, &builds, bin, out)?;
            eprintln!(
                "round {round}/{rounds}  {:<26} sys_enter {:.1} ns/run  sys_exit {:.1} ns/run  \
                 loop {:.0} ns",
                variant.name(),
                r.enter,
                r.exit,
                r.loop_ns
            );
            got[i].push(r);
        }
    }
    let medians: Vec<[f64; 3]> = got
        .into_iter()
        .map(|runs| {
            [
                median(&mut runs.iter().map(|r| r.enter).collect::<Vec<_>>()),
                median(&mut runs.iter().map(|r| r.exit).collect::<Vec<_>>()),
                median(&mut runs.iter().map(|r| r.loop_ns).collect::<Vec<_>>()),
            ]
        })
        .collect();
    let floor = medians[0];
    println!(
        "\nthe syscall programs by the kernel's statistics (bpf_stats on throughout), the loop's \
         dup+close, {rounds} interleaved rounds (medians)"
    );
    println!(
        "{:<26} {:>16} {:>16} {:>24} {:>10}",
        "variant", "sys_enter ns/run", "sys_exit ns/run", "own ns per fd syscall", "loop ns"
    );
    for (variant, [enter, exit, loop_ns]) in variants.iter().zip(&medians) {
        let own = match variant {
            Variant::Floor => "-".to_string(),
            _ => format!("{:.1}", enter - floor[0] + exit - floor[1]),
        };
        println!(
            "{:<26} {enter:>16.1} {exit:>16.1} {own:>24} {loop_ns:>10.0}",
            variant.name()
        );
    }
    Ok(())
}
