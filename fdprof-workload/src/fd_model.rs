//! A userland model of one fd table: the kernel's lowest-free-fd allocator (`alloc_fd` in
//! fs/file.c, with its `next_fd` search hint), close and dup2, and the table's size
//! (`fdt->max_fds`). The generator runs it beside the kernel to predict exactly what a
//! deterministic run does; it is public so other code can replay fd allocations with it.
//!
//! The kernel rules it follows (fs/file.c, same on 5.11–6.18 apart from function names):
//! - `alloc_fd(start)` looks for the lowest free fd at or above `origin = max(start, next_fd)`
//!   and, when `start <= next_fd`, sets `next_fd = fd + 1`. Every fd-creating system call except
//!   dup2/dup3 goes through it with `start = 0` (only `fcntl(F_DUPFD, start)` passes another).
//! - closing `fd`, or giving back an unused reservation, sets `next_fd = fd` if `fd < next_fd`.
//! - `dup2(old, new)` installs at `new` (closing what was there) and leaves `next_fd` alone.
//! - consequence: every fd below `next_fd` is open, so `next_fd` is never above the lowest free fd.
//!
//! Table size (`fdt->max_fds`): a fresh table is the `NR_OPEN_DEFAULT` = `BITS_PER_LONG` slots
//! embedded in `files_struct`; a fork's copy is sized from the parent's highest open fd. Whenever
//! an allocation or a dup2 target `fd` is `>= max_fds`, `expand_files(files, fd)` replaces the
//! table by one of `roundup_pow_of_two(fd + 1)` slots on 64-bit (6.13+: `alloc_fdtable(nr + 1)`
//! rounds `slots_wanted` up to a power of two; before: `nr /= 128; nr = roundup_pow_of_two(nr +
//! 1); nr *= 128`, which gives the same size for every fd >= 64). If that exceeds
//! `fs.nr_open`, the size is `fs.nr_open` rounded down to a multiple of `BITS_PER_LONG` (6.13+;
//! older kernels round up, the same for the default nr_open of 2^20). Tables never shrink.

/// Bits per bitmap word in the kernel's fd bitmaps (64-bit kernels).
pub const BITS_PER_LONG: u32 = 64;
/// Slots in the table embedded in every `files_struct`.
pub const NR_OPEN_DEFAULT: u32 = BITS_PER_LONG;

/// The size of the table the kernel allocates when it must expand to hold `fd`.
pub fn expanded_table_size(fd: u32, nr_open: u32) -> u32 {
    let wanted = u64::from(fd) + 1;
    let size = wanted.next_power_of_two().max(u64::from(NR_OPEN_DEFAULT));
    if size > u64::from(nr_open) {
        nr_open / BITS_PER_LONG * BITS_PER_LONG
    } else {
        size as u32
    }
}

/// The table size after `fd` was allocated or installed in a table of `current` slots.
pub fn table_size_after(current: u32, fd: u32, nr_open: u32) -> u32 {
    if fd < current {
        current
    } else {
        expanded_table_size(fd, nr_open).max(current)
    }
}

/// One `alloc_fd` as the model predicts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alloc {
    pub fd: u32,
    /// `max(start, next_fd)`: where the bitmap search began.
    pub origin: u32,
}

impl Alloc {
    /// Bits searched past the origin: the scan distance of docs/figures.md.
    pub fn scan_bits(&self) -> u32 {
        self.fd - self.origin
    }
}

/// Open-fd set, `next_fd` and table size of one `files_struct`.
#[derive(Clone, Debug)]
pub struct FdModel {
    open: Vec<u64>,
    next_fd: u32,
    max_fds: u32,
    nr_open: u32,
}

impl FdModel {
    /// A table with `open` fds, the kernel's `next_fd`, its `max_fds` and `fs.nr_open`.
    pub fn new(open: &[u32], next_fd: u32, max_fds: u32, nr_open: u32) -> Self {
        let mut model = FdModel {
            open: Vec::new(),
            next_fd,
            max_fds,
            nr_open,
        };
        for &fd in open {
            model.set(fd);
        }
        model
    }

    pub fn next_fd(&self) -> u32 {
        self.next_fd
    }

