//! What the benches share: their options, the daemon they start and scrape, the workloads they
//! run, what they read of a process (CPU, memory), medians and ranges, and the tables of
//! figures they print.

pub(crate) mod args;
pub(crate) mod daemon;
pub(crate) mod figures;
pub(crate) mod process;
pub(crate) mod stats;
pub(crate) mod workloads;

use std::path::PathBuf;

use anyhow::Result;

use crate::run::{build_release, fdprof_release};
use crate::workspace::root;

/// Builds fdprof (release) and makes `target/bench/NAME`: the binary and that folder.
pub(crate) fn release_and_dir(name: &str) -> Result<(PathBuf, PathBuf)> {
    build_release()?;
    let dir = root().join("target/bench").join(name);
    std::fs::create_dir_all(&dir)?;
    Ok((fdprof_release(), dir))
}
