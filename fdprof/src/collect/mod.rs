//! The profiler: attaching the programs, and reading what they aggregated as snapshots.

pub mod attach;
pub mod batch;
pub mod cgroups;
pub mod counters;
pub mod cpu;
pub mod direct;
pub mod events;
pub mod identity;
pub mod kernel;
pub mod launch;
pub mod processes;
pub mod profiler;
pub mod refusal;
pub mod ring;
pub mod snapshot;
pub mod starts;
pub mod stats;
pub mod steal;
pub mod target;
pub mod targets;
pub mod trace;

pub use attach::Attachment;
pub use events::{EventStream, RawEvent, RawKind};
pub use kernel::Kernel;
pub use profiler::{Filter, Profiler, ProfilerOptions};
pub use snapshot::Snapshot;
pub use target::{Resolved, TargetSpec};
