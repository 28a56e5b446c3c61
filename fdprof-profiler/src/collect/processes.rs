//! Per-process fd syscall counters of a system-wide recording (`-a`), read from
//! `PROCESS_SYSCALLS` (summed over CPUs) with each process's name from `PROCESS_COMMS`.

use std::collections::{BTreeMap, HashSet};

use anyhow::{Context, Result};
use aya::{
    Ebpf, Pod,
    maps::{HashMap as BpfHashMap, PerCpuHashMap},
};
use fdprof_common::{
    probes::map,
    process::{COMM_LEN, ProcessCounts, ProcessScan, ProcessSyscall, ThreadRow, add_counts},
};

/// Every process's counters, and the names the kernel kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Processes {
    pub syscalls: BTreeMap<ProcessSyscall, ProcessCounts>,
    /// tgid → its scans and table size.
    pub scans: BTreeMap<u32, ProcessScan>,
    /// tgid → comm, as the process was named when it last used a syscall for the first time.
    pub comms: BTreeMap<u32, String>,
}

impl Processes {
    pub(crate) fn read(ebpf: &Ebpf) -> Result<Self> {
        let syscalls = per_cpu_sums(ebpf, map::PROCESS_SYSCALLS, add_counts)?;
        let names: BpfHashMap<_, u32, [u8; COMM_LEN]> = BpfHashMap::try_from(
            ebpf.map(map::PROCESS_COMMS)
                .context("no map PROCESS_COMMS")?,
        )?;
        let mut comms = BTreeMap::new();
        for entry in names.iter() {
            let (tgid, comm) = entry?;
            comms.insert(tgid, comm_string(&comm));
        }
        let mut scans = per_cpu_sums(ebpf, map::PROCESS_SCANS, ProcessScan::add)?;
        let mut syscalls = syscalls;
        add_threads(&super::thread_rows::held(ebpf)?, &mut syscalls, &mut scans);
        Ok(Self {
            syscalls,
            scans,
            comms,
        })
    }

    /// Adds `other`'s rows (those of processes that ended, taken out of the maps): counts
    /// add; a name the kernel still keeps wins.
    pub(crate) fn add(&mut self, other: &Processes) {
        for (key, counts) in &other.syscalls {
            add_counts(self.syscalls.entry(*key).or_default(), counts);
        }
        for (tgid, scan) in &other.scans {
            self.scans.entry(*tgid).or_default().add(scan);
        }
        for (tgid, comm) in &other.comms {
            self.comms.entry(*tgid).or_insert_with(|| comm.clone());
        }
    }

    /// Leaves out the rows of `tgids` (deleted from the maps once read).
    pub(crate) fn forget(&mut self, tgids: &HashSet<u32>) {
        self.syscalls.retain(|k, _| !tgids.contains(&k.tgid));
        self.scans.retain(|tgid, _| !tgids.contains(tgid));
        self.comms.retain(|tgid, _| !tgids.contains(tgid));
    }

    /// What was counted between `earlier` and `self`; rows with nothing new are left out.
    pub(crate) fn delta(&self, earlier: &Processes) -> Processes {
        let syscalls = self
            .syscalls
            .iter()
            .filter_map(|(key, now)| {
                let then = earlier.syscalls.get(key).copied().unwrap_or_default();
                let mut d: ProcessCounts = Default::default();
                for ((d, n), t) in d.iter_mut().zip(now).zip(then) {
                    *d = n.saturating_sub(t);
                }
                d.iter().any(|&v| v > 0).then_some((*key, d))
            })
            .collect();
        let scans = self
            .scans
            .iter()
            .filter_map(|(tgid, now)| {
                let then = earlier.scans.get(tgid).copied().unwrap_or_default();
                let d = ProcessScan {
                    allocations: now.allocations.saturating_sub(then.allocations),
                    next_fd_hits: now.next_fd_hits.saturating_sub(then.next_fd_hits),
                    below_origin: now.below_origin.saturating_sub(then.below_origin),
                    // A size, not a count: the table's as it is now.
                    max_fds: now.max_fds,
                    expansions: now.expansions.saturating_sub(then.expansions),
                    bits: std::array::from_fn(|k| now.bits[k].saturating_sub(then.bits[k])),
                };
                (d.allocations + d.below_origin + d.expansions > 0).then_some((*tgid, d))
            })
            .collect();
        Processes {
            syscalls,
            scans,
            comms: self.comms.clone(),
        }
    }
}

/// Adds what running threads hold in their slots to the rows that exist: a slot counts for a
/// process only once its rows are made, and a slot left by a thread whose end was missed never
/// revives a process whose rows were freed.
fn add_threads(
    threads: &[ThreadRow],
    syscalls: &mut BTreeMap<ProcessSyscall, ProcessCounts>,
    scans: &mut BTreeMap<u32, ProcessScan>,
) {
    for row in threads {
        for place in row.syscalls.iter().filter(|p| p.index_plus_one != 0) {
            let key = ProcessSyscall {
                tgid: row.tgid,
                index: place.index_plus_one - 1,
            };
            if let Some(sum) = syscalls.get_mut(&key) {
                add_counts(sum, &place.counts);
            }
        }
        if row.has_scan != 0
            && let Some(sum) = scans.get_mut(&row.tgid)
        {
            sum.add(&row.scan);
        }
    }
}

