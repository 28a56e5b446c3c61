//! `cargo xtask bench daemon --only targets`: what the daemon costs against how many processes
//! it follows. It loads one program set whatever that number (issue 27); it used to load one
//! per process, and 32 idle targets then slowed every syscall on the host to 0.29 of bare.
//!
//! For each N of `--targets`: N idle `sleep` processes named `fdpd-idle-N`, all of them started
//! at once and running throughout, each N's followed by `fdprof daemon --comm fdpd-idle-N
//! --interval 1s`. Per N, from one daemon each:
//! - the BPF programs the daemon holds (its fds on `anon_inode:bpf-prog`): the same for every N;
//! - the daemon's CPU over 20 s with only the idle targets, and its VmRSS then;
//! - the programs' run time per syscall while a target is busy (one opensock named
//!   `fdpd-idle-N`), and per fd syscall of that target (an estimate: see [`busy_cost`]);
//! - what a new process costs the daemon to take on: its CPU over `JOINERS` short opensock runs
//!   of that name, one after another, beyond its idle rate, per process ([`join_cost`]).
//!
//! Then an unrelated process's throughput (opensock, not a target) with the daemon, to the bare
//! runs without it just before and after (the daemon's programs see every syscall on the host),
//! and what the daemon adds to one fd syscall of an unrelated single-threaded loop (the
//! syscall-cost loop of `bench overhead --only syscost`, the fastest of `LOOP_RUNS` runs), in
//! ns, and that loop's speed to bare.
//! Both ratios are checked against the first N's; the loop's moves by a percent or two from
//! round to round where opensock's (two threads on two CPUs, beside the daemon) moves by ±8 %.
//! Each round visits every N in turn, starting one N further each round, so that a drift of the
//! host over the minutes of the bench weighs on every N alike.
//!
//! The table goes to stdout, the same as JSON to target/bench/daemon/targets.json.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fdprof_figures::Report;
use serde_json::{Value, json};

use super::WORKLOAD_SECS;
use crate::bench::harness::args::list_arg;
use crate::bench::harness::daemon::Daemon;
use crate::bench::harness::process::{Children, CpuSince, named_copy, rss_kb, spawn_idle};
use crate::bench::harness::stats::{median, range};
use crate::bench::harness::workloads::opensock;
use crate::bench::syscost;

const DEFAULT_COUNTS: [usize; 3] = [1, 32, 256];
const IDLE_SECS: u64 = 20;
/// The busy target runs this long; the report taken just before its end covers
/// `COST_WINDOW_SECS` intervals, all within its run.
const BUSY_SECS: u64 = 14;
/// At least one whole period of the daemon's run-time statistics (250 ms on of every 10 s).
const COST_WINDOW_SECS: u64 = 10;
/// Runs of the unrelated fd-syscall loop per measurement, the fastest kept.
const LOOP_RUNS: usize = 3;
/// An unrelated process may lose at most 5 % more at N than at the first N.
const RATIO_FLOOR: f64 = 0.95;
/// Issue 27's bounds at N = 256, checked at the largest N: the daemon's idle CPU (of one CPU)
/// and VmRSS.
const CPU_MAX: f64 = 0.02;
const RSS_MAX_KB: u64 = 150 * 1024;
/// Short-lived targets started one after another, and the daemon's CPU bound per new one (its
/// symbolization of their lock-wait stacks included), in ms.
const JOINERS: usize = 20;
const JOIN_CPU_MAX_MS: f64 = 10.0;

/// The comm of N's targets, idle and busy (15 bytes at most for any N below 10^5).
fn name_of(n: usize) -> String {
    format!("fdpd-idle-{n}")
}

