//! fdprof's own files under `/proc/self` and `/proc/thread-self`: its mounts, cgroup, status,
//! namespaces, and its open files by number.

use std::os::fd::RawFd;
use std::path::PathBuf;

use super::{FILE_BYTES, read_bounded};

/// Bytes of `/proc/self/mountinfo` or `/proc/self/mounts` read: a line per mount, about 150
/// bytes each, so some 50,000 mounts; a node's are a few thousand.
const MOUNT_BYTES: u64 = 8 << 20;

/// `/proc/self/mountinfo`, its first [`MOUNT_BYTES`].
pub(crate) fn mountinfo() -> Option<String> {
    read_bounded("/proc/self/mountinfo", MOUNT_BYTES)
}

/// `/proc/self/mounts`, its first [`MOUNT_BYTES`].
pub(crate) fn mounts() -> Option<String> {
    read_bounded("/proc/self/mounts", MOUNT_BYTES)
}

/// `/proc/self/cgroup`, its first [`FILE_BYTES`].
pub(crate) fn cgroup() -> Option<String> {
    read_bounded("/proc/self/cgroup", FILE_BYTES)
}

/// `/proc/self/status` (the process's: its seccomp mode, ids), its first [`FILE_BYTES`].
pub(crate) fn status() -> Option<String> {
    read_bounded("/proc/self/status", FILE_BYTES)
}

/// `/proc/thread-self/status` (the calling thread's: capabilities are a thread's), its first
/// [`FILE_BYTES`].
pub(crate) fn thread_status() -> Option<String> {
    read_bounded("/proc/thread-self/status", FILE_BYTES)
}

/// What `/proc/self/ns/KIND` links to (`kind:[inode]`).
pub(crate) fn namespace(kind: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/ns/{kind}")).ok()
}

/// The path that opens fdprof's own open file `fd` again (`/proc/self/fd/FD`): for a file that
/// has no name of its own (an `O_TMPFILE` before it is linked, a memfd).
pub(crate) fn fd_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// fdprof's own vDSO image: every process of its ABI on this kernel maps the same one. `None`
/// when the kernel passed none.
pub(crate) fn vdso_image() -> Option<&'static [u8]> {
    // SAFETY: no preconditions; 0 when the kernel passed no vDSO.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return None;
    }
    let len = vdso_len(&std::fs::read_to_string("/proc/self/maps").ok()?, base)?;
    // SAFETY: the mapping [base, base + len) is this process's vDSO, readable for its life.
    Some(unsafe { std::slice::from_raw_parts(base as *const u8, len as usize) })
}

/// The length of the `[vdso]` mapping that starts at `base`, from `/proc/self/maps` text (a line
/// `START-END perms offset dev inode [vdso]`, addresses in hex).
fn vdso_len(maps: &str, base: u64) -> Option<u64> {
    maps.lines().find_map(|line| {
        let (range, _) = line.split_once(' ')?;
        let (start, end) = range.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        (start == base && line.trim_end().ends_with(" [vdso]")).then(|| end - start)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vdso_mapping_is_found_by_its_start() {
        let maps = "7f0000000000-7f0000001000 r-xp 00000000 08:01 42 /usr/lib/libc.so.6\n\
                    7ffd1a3f2000-7ffd1a3f4000 r-xp 00000000 00:00 0          [vdso]\n";
        assert_eq!(vdso_len(maps, 0x7ffd1a3f2000), Some(0x2000));
        assert_eq!(vdso_len(maps, 0x7f0000000000), None);
        assert!(vdso_image().is_some_and(|i| i.starts_with(b"\x7fELF")));
    }
}
