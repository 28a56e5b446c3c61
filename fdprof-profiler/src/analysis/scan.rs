//! The lowest-free-fd scan in `alloc_fd` and the table's growth.

use fdprof_figures::{Histogram, Scan, Table, Unit};
use fdprof_recording::Recording;

use super::histogram::summary;
use super::share;

/// Allocations, `next_fd` hits and their rate, allocations below the origin, and the scan
/// distance and words-read histograms.
pub(crate) fn scan(rec: &Recording) -> Scan {
    let s = &rec.scan;
    Scan {
        allocations: s.allocations,
        next_fd_hits: s.next_fd_hits,
        next_fd_hit_rate: share(s.next_fd_hits, s.allocations),
        below_origin: s.below_origin,
        origin: s.origin.clone(),
        bits: summary(&s.bits, Unit::Bits),
        open_fds_words: summary(&s.open_fds_words, Unit::Words),
        full_fds_words: summary(&s.full_fds_words, Unit::Words),
    }
}

/// A scan this many bits past the origin or more is far: past one bitmap word.
pub(super) const FAR_SCAN_BITS: u64 = 64;

/// The allocations of a scan-distance histogram that scanned [`FAR_SCAN_BITS`] or more.
pub(super) fn far_scans(bits: &Histogram) -> u64 {
    bits.buckets
        .iter()
        .filter(|b| b.low >= FAR_SCAN_BITS)
        .map(|b| b.count)
        .fold(0, u64::saturating_add)
}

/// The bits a scan-distance histogram's allocations scanned past the origin, at least: each
/// counted at its bucket's low end (the kernel keeps no exact sum of distances).
pub(super) fn bits_at_least(bits: &Histogram) -> u64 {
    bits.buckets
        .iter()
        .map(|b| b.low.saturating_mul(b.count))
        .fold(0, u64::saturating_add)
}

/// `max_fds` at the first syscall and at most, and how many syscalls grew the table.
pub(crate) fn table(rec: &Recording) -> Table {
    let t = &rec.table;
    Table {
        max_fds_first: t.max_fds_first,
        max_fds_max: t.max_fds_max,
        expansions: t.expansions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_figures::Bucket;

    #[test]
    fn far_scans_and_bits_at_least_read_the_buckets_low_ends() {
        let bucket = |low, high, count| Bucket { low, high, count };
        let bits = Histogram {
            buckets: vec![bucket(0, 0, 10), bucket(32, 63, 3), bucket(64, 127, 2)],
            ..Default::default()
        };
        assert_eq!(far_scans(&bits), 2, "64 bits or more");
        assert_eq!(bits_at_least(&bits), 32 * 3 + 64 * 2);
    }
}
