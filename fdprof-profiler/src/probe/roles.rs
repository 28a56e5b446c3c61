//! The probe points fdprof needs, the kernel functions that implement each across versions,
//! and the attach mode chosen for each on this kernel.

use serde::{Deserialize, Serialize};

use super::{btf::Btf, kallsyms::Kallsyms};

pub(crate) use fdprof_common::probes::{Mode, Role};

/// A kernel function role and the names it has had, in order of preference.
#[derive(Debug, Clone, Copy)]
pub struct FunctionRole {
    pub role: Role,
    pub candidates: &'static [&'static str],
    /// Attach to every candidate found (the lock slow path exists in native and PV forms, and
    /// which one runs is decided at boot), rather than only the first.
    pub all_found: bool,
}

/// Function roles, probed directly in the fentry and kprobe modes.
pub(crate) const FUNCTION_ROLES: &[FunctionRole] = &[
    // ≤ 5.10: `alloc_fd(start, flags)` is a wrapper of `__alloc_fd(files, …)`, which takes
    // the lock; ≥ 5.11 has `alloc_fd` alone.
    FunctionRole {
        role: Role::Allocate,
        candidates: &["__alloc_fd", "alloc_fd"],
        all_found: false,
    },
    // The first one present is the one close(2) calls: `close_fd` survives in ≥ 6.9 kernels
    // but close(2) went over to `file_close_fd` there.
    FunctionRole {
        role: Role::Close,
        candidates: &["file_close_fd", "close_fd", "__close_fd"],
        all_found: false,
    },
    FunctionRole {
        role: Role::Expand,
        candidates: &["expand_files"],
        all_found: false,
    },
    FunctionRole {
        role: Role::Dup2,
        candidates: &["do_dup2"],
        all_found: false,
    },
    FunctionRole {
        role: Role::CloseRange,
        // ≥ 6.16 folded `__close_range` into the syscall itself.
        candidates: &["__close_range", "__do_sys_close_range"],
        all_found: false,
    },
    FunctionRole {
        role: Role::LockSlowpath,
        candidates: &[
            "native_queued_spin_lock_slowpath",
            "__pv_queued_spin_lock_slowpath",
        ],
        all_found: true,
    },
];

/// The fd syscalls' own functions, probed in the fentry and kprobe modes instead of the raw
/// syscall tracepoints (in the allocator's mode); those missing from a kernel are skipped.
pub(crate) const SYSCALL_ROLE: FunctionRole = FunctionRole {
    role: Role::FdSyscalls,
    candidates: &fdprof_common::probes::SYSCALL_FUNCTIONS,
    all_found: true,
};

/// Where a function was found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FoundFunction {
    pub name: String,
    pub btf: bool,
    pub kallsyms: bool,
}

impl FunctionRole {
    /// The candidates present in this kernel (in its BTF, where there is one, or kallsyms), and
    /// among them the ones to attach to.
    pub(crate) fn resolve(&self, btf: Option<&Btf>, kallsyms: &Kallsyms) -> Vec<FoundFunction> {
        let found = self
            .candidates
            .iter()
            .map(|name| FoundFunction {
                name: name.to_string(),
                btf: btf.is_some_and(|b| b.has_func(name)),
                kallsyms: kallsyms.has_function(name),
            })
            .filter(|f| f.btf || f.kallsyms);
        if self.all_found {
            found.collect()
        } else {
            found.take(1).collect()
        }
    }
}
