//! `cargo xtask bench daemon`: what `fdprof daemon` costs and how it holds up.
//! 1. Overhead: opensock -t 2 bare and with the daemon attached to it (`--comm`, 1 s
//!    intervals), each daemon run between two bare runs; the ratio to the bare runs around, and
//!    the daemon's CPU as a share of one CPU while the workload ran.
//!    The runs are short, so that CPU includes attaching (loading and verifying the programs).
//! 2. Scrapes: 20 target names (one opensock process each), then `/metrics` fetched 200 times,
//!    one every 100 ms (the figures are made once an interval, so about one scrape in ten makes
//!    them): latency p50/p90/p99/max, with the live stacks the daemon held.
//! 3. Memory: VmRSS every 10 s for `--minutes N` (default 1) while the daemon follows the
//!    largest N of `--targets` processes of one name (one opensock, the rest idle), and the
//!    daemon's CPU over that steady state.
//! 4. Targets: for each N of `--targets`, N idle processes followed at once; the programs the
//!    daemon holds, an unrelated process's slowdown, the daemon's idle CPU and memory, and the
//!    programs' cost per syscall while a target is busy (`bench_daemon_targets`).
//!
//! 5. Tiers: nginx and an unrelated socket/close loop under the daemon at rest and in full
//!    (`bench_tiers`).
//!
//! Options: `--rounds N` (default 5), `--minutes N`, `--targets 1,32,256` (the default),
//! `--only overhead,scrapes,memory,targets,tiers`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::bench_daemon_targets as targets;
use crate::run::{build_release, cpu_secs, fdprof_release, median, minutes_arg, root, rss_kb};

/// The comm of the benchmarked workload (a copy of fdprof under this name).
const NAME: &str = "fdpd-bench";
pub(crate) const WORKLOAD_SECS: &str = "4s";
const PHASES: [&str; 5] = ["overhead", "scrapes", "memory", "targets", "tiers"];
const SCRAPE_TARGETS: usize = 20;
const SCRAPES: usize = 200;

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = crate::run::rounds_arg(args, 5)?;
    let minutes = minutes_arg(args)?;
    let counts = targets::counts_arg(args)?;
    let only = only_arg(args)?;
    build_release()?;
    let fdprof = fdprof_release();
    let dir = root().join("target/bench/daemon");
    std::fs::create_dir_all(&dir)?;
    let wanted = |phase: &str| only.as_ref().is_none_or(|o| o.iter().any(|p| p == phase));
    if wanted("overhead") {
        overhead(&fdprof, &dir, rounds)?;
    }
    if wanted("scrapes") {
        scrapes(&fdprof, &dir)?;
    }
    if wanted("memory") {
        let followed = counts.iter().copied().max().unwrap_or(1);
        memory(&fdprof, &dir, minutes, followed)?;
    }
    if wanted("targets") {
        targets::run(&fdprof, &dir, rounds, &counts)?;
    }
    if wanted("tiers") {
        crate::bench_tiers::run(&fdprof, &dir, rounds)?;
    }
    Ok(())
}

/// `--only PHASE,PHASE`: the phases to run (all by default).
fn only_arg(args: &[String]) -> Result<Option<Vec<String>>> {
    let Some(i) = args.iter().position(|a| a == "--only") else {
        return Ok(None);
    };
    let phases: Vec<String> = args
        .get(i + 1)
        .context("--only takes phases, comma-separated")?
        .split(',')
        .map(str::to_string)
        .collect();
    if let Some(p) = phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
        bail!("--only: no phase {p:?} (phases: {})", PHASES.join(", "));
    }
    Ok(Some(phases))
}

/// Starts `n` idle processes of `sleep` (a copy named as the targets are) for `secs`, each put
/// in `into` as it starts, so that whoever owns `into` ends those started before a failure.
pub(crate) fn spawn_idle(sleep: &Path, n: usize, secs: &str, into: &mut Vec<Child>) -> Result<()> {
    for _ in 0..n {
        into.push(
            Command::new(sleep)
                .arg(secs)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {sleep:?}"))?,
        );
    }
    Ok(())
}

