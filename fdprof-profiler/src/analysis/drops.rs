//! Events lost.

use fdprof_figures::{DropCounter, Drops};
use fdprof_recording::Recording;

/// Every drop counter, their total, and whether loss is known (there are counters) and none.
pub(crate) fn drops(rec: &Recording) -> Drops {
    let total = rec.total_drops();
    let known = !rec.drops.is_empty();
    Drops {
        total,
        none: known && total == 0,
        known,
        counters: rec
            .drops
            .iter()
            .map(|d| DropCounter {
                probe: d.probe.clone(),
                reason: d.reason.clone(),
                count: d.count,
            })
            .collect(),
    }
}
