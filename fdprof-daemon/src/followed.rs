//! The processes the daemon follows, as entries of its programs' target set: which are in it
//! (and under which target name), which left since the last interval, and which the bounds
//! turned away. User space adds the processes that ran before the daemon (`-p`, `--comm`); the
//! kernel adds the rest the moment they match and removes those that end, and [`Followed::sync`]
//! brings this view in line with it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fdprof_common::targets::{TargetEntry, flag};

use fdprof_profiler::collect::{
    Profiler,
    cgroups::{Cgroup, CgroupSet},
    target,
    targets::Refused,
};

use super::config::{Targets, Watch, bounds};
use super::log;

pub(super) const PROCESS_BOUND: &str = "process_bound";
pub(super) const NAME_BOUND: &str = "name_bound";

#[derive(Default)]
pub(super) struct Followed {
    /// Target names (label values), in the order first seen: a name's slot is its index.
    pub names: Vec<String>,
    /// pid → slot. Those that left stay until their last figures are read.
    members: BTreeMap<u32, u32>,
    /// Members that left since the last interval: their rows are deleted once read.
    left: BTreeSet<u32>,
    /// Pids not followed, and why (counted once each), forgotten once they exit.
    refused: HashMap<u32, &'static str>,
    /// `-p` pids that exited: never followed again, even if the pid is reused.
    gone: BTreeSet<u32>,
    /// `--comm` names no process had when last looked for, already logged as awaited.
    awaited: BTreeSet<String>,
    /// Counts of what the bounds turned away since the last interval, by reason.
    pub dropped: BTreeMap<&'static str, u64>,
    max_processes: usize,
}

impl Followed {
    pub(super) fn new(max_processes: usize) -> Self {
        Self {
            max_processes,
            ..Self::default()
        }
    }

    /// Processes followed now.
    pub(super) fn len(&self) -> usize {
        self.members.len() - self.left.len()
    }

    /// A new config: pids that exited or were refused may be asked for again.
    pub(super) fn reloaded(&mut self) {
        self.gone.clear();
        self.refused.clear();
        self.awaited.clear();
    }

