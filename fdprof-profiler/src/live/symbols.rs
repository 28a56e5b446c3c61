//! The live stage's symbolizers and what keeps them current: the kernel's symbols, the user
//! symbolizer with its map snapshots, the events' stack cache, and which processes' maps are
//! read when ([`Maps`]). Every bound on their memory is here, once.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use fdprof_figures::Event;

use crate::collect::{RawEvent, identity::Identities, target::process_alive};
use crate::model::{build::Symbolizers, events::EventSymbolizer};
use crate::symbolize::{KernelSymbols, SystemMaps, UserSymbolizer};

/// Mapped files the user symbolizer may hold before a live view starts it afresh.
pub(crate) const USER_FILES: usize = 256;
/// Symbolized event stacks kept for reuse.
pub(crate) const EVENT_STACKS: usize = 16_384;
/// Processes whose maps are read at once per batch of starts under [`Maps::Starts`]; the
/// rest are read when their stacks are first symbolized.
const SNAPSHOTS_PER_BATCH: usize = 64;
/// Set members whose maps are read again each second (round robin): a library loaded after a
/// process joined is seen within `members / 16` seconds, at a bounded cost for 4096 members.
const SET_REREADS_PER_SECOND: usize = 16;
/// How often maps are read again.
const REFRESH: Duration = Duration::from_secs(1);

/// Whose memory maps are read, and when.
#[derive(Debug)]
pub enum Maps {
    /// One process (`-p`, `-t`, a command): read every second while it lives, so its stacks
    /// symbolize after it exits.
    One(u32),
    /// The members of a target set: read as each joins, and again in turns every second.
    Set { members: BTreeSet<u32>, cursor: u32 },
    /// Every process of a recording (`record -a`): read as the kernel tells of each start,
    /// and by a pass over `/proc` every second (bounded, see [`SystemMaps`]).
    System(SystemMaps),
    /// Every process of a live view (`top -a`, `daemon -a`): the first of each batch of starts
    /// read at once; the rest as their stacks are symbolized, while they live.
    Starts,
}

impl Maps {
    /// An empty target set's.
    pub fn set() -> Self {
        Maps::Set {
            members: BTreeSet::new(),
            cursor: 0,
        }
    }
}

/// The symbolizers of a live profile.
pub struct Symbols {
    pub kernel: KernelSymbols,
    pub user: UserSymbolizer,
    events: EventSymbolizer,
    maps: Maps,
    /// Where each process runs, read with its maps.
    identities: Identities,
    /// Processes whose last figures the interval being made holds: their identities go at the
    /// next [`Symbols::trim`], once that interval has named them.
    ended: Vec<u32>,
    refreshed: Instant,
    raw_addrs: bool,
}

impl Symbols {
    /// `events_origin_ns`: the `CLOCK_MONOTONIC` time events are timed from.
    pub fn new(
        kernel: KernelSymbols,
        user: UserSymbolizer,
        maps: Maps,
        events_origin_ns: u64,
        raw_addrs: bool,
    ) -> Self {
        let mut symbols = Self {
            kernel,
            user,
            events: EventSymbolizer::new(events_origin_ns),
            maps,
            identities: Identities::default(),
            ended: Vec::new(),
            refreshed: Instant::now(),
            raw_addrs,
        };
        if matches!(symbols.maps, Maps::System(_) | Maps::Starts) {
            // Processes running before the start: read now, while they live.
            symbols.identities.running();
        }
        symbols.read_all();
        symbols
    }

