//! User stacks of every process (`record -a`): while recording, the maps of each process are
//! snapshotted as soon as the kernel says it started (a fork or an exec: [`SystemMaps::started`],
//! fed by `collect::starts`), and by a pass over `/proc` about every second for what those miss
//! ([`SystemMaps::pass`]: processes alive at the start, starts past the bounds below, the
//! libraries a loader maps after the exec), so its stacks can be symbolized at the end even if
//! it has exited by then, however briefly it lived.
//!
//! Bounded: at most [`MAX_PROCESSES`] live processes are followed by the pass and
//! [`MAX_SNAPSHOTS`] snapshots taken in all, by starts and passes together (past either, a
//! process is symbolized at the end only if still alive); a snapshot is the process's
//! executable mappings (tens of entries, ~2 KB), and one process's snapshots merge into one, so
//! at most ~32 MB; mapped files are shared between processes and at most 256 are held open (the
//! user symbolizer's bound). Starts are snapshotted at most [`MAX_STARTS_PER_SECOND`] a second
//! (one takes 0.1 to 0.5 ms on a 2-core VM, more for a process mapping files not seen before:
//! a fork or exec storm costs the recorder at most a quarter of a CPU, and a batch holds up
//! its stop check by ~0.5 s at most); the starts past that are
//! counted as `processes`/`limit` drops and left to the pass. A pass lists `/proc` and reads
//! one `exe` link per followed process: a few ms a second for a thousand processes.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::UserSymbolizer;

/// Live processes followed at most.
pub(crate) const MAX_PROCESSES: usize = 4096;

/// Snapshots taken at most over a recording (processes come and go, exec).
pub(crate) const MAX_SNAPSHOTS: usize = 16384;

/// Starts snapshotted at most per second.
pub(crate) const MAX_STARTS_PER_SECOND: usize = 500;

/// What the starts came to over a recording.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartCounts {
    /// Starts the kernel sent (a process that forks and execs sends two).
    pub received: u64,
    /// Processes snapshotted on a start.
    pub snapshotted: u64,
    /// Processes gone (or not yet showing maps) by the time they were read.
    pub gone: u64,
    /// Starts not snapshotted, past [`MAX_STARTS_PER_SECOND`] or [`MAX_SNAPSHOTS`].
    pub over_bounds: u64,
    /// Starts of a process already read in the same batch (a fork then its exec), or of
    /// fdprof itself.
    pub repeated: u64,
    /// Time spent reading the processes that started (gone ones included), ns.
    pub read_ns: u64,
}

/// Which processes have a snapshot, and the program each had then.
#[derive(Debug)]
pub struct SystemMaps {
    followed: HashMap<u32, Option<PathBuf>>,
    own: u32,
    taken: usize,
    starts: StartCounts,
    /// The current second of start snapshots and how many it has taken.
    second: (Instant, usize),
}

impl Default for SystemMaps {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemMaps {
    pub fn new() -> Self {
        Self {
            followed: HashMap::new(),
            own: std::process::id(),
            taken: 0,
            starts: StartCounts::default(),
            second: (Instant::now(), 0),
        }
    }

    /// Snapshots the maps of the processes that started (`pids`, one per start the kernel sent)
    /// at once, each once however many starts it sent, within the bounds; returns how many
    /// were snapshotted. The pass is left to read
    /// them again (it does not count them as followed): by then the loader has mapped the
    /// program's libraries.
    pub(crate) fn started(&mut self, pids: &[u32], user: &mut UserSymbolizer) -> usize {
        self.starts.received += pids.len() as u64;
        let mut seen = HashSet::with_capacity(pids.len());
        let mut taken = 0;
        for &pid in pids {
            if pid == self.own || !seen.insert(pid) {
                self.starts.repeated += 1;
                continue;
            }
            if self.second.0.elapsed() >= Duration::from_secs(1) {
                self.second = (Instant::now(), 0);
            }
            if self.second.1 >= MAX_STARTS_PER_SECOND || self.taken >= MAX_SNAPSHOTS {
                self.starts.over_bounds += 1;
                continue;
            }
            self.second.1 += 1;
            let reading = Instant::now();
            let read = user.snapshot_maps(pid);
            self.starts.read_ns += reading.elapsed().as_nanos() as u64;
            if read {
                self.taken += 1;
                self.starts.snapshotted += 1;
                taken += 1;
            } else {
                self.starts.gone += 1;
            }
        }
        taken
    }

