//! What every allocator model shares: the table state, the limits, table sizing, and the
//! operations built on alloc/release/install (close_range, fork, exec, a snapshot).

use crate::bitmap;
use crate::cost::{Array, Meter};
use serde::{Deserialize, Serialize};

/// Why an operation failed, as the kernel would say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Errno {
    /// No fd below the limits (EMFILE).
    Emfile,
    /// The fd is not open or is beyond the limits (EBADF).
    Ebadf,
    /// A malformed argument (EINVAL), e.g. a snapshot larger than `nr_open`.
    Einval,
}

/// `RLIMIT_NOFILE` and `fs.nr_open`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub rlimit: u64,
    pub nr_open: u64,
}

/// The kernel's ceiling for `fs.nr_open` (INT_MAX rounded down to whole words).
pub const NR_OPEN_MAX: u64 = (i32::MAX as u64) & !63;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            rlimit: 1 << 20,
            nr_open: 1 << 20,
        }
    }
}

impl Limits {
    pub fn new(rlimit: u64, nr_open: u64) -> Limits {
        Limits {
            rlimit,
            nr_open: nr_open.clamp(64, NR_OPEN_MAX),
        }
    }
}

/// How a table size above `nr_open` is cut: up to whole words before 6.13, down from 6.13.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtLimit {
    RoundUp,
    RoundDown,
}

/// The size a table grows to so that it holds `fd`.
pub fn table_size(fd: u64, limits: &Limits, at_limit: AtLimit) -> Result<u64, Errno> {
    if fd >= limits.nr_open {
        return Err(Errno::Emfile);
    }
    let n = (fd + 1).next_power_of_two().max(64);
    if n <= limits.nr_open {
        return Ok(n);
    }
    let capped = match at_limit {
        AtLimit::RoundUp => ((limits.nr_open - 1) | 63) + 1,
        AtLimit::RoundDown => limits.nr_open & !63,
    };
    if capped <= fd {
        Err(Errno::Emfile)
    } else {
        Ok(capped)
    }
}

/// The state every model keeps: `open` may carry padding words beyond `max_fds / 64`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fdt {
    pub max_fds: u64,
    pub next_fd: u64,
    pub open: Vec<u64>,
    pub cloexec: Vec<u64>,
}

impl Fdt {
    pub fn empty() -> Fdt {
        Fdt {
            max_fds: 64,
            next_fd: 0,
            open: vec![0],
            cloexec: vec![0],
        }
    }

    pub fn words(&self) -> u64 {
        self.max_fds / 64
    }

    pub fn is_open(&self, fd: u64) -> bool {
        fd < self.max_fds && bitmap::test(&self.open, fd)
    }

    /// The lowest free fd ≥ start (uncharged), `max_fds` if none.
    pub fn lowest_free(&self, start: u64) -> u64 {
        bitmap::first_zero_from(&self.open, self.max_fds, start.max(self.next_fd))
    }

    /// Resizes the arrays to `max_fds` (growing or shrinking), padding `open` to `pad` words.
    pub fn resize(&mut self, max_fds: u64, pad: u64) {
        let words = (max_fds / 64) as usize;
        self.max_fds = max_fds;
        self.open
            .resize(words.div_ceil(pad as usize) * pad as usize, 0);
        self.open[words..].fill(0);
        self.cloexec.resize(words, 0);
    }

    /// A table from recorded bits: sizes rounded up to whole words, bits beyond `max_fds`
    /// dropped, and `next_fd` lowered until every fd below it is open (the allocator relies on
    /// that).
    pub fn from_bits(
        open: &[u64],
        cloexec: &[u64],
        next_fd: u64,
        max_fds: u64,
        limits: &Limits,
    ) -> Result<Fdt, Errno> {
        let max_fds = max_fds.max(64).div_ceil(64) * 64;
        if max_fds > limits.nr_open.div_ceil(64) * 64 {
            return Err(Errno::Einval);
        }
        let words = (max_fds / 64) as usize;
        let take = |v: &[u64]| {
            let mut w: Vec<u64> = v.iter().copied().take(words).collect();
            w.resize(words, 0);
            w
        };
        let mut t = Fdt {
            max_fds,
            next_fd: 0,
            open: take(open),
            cloexec: take(cloexec),
        };
        t.next_fd = bitmap::first_zero_from(&t.open, max_fds, 0).min(next_fd);
        Ok(t)
    }
}

