//! Reads the programs' maps into plain sums (per-CPU values added up): a snapshot of everything
//! aggregated since attach, and the difference of two snapshots (an interval).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use std::os::fd::{AsFd, AsRawFd};

use super::{batch, processes::Processes, stats::ProgramStats};
use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, IterableMap, PerCpuArray, StackTraceMap},
    util::nr_cpus,
};
use fdprof_common::{
    HIST_SLOTS,
    contention::{SiteKey, SiteWaits, WAIT_SLOTS},
    copies::COPY_ID_BASE,
    counters::{DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, global},
    fnops::{FN_COUNTER_ENTRIES, FN_HIST_ENTRIES, counter},
    probes::map,
};

/// The waits of one site (lock and stacks), summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Contention {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
    pub(crate) max_ns: u64,
    /// Log2 histogram: `slots[s]` waits of `2^(s-1)..2^s` ns.
    pub(crate) slots: [u64; WAIT_SLOTS],
}

impl Default for Contention {
    fn default() -> Self {
        Self {
            count: 0,
            total_ns: 0,
            max_ns: 0,
            slots: [0; WAIT_SLOTS],
        }
    }
}

impl Contention {
    #[cfg(test)]
    /// `count` waits in `slot`, `total_ns` in all, the longest `max_ns` (fixtures).
    pub(crate) fn in_slot(slot: usize, count: u64, total_ns: u64, max_ns: u64) -> Self {
        let mut c = Self {
            count,
            total_ns,
            max_ns,
            ..Self::default()
        };
        c.slots[slot] = count;
        c
    }

    #[cfg(test)]
    /// Both together (fixtures).
    pub(crate) fn plus(mut self, other: Self) -> Self {
        self.add_up(&other);
        self
    }

    /// Adds the waits of `other`, of the same site.
    pub(crate) fn add_up(&mut self, other: &Contention) {
        self.count += other.count;
        self.total_ns += other.total_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
        for (n, m) in self.slots.iter_mut().zip(other.slots) {
            *n += m;
        }
    }

    /// Adds one CPU's element.
    pub(crate) fn add(&mut self, w: &SiteWaits) {
        self.count += w.count;
        self.total_ns += w.total_ns;
        self.max_ns = self.max_ns.max(w.max_ns);
        for (sum, &n) in self.slots.iter_mut().zip(&w.slots) {
            *sum += u64::from(n);
        }
    }
}

/// Everything the kernel side aggregated, summed over CPUs.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Time since attach.
    pub elapsed: Duration,
    /// How long the kernel's run-time statistics were on (the programs' costs cover this).
    pub stats_window: Duration,
    /// Stack-walk time within that window, ns (part of the lock probes' run time).
    pub walk_ns_sampled: u64,
    pub programs: Vec<ProgramStats>,
    pub(crate) contention: Vec<(SiteKey, Contention)>,
    /// Stack id → instruction pointers, innermost first.
    pub stacks: HashMap<i32, Vec<u64>>,
    /// The user stacks' unwinding so far.
    pub unwind: crate::unwind::UnwindCounts,
    pub syscall_counters: Vec<u64>,
    /// Largest value over CPUs for the `max` globals, smallest non-zero for `MAX_FDS_FIRST`,
    /// sums for the rest.
    pub(crate) globals: Vec<u64>,
    pub hists: Vec<u64>,
    pub drops: Vec<u64>,
    /// Direct-probe counters and histograms (`fnops` layout); max counters combined with max.
    pub fn_counters: Vec<u64>,
    pub fn_hists: Vec<u64>,
    /// On-CPU samples, when sampling (`record --cpu`).
    pub cpu: Option<super::cpu::CpuSamples>,
    /// Per-process fd syscalls (`-a`; empty otherwise).
    pub processes: super::processes::Processes,
    /// The machine's CPU times (`/proc/stat`) at the snapshot's start and end, for its steal
    /// time; `None` where they could not be read.
    pub machine: Option<super::steal::Span>,
}

impl Snapshot {
    /// Adds the waits of `sites` to those of the same sites, or as sites of their own.
    pub(crate) fn add_sites(&mut self, sites: &HashMap<SiteKey, Contention>) {
        if sites.is_empty() {
            return;
        }
        let at: HashMap<SiteKey, usize> = self
            .contention
            .iter()
            .enumerate()
            .map(|(i, (key, _))| (*key, i))
            .collect();
        for (key, c) in sites {
            match at.get(key) {
                Some(&i) => self.contention[i].1.add_up(c),
                None => self.contention.push((*key, *c)),
            }
        }
    }