    pub fn max_fds(&self) -> u32 {
        self.max_fds
    }

    pub fn is_open(&self, fd: u32) -> bool {
        let word = (fd / 64) as usize;
        word < self.open.len() && self.open[word] & (1 << (fd % 64)) != 0
    }

    pub fn open_count(&self) -> u32 {
        self.open.iter().map(|w| w.count_ones()).sum()
    }

    /// The lowest fd `>= from` that is not open.
    pub fn lowest_free_from(&self, from: u32) -> u32 {
        let mut word = (from / 64) as usize;
        if word >= self.open.len() {
            return from;
        }
        // Treat the bits below `from` in its word as taken.
        let mut bits = self.open[word] | ((1u64 << (from % 64)) - 1);
        loop {
            if bits != u64::MAX {
                return word as u32 * 64 + (!bits).trailing_zeros();
            }
            word += 1;
            if word == self.open.len() {
                return word as u32 * 64;
            }
            bits = self.open[word];
        }
    }

    /// `alloc_fd(start, ...)`: the fd the kernel hands out and where its search began.
    pub fn alloc(&mut self, start: u32) -> Alloc {
        let origin = start.max(self.next_fd);
        let fd = self.lowest_free_from(origin);
        if start <= self.next_fd {
            self.next_fd = fd + 1;
        }
        self.set(fd);
        self.max_fds = table_size_after(self.max_fds, fd, self.nr_open);
        Alloc { fd, origin }
    }

    /// close(2) (or giving back a reservation); returns whether `fd` was open.
    pub fn close(&mut self, fd: u32) -> bool {
        if !self.is_open(fd) {
            return false;
        }
        self.open[(fd / 64) as usize] &= !(1 << (fd % 64));
        if fd < self.next_fd {
            self.next_fd = fd;
        }
        true
    }

    /// dup2/dup3 onto `fd`; returns whether an open fd was replaced (closed implicitly).
    pub fn install(&mut self, fd: u32) -> bool {
        let was_open = self.is_open(fd);
        self.set(fd);
        self.max_fds = table_size_after(self.max_fds, fd, self.nr_open);
        was_open
    }

