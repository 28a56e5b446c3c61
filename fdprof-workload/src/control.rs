//! What the supervising thread does around the measured phase: the `--wait-signal` handshake,
//! the stop timer and the progress lines. None of it opens or closes an fd.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::phase::Plan;

/// How the measured phase is run, shared by every scenario.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Control {
    pub plan: Plan,
    pub wait_signal: bool,
    pub progress: bool,
}

fn sigusr1_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

/// Blocks SIGUSR1 in the calling thread and every thread it creates afterwards, so the signal
/// stays pending for [`wait_for_sigusr1`] instead of killing the process.
pub(crate) fn block_sigusr1() -> Result<()> {
    let set = sigusr1_set();
    // SAFETY: `set` is an initialised sigset_t; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        bail!(
            "blocking SIGUSR1: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(())
}

/// Prints the ready line on stdout and waits for SIGUSR1.
pub(crate) fn announce_and_wait(children: &[i32]) -> Result<()> {
    let pid = std::process::id();
    let line = if children.is_empty() {
        serde_json::json!({"event": "ready", "pid": pid})
    } else {
        serde_json::json!({"event": "ready", "pid": pid, "children": children})
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    drop(out);
    let set = sigusr1_set();
    loop {
        let mut sig = 0;
        // SAFETY: `set` is initialised and `sig` is a live int.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc == 0 && sig == libc::SIGUSR1 {
            return Ok(());
        }
        if rc != 0 && rc != libc::EINTR {
            bail!("sigwait: {}", std::io::Error::from_raw_os_error(rc));
        }
    }
}

/// Whether progress lines go to stderr: asked for, or stderr is a terminal.
pub(crate) fn progress_wanted(asked: bool) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    asked || unsafe { libc::isatty(2) } == 1
}

/// Supervises a measured phase that started at `start`: prints a progress line a second, sets
/// the stop flag when the time is up, and returns once every task is done.
///
/// `wait_done(timeout)` waits up to `timeout` and says whether all tasks are done;
/// `total_ops()` reads the tasks' counters; `stop()` raises the stop flag.
pub(crate) fn supervise(
    ctl: &Control,
    label: &str,
    start: Instant,
    mut wait_done: impl FnMut(Duration) -> bool,
    total_ops: impl Fn() -> u64,
    stop: impl Fn(),
) {
    const TICK: Duration = Duration::from_secs(1);
    const FOREVER: Duration = Duration::from_secs(3600);
    let deadline = match ctl.plan {
        Plan::Timed(d) => Some(start + d),
        Plan::Ops(_) => None,
    };
    let mut next_tick = start + TICK;
    let mut last = (start, 0u64);
    let mut stopped = false;
    loop {
        let now = Instant::now();
        if !stopped && deadline.is_some_and(|d| now >= d) {
            stop();
            stopped = true;
        }
        let mut until = if ctl.progress {
            next_tick
        } else {
            now + FOREVER
        };
        if !stopped && let Some(d) = deadline {
            until = until.min(d);
        }
        if wait_done(until.saturating_duration_since(now)) {
            return;
        }
        let now = Instant::now();
        if ctl.progress && now >= next_tick {
            let ops = total_ops();
            let rate = (ops - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            eprintln!(
                "fdprof: {label}: {:.0} s, {} ops/s",
                now.duration_since(start).as_secs_f64(),
                crate::output::group(rate as u64)
            );
            last = (now, ops);
            next_tick += TICK;
        }
    }
}
