//! The processes a bench starts and what it reads of them: copies of a program under another
//! name (a process's comm is what the daemon follows), idle processes, their CPU time and
//! resident memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

/// Seconds of CPU (user + system) `pid` has used, all its threads, not its children.
pub(crate) fn cpu_secs(pid: u32) -> Result<f64> {
    stat_cpu_secs(Path::new(&format!("/proc/{pid}/stat")))
}

/// Seconds of CPU (user + system) in the `stat` file at `path`: a process's, or one thread's
/// (`/proc/PID/task/TID/stat`).
pub(crate) fn stat_cpu_secs(path: &Path) -> Result<f64> {
    let stat = std::fs::read_to_string(path)?;
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

/// A process's CPU time and the wall clock from a start: what it spent over a stretch.
pub(crate) struct CpuSince {
    pid: u32,
    cpu: f64,
    started: Instant,
}

impl CpuSince {
    pub(crate) fn start(pid: u32) -> Result<Self> {
        Ok(Self {
            pid,
            cpu: cpu_secs(pid)?,
            started: Instant::now(),
        })
    }

    /// CPU seconds spent since the start.
    pub(crate) fn spent(&self) -> Result<f64> {
        Ok(cpu_secs(self.pid)? - self.cpu)
    }

    /// Wall seconds since the start.
    pub(crate) fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// CPU spent since the start, as a share of one CPU.
    pub(crate) fn share(&self) -> Result<f64> {
        Ok(self.spent()? / self.elapsed())
    }

    /// CPU seconds spent since the start beyond `idle_rate` (a share of one CPU) over the time.
    pub(crate) fn beyond(&self, idle_rate: f64) -> Result<f64> {
        Ok(self.spent()? - idle_rate * self.elapsed())
    }
}

/// Processes started for the bench, killed (by PID) and waited for on drop.
#[derive(Default)]
pub(crate) struct Children(pub(crate) Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A copy of `program` named `name`: a process run from it has that comm.
pub(crate) fn named_copy(program: &Path, dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    std::fs::copy(program, &path)
        .with_context(|| format!("cannot copy {program:?} to {path:?}"))?;
    Ok(path)
}

/// Starts `n` idle processes of `sleep` (a copy named as the targets are) for `secs`, each put
/// in `into` as it starts, so that whoever owns `into` ends those started before a failure.
pub(crate) fn spawn_idle(sleep: &Path, n: usize, secs: &str, into: &mut Children) -> Result<()> {
    for _ in 0..n {
        into.0.push(
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
