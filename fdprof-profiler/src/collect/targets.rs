//! The target set of a profiler attached with [`super::Filter::Set`]: the `TARGETS` map user
//! space fills (and the programs extend at exec, rename and fork), the names matched in the
//! kernel, and the per-process rows and contention sites of processes that left, deleted once
//! read.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapError},
};
use fdprof_common::{
    fnops,
    probes::map,
    process::COMM_LEN,
    targets::{CgroupKey, MAX_CGROUPS, MAX_COMMS, MAX_MEMBER_PIDS, TargetEntry},
};

/// Why a process was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The set is at its bound.
    Full,
}

/// Adds `tgid` with `entry`; one already in the set keeps how it joined.
pub(crate) fn add(ebpf: &mut Ebpf, tgid: u32, entry: TargetEntry) -> Result<Result<(), Refused>> {
    let mut set: BpfHashMap<_, u32, TargetEntry> = targets_mut(ebpf)?;
    if set.get(&tgid, 0).is_ok() {
        return Ok(Ok(()));
    }
    const BPF_NOEXIST: u64 = 1;
    match set.insert(tgid, entry, BPF_NOEXIST) {
        // EEXIST: the kernel put it there meanwhile (and marked it).
        Ok(()) => mark(ebpf, tgid, true).map(Ok),
        // E2BIG: full.
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::E2BIG) => {
            Ok(Err(Refused::Full))
        }
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::EEXIST) => {
            Ok(Ok(()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot add pid {tgid} to the target set")),
    }
}

/// Marks `tgid` in or out of `MEMBERS`, the filter's view of the set (a pid past its size is
/// found in `TARGETS`).
fn mark(ebpf: &mut Ebpf, tgid: u32, member: bool) -> Result<()> {
    let mut members: Array<_, u8> =
        Array::try_from(ebpf.map_mut(map::MEMBERS).context("no map MEMBERS")?)?;
    match members.set(tgid, u8::from(member), 0) {
        Ok(()) | Err(MapError::OutOfBounds { .. }) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot mark pid {tgid} in the target set")),
    }
}

/// Removes `tgid` (no longer wanted); absent is fine.
pub(crate) fn remove(ebpf: &mut Ebpf, tgid: u32) -> Result<()> {
    let mut set: BpfHashMap<_, u32, TargetEntry> = targets_mut(ebpf)?;
    match set.remove(&tgid) {
        Ok(()) | Err(MapError::KeyNotFound) => {}
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove pid {tgid} from the target set"));
        }
    }
    mark(ebpf, tgid, false)
}

/// The processes in the set now.
pub(crate) fn members(ebpf: &Ebpf) -> Result<BTreeMap<u32, TargetEntry>> {
    let set: BpfHashMap<_, u32, TargetEntry> =
        BpfHashMap::try_from(ebpf.map(map::TARGETS).context("no map TARGETS")?)?;
    let mut out = BTreeMap::new();
    for row in set.iter() {
        // A key deleted while iterating ends the walk early; the next pass sees the rest.
        let Ok((tgid, entry)) = row else { break };
        out.insert(tgid, entry);
    }
    Ok(out)
}

/// Names whose processes join at exec and rename: `(comm, slot)`, replacing those set before.
/// Names longer than the kernel keeps (15 bytes) are matched on their first 15, as the kernel
/// names the process.
pub(crate) fn set_comms(ebpf: &mut Ebpf, comms: &[(String, u32)]) -> Result<()> {
    anyhow::ensure!(
        comms.len() <= MAX_COMMS as usize,
        "at most {MAX_COMMS} names can be matched in the kernel, not {}",
        comms.len()
    );
    let mut names: BpfHashMap<_, [u8; COMM_LEN], u32> = BpfHashMap::try_from(
        ebpf.map_mut(map::TARGET_COMMS)
            .context("no map TARGET_COMMS")?,
    )?;
    let old: Vec<[u8; COMM_LEN]> = names.keys().filter_map(Result::ok).collect();
    for key in old {
        let _ = names.remove(&key);
    }
    for (comm, slot) in comms {
        names.insert(comm_key(comm), slot, 0)?;
    }
    let mut config: Array<_, u32> =
        Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
    config.set(fnops::CONFIG_COMMS, u32::from(!comms.is_empty()), 0)?;
    Ok(())
}

