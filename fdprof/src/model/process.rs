//! The processes of a system-wide recording (`-a`): a recording narrowed to some of them, for
//! each process's own figures and for `report --pid/--comm`.

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
pub(crate) fn container_prefix(arg: &str) -> Result<String, String> {
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
pub(crate) fn in_container(p: &ProcessRecord, prefix: &str) -> bool {
    p.identity
        .container
        .as_ref()
        .is_some_and(|c| c.id.starts_with(prefix))
}

/// Whether `p` runs in cgroup `path` or below it (`path` as `/proc/PID/cgroup` shows it).
pub(crate) fn in_cgroup(p: &ProcessRecord, path: &str) -> bool {
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
pub(crate) fn only(rec: &Recording, keep: impl Fn(&ProcessRecord) -> bool) -> Recording {
    let processes: Vec<ProcessRecord> = rec.processes.iter().filter(|p| keep(p)).cloned().collect();
    let kept = |pid: u32| processes.iter().any(|p| p.pid == pid);
    let contention: Vec<ContentionSite> = rec
        .contention
        .iter()
        .filter(|s| s.pid.is_some_and(kept))
        .cloned()
        .collect();
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
