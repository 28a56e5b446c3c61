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
