//! Aggregates: contention sites, log2 histograms, counters — the one model every front end reads.

pub(crate) mod assemble;
pub mod bounded;
pub mod budget;
pub(crate) mod build;
mod convert;
pub(crate) mod counters;
pub(crate) mod cpu;
pub(crate) mod events;
pub(crate) mod hist;
pub(crate) mod lock;
pub(crate) mod lock_names;
pub(crate) mod merge;
pub(crate) mod operation;
pub mod own;
pub(crate) mod process;
pub mod read;
pub mod recording;
pub(crate) mod sample;
pub mod series;
pub mod trace;
pub(crate) mod window;

pub use hist::Log2Hist;
pub use recording::Recording;
