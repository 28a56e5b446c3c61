//! The on-CPU figures: the share of samples in the fd-table paths, spinning on a lock beneath
//! them, by operation, and the top on-CPU stacks (the figure the 2015 threads read off
//! `perf top`: "87.8% in _raw_spin_lock, 52.7% under __close_fd, 46.4% under __alloc_fd").

use std::collections::HashMap;

use fdprof_figures::{Cpu, CpuOperation, CpuStack, Frame, Operation, ReportOptions, Share};
use fdprof_recording::Recording;
use fdprof_recording::recording::{CpuSite, Frame as RecordedFrame};

use super::{share, sum};
use crate::model::operation;

/// Spinning on a lock: the spinlock entry and the queued slow path in its variants.
const SPIN_FUNCTIONS: &[&str] = &[
    "_raw_spin_lock",
    "queued_spin_lock_slowpath",
    "native_queued_spin_lock_slowpath",
    "__pv_queued_spin_lock_slowpath",
];

/// The rows of [`Cpu::by_operation`], in order; any other operation counts as `Other`.
const ROWS: [Operation; 3] = [Operation::Alloc, Operation::Close, Operation::Other];

/// A frame's function without compiler-clone suffixes (`alloc_fd.isra.0` is `alloc_fd`).
fn base(frame: &RecordedFrame) -> &str {
    let f = frame.function.as_str();
    f.split('.').next().unwrap_or(f)
}

fn is_spin(frame: &RecordedFrame) -> bool {
    SPIN_FUNCTIONS.contains(&base(frame))
}

/// Where a kernel stack (innermost first) meets the fd table: the index of its innermost
/// `alloc_fd` or close-function frame.
fn fd_table_frame(stack: &[RecordedFrame]) -> Option<usize> {
    stack.iter().position(|f| {
        matches!(
            operation::of_stack([base(f)]),
            Operation::Alloc | Operation::Close
        )
    })
}

/// The on-CPU section, when the recording sampled.
pub(crate) fn cpu(rec: &Recording, opts: &ReportOptions) -> Option<Cpu> {
    let profile = rec.cpu.as_ref()?;
    let all = sum(profile.samples.iter().map(|s| s.count));
    let of_all = |samples: u64| Share {
        samples,
        share_of_all: share(samples, all),
    };
    let mut spinning = 0u64;
    let mut fd_table = 0u64;
    let mut fd_spinning = 0u64;
    let mut rows = [(0u64, 0u64); ROWS.len()];
    for site in &profile.samples {
        let n = site.count;
        if site.kernel_stack.iter().any(is_spin) {
            spinning = spinning.saturating_add(n);
        }
        let Some(at) = fd_table_frame(&site.kernel_stack) else {
            continue;
        };
        let spins = site.kernel_stack[..at].iter().any(is_spin);
        let op = operation::of_stack(site.kernel_stack.iter().map(base));
        let row = ROWS.iter().position(|&r| r == op).unwrap_or(ROWS.len() - 1);
        fd_table = fd_table.saturating_add(n);
        rows[row].0 = rows[row].0.saturating_add(n);
        if spins {
            fd_spinning = fd_spinning.saturating_add(n);
            rows[row].1 = rows[row].1.saturating_add(n);
        }
    }
    let (top_stacks, stacks_total) = top_stacks(&profile.samples, all, opts.top);
    Some(Cpu {
        event: profile.event,
        frequency_hz: profile.frequency_hz,
        samples: all,
        spinning: of_all(spinning),
        fd_table: of_all(fd_table),
        fd_table_spinning: of_all(fd_spinning),
        by_operation: ROWS
            .iter()
            .zip(rows)
            .map(|(&operation, (samples, spins))| CpuOperation {
                operation,
                samples: of_all(samples),
                spinning: of_all(spins),
                spinning_share: share(spins, samples),
            })
            .collect(),
        top_stacks,
        stacks_total,
    })
}

type StackKey<'a> = (
    Vec<(&'a str, Option<&'a str>)>,
    Vec<(&'a str, Option<&'a str>)>,
);

fn key(stack: &[RecordedFrame]) -> Vec<(&str, Option<&str>)> {
    stack
        .iter()
        .map(|f| (f.function.as_str(), f.module.as_deref()))
        .collect()
}