    fn set(&mut self, fd: u32) {
        let word = (fd / 64) as usize;
        if word >= self.open.len() {
            self.open.resize(word + 1, 0);
        }
        self.open[word] |= 1 << (fd % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NR_OPEN: u32 = 1 << 20;

    fn stdio() -> FdModel {
        FdModel::new(&[0, 1, 2], 3, 64, NR_OPEN)
    }

    #[test]
    fn allocates_lowest_free_from_next_fd() {
        let mut m = stdio();
        assert_eq!(m.alloc(0), Alloc { fd: 3, origin: 3 });
        assert_eq!(m.alloc(0), Alloc { fd: 4, origin: 4 });
        assert_eq!(m.next_fd(), 5);
        assert!(m.close(3));
        assert_eq!(m.next_fd(), 3);
        assert_eq!(m.alloc(0), Alloc { fd: 3, origin: 3 });
        assert_eq!(m.next_fd(), 4);
        // next_fd now points at an open fd: the search starts there and skips it.
        let a = m.alloc(0);
        assert_eq!((a.fd, a.origin, a.scan_bits()), (5, 4, 1));
    }

    #[test]
    fn close_above_next_fd_leaves_it() {
        let mut m = stdio();
        for _ in 0..5 {
            m.alloc(0);
        }
        assert!(m.close(4));
        assert_eq!(m.next_fd(), 4);
        assert!(m.close(6));
        assert_eq!(m.next_fd(), 4);
        assert!(!m.close(6), "closing a closed fd reports it");
        assert_eq!(m.alloc(0).fd, 4);
        assert_eq!(m.alloc(0), Alloc { fd: 6, origin: 5 });
    }

    #[test]
    fn holes_pattern_scans_to_n() {
        let n = 100;
        let k = 3;
        let open: Vec<u32> = (0..n).collect();
        let mut m = FdModel::new(&open, n, 128, NR_OPEN);
        for _ in 0..3 {
            assert!(m.close(k));
            assert_eq!(m.alloc(0), Alloc { fd: k, origin: k });
            let second = m.alloc(0);
            assert_eq!(
                second,
                Alloc {
                    fd: n,
                    origin: k + 1
                }
            );
            assert_eq!(second.scan_bits(), n - k - 1);
            assert!(m.close(n));
            assert_eq!(m.next_fd(), n);
        }
    }

    #[test]
    fn dup2_does_not_move_next_fd() {
        let n = 10;
        let open: Vec<u32> = (0..n).collect();
        let mut m = FdModel::new(&open, n, 64, NR_OPEN);
        // close(3); dup2(0, 3); dup(0); close(that)
        assert!(m.close(3));
        assert_eq!(m.next_fd(), 3);
        assert!(!m.install(3), "3 was closed: nothing replaced");
        assert_eq!(m.next_fd(), 3);
        let d = m.alloc(0);
        assert_eq!(d, Alloc { fd: n, origin: 3 });
        assert_eq!(d.scan_bits(), n - 3);
        assert!(m.close(n));
        assert!(m.install(5), "dup2 onto an open fd replaces it");
    }

    #[test]
    fn start_above_next_fd_leaves_next_fd() {
        // fcntl(F_DUPFD, 10) from a table with next_fd 3.
        let mut m = stdio();
        assert_eq!(m.alloc(10), Alloc { fd: 10, origin: 10 });
        assert_eq!(m.next_fd(), 3);
        assert_eq!(m.alloc(0).fd, 3);
    }

    #[test]
    fn pipe_pair_takes_two_consecutive_fds() {
        let mut m = stdio();
        let r = m.alloc(0);
        let w = m.alloc(0);
        assert_eq!((r.fd, w.fd), (3, 4));
        assert_eq!((r.origin, w.origin), (3, 4));
        m.close(3);
        m.close(4);
        assert_eq!(m.next_fd(), 3);
    }

    #[test]
    fn lowest_free_crosses_words() {
        let open: Vec<u32> = (0..200).collect();
        let m = FdModel::new(&open, 200, 256, NR_OPEN);
        assert_eq!(m.lowest_free_from(0), 200);
        assert_eq!(m.lowest_free_from(63), 200);
        assert_eq!(m.lowest_free_from(250), 250);
        assert_eq!(m.lowest_free_from(1000), 1000);
        let m = FdModel::new(&[0, 1, 2, 64, 65], 3, 128, NR_OPEN);
        assert_eq!(m.lowest_free_from(64), 66);
        assert_eq!(m.open_count(), 5);
    }

    #[test]
    fn table_size_rule() {
        // Values of roundup_pow_of_two(fd + 1), never below the embedded 64 slots.
        for (fd, size) in [
            (0, 64),
            (63, 64),
            (64, 128),
            (127, 128),
            (128, 256),
            (255, 256),
            (256, 512),
            (1000, 1024),
            (1023, 1024),
            (1024, 2048),
            (19999, 32768),
        ] {
            assert_eq!(expanded_table_size(fd, NR_OPEN), size, "fd {fd}");
        }
        // The pre-6.13 formula gives the same sizes on 64-bit for every fd that expands.
        for fd in 64u32..70_000 {
            let old = ((fd / 128) + 1).next_power_of_two() * 128;
            assert_eq!(expanded_table_size(fd, NR_OPEN), old, "fd {fd}");
        }
        // Capped by fs.nr_open, rounded down to whole bitmap words.
        assert_eq!(expanded_table_size(1500, 2000), 1984);
        assert_eq!(table_size_after(256, 100, NR_OPEN), 256);
        assert_eq!(table_size_after(256, 256, NR_OPEN), 512);
        assert_eq!(table_size_after(64, 64, NR_OPEN), 128);
    }

    #[test]
    fn alloc_and_install_expand_the_table() {
        let open: Vec<u32> = (0..64).collect();
        let mut m = FdModel::new(&open, 64, 64, NR_OPEN);
        assert_eq!(m.alloc(0).fd, 64);
        assert_eq!(m.max_fds(), 128);
        m.install(999);
        assert_eq!(m.max_fds(), 1024);
        m.close(999);
        assert_eq!(m.max_fds(), 1024, "tables never shrink");
    }
}
