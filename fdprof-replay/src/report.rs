//! What a replay reports per model (serde types, for `--json`), and ratios between models.

use std::collections::BTreeMap;

use crate::cost::Cost;
use crate::model_kind::ModelKind;
use serde::{Deserialize, Serialize};

/// Exact counts of small values, a map for the rare large ones.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    small: Vec<u64>,
    large: BTreeMap<u64, u64>,
    n: u64,
    total: u64,
    max: u64,
}

const SMALL: u64 = 256;

impl Histogram {
    #[inline]
    pub fn record(&mut self, v: u64) {
        if v < SMALL {
            if self.small.is_empty() {
                self.small = vec![0; SMALL as usize];
            }
            self.small[v as usize] += 1;
        } else {
            *self.large.entry(v).or_default() += 1;
        }
        self.n += 1;
        self.total += v;
        self.max = self.max.max(v);
    }

    /// The smallest value with at least `q` of the samples at or below it.
    fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        let small = self.small.iter().enumerate().map(|(v, &c)| (v as u64, c));
        for (v, c) in small.chain(self.large.iter().map(|(&v, &c)| (v, c))) {
            seen += c;
            if seen >= rank {
                return v;
            }
        }
        self.max
    }

    pub fn summary(&self) -> Distribution {
        Distribution {
            total: self.total,
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            max: self.max,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Distribution {
    pub total: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// Per-allocation cost: each counter's distribution over the allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostSummary {
    pub count: u64,
    pub o_rd: Distribution,
    pub f_rd: Distribution,
    pub lk_rd: Distribution,
    pub c_rd: Distribution,
    pub wr: Distribution,
    pub ptr: Distribution,
    pub lines: Distribution,
    pub dirty: Distribution,
}

/// The per-counter histograms behind a [`CostSummary`]: exact counts of values below 256 in
/// fixed arrays (the hot path: one increment per counter; totals and maxima are derived at the
/// end), a map per counter for the rest.
#[derive(Clone, Debug)]
pub struct CostHistograms {
    small: Box<[[u64; SMALL as usize]; 8]>,
    large: [BTreeMap<u64, u64>; 8],
    n: u64,
}

impl Default for CostHistograms {
    fn default() -> CostHistograms {
        CostHistograms {
            small: Box::new([[0; SMALL as usize]; 8]),
            large: Default::default(),
            n: 0,
        }
    }
}

impl CostHistograms {
    #[inline]
    pub fn record(&mut self, c: &Cost) {
        self.n += 1;
        for (i, v) in c.values().into_iter().enumerate() {
            match self.small[i].get_mut(v as usize) {
                Some(count) => *count += 1,
                None => *self.large[i].entry(v).or_default() += 1,
            }
        }
    }

    fn counter(&self, i: usize) -> Histogram {
        let small = self.small[i].to_vec();
        let large = self.large[i].clone();
        let values = small.iter().enumerate().map(|(v, &c)| (v as u64, c));
        let values = values.chain(large.iter().map(|(&v, &c)| (v, c)));
        let (mut total, mut max) = (0, 0);
        for (v, c) in values.filter(|&(_, c)| c > 0) {
            total += v * c;
            max = v;
        }
        Histogram {
            small,
            large,
            n: self.n,
            total,
            max,
        }
    }

    pub fn summary(&self) -> CostSummary {
        let d = |i: usize| self.counter(i).summary();
        CostSummary {
            count: self.n,
            o_rd: d(0),
            f_rd: d(1),
            lk_rd: d(2),
            c_rd: d(3),
            wr: d(4),
            ptr: d(5),
            lines: d(6),
            dirty: d(7),
        }
    }
}

/// A POSIX model checked against the fds the trace shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PosixCheck {
    /// Allocations whose predicted result differs from the traced one (the traced fd is then
    /// adopted). Ambiguous allocations are not counted.
    pub model_mismatch: u64,
    /// Allocations the recorder marked ambiguous.
    pub ambiguous: u64,
}

/// A non-POSIX model's departures from the traced program's fds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// Allocations whose simulated fd differs from the traced fd.
    pub diverged: u64,
    /// Allocations that did not return the lowest free fd ≥ start of the simulated table.
    pub non_lowest: u64,
    /// dup2 onto an fd the simulation had given to another traced fd (that fd is dropped).
    pub collision: u64,
    /// Closes of traced fds dropped by a collision (ignored).
    pub stale_close: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    pub model: ModelKind,
    pub events: u64,
    pub tables: u64,
    /// Allocation events replayed.
    pub allocations: u64,
    /// Allocations the model refused (EMFILE).
    pub alloc_failures: u64,
    pub alloc_cost: CostSummary,
    pub release_cost: Cost,
    pub install_cost: Cost,
    pub close_range_cost: Cost,
    pub fork_cost: Cost,
    pub exec_cost: Cost,
    /// Table growths the model made, and the largest table size it reached.
    pub expansions: u64,
    pub largest_table: u64,
    /// Expand events in the trace (the kernel's own growths).
    pub traced_expansions: u64,
    /// Events the model could not apply (an fd not open, beyond the limits, a bad snapshot).
    pub rejected: u64,
    /// Tables first seen in a non-snapshot event, started empty.
    pub implicit_tables: u64,
    /// Beside `allocations` in JSON: a POSIX model's `model_mismatch` and `ambiguous`.
    #[serde(flatten)]
    pub posix: Option<PosixCheck>,
    /// Beside `allocations` in JSON: a non-POSIX model's divergence counts.
    #[serde(flatten)]
    pub non_posix: Option<Divergence>,
}

/// Each allocation-cost total of a model over mainline's (`None` where mainline's is 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    pub model: ModelKind,
    pub o_rd: Option<f64>,
    pub f_rd: Option<f64>,
    pub lk_rd: Option<f64>,
    /// All bitmap words read (open, full, summary levels).
    pub words: Option<f64>,
    pub wr: Option<f64>,
    pub lines: Option<f64>,
    pub dirty: Option<f64>,
}

pub fn ratios(model: &ModelResult, mainline: &ModelResult) -> Ratios {
    let r = |a: u64, b: u64| (b != 0).then(|| a as f64 / b as f64);
    let (a, b) = (&model.alloc_cost, &mainline.alloc_cost);
    let words = |c: &CostSummary| c.o_rd.total + c.f_rd.total + c.lk_rd.total;
    Ratios {
        model: model.model,
        o_rd: r(a.o_rd.total, b.o_rd.total),
        f_rd: r(a.f_rd.total, b.f_rd.total),
        lk_rd: r(a.lk_rd.total, b.lk_rd.total),
        words: r(words(a), words(b)),
        wr: r(a.wr.total, b.wr.total),
        lines: r(a.lines.total, b.lines.total),
        dirty: r(a.dirty.total, b.dirty.total),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        h.record(10_000);
        let d = h.summary();
        assert_eq!((d.p50, d.p99, d.max, d.total), (51, 100, 10_000, 15_050));
        assert_eq!(Histogram::default().summary(), Distribution::default());
    }
}
