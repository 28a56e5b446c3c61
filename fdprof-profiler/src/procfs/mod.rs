//! Every read of `/proc` in one place, each with its bound: the processes `/proc` lists,
//! `/proc/PATH/stat` (a task's state and times), a process's tasks, comm, status, cgroup, maps,
//! fds and root (`task`), fdprof's own mounts, cgroup, status and namespaces (`own`), the
//! kernel's settings, CPU times and image (`system`), and `/proc/kallsyms` (`kallsyms`).

mod kallsyms;
mod maps;
pub(crate) mod own;
mod system;
mod task;

use std::io::Read;

pub(crate) use kallsyms::kallsyms;
pub(crate) use maps::{ExecMapping, parse_maps};
pub use system::{kcore, kernel_release, kernel_setting, stat};
pub(crate) use task::{cgroup, comm, exe, fdinfo, fds, in_root, map_file, maps, status, tasks};

/// Bytes of a small file read (`status`, `cgroup`, `fdinfo`, a setting): a few hundred in
/// practice.
const FILE_BYTES: u64 = 64 << 10;

/// The first `bytes` of the file at `path`; `None` where it cannot be read.
fn read_bounded(path: &str, bytes: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(bytes)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The pids of the processes alive now, at most `limit` of them.
pub fn pids(limit: usize) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .take(limit)
        .collect()
}

/// The fields of `/proc/PATH/stat` after the command name, the state first (field 3 of
/// proc(5) is index 0 here). The name may hold spaces and parentheses, so the fields are
/// counted from its closing parenthesis. `None` when the task is gone.
pub(crate) fn stat_fields(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{path}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_ascii_whitespace().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_state_and_start_time() {
        let fields = super::stat_fields("thread-self").unwrap();
        assert_eq!(fields[0], "R", "this thread is running");
        assert!(fields[19].parse::<u64>().is_ok(), "starttime is field 22");
        assert!(super::stat_fields("4294967295").is_none());
    }
}
