//! Struct field offsets the eBPF programs need, read from the running kernel's BTF.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::btf::Btf;

/// Byte offsets of the fields fdprof's programs read. Handed to them as load-time globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelOffsets {
    pub task_struct_files: u32,
    pub files_struct_next_fd: u32,
    pub files_struct_fdt: u32,
    pub files_struct_file_lock: u32,
    pub fdtable_max_fds: u32,
    pub fdtable_open_fds: u32,
    pub fdtable_full_fds_bits: u32,
    /// Thread exits: which one ends the process.
    pub task_struct_signal: u32,
    pub signal_struct_live: u32,
    /// A forked child's pid (the trace follows forks).
    pub task_struct_tgid: u32,
}

impl KernelOffsets {
    /// `(struct, field)` pairs in the order of [`KernelOffsets::values`].
    pub(crate) const FIELDS: [(&'static str, &'static str); 10] = [
        ("task_struct", "files"),
        ("files_struct", "next_fd"),
        ("files_struct", "fdt"),
        ("files_struct", "file_lock"),
        ("fdtable", "max_fds"),
        ("fdtable", "open_fds"),
        ("fdtable", "full_fds_bits"),
        ("task_struct", "signal"),
        ("signal_struct", "live"),
        ("task_struct", "tgid"),
    ];

    pub(crate) fn from_btf(btf: &Btf) -> Result<Self> {
        let off = |(s, f): (&str, &str)| btf.member_offset(s, f);
        let [a, b, c, d, e, f, g, h, i, j] = Self::FIELDS;
        Ok(Self {
            task_struct_files: off(a)?,
            files_struct_next_fd: off(b)?,
            files_struct_fdt: off(c)?,
            files_struct_file_lock: off(d)?,
            fdtable_max_fds: off(e)?,
            fdtable_open_fds: off(f)?,
            fdtable_full_fds_bits: off(g)?,
            task_struct_signal: off(h)?,
            signal_struct_live: off(i)?,
            task_struct_tgid: off(j)?,
        })
    }

    /// The offsets in the order of [`KernelOffsets::FIELDS`].
    pub(crate) fn values(&self) -> [u32; 10] {
        [
            self.task_struct_files,
            self.files_struct_next_fd,
            self.files_struct_fdt,
            self.files_struct_file_lock,
            self.fdtable_max_fds,
            self.fdtable_open_fds,
            self.fdtable_full_fds_bits,
            self.task_struct_signal,
            self.signal_struct_live,
            self.task_struct_tgid,
        ]
    }
}

/// Offsets of the locks recognised by kind, each `u32::MAX` where this kernel lacks the field
/// (`mmap_lock` was `mmap_sem` before 5.8): the lock is then named some other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOffsets {
    pub task_struct_mm: u32,
    pub mm_struct_mmap_lock: u32,
    pub task_struct_sighand: u32,
    pub sighand_struct_siglock: u32,
    /// `task_struct.se` + `sched_entity.cfs_rq`: one pointer's offset in the task.
    pub task_struct_se_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_lock: u32,
    /// Where user stacks are copied from: `task_struct.thread` + `thread_struct.fsbase`,
    /// `mm_struct.start_stack`, `task_struct.stack`.
    pub task_struct_fsbase: u32,
    pub mm_struct_start_stack: u32,
    pub task_struct_stack: u32,
}

impl LockOffsets {
    pub(crate) fn from_btf(btf: &Btf) -> Self {
        let off = |s: &str, f: &str| btf.member_offset(s, f).unwrap_or(u32::MAX);
        Self {
            task_struct_mm: off("task_struct", "mm"),
            mm_struct_mmap_lock: off("mm_struct", "mmap_lock"),
            task_struct_sighand: off("task_struct", "sighand"),
            sighand_struct_siglock: off("sighand_struct", "siglock"),
            task_struct_se_cfs_rq: match (off("task_struct", "se"), off("sched_entity", "cfs_rq")) {
                (u32::MAX, _) | (_, u32::MAX) => u32::MAX,
                (se, cfs_rq) => se + cfs_rq,
            },
            cfs_rq_rq: off("cfs_rq", "rq"),
            // `lock` until 5.14.
            rq_lock: match off("rq", "__lock") {
                u32::MAX => off("rq", "lock"),
                at => at,
            },
            task_struct_fsbase: match (off("task_struct", "thread"), off("thread_struct", "fsbase"))
            {
                (u32::MAX, _) | (_, u32::MAX) => u32::MAX,
                (thread, fsbase) => thread + fsbase,
            },
            mm_struct_start_stack: off("mm_struct", "start_stack"),
            task_struct_stack: off("task_struct", "stack"),
        }
    }
}
/// Offsets that name a cgroup as `cgroup:cgroup_attach_task` does (`--cgroup`: a process
/// moved in), each `u32::MAX` where this kernel lacks the field: moves are then seen by reading
/// the cgroups again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupOffsets {
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    pub cgroup_root: u32,
    pub cgroup_root_hierarchy_id: u32,
}

impl CgroupOffsets {
    pub(crate) fn from_btf(btf: &Btf) -> Self {
        let off = |s: &str, f: &str| btf.member_offset(s, f).unwrap_or(u32::MAX);
        Self {
            cgroup_kn: off("cgroup", "kn"),
            kernfs_node_id: off("kernfs_node", "id"),
            cgroup_root: off("cgroup", "root"),
            cgroup_root_hierarchy_id: off("cgroup_root", "hierarchy_id"),
        }
    }
}
