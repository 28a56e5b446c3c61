//! Figures computed from a [`Recording`] for the renderers: contention per (lock, operation)
//! and contention sites merged by stack. The text and JSON reports (and any other front end)
//! print these; none re-derives them.

use std::collections::HashMap;

use crate::model::hist::Log2Hist;
use crate::model::operation;
use crate::model::recording::{ContentionSite, Frame, Recording};

/// The lock class that is the target's own `files->file_lock`.
pub const FILE_LOCK: &str = "file_lock";

/// Wait on one lock class in one fd-table operation, all stacks merged.
#[derive(Debug, Clone)]
pub struct LockOperation {
    pub lock: String,
    pub operation: String,
    /// Contention sites (distinct stack pairs) merged into this row.
    pub sites: usize,
    pub count: u64,
    pub total_wait_ns: u64,
    /// Exact: the largest `max_wait_ns` of the merged sites.
    pub max_wait_ns: u64,
    /// The merged wait histograms (ns).
    pub wait: Log2Hist,
    /// Total wait on `lock`, all operations.
    pub lock_wait_ns: u64,
    /// Total wait on all locks.
    pub all_wait_ns: u64,
}

impl LockOperation {
    pub fn avg_wait_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_wait_ns as f64 / self.count as f64)
    }
}

/// Total wait on one lock class.
#[derive(Debug, Clone)]
pub struct LockTotal {
    pub lock: String,
    pub count: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
}

/// Rows per (lock, operation): `file_lock` first, then other locks by total wait; within a lock,
/// operations by total wait (ties in the order of [`operation::NAMES`]). Sums saturate, and rows
/// are found by hashing: a corrupt recording may have thousands of lock names.
pub fn by_lock_operation(rec: &Recording) -> Vec<LockOperation> {
    let all_wait_ns = total_wait_ns(rec);
    let locks = by_lock(rec);
    let lock_rank: HashMap<&str, usize> = locks
        .iter()
        .enumerate()
        .map(|(i, l)| (l.lock.as_str(), i))
        .collect();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut rows: Vec<LockOperation> = Vec::new();
    for site in &rec.contention {
        let i = *index
            .entry((&site.lock, &site.operation))
            .or_insert_with(|| {
                rows.push(LockOperation {
                    lock: site.lock.clone(),
                    operation: site.operation.clone(),
                    sites: 0,
                    count: 0,
                    total_wait_ns: 0,
                    max_wait_ns: 0,
                    wait: Log2Hist::default(),
                    lock_wait_ns: lock_rank
                        .get(site.lock.as_str())
                        .map_or(0, |&i| locks[i].total_wait_ns),
                    all_wait_ns,
                });
                rows.len() - 1
            });
        let row = &mut rows[i];
        row.sites += 1;
        row.count = row.count.saturating_add(site.count);
        row.total_wait_ns = row.total_wait_ns.saturating_add(site.total_wait_ns);
        row.max_wait_ns = row.max_wait_ns.max(site.max_wait_ns).max(site.wait.max);
        row.wait.merge(&site.wait);
    }
    let rank = |lock: &str| lock_rank.get(lock).copied().unwrap_or(usize::MAX);
    rows.sort_by(|a, b| {
        rank(&a.lock)
            .cmp(&rank(&b.lock))
            .then(b.total_wait_ns.cmp(&a.total_wait_ns))
            .then(op_rank(&a.operation).cmp(&op_rank(&b.operation)))
            .then(a.operation.cmp(&b.operation))
    });
    rows
}

/// Total wait on all locks (saturating).
pub fn total_wait_ns(rec: &Recording) -> u64 {
    rec.contention
        .iter()
        .fold(0, |sum, c| sum.saturating_add(c.total_wait_ns))
}

