//! Boots one kernel under qemu TCG (no network), streams its serial console to a log file and
//! to a per-line callback, and kills the guest when it overruns its time.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::setup::QEMU;

pub(super) struct Boot {
    /// Serial console lines, `\r` removed.
    pub lines: Vec<String>,
    pub wall: Duration,
    pub timed_out: bool,
    /// qemu's exit status (none when killed).
    pub status: Option<std::process::ExitStatus>,
}

/// Runs the guest to completion or `timeout`. The qemu started here is killed (by its PID) on
/// timeout; nothing else is touched.
///
/// TCG runs both vCPUs on one host thread unless `mttcg`. With a thread per vCPU the guest
/// sometimes dies with "Oops: int3" in a static-key site while fdprof attaches its programs
/// (`bpf_trace_run2` on 6.12, 3 of 12 boots; 0 of 11 single-threaded): most likely a vCPU
/// running a stale translation of kernel text that the other vCPU has just patched. Single-threaded TCG switches
/// vCPUs at coarse intervals, so contention between them is rarer still (an `opensock -t 2`
/// recording saw no `file_lock` contention either way).
pub(super) fn boot(
    vmlinuz: &Path,
    initrd: &Path,
    log: &Path,
    timeout: Duration,
    mttcg: bool,
    mut on_line: impl FnMut(&str),
) -> Result<Boot> {
    let mut log_file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let stderr_log = std::fs::File::create(log.with_extension("qemu-stderr"))?;
    let mut cmd = qemu(vmlinuz, initrd, mttcg);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_log);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {QEMU}"))?;
    let (tx, rx) = channel::<String>();
    let reader = console_lines(child.stdout.take().unwrap(), tx);

    let deadline = start + timeout;
    let mut lines = Vec::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                writeln!(log_file, "{line}")?;
                on_line(&line);
                lines.push(line);
            }
            Err(RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = child.kill();
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().ok();
    // After a kill the pipe closes and the reader ends; keep what it still had.
    let _ = reader.join();
    for line in rx.try_iter() {
        writeln!(log_file, "{line}")?;
        lines.push(line);
    }
    Ok(Boot {
        lines,
        wall: start.elapsed(),
        timed_out,
        status: if timed_out { None } else { status },
    })
}

/// qemu for `vmlinuz` and `initrd`: TCG, 2 vCPUs, 2 GiB, no network, console on stdout.
fn qemu(vmlinuz: &Path, initrd: &Path, mttcg: bool) -> Command {
    let mut cmd = Command::new(QEMU);
    let accel = if mttcg {
        "tcg,thread=multi"
    } else {
        "tcg,thread=single"
    };
    cmd.args(["-accel", accel, "-m", "2G", "-smp", "2"])
        // Without `-hypervisor` the guest takes the test-and-set lock fallback, which never
        // reaches the lock contention tracepoints.
        .args(["-cpu", "qemu64,-hypervisor"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"]);
    cmd
}

/// A thread sending each line of the console to `tx`, `\r` removed, until it closes.
fn console_lines(stdout: ChildStdout, tx: Sender<String>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).replace('\r', "");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    })
}
