//! `cargo xtask bench vm-overhead [--rounds N] [--json]`: the cost of each probe mode where all
//! of them work. Inside each guest every workload runs bare and under `fdprof record --mode M`
//! for every mode, interleaved round by round; medians of ops/s and their ratio to the bare
//! runs, as a table or (`--json`) one JSON object per kernel, mode and workload. Each recording's
//! report gives the programs' own run time per op, and so the ratio the hooks alone allow.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::{
    guest::{self, GuestOutput},
    initramfs, qemu,
    setup::{self, timed, vm_dir},
};

/// (name, `fdprof workload` arguments): one thread on its own table, two contending, and one
/// thread whose syscalls are none of the fd table's (clock_gettime of its own CPU clock): what
/// a mode costs the rest of a machine's syscalls, which the direct modes leave alone.
const WORKLOADS: &[(&str, &[&str])] = &[
    ("socket-close", &["socket-close", "-d", "2s"]),
    (
        "opensock",
        &["opensock", "-t", "2", "-n", "4000", "-d", "2s"],
    ),
    ("cputime", &["cputime", "-t", "1", "-d", "2s"]),
];

/// One line of the result.
struct Row {
    kernel: String,
    workload: &'static str,
    mode: String,
    runs: usize,
    ops_per_sec: Option<f64>,
    ratio: Option<f64>,
    /// fdprof's programs' own run time per op (their share of a CPU in the run-time statistics'
    /// windows, over ops/s), ns.
    programs_ns_per_op: Option<f64>,
    /// The ratio if the programs' bodies cost nothing: what the hooks alone (trampolines,
    /// kprobes, the syscall slow path) leave. The floor under any body.
    hooks_only_ratio: Option<f64>,
}

/// The programs' share of one CPU in a `report --json` step.
fn programs_share(stdout: &str) -> Option<f64> {
    let r: fdprof_figures::Report = serde_json::from_str(stdout.trim()).ok()?;
    r.own_cost.programs_cpu_share
}

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

/// `rounds` (`--rounds N`) and `json` (`--json`) are read by `cargo xtask bench`'s dispatch,
/// with the other benches' options.
pub(crate) fn run(rounds: usize, json: bool) -> Result<()> {
    setup::host_packages()?;
    let fdprof = crate::static_fdprof::build_static()?;
    let chain = super::chain_program()?;
    let modes = guest::MODES;
    let initrd = vm_dir().join("bench-initramfs.cpio.gz");
    timed("initramfs for the overhead benchmark", || {
        initramfs::build(
            Path::new(setup::BUSYBOX),
            (&fdprof, &chain),
            &guest::bench_script(modes, rounds, WORKLOADS),
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
        let steps = rounds * WORKLOADS.len() * (2 * modes.len() + 1);
        let timeout = Duration::from_secs(60 + 20 * steps as u64);
        let boot = qemu::boot(&kernel.vmlinuz, &initrd, &log, timeout, false, |_| {})?;
        let out = guest::parse(&boot.lines);
        for (workload, _) in WORKLOADS {
            table.extend(workload_rows(&kernel.release, &out, workload, rounds));
        }
    }
    if json {
        print_json(&table, rounds);
    } else {
        print_table(&table, rounds);
    }
    Ok(())
}

/// One guest's rows for `workload`: bare, then each mode.
fn workload_rows(
    kernel: &str,
    out: &GuestOutput,
    workload: &'static str,
    rounds: usize,
) -> Vec<Row> {
    let ops = |mode: &str| {
        let runs: Vec<f64> = (1..=rounds)
            .filter_map(|r| out.steps.get(&guest::bench_step(workload, mode, r)))
            .filter(|s| s.rc == 0)
            .filter_map(|s| ops_per_sec(&s.stdout))
            .collect();
        (runs.len(), median(runs))
    };
    let share = |mode: &str| {
        let shares: Vec<f64> = (1..=rounds)
            .filter_map(|r| {
                out.steps
                    .get(&guest::cost_step(&guest::bench_step(workload, mode, r)))
            })
            .filter(|s| s.rc == 0)
            .filter_map(|s| programs_share(&s.stdout))
            .collect();
        median(shares)
    };
    let (_, bare) = ops("bare");
    let mut rows = Vec::new();
    for mode in std::iter::once("bare").chain(guest::MODES.iter().copied()) {
        let (runs, ops_per_sec) = ops(mode);
        // ns per op: bare, recorded, and of that the programs' own.
        let programs_ns_per_op = ops_per_sec.zip(share(mode)).map(|(o, s)| s * 1e9 / o);
        let hooks_only_ratio = bare
            .zip(ops_per_sec)
            .zip(programs_ns_per_op)
            .map(|((b, o), p)| {
                let (bare_ns, rec_ns) = (1e9 / b, 1e9 / o);
                bare_ns / (rec_ns - p).max(bare_ns)
            });
        rows.push(Row {
            kernel: kernel.to_string(),
            workload,
            mode: mode.to_string(),
            runs,
            ops_per_sec,
            ratio: ops_per_sec.zip(bare).map(|(m, b)| m / b),
            programs_ns_per_op,
            hooks_only_ratio,
        });
    }
    rows
}

/// `--json`: one object a row.
fn print_json(table: &[Row], rounds: usize) {
    for r in table {
        let row = serde_json::json!({
            "kernel": r.kernel,
            "mode": r.mode,
            "workload": r.workload,
            "runs": r.runs,
            "rounds": rounds,
            "ops_per_sec": r.ops_per_sec,
            "ratio_to_bare": r.ratio,
            "programs_ns_per_op": r.programs_ns_per_op,
            "hooks_only_ratio": r.hooks_only_ratio,
        });
        println!("{row}");
    }
}

fn print_table(table: &[Row], rounds: usize) {
    println!("\n2 s per run, {rounds} interleaved rounds per kernel (medians)");
    for (workload, args) in WORKLOADS {
        println!("  {workload}: fdprof workload {}", args.join(" "));
    }
    println!(
        "  prog ns/op: fdprof's programs' own run time per op; hooks only: the ratio were their \
         bodies free (the floor under any program on these hooks)"
    );
    println!(
        "{:<24} {:<13} {:<12} {:>5} {:>12} {:>8} {:>11} {:>11}",
        "kernel", "workload", "mode", "runs", "ops/s", "ratio", "prog ns/op", "hooks only"
    );
    for r in table {
        let show = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{:<24} {:<13} {:<12} {:>5} {:>12} {:>8} {:>11} {:>11}",
            r.kernel,
            r.workload,
            r.mode,
            r.runs,
            show(r.ops_per_sec, 0),
            show(r.ratio, 3),
            show(r.programs_ns_per_op, 0),
            show(r.hooks_only_ratio, 3)
        );
    }
}
