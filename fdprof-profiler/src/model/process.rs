//! The processes of a recording kept per process (`-a`, a target set): a recording narrowed to
//! some of them, for each process's own figures and for `report --pid/--comm`; and the bounds
//! of a live view's rows (at most so many per interval, [`bound`]; none of processes gone from
//! a running total, [`forget`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};

use fdprof_common::contention::LockKind;
use fdprof_recording::recording::{
    ContentionSite, ProcessRecord, Recording, ScanStats, TableStats,
};

/// Names the processes the kernel left unnamed (they waited but made no fd syscall) from
/// `/proc`, those still alive: called as a recording or a live interval is assembled.
pub(crate) fn name_unnamed(rec: &mut Recording) {
    for p in rec.processes.iter_mut().filter(|p| p.comm.is_empty()) {
        p.comm = crate::collect::counters::comm(p.pid);
    }
}

/// The shortest container id prefix taken (as `podman ps` and `docker ps` show ids).
pub(crate) const CONTAINER_PREFIX: usize = 12;

/// `arg` as a container id prefix: 12 to 64 hex digits, lowercased as runtimes print them.
pub fn container_prefix(arg: &str) -> Result<String, String> {
    let id = arg.to_ascii_lowercase();
    if (CONTAINER_PREFIX..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id)
    } else {
        Err(format!(
            "a container id is {CONTAINER_PREFIX} to 64 hex digits (as `podman ps` or `docker ps` \
             shows it)"
        ))
    }
}

/// Whether `p` runs in a container whose id starts with `prefix` (see [`container_prefix`]).
pub fn in_container(p: &ProcessRecord, prefix: &str) -> bool {
    p.identity
        .container
        .as_ref()
        .is_some_and(|c| c.id.starts_with(prefix))
}

/// Whether `p` runs in cgroup `path` or below it (`path` as `/proc/PID/cgroup` shows it).
pub fn in_cgroup(p: &ProcessRecord, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    p.identity.cgroup.as_deref().is_some_and(|own| {
        path.is_empty() || own == path || own.strip_prefix(path).is_some_and(|r| r.starts_with('/'))
    })
}

/// `rec` narrowed to the processes `keep` selects: their waits, their fd syscalls, their scans
/// and table sizes (added up; the machine's scan and table where the recording has none per
/// process). The rest of the figures (functions, drops, costs) are the machine's, kept as they
/// are; the series, on-CPU samples, trace and counters, which are not per process, are left
/// out.
pub fn only(rec: &Recording, keep: impl Fn(&ProcessRecord) -> bool) -> Recording {
    let processes: Vec<ProcessRecord> = rec.processes.iter().filter(|p| keep(p)).cloned().collect();
    let kept: HashSet<u32> = processes.iter().map(|p| p.pid).collect();
    let contention: Vec<ContentionSite> = rec
        .contention
        .iter()
        .filter(|s| s.pid.is_some_and(|pid| kept.contains(&pid)))
        .cloned()
        .collect();
    narrowed(rec, processes, contention)
}

/// `rec` narrowed (as [`only`]) to each group of processes `key` puts together, in one pass
/// over its processes and sites: each process apart (`key` its pid) costs time linear in their
/// number, not its square.
pub(crate) fn split_by<K: Ord + Clone>(
    rec: &Recording,
    key: impl Fn(&ProcessRecord) -> K,
) -> BTreeMap<K, Recording> {
    let mut groups: BTreeMap<K, (Vec<ProcessRecord>, Vec<ContentionSite>)> = BTreeMap::new();
    let mut group_of: HashMap<u32, K> = HashMap::new();
    for p in &rec.processes {
        let k = key(p);
        group_of.insert(p.pid, k.clone());
        groups.entry(k).or_default().0.push(p.clone());
    }
    for site in &rec.contention {
        let group = site.pid.and_then(|pid| group_of.get(&pid));
        if let Some((_, sites)) = group.and_then(|k| groups.get_mut(k)) {
            sites.push(site.clone());
        }
    }
    groups
        .into_iter()
        .map(|(k, (processes, sites))| (k, narrowed(rec, processes, sites)))
        .collect()
}

