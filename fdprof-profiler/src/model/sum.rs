//! Many recordings added into one, their rows kept indexed ([`super::rows`]) while added to and
//! sorted once, at the end.

use fdprof_recording::recording::{ContentionSite, CpuProfile, CpuSite, ProcessRecord, Recording};

use super::merge;
use super::rows::{Rows, sorted_samples, sorted_sites};

/// A sum of recordings under way: [`merge::add`]'s, with the rows kept indexed.
#[derive(Debug)]
pub struct Sum {
    rec: Recording,
    sites: Rows<ContentionSite>,
    /// The profile's facts (its samples taken out) and its samples.
    cpu: Option<(CpuProfile, Rows<CpuSite>)>,
    processes: Rows<ProcessRecord>,
}

impl Sum {
    /// A sum that starts with `first`.
    pub fn new(mut first: Recording) -> Self {
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

    /// Adds `other`, as [`merge::add`] does.
    pub fn add(&mut self, other: &Recording) {
        merge::add_but_rows(&mut self.rec, other);
        for s in &other.contention {
            self.sites.add(s);
        }
        for p in &other.processes {
            self.processes.add(p);
        }
        if let Some(o) = &other.cpu {
            let (_, samples) = self.cpu.get_or_insert_with(|| {
                let facts = CpuProfile {
                    event: o.event,
                    frequency_hz: o.frequency_hz,
                    samples: Vec::new(),
                };
                (facts, Rows::new(Vec::new()))
            });
            for s in &o.samples {
                samples.add(s);
            }
        }
    }

    /// Adds `other`, moving its rows in (none is cloned).
    pub fn add_owned(&mut self, mut other: Recording) {
        let contention = std::mem::take(&mut other.contention);
        let processes = std::mem::take(&mut other.processes);
        let samples = other.cpu.as_mut().map(|p| std::mem::take(&mut p.samples));
        self.add(&other);
        for s in contention {
            self.sites.add_owned(s);
        }
        for p in processes {
            self.processes.add_owned(p);
        }
        if let (Some((_, rows)), Some(samples)) = (&mut self.cpu, samples) {
            for s in samples {
                rows.add_owned(s);
            }
        }
    }

    /// The sum so far, apart from its rows (what is added in time: duration, windows).
    pub fn recording_mut(&mut self) -> &mut Recording {
        &mut self.rec
    }

    /// The sum, its sites and samples in the model's order.
    pub fn finish(self) -> Recording {
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
