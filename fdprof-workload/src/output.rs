//! Rendering results: the human summary, the single JSON object, and sweep tables.

use std::fmt::Write as _;

use serde::Serialize;

use crate::ground_truth::Expected;
use crate::outcome::Outcome;
use crate::setup::Config;

/// The result of one run (`--json` prints it as one object).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub scenario: &'static str,
    /// The remedy applied (`reserve`, `close-range`); absent for the plain load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<&'static str>,
    /// What one op is.
    pub op: &'static str,
    /// "threads" (one shared fd table) or "processes" (one table each).
    pub mode: &'static str,
    pub tasks: u32,
    pub pid: u32,
    /// Fds held open besides the per-op ones (all tables together).
    pub fds_held: u64,
    /// Measured-phase length, first task start to last task end.
    pub secs: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub ops_per_sec_per_task: f64,
    pub per_task: Vec<TaskReport>,
    /// Table size (`fdt->max_fds`) at the end; in processes mode the largest table's.
    pub max_fds: u32,
    /// accept: connections made by the connector threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connects: Option<u64>,
    /// Deterministic runs only: exactly what the measured phase did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct TaskReport {
    pub task: usize,
    pub ops: u64,
    pub ops_per_sec: f64,
    /// The CPU it was pinned to (`--pin`).
    pub cpu: Option<usize>,
}

fn rate(ops: u64, secs: f64) -> f64 {
    if secs > 0.0 { ops as f64 / secs } else { 0.0 }
}

impl Report {
    pub(crate) fn new(cfg: &Config, outcome: Outcome) -> Self {
        let ops: u64 = outcome.tasks.iter().map(|t| t.ops).sum();
        let tasks = outcome.tasks.len() as u32;
        let ops_per_sec = rate(ops, outcome.secs);
        Report {
            scenario: cfg.scenario.name(),
            variant: cfg.variant.name(),
            op: cfg.op(),
            mode: if cfg.processes {
                "processes"
            } else {
                "threads"
            },
            tasks,
            pid: std::process::id(),
            fds_held: outcome.fds_held,
            secs: outcome.secs,
            ops,
            ops_per_sec,
            ops_per_sec_per_task: ops_per_sec / f64::from(tasks.max(1)),
            per_task: outcome
                .tasks
                .iter()
                .enumerate()
                .map(|(task, t)| TaskReport {
                    task,
                    ops: t.ops,
                    ops_per_sec: rate(t.ops, t.secs),
                    cpu: t.cpu,
                })
                .collect(),
            max_fds: outcome.max_fds,
            connects: outcome.connects,
            expected: outcome.expected,
        }
    }

    pub(crate) fn human(&self) -> String {
        let task_word = if self.mode == "processes" {
            "process"
        } else {
            "thread"
        };
        let plural = match (self.tasks, self.mode) {
            (1, _) => "",
            (_, "processes") => "es",
            _ => "s",
        };
        let sharing = if self.mode == "processes" {
            "each with its own fd table"
        } else {
            "sharing one fd table"
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}{}: {} {task_word}{plural} {sharing}, {:.2} s",
            self.scenario,
            self.variant.map(|v| format!(" --{v}")).unwrap_or_default(),
            self.tasks,
            self.secs
        );
        let _ = writeln!(s, "  op          {}", self.op);
        let _ = writeln!(
            s,
            "  ops         {} ({} ops/s, {} ops/s per {task_word})",
            group(self.ops),
            group(self.ops_per_sec as u64),
            group(self.ops_per_sec_per_task as u64)
        );
        if self.tasks > 1 {
            let per: Vec<String> = self
                .per_task
                .iter()
                .map(|t| format!("#{} {}", t.task, group(t.ops_per_sec as u64)))
                .collect();
            let _ = writeln!(s, "  per {task_word:<7} {} ops/s", per.join(", "));
        }
        if let Some(c) = self.connects {
            let _ = writeln!(s, "  connects    {}", group(c));
        }
        let _ = writeln!(s, "  fds held    {}", group(self.fds_held));
        let _ = writeln!(
            s,
            "  table size  {} slots (max_fds)",
            group(u64::from(self.max_fds))
        );
        if let Some(e) = &self.expected {
            let calls: Vec<String> = e.syscalls.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  syscalls    {}", calls.join(", "));
            let mut allocs = e.allocs.clone();
            allocs.sort_by_key(|a| std::cmp::Reverse(a.count));
            for a in allocs.iter().take(5) {
                let _ = writeln!(
                    s,
                    "  alloc       {} fd {} from {} (scan {} bits) x{}",
                    a.syscall, a.fd, a.origin, a.scan_bits, a.count
                );
            }
            if allocs.len() > 5 {
                let _ = writeln!(
                    s,
                    "  alloc       ... {} more groups (--json)",
                    allocs.len() - 5
                );
            }
        }
        s
    }
}

/// One point of a sweep, shaped like will-it-scale's output.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SweepRow {
    pub tasks: u32,
    pub ops_per_sec: f64,
    pub ops_per_sec_per_task: f64,
    /// ops/s as a percentage of `tasks` times the baseline's per-task rate.
    pub linear_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct SweepReport {
    pub scenario: &'static str,
    /// The remedy applied; absent for the plain load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<&'static str>,
    pub op: &'static str,
    pub mode: &'static str,
    /// The task count whose per-task rate is 100% linear (1 when swept, else the smallest).
    pub baseline_tasks: u32,
    pub rows: Vec<SweepRow>,
}

impl SweepReport {
    /// `(tasks, ops/s)` points, in the order run.
    pub(crate) fn new(cfg: &Config, points: &[(u32, f64)]) -> Self {
        let (baseline_tasks, base_rate) = points
            .iter()
            .min_by_key(|(t, _)| *t)
            .map(|&(t, r)| (t, r / f64::from(t)))
            .unwrap_or((1, 0.0));
        let rows = points
            .iter()
            .map(|&(tasks, ops_per_sec)| SweepRow {
                tasks,
                ops_per_sec,
                ops_per_sec_per_task: ops_per_sec / f64::from(tasks),
                linear_pct: if base_rate > 0.0 {
                    100.0 * ops_per_sec / (f64::from(tasks) * base_rate)
                } else {
                    0.0
                },
            })
            .collect();
        SweepReport {
            scenario: cfg.scenario.name(),
            variant: cfg.variant.name(),
            op: cfg.op(),
            mode: if cfg.processes {
                "processes"
            } else {
                "threads"
            },
            baseline_tasks,
            rows,
        }
    }

    pub(crate) fn csv(&self) -> String {
        let mut s = String::from("tasks,ops_per_sec,ops_per_sec_per_task,linear_pct\n");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{:.0},{:.0},{:.1}",
                r.tasks, r.ops_per_sec, r.ops_per_sec_per_task, r.linear_pct
            );
        }
        s
    }
}

/// `1234567` → `1,234,567`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_digits() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }
}
