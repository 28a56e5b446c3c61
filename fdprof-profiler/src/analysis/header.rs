//! Whose recording, when and how.

use fdprof_figures::{Header, Steal, Target};
use fdprof_recording::Recording;

/// The report's header: target (with its one-line description), kernel, start, duration, end
/// reason, probe modes and the recorder's notes.
pub(crate) fn header(rec: &Recording) -> Header {
    let t = &rec.target;
    Header {
        fdprof_version: rec.fdprof_version.clone(),
        target: Target {
            kind: t.kind,
            pid: t.pid,
            pids: t.pids.clone(),
            children: t.children,
            cgroups: t.cgroups.clone(),
            tid: t.tid,
            command: t.command.clone(),
            comm: t.comm.clone(),
            exit_status: t.exit_status,
            threads: t.threads,
            description: t.describe(),
        },
        kernel_release: rec.kernel_release.clone(),
        started_unix_ms: rec.started_unix_ms,
        duration_ns: rec.duration_ns,
        end_reason: rec.end_reason,
        mode: rec.mode,
        modes: rec.modes.clone(),
        probes: rec.probes.clone(),
        notes: rec.notes.clone(),
    }
}

/// False for `record --lock-only` recordings, whose fd syscall probes were off.
pub(crate) fn fd_activity_recorded(rec: &Recording) -> bool {
    rec.fd_activity_recorded()
}

/// The machine's steal time over the recording, with its shares of the CPUs' time.
pub(crate) fn steal(rec: &Recording) -> Option<Steal> {
    let s = rec.steal?;
    Some(Steal {
        steal_ns: s.steal_ns,
        total_ns: s.total_ns,
        share: super::share(s.steal_ns, s.total_ns),
        cpus: s.cpus,
        max_cpu_steal_ns: s.max_cpu_steal_ns,
        max_cpu_share: super::share(s.max_cpu_steal_ns, s.max_cpu_total_ns),
    })
}
