//! `fdprof top --batch`: one plain-text block per interval, like `top -b`: the header (target,
//! mode, interval, drops, steal), `file_lock` waits by operation per second, fd syscalls per
//! second, system-wide the first processes by `file_lock` wait, and a line per diagnosis finding.

use crate::analysis::{self, Interval, IntervalRates};
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

/// Processes a system-wide block lists.
pub(crate) const BATCH_PROCESSES: usize = 5;

/// The block of one interval, ending with a blank line.
pub fn interval(iv: &Interval) -> String {
    let header = &iv.report.header;
    let rates = analysis::rates(iv);
    let mut out = vec![format!(
        "fdprof top - {} - {} mode - interval {} at {} for {} - {} dropped - {}",
        header.target.description,
        header.mode,
        iv.index,
        human::duration(iv.start_ns),
        human::duration(iv.duration_ns),
        iv.report.drops.total,
        human::steal(iv.report.steal.as_ref()),
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
    out.extend(processes(&rates));
    if let Some(cpu) = &iv.report.cpu {
        out.push(on_cpu(cpu));
    }
    for f in &iv.report.diagnosis.findings {
        out.push(format!(
            "diagnosis [{}] {}",
            f.rule,
            crate::escape::name(&f.summary)
        ));
    }
    out.push(String::new());
    out.join("\n") + "\n"
}

/// The first processes by `file_lock` wait, as a table; none where the view has none.
fn processes(rates: &IntervalRates) -> Vec<String> {
    if rates.processes.is_empty() {
        return Vec::new();
    }
    let body: Vec<Vec<String>> = rates
        .processes
        .iter()
        .take(BATCH_PROCESSES)
        .map(|p| {
            vec![
                p.pid.to_string(),
                crate::escape::name(&p.comm).into_owned(),
                rate(p.file_lock_contentions_per_s),
                p.file_lock_wait_ns_per_s
                    .map_or("-".into(), |w| format!("{}/s", human::duration_f(w))),
                rate(p.fd_syscalls_per_s),
            ]
        })
        .collect();
    layout::columns(
        &["pid", "comm", "file_lock/s", "wait/s", "fd syscalls/s"],
        2,
        &body,
        0,
    )
}

/// `on CPU  412 samples: 4.1% in the fd table (alloc 2.0%, close 2.1%, other 0%), 1.5%
/// spinning beneath it`.
fn on_cpu(cpu: &analysis::Cpu) -> String {
    let ops: Vec<String> = cpu
        .by_operation
        .iter()
        .map(|o| format!("{} {}", o.operation, human::percent(o.samples.share_of_all)))
        .collect();
    format!(
        "on CPU  {} samples: {} in the fd table ({}), {} spinning beneath it",
        cpu.samples,
        human::percent(cpu.fd_table.share_of_all),
        ops.join(", "),
        human::percent(cpu.fd_table_spinning.share_of_all)
    )
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
        assert!(lines[0].contains("interval 2 at 2.00 s for 1.00 s - 0 dropped - steal unknown"));
        iv.report.steal = Some(crate::analysis::Steal {
            steal_ns: 20_000_000,
            share: Some(0.01),
            ..Default::default()
        });
        assert!(
            interval(&iv)
                .lines()
                .next()
                .unwrap()
                .ends_with(" - steal 20.0 ms (1.0%)")
        );
        assert!(lines[1].starts_with("file_lock"), "{text}");
        let close = crate::testdata::cells(lines[2]);
        assert_eq!(close, ["close", "1500", "3.00 ms/s", "40.0 µs"]);
        assert_eq!(lines[3], "fd syscalls/s  2000  (close 2000)");
        assert!(
            !text.contains("on CPU"),
            "no on-CPU line without sampling: {text}"
        );
        assert!(!text.contains("diagnosis"), "no finding, no line: {text}");
        iv.report.diagnosis.findings.push(crate::analysis::Finding {
            rule: crate::analysis::Rule::TableGrowth,
            summary: "the table grew".into(),
            evidence: Vec::new(),
            context: Vec::new(),
            stacks: Vec::new(),
            remedy: crate::analysis::Remedy {
                change: String::new(),
                shown_by: None,
                saving: String::new(),
                wait_ns: None,
                syscalls: None,
                scan_words: None,
                table_copies: None,
            },
        });
        let text = interval(&iv);
        assert_eq!(
            text.lines().nth(4),
            Some("diagnosis [table-growth] the table grew")
        );
    }

    #[test]
    fn system_wide_blocks_list_the_first_processes_escaped() {
        let mut iv = Interval {
            duration_ns: 1_000_000_000,
            ..Default::default()
        };
        iv.report.processes = (1..=BATCH_PROCESSES as u32 + 2)
            .map(|pid| fdprof_figures::Process {
                pid,
                comm: "ev\x1bil".into(),
                file_lock_count: 7,
                file_lock_wait_ns: 3_000,
                fd_syscalls: 40,
                ..Default::default()
            })
            .collect();
        let text = interval(&iv);
        assert!(!text.contains('\x1b'), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.contains("ev\\x1bil")).collect();
        assert_eq!(rows.len(), BATCH_PROCESSES, "{text}");
        assert_eq!(
            crate::testdata::cells(rows[0]),
            ["1", "ev\\x1bil", "7.00", "3.00 µs/s", "40.0"]
        );
    }

    #[test]
    fn on_cpu_line_when_sampled() {
        use crate::analysis::{Cpu, CpuEvent, CpuOperation, Share};
        let share = |samples, of: f64| Share {
            samples,
            share_of_all: Some(of),
        };
        let mut iv = Interval::default();
        iv.report.cpu = Some(Cpu {
            event: CpuEvent::CpuClock,
            frequency_hz: 99,
            samples: 200,
            spinning: share(10, 0.05),
            fd_table: share(20, 0.1),
            fd_table_spinning: share(6, 0.03),
            by_operation: vec![CpuOperation {
                operation: Operation::Alloc,
                samples: share(20, 0.1),
                spinning: share(6, 0.03),
                spinning_share: Some(0.3),
            }],
            top_stacks: Vec::new(),
            stacks_total: 0,
        });
        let text = interval(&iv);
        assert!(
            text.contains(
                "on CPU  200 samples: 10.0% in the fd table (alloc 10.0%), 3.0% spinning beneath it"
            ),
            "{text}"
        );
    }
}