/// `rec`'s facts and machine-wide figures with these processes and sites of its own.
fn narrowed(
    rec: &Recording,
    processes: Vec<ProcessRecord>,
    contention: Vec<ContentionSite>,
) -> Recording {
    let mut syscalls = Vec::new();
    let mut own = ProcessRecord::default();
    for p in &processes {
        super::merge::add_syscalls(&mut syscalls, &p.syscalls);
        super::merge::add_process_figures(&mut own, p);
    }
    let per_process = rec
        .processes
        .iter()
        .any(|p| p.scan.is_some() || p.table.is_some());
    let scan = match (own.scan, per_process) {
        (Some(mut s), _) => {
            s.origin = rec.scan.origin.clone();
            s
        }
        (None, true) => ScanStats {
            origin: rec.scan.origin.clone(),
            ..Default::default()
        },
        (None, false) => rec.scan.clone(),
    };
    let table = match (own.table, per_process) {
        (Some(t), _) => t,
        (None, true) => TableStats::default(),
        (None, false) => rec.table.clone(),
    };
    Recording {
        // Per process, the syscalls are counted, not timed.
        syscall_latency: false,
        contention,
        stack_walks: rec.stack_walks.clone(),
        functions: rec.functions.clone(),
        syscalls,
        scan,
        table,
        drops: rec.drops.clone(),
        own_cost: rec.own_cost.clone(),
        processes,
        steal: rec.steal,
        ..rec.facts_only()
    }
}

/// Each process's waits: on its own `file_lock` (count, ns) and on every lock (count, ns).
fn waits_by_pid(rec: &Recording) -> HashMap<u32, [u64; 4]> {
    let mut waits: HashMap<u32, [u64; 4]> = HashMap::new();
    for site in &rec.contention {
        let Some(pid) = site.pid else { continue };
        let w = waits.entry(pid).or_default();
        if site.lock == LockKind::FileLock {
            w[0] = w[0].saturating_add(site.count);
            w[1] = w[1].saturating_add(site.total_wait_ns);
        }
        w[2] = w[2].saturating_add(site.count);
        w[3] = w[3].saturating_add(site.total_wait_ns);
    }
    waits
}

/// Keeps the rows of at most `max` processes: the first `max / 2` by `file_lock` wait (of
/// those that waited on it), the rest by fd syscalls (then wait on every lock, then lowest
/// pid). The others are folded into `processes_folded` and their sites lose their pid (merged
/// with the same stacks'), so every count stays in the recording's own figures.
pub fn bound(rec: &mut Recording, max: usize) {
    if rec.processes.len() <= max {
        return;
    }
    let waits = waits_by_pid(rec);
    let wait = |pid: u32| waits.get(&pid).copied().unwrap_or_default();
    let calls = |p: &ProcessRecord| -> u64 { p.syscalls.iter().map(|s| s.calls).sum() };
    let mut rows = std::mem::take(&mut rec.processes);
    // Keys made once a row: a window of churn sorts tens of thousands of them.
    rows.sort_by_cached_key(|p| (Reverse(wait(p.pid)[1]), p.pid));
    let waited = rows.iter().filter(|p| wait(p.pid)[1] > 0).count();
    let mut rest = rows.split_off(waited.min(max / 2));
    rest.sort_by_cached_key(|p| (Reverse(calls(p)), Reverse(wait(p.pid)[3]), p.pid));
    let folded_rows = rest.split_off(max - rows.len());
    rows.extend(rest);
    // Kept for minutes: not with the room of every row it had.
    rows.shrink_to_fit();
    rec.processes = rows;
    let folded = rec.processes_folded.get_or_insert_with(Default::default);
    let mut gone = HashSet::new();
    for p in &folded_rows {
        let [fl_count, fl_ns, count, ns] = wait(p.pid);
        folded.processes += 1;
        folded.file_lock_count = folded.file_lock_count.saturating_add(fl_count);
        folded.file_lock_wait_ns = folded.file_lock_wait_ns.saturating_add(fl_ns);
        folded.wait_count = folded.wait_count.saturating_add(count);
        folded.wait_ns = folded.wait_ns.saturating_add(ns);
        super::merge::add_folded_figures(folded, p);
        gone.insert(p.pid);
    }
    unname_sites(rec, &gone);
}

