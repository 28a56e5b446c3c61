//! `cargo xtask bench overhead`: what profiling costs the profiled program. The built-in
//! opensock workload (2 threads × 4000 fds) runs bare, under `fdprof record`, under
//! `perf lock record` and under a bpftrace contention-stacks one-liner, each run between two bare
//! runs; medians of ops/s and of the ratios to the mean of the bare runs around are printed, with
//! the recording size per second of profile. `fdprof record --latency` also times every fd
//! syscall: its row shows what that costs; `fdprof record --trace` sends every fd-table
//! operation through the trace ring buffer (its size per second is the trace's). A floor row runs the workload bare under empty
//! programs on the same tracepoints: the most any tracepoint-mode profiler could reach. Then
//! the cost of one syscall, bare, under the floor and under `fdprof record`. Another floor row
//! measures the waits with the least any profiler can do (`lock_reference.rs`): the mean
//! `file_lock` wait each variant reports is compared with it, beside the lock probes' own time
//! per wait. A second reference also makes, after begin's clock, the three helper calls any
//! profiler that keys a wait by task and call site must make there (who is waiting, its task,
//! a read of its saved user registers): the floor of a per-site mean wait.
//! `fdprof top` (1 s intervals) runs the same probes as `record`: its ratio should match.
//! Options: `--rounds N` (default 5), `--only NAME,NAME` (the baseline and these variants),
//! `--only syscost` (the cost of one syscall alone).

use fdprof_common::probes::program;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::bench_floor::{EmptyPrograms, LOCK_HOOKS, RECORD_HOOKS};
use crate::lock_reference::{LockReference, Reference, StatsWindow};
use crate::run::{build_release, fdprof_release, result_line, root};

const WORKLOAD: &[&str] = &[
    "workload", "opensock", "-t", "2", "-n", "4000", "-d", "4s", "--json",
];

const BPFTRACE_SCRIPT: &str = "tracepoint:lock:contention_begin /pid == cpid/ { @start[tid] = nsecs; } \
tracepoint:lock:contention_end /@start[tid]/ { @wait_ns[kstack] = sum(nsecs - @start[tid]); delete(@start[tid]); }";

struct Variant {
    name: &'static str,
    /// Command prefix; the workload's argv follows. Empty for the bare run.
    wrap: fn(&Path, &Path) -> Vec<String>,
    /// Where the profiler writes its recording, for the size figure.
    output: Option<&'static str>,
    /// Empty programs to hold attached around the run.
    empty_hooks: &'static [&'static str],
    /// Measure the waits with a minimal reference ([`LockReference`]).
    lock_reference: Option<Reference>,
}

