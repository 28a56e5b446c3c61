//! The top stacks: contention sites merged by stack, ranked.

use std::collections::HashMap;

use fdprof_figures::{Frame, Lock, LockKind, Operation, ReportOptions, SortKey, TopStack};
use fdprof_recording::Recording;
use fdprof_recording::recording::{ContentionSite, Frame as RecordedFrame};

use super::share;
use super::waits::{Waits, all_wait_ns};

/// Sites of one lock and operation whose stacks are the same sequence of functions (same
/// function and module per frame; offsets too when grouping with offsets), merged. The stacks
/// are those of the first merged site.
struct Group<'a> {
    first: &'a ContentionSite,
    waits: Waits,
}

/// The stack groups in `opts.sort` order (ties: more total wait, more waits, `file_lock`
/// first), cut to the first `opts.top` (0: all), and how many groups there are in all.
pub(crate) fn top_stacks(rec: &Recording, opts: &ReportOptions) -> (Vec<TopStack>, usize) {
    let mut groups = groups(rec, opts.offsets);
    let total = groups.len();
    let avg = |g: &Group<'_>| g.waits.avg_wait_ns().unwrap_or(0.0);
    groups.sort_by(|a, b| {
        let (wa, wb) = (&a.waits, &b.waits);
        let primary = match opts.sort {
            SortKey::Wait => wb.total_wait_ns.cmp(&wa.total_wait_ns),
            SortKey::Count => wb.count.cmp(&wa.count),
            SortKey::Max => wb.max_wait_ns.cmp(&wa.max_wait_ns),
            SortKey::Avg => avg(b).total_cmp(&avg(a)),
        };
        primary
            .then(wb.total_wait_ns.cmp(&wa.total_wait_ns))
            .then(wb.count.cmp(&wa.count))
            .then((b.first.lock == LockKind::FileLock).cmp(&(a.first.lock == LockKind::FileLock)))
    });
    if opts.top > 0 {
        groups.truncate(opts.top);
    }
    let all = all_wait_ns(&rec.contention);
    let frames = |stack: &[RecordedFrame]| -> Vec<Frame> {
        stack
            .iter()
            .map(|f| figure_frame(f, opts.offsets))
            .collect()
    };
    let shown = groups
        .iter()
        .enumerate()
        .map(|(i, g)| TopStack {
            rank: i + 1,
            lock: g.first.figure_lock(),
            operation: g.first.operation,
            sites: g.waits.sites,
            count: g.waits.count,
            total_wait_ns: g.waits.total_wait_ns,
            avg_wait_ns: g.waits.avg_wait_ns(),
            p50_wait_ns: g.waits.wait.quantile(0.5),
            p99_wait_ns: g.waits.wait.quantile(0.99),
            max_wait_ns: g.waits.max_wait_ns,
            share_of_all: share(g.waits.total_wait_ns, all),
            kernel_stack: frames(&g.first.kernel_stack),
            user_stack: frames(&g.first.user_stack),
        })
        .collect();
    (shown, total)
}

type FrameKey<'a> = (&'a str, Option<&'a str>, Option<u64>);

/// Merges the contention sites by stack, in first-seen order.
fn groups(rec: &Recording, offsets: bool) -> Vec<Group<'_>> {
    type Key<'a> = (Lock, Operation, Vec<FrameKey<'a>>, Vec<FrameKey<'a>>);
    let mut index: HashMap<Key<'_>, usize> = HashMap::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    for site in &rec.contention {
        let key = (
            site.figure_lock(),
            site.operation,
            frame_keys(&site.kernel_stack, offsets),
            frame_keys(&site.user_stack, offsets),
        );
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(Group {
                first: site,
                waits: Waits::default(),
            });
            groups.len() - 1
        });
        groups[i].waits.add(site);
    }
    groups
}

fn frame_keys(stack: &[RecordedFrame], offsets: bool) -> Vec<FrameKey<'_>> {
    stack
        .iter()
        .map(|f| {
            (
                f.function.as_str(),
                f.module.as_deref(),
                offsets.then_some(f.offset),
            )
        })
        .collect()
}

/// A frame's name as every front end shows it: the function, control characters escaped,
/// `[unknown]` when unsymbolized, with `+0x1f` when `offsets`.
/// A recorded frame as the figures show it; an unnamed one with what names it later.
pub(crate) fn figure_frame(f: &RecordedFrame, offsets: bool) -> Frame {
    let (build_id, file_offset) = f.unnamed_object();
    Frame {
        function: frame_label(f, false),
        offset: offsets.then_some(f.offset),
        module: f.module.clone(),
        build_id,
        file_offset,
    }
}

pub(crate) fn frame_label(frame: &RecordedFrame, offsets: bool) -> String {
    let name = frame.function.trim();
    let name = if name.is_empty() {
        "[unknown]".into()
    } else {
        crate::escape::name(name)
    };
    if offsets {
        format!("{name}+{:#x}", frame.offset)
    } else {
        name.into_owned()
    }
}
