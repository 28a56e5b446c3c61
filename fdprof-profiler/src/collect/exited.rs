//! The per-process rows of processes that ended (`-a`, a target set). The programs queue each
//! ended process's tgid in `EXITED` at `sched_process_exit`, before its exit is done (its
//! memory, files and `exit_notify` come after, and take locks: contention sites of its own).
//! A sweep a second pops the queue and takes the rows of those popped 100 ms before and reaped
//! since (past `exit_notify`: only its last switch is left), or of any popped a second before,
//! out of the kernel maps, so that the maps hold the processes alive and those ended within a
//! second or two, not every process ever seen. While contention sites are given out fast (a
//! sixteenth of the site map since the last sweep) the collector sweeps at each of its checks,
//! ten a second, so that churn does not fill the site map. The rows taken out are added to
//! every snapshot until released: a recording and a live view keep them to their end; the
//! daemon releases them once an interval has read them. A full queue is a counted drop
//! (`processes`/`exited_full`), after which the sweep finds the ended processes among the rows
//! itself (a look at `/proc` per process).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapError, PerCpuArray, PerCpuHashMap, PerCpuValues, Queue},
};
use fdprof_common::{
    contention::{SITES, SiteKey, SiteWaits},
    counters::{drop, global},
    probes::map,
    process::{COMM_LEN, ProcessCounts, ProcessScan, ProcessSyscall, add_counts},
};

use super::processes::{Processes, comm_string};
use super::snapshot::Contention;

/// A process popped this long ago is taken out (a zombie not reaped yet, or its pid reused
/// by a new process, whose rows then count on from naught).
const DUE: Duration = Duration::from_secs(1);
/// A reaped process popped this long ago is taken out: its exit has only its last switch
/// left, microseconds.
const REAPED_DUE: Duration = Duration::from_millis(100);
/// A sweep is due a second after the last, or once this many sites were given out since it.
const SWEEP: Duration = Duration::from_secs(1);
const FILLING: u64 = SITES as u64 / 16;

/// Rows taken out of the kernel maps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retired {
    pub processes: Processes,
    pub contention: HashMap<SiteKey, Contention>,
    /// The frames of the slow-path sites' stacks among `contention`'s (their stacks are kept
    /// by fdprof, not in the stack map).
    pub stacks: HashMap<i32, Vec<u64>>,
    /// The processes whose rows these are.
    pub tgids: BTreeSet<u32>,
}

impl Retired {
    /// Adds `other`'s rows.
    fn add(&mut self, other: Retired) {
        self.processes.add(&other.processes);
        for (key, c) in other.contention {
            self.contention.entry(key).or_default().add_up(&c);
        }
        self.stacks.extend(other.stacks);
        self.tgids.extend(other.tgids);
    }
}

/// The sweep's state: the processes popped and not taken out yet, and the rows taken out so far.
#[derive(Debug, Default)]
pub(crate) struct Exited {
    /// tgid → when it was popped.
    queued: BTreeMap<u32, Instant>,
    retired: Retired,
    /// `processes`/`exited_full` at the last sweep.
    overflows: u64,
    /// When the last sweep was, and `global::SITES_GIVEN` then.
    last: Option<(Instant, u64)>,
}

impl Exited {
    /// Sweeps when a second has passed since the last sweep, or sites are given out fast.
    pub(crate) fn check(&mut self, ebpf: &mut Ebpf) -> Result<()> {
        let due = match self.last {
            Some((at, given)) => at.elapsed() >= SWEEP || sites_given(ebpf)? >= given + FILLING,
            None => true,
        };
        match due {
            true => self.sweep(ebpf),
            false => Ok(()),
        }
    }

    /// Queues the processes that ended since the last sweep, and takes out the rows of those
    /// due.
    pub(crate) fn sweep(&mut self, ebpf: &mut Ebpf) -> Result<()> {
        let now = Instant::now();
        self.last = Some((now, sites_given(ebpf)?));
        let mut popped = pop_all(ebpf)?;
        let overflows = exited_full(ebpf)?;
        if overflows > self.overflows {
            self.overflows = overflows;
            popped.extend(ended_among_rows(ebpf)?);
        }
        // A pid queued again is a new process of that pid, whose exit may still be running:
        // its time starts now.
        for tgid in popped {
            self.queued.insert(tgid, now);
        }
        let due = due(&self.queued, now, in_proc);
        if !due.is_empty() {
            self.queued.retain(|tgid, _| !due.contains(tgid));
            let taken = take(ebpf, &due)?;
            self.retired.add(taken);
        }
        Ok(())
    }

    /// The rows taken out so far, which every snapshot adds.
    pub(crate) fn retired(&self) -> &Retired {
        &self.retired
    }

    /// Forgets the rows taken out so far (an interval has read them): their processes.
    pub(crate) fn release(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.retired)
            .tgids
            .into_iter()
            .collect()
    }
}

