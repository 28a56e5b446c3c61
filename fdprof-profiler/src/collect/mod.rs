//! The profiler: attaching the programs, and reading what they aggregated as snapshots.

pub(crate) mod attach;
pub(crate) mod batch;
pub mod cgroups;
pub mod counters;
pub(crate) mod cpu;
pub(crate) mod direct;
pub(crate) mod events;
#[cfg(test)]
mod events_tests;
pub(crate) mod exited;
pub(crate) mod identity;
pub(crate) mod kernel;
pub mod launch;
pub(crate) mod processes;
pub mod profiler;
pub(crate) mod refusal;
pub(crate) mod ring;
pub(crate) mod slow_sites;
pub(crate) mod snapshot;
pub mod starts;
pub mod stats;
pub mod steal;
pub mod target;
pub mod targets;
pub(crate) mod thread_rows;
pub mod trace;

pub(crate) use events::EventStream;
pub(crate) use events::RawEvent;
pub use kernel::Kernel;
pub use profiler::{CallGraph, Filter, Profiler, ProfilerOptions};
pub use snapshot::Snapshot;
pub use target::{Resolved, TargetSpec};
