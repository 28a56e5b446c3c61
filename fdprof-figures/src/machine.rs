//! What the machine did besides the target: the hypervisor's steal time.

use serde::{Deserialize, Serialize};

/// Time the host ran something else while this VM's vCPUs were runnable, over the recording
/// (`/proc/stat`, tick resolution). A spinning waiter whose vCPU, or whose lock holder's, is
/// preempted waits until the host runs it again: long waits beside much steal are the host's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Steal {
    /// Over all CPUs, ns.
    pub steal_ns: u64,
    /// All the CPUs' time over the recording (idle included), ns.
    pub total_ns: u64,
    /// `steal_ns` over `total_ns`, 0..=1.
    pub share: Option<f64>,
    pub cpus: u32,
    /// The CPU that lost the most: its steal (ns) and its share of that CPU's time.
    pub max_cpu_steal_ns: u64,
    pub max_cpu_share: Option<f64>,
}
