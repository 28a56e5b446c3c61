//! Log2 histograms (bcc style) with percentile estimates.

use serde::{Deserialize, Serialize};

/// A log2 histogram: `slots[k]` counts values with `k` significant bits. `max` is exact.
/// Counts and sums saturate: a corrupt recording must not overflow them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Log2Hist {
    #[serde(deserialize_with = "super::bounded::slots")]
    pub slots: Vec<u64>,
    pub count: u64,
    pub sum: u64,
    pub max: u64,
}

/// Lowest and highest value of slot `k`.
pub fn slot_range(k: usize) -> (u64, u64) {
    match k {
        0 => (0, 0),
        64.. => (1 << 63, u64::MAX),
        _ => (1 << (k - 1), (1u64 << k).wrapping_sub(1).max(1 << (k - 1))),
    }
}

impl Log2Hist {
    /// Adds `n` values that fell in slot `k`.
    pub fn add_slot(&mut self, k: usize, n: u64) {
        if n == 0 {
            return;
        }
        if self.slots.len() <= k {
            self.slots.resize(k + 1, 0);
        }
        self.slots[k] = self.slots[k].saturating_add(n);
        self.count = self.count.saturating_add(n);
    }

    /// Records one exact value.
    pub fn record(&mut self, v: u64) {
        self.add_slot(fdprof_common::log2_slot(v) as usize, 1);
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, other: &Log2Hist) {
        for (k, &n) in other.slots.iter().enumerate() {
            self.add_slot(k, n);
        }
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Estimated `q`-quantile (0..=1): the upper bound of the slot holding it, capped at `max`.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen: u64 = 0;
        for (k, &n) in self.slots.iter().enumerate() {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return Some(slot_range(k).1.min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_quantiles() {
        let mut h = Log2Hist::default();
        for v in [0, 1, 2, 3, 4, 1000] {
            h.record(v);
        }
        assert_eq!(h.slots, vec![1, 1, 2, 1, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(h.max, 1000);
        assert_eq!(h.quantile(0.5), Some(3));
        assert_eq!(h.quantile(1.0), Some(1000));
        assert_eq!(slot_range(10), (512, 1023));
    }
}
