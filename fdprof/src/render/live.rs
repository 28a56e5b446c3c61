//! `fdprof top --batch`: one plain-text block per interval, like `top -b`: the header (target,
//! mode, interval, drops), `file_lock` waits by operation per second, fd syscalls per second.

use crate::analysis::{self, Interval};
use crate::render::{human, layout};

/// A rate as `0`, `1.23`, `45.6`, `789`, `12345`.
pub(crate) fn rate(per_s: Option<f64>) -> String {
    match per_s {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(0.0) => "0".into(),
        Some(v) => format!("{v:.2}"),
    }
}

/// The block of one interval, ending with a blank line.
pub fn interval(iv: &Interval) -> String {
    let header = &iv.report.header;
    let rates = analysis::rates(iv);
    let mut out = vec![format!(
        "fdprof top - {} - {} mode - interval {} at {} for {} - {} dropped",
        header.target.description,
        header.mode,
        iv.index,
        human::duration(iv.start_ns),
        human::duration(iv.duration_ns),
        iv.report.drops.total,
    )];
    if rates.file_lock.is_empty() {
        out.push("file_lock  no contention".into());
    } else {
        let body: Vec<Vec<String>> = rates
            .file_lock
            .iter()
            .map(|row| {
                vec![
                    row.operation.name().to_string(),
                    rate(row.contentions_per_s),
                    row.wait_ns_per_s
                        .map_or("-".into(), |w| format!("{}/s", human::duration_f(w))),
                    human::duration(row.max_wait_ns),
                ]
            })
            .collect();
        out.extend(layout::columns(
            &["file_lock", "contentions/s", "wait/s", "max wait"],
            1,
            &body,
            0,
        ));
    }
    if !iv.report.fd_activity_recorded {
        out.push("fd syscalls/s  not recorded (--lock-only)".into());
    } else {
        let each: Vec<String> = rates
            .syscalls
            .iter()
            .map(|s| format!("{} {}", s.name, rate(s.calls_per_s)))
            .collect();
        let mut line = format!("fd syscalls/s  {}", rate(rates.fd_syscalls_per_s));
        if !each.is_empty() {
            line.push_str(&format!("  ({})", each.join(", ")));
        }
        out.push(line);
    }
    out.push(String::new());
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{LockOperation, Syscall};
    use fdprof_common::fnops::Operation;

    #[test]
    fn block_has_header_file_lock_rows_and_syscall_rates() {
        let mut iv = Interval {
            index: 2,
            start_ns: 2_000_000_000,
            duration_ns: 1_000_000_000,
            ..Default::default()
        };
        iv.report.header.target.description = "pid 7 (srv)".into();
        iv.report.contention.by_lock_operation = vec![LockOperation {
            lock: fdprof_figures::Lock::file_lock(),
            operation: Operation::Close,
            count: 1500,
            total_wait_ns: 3_000_000,
            max_wait_ns: 40_000,
            ..Default::default()
        }];
        iv.report.syscalls = vec![Syscall {
            name: "close".into(),
            calls: 2000,
            ..Default::default()
        }];
        iv.report.syscalls_by_calls = vec!["close".into()];
        let text = interval(&iv);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("fdprof top - pid 7 (srv) - "),
            "{text}"
        );
        assert!(lines[0].contains("interval 2 at 2.00 s for 1.00 s - 0 dropped"));
        assert!(lines[1].starts_with("file_lock"), "{text}");
        let close = crate::testdata::cells(lines[2]);
        assert_eq!(close, ["close", "1500", "3.00 ms/s", "40.0 µs"]);
        assert_eq!(lines[3], "fd syscalls/s  2000  (close 2000)");
    }
}