    /// Leaves out the per-process rows and contention sites of `tgids` (deleted from the maps
    /// once read: see [`super::Profiler::forget`]).
    pub(crate) fn forget(&mut self, tgids: &[u32]) {
        // A set: thousands of processes may go at once under churn, among thousands of rows.
        let tgids: HashSet<u32> = tgids.iter().copied().collect();
        self.processes.forget(&tgids);
        self.contention
            .retain(|(key, _)| key.tgid == 0 || !tgids.contains(&key.tgid));
    }

    /// Nothing counted yet, every array sized as the maps are (a snapshot `read` could return).
    pub fn zeroed() -> Self {
        Snapshot {
            syscall_counters: vec![0; SYSCALL_COUNTER_ENTRIES as usize],
            globals: vec![0; global::COUNT as usize],
            hists: vec![0; HIST_ENTRIES as usize],
            drops: vec![0; DROP_ENTRIES as usize],
            fn_counters: vec![0; FN_COUNTER_ENTRIES as usize],
            fn_hists: vec![0; FN_HIST_ENTRIES as usize],
            ..Default::default()
        }
    }

    /// `hist` `id` as 64 slot counts.
    pub(crate) fn hist_slots(&self, id: u32) -> &[u64] {
        let start = (id * HIST_SLOTS) as usize;
        &self.hists[start..start + HIST_SLOTS as usize]
    }
}

/// Globals combined over CPUs by max or min rather than summed: they are not counts.
fn global_is_extreme(i: u32) -> bool {
    matches!(
        i,
        global::MAX_FDS_SEEN | global::SCAN_MAX | global::MAX_FDS_FIRST
    )
}

fn extreme(i: u32, v: &[u64]) -> u64 {
    if i == global::MAX_FDS_FIRST {
        v.iter().copied().filter(|&x| x > 0).min().unwrap_or(0)
    } else {
        v.iter().copied().max().unwrap_or(0)
    }
}

fn fn_counter_is_max(i: u32) -> bool {
    i % counter::COUNT == counter::SLOWPATH_WAIT_MAX
}

fn per_cpu_array(
    ebpf: &Ebpf,
    name: &str,
    len: u32,
    combine: impl Fn(u32, &[u64]) -> u64,
) -> Result<Vec<u64>> {
    let map: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map(name).with_context(|| format!("no map {name}"))?)?;
    let cpus = nr_cpus().map_err(|(path, e)| anyhow!("cannot read {path}: {e}"))?;
    let fd = map.map().fd().as_fd().as_raw_fd();
    if let Some(values) = batch::per_cpu_u64s(fd, len, cpus) {
        return Ok((0..len)
            .zip(values.chunks_exact(cpus))
            .map(|(i, v)| combine(i, v))
            .collect());
    }
    (0..len)
        .map(|i| {
            let values = map.get(&i, 0)?;
            Ok(combine(i, &values))
        })
        .collect()
}

/// The lock probes' stack-walk time so far (`global::WALK_NS`, summed over CPUs), ns: read
/// alone at each switch of the run-time statistics.
pub(crate) fn walk_ns(ebpf: &Ebpf) -> Result<u64> {
    let map: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map(map::GLOBALS).context("no map GLOBALS")?)?;
    Ok(map.get(&global::WALK_NS, 0)?.iter().sum())
}

/// The maps' contents now, with the rows of ended processes taken out of them (their
/// processes' rows and contention sites); costs, times and window are the profiler's to fill in.
pub(crate) fn read(
    ebpf: &Ebpf,
    retired: (&Processes, &HashMap<SiteKey, Contention>),
) -> Result<Snapshot> {
    let sum = |_: u32, v: &[u64]| v.iter().sum();
    let mut snap = Snapshot {
        syscall_counters: per_cpu_array(ebpf, map::SYSCALL_COUNTERS, SYSCALL_COUNTER_ENTRIES, sum)?,
        hists: per_cpu_array(ebpf, map::HISTS, HIST_ENTRIES, sum)?,
        drops: per_cpu_array(ebpf, map::DROPS, DROP_ENTRIES, sum)?,
        globals: per_cpu_array(ebpf, map::GLOBALS, global::COUNT, |i, v| match i {
            i if global_is_extreme(i) => extreme(i, v),
            _ => v.iter().sum(),
        })?,
        fn_counters: per_cpu_array(ebpf, map::FN_COUNTERS, FN_COUNTER_ENTRIES, |i, v| {
            if fn_counter_is_max(i) {
                v.iter().copied().max().unwrap_or(0)
            } else {
                v.iter().sum()
            }
        })?,
        fn_hists: per_cpu_array(ebpf, map::FN_HISTS, FN_HIST_ENTRIES, sum)?,
        // Right after the machine's counters: what is counted between the two reads is in one
        // and not yet in the other (the next snapshot has it in both).
        processes: super::processes::Processes::read(ebpf)?,
        ..Default::default()
    };

    let index: BpfHashMap<_, SiteKey, u32> =
        BpfHashMap::try_from(ebpf.map(map::SITE_INDEX).context("no map SITE_INDEX")?)?;
    let waits: PerCpuArray<_, SiteWaits> =
        PerCpuArray::try_from(ebpf.map(map::SITE_WAITS).context("no map SITE_WAITS")?)?;
    for entry in index.iter() {
        let (key, i) = entry?;
        let mut c = Contention::default();
        for w in waits.get(&i, 0)?.iter() {
            c.add(w);
        }
        if c.count > 0 {
            snap.contention.push((key, c));
        }
    }
    add_retired(&mut snap, retired);

    let stacks: StackTraceMap<_> =
        StackTraceMap::try_from(ebpf.map(map::STACKS).context("no map STACKS")?)?;
    for (key, _) in &snap.contention {
        for id in [key.kernel_stack, key.user_stack] {
            // Copies are the unwinder's (`Profiler::snapshot` adds them).
            if (0..COPY_ID_BASE).contains(&id) && !snap.stacks.contains_key(&id) {
                let frames = stacks
                    .get(&(id as u32), 0)
                    .map(|s| s.frames().iter().map(|f| f.ip).collect())
                    .unwrap_or_default();
                snap.stacks.insert(id, frames);
            }
        }
    }
    Ok(snap)
}

