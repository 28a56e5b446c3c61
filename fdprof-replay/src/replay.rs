//! The driver: a trace in, per model the allocations, their cost, the growths, and how the
//! model's fds compare with the traced ones.

use std::borrow::Borrow;
use std::collections::HashMap;

use crate::cost::{Cost, Meter};
use crate::event::{TableId, TraceEvent, TraceOp};
use crate::fastalloc::Fastalloc;
use crate::fdmap::FdMap;
use crate::mainline::Mainline;
use crate::model::{self, Fdt, Limits, Model};
use crate::model_kind::ModelKind;
use crate::report::{CostHistograms, Divergence, ModelResult, PosixCheck};
use crate::viro::Viro;

/// Replays `events` under one model. They may be references into a list or made one at a time
/// (a recorded trace builds each from its compact row as it is replayed).
pub fn replay<E: Borrow<TraceEvent>>(
    events: impl IntoIterator<Item = E>,
    kind: ModelKind,
    limits: Limits,
) -> ModelResult {
    match kind {
        ModelKind::Mainline(v) => run(Mainline::new(v, limits), kind, events),
        ModelKind::Viro => run(Viro::new(limits), kind, events),
        ModelKind::Fastalloc { base, seed } => {
            run(Fastalloc::new(base, limits, seed), kind, events)
        }
    }
}

pub fn run<M: Model, E: Borrow<TraceEvent>>(
    template: M,
    kind: ModelKind,
    events: impl IntoIterator<Item = E>,
) -> ModelResult {
    run_within(template, kind, events, u64::MAX)
        .expect("no bound")
        .0
}

/// Replays `events` under one model unless that takes more than `bound` operations (bitmap
/// words, fd slots and events visited: [`Replayer::work`]): the result and the work it took,
/// or `Err` with the work done when it stopped.
pub fn replay_within<E: Borrow<TraceEvent>>(
    events: impl IntoIterator<Item = E>,
    kind: ModelKind,
    limits: Limits,
    bound: u64,
) -> Result<(ModelResult, u64), u64> {
    match kind {
        ModelKind::Mainline(v) => run_within(Mainline::new(v, limits), kind, events, bound),
        ModelKind::Viro => run_within(Viro::new(limits), kind, events, bound),
        ModelKind::Fastalloc { base, seed } => {
            run_within(Fastalloc::new(base, limits, seed), kind, events, bound)
        }
    }
}

fn run_within<M: Model, E: Borrow<TraceEvent>>(
    template: M,
    kind: ModelKind,
    events: impl IntoIterator<Item = E>,
    bound: u64,
) -> Result<(ModelResult, u64), u64> {
    let mut r = Replayer::new(template, kind);
    for e in events {
        r.apply(e.borrow());
        if r.work() > bound {
            return Err(r.work());
        }
    }
    let work = r.work();
    Ok((r.finish(), work))
}

struct Table<M> {
    model: M,
    /// For non-POSIX models: traced fd → simulated fd.
    map: Option<FdMap>,
}

pub struct Replayer<M: Model> {
    template: M,
    tables: Vec<Table<M>>,
    index: HashMap<TableId, usize>,
    last: Option<(TableId, usize)>,
    meter: Meter,
    scratch: Meter,
    alloc_hist: CostHistograms,
    result: ModelResult,
    /// Work the meters do not charge: events, tables built from snapshots and copied, and
    /// the fd maps of non-POSIX models walked.
    uncharged: u64,
}

impl<M: Model> Replayer<M> {
    /// Operations done so far: every event, bitmap word and fd slot visited (charged to the
    /// cost model or not).
    pub fn work(&self) -> u64 {
        self.meter.work() + self.scratch.work() + self.uncharged
    }

    pub fn new(template: M, kind: ModelKind) -> Replayer<M> {
        let posix = template.posix();
        let result = ModelResult {
            model: kind,
            events: 0,
            tables: 0,
            allocations: 0,
            alloc_failures: 0,
            alloc_cost: Default::default(),
            release_cost: Cost::default(),
            install_cost: Cost::default(),
            close_range_cost: Cost::default(),
            fork_cost: Cost::default(),
            exec_cost: Cost::default(),
            expansions: 0,
            largest_table: 0,
            traced_expansions: 0,
            rejected: 0,
            implicit_tables: 0,
            posix: posix.then(PosixCheck::default),
            non_posix: (!posix).then(Divergence::default),
        };
        Replayer {
            template,
            tables: Vec::new(),
            index: HashMap::new(),
            last: None,
            meter: Meter::default(),
            scratch: Meter::default(),
            alloc_hist: CostHistograms::default(),
            result,
            uncharged: 0,
        }
    }

    /// A table's model, if the trace has shown it.
    pub fn table(&self, id: TableId) -> Option<&M> {
        self.index.get(&id).map(|&i| &self.tables[i].model)
    }

