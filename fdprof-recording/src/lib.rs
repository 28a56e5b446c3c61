//! The fdprof recording file, on its own: the types a recording holds ([`recording`], [`hist`],
//! [`lock`], [`series`], [`counters`], [`trace`]), the bounded reader ([`read`], whose lists and
//! strings stop at [`bounded`]'s limits and whose claims must fit [`budget`]), and the writer
//! ([`Recording::write`], to any `Write`: the caller opens the file). No collector, symbolizer,
//! aya or tokio: what reads recordings (`report`, `flamegraph`, `export`, `replay`, `top
//! --from`) needs nothing else, and fdprof's builders fill these types from the collector.
#![warn(unreachable_pub)]

pub mod bounded;
pub mod budget;
pub mod counters;
pub mod escape;
pub mod frame;
pub mod hist;
pub mod lock;
pub mod read;
pub mod recording;
pub mod series;
#[cfg(any(test, feature = "testdata"))]
#[doc(hidden)]
pub mod testdata;
pub mod trace;

pub use hist::Log2Hist;
pub use recording::Recording;
