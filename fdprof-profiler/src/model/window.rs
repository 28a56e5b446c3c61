//! Consecutive intervals of a live view (the daemon's history, `top`'s last minute) as one
//! recording: their figures added up in time and, for a capture, their series, one sample
//! per interval, as `record --interval` writes it. `report` reads such a recording's totals and
//! diagnosis, `flamegraph` draws it and `top --from` plays its intervals back.

use fdprof_figures::FullTracing;
use fdprof_recording::recording::Recording;
use fdprof_recording::series::Series;

use super::merge;
use super::sample;
use super::sum::Sum;

/// One interval: its start on the view's clock (ns) and its figures.
#[derive(Debug, Clone)]
pub struct Timed {
    pub start_ns: u64,
    pub rec: Recording,
}

/// The intervals added up, in time order: the first one's facts and start, every count and
/// duration summed, the last one's end reason. `None` when there is none.
pub fn total(intervals: impl IntoIterator<Item = Recording>) -> Option<Recording> {
    let mut intervals = intervals.into_iter();
    let mut sum = Sum::new(intervals.next()?);
    for later in intervals {
        // The facts added in time read the sum's duration before this one's is added.
        add_full_tracing_in_time(sum.recording_mut(), &later);
        let rec = sum.recording_mut();
        rec.duration_ns += later.duration_ns;
        merge::add_steal_in_time(&mut rec.steal, later.steal.as_ref());
        rec.end_reason = later.end_reason;
        sum.add(later);
    }
    Some(sum.finish())
}

/// Adds the windows of full tracing of `later`, which follows `into` in time (`into`'s
/// duration not yet grown by it). A span traced throughout (no windows: `--tier full`)
/// counts as one window over all of it once the other was at rest.
pub fn add_full_tracing_in_time(into: &mut Recording, later: &Recording) {
    if into.full_tracing.is_none() && later.full_tracing.is_none() {
        return;
    }
    let whole = |r: &Recording| FullTracing::throughout(r.started_unix_ms, r.duration_ns);
    let mut sum = into.full_tracing.take().unwrap_or_else(|| whole(into));
    sum.add_later(&later.full_tracing.clone().unwrap_or_else(|| whole(later)));
    into.full_tracing = Some(sum);
}

/// The intervals as one recording with a series of `interval_ns`: [`total`], and one sample
/// per interval. The samples start from the first interval's whole millisecond, which is
/// what its `started_unix_ms` counts, so that a played-back interval's start is the live
/// one's to the millisecond.
pub fn with_series(intervals: Vec<Timed>, interval_ns: u64) -> Option<Recording> {
    let origin = intervals.first()?.start_ns / 1_000_000 * 1_000_000;
    let samples = intervals
        .iter()
        .map(|t| sample::of_recording(&t.rec, t.start_ns - origin))
        .collect();
    let mut rec = total(intervals.into_iter().map(|t| t.rec))?;
    rec.series = Some(Series {
        interval_ns,
        samples,
    });
    Some(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(start_ns: u64, waits: u64) -> Timed {
        let mut rec = crate::testdata::recording();
        rec.duration_ns = 1_000_000_000;
        rec.started_unix_ms = 5_000 + start_ns / 1_000_000;
        rec.series = None;
        for site in &mut rec.contention {
            site.count = waits;
        }
        Timed { start_ns, rec }
    }

    #[test]
    fn intervals_become_totals_and_a_series_that_plays_back_as_they_were() {
        let start = 1_700_400_000;
        let intervals: Vec<Timed> = (0..3)
            .map(|i| timed(start + i * 1_000_000_000, i + 1))
            .collect();
        let one = |t: &Timed| t.rec.contention.iter().map(|s| s.count).sum::<u64>();
        let counts: Vec<u64> = intervals.iter().map(one).collect();
        let rec = with_series(intervals.clone(), 1_000_000_000).unwrap();
        assert_eq!(rec.duration_ns, 3_000_000_000);
        assert_eq!(
            rec.contention.iter().map(|s| s.count).sum::<u64>(),
            counts.iter().sum::<u64>()
        );
        let series = rec.series.as_ref().unwrap();
        assert_eq!(series.samples.len(), 3);
        for (i, t) in intervals.iter().enumerate() {
            let played = sample::as_recording(&rec, &series.samples[i], false);
            assert_eq!(played.started_unix_ms, t.rec.started_unix_ms);
            let waits: u64 = series.samples[i].waits.iter().map(|w| w.count).sum();
            assert_eq!(waits, counts[i]);
        }
        assert!(with_series(Vec::new(), 1).is_none());
    }
}
