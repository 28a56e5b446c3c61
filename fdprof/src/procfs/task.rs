//! A process's (or thread's) files under `/proc/PID`: its tasks, comm, status, cgroup, exe and
//! maps.

use std::io::Read;

/// Bytes of `/proc/PID/cgroup` or `/proc/PID/status` read: a few hundred in practice.
const FILE_BYTES: u64 = 64 << 10;

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
    read_bounded(&format!("/proc/{pid}/status"))
}

/// `/proc/PID/cgroup`, its first [`FILE_BYTES`].
pub(crate) fn cgroup(pid: u32) -> Option<String> {
    read_bounded(&format!("/proc/{pid}/cgroup"))
}

/// The executable `/proc/PID/exe` links to; `None` for a kernel thread or once it is gone.
pub(crate) fn exe(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// `/proc/PID/maps` (`self` for fdprof's own), whole: a line per mapping, which the symbolizer
/// needs all of; the kernel bounds the mappings (`vm.max_map_count`).
pub(crate) fn maps(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()
}

fn read_bounded(path: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}
