//! Eric Dumazet's `O_FD_FASTALLOC` prototype: a flagged allocation searches from a random fd
//! up to the table's end and takes the first free one there, leaving `next_fd` alone; only if
//! that finds nothing does it fall back to the base allocator. Not POSIX: the fd returned is
//! usually not the lowest free one.

use std::collections::VecDeque;

use crate::bitmap::find_next_zero_bit;
use crate::cost::{Array, Meter};
use crate::mainline::{Mainline, Version};
use crate::model::{Errno, Fdt, Limits, Model};
use crate::synthetic::Rng;

#[derive(Clone, Debug)]
pub struct Fastalloc {
    base: Mainline,
    rng: Rng,
    /// Draws given in advance (tests): `Some(r)` a flagged alloc starting at r, `None` a plain
    /// one. While empty, every alloc with start 0 is flagged and r is drawn from `rng`.
    script: VecDeque<Option<u64>>,
}

impl Fastalloc {
    pub fn new(base: Version, limits: Limits, seed: u64) -> Fastalloc {
        Fastalloc {
            base: Mainline::new(base, limits),
            rng: Rng::new(seed),
            script: VecDeque::new(),
        }
    }

    /// Replays the given draws before drawing its own (a table made from this one, by a
    /// snapshot or a fork, starts with the same draws).
    pub fn scripted(mut self, draws: impl IntoIterator<Item = Option<u64>>) -> Fastalloc {
        self.script.extend(draws);
        self
    }

    /// A flagged allocation starting its search at `r` (taken as drawn, below the limit).
    pub fn alloc_from(
        &mut self,
        start: u64,
        r: u64,
        cloexec: bool,
        m: &mut Meter,
    ) -> Result<u64, Errno> {
        let limit = self.base.limits().rlimit.min(self.base.fdt().max_fds);
        let fd = find_next_zero_bit(&self.base.fdt().open, limit, r.max(start), Array::Open, m);
        if fd < limit {
            self.base.take(fd, cloexec, m);
            return Ok(fd);
        }
        self.base.alloc_in(start, cloexec, m)
    }
}

impl Model for Fastalloc {
    fn alloc(&mut self, start: u64, cloexec: bool, m: &mut Meter) -> Result<u64, Errno> {
        let draw = match self.script.pop_front() {
            Some(d) => d,
            None if start == 0 => {
                let limit = self.base.limits().rlimit.min(self.base.fdt().max_fds);
                Some((u64::from(self.rng.next_u32()) * limit) >> 32)
            }
            None => None,
        };
        match draw {
            Some(r) => self.alloc_from(start, r, cloexec, m),
            None => self.base.alloc_in(start, cloexec, m),
        }
    }

    fn release(&mut self, fd: u64, m: &mut Meter) -> Result<(), Errno> {
        self.base.release(fd, m)
    }

    fn install_at(&mut self, fd: u64, cloexec: bool, m: &mut Meter) -> Result<(), Errno> {
        self.base.install_at(fd, cloexec, m)
    }

    fn fdt(&self) -> &Fdt {
        self.base.fdt()
    }

    fn cloexec_mut(&mut self) -> &mut Vec<u64> {
        self.base.cloexec_mut()
    }

    fn with_fdt(&self, fdt: Fdt) -> Fastalloc {
        let mut rng = self.rng.clone();
        Fastalloc {
            base: self.base.with_fdt(fdt),
            rng: Rng::new(rng.next_u64()),
            script: self.script.clone(),
        }
    }

    fn limits(&self) -> &Limits {
        self.base.limits()
    }

    fn expansions(&self) -> &[u64] {
        self.base.expansions()
    }

    fn posix(&self) -> bool {
        false
    }
}
