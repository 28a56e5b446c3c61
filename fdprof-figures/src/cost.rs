//! What recording lost and what it cost.

use serde::{Deserialize, Serialize};

/// Events lost. Every figure of a report with lost events is a lower bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drops {
    /// Sum of the counters.
    pub total: u64,
    /// True when there are counters and all are zero: nothing was lost.
    pub none: bool,
    /// False when the recording has no drop counters: loss cannot be ruled out.
    pub known: bool,
    /// Every counter, zero or not.
    pub counters: Vec<DropCounter>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCounter {
    pub probe: String,
    pub reason: String,
    pub count: u64,
}

/// fdprof's own cost: its eBPF programs' run time (kernel statistics, on in sampled windows)
/// and the collector's CPU time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnCost {
    pub programs: Vec<ProgramCost>,
    /// Sums over `programs`.
    pub run_time_ns: u64,
    pub run_count: u64,
    /// `run_time_ns / run_count`; `null` without runs.
    pub ns_per_run: Option<f64>,
    pub recursion_misses: u64,
    /// `run_time_ns` of `stats_window_ns`, 0..=1 (of one CPU).
    pub programs_cpu_share: Option<f64>,
    /// How much of the recording the programs' statistics cover, ns.
    pub stats_window_ns: u64,
    /// CPU time (user + system) the collector spent while recording, ns.
    pub collector_cpu_ns: u64,
    /// `collector_cpu_ns` of the recording's duration, 0..=1 (of one CPU).
    pub collector_cpu_share: Option<f64>,
    /// fdprof's cost beside the target's task-clock; absent without counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cpu: Option<crate::TargetCpu>,
}

/// One eBPF program's run-time statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramCost {
    pub name: String,
    pub run_time_ns: u64,
    pub run_count: u64,
    /// `run_time_ns / run_count`; `null` without runs.
    pub ns_per_run: Option<f64>,
    /// Runs the kernel skipped because the program was already running on that CPU.
    pub recursion_misses: u64,
}
