//! Rates of one live interval (`fdprof top`): what happened per second, from the interval's
//! own figures.

use fdprof_common::fnops::Operation;

use super::Interval;

/// One interval's activity per second.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IntervalRates {
    /// `file_lock` waits by operation, in the report's order (most wait first).
    pub file_lock: Vec<OperationRate>,
    /// Traced fd syscalls per second, all together; `None` when the interval has no length or
    /// fd activity was not recorded (`--lock-only`).
    pub fd_syscalls_per_s: Option<f64>,
    /// Per syscall called in the interval, most calls first.
    pub syscalls: Vec<SyscallRate>,
    /// Per process (system-wide only), in the report's order: most `file_lock` wait first.
    pub processes: Vec<ProcessRate>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessRate {
    pub pid: u32,
    pub comm: String,
    /// Waits on its own `file_lock` per second, and their time per second (ns/s).
    pub file_lock_contentions_per_s: Option<f64>,
    pub file_lock_wait_ns_per_s: Option<f64>,
    pub fd_syscalls_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OperationRate {
    pub operation: Operation,
    pub contentions_per_s: Option<f64>,
    /// Time spent waiting per second of the interval (ns/s): 1e9 is one thread waiting all along.
    pub wait_ns_per_s: Option<f64>,
    /// The longest wait of the run so far (a maximum cannot be split into intervals), ns.
    pub max_wait_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyscallRate {
    pub name: String,
    pub calls_per_s: Option<f64>,
}

/// `count` per second of `duration_ns`; `None` for an interval of no length.
pub(crate) fn per_second(count: u64, duration_ns: u64) -> Option<f64> {
    (duration_ns > 0).then(|| count as f64 * 1e9 / duration_ns as f64)
}

/// The rates of `interval`.
pub(crate) fn rates(interval: &Interval) -> IntervalRates {
    let d = interval.duration_ns;
    let report = &interval.report;
    let file_lock = report
        .contention
        .by_lock_operation
        .iter()
        .filter(|row| row.lock.is_file_lock())
        .map(|row| OperationRate {
            operation: row.operation,
            contentions_per_s: per_second(row.count, d),
            wait_ns_per_s: per_second(row.total_wait_ns, d),
            max_wait_ns: row.max_wait_ns,
        })
        .collect();
    let calls = |name: &str| {
        report
            .syscalls
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.calls)
    };
    let syscalls = report
        .syscalls_by_calls
        .iter()
        .map(|name| SyscallRate {
            name: name.clone(),
            calls_per_s: per_second(calls(name), d),
        })
        .collect();
    let all_calls = super::sum(report.syscalls.iter().map(|s| s.calls));
    let processes = report
        .processes
        .iter()
        .map(|p| ProcessRate {
            pid: p.pid,
            comm: p.comm.clone(),
            file_lock_contentions_per_s: per_second(p.file_lock_count, d),
            file_lock_wait_ns_per_s: per_second(p.file_lock_wait_ns, d),
            fd_syscalls_per_s: per_second(p.fd_syscalls, d),
        })
        .collect();
    IntervalRates {
        file_lock,
        fd_syscalls_per_s: per_second(all_calls, d).filter(|_| report.fd_activity_recorded),
        syscalls,
        processes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{LockOperation, Syscall};
    use fdprof_common::contention::LockKind;
    use fdprof_figures::Lock;

    #[test]
    fn rates_are_per_second_of_the_interval() {
        let mut iv = Interval {
            duration_ns: 500_000_000,
            ..Default::default()
        };
        iv.report.contention.by_lock_operation = vec![
            LockOperation {
                lock: Lock::file_lock(),
                operation: Operation::Alloc,
                count: 10,
                total_wait_ns: 2_000,
                max_wait_ns: 700,
                ..Default::default()
            },
            LockOperation {
                lock: Lock::of_kind(LockKind::Spinlock),
                count: 99,
                ..Default::default()
            },
        ];
        iv.report.syscalls = vec![Syscall {
            name: "socket".into(),
            calls: 300,
            ..Default::default()
        }];
        iv.report.syscalls_by_calls = vec!["socket".into()];
        iv.report.processes = vec![fdprof_figures::Process {
            pid: 9,
            comm: "srv".into(),
            file_lock_count: 10,
            file_lock_wait_ns: 2_000,
            fd_syscalls: 300,
            ..Default::default()
        }];
        let r = rates(&iv);
        let p = &r.processes[0];
        assert_eq!((p.pid, p.comm.as_str()), (9, "srv"));
        assert_eq!(p.file_lock_contentions_per_s, Some(20.0));
        assert_eq!(p.file_lock_wait_ns_per_s, Some(4_000.0));
        assert_eq!(p.fd_syscalls_per_s, Some(600.0));
        assert_eq!(r.file_lock.len(), 1, "file_lock rows only");
        assert_eq!(r.file_lock[0].contentions_per_s, Some(20.0));
        assert_eq!(r.file_lock[0].wait_ns_per_s, Some(4_000.0));
        assert_eq!(r.fd_syscalls_per_s, Some(600.0));
        assert_eq!(r.syscalls[0].calls_per_s, Some(600.0));
        iv.duration_ns = 0;
        assert_eq!(rates(&iv).fd_syscalls_per_s, None);
        iv.report.fd_activity_recorded = false;
        iv.duration_ns = 1;
        assert_eq!(rates(&iv).fd_syscalls_per_s, None);
    }
}