/// `--targets N,N,…`: the numbers of idle targets to measure, else 1,32,256.
pub(crate) fn counts_arg(args: &[String]) -> Result<Vec<usize>> {
    const USAGE: &str = "--targets takes numbers of targets, comma-separated (e.g. 1,32,256)";
    let Some(counts) = list_arg(args, "--targets", USAGE)? else {
        return Ok(DEFAULT_COUNTS.to_vec());
    };
    counts
        .into_iter()
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if (1..100_000).contains(&n) => Ok(n),
            _ => bail!("--targets: {s:?} is not a whole number from 1 to 99999"),
        })
        .collect()
}

/// N's figures.
struct Row {
    n: usize,
    programs: usize,
    ratios: Vec<f64>,
    /// ns the daemon added to an unrelated process's fd syscall, each round.
    added_ns: Vec<f64>,
    /// That loop's speed with the daemon to bare (bare ns / ns with it), each round.
    loop_ratios: Vec<f64>,
    /// The daemon's CPU over the idle seconds, of one CPU.
    cpu: f64,
    /// The daemon's CPU per new process, beyond its idle rate, ms.
    join_ms: f64,
    rss_kb: u64,
    busy: Busy,
}

/// The programs' cost while a target was busy.
struct Busy {
    /// Their run time per syscall on the host (a run of sys_enter), ns.
    ns_per_syscall: Option<f64>,
    /// Their run time per fd syscall of the target, its calls scaled to the statistics' share
    /// of the time, ns.
    ns_per_fd_syscall: Option<f64>,
    /// Each program's ns per run.
    ns_per_run: BTreeMap<String, f64>,
}

impl Row {
    fn ratio(&self) -> f64 {
        median(&mut self.ratios.clone())
    }

    fn added_ns(&self) -> f64 {
        median(&mut self.added_ns.clone())
    }

    fn loop_ratio(&self) -> f64 {
        median(&mut self.loop_ratios.clone())
    }

    fn range(&self) -> (f64, f64) {
        range(&self.ratios)
    }
}

pub(crate) fn run(fdprof: &Path, dir: &Path, rounds: usize, counts: &[usize]) -> Result<()> {
    let sleep_dir = dir.join("sleep");
    std::fs::create_dir_all(&sleep_dir)?;
    // Every N's idle targets, all running until the end.
    let mut idle = Children(Vec::with_capacity(counts.iter().sum()));
    for &n in counts {
        let sleep = named_copy(Path::new("/bin/sleep"), &sleep_dir, &name_of(n))?;
        spawn_idle(&sleep, n, "3600", &mut idle)?;
    }
    let mut rows = Vec::new();
    for &n in counts {
        eprintln!("==> {n} idle targets: the daemon alone");
        rows.push(alone(fdprof, dir, n)?);
    }
    eprintln!("==> an unrelated process, each N in turn, {rounds} rounds");
    let syscost_loop = vec![syscost::compile(dir)?.display().to_string()];
    // The fastest of a few runs: what other tenants of the host add only slows a run down.
    let fd_ns = || -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..LOOP_RUNS {
            best = best.min(syscost::run_once(&syscost_loop)?.1);
        }
        Ok(best)
    };
    let duration = ["-d", WORKLOAD_SECS];
    let mut before = (opensock(fdprof, &duration, None)?, fd_ns()?);
    for round in 0..rounds {
        for k in 0..rows.len() {
            let row = &mut rows[(round + k) % counts.len()];
            let daemon = Daemon::start(fdprof, dir, &[name_of(row.n)], &["--interval", "1s"])?;
            daemon.wait_attached(row.n)?;
            let under = (opensock(fdprof, &duration, None)?, fd_ns()?);
            drop(daemon);
            let after = (opensock(fdprof, &duration, None)?, fd_ns()?);
            let ratio = under.0 / ((before.0 + after.0) / 2.0);
            let bare_ns = (before.1 + after.1) / 2.0;
            let added = under.1 - bare_ns;
            let loop_ratio = bare_ns / under.1;
            eprintln!(
                "    round {}/{rounds}  N={:<5} daemon {:>10.0} ops/s  ratio {ratio:.3}  \
                 (bare {:.0}, {:.0}); fd syscall +{added:.0} ns (loop {loop_ratio:.3})",
                round + 1,
                row.n,
                under.0,
                before.0,
                after.0,
            );
            row.ratios.push(ratio);
            row.added_ns.push(added);
            row.loop_ratios.push(loop_ratio);
            before = after;
        }
    }
    drop(idle);
    report(&rows, rounds, &dir.join("targets.json"))
}