    /// What the starts came to so far.
    pub(crate) fn start_counts(&self) -> StartCounts {
        self.starts
    }

    /// Snapshots the maps of processes new since the last pass, or that exec'd since; forgets
    /// the gone. Returns how many were snapshotted now.
    pub(crate) fn pass(&mut self, user: &mut UserSymbolizer) -> usize {
        let mut alive = Vec::new();
        let mut taken = 0;
        // Every process alive: pid_max bounds them.
        for pid in crate::procfs::pids(usize::MAX) {
            if pid == self.own {
                continue;
            }
            alive.push(pid);
            let exe = crate::procfs::exe(pid);
            if exe.is_none() {
                // A kernel thread (or a process just gone): no user stacks.
                continue;
            }
            let changed = match self.followed.get(&pid) {
                Some(known) => *known != exe,
                None => self.followed.len() < MAX_PROCESSES,
            };
            if changed && self.taken < MAX_SNAPSHOTS && user.snapshot_maps(pid) {
                self.followed.insert(pid, exe);
                self.taken += 1;
                taken += 1;
            }
        }
        // The gone keep their snapshots in the symbolizer; only the bookkeeping is dropped, so a
        // reused pid is read again.
        alive.sort_unstable();
        self.followed
            .retain(|pid, _| alive.binary_search(pid).is_ok());
        taken
    }

    /// Snapshots taken so far.
    pub(crate) fn taken(&self) -> usize {
        self.taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child process that sleeps for 5 s (killed by the test).
    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap()
    }

    #[test]
    fn follows_live_processes_once() {
        let (mut user, mut maps) = (UserSymbolizer::new(), SystemMaps::new());
        // A child of ours, so there is at least one process to follow.
        let mut child = sleeper();
        let first = maps.pass(&mut user);
        assert!(first >= 1, "nothing followed");
        assert!(user.has_snapshot(child.id()));
        assert!(!user.has_snapshot(std::process::id()), "not fdprof itself");
        // Nothing new or exec'd since (the child still sleeps): nothing read again but what
        // started meanwhile.
        let again = maps.pass(&mut user);
        assert!(again < first.max(2), "{again} of {first} read again");
        child.kill().unwrap();
        child.wait().unwrap();
        maps.pass(&mut user);
        assert!(
            user.has_snapshot(child.id()),
            "a gone process keeps its snapshot"
        );
    }

    #[test]
    fn starts_are_read_once_within_the_bounds() {
        let (mut user, mut maps) = (UserSymbolizer::new(), SystemMaps::new());
        let mut child = sleeper();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let (live, dead) = (child.id(), gone.id());
        // A fork and its exec in one batch: one read.
        assert_eq!(maps.started(&[live, live, dead], &mut user), 1);
        assert!(user.has_snapshot(live));
        assert_eq!(
            maps.start_counts(),
            StartCounts {
                received: 3,
                snapshotted: 1,
                gone: 1,
                over_bounds: 0,
                repeated: 1,
                read_ns: maps.start_counts().read_ns,
            }
        );
        assert!(maps.start_counts().read_ns > 0);
        assert_eq!(maps.taken(), 1);
        // Not followed: the next pass reads it again, libraries and all.
        maps.pass(&mut user);
        assert!(maps.taken() >= 2);
        // Past the second's budget: counted, not read.
        maps.second.1 = MAX_STARTS_PER_SECOND;
        let taken = maps.taken();
        assert_eq!(maps.started(&[live], &mut user), 0);
        assert_eq!(maps.start_counts().over_bounds, 1);
        assert_eq!(maps.taken(), taken);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
