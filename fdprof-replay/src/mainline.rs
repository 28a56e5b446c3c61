//! The kernel's own allocator (`alloc_fd` in fs/file.c), by the version of its search.

use crate::bitmap::{self, find_next_zero_bit};
use crate::cost::{Array, Meter};
use crate::model::{AtLimit, Errno, Fdt, Limits, Model, table_size};
use serde::{Deserialize, Serialize};

/// How `alloc_fd` searches the open bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Version {
    /// Up to 4.3: one linear scan of the open bitmap.
    Linear,
    /// 4.4 to 6.12: the full-words bitmap first, then one open word.
    Fb61,
    /// 6.13 on: the word at the start tried first, then as 4.4.
    Fb613,
}

impl Version {
    /// The version a kernel release string ("6.1.0-18-amd64", "4.19.0") runs.
    pub fn for_kernel(release: &str) -> Option<Version> {
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Some(match (major, minor) {
            (..=3, _) | (4, ..=3) => Version::Linear,
            (4..=5, _) | (6, ..=12) => Version::Fb61,
            _ => Version::Fb613,
        })
    }

    fn at_limit(self) -> AtLimit {
        if self == Version::Fb613 {
            AtLimit::RoundDown
        } else {
            AtLimit::RoundUp
        }
    }
}

/// One table under the mainline allocator: the shared state plus the full-words bitmap (`F`,
/// bit w set exactly when open word w is all ones; unused by `Linear`).
#[derive(Clone, Debug)]
pub struct Mainline {
    pub version: Version,
    limits: Limits,
    fdt: Fdt,
    full: Vec<u64>,
    expansions: Vec<u64>,
}

impl Mainline {
    pub fn new(version: Version, limits: Limits) -> Mainline {
        Mainline {
            version,
            limits,
            fdt: Fdt::empty(),
            full: vec![0],
            expansions: Vec::new(),
        }
    }

    fn full_of(fdt: &Fdt) -> Vec<u64> {
        let mut full = vec![0; fdt.words().div_ceil(64).max(1) as usize];
        for (w, &o) in fdt.open.iter().take(fdt.words() as usize).enumerate() {
            if o == !0 {
                bitmap::set(&mut full, w as u64);
            }
        }
        full
    }

    /// The first free fd ≥ s (s < max_fds), or `max_fds`.
    #[inline]
    pub(crate) fn find(&self, s: u64, m: &mut Meter) -> u64 {
        let max = self.fdt.max_fds;
        let open = &self.fdt.open;
        if self.version == Version::Fb613 {
            let w = s / 64;
            let t = !open[w as usize] & (!0u64 << (s % 64));
            m.read(Array::Open, w, w);
            if t != 0 {
                return w * 64 + u64::from(t.trailing_zeros());
            }
        }
        if self.version == Version::Linear {
            return find_next_zero_bit(open, max, s, Array::Open, m);
        }
        let b = find_next_zero_bit(&self.full, max / 64, s / 64, Array::Full, m) * 64;
        if b >= max {
            return max;
        }
        find_next_zero_bit(open, max, s.max(b), Array::Open, m)
    }

    pub(crate) fn grow(&mut self, fd: u64) -> Result<(), Errno> {
        let n = table_size(fd, &self.limits, self.version.at_limit())?;
        self.fdt.resize(n, 1);
        self.full.resize((n / 64).div_ceil(64) as usize, 0);
        self.expansions.push(n);
        Ok(())
    }

    /// Marks `fd` (< max_fds, free) open with its close-on-exec bit, as alloc does.
    #[inline]
    pub(crate) fn take(&mut self, fd: u64, cloexec: bool, m: &mut Meter) {
        let w = fd / 64;
        bitmap::set(&mut self.fdt.open, fd);
        m.write(Array::Open, w);
        if self.version != Version::Linear
            && self.fdt.open[w as usize] == !0
            && bitmap::set(&mut self.full, w)
        {
            m.write(Array::Full, w / 64);
        }
        if cloexec {
            bitmap::set(&mut self.fdt.cloexec, fd);
            m.write_cloexec(1);
        } else if self.version == Version::Linear {
            bitmap::clear(&mut self.fdt.cloexec, fd);
            m.write_cloexec(1);
        } else {
            m.read_cloexec(1);
            if bitmap::clear(&mut self.fdt.cloexec, fd) {
                m.write_cloexec(1);
            }
        }
        if self.version != Version::Fb613 {
            m.pointers(1);
        }
    }