    /// The symbolizers to assemble with: user stacks through the one process's maps, or each
    /// stack's own process's.
    pub fn symbolizers(&mut self) -> Symbolizers<'_> {
        let user_pid = self.user_pid();
        Symbolizers {
            kernel: &self.kernel,
            user: &mut self.user,
            user_pid,
            raw_addrs: self.raw_addrs,
        }
    }

    /// Reads maps by `maps` from now on (the daemon's programs loaded anew for other targets).
    pub(crate) fn set_maps(&mut self, maps: Maps) {
        self.maps = maps;
        self.read_all();
    }

    /// The one process whose stacks are symbolized, if there is one.
    pub fn user_pid(&self) -> Option<u32> {
        match self.maps {
            Maps::One(pid) => Some(pid),
            _ => None,
        }
    }

    /// The system-wide maps' bookkeeping (`record -a`), for its note and drops.
    pub(crate) fn system(&self) -> Option<&SystemMaps> {
        match &self.maps {
            Maps::System(system) => Some(system),
            _ => None,
        }
    }

    /// Processes that joined a set: members from now on, their maps read at once.
    pub fn follow(&mut self, pids: &[u32]) {
        if let Maps::Set { members, .. } = &mut self.maps {
            for &pid in pids {
                if members.insert(pid) {
                    self.user.snapshot_maps(pid);
                }
            }
        }
        self.identities.started(pids);
    }

    /// Processes that left a set: no longer read (their snapshots stay until trimmed).
    pub(crate) fn unfollow(&mut self, pids: &[u32]) {
        if let Maps::Set { members, .. } = &mut self.maps {
            for pid in pids {
                members.remove(pid);
            }
        }
    }

    /// Processes the kernel said forked or exec'd: their maps read now, within the bounds, so
    /// their stacks symbolize even if they end before the next interval.
    pub(crate) fn started(&mut self, pids: &[u32]) {
        if !matches!(self.maps, Maps::One(_)) {
            self.identities.started(pids);
        }
        match &mut self.maps {
            Maps::System(system) => {
                system.started(pids, &mut self.user);
            }
            Maps::Starts => {
                for &pid in pids.iter().take(SNAPSHOTS_PER_BATCH) {
                    self.user.snapshot_maps(pid);
                }
            }
            Maps::Set { members, .. } => {
                for &pid in pids.iter().take(SNAPSHOTS_PER_BATCH) {
                    members.insert(pid);
                    self.user.snapshot_maps(pid);
                }
            }
            Maps::One(_) => {}
        }
    }

    /// Reads maps again where they are due (at most once a second).
    pub(crate) fn refresh(&mut self) {
        if self.refreshed.elapsed() >= REFRESH {
            self.read_all();
        }
    }

    /// Reads maps again now (a profile's end: the last libraries a target loaded).
    pub(crate) fn read_all(&mut self) {
        self.refreshed = Instant::now();
        match &mut self.maps {
            Maps::One(pid) => {
                if process_alive(*pid) {
                    self.user.snapshot_maps(*pid);
                }
            }
            Maps::Set { members, cursor } => {
                let turn: Vec<u32> = members
                    .range(*cursor..)
                    .chain(members.iter())
                    .take(SET_REREADS_PER_SECOND.min(members.len()))
                    .copied()
                    .collect();
                *cursor = turn.last().map_or(0, |&p| p.saturating_add(1));
                for pid in turn {
                    self.user.snapshot_maps(pid);
                }
            }
            Maps::System(system) => {
                system.pass(&mut self.user);
            }
            Maps::Starts => {}
        }
    }

    /// Bounds a live view's caches: the snapshots of processes gone (but the one target's and
    /// a set's members'), everything once past [`USER_FILES`] files, the event stacks past
    /// [`EVENT_STACKS`]. A recording does not trim: it symbolizes the gone at its end.
    pub(crate) fn trim(&mut self) {
        let maps = &self.maps;
        self.user.trim(
            |pid| match maps {
                Maps::One(one) => *one == pid || process_alive(pid),
                Maps::Set { members, .. } => members.contains(&pid) || process_alive(pid),
                Maps::System(_) | Maps::Starts => process_alive(pid),
            },
            USER_FILES,
        );
        self.events.trim(EVENT_STACKS);
        self.identities.forget(&std::mem::take(&mut self.ended));
        self.identities.trim();
    }

    /// Processes whose rows were read for the last time: their identities go at the next
    /// [`Symbols::trim`] (a live view's; a recording names its processes at its end).
    pub(crate) fn ended(&mut self, pids: &[u32]) {
        self.ended.extend_from_slice(pids);
    }

    /// Fills in where each process of `rec` runs: as read before, or now if it lives.
    pub(crate) fn identify(&mut self, rec: &mut fdprof_recording::Recording) {
        for p in &mut rec.processes {
            p.identity = self.identities.of(p.pid);
        }
    }

    /// Looks in `sources` for the names of stripped files seen from now on (a daemon's config
    /// read again).
    pub fn set_debug(&mut self, sources: crate::symbolize::DebugSources) {
        self.user.set_sources(sources);
    }

    /// The debuginfod failures not said yet: each kind is said once, not per frame.
    pub fn take_name_failures(&self) -> Vec<String> {
        self.user.take_name_failures()
    }

    /// Events symbolized now, while their processes live.
    pub(crate) fn events(
        &mut self,
        raw: &[RawEvent],
        stacks: &HashMap<i32, Vec<u64>>,
    ) -> Vec<Event> {
        let user_pid = self.user_pid();
        let mut sym = Symbolizers {
            kernel: &self.kernel,
            user: &mut self.user,
            user_pid,
            raw_addrs: false,
        };
        self.events.events(raw, stacks, &mut sym)
    }
}
