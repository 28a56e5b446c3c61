//! `/proc/PATH/stat`, read once for everyone who needs a task's state or times, and the
//! processes `/proc` lists.

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
pub fn stat_fields(path: &str) -> Option<Vec<String>> {
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
