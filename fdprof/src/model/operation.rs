//! Which fd-table operation a wait belongs to: the first frame below the lock functions that is
//! an fd-table function (DESIGN.md §4).

/// fd-table functions, by operation. Checked from the innermost frame outwards.
const OPERATIONS: &[(&str, &[&str])] = &[
    (
        "alloc",
        &[
            "alloc_fd",
            "__alloc_fd",
            "get_unused_fd_flags",
            "__get_unused_fd_flags",
        ],
    ),
    (
        "close",
        &[
            "file_close_fd",
            "close_fd",
            "__close_fd",
            "file_close_fd_locked",
        ],
    ),
    ("expand", &["expand_files", "expand_fdtable"]),
    ("dup2", &["do_dup2", "replace_fd", "ksys_dup3"]),
    (
        "close_range",
        &["__close_range", "__do_sys_close_range", "__range_close"],
    ),
    ("exec", &["do_close_on_exec"]),
    ("fork", &["dup_fd", "copy_files"]),
];

/// Operation names in report order, `other` last.
pub const NAMES: [&str; 8] = [
    "alloc",
    "close",
    "expand",
    "dup2",
    "close_range",
    "exec",
    "fork",
    "other",
];

/// The operation of a kernel stack given innermost frame first.
pub fn of_stack<'a>(functions: impl IntoIterator<Item = &'a str>) -> &'static str {
    for f in functions {
        // Compiler clones (`foo.isra.0`, `foo.constprop.0`) count as `foo`.
        let base = f.split('.').next().unwrap_or(f);
        if let Some((op, _)) = OPERATIONS.iter().find(|(_, fns)| fns.contains(&base)) {
            return op;
        }
    }
    "other"
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_fd_function_wins() {
        let stack = [
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "file_close_fd",
            "__x64_sys_close",
        ];
        assert_eq!(super::of_stack(stack), "close");
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "alloc_fd.isra.0"]),
            "alloc"
        );
        assert_eq!(super::of_stack(["_raw_spin_lock", "tcp_v4_rcv"]), "other");
    }
}
