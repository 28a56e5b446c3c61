//! The per-operation cost counters and the cache-line tracking behind them.
//!
//! A line is 8 words (64 bytes) of one bitmap. Lines are counted for the search bitmaps (open,
//! full, and the multi-level summaries); close-on-exec words and fd pointers have counters of
//! their own but no lines, which is what the hand-checked line figures assume.

use serde::{Deserialize, Serialize};

/// Which bitmap a word belongs to, for reads and lines. `Level(k)` is a summary level (k ≥ 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Array {
    Open,
    Full,
    Level(u8),
}

impl Array {
    fn tag(self) -> u64 {
        match self {
            Array::Open => 0,
            Array::Full => 1,
            Array::Level(k) => 1 + u64::from(k),
        }
    }
}

/// What one operation cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Open-bitmap words loaded (level 0 of a multi-level bitmap).
    pub o_rd: u64,
    /// Full-words bitmap words loaded.
    pub f_rd: u64,
    /// Summary-level words loaded (multi-level bitmap, levels ≥ 1).
    pub lk_rd: u64,
    /// Close-on-exec words loaded.
    pub c_rd: u64,
    /// Words written.
    pub wr: u64,
    /// fd-pointer slots loaded.
    pub ptr: u64,
    /// Distinct lines of the search bitmaps read or written.
    pub lines: u64,
    /// Distinct lines of the search bitmaps written.
    pub dirty: u64,
}

impl Cost {
    pub const FIELDS: [&'static str; 8] = [
        "o_rd", "f_rd", "lk_rd", "c_rd", "wr", "ptr", "lines", "dirty",
    ];

    pub fn values(&self) -> [u64; 8] {
        [
            self.o_rd, self.f_rd, self.lk_rd, self.c_rd, self.wr, self.ptr, self.lines, self.dirty,
        ]
    }

    pub fn add(&mut self, o: &Cost) {
        self.o_rd += o.o_rd;
        self.f_rd += o.f_rd;
        self.lk_rd += o.lk_rd;
        self.c_rd += o.c_rd;
        self.wr += o.wr;
        self.ptr += o.ptr;
        self.lines += o.lines;
        self.dirty += o.dirty;
    }
}

/// Accumulates the cost of the operation under way; `take` closes it.
#[derive(Debug, Default, Clone)]
pub struct Meter {
    cost: Cost,
    touched: Lines,
    written: Lines,
    /// Words and slots charged since the meter was made, `take` or not: the work a replay
    /// has done (what `fdprof_recording::budget::Work` bounds).
    work: u64,
}

/// A line's id: the array's tag above the line number.
fn line_id(array: Array, word: u64) -> u64 {
    array.tag() << 56 | (word >> 3)
}

/// The lines an operation touched: single lines kept distinct as they come (an operation seldom
/// touches more than three), spans of several lines merged when it ends.
#[derive(Debug, Default, Clone)]
struct Lines {
    single: [u64; 6],
    n: usize,
    spans: Vec<(u64, u64)>,
}

impl Lines {
    #[inline(always)]
    fn add(&mut self, lo: u64, hi: u64) {
        if lo == hi {
            if self.single[..self.n].contains(&lo) {
                return;
            }
            if self.n < self.single.len() {
                self.single[self.n] = lo;
                self.n += 1;
                return;
            }
        }
        self.spans.push((lo, hi));
    }

    /// The distinct lines, and empty again.
    #[inline(always)]
    fn drain_count(&mut self) -> u64 {
        let n = std::mem::take(&mut self.n);
        if self.spans.is_empty() {
            return n as u64;
        }
        self.spans
            .extend(self.single[..n].iter().map(|&id| (id, id)));
        let lines = distinct(&mut self.spans);
        self.spans.clear();
        lines
    }
}

impl Meter {
    /// Words `first..=last` of `array` were loaded.
    #[inline(always)]
    pub fn read(&mut self, array: Array, first: u64, last: u64) {
        let n = last - first + 1;
        self.work += n;
        match array {
            Array::Open => self.cost.o_rd += n,
            Array::Full => self.cost.f_rd += n,
            Array::Level(_) => self.cost.lk_rd += n,
        }
        self.touched
            .add(line_id(array, first), line_id(array, last));
    }

    #[inline(always)]
    pub fn write(&mut self, array: Array, word: u64) {
        self.cost.wr += 1;
        self.work += 1;
        let id = line_id(array, word);
        self.touched.add(id, id);
        self.written.add(id, id);
    }

    #[inline(always)]
    pub fn read_cloexec(&mut self, words: u64) {
        self.cost.c_rd += words;
        self.work += words;
    }

    #[inline(always)]
    pub fn write_cloexec(&mut self, words: u64) {
        self.cost.wr += words;
        self.work += words;
    }

    #[inline(always)]
    pub fn pointers(&mut self, slots: u64) {
        self.cost.ptr += slots;
        self.work += slots;
    }

    /// Every word and slot charged so far.
    pub fn work(&self) -> u64 {
        self.work
    }

    /// The operation's cost, with its lines counted; the meter is empty again.
    #[inline(always)]
    pub fn take(&mut self) -> Cost {
        let mut c = std::mem::take(&mut self.cost);
        c.lines = self.touched.drain_count();
        c.dirty = self.written.drain_count();
        c
    }
}

#[inline]
fn distinct(spans: &mut [(u64, u64)]) -> u64 {
    match *spans {
        [] => 0,
        [(lo, hi)] => hi - lo + 1,
        [(a, b), (c, d)] if b < c || d < a => (b - a + 1) + (d - c + 1),
        _ => {
            spans.sort_unstable();
            let (mut lo, mut hi) = spans[0];
            let mut n = 0;
            for &(a, b) in &spans[1..] {
                if a > hi + 1 {
                    n += hi - lo + 1;
                    (lo, hi) = (a, b);
                } else {
                    hi = hi.max(b);
                }
            }
            n + hi - lo + 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_distinct_per_array() {
        let mut m = Meter::default();
        m.read(Array::Open, 0, 15);
        m.read(Array::Open, 3, 3);
        m.read(Array::Full, 0, 0);
        m.write(Array::Open, 15);
        m.write_cloexec(1);
        let c = m.take();
        assert_eq!((c.o_rd, c.f_rd, c.wr, c.lines, c.dirty), (17, 1, 2, 3, 1));
        assert_eq!(m.take(), Cost::default());
    }
}
