//! What tracing adds to one syscall, in ns: a C loop of getppid (not an fd syscall) and of
//! dup+close (fd syscalls) runs bare, under empty programs on `sys_enter`/`sys_exit` (the
//! kernel's dispatch floor) and under `fdprof record`. Stable to a few ns where the
//! throughput ratios of the overhead bench move by percents, so it shows where the cost is.
//! Then the same programs by the kernel's statistics ([`stats`]).

use std::path::{Path, PathBuf};
use std::process::Command;

mod stats;

use anyhow::{Context, Result};

use super::floor::EmptyPrograms;
use super::harness::stats::median;
use super::harness::workloads::result_line;
use crate::workspace::{root, step};

const SYSCALL_HOOKS: &[&str] = &["sys_enter", "sys_exit"];

/// ns per getppid, ns per fd syscall.
pub(crate) fn run_once(argv: &[String]) -> Result<(f64, f64)> {
    let line = result_line(argv, "getppid_ns")?;
    let v: serde_json::Value = serde_json::from_str(&line)?;
    let get = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("syscost result without {k}"))
    };
    Ok((get("getppid_ns")?, get("fd_syscall_ns")?))
}

/// The syscall-cost loop, compiled into `out`.
pub(crate) fn compile(out: &Path) -> Result<PathBuf> {
    let bin = out.join("syscost");
    step(
        "compile the syscall-cost loop",
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O2", "-o"])
            .arg(&bin)
            .arg(root().join("xtask/bench/syscost.c")),
    )?;
    Ok(bin)
}

/// `before`: another build of fdprof, whose `record -a` the statistics table measures too.
pub(crate) fn run(fdprof: &Path, before: Option<&Path>, out: &Path, rounds: usize) -> Result<()> {
    let bin = compile(out)?;
    let bare = vec![bin.display().to_string()];
    let record = vec![
        fdprof.display().to_string(),
        "record".into(),
        "-o".into(),
        out.join("syscost.data").display().to_string(),
        "--".into(),
        bin.display().to_string(),
    ];

    // (name, argv, empty hooks held around the run)
    let variants: [(&str, &Vec<String>, &[&str]); 3] = [
        ("bare", &bare, &[]),
        ("floor: empty progs", &bare, SYSCALL_HOOKS),
        ("fdprof record", &record, &[]),
    ];
    let mut got: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); variants.len()];
    for round in 1..=rounds {
        for (i, (name, argv, hooks)) in variants.iter().enumerate() {
            let _floor = EmptyPrograms::attach(hooks)?;
            let (getppid, fd) = run_once(argv)?;
            eprintln!(
                "round {round}/{rounds}  {name:<20} getppid {getppid:.0} ns  fd syscall {fd:.0} ns"
            );
            got[i].0.push(getppid);
            got[i].1.push(fd);
        }
    }
    let medians: Vec<(f64, f64)> = got
        .into_iter()
        .map(|(mut g, mut f)| (median(&mut g), median(&mut f)))
        .collect();
    let (base_g, base_f) = medians[0];
    println!("\ncost of one syscall, {rounds} interleaved rounds (medians; + is added to bare)");
    println!(
        "{:<20} {:>16} {:>22}",
        "variant", "getppid (no fd)", "dup or close (fd)"
    );
    for ((name, _, _), (g, f)) in variants.iter().zip(&medians) {
        let add = |v: f64, b: f64| {
            if *name == "bare" {
                format!("{v:.0} ns")
            } else {
                format!("+{:.0} ns", v - b)
            }
        };
        println!(
            "{:<20} {:>16} {:>22}",
            name,
            add(*g, base_g),
            add(*f, base_f)
        );
    }
    stats::run(fdprof, before, &bin, out, rounds)
}
