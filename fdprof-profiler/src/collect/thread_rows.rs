//! `THREAD_ROWS`: what running threads counted that is not yet in their process's rows (the
//! programs count there without a lookup call, and add a slot to the rows when its thread
//! ends). Read through one read-only mapping of the array, not a call per slot.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{Context, Result, bail};
use aya::{Ebpf, maps::Map};
use fdprof_common::{
    probes::map,
    process::{THREAD_SLOTS, ThreadRow},
};

/// Every slot a thread holds, as it is now. Read after the rows: a thread that ends in between
/// clears its slot before adding it to the rows, so it is missed for one read at worst, never
/// counted twice.
pub(crate) fn held(ebpf: &Ebpf) -> Result<Vec<ThreadRow>> {
    let Some(Map::Array(data)) = ebpf.map(map::THREAD_ROWS) else {
        bail!("no array map {}", map::THREAD_ROWS);
    };
    let rows = Mapping::of(data.fd().as_fd().as_raw_fd())?;
    Ok((0..THREAD_SLOTS as usize)
        .map(|slot| rows.get(slot))
        .filter(|row| row.tid != 0)
        .collect())
}

/// The array mapped read-only, unmapped on drop.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn of(fd: i32) -> Result<Self> {
        let len = THREAD_SLOTS as usize * size_of::<ThreadRow>();
        // SAFETY: a fresh shared read-only mapping of the map's fd; the kernel checks the length.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot map {}", map::THREAD_ROWS));
        }
        Ok(Self { addr, len })
    }

    /// Slot `slot`'s row as it is now (the programs may be writing it: each field is a plain
    /// aligned word, so a read sees it before or after a write).
    fn get(&self, slot: usize) -> ThreadRow {
        assert!((slot + 1) * size_of::<ThreadRow>() <= self.len);
        // SAFETY: in bounds (above), aligned (the array's values are 8-byte aligned and the
        // mapping page-aligned), and any bytes are a valid ThreadRow.
        unsafe { std::ptr::read_volatile((self.addr as *const ThreadRow).add(slot)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `of`, unmapped once.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}
