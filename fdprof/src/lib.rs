//! fdprof: a profiler for the Linux per-process fd table (`alloc_fd`, the close path and
//! `files->file_lock`).
//!
//! Data flows one way: **probe → collect → model → analysis → render**: [`analysis`] computes
//! every figure once, into typed structs; [`render`] and the JSON output only present them.
//! `commands` holds one file per subcommand, `tui` the live screen and `service` the daemon:
//! the binary's own, not API; the binary is a thin `main` over [`main`]. `docs/architecture.md` draws the whole path.
//!
//! The API is what a program that records, reads or renders fd-table profiles needs: the
//! recording's builders ([`model`]; the format and its reader are the `fdprof_recording`
//! crate), the figures ([`analysis`]), their renderers
//! ([`render`]), and the collector with its probes and symbolizers ([`collect`], [`probe`],
//! [`symbolize`]); their helpers, the live stage, the support modules and the binary's own
//! modules are `pub(crate)`.

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