/// Rows above every real pid (the kernel's limit is 2^22): a container's processes that have
/// gone, folded into one row, so its figures stay whole while its other processes live.
pub(crate) const GONE_IN_CONTAINER: u32 = 1 << 31;

/// Whether `pid` is a [`GONE_IN_CONTAINER`] row, not a process.
pub fn is_gone_in_container(pid: u32) -> bool {
    pid >= GONE_IN_CONTAINER
}

/// Leaves out the rows of processes `gone` (a running total's that exited): their counts stay
/// in the recording's own figures, their sites without a pid. A container's stay in one row of
/// its own (a [`GONE_IN_CONTAINER`] pid, its sites with it), so its series stay counters; that
/// row goes once `keep` says no (its container gone long enough).
pub fn forget(rec: &mut Recording, gone: &HashSet<u32>, keep: impl Fn(&str) -> bool) {
    let before = rec.processes.len();
    let mut rows = std::mem::take(&mut rec.processes);
    let mut folded_into: HashMap<u32, u32> = HashMap::new();
    let mut next = rows
        .iter()
        .map(|p| p.pid)
        .filter(|&p| is_gone_in_container(p))
        .max();
    // Each container's row: the one it has, else one made now.
    let mut row_of: HashMap<String, u32> = rows
        .iter()
        .filter(|p| is_gone_in_container(p.pid))
        .filter_map(|p| Some((p.identity.container.as_ref()?.id.clone(), p.pid)))
        .collect();
    for p in rows.iter().filter(|p| gone.contains(&p.pid)) {
        let Some(c) = &p.identity.container else {
            continue;
        };
        let pid = match row_of.get(&c.id) {
            Some(&pid) => pid,
            None => {
                let pid = next.map_or(GONE_IN_CONTAINER, |n| {
                    n.wrapping_add(1).max(GONE_IN_CONTAINER)
                });
                next = Some(pid);
                row_of.insert(c.id.clone(), pid);
                pid
            }
        };
        let mut row = ProcessRecord {
            pid,
            identity: p.identity.clone(),
            ..Default::default()
        };
        super::merge::add_syscalls(&mut row.syscalls, &p.syscalls);
        super::merge::add_process_figures(&mut row, p);
        rec.processes.push(row);
        folded_into.insert(p.pid, pid);
    }
    let mut dropped: HashSet<u32> = gone
        .iter()
        .copied()
        .filter(|p| !folded_into.contains_key(p))
        .collect();
    let folded = std::mem::take(&mut rec.processes);
    rows.retain(|p| !gone.contains(&p.pid));
    for p in rows.iter().filter(|p| is_gone_in_container(p.pid)) {
        let id = p.identity.container.as_ref().map_or("", |c| c.id.as_str());
        if !keep(id) {
            dropped.insert(p.pid);
        }
    }
    rows.retain(|p| !dropped.contains(&p.pid));
    // A container's earlier row and the processes folded now are one row.
    super::merge::add_processes(&mut rows, &folded);
    rec.processes = rows;
    if rec.processes.len() < before {
        rec.processes.shrink_to_fit();
    }
    if !folded_into.is_empty() {
        for site in &mut rec.contention {
            if let Some(to) = site.pid.and_then(|p| folded_into.get(&p)) {
                site.pid = Some(*to);
            }
        }
        super::merge::merge_sites(&mut rec.contention);
    }
    unname_sites(rec, &dropped);
}

