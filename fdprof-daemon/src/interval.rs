//! An interval as the collector hands it to the state: its figures, and the collector's status
//! once the windows the interval opened are open. Plain data: the state never calls back into
//! the collector.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use fdprof_figures::Event;
use fdprof_profiler::collect::target;
use fdprof_recording::Recording;
use fdprof_recording::recording::Target;

/// One interval's figures: each target name's, and the daemon's own (every name's processes).
pub(crate) struct IntervalFigures {
    pub index: u64,
    /// Start, since the daemon started.
    pub start_ns: u64,
    pub names: Names,
    pub daemon: Recording,
    /// The interval's events, every process's, oldest first (time since the daemon started).
    pub events: Vec<Event>,
    /// The time the fd syscalls were traced in it (all of it under `--tier full`).
    pub full_tracing_ns: u64,
    /// The recording a name's history starts from, before its first interval ([`named`]).
    pub empty: Recording,
}

/// Each target name's part of an interval.
pub(crate) enum Names {
    /// One name (`all`, or the only name): its figures are the daemon's whole, read under its
    /// target rather than copied (megabytes an interval under churn).
    Whole { name: String, target: Target },
    /// Each name's processes' rows; every name seen so far has one, empty when none of its
    /// processes ran.
    Each(BTreeMap<String, Recording>),
}

impl IntervalFigures {
    /// Each name with its figures: the whole name's are the daemon's, with the daemon's own
    /// drops and CPU, which no trigger reads.
    pub(crate) fn each_name(&self) -> Box<dyn Iterator<Item = (&String, &Recording)> + '_> {
        match &self.names {
            Names::Whole { name, .. } => Box::new(std::iter::once((name, &self.daemon))),
            Names::Each(names) => Box::new(names.iter()),
        }
    }
}

/// `empty` named after a target name.
pub(crate) fn named(empty: &Recording, name: &str) -> Recording {
    let mut rec = empty.clone();
    rec.target.comm = Some(name.to_string());
    rec
}

/// The collector as an interval leaves it.
pub(crate) struct Status {
    /// Processes followed (under `-a`, 1 while the programs are loaded).
    pub attached: usize,
    /// Whether the fd syscalls are traced now (`--tier full`, or a window of full tracing).
    pub full_tracing: bool,
    /// The interval's length in the watch.
    pub interval: Duration,
    /// Which processes are still profiled: the running totals keep their rows.
    pub following: Following,
    /// The programs linked at attach that no link runs any more, for `/healthz`.
    pub unlinked: Vec<String>,
}

/// The processes profiled now.
pub(crate) enum Following {
    /// Nothing is loaded.
    Nothing,
    /// `-a`: every process alive.
    Alive,
    /// The target set's processes.
    Set(HashSet<u32>),
}

impl Following {
    pub(crate) fn contains(&self, pid: u32) -> bool {
        match self {
            Following::Nothing => false,
            Following::Alive => target::process_alive(pid),
            Following::Set(pids) => pids.contains(&pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_starts_from_the_empty_recording_under_its_own_name() {
        let empty = fdprof_recording::testdata::recording();
        let rec = named(&empty, "nginx");
        assert_eq!(rec.target.comm.as_deref(), Some("nginx"));
        assert_eq!(rec.duration_ns, empty.duration_ns);
    }

    #[test]
    fn following_answers_for_the_set_and_for_every_live_process() {
        let set = Following::Set([7].into());
        assert!(set.contains(7) && !set.contains(8));
        assert!(!Following::Nothing.contains(std::process::id()));
        assert!(Following::Alive.contains(std::process::id()));
        assert!(!Following::Alive.contains(u32::MAX - 1));
    }
}
