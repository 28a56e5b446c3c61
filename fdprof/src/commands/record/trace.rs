//! `record --trace`: the trace ring buffer drained while recording, the target's table read at
//! attach, and the result added to the recording.

use anyhow::{Context, Result, bail};
use fdprof_common::counters::drop;
use fdprof_recording::{Recording, trace::Trace};

use super::session::Session;
use fdprof_profiler::collect::{
    Profiler, Snapshot,
    trace::{ProcTable, TraceReader, proc_table},
};
use fdprof_profiler::model;

/// A trace under way.
pub(super) struct Tracing {
    reader: TraceReader,
    table: ProcTable,
    origin_ns: u64,
    limit: u64,
}

/// Starts draining the profiler's trace and reads the target's table.
pub(super) fn start(profiler: &mut Profiler, session: &Session, limit: u64) -> Result<Tracing> {
    let Some(pid) = session.resolved.pid else {
        bail!("--trace needs a process or a command to trace");
    };
    let ring = profiler
        .take_trace()
        .context("the trace ring buffer is missing")??;
    let origin_ns = profiler.attached_ns();
    let reader = TraceReader::start(ring, limit)?;
    let table = proc_table(pid)?;
    Ok(Tracing {
        reader,
        table,
        origin_ns,
        limit,
    })
}

impl Tracing {
    /// The trace, once the programs are detached (`snap` is their last snapshot).
    pub(super) fn finish(self, snap: &Snapshot, raw_addrs: bool) -> Trace {
        let drained = self.reader.finish();
        let at = |reason: u32| snap.drops[(drop::PROBE_TRACE * drop::COUNT + reason) as usize];
        let lost = at(drop::RINGBUF_FULL) + at(drop::READ_FAILED);
        // Records of another size are fdprof's own error, but still a gap.
        model::trace::build(
            &drained,
            std::slice::from_ref(&self.table),
            self.origin_ns,
            self.limit,
            lost + drained.undecoded,
            raw_addrs,
        )
    }
}

/// Puts `trace` into `rec`, its limit drops counted with the others.
pub(super) fn add_to(rec: &mut Recording, trace: Trace) {
    let limit = drop::REASON_NAMES[drop::LIMIT as usize];
    let probe = drop::PROBE_NAMES[drop::PROBE_TRACE as usize];
    if let Some(d) = rec
        .drops
        .iter_mut()
        .find(|d| d.probe == probe && d.reason == limit)
    {
        d.count = trace.over_limit;
    }
    rec.trace = Some(trace);
}