/// Totals per lock class: `file_lock` first, then by total wait, then by name.
pub fn by_lock(rec: &Recording) -> Vec<LockTotal> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut locks: Vec<LockTotal> = Vec::new();
    for site in &rec.contention {
        let i = *index.entry(&site.lock).or_insert_with(|| {
            locks.push(LockTotal {
                lock: site.lock.clone(),
                count: 0,
                total_wait_ns: 0,
                max_wait_ns: 0,
            });
            locks.len() - 1
        });
        let lock = &mut locks[i];
        lock.count = lock.count.saturating_add(site.count);
        lock.total_wait_ns = lock.total_wait_ns.saturating_add(site.total_wait_ns);
        lock.max_wait_ns = lock.max_wait_ns.max(site.max_wait_ns).max(site.wait.max);
    }
    locks.sort_by(|a, b| {
        (b.lock == FILE_LOCK)
            .cmp(&(a.lock == FILE_LOCK))
            .then(b.total_wait_ns.cmp(&a.total_wait_ns))
            .then(a.lock.cmp(&b.lock))
    });
    locks
}

fn op_rank(op: &str) -> usize {
    operation::NAMES
        .iter()
        .position(|n| *n == op)
        .unwrap_or(operation::NAMES.len())
}

/// Contention sites of one lock and operation whose stacks are the same sequence of functions
/// (same function and module per frame; offsets too when grouping with offsets), merged.
#[derive(Debug, Clone)]
pub struct StackGroup<'a> {
    pub lock: &'a str,
    pub operation: &'a str,
    /// The stacks of the first merged site, innermost frame first. With offsets off, only the
    /// function and module of these frames are meaningful for the whole group.
    pub kernel_stack: &'a [Frame],
    pub user_stack: &'a [Frame],
    pub sites: usize,
    pub count: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
    pub wait: Log2Hist,
}

impl StackGroup<'_> {
    pub fn avg_wait_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_wait_ns as f64 / self.count as f64)
    }
}

/// Merges the contention sites by stack, in first-seen order (callers sort).
pub fn stack_groups(rec: &Recording, offsets: bool) -> Vec<StackGroup<'_>> {
    type Key<'a> = (&'a str, &'a str, Vec<FrameKey<'a>>, Vec<FrameKey<'a>>);
    let mut index: HashMap<Key<'_>, usize> = HashMap::new();
    let mut groups: Vec<StackGroup<'_>> = Vec::new();
    for site in &rec.contention {
        let key = (
            site.lock.as_str(),
            site.operation.as_str(),
            frame_keys(&site.kernel_stack, offsets),
            frame_keys(&site.user_stack, offsets),
        );
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(empty_group(site));
            groups.len() - 1
        });
        let g = &mut groups[i];
        g.sites += 1;
        g.count = g.count.saturating_add(site.count);
        g.total_wait_ns = g.total_wait_ns.saturating_add(site.total_wait_ns);
        g.max_wait_ns = g.max_wait_ns.max(site.max_wait_ns).max(site.wait.max);
        g.wait.merge(&site.wait);
    }
    groups
}

fn empty_group(site: &ContentionSite) -> StackGroup<'_> {
    StackGroup {
        lock: &site.lock,
        operation: &site.operation,
        kernel_stack: &site.kernel_stack,
        user_stack: &site.user_stack,
        sites: 0,
        count: 0,
        total_wait_ns: 0,
        max_wait_ns: 0,
        wait: Log2Hist::default(),
    }
}

type FrameKey<'a> = (&'a str, Option<&'a str>, Option<u64>);

fn frame_keys(stack: &[Frame], offsets: bool) -> Vec<FrameKey<'_>> {
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

