//! Traces of the seeds' patterns, generated without a kernel. Deterministic for a seed.

/// splitmix64: small, seeded, good enough for draws and generators.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

use std::collections::BTreeSet;

use crate::event::{Snapshot, TraceEvent, TraceOp};

/// The seeds' load patterns (the same ops as `fdprof workload`'s scenarios of those names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Linus Torvalds' loop: fds 0..2 open; op = close(3) + dup2(0, 3) + dup(0), so every dup
    /// scans from 3 to the top of an ever larger table. `fds` is unused.
    LinusLoop,
    /// Eric Dumazet's opensock: stdio plus `fds` sockets held by `threads` threads; op = one
    /// thread's close of a random fd it holds, later (other threads' ops interleaved) its
    /// socket(), which gets the lowest free fd.
    Opensock,
    /// fds 0..N-1 open; op = close(hole) + open → hole + open → N + close(N).
    Holes,
    /// fds 0..N-1 open; op = close(hole) + dup2(0, hole) + dup(0) → N + close(N).
    Dup2Worst,
}

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// N: fds held.
    pub fds: u32,
    /// K: ops.
    pub ops: u64,
    pub threads: u32,
    /// The fd the hole patterns close (default 3).
    pub hole: u32,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            fds: 1000,
            ops: 1000,
            threads: 1,
            hole: 3,
            seed: 1,
        }
    }
}

/// The trace one table (id 1) would show: a snapshot at attach, then the ops, with the fds a
/// POSIX kernel returns.
pub fn generate(pattern: Pattern, p: &Params) -> Vec<TraceEvent> {
    let mut g = Gen {
        events: Vec::new(),
        time: 0,
        free: BTreeSet::new(),
        top: 0,
        tid: 1,
    };
    match pattern {
        Pattern::LinusLoop => {
            g.attach(3);
            for i in 0..p.ops {
                if i > 0 {
                    g.release(3);
                }
                g.install(3);
                g.alloc();
            }
        }
        Pattern::Opensock => opensock(&mut g, p),
        Pattern::Holes | Pattern::Dup2Worst => {
            let n = p.fds.max(p.hole + 1);
            g.attach(n);
            for _ in 0..p.ops {
                g.release(p.hole);
                if pattern == Pattern::Holes {
                    g.alloc();
                } else {
                    g.install(p.hole);
                }
                let top = g.alloc();
                g.release(top);
            }
        }
    }
    g.events
}

fn opensock(g: &mut Gen, p: &Params) {
    let threads = p.threads.max(1) as usize;
    let sockets = p.fds.max(threads as u32);
    g.attach(3 + sockets);
    let mut rng = Rng::new(p.seed);
    // Each thread's fds, and whether it has closed one and not yet reopened.
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); threads];
    for s in 0..sockets {
        held[s as usize % threads].push(3 + s);
    }
    let mut pending = vec![false; threads];
    let mut done = 0;
    while done < p.ops {
        let t = rng.below(threads as u64) as usize;
        g.tid = 1 + t as u32;
        if pending[t] {
            let fd = g.alloc();
            held[t].push(fd);
            pending[t] = false;
            done += 1;
        } else {
            let k = rng.below(held[t].len() as u64) as usize;
            let fd = held[t].swap_remove(k);
            g.release(fd);
            pending[t] = true;
        }
    }
}

/// A reference POSIX table: the fds a kernel returns.
struct Gen {
    events: Vec<TraceEvent>,
    time: u64,
    /// Free fds below `top`; every fd ≥ top is free.
    free: BTreeSet<u32>,
    top: u32,
    tid: u32,
}

impl Gen {
    fn push(&mut self, op: TraceOp) {
        self.time += 1;
        self.events.push(TraceEvent {
            time_ns: self.time,
            tid: self.tid,
            table: 1,
            op,
        });
    }

    fn attach(&mut self, n: u32) {
        let words = (n as usize).div_ceil(64).max(1);
        let max_fds = (words as u32 * 64).next_power_of_two();
        let mut open = vec![0u64; max_fds as usize / 64];
        for fd in 0..n {
            open[fd as usize / 64] |= 1 << (fd % 64);
        }
        let cloexec = vec![0; open.len()];
        self.top = n;
        self.push(TraceOp::Snapshot(Box::new(Snapshot {
            open,
            cloexec,
            next_fd: n,
            max_fds,
        })));
    }

    fn alloc(&mut self) -> u32 {
        let fd = match self.free.pop_first() {
            Some(fd) => fd,
            None => {
                self.top += 1;
                self.top - 1
            }
        };
        self.push(TraceOp::Alloc {
            start: 0,
            cloexec: false,
            fd: Ok(fd),
            ambiguous: false,
        });
        fd
    }

    fn release(&mut self, fd: u32) {
        if fd + 1 == self.top {
            self.top -= 1;
            while self.top > 0 && self.free.remove(&(self.top - 1)) {
                self.top -= 1;
            }
        } else {
            self.free.insert(fd);
        }
        self.push(TraceOp::Release { fd });
    }

    fn install(&mut self, fd: u32) {
        if fd >= self.top {
            self.free.extend(self.top..fd);
            self.top = fd + 1;
        } else {
            self.free.remove(&fd);
        }
        self.push(TraceOp::InstallAt { fd, cloexec: false });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocs(trace: &[TraceEvent]) -> Vec<u32> {
        trace
            .iter()
            .filter_map(|e| match e.op {
                TraceOp::Alloc { fd: Ok(fd), .. } => Some(fd),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn patterns_return_what_a_posix_kernel_would() {
        let p = Params {
            fds: 10,
            ops: 3,
            ..Params::default()
        };
        assert_eq!(allocs(&generate(Pattern::LinusLoop, &p)), [4, 5, 6]);
        assert_eq!(allocs(&generate(Pattern::Holes, &p)), [3, 10, 3, 10, 3, 10]);
        assert_eq!(allocs(&generate(Pattern::Dup2Worst, &p)), [10, 10, 10]);
        let sock = generate(
            Pattern::Opensock,
            &Params {
                fds: 100,
                ops: 500,
                threads: 4,
                ..p
            },
        );
        assert_eq!(allocs(&sock).len(), 500);
        assert!(allocs(&sock).iter().all(|&fd| (3..103).contains(&fd)));
    }
}
