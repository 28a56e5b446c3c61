//! Churn: the process turnover of a busy host. N short processes, forked (not exec'd, so each
//! has the generator's comm) one after another with at most [`IN_FLIGHT`] alive at once; each
//! opens and closes K sockets and exits. The generator knows exactly what they did: N × K
//! `socket` fds created and N × K closed by `close`, in N processes (each child's exit status
//! says it did all of it).

use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::control::{announce_and_wait, block_sigusr1};

/// Children alive at once, at most: enough to keep a core busy forking, few enough that a
/// user's process limit is never the bound.
pub const IN_FLIGHT: usize = 32;

/// What to run.
#[derive(Debug, Clone)]
pub struct Churn {
    /// Processes to start, one after another.
    pub processes: u64,
    /// Sockets each opens and closes.
    pub sockets: u64,
    /// Run as this user (and group) from the start: any user can churn.
    pub uid: Option<u32>,
    /// Print the ready line and wait for SIGUSR1 before starting the processes.
    pub wait_signal: bool,
}

/// What it did, for `--json`.
#[derive(Debug, Serialize)]
pub struct ChurnReport {
    pub scenario: &'static str,
    pub processes: u64,
    pub sockets_per_process: u64,
    /// Children that did not do all of it (their exit status said so); 0 in a good run.
    pub failed: u64,
    pub seconds: f64,
    pub processes_per_sec: f64,
    /// Exactly what the children made the kernel do (the generator's own setup excluded).
    pub expected: serde_json::Value,
}

/// Runs `churn` and prints its report (JSON with `json`).
pub fn run(churn: &Churn, json: bool) -> Result<()> {
    if let Some(uid) = churn.uid {
        drop_to(uid)?;
    }
    if churn.wait_signal {
        block_sigusr1()?;
        announce_and_wait(&[])?;
    }
    let started = Instant::now();
    let failed = spawn_all(churn.processes, churn.sockets)?;
    let seconds = started.elapsed().as_secs_f64();
    let done = churn.processes - failed;
    let fds = done * churn.sockets;
    let report = ChurnReport {
        scenario: "churn",
        processes: churn.processes,
        sockets_per_process: churn.sockets,
        failed,
        seconds,
        processes_per_sec: churn.processes as f64 / seconds.max(1e-9),
        expected: serde_json::json!({
            "processes": done,
            "syscalls": {"socket": fds, "close": fds},
            "fds_created": {"socket": fds},
            "fds_closed": {"close": fds},
        }),
    };
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(
            out,
            "churn: {} processes ({failed} failed) × {} sockets in {seconds:.2} s ({:.0}/s)",
            report.processes, report.sockets_per_process, report.processes_per_sec
        )?;
    }
    if failed > 0 {
        bail!("{failed} of {} processes failed", churn.processes);
    }
    Ok(())
}

/// Becomes `uid` (its group the same number, no supplementary groups).
fn drop_to(uid: u32) -> Result<()> {
    // SAFETY: plain syscalls on this single-threaded process's credentials.
    let ok = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setgid(uid) == 0
            && libc::setuid(uid) == 0
    };
    if !ok {
        bail!(
            "cannot become uid {uid}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Forks `n` children, at most [`IN_FLIGHT`] alive at once; how many failed.
fn spawn_all(n: u64, sockets: u64) -> Result<u64> {
    let (mut alive, mut failed) = (0usize, 0u64);
    for _ in 0..n {
        if alive == IN_FLIGHT {
            failed += reap_one()?;
            alive -= 1;
        }
        // SAFETY: the child only makes raw syscalls (socket, close, _exit), which are safe
        // after a fork.
        match unsafe { libc::fork() } {
            -1 => bail!("fork: {}", std::io::Error::last_os_error()),
            0 => child(sockets),
            _ => alive += 1,
        }
    }
    for _ in 0..alive {
        failed += reap_one()?;
    }
    Ok(failed)
}

/// A child's life: `sockets` sockets opened and closed, then exit 0 (1 if any call failed).
fn child(sockets: u64) -> ! {
    for _ in 0..sockets {
        // SAFETY: raw syscalls on an fd this child owns.
        let ok = unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            fd >= 0 && libc::close(fd) == 0
        };
        if !ok {
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(1) };
        }
    }
    // SAFETY: as above.
    unsafe { libc::_exit(0) }
}

/// Waits for any child: 1 if it failed, else 0.
fn reap_one() -> Result<u64> {
    let mut status = 0;
    // SAFETY: waits for a child of this process.
    if unsafe { libc::waitpid(-1, &mut status, 0) } < 0 {
        bail!("waitpid: {}", std::io::Error::last_os_error());
    }
    Ok(u64::from(
        !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0),
    ))
}
