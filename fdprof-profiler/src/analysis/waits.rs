//! Contention sites merged: the accumulator behind per-lock, per-operation and per-stack rows.

use fdprof_recording::hist::Log2Hist;
use fdprof_recording::recording::ContentionSite;

/// The waits of several contention sites added up.
#[derive(Debug, Clone, Default)]
pub(super) struct Waits {
    pub sites: usize,
    pub count: u64,
    pub total_wait_ns: u64,
    /// Exact: the largest single wait of the merged sites.
    pub max_wait_ns: u64,
    /// The merged wait histograms (ns).
    pub wait: Log2Hist,
}

impl Waits {
    pub(super) fn add(&mut self, site: &ContentionSite) {
        self.sites += 1;
        self.count = self.count.saturating_add(site.count);
        self.total_wait_ns = self.total_wait_ns.saturating_add(site.total_wait_ns);
        self.max_wait_ns = self.max_wait_ns.max(site.max_wait_ns).max(site.wait.max);
        self.wait.merge(&site.wait);
    }

    pub(super) fn avg_wait_ns(&self) -> Option<f64> {
        super::mean(self.total_wait_ns, self.count)
    }
}

/// Total wait on all locks, ns.
pub(super) fn all_wait_ns(sites: &[ContentionSite]) -> u64 {
    super::sum(sites.iter().map(|s| s.total_wait_ns))
}
