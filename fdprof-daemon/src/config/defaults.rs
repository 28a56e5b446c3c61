//! What the command line sets: the watch when there is no config file, and the values a config
//! file's absent keys take.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use fdprof_common::probes::Mode;
use fdprof_profiler::collect::CallGraph;
use fdprof_profiler::error::{EXIT_USAGE, fatal};

use super::targets::Shown;
use super::{Capture, Targets, Tracing, Watch};

/// What the command line sets, which a config file's keys override.
#[derive(Debug, Clone)]
pub struct Defaults {
    pub interval: Duration,
    pub slow: Duration,
    pub forced: Option<Mode>,
    pub lock_only: bool,
    pub tracing: Tracing,
    pub latency: bool,
    pub cpu_hz: Option<u64>,
    pub call_graph: CallGraph,
    pub children: bool,
    /// `on` empty: no captures unless the file asks.
    pub capture: Capture,
    pub debug: fdprof_profiler::symbolize::DebugOptions,
}

impl Defaults {
    /// The watch of a command line without a config file: these settings on the targets its
    /// flags name. Errors (of the capture settings first) exit with the usage code.
    pub fn watch(
        &self,
        pids: &[u32],
        comms: &[String],
        cgroups: &[PathBuf],
        all: bool,
    ) -> Result<Watch> {
        let capture = self
            .capture
            .clone()
            .checked(self.interval)
            .map_err(|e| fatal(EXIT_USAGE, e))?;
        Ok(Watch {
            targets: Targets::given(pids, comms, cgroups, all, Shown::Value)?,
            interval: self.interval,
            slow: self.slow,
            forced: self.forced,
            lock_only: self.lock_only,
            tracing: self.tracing.clone(),
            latency: self.latency,
            cpu_hz: self.cpu_hz,
            call_graph: self.call_graph,
            children: self.children,
            capture,
            debug: self.debug.clone(),
        })
    }
}
