//! What is known of a live profile besides its snapshots: the target, the start, the probes
//! and their notes; each interval's [`Run`] is made from them.

use std::collections::BTreeMap;
use std::time::Duration;

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::EndReason,
};
use fdprof_recording::recording::Target;

use crate::collect::Profiler;
use crate::model::assemble::Run;

#[derive(Debug, Clone)]
pub struct Facts {
    pub target: Target,
    /// When the probes were attached, Unix time in ms.
    pub started_unix_ms: u64,
    pub mode: Mode,
    pub probes: BTreeMap<Role, Attachment>,
    /// Whether the fd syscalls are timed (`--latency`).
    pub syscall_latency: bool,
    pub notes: Vec<String>,
    /// Raw addresses kept (`--raw-addrs`).
    pub raw_addrs: bool,
}

impl Facts {
    /// The facts of `profiler`, profiling `target` since `started_unix_ms`.
    pub(crate) fn of(profiler: &Profiler, target: Target, started_unix_ms: u64) -> Self {
        Self {
            target,
            started_unix_ms,
            mode: profiler.mode(),
            probes: profiler.attachments().clone(),
            syscall_latency: profiler.syscall_latency(),
            notes: profiler.notes().to_vec(),
            raw_addrs: false,
        }
    }

    /// The run of an interval `start` after attach, `duration` long, ended by `end`, that cost
    /// fdprof `collector_cpu_ns`.
    pub(crate) fn run(
        &self,
        start: Duration,
        duration: Duration,
        end: EndReason,
        collector_cpu_ns: u64,
    ) -> Run {
        Run {
            target: self.target.clone(),
            started_unix_ms: self.started_unix_ms + start.as_millis() as u64,
            duration_ns: duration.as_nanos() as u64,
            end_reason: end,
            mode: self.mode,
            probes: self.probes.clone(),
            raw_addrs: self.raw_addrs,
            syscall_latency: self.syscall_latency,
            notes: self.notes.clone(),
            collector_cpu_ns,
        }
    }
}
