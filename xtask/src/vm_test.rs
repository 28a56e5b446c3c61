//! `cargo xtask vm-test [--kernel 5.10|6.1|6.12|all] [--mode fentry|kprobe|tracepoint|all]`: boots
//! Debian's kernel packages under qemu TCG with a busybox initramfs and a static fdprof, runs
//! `fdprof doctor` and the ground-truth scenarios in each requested mode inside the guest, and
//! compares what fdprof recorded with what the load generator says it did.
//!
//! Everything lands in `target/vm/`: `cache/` (downloaded `.deb`s, kept), `kernels/` (their
//! `./boot`), `build/` (the static fdprof), `initramfs.cpio.gz`, `SERIES.serial.log` per boot and
//! `vm-test.json` (the table and each guest's doctor findings). One boot per kernel runs every
//! requested mode. Exits non-zero when any check fails.

pub(crate) mod bench;
mod check;
mod guest;
mod initramfs;
mod live;
mod qemu;
mod row;
mod setup;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::builder::PossibleValuesParser;
use serde_json::{Value, json};

use crate::static_fdprof::elf_is_static;
use guest::GuestOutput;
use qemu::Boot;
use row::Row;
use setup::{Kernel, timed, vm_dir};

/// Values of `--kernel`: the series, or all of them.
pub(crate) fn kernel_choices() -> PossibleValuesParser {
    PossibleValuesParser::new(setup::SERIES.iter().copied().chain(["all"]))
}

/// Values of `--mode`: the probe modes, or all of them.
pub(crate) fn mode_choices() -> PossibleValuesParser {
    PossibleValuesParser::new(guest::MODES.iter().copied().chain(["all"]))
}

fn pick<'a>(what: &str, choice: &str, all: &[&'a str]) -> Result<Vec<&'a str>> {
    if choice == "all" {
        return Ok(all.to_vec());
    }
    match all.iter().find(|c| **c == choice) {
        Some(c) => Ok(vec![*c]),
        None => bail!("unknown {what} `{choice}` (one of {}, all)", all.join(", ")),
    }
}

/// Prints the guest's progress as its markers come by.
fn progress(series: &str, line: &str) {
    if let Some(words) = guest::marker(line) {
        match words.as_slice() {
            ["init", rest @ ..] => {
                eprintln!("[vm {series}] /init started ({})", rest.join(" "))
            }
            ["end", id, rest @ ..] => eprintln!("[vm {series}] {id}: {}", rest.join(" ")),
            ["done", rest @ ..] => eprintln!("[vm {series}] all steps done ({})", rest.join(" ")),
            _ => {}
        }
    } else if line.contains("Kernel panic") || line.contains("BUG:") || line.contains("Oops") {
        eprintln!("[vm {series}] console: {line}");
    }
}

struct KernelRun {
    rows: Vec<Row>,
    doctor: Option<Value>,
    summary: Value,
}

fn boot_and_check(
    kernel: &Kernel,
    initrd: &Path,
    modes: &[&str],
    opts: &Options,
) -> Result<KernelRun> {
    let series = kernel.series;
    let log = vm_dir().join(format!("{series}.serial.log"));
    eprintln!(
        "[vm-test] booting kernel {} ({}) under qemu TCG ({}), timeout {}s, console log {} ...",
        kernel.release,
        kernel.package,
        if opts.mttcg {
            "thread per vCPU"
        } else {
            "one thread"
        },
        opts.timeout.as_secs(),
        log.display()
    );
    let boot = qemu::boot(
        &kernel.vmlinuz,
        initrd,
        &log,
        opts.timeout,
        opts.mttcg,
        |line| progress(series, line),
    )?;
    let out = guest::parse(&boot.lines);
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}s"));
    eprintln!(
        "[vm-test] kernel {}: guest {} in {:.1}s (wall); /init at {} and done at {} guest uptime",
        kernel.release,
        if boot.timed_out { "killed" } else { "finished" },
        boot.wall.as_secs_f64(),
        fmt(out.init_uptime),
        fmt(out.done_uptime)
    );
    let mut rows = Vec::new();
    if let Some(problem) = boot_problem(&boot, &out, opts.timeout) {
        rows.push(Row {
            figures: format!("{problem}; see {}", log.display()),
            ..Row::failed(&kernel.release, "-", "boot")
        });
    }
    let (checks, doctor) = check::rows(&out, &kernel.release, modes);
    rows.extend(checks);
    let summary = boot_summary(kernel, &boot, &out, &log, doctor.as_ref());
    Ok(KernelRun {
        rows,
        doctor,
        summary,
    })
}

/// Why the guest's run cannot be judged whole, if it cannot.
fn boot_problem(boot: &Boot, out: &GuestOutput, timeout: Duration) -> Option<String> {
    if boot.timed_out {
        Some(format!(
            "guest killed after {}s without finishing",
            timeout.as_secs()
        ))
    } else if out.init_uptime.is_none() {
        Some(format!(
            "/init never ran (qemu {})",
            boot.status.map_or("killed".into(), |s| s.to_string())
        ))
    } else if out.done_uptime.is_none() {
        Some("guest stopped before its last step".to_string())
    } else {
        None
    }
}

