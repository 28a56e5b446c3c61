//! The programs a bench runs and what it reads of them: a program's one-line JSON result (the
//! ops/s of `fdprof workload ... --json`), opensock bare or held until the daemon has it,
//! opensock under many names at the lowest priority, and a recording's report.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::daemon::Daemon;
use super::process::{Children, named_copy};

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

/// The `ops_per_sec` of a workload's JSON result line.
pub(crate) fn ops_per_sec(line: &str) -> Result<f64> {
    serde_json::from_str::<serde_json::Value>(line)?["ops_per_sec"]
        .as_f64()
        .context("cannot parse ops_per_sec")
}

/// Runs opensock -t 2 from `program`; with `ready`, started held and let go once that daemon
/// has it. Its ops/s.
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
    ops_per_sec(&line)
}

/// One `opensock -t 2` under each of `names` (a copy of `fdprof` by that name) for `duration`,
/// at the lowest priority: dozens of busy threads on this host would otherwise starve the
/// daemon, and its latency would measure the scheduler, not the daemon.
pub(crate) fn niced_opensock(
    fdprof: &Path,
    dir: &Path,
    names: &[String],
    duration: &str,
) -> Result<Children> {
    let mut workloads = Children::default();
    for name in names {
        let program = named_copy(fdprof, dir, name)?;
        workloads.0.push(
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

/// The report of the recording `file`, as `fdprof report --json` prints it.
pub(crate) fn report_of(fdprof: &Path, file: &Path) -> Result<fdprof_figures::Report> {
    let out = Command::new(fdprof)
        .args(["report", "--json"])
        .arg(file)
        .output()
        .context("cannot run fdprof report")?;
    if !out.status.success() {
        bail!("fdprof report {} failed", file.display());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}
