//! fdprof: a profiler for the Linux per-process fd table (`alloc_fd`, the close path and
//! `files->file_lock`).
//!
//! Data flows one way: **probe → collect → model → analysis → render**: [`analysis`] computes
//! every figure once, into typed structs; [`render`] and the JSON output only present them.
//! [`commands`] holds one file per subcommand; the binary is a thin `main` over
//! [`commands::main`]. `docs/architecture.md` draws the whole path.

/// `0.1.0 (git 1a2b3c4d5e6f)`: the version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("FDPROF_GIT_COMMIT"),
    ")"
);

pub mod analysis;
pub mod collect;
pub mod commands;
pub mod error;
pub mod escape;
pub mod live;
pub mod model;
pub mod output;
pub mod privileges;
pub mod probe;
pub mod procfs;
pub mod render;
pub mod service;
pub mod symbolize;
#[cfg(any(test, feature = "testdata"))]
#[doc(hidden)]
pub mod testdata;
pub mod tui;