    fn put(&mut self, id: TableId, model: M) -> usize {
        let map = (!model.posix()).then(|| FdMap::identity(model.fdt()));
        let t = Table { model, map };
        if let Some(&i) = self.index.get(&id) {
            self.tables[i] = t;
            return i;
        }
        self.tables.push(t);
        self.index.insert(id, self.tables.len() - 1);
        self.tables.len() - 1
    }

    #[inline]
    fn slot(&mut self, id: TableId) -> usize {
        if let Some((last, i)) = self.last
            && last == id
        {
            return i;
        }
        let i = match self.index.get(&id) {
            Some(&i) => i,
            None => {
                self.result.implicit_tables += 1;
                let empty = self.template.with_fdt(Fdt::empty());
                self.put(id, empty)
            }
        };
        self.last = Some((id, i));
        i
    }

    /// A copy of table `from` under `to` (fork, or an unsharing close_range/exec).
    fn copy(&mut self, from: usize, to: TableId) -> usize {
        // The child's words and its fd map, beyond the reads the meter charges.
        self.uncharged += 2 * self.tables[from].model.fdt().words()
            + self.tables[from].map.as_ref().map_or(0, FdMap::size);
        let child = model::fork(&self.tables[from].model, &mut self.meter);
        let map = self.tables[from].map.clone();
        let i = self.put(to, child);
        self.tables[i].map = map;
        self.last = None;
        i
    }

    pub fn apply(&mut self, e: &TraceEvent) {
        self.result.events += 1;
        self.uncharged += 1;
        match &e.op {
            TraceOp::Snapshot(s) => {
                self.uncharged += u64::from(s.max_fds) / 64;
                let limits = self.template.limits();
                let (next_fd, max_fds) = (u64::from(s.next_fd), u64::from(s.max_fds));
                match Fdt::from_bits(&s.open, &s.cloexec, next_fd, max_fds, limits) {
                    Ok(fdt) => {
                        let model = self.template.with_fdt(fdt);
                        self.put(e.table, model);
                    }
                    Err(_) => self.result.rejected += 1,
                }
            }
            TraceOp::Alloc {
                start,
                cloexec,
                fd,
                ambiguous,
            } => {
                let i = self.slot(e.table);
                if self.tables[i].map.is_some() {
                    self.alloc_mapped(i, *start, *cloexec, *fd);
                } else {
                    self.alloc_posix(i, *start, *cloexec, *fd, *ambiguous);
                }
            }
            TraceOp::Release { fd } => {
                let i = self.slot(e.table);
                self.release(i, *fd);
                let c = self.meter.take();
                self.result.release_cost.add(&c);
            }
            TraceOp::InstallAt { fd, cloexec } => {
                let i = self.slot(e.table);
                self.install(i, *fd, *cloexec);
                let c = self.meter.take();
                self.result.install_cost.add(&c);
            }
            TraceOp::CloseRange {
                lo,
                hi,
                cloexec_only,
                unshare,
            } => {
                let mut i = self.slot(e.table);
                if let Some(to) = unshare {
                    i = self.copy(i, *to);
                }
                self.close_range(i, *lo, *hi, *cloexec_only);
                let c = self.meter.take();
                self.result.close_range_cost.add(&c);
            }
            TraceOp::Fork { child } => {
                let i = self.slot(e.table);
                self.copy(i, *child);
                let c = self.meter.take();
                self.result.fork_cost.add(&c);
            }
            TraceOp::Exec { unshare } => {
                let mut i = self.slot(e.table);
                if let Some(to) = unshare {
                    i = self.copy(i, *to);
                }
                let t = &mut self.tables[i];
                model::exec(&mut t.model, &mut self.meter);
                if let Some(map) = &mut t.map {
                    self.uncharged += map.size();
                    map.retain_open(t.model.fdt());
                }
                let c = self.meter.take();
                self.result.exec_cost.add(&c);
            }
            TraceOp::Expand { .. } => self.result.traced_expansions += 1,
        }
    }

    fn alloc_posix(
        &mut self,
        i: usize,
        start: u32,
        cloexec: bool,
        traced: Result<u32, i32>,
        ambiguous: bool,
    ) {
        let model = &mut self.tables[i].model;
        let predicted = model.alloc(u64::from(start), cloexec, &mut self.meter);
        let c = self.meter.take();
        self.alloc_hist.record(&c);
        self.result.allocations += 1;
        let check = self.result.posix.get_or_insert_default();
        check.ambiguous += u64::from(ambiguous);
        if predicted.is_err() {
            self.result.alloc_failures += 1;
        }
        let traced = traced.ok().map(u64::from);
        if predicted.ok() == traced {
            return;
        }
        if !ambiguous {
            check.model_mismatch += 1;
        }
        // Adopt the traced result: every fd below next_fd stays open, so later predictions
        // remain exact.
        if let Ok(p) = predicted {
            let _ = model.release(p, &mut self.scratch);
        }
        if let Some(u) = traced
            && model.install_at(u, cloexec, &mut self.scratch).is_err()
        {
            self.result.rejected += 1;
        }
        self.scratch.take();
    }

