//! Folded stacks for flamegraphs: the waits that pass a filter, merged by stack and weighted by
//! wait time; or, with `--cpu`, the on-CPU samples weighted by their count.
//!
//! A stack is `op;user_outer;…;user_inner;kernel_outer;…;kernel_inner`: the root frame is the
//! fd-table operation, so the graph splits by operation, and the lock slow path is the leaf. A
//! stack that was not captured is one `[unknown]` frame in its place.

use serde::{Deserialize, Serialize};

use fdprof_figures::{Drops, Header, LockKind, Operation};
use fdprof_recording::Recording;
use fdprof_recording::recording::{ContentionSite, Frame};

use super::stacks::frame_label;
use super::waits::all_wait_ns;

/// Which operations to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpFilter {
    /// Waits while allocating an fd (`alloc_fd`).
    Alloc,
    /// Waits while closing an fd (`file_close_fd`, `close_fd`).
    Close,
    /// Every operation, including `expand`, `dup2`, … and `other`.
    #[default]
    All,
}

impl OpFilter {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpFilter::Alloc => "alloc",
            OpFilter::Close => "close",
            OpFilter::All => "all",
        }
    }

    pub(crate) fn matches(self, operation: Operation) -> bool {
        match self {
            OpFilter::All => true,
            OpFilter::Alloc => operation == Operation::Alloc,
            OpFilter::Close => operation == Operation::Close,
        }
    }
}

/// Which locks to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockFilter {
    /// Only the target's own `files->file_lock`.
    #[default]
    FileLock,
    /// Every lock class recorded (other spinlocks, mutexes, rwsems).
    All,
}

impl LockFilter {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LockFilter::FileLock => LockKind::FileLock.name(),
            LockFilter::All => "all",
        }
    }

    pub(crate) fn matches(self, lock: LockKind) -> bool {
        match self {
            LockFilter::All => true,
            LockFilter::FileLock => lock == LockKind::FileLock,
        }
    }
}

/// What a flamegraph draws (inferno style: plain data with a default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FlamegraphOptions {
    pub op: OpFilter,
    pub lock: LockFilter,
    /// Keep offsets in frame names (`alloc_fd+0x1f`); otherwise frames are function names and
    /// stacks that differ only in offsets merge.
    pub offsets: bool,
}

impl FlamegraphOptions {
    pub(crate) fn matches(&self, site: &ContentionSite) -> bool {
        self.op.matches(site.operation) && self.lock.matches(site.lock)
    }
}

/// What a flamegraph's widths measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weight {
    /// Lock wait, ns (the contention flamegraph).
    #[default]
    WaitNs,
    /// On-CPU samples (`flamegraph --cpu`).
    Samples,
}

/// One folded stack and its weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedStack {
    /// Frame names, root first, joined by `;`; no name holds a `;` or a line break.
    pub stack: String,
    /// The merged sites' total wait (ns) or samples, as [`Folded::weight`] says.
    pub weight: u64,
}

/// Everything a flamegraph of a recording shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Folded {
    pub options: FlamegraphOptions,
    pub weight: Weight,
    /// Whose recording (for the title and notes).
    pub header: Header,
    pub drops: Drops,
    /// The stacks that pass the filter, sorted by stack, identical ones merged; stacks without
    /// wait are left out.
    pub stacks: Vec<FoldedStack>,
    /// Sum of the stacks' weights: the graph's width.
    pub total_weight: u64,
    /// Sites (contention sites, or on-CPU stack pairs) and their weight (wait on all locks, or
    /// samples) in the whole recording, filter or not (to say what a filter left out).
    pub recording_sites: usize,
    pub recording_weight: u64,
}

/// The folded stacks of the waits that pass the filter of `opts`, with what a flamegraph's
/// title and notes name.
pub fn folded(rec: &Recording, opts: &FlamegraphOptions) -> Folded {
    let mut merged: std::collections::BTreeMap<String, u64> = Default::default();
    for site in rec.contention.iter().filter(|s| opts.matches(s)) {
        if site.total_wait_ns == 0 {
            continue;
        }
        let mut stack = site.operation.name().to_string();
        push_reversed(&mut stack, &site.user_stack, opts.offsets);
        push_reversed(&mut stack, &site.kernel_stack, opts.offsets);
        let wait = merged.entry(stack).or_default();
        *wait = wait.saturating_add(site.total_wait_ns);
    }
    graph(
        rec,
        opts,
        Weight::WaitNs,
        merged,
        (rec.contention.len(), all_wait_ns(&rec.contention)),
    )
}

/// The graph of `merged` stacks; `recording` is what the whole recording holds (sites,
/// weight), to say what the filter left out.
fn graph(
    rec: &Recording,
    opts: &FlamegraphOptions,
    weight: Weight,
    merged: std::collections::BTreeMap<String, u64>,
    recording: (usize, u64),
) -> Folded {
    Folded {
        options: *opts,
        weight,
        header: super::header(rec),
        drops: super::drops(rec),
        total_weight: super::sum(merged.values().copied()),
        stacks: merged
            .into_iter()
            .map(|(stack, weight)| FoldedStack { stack, weight })
            .collect(),
        recording_sites: recording.0,
        recording_weight: recording.1,
    }
}

