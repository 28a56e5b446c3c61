//! The lowest-free-fd scan in `alloc_fd` and the table's growth.

use fdprof_figures::{Scan, Table, Unit};

use super::histogram::summary;
use super::share;
use crate::model::Recording;

/// Allocations, `next_fd` hits and their rate, allocations below the origin, and the scan
/// distance and words-read histograms.
pub fn scan(rec: &Recording) -> Scan {
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

/// `max_fds` at the first syscall and at most, and how many syscalls grew the table.
pub fn table(rec: &Recording) -> Table {
    let t = &rec.table;
    Table {
        max_fds_first: t.max_fds_first,
        max_fds_max: t.max_fds_max,
        expansions: t.expansions,
    }
}
