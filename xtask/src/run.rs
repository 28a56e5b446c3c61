//! Build, demo and test: thin sequences of cargo and fdprof commands, each step announced.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::workspace::{cargo, root, step};

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
    crate::ebpf::clippy()?;
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
