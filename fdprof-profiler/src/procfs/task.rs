//! A process's (or thread's) files under `/proc/PID`: its tasks, comm, status, cgroup, exe,
//! maps, mapped files, fds and root.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{FILE_BYTES, read_bounded};

/// The thread ids in `/proc/PID/task`, in directory order, read as iterated (a caller may stop
/// at the first that answers); `None` once the process is gone.
pub(crate) fn tasks(pid: u32) -> Option<impl Iterator<Item = u32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()))
}

/// `/proc/PID/comm` without its newline (at most 16 bytes: the kernel bounds it); `None` once
/// the task is gone.
pub(crate) fn comm(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(text.trim_end_matches('\n').to_string())
}

/// `/proc/PID/status`, its first [`FILE_BYTES`].
pub(crate) fn status(pid: u32) -> Option<String> {
    read_bounded(&format!("/proc/{pid}/status"), FILE_BYTES)
}

/// `/proc/PID/cgroup`, its first [`FILE_BYTES`].
pub(crate) fn cgroup(pid: u32) -> Option<String> {
    read_bounded(&format!("/proc/{pid}/cgroup"), FILE_BYTES)
}

/// The executable `/proc/PID/exe` links to; `None` for a kernel thread or once it is gone.
pub(crate) fn exe(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// `/proc/PID/maps` (`self` for fdprof's own), whole: a line per mapping, which the symbolizer
/// needs all of; the kernel bounds the mappings (`vm.max_map_count`).
pub(crate) fn maps(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()
}

/// The fd numbers in `/proc/PID/fd`, read as iterated (an fd closed meanwhile is left out).
pub(crate) fn fds(pid: u32) -> std::io::Result<impl Iterator<Item = u32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))?;
    Ok(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()))
}

/// `/proc/PID/fdinfo/FD` (position, flags, mount id...), its first [`FILE_BYTES`]; `None` once
/// the fd is closed.
pub(crate) fn fdinfo(pid: u32, fd: u32) -> Option<String> {
    read_bounded(&format!("/proc/{pid}/fdinfo/{fd}"), FILE_BYTES)
}

/// The file mapped at `start..end` in `pid`, opened through `/proc/PID/map_files` (the mapping
/// itself: found even where its path means another file in fdprof's own mount namespace).
pub(crate) fn map_file(pid: u32, start: u64, end: u64) -> std::io::Result<File> {
    File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// `path`, absolute in `pid`'s mount namespace, as fdprof reaches it: through `/proc/PID/root`.
pub(crate) fn in_root(pid: u32, path: &Path) -> PathBuf {
    let mut root = PathBuf::from(format!("/proc/{pid}/root"));
    root.push(path.strip_prefix("/").unwrap_or(path));
    root
}
