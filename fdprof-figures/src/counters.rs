//! The target's per-thread counters over the recording (perf events in counting mode).

use serde::{Deserialize, Serialize};

/// A counter `record` opens on each thread of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CounterName {
    /// CPU time of the threads, ns (software event: every kernel has it).
    TaskClock,
    ContextSwitches,
    CpuMigrations,
    PageFaults,
    /// Hardware counters: only where a PMU is exposed (not on most VMs).
    Cycles,
    Instructions,
    CacheMisses,
}

impl CounterName {
    /// Every counter, in the order reports show them.
    pub const ALL: [CounterName; 7] = [
        CounterName::TaskClock,
        CounterName::ContextSwitches,
        CounterName::CpuMigrations,
        CounterName::PageFaults,
        CounterName::Cycles,
        CounterName::Instructions,
        CounterName::CacheMisses,
    ];

    /// The name as perf and the JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            CounterName::TaskClock => "task-clock",
            CounterName::ContextSwitches => "context-switches",
            CounterName::CpuMigrations => "cpu-migrations",
            CounterName::PageFaults => "page-faults",
            CounterName::Cycles => "cycles",
            CounterName::Instructions => "instructions",
            CounterName::CacheMisses => "cache-misses",
        }
    }

    /// Whether it needs a hardware PMU.
    pub fn is_hardware(self) -> bool {
        matches!(
            self,
            CounterName::Cycles | CounterName::Instructions | CounterName::CacheMisses
        )
    }
}

/// The counters of a recording: one total per counter and one row per counted thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Every counter asked for, available or not, in [`CounterName::ALL`] order.
    pub totals: Vec<CounterTotal>,
    /// One row per thread alive at the start (each with the threads and processes it created
    /// since, which the kernel folds into their creator's counters), most task-clock first.
    pub threads: Vec<ThreadRow>,
    /// Threads the recording folded into one row (`tid` null) past its bound on rows.
    pub folded_threads: u64,
}

/// One counter over every counted thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterTotal {
    pub name: CounterName,
    /// Why it could not be counted (`no hardware PMU (ENOENT)`); then `value` is null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The sum over the threads, each scaled by its time enabled over time running when the
    /// kernel multiplexed it.
    pub value: Option<u64>,
    /// The sum as counted, unscaled.
    pub raw: u64,
    /// Times the counter was enabled and on the PMU, summed over the threads, ns.
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
    /// Whether the counter was off the PMU for some of its time, so `value` is an estimate.
    pub multiplexed: bool,
    /// `time_running_ns` of `time_enabled_ns`.
    pub running_share: Option<f64>,
}

/// One thread's counters, in the order of [`Counters::totals`] (null: not counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRow {
    /// The thread; null for the row of folded threads.
    pub tid: Option<u32>,
    pub comm: String,
    /// Threads this row stands for: 1, or the folded threads' count.
    pub threads: u64,
    pub values: Vec<Option<u64>>,
}

/// fdprof's cost beside the target's CPU time (task-clock): the "what did this cost" line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetCpu {
    /// The target's task-clock over the recording, ns.
    pub target_cpu_ns: u64,
    /// The programs' run time over the whole recording, extrapolated from the sampled
    /// statistics windows (`run_time_ns × duration / stats_window_ns`); null when not measured.
    pub programs_ns: Option<u64>,
    /// `programs_ns` of `target_cpu_ns`.
    pub programs_share: Option<f64>,
    /// The collector's CPU time of `target_cpu_ns`.
    pub collector_share: Option<f64>,
}