/// The sites of processes `gone` lose their pid, merged with the same stacks'.
fn unname_sites(rec: &mut Recording, gone: &HashSet<u32>) {
    let mut renamed = false;
    for site in &mut rec.contention {
        if site.pid.is_some_and(|pid| gone.contains(&pid)) {
            site.pid = None;
            renamed = true;
        }
    }
    if renamed {
        super::merge::merge_sites(&mut rec.contention);
        rec.contention.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_recording::recording::SyscallStats;

    /// A recording of `n` processes: pid i made i socket calls, and the even ones waited i ns
    /// on their own `file_lock` under one stack.
    fn processes(n: u32) -> Recording {
        let mut rec = crate::testdata::recording();
        let site = rec.contention[0].clone();
        rec.contention.clear();
        rec.processes = (1..=n)
            .map(|pid| ProcessRecord {
                pid,
                comm: format!("p{pid}"),
                syscalls: vec![SyscallStats {
                    name: "socket".into(),
                    calls: u64::from(pid),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        for pid in (2..=n).step_by(2) {
            rec.contention.push(ContentionSite {
                lock: LockKind::FileLock,
                pid: Some(pid),
                count: 1,
                total_wait_ns: u64::from(pid),
                ..site.clone()
            });
        }
        rec
    }

    fn waits(rec: &Recording) -> (u64, u64) {
        let count = rec.contention.iter().map(|s| s.count).sum();
        let ns = rec.contention.iter().map(|s| s.total_wait_ns).sum();
        (count, ns)
    }

    #[test]
    fn bound_keeps_the_top_rows_and_folds_the_rest_without_losing_a_count() {
        let mut rec = processes(100);
        let before = waits(&rec);
        bound(&mut rec, 10);
        let pids: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
        // Five by file_lock wait (the even ones, most first), five by fd syscalls.
        assert_eq!(pids, [100, 98, 96, 94, 92, 99, 97, 95, 93, 91]);
        let folded = rec.processes_folded.as_ref().unwrap();
        assert_eq!(folded.processes, 90);
        let calls: u64 = folded.syscalls.iter().map(|s| s.calls).sum();
        assert_eq!(calls, (1..=90).sum::<u64>());
        assert_eq!(folded.file_lock_count, 45);
        assert_eq!(folded.file_lock_wait_ns, (2..=90).step_by(2).sum::<u64>());
        // The folded processes' waits lost their pids and merged into one site.
        assert_eq!(waits(&rec), before);
        assert_eq!(rec.contention.iter().filter(|s| s.pid.is_none()).count(), 1);
        assert_eq!(rec.contention.len(), 6);
        // Within the bound, nothing changes.
        let mut small = processes(10);
        bound(&mut small, 10);
        assert_eq!(small.processes.len(), 10);
        assert!(small.processes_folded.is_none());
    }

    #[test]
    fn forget_lets_rows_go_and_keeps_their_waits() {
        let mut rec = processes(6);
        let before = waits(&rec);
        forget(&mut rec, &[2, 3, 4].into_iter().collect(), |_| true);
        let pids: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [1, 5, 6]);
        assert_eq!(waits(&rec), before);
        assert!(rec.processes_folded.is_none());
        let split = split_by(&rec, |p| p.pid);
        assert_eq!(split.len(), 3);
        assert_eq!(split[&6].contention.len(), 1);
        assert!(split[&5].contention.is_empty());
    }

    #[test]
    fn a_containers_gone_processes_stay_in_one_row_until_let_go() {
        use fdprof_figures::{Container, Runtime};
        let mut rec = processes(6);
        let container = Container {
            runtime: Runtime::Podman,
            id: "c".repeat(64),
        };
        for p in rec.processes.iter_mut().filter(|p| p.pid >= 4) {
            p.identity.container = Some(container.clone());
        }
        let in_container = |rec: &Recording| {
            let split = split_by(rec, |p| p.identity.container.is_some());
            let own = &split[&true];
            let calls: u64 = own
                .processes
                .iter()
                .flat_map(|p| &p.syscalls)
                .map(|s| s.calls)
                .sum();
            (
                calls,
                own.contention.iter().map(|s| s.total_wait_ns).sum::<u64>(),
            )
        };
        let (before, waited) = (in_container(&rec), waits(&rec));
        assert_eq!(before, (4 + 5 + 6, 4 + 6));
        // Two of the container's three go, then the third: one row holds them, whole.
        forget(&mut rec, &[4, 5].into_iter().collect(), |_| true);
        forget(&mut rec, &[6].into_iter().collect(), |_| true);
        let pids: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [1, 2, 3, GONE_IN_CONTAINER]);
        assert_eq!((in_container(&rec), waits(&rec)), (before, waited));
        // Let go: the counts stay in the recording's own, the row and its pids go.
        forget(&mut rec, &HashSet::new(), |_| false);
        assert_eq!(rec.processes.len(), 3);
        assert_eq!(waits(&rec), waited);
        assert!(rec.contention.iter().all(|s| s.pid.is_none_or(|p| p < 4)));
    }
}
