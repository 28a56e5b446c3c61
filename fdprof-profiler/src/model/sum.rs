//! Many recordings added into one, their rows kept indexed ([`super::rows`]) while added to and
//! sorted once, at the end.

use fdprof_recording::recording::{ContentionSite, CpuProfile, CpuSite, ProcessRecord, Recording};

use super::merge;
use super::rows::{Rows, sorted_samples, sorted_sites};

/// A sum of recordings under way: [`merge::add`]'s, with the rows kept indexed.
#[derive(Debug)]
pub(crate) struct Sum {
    rec: Recording,
    sites: Rows<ContentionSite>,
    /// The profile's facts (its samples taken out) and its samples.
    cpu: Option<(CpuProfile, Rows<CpuSite>)>,
    processes: Rows<ProcessRecord>,
}

impl Sum {
    /// A sum that starts with `first`.
    pub(crate) fn new(mut first: Recording) -> Self {
        let sites = Rows::new(std::mem::take(&mut first.contention));
        let processes = Rows::new(std::mem::take(&mut first.processes));
        let cpu = first.cpu.take().map(|mut p| {
            let samples = Rows::new(std::mem::take(&mut p.samples));
            (p, samples)
        });
        Self {
            rec: first,
            sites,
            cpu,
            processes,
        }
    }

    /// Adds `other`, as [`merge::add`] does, moving its rows in (none is cloned).
    pub(crate) fn add(&mut self, mut other: Recording) {
        merge::add_but_rows(&mut self.rec, &other);
        for s in std::mem::take(&mut other.contention) {
            self.sites.add_owned(s);
        }
        for p in std::mem::take(&mut other.processes) {
            self.processes.add_owned(p);
        }
        if let Some(mut o) = other.cpu {
            let samples = std::mem::take(&mut o.samples);
            let (_, rows) = self.cpu.get_or_insert_with(|| (o, Rows::new(Vec::new())));
            for s in samples {
                rows.add_owned(s);
            }
        }
    }

    /// The sum so far, apart from its rows (what is added in time: duration, windows).
    pub(crate) fn recording_mut(&mut self) -> &mut Recording {
        &mut self.rec
    }

    /// The sum, its sites and samples in the model's order.
    pub(crate) fn finish(self) -> Recording {
        let Self {
            mut rec,
            sites,
            cpu,
            processes,
        } = self;
        rec.contention = sorted_sites(sites);
        rec.processes = processes.into_vec();
        rec.cpu = cpu.map(|(mut p, samples)| {
            p.samples = sorted_samples(samples);
            p
        });
        rec
    }
}
