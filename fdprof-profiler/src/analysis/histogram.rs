//! Histogram summaries.

use fdprof_figures::{Bucket, Histogram, Unit};
use fdprof_recording::hist::{Log2Hist, slot_range};

/// Count, sum, mean, p50/p99/p999 (upper bounds of their log2 buckets, capped at the max), the
/// exact max and the non-empty buckets of `h`.
pub(crate) fn summary(h: &Log2Hist, unit: Unit) -> Histogram {
    let buckets = h
        .slots
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(k, &count)| {
            let (low, high) = slot_range(k);
            Bucket { low, high, count }
        })
        .collect();
    Histogram {
        unit,
        count: h.count,
        sum: h.sum,
        mean: h.mean(),
        p50: h.quantile(0.5),
        p99: h.quantile(0.99),
        p999: h.quantile(0.999),
        max: (h.count > 0).then_some(h.max),
        buckets,
    }
}
