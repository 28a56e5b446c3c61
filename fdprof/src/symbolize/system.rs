//! User stacks of every process (`record -a`): while recording, the maps of each process are
//! snapshotted when it is first seen and again after it execs, so its stacks can be symbolized
//! at the end even if it has exited by then.
//!
//! Bounded: at most [`MAX_PROCESSES`] live processes are followed and [`MAX_SNAPSHOTS`]
//! snapshots taken in all (past either, a process is symbolized at the end only if still
//! alive); a snapshot is the process's executable mappings (tens of entries, ~2 KB), so at most
//! ~32 MB; mapped files are shared between processes and at most 256 are held open (the user
//! symbolizer's bound). A pass lists `/proc` and reads one `exe` link per followed process: a
//! few ms a second for a thousand processes.

use std::collections::HashMap;
use std::path::PathBuf;

use super::UserSymbolizer;

/// Live processes followed at most.
pub const MAX_PROCESSES: usize = 4096;

/// Snapshots taken at most over a recording (processes come and go, exec).
pub const MAX_SNAPSHOTS: usize = 16384;

/// Which processes have a snapshot, and the program each had then.
#[derive(Debug, Default)]
pub struct SystemMaps {
    followed: HashMap<u32, Option<PathBuf>>,
    own: u32,
    taken: usize,
}

impl SystemMaps {
    pub fn new() -> Self {
        Self {
            followed: HashMap::new(),
            own: std::process::id(),
            taken: 0,
        }
    }

    /// Snapshots the maps of processes new since the last pass, or that exec'd since; forgets
    /// the gone. Returns how many were snapshotted now.
    pub fn pass(&mut self, user: &mut UserSymbolizer) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let mut alive = Vec::new();
        let mut taken = 0;
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == self.own {
                continue;
            }
            alive.push(pid);
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
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
    pub fn taken(&self) -> usize {
        self.taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_live_processes_once() {
        let mut user = UserSymbolizer::new();
        let mut maps = SystemMaps::new();
        // A child of ours, so there is at least one process to follow.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
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
}