/// The processes of `queued` (tgid → when popped) due at `now`: those `in_proc` no longer
/// has popped [`REAPED_DUE`] before, any popped [`DUE`] before.
fn due(
    queued: &BTreeMap<u32, Instant>,
    now: Instant,
    in_proc: impl Fn(u32) -> bool,
) -> BTreeSet<u32> {
    queued
        .iter()
        .filter(|&(&tgid, &at)| {
            let age = now.saturating_duration_since(at);
            age >= DUE || (age >= REAPED_DUE && !in_proc(tgid))
        })
        .map(|(&tgid, _)| tgid)
        .collect()
}

/// Whether `/proc` still has process `tgid`: not reaped yet (or its pid taken again).
fn in_proc(tgid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{tgid}")).exists()
}

/// `global::SITES_GIVEN`, summed over CPUs.
fn sites_given(ebpf: &Ebpf) -> Result<u64> {
    let globals: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map(map::GLOBALS).context("no map GLOBALS")?)?;
    Ok(globals.get(&global::SITES_GIVEN, 0)?.iter().sum())
}

/// Every tgid in the queue now.
fn pop_all(ebpf: &mut Ebpf) -> Result<BTreeSet<u32>> {
    let mut queue: Queue<_, u32> =
        Queue::try_from(ebpf.map_mut(map::EXITED).context("no map EXITED")?)?;
    let mut out = BTreeSet::new();
    // At most its size: the programs may push while it is emptied.
    for _ in 0..queue.capacity() {
        match queue.pop(0) {
            Ok(tgid) => {
                out.insert(tgid);
            }
            Err(MapError::ElementNotFound) => break,
            Err(e) => return Err(e).context("cannot read the EXITED queue"),
        }
    }
    Ok(out)
}

/// `processes`/`exited_full`, summed over CPUs.
fn exited_full(ebpf: &Ebpf) -> Result<u64> {
    let drops: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map(map::DROPS).context("no map DROPS")?)?;
    let index = drop::PROBE_PROCESSES * drop::COUNT + drop::EXITED_FULL;
    Ok(drops.get(&index, 0)?.iter().sum())
}

/// The processes of every per-process row that are no longer running (after the queue
/// overflowed): one look at `/proc` each.
fn ended_among_rows(ebpf: &Ebpf) -> Result<BTreeSet<u32>> {
    let mut tgids = BTreeSet::new();
    let syscalls: PerCpuHashMap<_, ProcessSyscall, ProcessCounts> = PerCpuHashMap::try_from(
        ebpf.map(map::PROCESS_SYSCALLS)
            .context("no map PROCESS_SYSCALLS")?,
    )?;
    tgids.extend(syscalls.keys().filter_map(Result::ok).map(|k| k.tgid));
    let scans: PerCpuHashMap<_, u32, ProcessScan> = PerCpuHashMap::try_from(
        ebpf.map(map::PROCESS_SCANS)
            .context("no map PROCESS_SCANS")?,
    )?;
    tgids.extend(scans.keys().filter_map(Result::ok));
    let comms: BpfHashMap<_, u32, [u8; COMM_LEN]> = BpfHashMap::try_from(
        ebpf.map(map::PROCESS_COMMS)
            .context("no map PROCESS_COMMS")?,
    )?;
    tgids.extend(comms.keys().filter_map(Result::ok));
    let sites: BpfHashMap<_, SiteKey, u32> =
        BpfHashMap::try_from(ebpf.map(map::SITE_INDEX).context("no map SITE_INDEX")?)?;
    tgids.extend(sites.keys().filter_map(Result::ok).map(|k| k.tgid));
    tgids.extend(super::slow_sites::tgids(ebpf)?);
    tgids.remove(&0);
    Ok(tgids.into_iter().filter(|&t| !runs(t)).collect())
}

/// Whether a thread of process `tgid` has not yet exited (neither gone nor a zombie). A
/// misjudged process loses no count: its rows are taken out, and new ones counted from there.
fn runs(tgid: u32) -> bool {
    crate::procfs::tasks(tgid).is_some_and(|mut tasks| {
        tasks.any(|t| {
            crate::procfs::stat_fields(&format!("{tgid}/task/{t}"))
                .is_some_and(|f| f.first().is_some_and(|s| s != "Z" && s != "X"))
        })
    })
}