    pub(crate) fn alloc_in(
        &mut self,
        start: u64,
        cloexec: bool,
        m: &mut Meter,
    ) -> Result<u64, Errno> {
        loop {
            let s = start.max(self.fdt.next_fd);
            let fd = if s < self.fdt.max_fds {
                self.find(s, m)
            } else {
                s
            };
            if fd >= self.limits.rlimit {
                return Err(Errno::Emfile);
            }
            if fd >= self.fdt.max_fds {
                self.grow(fd)?;
                continue;
            }
            if start <= self.fdt.next_fd {
                self.fdt.next_fd = fd + 1;
            }
            self.take(fd, cloexec, m);
            return Ok(fd);
        }
    }
}

impl Model for Mainline {
    fn alloc(&mut self, start: u64, cloexec: bool, m: &mut Meter) -> Result<u64, Errno> {
        self.alloc_in(start, cloexec, m)
    }

    fn release(&mut self, fd: u64, m: &mut Meter) -> Result<(), Errno> {
        if !self.fdt.is_open(fd) {
            return Err(Errno::Ebadf);
        }
        let w = fd / 64;
        bitmap::clear(&mut self.fdt.open, fd);
        m.write(Array::Open, w);
        match self.version {
            Version::Linear => {}
            Version::Fb61 => {
                bitmap::clear(&mut self.full, w);
                m.write(Array::Full, w / 64);
            }
            Version::Fb613 => {
                m.read(Array::Full, w / 64, w / 64);
                if bitmap::clear(&mut self.full, w) {
                    m.write(Array::Full, w / 64);
                }
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
        let w = fd / 64;
        if bitmap::set(&mut self.fdt.open, fd) {
            m.write(Array::Open, w);
        }
        if self.version != Version::Linear
            && self.fdt.open[w as usize] == !0
            && bitmap::set(&mut self.full, w)
        {
            m.write(Array::Full, w / 64);
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

    fn with_fdt(&self, fdt: Fdt) -> Mainline {
        let full = Mainline::full_of(&fdt);
        Mainline {
            version: self.version,
            limits: self.limits,
            fdt,
            full,
            expansions: Vec::new(),
        }
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn expansions(&self) -> &[u64] {
        &self.expansions
    }
}

/// dup2's close-on-exec update: set by the flag, a clear only written when the bit was set.
pub(crate) fn set_cloexec_flag(c: &mut [u64], fd: u64, cloexec: bool, m: &mut Meter) {
    if cloexec {
        if bitmap::set(c, fd) {
            m.write_cloexec(1);
        }
    } else {
        m.read_cloexec(1);
        if bitmap::clear(c, fd) {
            m.write_cloexec(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_by_release() {
        assert_eq!(Version::for_kernel("6.1.0-18-amd64"), Some(Version::Fb61));
        assert_eq!(Version::for_kernel("6.12.9"), Some(Version::Fb61));
        assert_eq!(Version::for_kernel("6.13.0-rc1"), Some(Version::Fb613));
        assert_eq!(Version::for_kernel("6.18.0"), Some(Version::Fb613));
        assert_eq!(Version::for_kernel("7.0"), Some(Version::Fb613));
        assert_eq!(Version::for_kernel("4.4.0"), Some(Version::Fb61));
        assert_eq!(Version::for_kernel("4.3.6"), Some(Version::Linear));
        assert_eq!(
            Version::for_kernel("3.10.0-1160.el7"),
            Some(Version::Linear)
        );
        assert_eq!(Version::for_kernel("5.10.0"), Some(Version::Fb61));
        assert_eq!(Version::for_kernel("garbage"), None);
    }
}
