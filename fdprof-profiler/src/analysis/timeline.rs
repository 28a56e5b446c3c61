//! A history's kept intervals as the points of the page's timeline.

use fdprof_common::contention::LockKind;
use fdprof_figures::{Timeline, TimelinePoint};
use fdprof_recording::Recording;

use super::{live::per_second, sum};

/// The timeline of the intervals' points (oldest first), of `target` or every target.
pub fn timeline(target: Option<&str>, points: impl Iterator<Item = TimelinePoint>) -> Timeline {
    Timeline {
        target: target.map(String::from),
        points: points.collect(),
    }
}

/// One interval's point: made as the interval is kept, so a timeline costs nothing more.
pub fn timeline_point(rec: &Recording) -> TimelinePoint {
    let file_lock = || {
        rec.contention
            .iter()
            .filter(|c| c.lock == LockKind::FileLock)
    };
    let traced_in_full_ns = match &rec.full_tracing {
        Some(full) => full.traced_ns,
        None if rec.fd_activity_recorded() => rec.duration_ns,
        None => 0,
    };
    let fd_syscalls = sum(rec.syscalls.iter().map(|s| s.calls));
    let file_lock_wait_ns = rec.file_lock_wait_ns();
    TimelinePoint {
        start_unix_ms: rec.started_unix_ms,
        duration_ms: rec.duration_ns / 1_000_000,
        file_lock_waits: sum(file_lock().map(|c| c.count)),
        file_lock_wait_ns,
        file_lock_wait_cpus: (rec.duration_ns > 0)
            .then(|| file_lock_wait_ns as f64 / rec.duration_ns as f64),
        fd_syscalls,
        fd_syscalls_per_s: (traced_in_full_ns > 0)
            .then(|| per_second(fd_syscalls, traced_in_full_ns))
            .flatten(),
        traced_in_full_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_its_intervals_file_lock_wait_and_fd_syscalls() {
        let mut rec = crate::testdata::recording();
        rec.duration_ns = 2_000_000_000;
        rec.started_unix_ms = 1_764_000_000_000;
        let t = timeline(Some("web"), std::iter::once(timeline_point(&rec)));
        let p = &t.points[0];
        assert_eq!(t.target.as_deref(), Some("web"));
        assert_eq!(p.start_unix_ms, 1_764_000_000_000);
        assert_eq!(p.duration_ms, 2_000);
        assert_eq!(p.file_lock_wait_ns, rec.file_lock_wait_ns());
        assert_eq!(
            p.file_lock_wait_cpus,
            Some(rec.file_lock_wait_ns() as f64 / 2e9)
        );
        let calls: u64 = rec.syscalls.iter().map(|s| s.calls).sum();
        assert_eq!(p.fd_syscalls, calls);
        // Traced throughout: the rate is over the whole interval.
        assert_eq!(p.traced_in_full_ns, 2_000_000_000);
        assert_eq!(p.fd_syscalls_per_s, Some(calls as f64 / 2.0));
        // At rest, never traced: no rate.
        rec.full_tracing = Some(Default::default());
        let p = timeline_point(&rec);
        assert_eq!((p.traced_in_full_ns, p.fd_syscalls_per_s), (0, None));
    }
}
