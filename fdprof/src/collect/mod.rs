//! The profiler: attaching the programs, and reading what they aggregated as snapshots.

pub mod attach;
pub(crate) mod batch;
pub(crate) mod cgroups;
pub(crate) mod counters;
pub(crate) mod cpu;
pub(crate) mod direct;
pub mod events;
pub(crate) mod identity;
pub mod kernel;
pub mod launch;
pub(crate) mod processes;
pub mod profiler;
pub mod refusal;
pub(crate) mod ring;
pub mod snapshot;
pub(crate) mod starts;
pub(crate) mod stats;
pub(crate) mod steal;
pub mod target;
pub(crate) mod targets;
pub mod trace;

pub use attach::Attachment;
pub use events::{EventStream, RawEvent, RawKind};
pub use kernel::Kernel;
pub use profiler::{Filter, Profiler, ProfilerOptions};
pub use snapshot::Snapshot;
pub use target::{Resolved, TargetSpec};