/// Adds one CPU's row: counts add, the table size is the largest seen.
/// Each key of the per-CPU hash map `name` with its values summed over CPUs by `add`.
fn per_cpu_sums<K: Pod + Ord, V: Pod + Default>(
    ebpf: &Ebpf,
    name: &str,
    add: impl Fn(&mut V, &V),
) -> Result<BTreeMap<K, V>> {
    let rows: PerCpuHashMap<_, K, V> =
        PerCpuHashMap::try_from(ebpf.map(name).with_context(|| format!("no map {name}"))?)?;
    let mut out = BTreeMap::new();
    for entry in rows.iter() {
        let (key, per_cpu) = entry?;
        let mut sum = V::default();
        for cpu in per_cpu.iter() {
            add(&mut sum, cpu);
        }
        out.insert(key, sum);
    }
    Ok(out)
}

/// A name as the kernel keeps it (NUL-padded), as text.
pub(crate) fn comm_string(comm: &[u8; COMM_LEN]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
    String::from_utf8_lossy(&comm[..len]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_subtracts_and_drops_idle_rows() {
        let key = |tgid, index| ProcessSyscall { tgid, index };
        let earlier = Processes {
            syscalls: [(key(1, 5), [3, 0, 3, 0, 3]), (key(2, 5), [1, 0, 1, 0, 1])].into(),
            comms: [(1, "a".to_string())].into(),
            ..Default::default()
        };
        let later = Processes {
            syscalls: [
                (key(1, 5), [5, 1, 4, 0, 4]),
                (key(2, 5), [1, 0, 1, 0, 1]),
                (key(3, 1), [2, 0, 0, 2, 0]),
            ]
            .into(),
            comms: [(1, "a".to_string()), (3, "c".to_string())].into(),
            ..Default::default()
        };
        let d = later.delta(&earlier);
        assert_eq!(
            d.syscalls,
            [(key(1, 5), [2, 1, 1, 0, 1]), (key(3, 1), [2, 0, 0, 2, 0])].into()
        );
        assert_eq!(d.comms.len(), 2);
    }

    #[test]
    fn thread_slots_add_to_rows_that_exist_and_revive_none() {
        use fdprof_common::process::{THREAD_SYSCALLS, ThreadSyscall};
        let key = |tgid, index| ProcessSyscall { tgid, index };
        let slot = |tid, tgid, index_plus_one, n| {
            let mut syscalls = [ThreadSyscall::default(); THREAD_SYSCALLS];
            syscalls[1] = ThreadSyscall {
                index_plus_one,
                _pad: 0,
                counts: [n, 0, n, 0, n],
            };
            ThreadRow {
                tid,
                tgid,
                syscalls,
                has_scan: 1,
                _pad: 0,
                scan: ProcessScan {
                    allocations: n,
                    max_fds: 256,
                    ..Default::default()
                },
            }
        };
        let mut syscalls: BTreeMap<_, ProcessCounts> = [(key(7, 2), [1, 0, 1, 0, 1])].into();
        let mut scans: BTreeMap<_, ProcessScan> = [(7, ProcessScan::default())].into();
        // Two threads of process 7 (index 2 is place 3), and one of process 9, whose rows
        // were freed when it ended.
        add_threads(
            &[slot(70, 7, 3, 5), slot(71, 7, 3, 2), slot(90, 9, 3, 4)],
            &mut syscalls,
            &mut scans,
        );
        assert_eq!(syscalls, [(key(7, 2), [8, 0, 8, 0, 8])].into());
        assert_eq!(scans.len(), 1);
        assert_eq!((scans[&7].allocations, scans[&7].max_fds), (7, 256));
    }

    #[test]
    fn rows_taken_out_add_back() {
        let key = ProcessSyscall { tgid: 7, index: 2 };
        let mut read = Processes {
            syscalls: [(key, [1, 0, 1, 0, 1])].into(),
            comms: [(7, "new".to_string())].into(),
            ..Default::default()
        };
        let retired = Processes {
            syscalls: [(key, [4, 1, 3, 0, 3])].into(),
            scans: [(
                8,
                ProcessScan {
                    allocations: 5,
                    max_fds: 64,
                    ..Default::default()
                },
            )]
            .into(),
            comms: [(7, "old".to_string()), (8, "gone".to_string())].into(),
        };
        read.add(&retired);
        assert_eq!(read.syscalls[&key], [5, 1, 4, 0, 4]);
        assert_eq!(
            (read.scans[&8].allocations, read.scans[&8].max_fds),
            (5, 64)
        );
        assert_eq!(
            (read.comms[&7].as_str(), read.comms[&8].as_str()),
            ("new", "gone")
        );
    }
}
