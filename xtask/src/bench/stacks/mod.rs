//! `cargo xtask bench stacks`: what whole user stacks cost (`--call-graph dwarf`, the
//! default: a copy of the stack's top unwound by fdprof from call-frame information) beside
//! the kernel's frame-pointer walk (`--call-graph fp`, what fdprof did before it unwound
//! copies), measured in the same run:
//! - `record` on opensock -t 2: its ops/s over the mean of the bare runs around it (medians of
//!   `--rounds N`, default 5), each way;
//! - the daemon's own CPU while it follows opensock -t 2, each way, and their ratio;
//! - `record --cpu --freq 999` on opensock -t 2: each sample's cost, in the kernel (the
//!   sampling program's mean run time) and in fdprof (its CPU per sample), each way;
//! - the unwinder's memory (the call-frame information it holds, and fdprof's peak resident
//!   memory) with 1, 50 and 500 distinct executables sampled on CPU under `record -a`.

mod cost;
mod memory;

use std::path::Path;

use anyhow::Result;

use super::harness::args::rounds_arg;
use super::harness::figures::FigureTable;
use super::harness::release_and_dir;
use super::harness::stats::median;
use super::harness::workloads::{opensock, ops_per_sec, result_line};

/// The two ways, as `--call-graph` names them.
const WAYS: [&str; 2] = ["fp", "dwarf"];

pub(crate) fn run(args: &[String]) -> Result<()> {
    let rounds = rounds_arg(args, 5)?;
    let (fdprof, out) = release_and_dir("stacks")?;
    let table = FigureTable::start(60, 16);
    record_ratios(&fdprof, &out, rounds, &table)?;
    cost::daemon_cpu(&fdprof, &out, rounds, &table)?;
    cost::per_sample(&fdprof, &out, &table)?;
    memory::run(&fdprof, &out, &table)
}

/// `record` on opensock -t 2 over bare, each way: bare, fp, dwarf, bare, … so that each run
/// has a bare run on either side.
fn record_ratios(fdprof: &Path, out: &Path, rounds: usize, table: &FigureTable) -> Result<()> {
    let mut ratios = [Vec::new(), Vec::new()];
    let mut before = opensock(fdprof, &[], None)?;
    for round in 0..rounds {
        let mut ops = [0.0; 2];
        // Each way goes first in every other round: neither always follows a bare run.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let way = WAYS[i];
            let data = out.join(format!("record-{way}.data"));
            let argv: Vec<String> = [
                fdprof.display().to_string(),
                "record".into(),
                "--call-graph".into(),
                way.to_string(),
                "-o".into(),
                data.display().to_string(),
                "--".into(),
                fdprof.display().to_string(),
            ]
            .into_iter()
            .chain(["workload", "opensock", "-t", "2", "-n", "4000", "--json"].map(String::from))
            .collect();
            ops[i] = ops_per_sec(&result_line(&argv, "\"ops_per_sec\"")?)?;
        }
        let after = opensock(fdprof, &[], None)?;
        let bare = (before + after) / 2.0;
        for i in 0..2 {
            ratios[i].push(ops[i] / bare);
        }
        before = after;
    }
    let fp = median(&mut ratios[0]);
    let dwarf = median(&mut ratios[1]);
    table.row(
        "record opensock -t 2 / bare, --call-graph fp",
        format!("{fp:.3}"),
    );
    table.row(
        "record opensock -t 2 / bare, --call-graph dwarf",
        format!("{dwarf:.3}"),
    );
    table.row("  dwarf - fp", format!("{:+.3}", dwarf - fp));
    Ok(())
}
