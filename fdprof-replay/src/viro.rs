//! Al Viro's multi-level bitmap: the open bitmap (level 0) cut into 512-bit chunks (one cache
//! line each), with summary levels above it where bit j says "chunk j below is all ones".
//! Tables of at most 512 fds stay flat and search like the linear allocator.

use crate::bitmap::{self, find_next_zero_bit};
use crate::cost::{Array, Meter};
use crate::mainline::set_cloexec_flag;
use crate::model::{AtLimit, Errno, Fdt, Limits, Model, table_size};

const CHUNK: u64 = 512;
const CHUNK_WORDS: u64 = CHUNK / 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// A zero bit.
    Hit(u64),
    /// A zero bit that is the chunk's last one (level 0 only).
    LastFree(u64),
    /// None in the chunk; the chunk's end.
    NoFree(u64),
}

#[derive(Clone, Debug)]
pub struct Viro {
    limits: Limits,
    fdt: Fdt,
    /// Levels 1.. (empty while flat), each padded to whole chunks.
    summary: Vec<Vec<u64>>,
    /// Meaningful bits per level, level 0 first.
    cnt: Vec<u64>,
    expansions: Vec<u64>,
}

fn array(k: usize) -> Array {
    if k == 0 {
        Array::Open
    } else {
        Array::Level(k as u8)
    }
}

impl Viro {
    pub fn new(limits: Limits) -> Viro {
        let mut v = Viro {
            limits,
            fdt: Fdt::empty(),
            summary: Vec::new(),
            cnt: Vec::new(),
            expansions: Vec::new(),
        };
        v.relayout();
        v
    }

    /// Number of summary levels (0 while flat).
    pub fn levels(&self) -> usize {
        self.summary.len()
    }

    fn flat(&self) -> bool {
        self.fdt.max_fds <= CHUNK
    }

    fn level(&self, k: usize) -> &[u64] {
        if k == 0 {
            &self.fdt.open
        } else {
            &self.summary[k - 1]
        }
    }

    /// Rebuilds the summaries from the open bitmap (a growth or a new table: not charged).
    fn relayout(&mut self) {
        let max = self.fdt.max_fds;
        self.fdt
            .resize(max, if max <= CHUNK { 1 } else { CHUNK_WORDS });
        self.summary.clear();
        self.cnt = vec![max];
        if max <= CHUNK {
            return;
        }
        while *self.cnt.last().unwrap() > CHUNK {
            let below = self.level(self.cnt.len() - 1);
            let cnt = self.cnt.last().unwrap().div_ceil(CHUNK);
            let mut above = vec![0u64; cnt.div_ceil(CHUNK) as usize * CHUNK_WORDS as usize];
            for (j, chunk) in below.chunks(CHUNK_WORDS as usize).enumerate() {
                if chunk.iter().all(|&w| w == !0) {
                    bitmap::set(&mut above, j as u64);
                }
            }
            self.summary.push(above);
            self.cnt.push(cnt);
        }
    }

    fn grow(&mut self, fd: u64) -> Result<(), Errno> {
        let n = table_size(fd, &self.limits, AtLimit::RoundDown)?;
        self.fdt.max_fds = n;
        self.relayout();
        self.expansions.push(n);
        Ok(())
    }

    fn scan(&self, k: usize, from: u64, m: &mut Meter) -> Scan {
        let words = self.level(k);
        let end_word = (from / CHUNK + 1) * CHUNK_WORDS;
        let first = from / 64;
        let mut i = first;
        let mut t = !words[i as usize] & (!0u64 << (from % 64));
        while t == 0 {
            i += 1;
            if i == end_word {
                m.read(array(k), first, i - 1);
                return Scan::NoFree(end_word * 64);
            }
            t = !words[i as usize];
        }
        m.read(array(k), first, i);
        let pos = i * 64 + u64::from(t.trailing_zeros());
        if k > 0 || (words[i as usize] | (1 << (pos % 64))) != !0 {
            return Scan::Hit(pos);
        }
        // The hit fills its word: is it the chunk's last free bit?
        for j in i + 1..end_word {
            m.read(Array::Open, j, j);
            if words[j as usize] != !0 {
                return Scan::Hit(pos);
            }
        }
        Scan::LastFree(pos)
    }

    /// After `fd`'s word filled: mark each chunk that is now full one level up.
    fn propagate(&mut self, fd: u64, m: &mut Meter) {
        let mut idx = fd;
        for k in 0..self.summary.len() {
            let chunk = idx / CHUNK;
            let start = chunk * CHUNK_WORDS;
            let words = self.level(k);
            let mut j = start;
            let full = loop {
                let w = words[j as usize];
                if w != !0 || j + 1 == start + CHUNK_WORDS {
                    break w == !0;
                }
                j += 1;
            };
            m.read(array(k), start, j);
            if !full {
                return;
            }
            if bitmap::set(&mut self.summary[k], chunk) {
                m.write(array(k + 1), chunk / 64);
            }
            idx = chunk;
        }
    }

