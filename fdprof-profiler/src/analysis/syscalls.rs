//! The traced syscalls.

use fdprof_figures::{LatencyLevel, Mode, Syscall, SyscallLatency, Unit};
use fdprof_recording::{Recording, hist::Log2Hist};

use super::histogram::summary;

/// What the syscall latencies of `rec` span: the whole syscall in tracepoint mode; nothing
/// when the syscalls were not timed.
pub(crate) fn latency_level(rec: &Recording) -> LatencyLevel {
    if !rec.syscall_latency {
        LatencyLevel::NotMeasured
    } else if rec.mode == Mode::Tracepoint {
        LatencyLevel::SyscallLevel
    } else {
        LatencyLevel::EntryToExit
    }
}

/// The syscalls called at least once, in the recording's order: calls, errors, fds created and
/// closed, allocations and the latency histogram.
pub(crate) fn syscalls(rec: &Recording) -> Vec<Syscall> {
    let level = latency_level(rec);
    // A sum with parts not timed shows no latency rather than that of some calls.
    let untimed = Log2Hist::default();
    rec.syscalls
        .iter()
        .filter(|s| s.calls > 0)
        .map(|s| Syscall {
            name: s.name.clone(),
            calls: s.calls,
            errors: s.errors,
            fds_created: s.fds_created,
            fds_closed: s.fds_closed,
            allocs: s.allocs,
            latency: SyscallLatency {
                histogram: summary(
                    match level {
                        LatencyLevel::NotMeasured => &untimed,
                        _ => &s.latency,
                    },
                    Unit::Ns,
                ),
                level,
            },
        })
        .collect()
}

/// The names of `syscalls`, most calls first (ties by name).
pub(crate) fn syscalls_by_calls(syscalls: &[Syscall]) -> Vec<String> {
    let mut by_calls: Vec<&Syscall> = syscalls.iter().collect();
    by_calls.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    by_calls.into_iter().map(|s| s.name.clone()).collect()
}
