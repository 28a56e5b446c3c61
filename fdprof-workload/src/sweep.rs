//! `--sweep 1,2,4`: the scenario at each task count, reported like will-it-scale.

use anyhow::Result;

use crate::control::Control;
use crate::output::SweepReport;
use crate::setup::Config;
use crate::{processes, threads};

/// Runs every point (fds are closed between thread-mode points; processes start afresh).
pub(crate) fn run(cfg: &Config, counts: &[u32], ctl: &Control) -> Result<SweepReport> {
    let mut points = Vec::with_capacity(counts.len());
    for &tasks in counts {
        let outcome = if cfg.processes {
            processes::run(cfg, tasks, ctl)?
        } else {
            threads::run(cfg, tasks, ctl, false)?
        };
        let ops: u64 = outcome.tasks.iter().map(|t| t.ops).sum();
        let rate = if outcome.secs > 0.0 {
            ops as f64 / outcome.secs
        } else {
            0.0
        };
        points.push((tasks, rate));
    }
    Ok(SweepReport::new(cfg, &points))
}