/// Adds the rows taken out of the maps to those read from them.
fn add_retired(
    snap: &mut Snapshot,
    (processes, sites): (&Processes, &HashMap<SiteKey, Contention>),
) {
    snap.processes.add(processes);
    snap.add_sites(sites);
}

impl Snapshot {
    /// What happened between `earlier` and `self` (both from one profiler): counts and sums
    /// subtract; maxima, minima and first values are those of the whole run so far, since a
    /// maximum cannot be split into intervals.
    pub(crate) fn delta(&self, earlier: &Snapshot) -> Snapshot {
        let sub = |now: &[u64], then: &[u64], keep: &dyn Fn(u32) -> bool| -> Vec<u64> {
            now.iter()
                .enumerate()
                .map(|(i, &n)| {
                    let before = then.get(i).copied().unwrap_or(0);
                    if keep(i as u32) {
                        n
                    } else {
                        n.saturating_sub(before)
                    }
                })
                .collect()
        };
        let none = |_: u32| false;
        let before: HashMap<SiteKey, Contention> = earlier.contention.iter().copied().collect();
        let contention = self
            .contention
            .iter()
            .filter_map(|(key, c)| {
                let b = before.get(key).copied().unwrap_or_default();
                let count = c.count.saturating_sub(b.count);
                let mut slots = c.slots;
                for (n, then) in slots.iter_mut().zip(b.slots) {
                    *n = n.saturating_sub(then);
                }
                (count > 0).then_some((
                    *key,
                    Contention {
                        count,
                        total_ns: c.total_ns.saturating_sub(b.total_ns),
                        max_ns: c.max_ns,
                        slots,
                    },
                ))
            })
            .collect();
        let programs = self
            .programs
            .iter()
            .map(|p| {
                let b = earlier.programs.iter().find(|e| e.name == p.name);
                let b = |f: fn(&ProgramStats) -> u64| b.map_or(0, f);
                ProgramStats {
                    name: p.name.clone(),
                    run_time_ns: p.run_time_ns.saturating_sub(b(|e| e.run_time_ns)),
                    run_count: p.run_count.saturating_sub(b(|e| e.run_count)),
                    recursion_misses: p.recursion_misses.saturating_sub(b(|e| e.recursion_misses)),
                }
            })
            .collect();
        Snapshot {
            elapsed: self.elapsed.saturating_sub(earlier.elapsed),
            stats_window: self.stats_window.saturating_sub(earlier.stats_window),
            walk_ns_sampled: self.walk_ns_sampled.saturating_sub(earlier.walk_ns_sampled),
            programs,
            contention,
            stacks: self.stacks.clone(),
            unwind: self.unwind.since(&earlier.unwind),
            syscall_counters: sub(&self.syscall_counters, &earlier.syscall_counters, &none),
            globals: sub(&self.globals, &earlier.globals, &global_is_extreme),
            hists: sub(&self.hists, &earlier.hists, &none),
            drops: sub(&self.drops, &earlier.drops, &none),
            fn_counters: sub(&self.fn_counters, &earlier.fn_counters, &fn_counter_is_max),
            fn_hists: sub(&self.fn_hists, &earlier.fn_hists, &none),
            cpu: self.cpu.as_ref().map(|c| c.delta(earlier.cpu.as_ref())),
            processes: self.processes.delta(&earlier.processes),
            // An earlier snapshot without times is the zero one of attach: then since attach.
            machine: match (&self.machine, &earlier.machine) {
                (Some(now), Some(then)) => Some(now.after(then)),
                (now, _) => now.clone(),
            },
        }
    }
}
