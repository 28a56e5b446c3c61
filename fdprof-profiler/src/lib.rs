//! fdprof's profiler: everything between the kernel and a figure on a page, without a command
//! line, an HTTP server or a terminal.
//!
//! Data flows one way: **probe → collect → model → analysis → render**. [`probe`] finds what
//! the kernel offers and loads the eBPF programs, [`collect`] reads their maps and rings,
//! [`symbolize`] names stack frames, [`model`] builds the typed recording, [`live`] drives the
//! same stages interval by interval, [`analysis`] computes every figure once into typed
//! structs, and [`render`] only presents them (text, flamegraphs, pprof, metrics).
//! `docs/architecture.md` draws the whole path; the `fdprof-daemon`, `fdprof-top` and `fdprof`
//! crates are sinks on these figures.
//!
//! Everything is `pub(crate)` unless another crate uses it; `unreachable_pub` keeps a `pub`
//! from outliving its last outside user. The recording format and its reader are the
//! `fdprof_recording` crate.

#![warn(unreachable_pub)]

/// `0.1.0 (git 1a2b3c4d5e6f)`: the version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("FDPROF_GIT_COMMIT"),
    ")"
);

pub mod analysis;
pub mod collect;
/// Both the command line and the daemon's config file read durations in bounded ranges.
pub mod duration;
pub mod error;
// Names read back from a recording are escaped where the format makes figures of them, so the
// one escaping lives with the format.
use fdprof_recording::escape;
pub mod live;
pub mod model;
pub mod output;
pub mod privileges;
pub mod probe;
pub mod procfs;
pub mod render;
pub mod size;
pub mod symbolize;
#[cfg(test)]
mod tests;
pub mod unwind;
#[cfg(test)]
use fdprof_recording::testdata;