/// The folded on-CPU stacks of the samples whose operation passes `opts.op` (the lock filter
/// does not apply), weighted by samples; `None` when the recording has no on-CPU samples. A
/// sample taken in user mode has no kernel part.
pub fn folded_cpu(rec: &Recording, opts: &FlamegraphOptions) -> Option<Folded> {
    let profile = rec.cpu.as_ref().filter(|p| !p.samples.is_empty())?;
    let mut merged: std::collections::BTreeMap<String, u64> = Default::default();
    for site in &profile.samples {
        let operation = crate::model::operation::of_stack(
            site.kernel_stack.iter().map(|f| f.function.as_str()),
        );
        if site.count == 0 || !opts.op.matches(operation) {
            continue;
        }
        let mut stack = operation.name().to_string();
        push_reversed(&mut stack, &site.user_stack, opts.offsets);
        if !site.kernel_stack.is_empty() {
            push_reversed(&mut stack, &site.kernel_stack, opts.offsets);
        }
        let n = merged.entry(stack).or_default();
        *n = n.saturating_add(site.count);
    }
    let recording = (
        profile.samples.len(),
        super::sum(profile.samples.iter().map(|s| s.count)),
    );
    Some(graph(rec, opts, Weight::Samples, merged, recording))
}

/// Appends `;frame` for each frame, outermost first (the stack is innermost first).
fn push_reversed(stack: &mut String, frames: &[Frame], offsets: bool) {
    if frames.is_empty() {
        stack.push_str(";[unknown]");
        return;
    }
    for f in frames.iter().rev() {
        stack.push(';');
        stack.push_str(&clean(&frame_label(f, offsets)));
    }
}

/// A frame name safe in a folded line: no `;` (the separator), no line breaks, never empty,
/// and not ending in a space and a number.
fn clean(name: &str) -> String {
    let mut s: String = name
        .trim()
        .chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' | '\t' => ' ',
            c => c,
        })
        .collect();
    // Readers of folded stacks (inferno, FlameGraph) take a trailing ` number` for a second
    // count column: that space becomes `_`.
    if let Some(space) = s.rfind(' ')
        && s[space + 1..]
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.')
    {
        s.replace_range(space..=space, "_");
    }
    if s.is_empty() { "[unknown]".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{self, frame};
    use fdprof_recording::recording::{CpuEvent, CpuProfile, CpuSite};

    /// On-CPU stacks: weighted by samples, a user-mode sample without a kernel part, the
    /// operation filter applied; none without samples.
    #[test]
    fn on_cpu_stacks() {
        let mut rec = testdata::recording();
        assert!(folded_cpu(&rec, &FlamegraphOptions::default()).is_none());
        let site = |kernel: &[&str], count| CpuSite {
            kernel_stack: kernel.iter().map(|f| frame(f, 0, None)).collect(),
            user_stack: vec![frame("spin", 0, None), frame("main", 0, None)],
            count,
        };
        rec.cpu = Some(CpuProfile {
            event: CpuEvent::CpuClock,
            frequency_hz: 99,
            samples: vec![site(&[], 7), site(&["_raw_spin_lock", "alloc_fd"], 3)],
        });
        let all = folded_cpu(&rec, &FlamegraphOptions::default()).unwrap();
        assert_eq!(all.weight, Weight::Samples);
        let lines: Vec<(&str, u64)> = all
            .stacks
            .iter()
            .map(|s| (s.stack.as_str(), s.weight))
            .collect();
        assert_eq!(
            lines,
            [
                ("alloc;main;spin;alloc_fd;_raw_spin_lock", 3),
                ("other;main;spin", 7)
            ]
        );
        assert_eq!((all.total_weight, all.recording_weight), (10, 10));
        let close = FlamegraphOptions {
            op: OpFilter::Close,
            ..FlamegraphOptions::default()
        };
        let none = folded_cpu(&rec, &close).unwrap();
        assert!(none.stacks.is_empty());
        assert_eq!(none.recording_weight, 10);
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(clean("foo<[u8; 8]>"), "foo<[u8: 8]>");
        assert_eq!(clean("  "), "[unknown]");
        assert_eq!(clean("a\nb"), "a b");
        assert_eq!(
            clean("operator new(unsigned long)"),
            "operator new(unsigned long)"
        );
        assert_eq!(clean("f 5"), "f_5");
        assert_eq!(clean("f 1.5"), "f_1.5");
    }

    #[test]
    fn filters() {
        assert!(OpFilter::All.matches(Operation::Expand));
        assert!(OpFilter::Alloc.matches(Operation::Alloc));
        assert!(!OpFilter::Alloc.matches(Operation::Close));
        assert!(LockFilter::FileLock.matches(LockKind::FileLock));
        assert!(!LockFilter::FileLock.matches(LockKind::Spinlock));
        assert!(LockFilter::All.matches(LockKind::Mutex));
    }
}