/// N's figures from one daemon following its N idle targets, and then a busy one.
fn alone(fdprof: &Path, dir: &Path, n: usize) -> Result<Row> {
    let name = name_of(n);
    let busy: PathBuf = named_copy(fdprof, dir, &name)?;
    let daemon = Daemon::start(
        fdprof,
        dir,
        std::slice::from_ref(&name),
        &["--interval", "1s"],
    )?;
    daemon.wait_attached(n)?;
    let programs = programs_held(daemon.pid())?;
    let idle = CpuSince::start(daemon.pid())?;
    std::thread::sleep(Duration::from_secs(IDLE_SECS));
    let cpu = idle.share()?;
    let rss_kb = rss_kb(daemon.pid())?;
    eprintln!(
        "    {programs} programs held; idle: daemon CPU {:.2}%, VmRSS {rss_kb} kB",
        100.0 * cpu
    );
    let busy_figures = busy_cost(&daemon, &busy)?;
    let join_ms = join_cost(&daemon, &busy, cpu)?;
    let _ = std::fs::remove_file(dir.join(&name));
    Ok(Row {
        n,
        programs,
        ratios: Vec::new(),
        added_ns: Vec::new(),
        loop_ratios: Vec::new(),
        cpu,
        join_ms,
        rss_kb,
        busy: busy_figures,
    })
}

/// The daemon's CPU per process taken on: `JOINERS` opensock runs named like the targets
/// (300 ms each, two threads, so lock waits with user stacks to symbolize), one after another,
/// then two intervals for the daemon to read and symbolize what they left. Its idle rate
/// (`idle_cpu`, of one CPU) over the same time is taken off.
fn join_cost(daemon: &Daemon, busy: &Path, idle_cpu: f64) -> Result<f64> {
    let cpu = CpuSince::start(daemon.pid())?;
    for _ in 0..JOINERS {
        let status = Command::new(busy)
            .args([
                "workload", "opensock", "-t", "2", "-n", "500", "-d", "300ms",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot run a joining target")?;
        if !status.success() {
            bail!("a joining target failed ({status})");
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu.beyond(idle_cpu)?;
    let per_ms = 1e3 * spent.max(0.0) / JOINERS as f64;
    eprintln!("    {JOINERS} short targets taken on: {per_ms:.2} ms of daemon CPU each");
    Ok(per_ms)
}

/// The BPF programs `pid` holds: its fds on `anon_inode:bpf-prog`.
fn programs_held(pid: u32) -> Result<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("cannot list /proc/{pid}/fd"))?;
    Ok(fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|link| link.as_os_str() == "anon_inode:bpf-prog")
        .count())
}

/// The programs' cost while a target is busy: opensock named like the idle targets (which make
/// no syscalls), then the daemon-wide report of its last `COST_WINDOW_SECS`. The kernel counts
/// run time only while its statistics are on (250 ms of every 10 s). Within those windows
/// sys_enter runs once per syscall on the host, most of them opensock's fd syscalls: run time
/// per sys_enter run is exact. Per fd syscall of the target, its calls must be scaled to the
/// windows' share of the time, which assumes a steady rate: on a busy host that is off by half.
fn busy_cost(daemon: &Daemon, busy: &Path) -> Result<Busy> {
    let run = format!("{BUSY_SECS}s");
    let workload = Children(vec![
        Command::new(busy)
            .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d", &run])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run the busy target")?,
    ]);
    std::thread::sleep(Duration::from_secs(BUSY_SECS - 1));
    let path = format!("/report.json?seconds={COST_WINDOW_SECS}");
    let report: Report = serde_json::from_str(&daemon.get(&path)?)
        .with_context(|| format!("cannot read the daemon's {path}"))?;
    drop(workload);
    let cost = &report.own_cost;
    // The series of /metrics' fdprof_program_run_seconds_total, over the window.
    let mut programs = cost.programs.clone();
    programs.sort_by_key(|p| std::cmp::Reverse(p.run_time_ns));
    for p in &programs {
        let ns = p
            .ns_per_run
            .map_or("-".into(), |ns| format!("{ns:.0} ns/run"));
        eprintln!(
            "    {:<22} {:>9.3} ms {:>9} runs {ns:>12}",
            p.name,
            p.run_time_ns as f64 / 1e6,
            p.run_count
        );
    }
    let ns_per_run = programs
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.ns_per_run?)))
        .collect();
    let entries = programs
        .iter()
        .find(|p| p.name.ends_with("sys_enter"))
        .map_or(0, |p| p.run_count);
    let calls: u64 = report.syscalls.iter().map(|s| s.calls).sum();
    let (window_ns, duration_ns) = (cost.stats_window_ns, report.header.duration_ns);
    let sampled = (window_ns > 0 && duration_ns > 0)
        .then(|| calls as f64 * window_ns as f64 / duration_ns as f64)
        .filter(|&c| c > 0.0);
    eprintln!(
        "    busy target: {calls} fd syscalls in {:.1} s, ~{:.0} of them in the {:.0} ms of \
         statistics, when sys_enter ran {entries} times",
        duration_ns as f64 / 1e9,
        sampled.unwrap_or(0.0),
        window_ns as f64 / 1e6
    );
    let per = |n: f64| cost.run_time_ns as f64 / n;
    Ok(Busy {
        ns_per_syscall: (entries > 0).then(|| per(entries as f64)),
        ns_per_fd_syscall: sampled.map(per),
        ns_per_run,
    })
}