/// A copy of `program` named `name`: a process run from it has that comm.
/// One `opensock -t 2` under each of `names` (a copy of `fdprof` by that name) for `duration`,
/// at the lowest priority: dozens of busy threads on this host would otherwise starve the
/// daemon, and its latency would measure the scheduler, not the daemon.
pub(crate) fn niced_opensock(
    fdprof: &Path,
    dir: &Path,
    names: &[String],
    duration: &str,
) -> Result<Vec<std::process::Child>> {
    let mut workloads = Vec::new();
    for name in names {
        let program = named_copy(fdprof, dir, name)?;
        workloads.push(
            Command::new("nice")
                .args(["-n", "19"])
                .arg(program)
                .args([
                    "workload", "opensock", "-t", "2", "-n", "500", "-d", duration,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot run a workload")?,
        );
    }
    Ok(workloads)
}

pub(crate) fn named_copy(program: &Path, dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    std::fs::copy(program, &path)
        .with_context(|| format!("cannot copy {program:?} to {path:?}"))?;
    Ok(path)
}

fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A daemon started for the bench, stopped (SIGTERM) on drop.
pub(crate) struct Daemon {
    child: Child,
    addr: SocketAddr,
    /// The `Authorization` header its endpoints need (`--token-file`).
    auth: String,
}

impl Daemon {
    /// `fdprof daemon --comm COMMS`, with `extra` options before them.
    pub(crate) fn start(
        fdprof: &Path,
        dir: &Path,
        comms: &[String],
        extra: &[&str],
    ) -> Result<Self> {
        let mut args: Vec<&str> = extra.to_vec();
        args.push("--comm");
        args.extend(comms.iter().map(String::as_str));
        Self::start_with(fdprof, dir, &args)
    }

    /// `fdprof daemon ARGS` on a free loopback port with a token of its own, once `/healthz`
    /// answers.
    pub(crate) fn start_with(fdprof: &Path, dir: &Path, args: &[&str]) -> Result<Self> {
        let addr = free_port()?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        // The daemon's token: a root-only file, as `--token-file` requires.
        let token_file = dir.join("daemon.token");
        let mut random = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&token_file, format!("{token}\n"))?;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))?;
        let auth = format!("Authorization: Bearer {token}");
        let child = Command::new(fdprof)
            .args(["daemon", "--listen", &addr.to_string(), "--token-file"])
            .arg(&token_file)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start fdprof daemon")?;
        let daemon = Daemon { child, addr, auth };
        let started = Instant::now();
        while daemon.get("/healthz").is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the daemon did not answer within 30 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(daemon)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn get(&self, path: &str) -> Result<String> {
        get(self.addr, &self.auth, path)
    }

    /// The `Authorization` header its endpoints need.
    pub(crate) fn auth(&self) -> &str {
        &self.auth
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until `n` processes are attached (`fdprof_targets`).
    pub(crate) fn wait_attached(&self, n: usize) -> Result<()> {
        let started = Instant::now();
        loop {
            let body = self.get("/metrics")?;
            let attached = body
                .lines()
                .find_map(|l| l.strip_prefix("fdprof_targets "))
                .and_then(|v| v.trim().parse::<f64>().ok());
            if attached.is_some_and(|a| a as usize >= n) {
                return Ok(());
            }
            // The programs load once, then running processes join at each interval's look
            // through /proc: seconds on a host as loaded as the scrape bench makes it.
            if started.elapsed() > Duration::from_secs(180) {
                bail!("the daemon attached to fewer than {n} processes within 180 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: signalling the daemon this bench started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// GET `path` with the `auth` header; the body of a 200 answer.
fn get(addr: SocketAddr, auth: &str, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    // Chunked bodies: the sizes go, the data stays.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || after.len() < n {
                break;
            }
            out.push_str(&after[..n]);
            rest = after[n..].trim_start_matches("\r\n");
        }
        return Ok(out);
    }
    Ok(body.to_string())
}

/// Runs opensock -t 2 from `program`; with `hold`, started held and let go once `ready` says
/// the daemon has it. Its ops/s.
pub(crate) fn opensock(program: &Path, extra: &[&str], ready: Option<&Daemon>) -> Result<f64> {
    let mut child = Command::new(program)
        .args(["workload", "opensock", "-t", "2", "-n", "4000", "--json"])
        .args(extra)
        .args(ready.map(|_| "--wait-signal"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run the workload")?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    if let Some(daemon) = ready {
        lines.next().context("no ready line")??;
        daemon.wait_attached(1)?;
        // SAFETY: signalling the workload this bench started.
        unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    }
    let line = lines
        .map_while(Result::ok)
        .find(|l| l.contains("\"ops_per_sec\""))
        .context("the workload printed no result")?;
    if !child.wait()?.success() {
        bail!("the workload failed");
    }
    serde_json::from_str::<serde_json::Value>(&line)?["ops_per_sec"]
        .as_f64()
        .context("cannot parse ops_per_sec")
}

fn overhead(fdprof: &Path, dir: &Path, rounds: usize) -> Result<()> {
    let named = named_copy(fdprof, dir, NAME)?;
    let duration = ["-d", WORKLOAD_SECS];
    let (mut ratios, mut shares) = (Vec::new(), Vec::new());
    let mut before = opensock(fdprof, &duration, None)?;
    for round in 1..=rounds {
        // A daemon per round: its programs see every syscall on the host while loaded, so the
        // bare runs around it run without one.
        let daemon = Daemon::start(fdprof, dir, &[NAME.to_string()], &[])?;
        let cpu = cpu_secs(daemon.pid())?;
        let started = Instant::now();
        let under = opensock(&named, &duration, Some(&daemon))?;
        let share = (cpu_secs(daemon.pid())? - cpu) / started.elapsed().as_secs_f64();
        drop(daemon);
        let after = opensock(fdprof, &duration, None)?;
        let ratio = under / ((before + after) / 2.0);
        eprintln!(
            "round {round}/{rounds}  daemon {under:>10.0} ops/s  ratio {ratio:.3}  daemon CPU \
             {:.2}%  (bare {before:.0}, {after:.0})",
            100.0 * share
        );
        ratios.push(ratio);
        shares.push(share);
        before = after;
    }
    let (lo, hi) = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "\nfdprof daemon --comm {NAME} (1 s intervals) on opensock -t 2 -n 4000 -d \
         {WORKLOAD_SECS}, {rounds} rounds, each between two bare runs (medians)"
    );
    println!("{:<44} {:>14}", "figure", "value");
    println!(
        "{:<44} {:>14}",
        "ratio to bare",
        format!("{:.3} ({lo:.3}–{hi:.3})", median(&mut ratios))
    );
    println!(
        "{:<44} {:>13.2}%",
        "daemon CPU, share of one CPU",
        100.0 * median(&mut shares)
    );
    Ok(())
}

fn scrapes(fdprof: &Path, dir: &Path) -> Result<()> {
    let names: Vec<String> = (0..SCRAPE_TARGETS)
        .map(|i| format!("fdpd-s{i:02}"))
        .collect();
    let daemon = Daemon::start(fdprof, dir, &names, &[])?;
    let workloads = niced_opensock(fdprof, dir, &names, "90s")?;
    let result = (|| {
        daemon.wait_attached(SCRAPE_TARGETS)?;
        // Some intervals for the stacks to build up, and the daemon's CPU without scrapes.
        let idle = (cpu_secs(daemon.pid())?, Instant::now());
        std::thread::sleep(Duration::from_secs(10));
        let idle_rate = (cpu_secs(daemon.pid())? - idle.0) / idle.1.elapsed().as_secs_f64();
        let scraping = (cpu_secs(daemon.pid())?, Instant::now());
        let mut latencies = Vec::new();
        let mut bytes = 0;
        for _ in 0..SCRAPES {
            let started = Instant::now();
            bytes = daemon.get("/metrics")?.len();
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            std::thread::sleep(Duration::from_millis(100).saturating_sub(started.elapsed()));
        }
        let spent = cpu_secs(daemon.pid())? - scraping.0;
        let per_scrape = (spent - idle_rate * scraping.1.elapsed().as_secs_f64()) / SCRAPES as f64;
        // Each target's stack groups, added up (the daemon-wide report is bounded as one name).
        let mut stacks = 0;
        for name in &names {
            let path = format!("/report.json?seconds=10&target={name}");
            let report: serde_json::Value = serde_json::from_str(&daemon.get(&path)?)?;
            stacks += report["stacks_total"].as_u64().unwrap_or(0);
        }
        let max = latencies.iter().copied().fold(0.0, f64::max);
        latencies.sort_by(f64::total_cmp);
        let at = |q: usize| latencies[latencies.len() * q / 100];
        println!(
            "\n/metrics with {SCRAPE_TARGETS} targets (opensock -t 2 each, nice 19), {SCRAPES} \
             scrapes, one every 100 ms"
        );
        println!("{:<44} {:>14}", "figure", "value");
        println!(
            "{:<44} {:>14}",
            "stacks, last 10 s, summed over targets", stacks
        );
        println!("{:<44} {:>11.1} kB", "exposition size", bytes as f64 / 1e3);
        println!(
            "{:<44} {:>11.2} ms",
            "daemon CPU per scrape (less its idle rate)",
            per_scrape * 1e3
        );
        for (name, q) in [
            ("latency p50", 50),
            ("latency p90", 90),
            ("latency p99", 99),
        ] {
            println!("{:<44} {:>11.2} ms", name, at(q));
        }
        println!("{:<44} {:>11.2} ms", "latency max", max);
        Ok(())
    })();
    for mut w in workloads {
        let _ = w.kill();
        let _ = w.wait();
    }
    result
}

/// The daemon's memory over `--minutes`, following `followed` processes of one name: one busy
/// (opensock -t 2), the rest idle (sleep).
fn memory(fdprof: &Path, dir: &Path, minutes: u64, followed: usize) -> Result<()> {
    let named = named_copy(fdprof, dir, NAME)?;
    let sleep_dir = dir.join("sleep-memory");
    std::fs::create_dir_all(&sleep_dir)?;
    let sleep = named_copy(Path::new("/bin/sleep"), &sleep_dir, NAME)?;
    let mut idle = Vec::new();
    spawn_idle(&sleep, followed.saturating_sub(1), "7200", &mut idle)?;
    let daemon = Daemon::start(fdprof, dir, &[NAME.to_string()], &[])?;
    let total = Duration::from_secs(60 * minutes);
    let workload = Command::new(&named)
        .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d"])
        .arg(format!("{}s", total.as_secs() + 15))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run the workload")?;
    let result = (|| {
        daemon.wait_attached(followed)?;
        eprintln!(
            "==> fdprof daemon following {followed} processes (opensock -t 2 and {} idle) for \
             {minutes} min, VmRSS every 10 s",
            followed - 1
        );
        let started = Instant::now();
        let mut samples: Vec<(f64, u64)> = Vec::new();
        let mut cpu = Vec::new();
        while started.elapsed() < total {
            std::thread::sleep(Duration::from_secs(10));
            let kb = rss_kb(daemon.pid())?;
            let at = started.elapsed().as_secs_f64();
            eprintln!("    {at:>5.0} s {kb:>9} kB");
            samples.push((at, kb));
            cpu.push(cpu_secs(daemon.pid())?);
        }
        let (first, last) = (samples[0], samples[samples.len() - 1]);
        let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
        println!(
            "\nfdprof daemon following {followed} processes (opensock -t 2 and {} idle) for \
             {minutes} min: VmRSS every 10 s",
            followed - 1
        );
        println!("{:<44} {:>14}", "figure", "value");
        println!(
            "{:<44} {:>11} kB",
            format!("start (at {:.0} s)", first.0),
            first.1
        );
        println!(
            "{:<44} {:>11} kB",
            format!("end (at {:.0} s)", last.0),
            last.1
        );
        println!("{:<44} {:>11} kB", "max", max);
        let steady = (cpu[cpu.len() - 1] - cpu[0]) / (last.0 - first.0).max(1.0);
        println!(
            "{:<44} {:>13.2}%",
            "daemon CPU from first to last sample",
            100.0 * steady
        );
        Ok(())
    })();
    for mut child in idle.into_iter().chain([workload]) {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}
