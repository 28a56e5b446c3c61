//! Rows of recordings (sites, on-CPU samples, process rows) added up by key, kept indexed while
//! they are added to: a window of the daemon's kept intervals adds tens of thousands, and
//! re-indexing and re-sorting them at every addition made that quadratic (a minute of CPU for
//! 300 intervals of churn).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use fdprof_recording::recording::{ContentionSite, CpuSite, Frame};

/// A row of a recording that adds up with the rows of the same key.
pub(crate) trait Row: Clone {
    fn key_hash(&self) -> u64;
    fn same_key(&self, other: &Self) -> bool;
    fn add(&mut self, other: &Self);
}

/// Rows, each key once, indexed by their key's hash (a chain through `next` on a collision).
#[derive(Debug)]
pub(crate) struct Rows<T> {
    rows: Vec<T>,
    first: HashMap<u64, usize>,
    next: Vec<usize>,
}

const END: usize = usize::MAX;

impl<T: Row> Rows<T> {
    /// `rows`, those of the same key added together.
    pub(crate) fn new(rows: Vec<T>) -> Self {
        let mut out = Self {
            rows: Vec::with_capacity(rows.len()),
            first: HashMap::with_capacity(rows.len()),
            next: Vec::with_capacity(rows.len()),
        };
        for row in rows {
            out.add_owned(row);
        }
        out
    }

    fn find(&self, hash: u64, row: &T) -> Option<usize> {
        let mut i = *self.first.get(&hash)?;
        while i != END {
            if self.rows[i].same_key(row) {
                return Some(i);
            }
            i = self.next[i];
        }
        None
    }

    fn push(&mut self, hash: u64, row: T) {
        let at = self.rows.len();
        self.next.push(self.first.insert(hash, at).unwrap_or(END));
        self.rows.push(row);
    }

    pub(crate) fn add(&mut self, row: &T) {
        let hash = row.key_hash();
        match self.find(hash, row) {
            Some(i) => self.rows[i].add(row),
            None => self.push(hash, row.clone()),
        }
    }

    pub(crate) fn add_owned(&mut self, row: T) {
        let hash = row.key_hash();
        match self.find(hash, &row) {
            Some(i) => self.rows[i].add(&row),
            None => self.push(hash, row),
        }
    }

    pub(crate) fn into_vec(self) -> Vec<T> {
        self.rows
    }
}

pub(crate) fn frames_hash(stack: &[Frame], h: &mut DefaultHasher) {
    stack.len().hash(h);
    for f in stack {
        (&f.function, f.offset, &f.module).hash(h);
    }
}

/// The same code: function, offset and module. Raw addresses (`--raw-addrs`) differ between
/// processes for the same code; the first row's are kept.
pub(crate) fn same_frames(a: &[Frame], b: &[Frame]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.function == y.function && x.offset == y.offset && x.module == y.module)
}

/// On-CPU samples match by frames.
impl Row for CpuSite {
    fn key_hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        frames_hash(&self.kernel_stack, &mut h);
        frames_hash(&self.user_stack, &mut h);
        h.finish()
    }

    fn same_key(&self, b: &Self) -> bool {
        same_frames(&self.kernel_stack, &b.kernel_stack)
            && same_frames(&self.user_stack, &b.user_stack)
    }

    fn add(&mut self, other: &Self) {
        self.count = self.count.saturating_add(other.count);
    }
}

/// Sites in the order the model builds them: most total wait first.
pub(crate) fn sorted_sites(rows: Rows<ContentionSite>) -> Vec<ContentionSite> {
    let mut sites = rows.into_vec();
    sites.sort_by_key(|s| Reverse(s.total_wait_ns));
    sites
}

/// Samples most sampled first.
pub(crate) fn sorted_samples(rows: Rows<CpuSite>) -> Vec<CpuSite> {
    let mut samples = rows.into_vec();
    samples.sort_by_key(|s| Reverse(s.count));
    samples
}
