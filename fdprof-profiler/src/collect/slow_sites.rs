//! The slow-path probe's sites (`SLOW_SITES`), where it sees every spinlock's waits (kernels
//! without the lock contention tracepoints): each CPU's sites read as contention sites like the
//! tracepoints' ones, their stacks kept as frames under ids of their own.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, Result};
use aya::{
    Ebpf,
    maps::{Array, MapData},
};
use fdprof_common::{
    contention::{SiteKey, SlowSite},
    probes::map,
};

use super::snapshot::Contention;

/// Stack ids of slow-path sites start here, past any id of the stack map (a few thousand) and
/// of a user stack's copy.
const FIRST_ID: u32 = fdprof_common::copies::COPY_ID_END as u32;

/// Contention sites and the frames of the stacks they name.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlowWaits {
    pub contention: HashMap<SiteKey, Contention>,
    pub stacks: HashMap<i32, Vec<u64>>,
}

impl SlowWaits {
    fn add(&mut self, s: &SlowSite) {
        let kernel = frames(&s.kernel, s.kernel_frames);
        let user = frames(&s.user, s.user_frames);
        let key = SiteKey {
            lock: s.lock,
            kernel_stack: self.stack(kernel),
            user_stack: match s.user_copy {
                -1 => self.stack(user),
                copy => copy,
            },
            tgid: s.tgid,
            _pad: 0,
        };
        self.contention.entry(key).or_default().add(&s.waits);
    }

    /// The id of a stack: from its frames, so that a site keeps its key from one read to the
    /// next and on every CPU; -1 when it could not be taken.
    fn stack(&mut self, frames: &[u64]) -> i32 {
        if frames.is_empty() {
            return -1;
        }
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for ip in frames {
            h = (h ^ ip).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let id = (FIRST_ID + (h % u64::from(i32::MAX as u32 - FIRST_ID)) as u32) as i32;
        self.stacks.entry(id).or_insert_with(|| frames.to_vec());
        id
    }
}

fn frames(ips: &[u64], n: u32) -> &[u64] {
    let n = (n as usize).min(ips.len());
    let used = ips[..n].iter().take_while(|&&ip| ip != 0).count();
    &ips[..used]
}

fn sites(ebpf: &Ebpf) -> Result<Array<&MapData, SlowSite>> {
    Ok(Array::try_from(
        ebpf.map(map::SLOW_SITES).context("no map SLOW_SITES")?,
    )?)
}

/// Every site given out, on every CPU, with its waits so far.
pub(crate) fn read(ebpf: &Ebpf) -> Result<SlowWaits> {
    let sites = sites(ebpf)?;
    let mut out = SlowWaits::default();
    for i in 0..sites.len() {
        let s = sites.get(&i, 0)?;
        if s.hash != 0 && s.waits.count > 0 {
            out.add(&s);
        }
    }
    Ok(out)
}

/// The processes that hold sites (`-a`, a set: 0 for a single target's).
pub(crate) fn tgids(ebpf: &Ebpf) -> Result<Vec<u32>> {
    let sites = sites(ebpf)?;
    let mut out = Vec::new();
    for i in 0..sites.len() {
        let s = sites.get(&i, 0)?;
        if s.hash != 0 {
            out.push(s.tgid);
        }
    }
    Ok(out)
}

/// Reads and frees the sites of the processes `tgids`, which ended: no wait is added to them
/// any more, so each is read, then written free, one element at a time (the other CPUs'
/// elements are theirs to write meanwhile).
pub(crate) fn take(ebpf: &mut Ebpf, tgids: &BTreeSet<u32>) -> Result<SlowWaits> {
    let mut out = SlowWaits::default();
    let gone: Vec<u32> = {
        let sites = sites(ebpf)?;
        let mut gone = Vec::new();
        for i in 0..sites.len() {
            let s = sites.get(&i, 0)?;
            if s.hash != 0 && s.tgid != 0 && tgids.contains(&s.tgid) {
                if s.waits.count > 0 {
                    out.add(&s);
                }
                gone.push(i);
            }
        }
        gone
    };
    let mut sites: Array<_, SlowSite> =
        Array::try_from(ebpf.map_mut(map::SLOW_SITES).context("no map SLOW_SITES")?)?;
    for i in gone {
        sites.set(i, SlowSite::default(), 0)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sites_stacks_keep_their_ids_and_frames() {
        let mut s = SlowSite {
            hash: 1,
            kernel_frames: 3,
            ..SlowSite::default()
        };
        s.kernel[..3].copy_from_slice(&[1, 2, 3]);
        s.waits.count = 2;
        s.waits.total_ns = 10;
        let mut a = SlowWaits::default();
        a.add(&s);
        a.add(&s);
        assert_eq!(a.contention.len(), 1);
        let (key, c) = a.contention.iter().next().unwrap();
        assert_eq!(c.count, 4);
        assert!(key.kernel_stack >= FIRST_ID as i32);
        assert_eq!(key.user_stack, -1);
        assert_eq!(a.stacks[&key.kernel_stack], vec![1, 2, 3]);
    }
}
