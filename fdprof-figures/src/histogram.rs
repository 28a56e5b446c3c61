//! Log2 histogram summaries.

use serde::{Deserialize, Serialize};

/// A log2 histogram (bcc style) summarized: quantiles are the upper bound of the bucket
/// holding them, capped at the exact max.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub unit: Unit,
    pub count: u64,
    pub sum: u64,
    pub mean: Option<f64>,
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub p999: Option<u64>,
    /// Exact; `null` when empty.
    pub max: Option<u64>,
    /// The non-empty buckets, lowest first.
    pub buckets: Vec<Bucket>,
}

/// Values from `low` to `high` (both included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

/// What a histogram's values measure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Nanoseconds.
    #[default]
    Ns,
    /// Bits of an fd bitmap.
    Bits,
    /// 64-bit words of an fd bitmap.
    Words,
}

/// What a syscall latency spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatencyLevel {
    /// Entry to exit of the syscall's fd-table function (direct probes).
    #[default]
    EntryToExit,
    /// The whole syscall (tracepoint mode).
    SyscallLevel,
    /// Not measured (recorded without `--latency`): the histograms are empty.
    NotMeasured,
}
