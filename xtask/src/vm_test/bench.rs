//! `cargo xtask bench vm-overhead`: the cost of each probe mode where all of them work. Inside
//! each guest the socket-close workload runs bare and under `fdprof record --mode M` for every
//! mode, interleaved round by round; medians of ops/s and their ratio to the bare runs.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::{
    guest, initramfs, qemu,
    setup::{self, timed, vm_dir},
};

const WORKLOAD: &[&str] = &["socket-close", "-d", "2s"];

fn ops_per_sec(stdout: &str) -> Option<f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains("\"ops_per_sec\""))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    v["ops_per_sec"].as_f64()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

pub fn run(args: &[String]) -> Result<()> {
    let rounds = crate::run::rounds_arg(args, 5)?;
    setup::host_packages()?;
    let fdprof = setup::static_fdprof()?;
    let modes = guest::MODES;
    let initrd = vm_dir().join("bench-initramfs.cpio.gz");
    timed("initramfs for the overhead benchmark", || {
        initramfs::build(
            Path::new(setup::BUSYBOX),
            &fdprof,
            &guest::bench_script(modes, rounds, WORKLOAD),
            &initrd,
        )
    })?;
    let mut table = Vec::new();
    for series in setup::SERIES {
        let kernel = setup::kernel(series)?;
        let log = vm_dir().join(format!("{series}.bench.serial.log"));
        eprintln!(
            "[bench] booting {} for {rounds} interleaved rounds ...",
            kernel.release
        );
        let timeout = Duration::from_secs(60 + 20 * rounds as u64 * (modes.len() as u64 + 1));
        let boot = qemu::boot(&kernel.vmlinuz, &initrd, &log, timeout, false, |_| {})?;
        let out = guest::parse(&boot.lines);
        let ops = |mode: &str| {
            let runs: Vec<f64> = (1..=rounds)
                .filter_map(|r| out.steps.get(&format!("bench:{mode}:{r}")))
                .filter(|s| s.rc == 0)
                .filter_map(|s| ops_per_sec(&s.stdout))
                .collect();
            (runs.len(), median(runs))
        };
        let (bare_n, bare) = ops("bare");
        table.push((
            kernel.release.clone(),
            "bare".to_string(),
            bare_n,
            bare,
            Some(1.0),
        ));
        for mode in modes {
            let (n, m) = ops(mode);
            let ratio = m.zip(bare).map(|(m, b)| m / b);
            table.push((kernel.release.clone(), mode.to_string(), n, m, ratio));
        }
    }
    println!(
        "\nsocket-close, 1 thread, 2 s per run, {rounds} interleaved rounds per kernel (medians)"
    );
    println!(
        "{:<24} {:<12} {:>5} {:>12} {:>8}",
        "kernel", "mode", "runs", "ops/s", "ratio"
    );
    for (kernel, mode, n, ops, ratio) in &table {
        let show = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{kernel:<24} {mode:<12} {n:>5} {:>12} {:>8}",
            show(*ops, 0),
            show(*ratio, 3)
        );
    }
    Ok(())
}