/// Samples merged by stack (function and module per frame, offsets left out), most first,
/// cut to `top` (0: all); and how many stacks there are in all.
fn top_stacks(samples: &[CpuSite], all: u64, top: usize) -> (Vec<CpuStack>, usize) {
    let mut index: HashMap<StackKey<'_>, usize> = HashMap::new();
    let mut groups: Vec<(&CpuSite, u64)> = Vec::new();
    for site in samples {
        let k = (key(&site.kernel_stack), key(&site.user_stack));
        let i = *index.entry(k).or_insert_with(|| {
            groups.push((site, 0));
            groups.len() - 1
        });
        groups[i].1 = groups[i].1.saturating_add(site.count);
    }
    let total = groups.len();
    groups.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    if top > 0 {
        groups.truncate(top);
    }
    let frames = |stack: &[RecordedFrame]| -> Vec<Frame> {
        stack
            .iter()
            .map(|f| super::stacks::figure_frame(f, false))
            .collect()
    };
    let shown = groups
        .iter()
        .enumerate()
        .map(|(i, (site, n))| CpuStack {
            rank: i + 1,
            operation: operation::of_stack(site.kernel_stack.iter().map(base)),
            samples: Share {
                samples: *n,
                share_of_all: share(*n, all),
            },
            kernel_stack: frames(&site.kernel_stack),
            user_stack: frames(&site.user_stack),
        })
        .collect();
    (shown, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{self, frame};
    use fdprof_recording::recording::{CpuEvent, CpuProfile};

    fn site(kernel: &[&str], user: &[&str], count: u64) -> CpuSite {
        let frames = |names: &[&str], module: Option<&str>| {
            names.iter().map(|n| frame(n, 0x10, module)).collect()
        };
        CpuSite {
            kernel_stack: frames(kernel, None),
            user_stack: frames(user, Some("/srv/app")),
            count,
        }
    }

    /// Every kind of sample once: spinning under alloc_fd, close without spinning, expansion
    /// under alloc_fd (the `other` row), user mode, spinning outside the fd table, and a
    /// spinlock outside (callers of) the close function, which is not beneath it.
    fn recording() -> Recording {
        let mut rec = testdata::recording();
        rec.cpu = Some(CpuProfile {
            event: CpuEvent::CpuClock,
            frequency_hz: 99,
            samples: vec![
                site(&[], &["spin", "main"], 4),
                site(
                    &[
                        "native_queued_spin_lock_slowpath",
                        "_raw_spin_lock",
                        "alloc_fd.isra.0",
                        "do_sys_openat2",
                    ],
                    &["open_one", "main"],
                    3,
                ),
                site(&["file_close_fd", "__x64_sys_close"], &["close_one"], 1),
                site(
                    &[
                        "_raw_spin_lock",
                        "expand_files",
                        "alloc_fd",
                        "do_sys_openat2",
                    ],
                    &["open_one", "main"],
                    2,
                ),
                site(&["_raw_spin_lock", "tcp_v4_rcv"], &["recv_one"], 5),
                site(
                    &["file_close_fd", "_raw_spin_lock", "task_work_run"],
                    &[],
                    1,
                ),
            ],
        });
        rec
    }

    #[test]
    fn shares_of_the_fd_table_paths_by_operation() {
        let c = cpu(&recording(), &ReportOptions::default()).unwrap();
        assert_eq!(
            (c.event, c.frequency_hz, c.samples),
            (CpuEvent::CpuClock, 99, 16)
        );
        assert_eq!(c.spinning.samples, 3 + 2 + 5 + 1);
        assert_eq!(c.fd_table.samples, 3 + 1 + 2 + 1);
        assert_eq!(c.fd_table.share_of_all, Some(7.0 / 16.0));
        assert_eq!(c.fd_table_spinning.samples, 3 + 2);
        let rows: Vec<(Operation, u64, u64)> = c
            .by_operation
            .iter()
            .map(|o| (o.operation, o.samples.samples, o.spinning.samples))
            .collect();
        assert_eq!(
            rows,
            [
                (Operation::Alloc, 3, 3),
                (Operation::Close, 2, 0),
                (Operation::Other, 2, 2)
            ]
        );
        assert_eq!(c.by_operation[0].spinning_share, Some(1.0));
        assert_eq!(c.by_operation[1].spinning_share, Some(0.0));
    }

    #[test]
    fn top_stacks_merge_offsets_and_rank_by_samples() {
        let mut rec = recording();
        let profile = rec.cpu.as_mut().unwrap();
        // The same stacks at another offset merge with the first.
        let mut again = profile.samples[1].clone();
        again.kernel_stack[0].offset = 0x99;
        again.count = 3;
        profile.samples.push(again);
        let opts = ReportOptions {
            top: 2,
            ..ReportOptions::default()
        };
        let c = cpu(&rec, &opts).unwrap();
        assert_eq!(c.stacks_total, 6);
        let top: Vec<(usize, u64, Operation)> = c
            .top_stacks
            .iter()
            .map(|s| (s.rank, s.samples.samples, s.operation))
            .collect();
        assert_eq!(top, [(1, 6, Operation::Alloc), (2, 5, Operation::Other)]);
        assert_eq!(c.top_stacks[0].kernel_stack[2].function, "alloc_fd.isra.0");
        assert_eq!(c.top_stacks[0].kernel_stack[2].offset, None);
    }

    #[test]
    fn no_section_without_sampling() {
        assert!(cpu(&testdata::recording(), &ReportOptions::default()).is_none());
    }
}