/// The table and the checks on stdout, the same as JSON in `json_path`.
fn report(rows: &[Row], rounds: usize, json_path: &Path) -> Result<()> {
    print_table(rows, rounds);
    let checks = checks(rows);
    for (what, pass) in &checks {
        println!("{} {what}", if *pass { "PASS" } else { "FAIL" });
    }
    let json = json!({
        "daemon": "--comm fdpd-idle-N --interval 1s",
        "workload": format!("opensock -t 2 -n 4000 -d {WORKLOAD_SECS}"),
        "rounds": rounds,
        "idle_secs": IDLE_SECS,
        "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
        "checks": checks.iter().map(|(what, pass)| json!({"check": what, "pass": pass}))
            .collect::<Vec<_>>(),
    });
    std::fs::write(json_path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("cannot write {json_path:?}"))?;
    eprintln!("==> {}", json_path.display());
    Ok(())
}

fn print_table(rows: &[Row], rounds: usize) {
    println!(
        "\nfdprof daemon --comm fdpd-idle-N --interval 1s, N idle targets (sleep); ratio: \
         opensock -t 2 -n 4000 -d {WORKLOAD_SECS}, not a target, with the daemon to the bare \
         runs just before and after, {rounds} rounds each visiting every N (medians)"
    );
    println!(
        "{:>6} {:>9} {:>22} {:>11} {:>6} {:>11} {:>8} {:>8} {:>16}",
        "N",
        "programs",
        "ratio (range)",
        "fd syscall",
        "loop",
        "daemon CPU",
        "join ms",
        "RSS MB",
        "busy ns/syscall"
    );
    for r in rows {
        let (lo, hi) = r.range();
        let ns = r
            .busy
            .ns_per_syscall
            .map_or("-".into(), |ns| format!("{ns:.0}"));
        println!(
            "{:>6} {:>9} {:>22} {:>11} {:>6.3} {:>10.2}% {:>8.2} {:>8.1} {:>16}",
            r.n,
            r.programs,
            format!("{:.3} ({lo:.3}–{hi:.3})", r.ratio()),
            format!("+{:.0} ns", r.added_ns()),
            r.loop_ratio(),
            100.0 * r.cpu,
            r.join_ms,
            r.rss_kb as f64 / 1024.0,
            ns
        );
    }
    println!(
        "(fd syscall: what the daemon adds to one dup or close of an unrelated loop; loop: that \
         loop's speed with the daemon to bare; join ms: the daemon's CPU per short-lived target \
         taken on; daemon CPU: \
         of one CPU over {IDLE_SECS} s idle; busy ns/syscall: the programs' run time per syscall \
         while one opensock target is busy, from the kernel's sampled statistics)"
    );
}

