//! On-CPU sampling (`record --cpu`): a perf-event program on every online CPU takes the
//! target's stacks at each sample and counts them per CPU by stack pair.

/// The sampling program (a perf_event program, attached once per online CPU).
pub const PROGRAM: &str = "fdprof_cpu_sample";

/// Per-CPU hash map of [`CpuKey`] → samples (`u64`).
pub const SAMPLES_MAP: &str = "CPU_SAMPLES";

/// The samples' stack-trace map. Their own, not the contention's `STACKS`: at a high
/// frequency the samples' many stacks would fill its buckets, and the contention sites would
/// lose theirs. One entry in the object, [`STACK_TRACES`] set at load when sampling (a stack
/// map is allocated whole: ~1 KiB an entry).
pub const STACKS_MAP: &str = "CPU_STACKS";
pub const STACK_TRACES: u32 = 16384;

/// Stack pairs the map holds; samples of further pairs are counted as drops
/// (`counters::drop::PROBE_CPU`, `MAP_FULL`).
pub const STACK_PAIRS: u32 = 8192;

/// Samples a second per CPU when `--freq` is not given: 99, as `perf record -F 99`, off any
/// round timer frequency so samples do not fall in step with the target's own ticks.
pub const DEFAULT_FREQUENCY_HZ: u64 = 99;

/// The event that drove on-CPU sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum CpuEvent {
    /// The `cpu-clock` software event: the only one a machine without a PMU has.
    CpuClock,
    /// Hardware cycles.
    Cycles,
}

impl CpuEvent {
    /// As `perf` names it.
    pub const fn name(self) -> &'static str {
        match self {
            CpuEvent::CpuClock => "cpu-clock",
            CpuEvent::Cycles => "cycles",
        }
    }
}

impl core::fmt::Display for CpuEvent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The highest `--freq` taken: the kernel's default `perf_event_max_sample_rate`.
pub const MAX_FREQUENCY_HZ: u64 = 100_000;

/// What a sample is counted under.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuKey {
    /// Stack ids in the shared `STACKS` map; negative when there is no such stack: no kernel
    /// stack for a sample taken in user mode, or a stack that could not be taken (a drop).
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// The sampled process when figures are kept per process (`-a`, a target set), whose maps
    /// symbolize the user stack; 0 otherwise.
    pub tgid: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data, three 4-byte fields, no padding.
    unsafe impl aya::Pod for super::CpuKey {}
}