/// The cgroups the programs follow: user space's copy of `TARGET_CGROUPS` (which only it
/// writes), and the cgroups past the bound.
#[derive(Debug, Default)]
pub(crate) struct CgroupTargets {
    keys: BTreeMap<CgroupKey, u32>,
    past_bound: BTreeSet<CgroupKey>,
    /// Cgroups past the bound, each counted once while it lasts (`targets`/`cgroup_bound`).
    pub dropped: u64,
}

impl CgroupTargets {
    /// `keys` (cgroup → slot) replace those set before: the stale ones go first, so the map
    /// never holds more than the larger of the two (a removed cgroup's entry never stands in a
    /// new one's way), and those in both stay as they are, so no move into them is missed.
    /// `past_bound`: the cgroups not followed, past the bound; each new one is counted.
    pub(crate) fn set(
        &mut self,
        ebpf: &mut Ebpf,
        keys: &BTreeMap<CgroupKey, u32>,
        past_bound: BTreeSet<CgroupKey>,
    ) -> Result<()> {
        anyhow::ensure!(
            keys.len() <= MAX_CGROUPS as usize,
            "at most {MAX_CGROUPS} cgroups can be followed in the kernel, not {}",
            keys.len()
        );
        self.dropped += past_bound.difference(&self.past_bound).count() as u64;
        self.past_bound = past_bound;
        let mut map: BpfHashMap<_, CgroupKey, u32> = BpfHashMap::try_from(
            ebpf.map_mut(map::TARGET_CGROUPS)
                .context("no map TARGET_CGROUPS")?,
        )?;
        let stale: Vec<CgroupKey> = self
            .keys
            .keys()
            .filter(|k| !keys.contains_key(k))
            .copied()
            .collect();
        for key in stale {
            match map.remove(&key) {
                Ok(()) | Err(MapError::KeyNotFound) => {}
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e).context("cannot forget a cgroup"),
            }
            self.keys.remove(&key);
        }
        for (key, &slot) in keys {
            if self.keys.get(key) != Some(&slot) {
                map.insert(key, slot, 0).context("cannot follow a cgroup")?;
                self.keys.insert(*key, slot);
            }
        }
        let mut config: Array<_, u32> =
            Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
        config.set(fnops::CONFIG_CGROUPS, u32::from(!keys.is_empty()), 0)?;
        Ok(())
    }
}

/// `comm` as the kernel keeps it: at most 15 bytes, NUL-padded.
pub(crate) fn comm_key(comm: &str) -> [u8; COMM_LEN] {
    let mut key = [0u8; COMM_LEN];
    let bytes = comm.as_bytes();
    let n = bytes.len().min(COMM_LEN - 1);
    key[..n].copy_from_slice(&bytes[..n]);
    key
}

/// Deletes the per-process rows and contention sites of `tgids` (processes that left, their
/// figures read), so their room serves processes to come.
pub(crate) fn forget(ebpf: &mut Ebpf, tgids: &[u32]) -> Result<()> {
    if !tgids.is_empty() {
        super::exited::take(ebpf, &tgids.iter().copied().collect())?;
    }
    Ok(())
}

/// `MEMBERS`' size: the host's `pid_max` (pids are below it), at most `MAX_MEMBER_PIDS`; where
/// it cannot be read, the largest.
pub(crate) fn member_pids() -> u32 {
    crate::procfs::kernel_setting("pid_max")
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(MAX_MEMBER_PIDS)
        .clamp(1, MAX_MEMBER_PIDS)
}

fn targets_mut(ebpf: &mut Ebpf) -> Result<BpfHashMap<&mut aya::maps::MapData, u32, TargetEntry>> {
    Ok(BpfHashMap::try_from(
        ebpf.map_mut(map::TARGETS).context("no map TARGETS")?,
    )?)
}
