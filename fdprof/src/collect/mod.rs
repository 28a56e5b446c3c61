//! The profiler: attaching the programs, and reading what they aggregated as snapshots.

pub mod attach;
pub(crate) mod batch;
pub(crate) mod cgroups;
pub(crate) mod counters;
pub(crate) mod cpu;
pub(crate) mod direct;
pub(crate) mod events;
pub(crate) mod exited;
pub(crate) mod identity;
pub(crate) mod kernel;
pub mod launch;
pub(crate) mod processes;
pub(crate) mod profiler;
pub(crate) mod refusal;
pub(crate) mod ring;
pub(crate) mod slow_sites;
pub(crate) mod snapshot;
pub(crate) mod starts;
pub(crate) mod stats;
pub(crate) mod steal;
pub(crate) mod target;
pub mod targets;
pub(crate) mod thread_rows;
pub mod trace;

pub use events::{EventStream, RawEvent, RawKind};
pub use kernel::Kernel;
pub use profiler::{Filter, Profiler, ProfilerOptions};
pub(crate) use snapshot::Snapshot;
pub(crate) use target::{Resolved, TargetSpec};
