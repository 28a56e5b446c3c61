//! The on-CPU figures: the share of samples in the fd-table paths, spinning on a lock beneath
//! them, by operation, and the top on-CPU stacks (the figure the 2015 threads read off
//! `perf top`: "87.8% in _raw_spin_lock, 52.7% under __close_fd, 46.4% under __alloc_fd").

use std::collections::HashMap;

use fdprof_figures::{Cpu, CpuOperation, CpuStack, Frame, Operation, ReportOptions, Share};

use super::stacks::frame_label;
use super::{share, sum};
use crate::model::Recording;
use crate::model::operation;
use crate::model::recording::{CpuSite, Frame as RecordedFrame};

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
pub fn cpu(rec: &Recording, opts: &ReportOptions) -> Option<Cpu> {
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
            .map(|f| Frame {
                function: frame_label(f, false),
                offset: None,
                module: f.module.clone(),
            })
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
