//! The diagnosis: the step from figures to a fix. Each finding names the pattern a rule saw in
//! the report's own figures, the figures and thresholds that fired it, the stacks that carry it,
//! and the remedy with what the figures say it would save. The rules and their thresholds are
//! listed in `docs/figures.md`.

use fdprof_common::fnops::Operation;
use serde::{Deserialize, Serialize};

use crate::Frame;

/// Every finding of one report; empty when no rule fired.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// In [`Rule`] order.
    pub findings: Vec<Finding>,
    /// Rules that could not look at this recording, and why (`close-loops`: recorded without
    /// `--trace`).
    pub not_checked: Vec<NotChecked>,
}

/// A pattern the figures show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// `file_lock` waits: several tasks of one process share the fd table and queue on its lock.
    SharedTable,
    /// The allocator scans far past `next_fd`: holes low in a large table.
    LongScans,
    /// The table grew while the target ran: each growth copies the table.
    TableGrowth,
    /// One thread closes runs of consecutive fds one close(2) at a time.
    CloseLoops,
    /// Much of the wait is interrupt handlers' (`irq`/`softirq`), not the program's own work.
    InterruptTime,
    /// The host ran other things while this VM's vCPUs were runnable: long waits may be a
    /// preempted vCPU's, not the program's.
    HostSteal,
}

impl Rule {
    /// Every rule, in the order findings are listed.
    pub const ALL: [Rule; 6] = [
        Rule::SharedTable,
        Rule::LongScans,
        Rule::TableGrowth,
        Rule::CloseLoops,
        Rule::InterruptTime,
        Rule::HostSteal,
    ];

    /// The name JSON and text use.
    pub fn name(self) -> &'static str {
        match self {
            Rule::SharedTable => "shared-table",
            Rule::LongScans => "long-scans",
            Rule::TableGrowth => "table-growth",
            Rule::CloseLoops => "close-loops",
            Rule::InterruptTime => "interrupt-time",
            Rule::HostSteal => "host-steal",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule that fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: Rule,
    /// One sentence: what the figures show and what it is.
    pub summary: String,
    /// The figures the rule read, each against its threshold; all of them passed.
    pub evidence: Vec<Evidence>,
    /// Further figures that size the pattern (not thresholds).
    pub context: Vec<Figure>,
    /// The stacks that carry the pattern, heaviest first (at most [`STACKS`]); empty when the
    /// recording has none for it.
    pub stacks: Vec<FindingStack>,
    pub remedy: Remedy,
}

/// The most stacks a finding carries.
pub const STACKS: usize = 3;

/// A figure compared with a rule's threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The figure's JSON path in the report (`contention.file_lock_count`) or, for figures the
    /// diagnosis derives, its own name (`scan.far_share`).
    pub figure: String,
    pub value: f64,
    pub comparison: Comparison,
    pub threshold: f64,
}

/// How a figure must compare with its threshold for the rule to fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    AtLeast,
    AtMost,
}

impl Comparison {
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::AtLeast => value >= threshold,
            Comparison::AtMost => value <= threshold,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::AtLeast => ">=",
            Comparison::AtMost => "<=",
        }
    }
}

/// A named figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
}

/// A stack that carries a finding: a contention stack group weighted by wait, or an on-CPU
/// stack weighted by samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingStack {
    pub source: StackSource,
    pub operation: Operation,
    /// Wait in ns (contention) or samples (cpu).
    pub weight: u64,
    /// Innermost frame first.
    pub kernel_stack: Vec<Frame>,
    pub user_stack: Vec<Frame>,
}

/// Where a [`FindingStack`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StackSource {
    /// A `top_stacks` group: `weight` is its total wait, ns.
    Contention,
    /// An on-CPU stack (`record --cpu`): `weight` is its samples.
    Cpu,
}

/// What removes the pattern and what the figures say it would save.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remedy {
    /// What to change, in one sentence.
    pub change: String,
    /// The `fdprof workload` variant that shows it on the generator, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_by: Option<String>,
    /// What the figures say it saves, in one sentence.
    pub saving: String,
    /// The same as numbers: lock wait saved (ns), syscalls saved, bitmap words not scanned (at least: scan distances are kept as log2 buckets),
    /// table copies avoided; each only where it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_words: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_copies: Option<u64>,
}

/// A rule that did not look at the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotChecked {
    pub rule: Rule,
    pub why: String,
}