    fn alloc_mapped(&mut self, i: usize, start: u32, cloexec: bool, traced: Result<u32, i32>) {
        let Ok(u) = traced else { return };
        let t = &mut self.tables[i];
        let map = t.map.as_mut().expect("mapped table");
        if let Some(old) = map.remove(u) {
            let _ = t.model.release(u64::from(old), &mut self.scratch);
            self.scratch.take();
        }
        map.stale.remove(&u);
        let lowest = t.model.fdt().lowest_free(u64::from(start));
        // The words that search went through.
        self.uncharged += lowest.saturating_sub(u64::from(start)) / 64 + 1;
        let got = t.model.alloc(u64::from(start), cloexec, &mut self.meter);
        let c = self.meter.take();
        self.alloc_hist.record(&c);
        self.result.allocations += 1;
        let Ok(v) = got else {
            self.result.alloc_failures += 1;
            return;
        };
        let d = self.result.non_posix.get_or_insert_default();
        d.non_lowest += u64::from(v != lowest);
        d.diverged += u64::from(v != u64::from(u));
        map.insert(u, v as u32);
    }

    fn release(&mut self, i: usize, fd: u32) {
        let t = &mut self.tables[i];
        let sim = match &mut t.map {
            None => fd,
            Some(map) => match map.remove(fd) {
                Some(v) => v,
                None => {
                    if map.stale.remove(&fd) {
                        self.result.non_posix.get_or_insert_default().stale_close += 1;
                    } else {
                        self.result.rejected += 1;
                    }
                    return;
                }
            },
        };
        if t.model.release(u64::from(sim), &mut self.meter).is_err() {
            self.result.rejected += 1;
        }
    }

    fn install(&mut self, i: usize, fd: u32, cloexec: bool) {
        let t = &mut self.tables[i];
        if let Some(map) = &mut t.map {
            // dup2 closes what the traced fd was; its simulated fd goes with it.
            if let Some(old) = map.remove(fd)
                && old != fd
            {
                let _ = t.model.release(u64::from(old), &mut self.scratch);
                self.scratch.take();
            }
            map.stale.remove(&fd);
            if let Some(other) = map.traced(fd) {
                map.remove(other);
                map.stale.insert(other);
                self.result.non_posix.get_or_insert_default().collision += 1;
            }
        }
        match t.model.install_at(u64::from(fd), cloexec, &mut self.meter) {
            Ok(()) => {
                if let Some(map) = &mut t.map {
                    map.insert(fd, fd);
                }
            }
            Err(_) => self.result.rejected += 1,
        }
    }

    fn close_range(&mut self, i: usize, lo: u32, hi: u32, cloexec_only: bool) {
        let t = &mut self.tables[i];
        let Some(map) = &mut t.map else {
            let r = model::close_range(
                &mut t.model,
                u64::from(lo),
                u64::from(hi),
                cloexec_only,
                &mut self.meter,
            );
            self.result.rejected += u64::from(r.is_err());
            return;
        };
        if lo > hi {
            self.result.rejected += 1;
            return;
        }
        self.uncharged += map.size();
        // The fds that map to themselves a word at a time (closing one clears only its own
        // bit): a range over millions of them does not list them all first.
        let mut batch = Vec::with_capacity(64);
        let words = map.identity_words();
        for w in (u64::from(lo) / 64..=u64::from(hi) / 64).take_while(|&w| w < words) {
            batch.clear();
            batch.extend(map.identical_in(w, lo, hi));
            for &u in &batch {
                close_traced(map, &mut t.model, &mut self.meter, u, cloexec_only);
            }
        }
        for u in map.moved_in(lo, hi) {
            close_traced(map, &mut t.model, &mut self.meter, u, cloexec_only);
        }
        if !cloexec_only {
            let stale: Vec<u32> = map
                .stale
                .iter()
                .copied()
                .filter(|&u| u >= lo && u <= hi)
                .collect();
            for u in stale {
                map.stale.remove(&u);
                self.result.non_posix.get_or_insert_default().stale_close += 1;
            }
        }
    }

    pub fn finish(mut self) -> ModelResult {
        self.result.alloc_cost = self.alloc_hist.summary();
        self.result.tables = self.tables.len() as u64;
        for t in &self.tables {
            self.result.expansions += t.model.expansions().len() as u64;
            self.result.largest_table = self.result.largest_table.max(t.model.fdt().max_fds);
        }
        self.result
    }
}

/// close_range (or its close-on-exec form) of traced fd `u` in a table whose fds are mapped.
fn close_traced<M: Model>(
    map: &mut FdMap,
    model: &mut M,
    meter: &mut Meter,
    u: u32,
    cloexec_only: bool,
) {
    let Some(v) = map.sim(u) else { return };
    if cloexec_only {
        crate::bitmap::set(model.cloexec_mut(), u64::from(v));
        meter.write_cloexec(1);
    } else {
        map.remove(u);
        let _ = model.release(u64::from(v), meter);
    }
}
