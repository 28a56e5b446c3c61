//! A kept interval, held small for its minutes in the history. Its rows (contention sites,
//! on-CPU samples, process rows: most of its size, and read only when a window adds them up)
//! are packed, JSON deflated to about a tenth, with their stacks as ids into the history's
//! [`Stacks`]; its facts and its timeline point stay as they are, for what reads every
//! interval (the timeline, a window's facts).

use std::io::{Read, Write};

use fdprof_figures::TimelinePoint;
use fdprof_profiler::analysis;
use fdprof_recording::Recording;
use fdprof_recording::recording::{ContentionSite, CpuSite, Frame, ProcessRecord};
use serde::{Deserialize, Serialize};

use super::stacks::Stacks;
use crate::log;

/// An interval's rows, their stacks taken out.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Rows {
    contention: Vec<ContentionSite>,
    processes: Vec<ProcessRecord>,
    cpu: Vec<CpuSite>,
}

#[derive(Debug, Clone)]
enum Packed {
    /// JSON, deflated.
    Deflated(Box<[u8]>),
    /// As they are, had they not packed (their types cannot fail to; nothing is lost anyway).
    Plain(Box<Rows>),
}

impl Packed {
    fn new(rows: Rows) -> Self {
        let Ok(json) = serde_json::to_vec(&rows) else {
            return Self::Plain(Box::new(rows));
        };
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        match z.write_all(&json).and_then(|()| z.finish()) {
            Ok(bytes) => Self::Deflated(bytes.into_boxed_slice()),
            Err(_) => Self::Plain(Box::new(rows)),
        }
    }

    fn open(&self) -> Rows {
        match self {
            Self::Plain(rows) => (**rows).clone(),
            Self::Deflated(bytes) => {
                let mut json = Vec::new();
                let opened = flate2::read::DeflateDecoder::new(&bytes[..])
                    .read_to_end(&mut json)
                    .map_err(|e| e.to_string())
                    .and_then(|_| serde_json::from_slice(&json).map_err(|e| e.to_string()));
                opened.unwrap_or_else(|e| {
                    log::error(&format!("a kept interval's rows do not read back: {e}"));
                    Rows::default()
                })
            }
        }
    }
}

/// One kept interval.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub(super) start_ns: u64,
    /// Its figures without its rows.
    pub(super) facts: Recording,
    pub(super) point: TimelinePoint,
    rows: Packed,
    /// The ids of the sites' and of the samples' stacks (kernel, user), in their order.
    stacks: Vec<(u32, u32)>,
    cpu_stacks: Vec<(u32, u32)>,
}

impl Kept {
    /// `rec` kept, its stacks interned in `stacks`.
    pub(super) fn new(start_ns: u64, mut rec: Recording, stacks: &mut Stacks) -> Self {
        let point = analysis::timeline_point(&rec);
        let mut intern = |kernel: &mut Vec<Frame>, user: &mut Vec<Frame>| {
            (
                stacks.intern(std::mem::take(kernel)),
                stacks.intern(std::mem::take(user)),
            )
        };
        let site_stacks = rec
            .contention
            .iter_mut()
            .map(|s| intern(&mut s.kernel_stack, &mut s.user_stack))
            .collect();
        let samples = rec.cpu.iter_mut().flat_map(|p| &mut p.samples);
        let cpu_stacks = samples
            .map(|s| intern(&mut s.kernel_stack, &mut s.user_stack))
            .collect();
        let rows = Rows {
            contention: std::mem::take(&mut rec.contention),
            processes: std::mem::take(&mut rec.processes),
            cpu: rec
                .cpu
                .as_mut()
                .map(|p| std::mem::take(&mut p.samples))
                .unwrap_or_default(),
        };
        Self {
            start_ns,
            facts: rec,
            point,
            rows: Packed::new(rows),
            stacks: site_stacks,
            cpu_stacks,
        }
    }

    /// Gives its stacks back: it is kept no longer.
    pub(super) fn release(self, stacks: &mut Stacks) {
        for (kernel, user) in self.stacks.into_iter().chain(self.cpu_stacks) {
            stacks.release(kernel);
            stacks.release(user);
        }
    }

    /// Its recording, each of its stacks a stand-in ([`Stacks::stand_in`]).
    pub(super) fn with_stand_ins(&self, stacks: &Stacks) -> Recording {
        let mut rec = self.facts.clone();
        let rows = self.rows.open();
        rec.contention = rows.contention;
        for (site, &(kernel, user)) in rec.contention.iter_mut().zip(&self.stacks) {
            site.kernel_stack = stacks.stand_in(kernel);
            site.user_stack = stacks.stand_in(user);
        }
        rec.processes = rows.processes;
        if let Some(p) = &mut rec.cpu {
            p.samples = rows.cpu;
            for (sample, &(kernel, user)) in p.samples.iter_mut().zip(&self.cpu_stacks) {
                sample.kernel_stack = stacks.stand_in(kernel);
                sample.user_stack = stacks.stand_in(user);
            }
        }
        rec
    }

    /// Its end, on the daemon's clock (ns).
    pub(super) fn end_ns(&self) -> u64 {
        self.start_ns + self.facts.duration_ns
    }
}