/// One N's entry in the JSON.
fn row_json(r: &Row) -> Value {
    let (lo, hi) = r.range();
    json!({
        "targets": r.n,
        "programs_held": r.programs,
        "ratio_median": r.ratio(),
        "ratio_min": lo,
        "ratio_max": hi,
        "ratios": r.ratios,
        "unrelated_fd_syscall_added_ns_median": r.added_ns(),
        "unrelated_fd_syscall_added_ns": r.added_ns,
        "unrelated_fd_loop_ratio_median": r.loop_ratio(),
        "unrelated_fd_loop_ratios": r.loop_ratios,
        "daemon_cpu_share_idle": r.cpu,
        "daemon_cpu_ms_per_joining_target": r.join_ms,
        "rss_kb": r.rss_kb,
        "program_ns_per_syscall_busy": r.busy.ns_per_syscall,
        "program_ns_per_target_fd_syscall": r.busy.ns_per_fd_syscall,
        "program_ns_per_run": r.busy.ns_per_run,
    })
}

/// The requirements, each a line and whether it holds: findings, not errors.
fn checks(rows: &[Row]) -> Vec<(String, bool)> {
    let (Some(first), Some(last)) = (rows.first(), rows.iter().max_by_key(|r| r.n)) else {
        return Vec::new();
    };
    let programs: Vec<String> = rows.iter().map(|r| r.programs.to_string()).collect();
    let mut out = vec![(
        format!(
            "programs held the same for every N ({})",
            programs.join(", ")
        ),
        rows.iter().all(|r| r.programs == first.programs),
    )];
    for r in &rows[1..] {
        out.push((
            format!(
                "opensock throughput: ratio(N={}) {:.3} >= {RATIO_FLOOR} × ratio(N={}) {:.3}",
                r.n,
                r.ratio(),
                first.n,
                first.ratio()
            ),
            r.ratio() >= RATIO_FLOOR * first.ratio(),
        ));
        out.push((
            format!(
                "unrelated fd-syscall loop: ratio(N={}) {:.3} >= {RATIO_FLOOR} × ratio(N={}) {:.3} \
                 (+{:.0} ns against +{:.0} ns per fd syscall)",
                r.n,
                r.loop_ratio(),
                first.n,
                first.loop_ratio(),
                r.added_ns(),
                first.added_ns(),
            ),
            r.loop_ratio() >= RATIO_FLOOR * first.loop_ratio(),
        ));
    }
    let join_max = rows.iter().map(|r| r.join_ms).fold(0.0, f64::max);
    out.push((
        format!("daemon CPU per new target, at most {join_max:.2} ms <= {JOIN_CPU_MAX_MS} ms"),
        join_max <= JOIN_CPU_MAX_MS,
    ));
    out.push((
        format!(
            "daemon CPU at N={} {:.2}% <= {:.0}%",
            last.n,
            100.0 * last.cpu,
            100.0 * CPU_MAX
        ),
        last.cpu <= CPU_MAX,
    ));
    out.push((
        format!(
            "RSS at N={} {:.1} MB <= {} MB",
            last.n,
            last.rss_kb as f64 / 1024.0,
            RSS_MAX_KB / 1024
        ),
        last.rss_kb <= RSS_MAX_KB,
    ));
    out
}