    /// Members `watch` no longer wants.
    pub(super) fn unwanted(&self, watch: &Watch) -> Vec<u32> {
        self.members
            .iter()
            .filter(|(pid, _)| !self.left.contains(pid))
            .filter(|&(pid, &slot)| {
                let name = self.names.get(slot as usize).map(String::as_str);
                match &watch.targets {
                    Targets::Pids(pids) => !pids.contains(pid),
                    Targets::Comms(comms) => !name.is_some_and(|n| comms.iter().any(|c| c == n)),
                    Targets::Cgroups(cgroups) => {
                        !name.is_some_and(|n| cgroups.iter().any(|c| c.path == n))
                    }
                    Targets::All => false,
                }
            })
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// `pid` joined (as `slot`'s); whether it is new.
    pub(super) fn join(&mut self, pid: u32, slot: u32) -> bool {
        let left = self.left.remove(&pid);
        if self.members.insert(pid, slot).is_some() && !left {
            return false;
        }
        log::info(&format!(
            "profiling pid {pid} ({})",
            self.name_of_slot(slot)
        ));
        true
    }

    pub(super) fn contains(&self, pid: u32) -> bool {
        self.members.contains_key(&pid) && !self.left.contains(&pid)
    }

    /// The processes followed now.
    pub(super) fn pids(&self) -> std::collections::HashSet<u32> {
        self.members
            .keys()
            .filter(|pid| !self.left.contains(pid))
            .copied()
            .collect()
    }

    fn name_of_slot(&self, slot: u32) -> &str {
        self.names.get(slot as usize).map_or("?", String::as_str)
    }

    /// The slot of `name`, a new one if there is room.
    pub(super) fn slot_of(&mut self, name: &str) -> Option<u32> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Some(i as u32);
        }
        if self.names.len() >= bounds::NAMES {
            return None;
        }
        self.names.push(name.to_string());
        Some(self.names.len() as u32 - 1)
    }

    /// `comms` with their slots, for the kernel to match (names past the bound are counted).
    pub(super) fn comm_slots(&mut self, comms: &[String]) -> Vec<(String, u32)> {
        let mut slots = Vec::new();
        for comm in comms {
            match self.slot_of(comm) {
                Some(slot) => slots.push((comm.clone(), slot)),
                None => *self.dropped.entry(NAME_BOUND).or_default() += 1,
            }
        }
        slots
    }

    /// Adds to `profiler`'s set the processes `watch` names that are not in it: those that
    /// ran before the daemon (with tp_btf, the kernel adds the rest).
    pub(super) fn discover(&mut self, profiler: &mut Profiler, watch: &Watch) {
        self.refused.retain(|pid, _| target::process_alive(*pid));
        let wanted: Vec<(u32, String, u32)> = match &watch.targets {
            Targets::All => Vec::new(),
            Targets::Cgroups(cgroups) => {
                self.follow_cgroups(profiler, cgroups);
                Vec::new()
            }
            Targets::Pids(pids) => {
                let children = if watch.children { flag::CHILDREN } else { 0 };
                let mut alive = Vec::new();
                for &p in pids {
                    if self.gone.contains(&p) || self.members.contains_key(&p) {
                        continue;
                    }
                    match target::comm_of(p).filter(|_| target::process_alive(p)) {
                        Some(comm) => alive.push((p, comm, children)),
                        None => {
                            log::warn(&format!("pid {p} is not running: dropped from the targets"));
                            self.gone.insert(p);
                        }
                    }
                }
                alive
            }
            Targets::Comms(comms) => {
                let found = processes_named(comms);
                for comm in comms {
                    if found.iter().any(|(_, c)| c == comm) {
                        self.awaited.remove(comm);
                    } else if self.awaited.insert(comm.clone()) {
                        log::info(&format!(
                            "no process named {comm} is running: waiting for one"
                        ));
                    }
                }
                found
                    .into_iter()
                    .map(|(pid, comm)| (pid, comm, flag::BY_COMM))
                    .collect()
            }
        };
        for (pid, name, flags) in wanted {
            if self.members.contains_key(&pid) || self.refused.contains_key(&pid) {
                continue;
            }
            let Some(slot) = self.slot_of(&name) else {
                self.refuse(pid, &name, NAME_BOUND);
                continue;
            };
            match profiler.add_target(pid, TargetEntry { slot, flags }) {
                Ok(Ok(())) => {}
                Ok(Err(Refused::Full)) => self.refuse(pid, &name, PROCESS_BOUND),
                Err(e) => log::error(&format!("{e:#}")),
            }
        }
    }

    /// The cgroups' processes not in the set join it, and the kernel watches the cgroups for
    /// moves (the set's own pass; [`Followed::sync`] takes the new members on).
    fn follow_cgroups(&mut self, profiler: &mut Profiler, cgroups: &[Cgroup]) {
        let mut slotted = Vec::new();
        for c in cgroups {
            match self.slot_of(&c.path) {
                Some(slot) => slotted.push((c.clone(), slot)),
                None => *self.dropped.entry(NAME_BOUND).or_default() += 1,
            }
        }
        let mut set = CgroupSet::with_slots(slotted);
        match set.pass(profiler) {
            Ok(_) => {
                if set.refused > 0 {
                    log::warn(&format!(
                        "not profiling {} processes of the cgroups: {} processes at most",
                        set.refused, self.max_processes
                    ));
                    *self.dropped.entry(PROCESS_BOUND).or_default() += set.refused;
                }
            }
            Err(e) => log::error(&format!("cannot read the cgroups: {e:#}")),
        }
    }

    fn refuse(&mut self, pid: u32, name: &str, reason: &'static str) {
        log::warn(&format!(
            "not profiling pid {pid} ({name}): {} (at most {} processes, {} names)",
            reason.replace('_', " "),
            self.max_processes,
            bounds::NAMES
        ));
        self.refused.insert(pid, reason);
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// Brings the members in line with `profiler`'s set: processes the kernel added are taken
    /// on (returned, for their maps to be read), those it removed (they ended, or were renamed
    /// away) leave.
    pub(super) fn sync(&mut self, profiler: &Profiler, watch: &Watch) -> Vec<u32> {
        let set = match profiler.targets() {
            Ok(set) => set,
            Err(e) => {
                log::error(&format!("cannot read the target set: {e:#}"));
                return Vec::new();
            }
        };
        let mut joined = Vec::new();
        for (&pid, entry) in &set {
            if !self.contains(pid) && self.join(pid, entry.slot) {
                joined.push(pid);
            }
        }
        let gone: Vec<u32> = self
            .members
            .keys()
            .copied()
            .filter(|pid| !set.contains_key(pid) && !self.left.contains(pid))
            .collect();
        for pid in gone {
            let why = if target::process_alive(pid) {
                "no longer a target"
            } else {
                "it exited"
            };
            self.leave(pid, why, watch);
        }
        joined
    }

    /// Every member leaves (the programs are unloaded).
    pub(super) fn leave_all(&mut self, why: &str, watch: &Watch) {
        for pid in self.members.keys().copied().collect::<Vec<_>>() {
            self.leave(pid, why, watch);
        }
    }

    fn leave(&mut self, pid: u32, why: &str, watch: &Watch) {
        let Some(&slot) = self.members.get(&pid) else {
            return;
        };
        if !self.left.insert(pid) {
            return;
        }
        log::info(&format!(
            "stopped profiling pid {pid} ({}): {why}",
            self.name_of_slot(slot)
        ));
        if matches!(watch.targets, Targets::Pids(_)) {
            self.gone.insert(pid);
        }
    }

    /// The members that left, whose rows go once read.
    pub(super) fn left(&self) -> Vec<u32> {
        self.left.iter().copied().collect()
    }

    /// Ends an interval: the members that left are forgotten; the pids that remain.
    pub(super) fn end_interval(&mut self) -> BTreeSet<u32> {
        for pid in std::mem::take(&mut self.left) {
            self.members.remove(&pid);
        }
        self.members.keys().copied().collect()
    }

    /// Which name's a process is: its slot as it joined, else (it joined and left unseen) the
    /// name it has.
    pub(super) fn slot_of_pid(&self, pid: u32, comm: &str) -> Option<u32> {
        self.members
            .get(&pid)
            .copied()
            .or_else(|| self.names.iter().position(|n| n == comm).map(|i| i as u32))
    }
}

/// Processes (not threads) whose comm is one of `comms`, but not fdprof itself.
fn processes_named(comms: &[String]) -> Vec<(u32, String)> {
    let me = std::process::id();
    // Every process alive: pid_max bounds them.
    fdprof_profiler::procfs::pids(usize::MAX)
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let comm = target::comm_of(pid)?;
            comms.contains(&comm).then_some((pid, comm))
        })
        .filter(|&(pid, _)| target::process_alive(pid))
        .collect()
}
