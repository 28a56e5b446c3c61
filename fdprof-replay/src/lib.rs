//! Models of the kernel's fd allocator and of the variants proposed for it, with a cost model
//! (bitmap words and cache lines touched per operation), replayed over a trace of fd-table
//! operations. Pure computation: no kernel, no I/O. `docs/replay.md` describes the models.
#![warn(unreachable_pub)]

pub mod bitmap;
pub mod cost;
pub mod event;
pub mod fastalloc;
pub mod fdmap;
pub mod mainline;
pub mod model;
pub mod model_kind;
pub mod replay;
pub mod report;
pub mod synthetic;
pub mod viro;

pub use cost::{Cost, Meter};
pub use event::{TraceEvent, TraceOp};
pub use fastalloc::Fastalloc;
pub use mainline::{Mainline, Version};
pub use model::{Errno, Fdt, Limits, Model};
pub use model_kind::ModelKind;
pub use replay::{Replayer, replay, replay_within, run};
pub use report::{CostSummary, Distribution, ModelResult, Ratios, ratios};
pub use viro::Viro;