    /// The free fd ≥ s the levels lead to, `Ok(None)` when the table must grow first.
    fn search(&self, s: u64, m: &mut Meter) -> Option<Scan> {
        let mut k = 0;
        let mut r = self.scan(0, s, m);
        loop {
            match r {
                Scan::NoFree(end) => {
                    if end >= self.cnt[k] || k == self.summary.len() {
                        return None;
                    }
                    k += 1;
                    r = self.scan(k, end / CHUNK, m);
                }
                Scan::Hit(pos) | Scan::LastFree(pos) => {
                    if pos >= self.cnt[k] {
                        return None;
                    }
                    if k == 0 {
                        return Some(r);
                    }
                    k -= 1;
                    r = self.scan(k, pos * CHUNK, m);
                }
            }
        }
    }
}

impl Model for Viro {
    fn alloc(&mut self, start: u64, cloexec: bool, m: &mut Meter) -> Result<u64, Errno> {
        let (fd, last_free) = loop {
            let s = start.max(self.fdt.next_fd);
            let max = self.fdt.max_fds;
            if s >= max {
                if s >= self.limits.rlimit {
                    return Err(Errno::Emfile);
                }
                self.grow(s)?;
                continue;
            }
            let found = if self.flat() {
                let fd = find_next_zero_bit(&self.fdt.open, max, s, Array::Open, m);
                (fd < max).then_some(Scan::Hit(fd))
            } else {
                self.search(s, m)
            };
            match found {
                Some(Scan::Hit(fd)) => break (fd, false),
                Some(Scan::LastFree(fd)) => break (fd, true),
                _ => {
                    if max >= self.limits.rlimit {
                        return Err(Errno::Emfile);
                    }
                    self.grow(max)?;
                }
            }
        };
        if fd >= self.limits.rlimit {
            return Err(Errno::Emfile);
        }
        if start <= self.fdt.next_fd {
            self.fdt.next_fd = fd + 1;
        }
        bitmap::set(&mut self.fdt.open, fd);
        m.write(Array::Open, fd / 64);
        if last_free {
            self.propagate(fd, m);
        }
        m.read_cloexec(u64::from(!cloexec));
        if cloexec {
            bitmap::set(&mut self.fdt.cloexec, fd);
            m.write_cloexec(1);
        } else if bitmap::clear(&mut self.fdt.cloexec, fd) {
            m.write_cloexec(1);
        }
        m.pointers(1);
        Ok(fd)
    }

    fn release(&mut self, fd: u64, m: &mut Meter) -> Result<(), Errno> {
        if !self.fdt.is_open(fd) {
            return Err(Errno::Ebadf);
        }
        let was_full = self.fdt.open[(fd / 64) as usize] == !0;
        bitmap::clear(&mut self.fdt.open, fd);
        m.write(Array::Open, fd / 64);
        if was_full {
            let mut idx = fd;
            for k in 1..=self.summary.len() {
                idx /= CHUNK;
                m.read(array(k), idx / 64, idx / 64);
                if !bitmap::clear(&mut self.summary[k - 1], idx) {
                    break;
                }
                m.write(array(k), idx / 64);
            }
        }
        self.fdt.next_fd = self.fdt.next_fd.min(fd);
        Ok(())
    }

    fn install_at(&mut self, fd: u64, cloexec: bool, m: &mut Meter) -> Result<(), Errno> {
        if fd >= self.limits.rlimit {
            return Err(Errno::Ebadf);
        }
        if fd >= self.fdt.max_fds {
            self.grow(fd)?;
        }
        if bitmap::set(&mut self.fdt.open, fd) {
            m.write(Array::Open, fd / 64);
            if self.fdt.open[(fd / 64) as usize] == !0 {
                self.propagate(fd, m);
            }
        }
        set_cloexec_flag(&mut self.fdt.cloexec, fd, cloexec, m);
        Ok(())
    }

    fn fdt(&self) -> &Fdt {
        &self.fdt
    }

    fn cloexec_mut(&mut self) -> &mut Vec<u64> {
        &mut self.fdt.cloexec
    }

    fn with_fdt(&self, fdt: Fdt) -> Viro {
        let mut v = Viro {
            limits: self.limits,
            fdt,
            summary: Vec::new(),
            cnt: Vec::new(),
            expansions: Vec::new(),
        };
        v.relayout();
        v
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn expansions(&self) -> &[u64] {
        &self.expansions
    }
}
