//! Which fd-table operation a wait belongs to: the first frame below the lock functions that is
//! an fd-table function.

use fdprof_common::fnops::Operation;

/// fd-table functions, by operation. Checked from the innermost frame outwards.
const OPERATIONS: &[(Operation, &[&str])] = &[
    (
        Operation::Alloc,
        &[
            "alloc_fd",
            "__alloc_fd",
            "get_unused_fd_flags",
            "__get_unused_fd_flags",
        ],
    ),
    (
        Operation::Close,
        &[
            "file_close_fd",
            "close_fd",
            "__close_fd",
            "file_close_fd_locked",
        ],
    ),
    (Operation::Expand, &["expand_files", "expand_fdtable"]),
    (Operation::Dup2, &["do_dup2", "replace_fd", "ksys_dup3"]),
    (
        Operation::CloseRange,
        &["__close_range", "__do_sys_close_range", "__range_close"],
    ),
    (Operation::Exec, &["do_close_on_exec"]),
    (Operation::Fork, &["dup_fd", "copy_files"]),
];

/// The operation of a kernel stack given innermost frame first.
pub fn of_stack<'a>(functions: impl IntoIterator<Item = &'a str>) -> Operation {
    for f in functions {
        // Compiler clones (`foo.isra.0`, `foo.constprop.0`) count as `foo`.
        let base = f.split('.').next().unwrap_or(f);
        if let Some((op, _)) = OPERATIONS.iter().find(|(_, fns)| fns.contains(&base)) {
            return *op;
        }
    }
    Operation::Other
}

#[cfg(test)]
mod tests {
    use super::Operation;

    #[test]
    fn first_fd_function_wins() {
        let stack = [
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "file_close_fd",
            "__x64_sys_close",
        ];
        assert_eq!(super::of_stack(stack), Operation::Close);
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "alloc_fd.isra.0"]),
            Operation::Alloc
        );
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "tcp_v4_rcv"]),
            Operation::Other
        );
    }
}
