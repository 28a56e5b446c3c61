//! Aggregates: contention sites, log2 histograms, counters — the one model every front end reads.

pub mod assemble;
pub mod bounded;
pub mod budget;
pub mod build;
mod convert;
pub mod counters;
pub mod cpu;
pub mod events;
pub mod hist;
pub mod lock;
pub mod lock_names;
pub mod merge;
pub mod operation;
pub mod own;
pub mod process;
pub mod read;
pub mod recording;
pub mod sample;
pub mod series;
pub mod trace;
pub mod window;

pub use hist::Log2Hist;
pub use recording::Recording;
