//! Every read of `/proc` in one place, each with its bound: the processes `/proc` lists,
//! `/proc/PATH/stat` (a task's state and times), a process's tasks, comm, status, cgroup and
//! maps (`task`), and `/proc/kallsyms` (`kallsyms`).

mod kallsyms;
mod task;

pub(crate) use kallsyms::kallsyms;
pub(crate) use task::{cgroup, comm, exe, maps, status, tasks};

/// The pids of the processes alive now, at most `limit` of them.
pub(crate) fn pids(limit: usize) -> Vec<u32> {
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

/// The running kernel's release, read once: every interval's recording names it.
pub(crate) fn kernel_release() -> String {
    static RELEASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RELEASE
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        })
        .clone()
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
