//! Which simulated fd stands for which traced fd, for models that do not return the fds the
//! program got. Mostly the identity, so that is a bitmap; the rest are two hash maps.

use std::collections::{HashMap, HashSet};

use crate::bitmap;
use crate::model::Fdt;

#[derive(Clone, Debug, Default)]
pub struct FdMap {
    /// Traced fds mapped to the same simulated fd.
    identity: Vec<u64>,
    to_sim: HashMap<u32, u32>,
    to_traced: HashMap<u32, u32>,
    /// Traced fds dropped by a collision: their later close is stale.
    pub stale: HashSet<u32>,
}

impl FdMap {
    /// Every open fd of `fdt` maps to itself.
    pub fn identity(fdt: &Fdt) -> FdMap {
        FdMap {
            identity: fdt.open[..fdt.words() as usize].to_vec(),
            ..FdMap::default()
        }
    }

    pub fn sim(&self, traced: u32) -> Option<u32> {
        if bitmap::test(&self.identity, u64::from(traced)) {
            return Some(traced);
        }
        self.to_sim.get(&traced).copied()
    }

    pub fn traced(&self, sim: u32) -> Option<u32> {
        if bitmap::test(&self.identity, u64::from(sim)) {
            return Some(sim);
        }
        self.to_traced.get(&sim).copied()
    }

    pub fn insert(&mut self, traced: u32, sim: u32) {
        if traced == sim {
            let need = traced as usize / 64 + 1;
            if self.identity.len() < need {
                self.identity.resize(need, 0);
            }
            bitmap::set(&mut self.identity, u64::from(traced));
        } else {
            self.to_sim.insert(traced, sim);
            self.to_traced.insert(sim, traced);
        }
    }

    /// Forgets `traced`, returning the simulated fd it had.
    pub fn remove(&mut self, traced: u32) -> Option<u32> {
        if bitmap::test(&self.identity, u64::from(traced)) {
            bitmap::clear(&mut self.identity, u64::from(traced));
            return Some(traced);
        }
        let sim = self.to_sim.remove(&traced)?;
        self.to_traced.remove(&sim);
        Some(sim)
    }

    /// The traced fds in `[lo, hi]` that map to themselves, among the 64 of word `w` of the
    /// identity bitmap (none past its end).
    pub fn identical_in(&self, w: u64, lo: u32, hi: u32) -> impl Iterator<Item = u32> + '_ {
        let (lo, hi) = (u64::from(lo).max(w * 64), u64::from(hi).min(w * 64 + 63));
        bitmap::set_bits(&self.identity, lo, hi).map(|fd| fd as u32)
    }

    /// Its words and entries: what walking all of it visits.
    pub fn size(&self) -> u64 {
        (self.identity.len() + self.to_sim.len() + self.stale.len()) as u64
    }

    /// How many words the identity bitmap has.
    pub fn identity_words(&self) -> u64 {
        self.identity.len() as u64
    }

    /// The traced fds in `[lo, hi]` that map to another fd.
    pub fn moved_in(&self, lo: u32, hi: u32) -> Vec<u32> {
        let in_range = |&u: &u32| u >= lo && u <= hi;
        self.to_sim.keys().copied().filter(in_range).collect()
    }

    /// Drops the traced fds whose simulated fd is no longer open.
    pub fn retain_open(&mut self, fdt: &Fdt) {
        for (i, w) in self.identity.iter_mut().enumerate() {
            *w &= fdt.open.get(i).copied().unwrap_or(0);
        }
        let gone: Vec<u32> = self
            .to_sim
            .iter()
            .filter(|&(_, &s)| !fdt.is_open(u64::from(s)))
            .map(|(&u, _)| u)
            .collect();
        for u in gone {
            self.remove(u);
        }
    }
}