/// One kernel's entry in `vm-test.json`: the boot, each step's exit code and time, the doctor.
fn boot_summary(
    kernel: &Kernel,
    boot: &Boot,
    out: &GuestOutput,
    log: &Path,
    doctor: Option<&Value>,
) -> Value {
    let steps: serde_json::Map<String, Value> = out
        .steps
        .iter()
        .map(|(id, s)| (id.clone(), json!({"rc": s.rc, "secs": s.secs})))
        .collect();
    json!({
        "series": kernel.series,
        "package": kernel.package,
        "release": kernel.release,
        "guest_release": out.release,
        "wall_secs": boot.wall.as_secs_f64(),
        "init_uptime_secs": out.init_uptime,
        "done_uptime_secs": out.done_uptime,
        "timed_out": boot.timed_out,
        "log": log,
        "steps": steps,
        "doctor": doctor,
    })
}

/// `cargo xtask vm-test` options.
pub(crate) struct Options {
    /// Kill a guest still running after this long.
    pub timeout: Duration,
    /// Multi-threaded TCG (see [`qemu::boot`]).
    pub mttcg: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(480),
            mttcg: false,
        }
    }
}

/// Boots the kernels, runs the scenarios, prints the table. Returns (passed, failed) checks;
/// an error only when the run itself could not happen.
pub(crate) fn run(kernel: &str, mode: &str, opts: &Options) -> Result<(usize, usize)> {
    let start = Instant::now();
    let series = match kernel {
        "all" => setup::IN_ALL.to_vec(),
        one => pick("kernel", one, setup::SERIES)?,
    };
    let modes = pick("mode", mode, guest::MODES)?;
    std::fs::create_dir_all(vm_dir())?;

    setup::host_packages()?;
    if !elf_is_static(Path::new(setup::BUSYBOX))? {
        bail!(
            "{} is not static: install busybox-static (it replaces busybox)",
            setup::BUSYBOX
        );
    }
    let kernels = series
        .iter()
        .map(|s| setup::kernel(s))
        .collect::<Result<Vec<_>>>()?;
    let fdprof = crate::static_fdprof::build_static()?;
    let chain = chain_program()?;
    let initrd = vm_dir().join("initramfs.cpio.gz");
    timed("initramfs (busybox, static fdprof, /init)", || {
        initramfs::build(
            Path::new(setup::BUSYBOX),
            (&fdprof, &chain),
            &guest::init_script(&modes),
            &initrd,
        )
    })?;

    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    let mut doctors = Vec::new();
    for k in &kernels {
        let run = boot_and_check(k, &initrd, &modes, opts)?;
        rows.extend(run.rows);
        summaries.push(run.summary);
        doctors.push((k.release.clone(), run.doctor));
    }
    print_doctors(&doctors);
    print!("{}", check::table(&rows));
    let failed = rows.iter().filter(|r| !r.pass).count();
    let roles = vm_dir().join("roles.md");
    std::fs::write(&roles, check::roles_table(&rows))
        .with_context(|| format!("writing {}", roles.display()))?;
    let report = vm_dir().join("vm-test.json");
    write_report(&report, &modes, summaries, &rows)?;
    println!(
        "vm-test: {} passed, {failed} failed in {:.1}s; details in {}, roles by kernel and \
         mode in {}",
        rows.len() - failed,
        start.elapsed().as_secs_f64(),
        report.display(),
        roles.display()
    );
    Ok((rows.len() - failed, failed))
}

/// Each guest's doctor findings, before the table.
fn print_doctors(doctors: &[(String, Option<Value>)]) {
    println!();
    for (release, doc) in doctors {
        println!("fdprof doctor in the {release} guest:");
        match doc {
            Some(doc) => print!("{}", check::doctor_details(doc)),
            None => println!("  (no findings)"),
        }
        println!();
    }
}

/// `vm-test.json`: the modes, each kernel's summary and every row.
fn write_report(report: &Path, modes: &[&str], summaries: Vec<Value>, rows: &[Row]) -> Result<()> {
    let rows_json: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "kernel": r.kernel,
                "mode": r.mode,
                "scenario": r.scenario,
                "pass": r.pass,
                "figures": r.figures,
                "probes": r.probes,
            })
        })
        .collect();
    std::fs::write(
        report,
        serde_json::to_string_pretty(
            &json!({"modes": modes, "kernels": summaries, "rows": rows_json}),
        )?,
    )
    .with_context(|| format!("writing {}", report.display()))
}

/// The tests' chain program (`fdprof/tests/programs/chain.c`), static (the guest has no C
/// library) and built as distributions build: `-O2 -fomit-frame-pointer`.
pub(crate) fn chain_program() -> Result<std::path::PathBuf> {
    let out = vm_dir().join("chain");
    let source = crate::workspace::root().join("fdprof/tests/programs/chain.c");
    let status = std::process::Command::new("cc")
        .args(["-static", "-O2", "-fomit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .context("cannot run cc")?;
    if !status.success() {
        bail!("cc {} failed ({status})", source.display());
    }
    Ok(out)
}
