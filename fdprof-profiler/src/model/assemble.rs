//! A recording from the profiler's last snapshot and the facts of the run: the one place where
//! a [`Recording`] is put together.

use std::collections::BTreeMap;

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::EndReason,
};
use fdprof_recording::recording::{self, OwnCost, Recording, Target};

use super::build::{self, Symbolizers};
use crate::collect::Snapshot;

/// What the recorder knows of the run besides the snapshot.
pub struct Run {
    pub target: Target,
    pub started_unix_ms: u64,
    pub duration_ns: u64,
    pub end_reason: EndReason,
    pub mode: Mode,
    pub probes: BTreeMap<Role, Attachment>,
    pub raw_addrs: bool,
    /// Whether the fd syscalls were timed (`--latency`).
    pub syscall_latency: bool,
    pub notes: Vec<String>,
    /// CPU time fdprof's collector spent while recording.
    pub collector_cpu_ns: u64,
}

/// The recording of `run`, its stacks symbolized through `sym`.
pub fn recording(snap: &Snapshot, run: Run, sym: &mut Symbolizers) -> Recording {
    let direct = run.probes.values().any(Attachment::is_direct);
    Recording {
        format: recording::FORMAT.into(),
        version: recording::VERSION,
        fdprof_version: env!("CARGO_PKG_VERSION").into(),
        kernel_release: crate::probe::capabilities::kernel_release(),
        target: run.target,
        started_unix_ms: run.started_unix_ms,
        duration_ns: run.duration_ns,
        end_reason: run.end_reason,
        mode: run.mode,
        modes: Recording::modes_text(&run.probes),
        probes: run.probes,
        raw_addrs: run.raw_addrs,
        syscall_latency: run.syscall_latency,
        contention: build::contention_sites(snap, sym),
        stack_walks: build::stack_walks(snap),
        functions: build::functions(snap, direct),
        syscalls: build::syscalls(snap),
        scan: build::scan(snap),
        table: build::table(snap),
        drops: build::drops(snap),
        own_cost: OwnCost {
            programs: build::program_costs(snap),
            collector_cpu_ns: run.collector_cpu_ns,
            stats_window_ns: snap.stats_window.as_nanos() as u64,
            walk_ns_sampled: snap.walk_ns_sampled,
        },
        notes: run.notes,
        series: None,
        cpu: super::cpu::profile(snap, sym),
        trace: None,
        counters: None,
        processes: build::processes(snap),
        processes_folded: None,
        steal: snap.machine.as_ref().map(|m| m.steal().into()),
        // The daemon at rest marks its intervals' windows itself.
        full_tracing: None,
    }
}