fn variants() -> Vec<Variant> {
    vec![
        Variant {
            name: "baseline",
            wrap: |_, _| vec![],
            output: None,
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "floor: record hooks",
            wrap: |_, _| vec![],
            output: None,
            empty_hooks: RECORD_HOOKS,
            lock_reference: None,
        },
        Variant {
            name: "floor: lock hooks",
            wrap: |_, _| vec![],
            output: None,
            empty_hooks: LOCK_HOOKS,
            lock_reference: None,
        },
        Variant {
            name: "floor: lock timestamps",
            wrap: |_, _| vec![],
            output: None,
            empty_hooks: &[],
            lock_reference: Some(Reference::Timestamps),
        },
        Variant {
            name: "floor: timestamps + site",
            wrap: |_, _| vec![],
            output: None,
            empty_hooks: &[],
            lock_reference: Some(Reference::WithSite),
        },
        Variant {
            name: "fdprof record",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "-o".into(),
                    out.join("fdprof.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("fdprof.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        // What the per-thread counters (on by default) cost on top of the probes.
        Variant {
            name: "fdprof record --no-counters",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "--no-counters".into(),
                    "-o".into(),
                    out.join("fdprof-no-counters.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("fdprof-no-counters.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "fdprof record --latency",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "--latency".into(),
                    "-o".into(),
                    out.join("fdprof-latency.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("fdprof-latency.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "fdprof record --trace",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "--trace".into(),
                    "-o".into(),
                    out.join(TRACE_OUTPUT).display().to_string(),
                    "--".into(),
                ]
            },
            output: Some(TRACE_OUTPUT),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "fdprof --lock-only",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "--lock-only".into(),
                    "-o".into(),
                    out.join("fdprof-lock-only.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("fdprof-lock-only.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "fdprof --cpu",
            wrap: |fdprof, out| {
                vec![
                    fdprof.display().to_string(),
                    "record".into(),
                    "--cpu".into(),
                    "-o".into(),
                    out.join("fdprof-cpu.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("fdprof-cpu.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "fdprof top",
            wrap: top_wrap,
            output: None,
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "perf lock record",
            wrap: |_, out| {
                vec![
                    "perf".into(),
                    "lock".into(),
                    "record".into(),
                    "-o".into(),
                    out.join("perf.data").display().to_string(),
                    "--".into(),
                ]
            },
            output: Some("perf.data"),
            empty_hooks: &[],
            lock_reference: None,
        },
        Variant {
            name: "bpftrace one-liner",
            wrap: |_, _| {
                vec![
                    "bpftrace".into(),
                    "-q".into(),
                    "-e".into(),
                    BPFTRACE_SCRIPT.into(),
                    "-c".into(),
                ]
            },
            output: None,
            empty_hooks: &[],
            lock_reference: None,
        },
    ]
}

/// `fdprof top --jsonl --interval 1s` with its intervals in `top.jsonl`: a shell keeps the
/// bench's stdout as fd 3 for the workload, so top's lines (tens of kB, not written atomically
/// to a pipe) cannot split the workload's result line.
fn top_wrap(fdprof: &Path, out: &Path) -> Vec<String> {
    [
        "sh",
        "-c",
        r#"top_out="$1"; shift; exec 3>&1 >"$top_out"; exec "$@""#,
        "sh",
        &out.join("top.jsonl").display().to_string(),
        &fdprof.display().to_string(),
        "top",
        "--jsonl",
        "--interval",
        "1s",
        "--",
        "sh",
        "-c",
        r#"exec "$@" >&3 3>&-"#,
        "sh",
    ]
    .map(String::from)
    .to_vec()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn ensure_tools() -> Result<()> {
    let missing: Vec<&str> = [("perf", "linux-perf"), ("bpftrace", "bpftrace")]
        .iter()
        .filter(|(tool, _)| !have(tool))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> installing reference profilers: {}", missing.join(" "));
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("cannot run apt-get")?;
    if !status.success() {
        bail!("apt-get install {} failed", missing.join(" "));
    }
    Ok(())
}

/// How long the reference's run-time statistics are on at the start of a run: what fdprof's
/// sampler gives the start of a recording (`collect::stats`).
const STATS_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// What one run of a variant measured.
struct Run {
    ops: f64,
    /// Recording bytes.
    size: Option<u64>,
    /// The mean `file_lock` wait, ns: from the recording, or the reference's busiest lock.
    avg_wait_ns: Option<f64>,
    /// The lock probes' mean run time per wait, and `contention_end`'s alone (recordings and
    /// the reference).
    probe_ns: Option<(f64, f64)>,
}

/// The variants whose lock probes' run time is measured: the reference and fdprof's two.
const PROBE_TIME: &[&str] = &[
    "floor: lock timestamps",
    "floor: timestamps + site",
    "fdprof record",
    "fdprof --lock-only",
];

/// When the kernel's BPF run-time statistics are on during a run.
#[derive(Clone, Copy, PartialEq)]
enum Stats {
    /// As `record` has them: the first 250 ms (fdprof's sampler; the reference gets the same).
    Sampled,
    /// The whole run, held on by the bench: the probes' run time in steady state, walks and
    /// all, not only at the start where every contention site is new. Costs the run its
    /// statistics' clock reads, so these runs give no ratio.
    Whole,
}

/// Runs one variant once.
fn run_once(v: &Variant, fdprof: &Path, out: &Path, stats: Stats) -> Result<Run> {
    let mut argv = (v.wrap)(fdprof, out);
    let workload: Vec<String> = std::iter::once(fdprof.display().to_string())
        .chain(WORKLOAD.iter().map(|s| s.to_string()))
        .collect();
    if v.name == "bpftrace one-liner" {
        argv.push(workload.join(" "));
    } else {
        argv.extend(workload);
    }
    let _floor = EmptyPrograms::attach(v.empty_hooks)?;
    let reference = v.lock_reference.map(LockReference::attach).transpose()?;
    let stats = match (stats, &reference) {
        (Stats::Whole, _) => Some(StatsWindow::start(None)?),
        (Stats::Sampled, Some(_)) => Some(StatsWindow::start(Some(STATS_WINDOW))?),
        (Stats::Sampled, None) => None,
    };
    let line = result_line(&argv, "\"ops_per_sec\"").with_context(|| v.name)?;
    drop(stats);
    let ops = serde_json::from_str::<serde_json::Value>(&line)?["ops_per_sec"]
        .as_f64()
        .context("cannot parse ops_per_sec")?;
    let mut run = Run {
        ops,
        size: v
            .output
            .and_then(|f| std::fs::metadata(out.join(f)).ok())
            .map(|m| m.len()),
        avg_wait_ns: None,
        probe_ns: None,
    };
    if let Some(r) = reference {
        run.avg_wait_ns = r
            .busiest()?
            .filter(|w| w.count > 0)
            .map(|w| w.total_ns as f64 / w.count as f64);
        run.probe_ns = match r.run_times()? {
            [Some(begin), Some(end)] => Some((begin + end, end)),
            _ => None,
        };
    }
    if let Some(file) = v.output.filter(|f| f.starts_with("fdprof")) {
        (run.avg_wait_ns, run.probe_ns) = recorded_waits(fdprof, &out.join(file))?;
    }
    Ok(run)
}

/// The mean `file_lock` wait, and the lock probes' run time per wait with `contention_end`'s
/// alone.
type WaitFigures = (Option<f64>, Option<(f64, f64)>);

/// [`WaitFigures`] from a recording's report.
fn recorded_waits(fdprof: &Path, file: &Path) -> Result<WaitFigures> {
    let out = Command::new(fdprof)
        .args(["report", "--json"])
        .arg(file)
        .output()
        .context("cannot run fdprof report")?;
    if !out.status.success() {
        bail!("fdprof report {} failed", file.display());
    }
    let r: fdprof_figures::Report = serde_json::from_slice(&out.stdout)?;
    let c = &r.contention;
    let avg =
        (c.file_lock_count > 0).then(|| c.file_lock_wait_ns as f64 / c.file_lock_count as f64);
    // From the programs' own mean run times, walks included: with the statistics on
    // throughout ([`Stats::Whole`]), these cover the whole run.
    let per_run = |name: &str| {
        r.own_cost
            .programs
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.ns_per_run)
    };
    let begin = per_run(program::LOCK_BEGIN);
    let end = per_run(program::LOCK_END);
    Ok((avg, begin.zip(end).map(|(b, e)| (b + e, e))))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = crate::run::rounds_arg(args, 5)?;
    ensure_tools()?;
    build_release()?;
    let fdprof = fdprof_release();
    let out: PathBuf = root().join("target/bench/overhead");
    std::fs::create_dir_all(&out)?;
    let before = before_arg(args)?;
    if only_syscost(args) {
        return crate::bench_syscost::run(&fdprof, before.as_deref(), &out, rounds);
    }
    let variants = selected(variants(), args)?;
    // Each variant runs between two baseline runs and is compared with their mean: this VM's
    // speed drifts by ±10% within a minute, which medians of separate columns do not cancel.
    let mut ops: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut bytes_per_s: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut waits: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut probes: Vec<Vec<(f64, f64)>> = vec![Vec::new(); variants.len()];
    let (base, others) = variants.split_first().expect("a baseline variant");
    for round in 1..=rounds {
        let mut before = run_once(base, &fdprof, &out, Stats::Sampled)?.ops;
        eprintln!(
            "round {round}/{rounds}  {:<28} {:>12.0} ops/s",
            base.name, before
        );
        ops[0].push(before);
        for (i, v) in others.iter().enumerate().map(|(i, v)| (i + 1, v)) {
            let run = run_once(v, &fdprof, &out, Stats::Sampled)?;
            let (o, size) = (run.ops, run.size);
            waits[i].extend(run.avg_wait_ns);
            let after = run_once(base, &fdprof, &out, Stats::Sampled)?.ops;
            let ratio = o / ((before + after) / 2.0);
            eprintln!(
                "round {round}/{rounds}  {:<28} {:>12.0} ops/s  ratio {ratio:.3}  (baseline {after:.0})",
                v.name, o
            );
            ops[i].push(o);
            ops[0].push(after);
            ratios[i].push(ratio);
            if let Some(size) = size {
                bytes_per_s[i].push(size as f64 / 4.0);
            }
            before = after;
        }
    }
    ratios[0] = vec![1.0];
    println!(
        "\nopensock -t 2 -n 4000, 4 s per run, {rounds} rounds; each variant between two baseline \
         runs (medians)"
    );
    println!(
        "{:<28} {:>12} {:>8} {:>16} {:>16}",
        "variant", "ops/s", "ratio", "ratio range", "recording/s"
    );
    for (i, v) in variants.iter().enumerate() {
        let m = median(&mut ops[i]);
        let lo = ratios[i].iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios[i].iter().copied().fold(0.0, f64::max);
        let size = if bytes_per_s[i].is_empty() {
            "-".to_string()
        } else {
            format!("{:.1} kB/s", median(&mut bytes_per_s[i]) / 1e3)
        };
        println!(
            "{:<28} {:>12.0} {:>8.3} {:>16} {:>16}",
            v.name,
            m,
            median(&mut ratios[i]),
            format!("{lo:.3}–{hi:.3}"),
            size
        );
    }
    // The lock probes' own time, from runs of their own with the statistics on throughout.
    for (i, v) in variants.iter().enumerate() {
        if !PROBE_TIME.contains(&v.name) {
            continue;
        }
        for round in 1..=rounds {
            let run = run_once(v, &fdprof, &out, Stats::Whole)?;
            if let Some((per_wait, end)) = run.probe_ns {
                eprintln!(
                    "probe time {round}/{rounds}  {:<28} {per_wait:>6.0} ns/wait  end {end:.0} ns/run",
                    v.name
                );
            }
            probes[i].extend(run.probe_ns);
        }
    }
    wait_table(&variants, rounds, &mut waits, &mut probes);
    if variants.iter().any(|v| v.output == Some(TRACE_OUTPUT)) {
        trace_size(&out.join(TRACE_OUTPUT))?;
    }
    if args.iter().any(|a| a == "--only") {
        return Ok(());
    }
    crate::bench_syscost::run(&fdprof, before.as_deref(), &out, rounds)
}

/// `--before PATH`: another build of fdprof (an executable file) for the syscost statistics'
/// `record -a` row, so a change is measured against what it changed in the same run.
fn before_arg(args: &[String]) -> Result<Option<PathBuf>> {
    let Some(i) = args.iter().position(|a| a == "--before") else {
        return Ok(None);
    };
    let path = PathBuf::from(args.get(i + 1).context("--before takes a path to fdprof")?);
    if !path.is_file() {
        bail!("--before {}: not a file", path.display());
    }
    Ok(Some(path))
}

/// The `record --trace` row's recording.
const TRACE_OUTPUT: &str = "fdprof-trace.data";

/// What the last `record --trace` run's trace takes on disk, per traced operation: its rows
/// (varints, deflated, base64) and the whole recording.
fn trace_size(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let rec: serde_json::Value = serde_json::from_slice(&bytes)?;
    let events = rec["trace"]["events"].as_u64().unwrap_or(0);
    let rows = rec["trace"]["data"].as_str().map_or(0, str::len);
    if events == 0 {
        bail!("{} holds no traced operation", file.display());
    }
    println!(
        "\nrecord --trace, last run: {events} operations traced; {:.1} bytes an operation in the \
         trace's rows, {:.1} in the whole recording ({} bytes)",
        rows as f64 / events as f64,
        bytes.len() as f64 / events as f64,
        bytes.len()
    );
    Ok(())
}

/// The mean `file_lock` wait each variant measured, against the timestamp-only reference's,
/// and the lock probes' own time per wait.
fn wait_table(
    variants: &[Variant],
    rounds: usize,
    waits: &mut [Vec<f64>],
    probes: &mut [Vec<(f64, f64)>],
) {
    let reference = variants
        .iter()
        .position(|v| v.lock_reference == Some(Reference::Timestamps))
        .filter(|&i| !waits[i].is_empty())
        .map(|i| median(&mut waits[i]));
    println!(
        "\nfile_lock waits (medians): the mean wait each measured in the rounds above, against \
         the reference's (clock + one store at begin, clock + one add at end); the lock probes' \
         run time per wait (begin + end) and end's alone, from {rounds} more runs each with BPF \
         run-time statistics on throughout"
    );
    println!(
        "{:<28} {:>12} {:>14} {:>16} {:>12}",
        "variant", "avg wait", "/ reference", "probe ns/wait", "end ns/run"
    );
    for (i, v) in variants.iter().enumerate() {
        if waits[i].is_empty() && probes[i].is_empty() {
            continue;
        }
        let avg = (!waits[i].is_empty()).then(|| median(&mut waits[i]));
        let vs = match (avg, reference) {
            (Some(avg), Some(r)) => format!("{:.3}", avg / r),
            _ => "-".into(),
        };
        let avg = avg.map_or("-".into(), |a| format!("{a:.0} ns"));
        let (per_wait, end) = if probes[i].is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let mut p: Vec<f64> = probes[i].iter().map(|p| p.0).collect();
            let mut e: Vec<f64> = probes[i].iter().map(|p| p.1).collect();
            (
                format!("{:.0}", median(&mut p)),
                format!("{:.0}", median(&mut e)),
            )
        };
        println!(
            "{:<28} {:>12} {:>14} {:>16} {:>12}",
            v.name, avg, vs, per_wait, end
        );
    }
}

/// `--only syscost`: the syscall-cost bench alone.
fn only_syscost(args: &[String]) -> bool {
    args.iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .is_some_and(|names| names == "syscost")
}

/// `--only NAME,NAME`: the baseline and the variants named (the syscall-cost bench is skipped).
fn selected(all: Vec<Variant>, args: &[String]) -> Result<Vec<Variant>> {
    let Some(i) = args.iter().position(|a| a == "--only") else {
        return Ok(all);
    };
    let names: Vec<&str> = args
        .get(i + 1)
        .context("--only takes variant names, comma-separated")?
        .split(',')
        .collect();
    if let Some(unknown) = names.iter().find(|n| !all.iter().any(|v| v.name == **n)) {
        let known: Vec<&str> = all.iter().map(|v| v.name).collect();
        bail!(
            "--only: no variant {unknown:?} (variants: {})",
            known.join(", ")
        );
    }
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, v)| *i == 0 || names.contains(&v.name))
        .map(|(_, v)| v)
        .collect())
}