/// One allocator over one table. The driver is generic over this, so each model is compiled
/// into its own loop.
pub trait Model: Clone {
    /// Allocates the lowest (or, for non-POSIX models, some) free fd ≥ start.
    fn alloc(&mut self, start: u64, cloexec: bool, m: &mut Meter) -> Result<u64, Errno>;
    /// Frees an open fd.
    fn release(&mut self, fd: u64, m: &mut Meter) -> Result<(), Errno>;
    /// Opens exactly `fd` (dup2/dup3), growing the table if needed; `next_fd` is kept.
    fn install_at(&mut self, fd: u64, cloexec: bool, m: &mut Meter) -> Result<(), Errno>;
    fn fdt(&self) -> &Fdt;
    /// Only close-on-exec bits may be changed through this.
    fn cloexec_mut(&mut self) -> &mut Vec<u64>;
    /// A table of the same model and limits holding `fdt` (a fork's child, a snapshot).
    fn with_fdt(&self, fdt: Fdt) -> Self;
    fn limits(&self) -> &Limits;
    /// The sizes this table grew to, in order.
    fn expansions(&self) -> &[u64];
    /// Whether the model returns the lowest free fd (POSIX).
    fn posix(&self) -> bool {
        true
    }
}

/// close_range(lo, hi, flags) on one table (any unsharing is the caller's fork).
pub fn close_range<M: Model>(
    t: &mut M,
    lo: u64,
    hi: u64,
    cloexec_only: bool,
    m: &mut Meter,
) -> Result<(), Errno> {
    if lo > hi {
        return Err(Errno::Einval);
    }
    let hi = hi.min(t.fdt().max_fds.saturating_sub(1));
    if lo > hi {
        return Ok(());
    }
    if cloexec_only {
        bitmap::set_range(t.cloexec_mut(), lo, hi);
        m.write_cloexec(hi / 64 - lo / 64 + 1);
        return Ok(());
    }
    m.pointers(hi - lo + 1);
    // A word at a time (releasing clears only the fd's own bit): a range over a table of
    // millions of open fds does not list them all first.
    let mut open = Vec::with_capacity(64);
    for w in lo / 64..=hi / 64 {
        open.clear();
        open.extend(bitmap::set_bits(
            &t.fdt().open,
            (w * 64).max(lo),
            (w * 64 + 63).min(hi),
        ));
        for &fd in &open {
            t.release(fd, m)?;
        }
    }
    Ok(())
}

/// dup_fd: the child's table. `count_open_files` reads the open words top-down to the highest
/// open fd; the child is sized to hold it and starts with `next_fd = 0`.
pub fn fork<M: Model>(t: &M, m: &mut Meter) -> M {
    let p = t.fdt();
    let words = p.words();
    let mut top = words;
    while top > 0 && p.open[(top - 1) as usize] == 0 {
        top -= 1;
    }
    let last_read = top.saturating_sub(1);
    if words > 0 {
        m.read(Array::Open, last_read, words - 1);
    }
    let n = top.max(1) * 64;
    let max_fds = if n <= 64 { 64 } else { n.next_power_of_two() };
    let mut child = Fdt {
        max_fds,
        next_fd: 0,
        open: p.open[..top as usize].to_vec(),
        cloexec: p.cloexec[..top as usize].to_vec(),
    };
    child.resize(max_fds, 1);
    t.with_fdt(child)
}

/// exec: every close-on-exec word is read; each nonzero one is zeroed and its open fds released.
pub fn exec<M: Model>(t: &mut M, m: &mut Meter) {
    let words = t.fdt().words();
    m.read_cloexec(words);
    for i in 0..words as usize {
        let set = t.cloexec_mut()[i];
        if set == 0 {
            continue;
        }
        t.cloexec_mut()[i] = 0;
        m.write_cloexec(1);
        let mut w = set;
        while w != 0 {
            let fd = i as u64 * 64 + u64::from(w.trailing_zeros());
            w &= w - 1;
            if t.fdt().is_open(fd) {
                let _ = t.release(fd, m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_powers_of_two_cut_at_nr_open() {
        let l = Limits::default();
        assert_eq!(table_size(0, &l, AtLimit::RoundUp), Ok(64));
        assert_eq!(table_size(64, &l, AtLimit::RoundUp), Ok(128));
        assert_eq!(
            table_size(
                10_000_000,
                &Limits::new(1 << 30, 1 << 28),
                AtLimit::RoundDown
            ),
            Ok(1 << 24)
        );
        assert_eq!(
            table_size(1 << 20, &l, AtLimit::RoundUp),
            Err(Errno::Emfile)
        );
        let odd = Limits::new(1 << 30, 1000);
        assert_eq!(table_size(900, &odd, AtLimit::RoundUp), Ok(1024));
        assert_eq!(table_size(900, &odd, AtLimit::RoundDown), Ok(960));
        assert_eq!(
            table_size(970, &odd, AtLimit::RoundDown),
            Err(Errno::Emfile)
        );
    }
}
