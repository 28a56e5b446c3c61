//! fdprof: a profiler for the Linux per-process fd table (`alloc_fd`, the close path and
//! `files->file_lock`).
//!
//! Data flows one way: **probe → collect → model → analysis → render**: [`analysis`] computes
//! every figure once, into typed structs; [`render`] and the JSON output only present them.
//! `commands` holds one file per subcommand, `tui` the live screen and `service` the daemon:
//! the binary's own, not API; the binary is a thin `main` over [`main`].
//! `docs/architecture.md` draws the whole path.
//!
//! Everything is `pub(crate)` unless another crate uses it: the integration tests
//! (`tests/it`) reach the collector, probes, symbolizers, figures and renderers through the
//! public modules below, and nothing else. `unreachable_pub` keeps a `pub` from outliving its
//! last outside user; the recording format and its reader are the `fdprof_recording` crate.

#![warn(unreachable_pub)]

/// `0.1.0 (git 1a2b3c4d5e6f)`: the version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("FDPROF_GIT_COMMIT"),
    ")"
);

pub use commands::main;

pub mod analysis;
pub mod collect;
mod commands;
mod error;
// Names read back from a recording are escaped where the format makes figures of them, so the
// one escaping lives with the format.
use fdprof_recording::escape;
mod live;
pub mod model;
pub mod output;
mod privileges;
pub mod probe;
mod procfs;
pub mod render;
mod service;
pub mod symbolize;
#[cfg(any(test, feature = "testdata"))]
#[doc(hidden)]
pub use fdprof_recording::testdata;
mod tui;
