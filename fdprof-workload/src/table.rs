//! Reading this process's fd table from /proc, and leaving it in a known state.
//!
//! Only for setup: everything here opens files, which the measured phase must not do.

use std::ffi::CStr;

use anyhow::{Context, Result, bail};

use crate::fd_model::{FdModel, NR_OPEN_DEFAULT};
use crate::sys;

/// The table as the measured phase finds it.
#[derive(Clone, Debug)]
pub(crate) struct Baseline {
    /// Open fds, ascending.
    pub open: Vec<u32>,
    /// `files->next_fd`: the lowest free fd, set by the scratch open/close.
    pub next_fd: u32,
    /// `fdt->max_fds` (`FDSize` in /proc/self/status).
    pub max_fds: u32,
    /// `fs.nr_open`, which caps table growth.
    pub nr_open: u32,
}

impl Baseline {
    pub(crate) fn model(&self) -> FdModel {
        FdModel::new(&self.open, self.next_fd, self.max_fds, self.nr_open)
    }
}

/// The fds open in this process, ascending (without the directory fd used to list them).
pub(crate) fn list_open_fds() -> Result<Vec<u32>> {
    // SAFETY: the path is a NUL-terminated literal.
    let dir = unsafe { libc::opendir(c"/proc/self/fd".as_ptr()) };
    if dir.is_null() {
        bail!(
            "cannot open /proc/self/fd: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: `dir` is a valid open directory stream until closedir below.
    let own = unsafe { libc::dirfd(dir) };
    let mut fds = Vec::new();
    loop {
        // SAFETY: as above; the entry is read before the next readdir call.
        let entry = unsafe { libc::readdir(dir) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if let Some(fd) = name.to_str().ok().and_then(|s| s.parse::<u32>().ok())
            && fd as i32 != own
        {
            fds.push(fd);
        }
    }
    // SAFETY: `dir` came from opendir and is closed once.
    unsafe { libc::closedir(dir) };
    fds.sort_unstable();
    Ok(fds)
}

/// `fdt->max_fds` of this process, from the `FDSize:` line of /proc/self/status.
pub(crate) fn read_fd_size() -> Result<u32> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no FDSize in /proc/self/status")
}

/// `fs.nr_open` (the kernel default when it cannot be read).
pub(crate) fn read_nr_open() -> u32 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024 * 1024)
        .max(NR_OPEN_DEFAULT)
}

/// The lowest fd not in `open` (ascending).
pub(crate) fn lowest_free(open: &[u32]) -> u32 {
    let mut want = 0;
    for &fd in open {
        if fd == want {
            want += 1;
        } else if fd > want {
            break;
        }
    }
    want
}

/// The `index`-th (0-based) fd number not in `open` (ascending).
pub(crate) fn nth_free(open: &[u32], index: u64) -> u64 {
    let mut candidate = index;
    for &fd in open {
        if u64::from(fd) <= candidate {
            candidate += 1;
        } else {
            break;
        }
    }
    candidate
}

/// Snapshots the table, then puts `files->next_fd` at a known place: opening a scratch fd
/// gets the lowest free fd L and sets next_fd = L + 1; closing it sets next_fd = L.
///
/// Must be the last fd operation before the measured phase.
pub(crate) fn snapshot_and_reset() -> Result<Baseline> {
    let open = list_open_fds()?;
    let max_fds = read_fd_size()?;
    let nr_open = read_nr_open();
    let scratch = sys::openat(c"/dev/null", libc::O_RDONLY | libc::O_CLOEXEC)
        .context("resetting next_fd: opening /dev/null")?;
    sys::close(scratch).context("resetting next_fd")?;
    let lowest = lowest_free(&open);
    if scratch as u32 != lowest {
        bail!(
            "the fd table changed during setup: the scratch fd is {scratch}, the lowest free fd was {lowest}"
        );
    }
    Ok(Baseline {
        open,
        next_fd: lowest,
        max_fds,
        nr_open,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_numbers() {
        assert_eq!(lowest_free(&[]), 0);
        assert_eq!(lowest_free(&[0, 1, 2]), 3);
        assert_eq!(lowest_free(&[0, 2, 3]), 1);
        assert_eq!(nth_free(&[0, 1, 2], 0), 3);
        assert_eq!(nth_free(&[0, 1, 2], 9), 12);
        assert_eq!(nth_free(&[0, 2, 5, 100], 0), 1);
        assert_eq!(nth_free(&[0, 2, 5, 100], 2), 4);
        assert_eq!(nth_free(&[0, 2, 5, 100], 3), 6);
    }

    #[test]
    fn lists_own_fds_and_reads_table_size() {
        let fds = list_open_fds().unwrap();
        assert!(
            fds.windows(2).all(|w| w[0] < w[1]),
            "ascending, no duplicates"
        );
        let size = read_fd_size().unwrap();
        assert!(size >= NR_OPEN_DEFAULT && size.is_multiple_of(64), "{size}");
    }
}
