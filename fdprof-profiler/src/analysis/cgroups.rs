//! A system-wide recording's figures by container, or outside containers by cgroup: each
//! group's processes narrowed out of the recording (`model::process::split_by`, every group in
//! one pass), its figures by the same functions as the whole machine's.

use std::collections::BTreeMap;

use fdprof_figures::{CgroupGroup, Container, FileLockWaits, LockKind};
use fdprof_recording::{Recording, recording::ProcessRecord};

use super::{sum, syscalls};
use crate::model::process;

/// What puts processes in one group: their container, else their cgroup path (`None`: not
/// known).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum GroupKey {
    Container(Container),
    Cgroup(Option<String>),
}

impl GroupKey {
    pub(crate) fn of(p: &ProcessRecord) -> GroupKey {
        match &p.identity.container {
            Some(c) => GroupKey::Container(c.clone()),
            None => GroupKey::Cgroup(p.identity.cgroup.clone()),
        }
    }
}

/// Every group of the recording's processes (none unless it has some: `-a`, a target set),
/// most `file_lock` wait first, then most fd syscalls.
pub(crate) fn cgroups(rec: &Recording) -> Vec<CgroupGroup> {
    let mut by_key: BTreeMap<GroupKey, Vec<&ProcessRecord>> = BTreeMap::new();
    for p in &rec.processes {
        by_key.entry(GroupKey::of(p)).or_default().push(p);
    }
    let mut own = process::split_by(rec, GroupKey::of);
    let mut groups: Vec<CgroupGroup> = by_key
        .into_iter()
        .filter_map(|(key, members)| Some((own.remove(&key)?, members)))
        .map(|(own, members)| {
            let mut pids: Vec<u32> = members
                .iter()
                .map(|p| p.pid)
                .filter(|&pid| !process::is_gone_in_container(pid))
                .collect();
            pids.sort_unstable();
            let file_lock = || {
                own.contention
                    .iter()
                    .filter(|s| s.lock == LockKind::FileLock)
            };
            let syscalls = syscalls(&own);
            let first = &members[0].identity;
            CgroupGroup {
                path: first.cgroup.clone(),
                unit: first.unit.clone(),
                container: first.container.clone(),
                pod_uid: first.pod_uid.clone(),
                processes: pids,
                file_lock: FileLockWaits {
                    count: sum(file_lock().map(|s| s.count)),
                    wait_ns: sum(file_lock().map(|s| s.total_wait_ns)),
                },
                fd_syscalls: sum(syscalls.iter().map(|s| s.calls)),
                syscalls,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.file_lock
            .wait_ns
            .cmp(&a.file_lock.wait_ns)
            .then(b.fd_syscalls.cmp(&a.fd_syscalls))
            .then(a.path.cmp(&b.path))
    });
    groups
}