/// Reads the per-process rows and contention sites of `tgids` and deletes them from the maps,
/// so their room serves processes to come: what they held.
pub(crate) fn take(ebpf: &mut Ebpf, tgids: &BTreeSet<u32>) -> Result<Retired> {
    let mut out = Retired {
        tgids: tgids.clone(),
        contention: take_sites(ebpf, tgids)?,
        ..Retired::default()
    };
    let slow = super::slow_sites::take(ebpf, tgids)?;
    for (key, c) in slow.contention {
        out.contention.entry(key).or_default().add_up(&c);
    }
    out.stacks = slow.stacks;
    let mut syscalls: PerCpuHashMap<_, ProcessSyscall, ProcessCounts> = PerCpuHashMap::try_from(
        ebpf.map_mut(map::PROCESS_SYSCALLS)
            .context("no map PROCESS_SYSCALLS")?,
    )?;
    let keys: Vec<ProcessSyscall> = syscalls
        .keys()
        .filter_map(Result::ok)
        .filter(|k| tgids.contains(&k.tgid))
        .collect();
    for key in keys {
        if let Ok(per_cpu) = syscalls.get(&key, 0) {
            let sum = out.processes.syscalls.entry(key).or_default();
            per_cpu.iter().for_each(|cpu| add_counts(sum, cpu));
        }
        let _ = syscalls.remove(&key);
    }
    let mut scans: PerCpuHashMap<_, u32, ProcessScan> = PerCpuHashMap::try_from(
        ebpf.map_mut(map::PROCESS_SCANS)
            .context("no map PROCESS_SCANS")?,
    )?;
    for tgid in tgids {
        if let Ok(per_cpu) = scans.get(tgid, 0) {
            let sum = out.processes.scans.entry(*tgid).or_default();
            per_cpu.iter().for_each(|cpu| sum.add(cpu));
            let _ = scans.remove(tgid);
        }
    }
    let mut comms: BpfHashMap<_, u32, [u8; COMM_LEN]> = BpfHashMap::try_from(
        ebpf.map_mut(map::PROCESS_COMMS)
            .context("no map PROCESS_COMMS")?,
    )?;
    for tgid in tgids {
        if let Ok(comm) = comms.get(tgid, 0) {
            out.processes.comms.insert(*tgid, comm_string(&comm));
            let _ = comms.remove(tgid);
        }
    }
    forget_ends(ebpf, tgids)?;
    Ok(out)
}

/// Deletes the `ENDED` claims of `tgids`: they served only while the process's threads were
/// exiting, long over (an LRU map, it would hold the last few thousand otherwise).
fn forget_ends(ebpf: &mut Ebpf, tgids: &BTreeSet<u32>) -> Result<()> {
    let mut ended: BpfHashMap<_, [u64; 2], u8> =
        BpfHashMap::try_from(ebpf.map_mut(map::ENDED).context("no map ENDED")?)?;
    let keys: Vec<[u64; 2]> = ended
        .keys()
        .filter_map(Result::ok)
        .filter(|k| u32::try_from(k[1]).is_ok_and(|t| tgids.contains(&t)))
        .collect();
    for key in keys {
        let _ = ended.remove(&key);
    }
    Ok(())
}

/// Reads and frees the `SITE_WAITS` elements of the sites of `tgids`: out of `SITE_INDEX`
/// first (no new wait finds them), read, zeroed, then out of `SITE_OWNERS` (free for a new
/// site to claim).
fn take_sites(ebpf: &mut Ebpf, tgids: &BTreeSet<u32>) -> Result<HashMap<SiteKey, Contention>> {
    let mut index: BpfHashMap<_, SiteKey, u32> =
        BpfHashMap::try_from(ebpf.map_mut(map::SITE_INDEX).context("no map SITE_INDEX")?)?;
    let gone: Vec<(SiteKey, u32)> = index
        .iter()
        .filter_map(Result::ok)
        .filter(|(key, _)| key.tgid != 0 && tgids.contains(&key.tgid))
        .collect();
    let mut out = HashMap::new();
    if gone.is_empty() {
        return Ok(out);
    }
    for (key, _) in &gone {
        let _ = index.remove(key);
    }
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    let mut waits: PerCpuArray<_, SiteWaits> =
        PerCpuArray::try_from(ebpf.map_mut(map::SITE_WAITS).context("no map SITE_WAITS")?)?;
    for (key, i) in &gone {
        let mut c = Contention::default();
        for w in waits.get(i, 0)?.iter() {
            c.add(w);
        }
        if c.count > 0 {
            out.entry(*key)
                .or_insert_with(Contention::default)
                .add_up(&c);
        }
        waits.set(
            *i,
            PerCpuValues::try_from(vec![SiteWaits::default(); cpus])?,
            0,
        )?;
    }
    let mut owners: BpfHashMap<_, u32, SiteKey> = BpfHashMap::try_from(
        ebpf.map_mut(map::SITE_OWNERS)
            .context("no map SITE_OWNERS")?,
    )?;
    for (_, i) in &gone {
        let _ = owners.remove(i);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_process_is_due_after_100_ms_any_other_after_a_second() {
        let popped = Instant::now();
        let queued = BTreeMap::from([(10, popped), (11, popped)]);
        // 11 is still in /proc: a zombie, or its pid taken again.
        let in_proc = |tgid| tgid == 11;
        let at = |ms| popped + Duration::from_millis(ms);
        assert!(due(&queued, at(50), in_proc).is_empty());
        assert_eq!(due(&queued, at(100), in_proc), BTreeSet::from([10]));
        assert_eq!(due(&queued, at(999), in_proc), BTreeSet::from([10]));
        assert_eq!(due(&queued, at(1000), in_proc), BTreeSet::from([10, 11]));
    }
}
