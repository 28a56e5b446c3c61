//! Build, demo and test: thin sequences of cargo and fdprof commands, each step announced.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs a command in the workspace root, showing it and how long it took.
pub(crate) fn step(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("==> {what}: {cmd:?}");
    let start = Instant::now();
    let status = cmd
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    eprintln!(
        "==> {what}: {} in {:.1}s",
        if status.success() { "done" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

pub(crate) fn fdprof_release() -> PathBuf {
    root().join("target/release/fdprof")
}

pub(crate) fn build_release() -> Result<()> {
    step(
        "build fdprof (release, eBPF embedded)",
        cargo().args(["build", "--release", "-p", "fdprof"]),
    )
}

/// The main job on the built-in default: profile the opensock workload (2 threads sharing one
/// table of 4000 sockets), print the report and write the flamegraph.
/// The demo: fdprof records opensock, then a short summary (what ran, the headline figures,
/// the diagnosis, where the files are); the doctor's table and the full report go to files.
pub(crate) fn demo() -> Result<()> {
    // The dev profile: it builds in under half the release build's time from nothing (107 s
    // against 252 s here), and `cargo xtask test` reuses it. The workload's loops are
    // optimized in it all the same (Cargo.toml), so the figures are a real load's.
    step(
        "build fdprof (eBPF embedded)",
        cargo().args(["build", "-p", "fdprof"]),
    )?;
    let fdprof = root().join("target/debug/fdprof");
    let out = root().join("target/demo");
    std::fs::create_dir_all(&out)?;
    let data = out.join("fdprof.data");
    let svg = out.join("fdprof.svg");
    let report_txt = out.join("report.txt");
    to_file(
        "fdprof doctor",
        Command::new(&fdprof).arg("doctor"),
        &out.join("doctor.txt"),
    )?;
    step(
        "fdprof record -- fdprof workload opensock",
        Command::new(&fdprof)
            .args(["record", "-o"])
            .arg(&data)
            .arg("--")
            .arg(&fdprof)
            .args(["workload", "opensock", "-t", "2", "-n", "4000", "-d", "5s"])
            .stdout(std::process::Stdio::null()),
    )?;
    to_file(
        "fdprof report",
        Command::new(&fdprof).arg("report").arg(&data),
        &report_txt,
    )?;
    step(
        "fdprof flamegraph",
        Command::new(&fdprof)
            .arg("flamegraph")
            .arg(&data)
            .arg("-o")
            .arg(&svg),
    )?;
    let json = Command::new(&fdprof)
        .args(["report", "--json"])
        .arg(&data)
        .output()
        .context("cannot run fdprof report --json")?;
    let report: fdprof_figures::Report =
        serde_json::from_slice(&json.stdout).context("fdprof report --json printed no report")?;
    summary(&report, &data, &report_txt, &svg);
    Ok(())
}

/// `text`'s first `n` characters, an ellipsis where it is cut (the report has the whole).
fn cut(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Runs `cmd` with its standard output in `file`.
fn to_file(what: &str, cmd: &mut Command, file: &std::path::Path) -> Result<()> {
    let f =
        std::fs::File::create(file).with_context(|| format!("cannot create {}", file.display()))?;
    step(what, cmd.stdout(f))?;
    eprintln!("==> {what}: saved to {}", file.display());
    Ok(())
}

/// At most 40 lines: the headline figures, the diagnosis, the files and how to open them.
fn summary(
    r: &fdprof_figures::Report,
    data: &std::path::Path,
    report_txt: &std::path::Path,
    svg: &std::path::Path,
) {
    let seconds = r.header.duration_ns as f64 / 1e9;
    let per_s = |n: u64| n as f64 / seconds.max(1e-9);
    let c = &r.contention;
    let calls: u64 = r.syscalls.iter().map(|s| s.calls).sum();
    println!();
    println!(
        "fdprof recorded {} for {seconds:.1} s ({} mode)",
        r.header.target.description, r.header.mode
    );
    println!(
        "  file_lock: {:.0} waits/s, {:.2} ms waited a second ({} waits, {:.1} ms in all)",
        per_s(c.file_lock_count),
        per_s(c.file_lock_wait_ns) / 1e6,
        c.file_lock_count,
        c.file_lock_wait_ns as f64 / 1e6
    );
    println!(
        "  fd syscalls: {:.0}/s; allocations {} (next_fd hit {}); table {} fds",
        per_s(calls),
        r.scan.allocations,
        r.scan
            .next_fd_hit_rate
            .map_or("-".into(), |h| format!("{:.0}%", h * 100.0)),
        r.table.max_fds_max
    );
    println!(
        "  dropped: {}",
        if r.drops.total == 0 {
            "nothing".to_string()
        } else {
            format!("{} events (figures are lower bounds)", r.drops.total)
        }
    );
    println!("diagnosis:");
    if r.diagnosis.findings.is_empty() {
        println!("  no rule fired");
    }
    for f in r.diagnosis.findings.iter().take(5) {
        println!("  [{}] {}", f.rule, cut(&f.summary, 100));
        println!("      remedy: {}", cut(&f.remedy.change, 96));
    }
    println!("files:");
    println!("  recording   {}  (fdprof report {0})", data.display());
    println!("  report      {}  (less {0})", report_txt.display());
    println!("  flamegraph  {}  (open it in a browser)", svg.display());
}

pub(crate) fn test() -> Result<()> {
    disk_preflight();
    // Before the tests, which load the committed objects: they must be the sources'.
    crate::ebpf::check()?;
    step(
        "format check",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
    step(
        "clippy (host crates)",
        cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]),
    )?;
    // The container image first: built offline, run once; the DaemonSet's pod test runs it.
    eprintln!("==> image: cargo xtask image");
    let (image_passed, image_failed) = match crate::image::run() {
        Ok(()) => (1, 0),
        Err(e) => {
            eprintln!("xtask: image: {e:#}");
            (0, 1)
        }
    };
    let (passed, failed) = cargo_test()?;
    // The same ground truth on other kernels, in every probe mode (qemu TCG guests).
    eprintln!("==> vm-test: Debian 5.10, 6.1 and 6.12 guests, every probe mode");
    let (vm_passed, vm_failed) =
        crate::vm_test::run("all", "all", &crate::vm_test::Options::default())?;
    let (passed, failed) = (passed + image_passed, failed + image_failed);
    let (passed, failed) = (passed + vm_passed as u64, failed + vm_failed as u64);
    // One closing line for the whole run (cargo prints one per test binary).
    println!("tests: {passed} passed, {failed} failed");
    if failed > 0 || passed == 0 {
        bail!("tests failed");
    }
    Ok(())
}

/// A clean run writes about 4 GB under `target/` (debug and release builds, eBPF objects, the
/// guests' static build). Running out mid-build reads as a compile error, so say it up front.
fn disk_preflight() {
    const NEEDED_GB: f64 = 5.0;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let dir = std::ffi::CString::new(root().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct the call fills.
    if unsafe { libc::statvfs(dir.as_ptr(), &mut st) } != 0 {
        return;
    }
    let free_gb = (st.f_bavail as f64 * st.f_frsize as f64) / 1e9;
    eprintln!("==> disk: {free_gb:.1} GB free where target/ is (a clean run needs about 4 GB)");
    if free_gb < NEEDED_GB {
        eprintln!(
            "xtask: warning: under {NEEDED_GB} GB free; the build may fail with \"No space left on device\""
        );
    }
}

/// Runs `cargo test`, echoing its output, and adds up the per-binary result lines.
fn cargo_test() -> Result<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    let mut cmd = cargo();
    cmd.args(["test", "--no-fail-fast", "--all-targets"]);
    eprintln!("==> tests (real kernel): {cmd:?}");
    let start = Instant::now();
    let mut child = cmd
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |word: &str| {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(word))
                    .and_then(|n| n.trim().rsplit(' ').next()?.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            passed += count(" passed");
            failed += count(" failed");
        }
    }
    let status = child.wait()?;
    eprintln!(
        "==> tests (real kernel): {} in {:.1}s",
        if status.success() { "done" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if !status.success() && failed == 0 {
        failed += 1; // a build failure or a crashed test binary
    }
    Ok((passed, failed))
}

/// `--rounds N` among a benchmark's arguments, else `default`.
/// Runs `argv` with stderr dropped and returns the first line of its stdout that contains
/// `marker`: a bench program's one-line JSON result, whatever a profiler around it prints.
pub(crate) fn result_line(argv: &[String], marker: &str) -> Result<String> {
    let output = Command::new(&argv[0])
        .args(&argv[1..])
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", argv[0]))?;
    if !output.status.success() {
        bail!("{} failed ({})", argv.join(" "), output.status);
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.contains(marker))
        .map(str::to_string)
        .with_context(|| format!("{} printed no {marker}", argv.join(" ")))
}

pub(crate) fn rounds_arg(args: &[String], default: usize) -> Result<usize> {
    args.iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(default), |s| s.parse())
        .context("--rounds takes a number")
}

/// `--minutes N` among a benchmark's arguments (a whole number > 0), else 1.
pub(crate) fn minutes_arg(args: &[String]) -> Result<u64> {
    match args.iter().position(|a| a == "--minutes") {
        None => Ok(1),
        Some(i) => match args.get(i + 1).map(|s| s.parse()) {
            Some(Ok(n)) if n > 0 => Ok(n),
            _ => bail!("--minutes takes a whole number of minutes > 0"),
        },
    }
}

/// The middle value (the upper one of an even count); sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds of CPU (user + system) `pid` has used, all its threads, not its children.
pub(crate) fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("unreadable stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks as f64 / hz)
}

/// `pid`'s resident memory, kB.
pub(crate) fn rss_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// Builds fdprof statically linked (its eBPF objects embedded) into its own target directory,
/// so the normal build is not invalidated, and checks that it needs no loader: the binary the
/// qemu guests run and the container image holds.
pub(crate) fn build_static() -> Result<PathBuf> {
    let target_dir = root().join("target/static");
    let target = "x86_64-unknown-linux-gnu";
    eprintln!("==> build static fdprof (release) ...");
    let start = Instant::now();
    let status = cargo()
        .args(["build", "--release", "-p", "fdprof", "--target", target])
        .arg("--target-dir")
        .arg(&target_dir)
        // RUSTFLAGS replaces .cargo/config.toml's target rustflags: repeat them.
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C force-frame-pointers=yes",
        )
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("static build of fdprof failed ({status})");
    }
    eprintln!(
        "==> build static fdprof (release): done in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    let bin = target_dir.join(target).join("release/fdprof");
    if !crate::vm_test::elf_is_static(&bin)? {
        bail!(
            "{} needs a dynamic loader; it must be static",
            bin.display()
        );
    }
    Ok(bin)
}