/// A frame's display name: the function (`[unknown]` when unsymbolized), with `+0x1f` when
/// `offsets`.
pub fn frame_label(frame: &Frame, offsets: bool) -> String {
    let name = frame.function.trim();
    let name = if name.is_empty() { "[unknown]" } else { name };
    if offsets {
        format!("{name}+{:#x}", frame.offset)
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::recording::{ContentionSite, Frame};

    fn frame(function: &str, offset: u64) -> Frame {
        Frame {
            function: function.into(),
            offset,
            module: None,
            address: None,
        }
    }

    fn site(lock: &str, op: &str, kernel: Vec<Frame>, waits: &[u64]) -> ContentionSite {
        let mut wait = Log2Hist::default();
        for &w in waits {
            wait.record(w);
        }
        ContentionSite {
            lock: lock.into(),
            operation: op.into(),
            kernel_stack: kernel,
            user_stack: vec![frame("main", 0x10)],
            count: waits.len() as u64,
            total_wait_ns: waits.iter().sum(),
            max_wait_ns: waits.iter().copied().max().unwrap_or(0),
            wait,
        }
    }

    fn rec(contention: Vec<ContentionSite>) -> Recording {
        let mut r: Recording = serde_json::from_value(serde_json::json!({
            "format": "fdprof-recording", "version": 1, "fdprof_version": "0", "kernel_release": "6.18",
            "target": {"kind": "all"}, "started_unix_ms": 0, "duration_ns": 1,
            "end_reason": "duration", "mode": "tracepoint", "modes": {}, "raw_addrs": false,
            "contention": [], "syscalls": [], "scan": {"allocations": 0, "next_fd_hits": 0,
            "below_origin": 0, "origin": "", "bits": {"slots": [], "count": 0, "sum": 0, "max": 0},
            "open_fds_words": {"slots": [], "count": 0, "sum": 0, "max": 0},
            "full_fds_words": {"slots": [], "count": 0, "sum": 0, "max": 0}},
            "table": {"max_fds_first": 0, "max_fds_max": 0, "expansions": 0}, "drops": [],
            "own_cost": {"programs": [], "collector_cpu_ns": 0}
        }))
        .unwrap();
        r.contention = contention;
        r
    }

    #[test]
    fn lock_operation_rows_order_and_merge() {
        let r = rec(vec![
            site("spinlock", "other", vec![frame("x", 0)], &[5000]),
            site(
                "file_lock",
                "close",
                vec![frame("file_close_fd", 1)],
                &[100, 300],
            ),
            site(
                "file_lock",
                "alloc",
                vec![frame("alloc_fd", 1)],
                &[200, 400],
            ),
            site("file_lock", "alloc", vec![frame("alloc_fd", 2)], &[700]),
        ]);
        let rows = by_lock_operation(&r);
        let names: Vec<_> = rows
            .iter()
            .map(|r| (r.lock.as_str(), r.operation.as_str()))
            .collect();
        // file_lock first although the spinlock has more wait.
        assert_eq!(
            names,
            [
                ("file_lock", "alloc"),
                ("file_lock", "close"),
                ("spinlock", "other")
            ]
        );
        assert_eq!(rows[0].count, 3);
        assert_eq!(rows[0].sites, 2);
        assert_eq!(rows[0].total_wait_ns, 1300);
        assert_eq!(rows[0].max_wait_ns, 700);
        assert_eq!(rows[0].wait.count, 3);
        assert_eq!(rows[0].lock_wait_ns, 1700);
        assert_eq!(rows[0].all_wait_ns, 6700);
    }

    #[test]
    fn groups_merge_by_name_unless_offsets() {
        let r = rec(vec![
            site("file_lock", "alloc", vec![frame("alloc_fd", 1)], &[200]),
            site("file_lock", "alloc", vec![frame("alloc_fd", 2)], &[700]),
            site("spinlock", "alloc", vec![frame("alloc_fd", 2)], &[700]),
        ]);
        let g = stack_groups(&r, false);
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].sites, g[0].count, g[0].total_wait_ns), (2, 2, 900));
        assert_eq!(g[0].max_wait_ns, 700);
        assert_eq!(stack_groups(&r, true).len(), 3);
    }

    #[test]
    fn sums_saturate() {
        let mut big = site(
            "file_lock",
            "alloc",
            vec![frame("alloc_fd", 1)],
            &[u64::MAX],
        );
        big.count = u64::MAX;
        let r = rec(vec![big.clone(), big]);
        let row = &by_lock_operation(&r)[0];
        assert_eq!((row.count, row.total_wait_ns), (u64::MAX, u64::MAX));
        assert_eq!((row.wait.count, row.wait.sum), (2, u64::MAX));
        assert_eq!(stack_groups(&r, false)[0].total_wait_ns, u64::MAX);
        let opts = crate::render::ReportOptions::default();
        assert!(crate::render::text(&r, &opts).contains("in 18446744073709551615 waits"));
        crate::render::json(&r, &opts);
    }

    #[test]
    fn labels() {
        assert_eq!(frame_label(&frame("alloc_fd", 0x1f), false), "alloc_fd");
        assert_eq!(frame_label(&frame("alloc_fd", 0x1f), true), "alloc_fd+0x1f");
        assert_eq!(frame_label(&frame("", 0), false), "[unknown]");
    }
}
