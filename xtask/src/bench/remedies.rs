//! `cargo xtask bench remedies`: each remedy the diagnosis names, applied to the generator's
//! load and measured by fdprof itself against the load without it, on this machine. Each run
//! is `fdprof workload ... --wait-signal` recorded with `fdprof record -p` from its measured
//! phase on; the table gives, per variant, the medians over the rounds of ops/s (and the ratio
//! to the pair's first row), `file_lock` wait per second, the scan distance p99 and the traced
//! fd syscalls per op. Options: `--rounds N` (default 3), `--secs N` (each run's length,
//! default 3). `opensock --processes` (a table per process) is not a row: `record -p` follows
//! one process, and its workers are its children.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::harness::args::{rounds_arg, whole_arg};
use super::harness::stats::median;
use super::harness::workloads::report_of;
use crate::run::{build_release, fdprof_release};

/// A before/after group: the load, then its remedies.
struct Group {
    what: &'static str,
    rows: &'static [(&'static str, &'static [&'static str])],
}

const GROUPS: &[Group] = &[
    Group {
        what: "shared table (opensock, 2 threads, 4000 sockets)",
        rows: &[
            ("threads, one table", &["opensock", "-t", "2", "-n", "4000"]),
            (
                "--io-uring-direct",
                &["opensock", "-t", "2", "-n", "4000", "--io-uring-direct"],
            ),
        ],
    },
    Group {
        what: "holes (fds 0..999 open, hole 3)",
        rows: &[
            ("close + open", &["holes", "-n", "1000"]),
            ("--reserve", &["holes", "-n", "1000", "--reserve"]),
        ],
    },
    Group {
        what: "close loop (64 fds an op)",
        rows: &[
            ("close x 64", &["close-loop", "-n", "64"]),
            (
                "--close-range",
                &["close-loop", "-n", "64", "--close-range"],
            ),
        ],
    },
];

/// One recorded run's figures.
struct Run {
    ops_per_sec: f64,
    file_lock_wait_per_sec: f64,
    scan_p99: Option<u64>,
    syscalls_per_op: f64,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = rounds_arg(args, 3)?;
    let secs = whole_arg(args, "--secs", 3, "seconds")?;
    build_release()?;
    let fdprof = fdprof_release();
    let dir = std::env::temp_dir().join(format!("fdprof-bench-remedies-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("remedies: {rounds} rounds of {secs} s each, recorded by fdprof record -p; medians");
    for g in GROUPS {
        println!();
        println!("{}", g.what);
        println!(
            "  {:<22} {:>12} {:>7} {:>16} {:>9} {:>11}",
            "variant", "ops/s", "ratio", "file_lock wait/s", "scan p99", "fd calls/op"
        );
        let mut first_ops = None;
        for (name, workload) in g.rows {
            let mut runs = Vec::new();
            for round in 0..rounds {
                let out = dir.join(format!("r{round}.data"));
                runs.push(measure(&fdprof, workload, secs, &out)?);
            }
            let col = |f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
            let ops = col(|r| r.ops_per_sec);
            let wait = col(|r| r.file_lock_wait_per_sec);
            let per_op = col(|r| r.syscalls_per_op);
            let p99 = col(|r| r.scan_p99.map_or(-1.0, |v| v as f64));
            let base = *first_ops.get_or_insert(ops);
            println!(
                "  {:<22} {:>12.0} {:>7.2} {:>13.2} ms {:>9} {:>11.2}",
                name,
                ops,
                ops / base,
                wait / 1e6,
                if p99 < 0.0 {
                    "-".to_string()
                } else {
                    format!("{p99:.0}")
                },
                per_op
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Runs `workload` for `secs` under `fdprof record -p`, from its measured phase on.
fn measure(fdprof: &Path, workload: &[&str], secs: u64, out: &Path) -> Result<Run> {
    let mut w = Command::new(fdprof);
    // Only stdio in the workload's table, whatever this process holds (close-loop needs its
    // fds consecutive).
    // SAFETY: the closure only makes one async-signal-safe system call.
    unsafe {
        w.pre_exec(|| {
            let r = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_long,
                libc::c_long::from(u32::MAX),
                0 as libc::c_long,
            );
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut w = w
        .arg("workload")
        .args(workload)
        .args(["-d", &format!("{secs}s"), "--json", "--wait-signal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the workload")?;
    let mut stdout = BufReader::new(w.stdout.take().context("no stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let ready: Value = serde_json::from_str(&line).context("the workload's ready line")?;
    let pid = ready["pid"].as_u64().context("no pid in the ready line")?;
    let mut rec = start_record(fdprof, pid, out)?;
    // SAFETY: signalling the child this bench started.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let mut result = String::new();
    stdout.read_to_string(&mut result)?;
    if !w.wait()?.success() {
        bail!("fdprof workload {} failed", workload.join(" "));
    }
    if !rec.wait()?.success() {
        bail!("fdprof record of {} failed", workload.join(" "));
    }
    let result: Value = serde_json::from_str(result.trim()).context("the workload's result")?;
    let r = report_of(fdprof, out)?;
    let ops = result["ops"].as_f64().unwrap_or(0.0).max(1.0);
    let calls: u64 = r.syscalls.iter().map(|s| s.calls).sum();
    let duration = (r.header.duration_ns as f64 / 1e9).max(1e-9);
    Ok(Run {
        ops_per_sec: result["ops_per_sec"].as_f64().unwrap_or(0.0),
        file_lock_wait_per_sec: r.contention.file_lock_wait_ns as f64 / duration,
        scan_p99: r.scan.bits.p99,
        syscalls_per_op: calls as f64 / ops,
    })
}

/// `fdprof record -p PID -o OUT`, returned once it says it is attached.
fn start_record(fdprof: &Path, pid: u64, out: &Path) -> Result<Child> {
    let mut rec = Command::new(fdprof)
        .args(["record", "-p", &pid.to_string(), "-o"])
        .arg(out)
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start fdprof record")?;
    let mut stderr = BufReader::new(rec.stderr.take().context("no stderr")?);
    let mut line = String::new();
    stderr.read_line(&mut line)?;
    if !line.starts_with("fdprof: attached") {
        bail!("fdprof record did not attach: {line}");
    }
    // Drain the rest so the recorder never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Ok(rec)
}
