//! The target set (`Settings::target_kind` = `target_kind::SET`): the processes one loaded program set
//! profiles, as entries of the `TARGETS` map that user space fills (`-p`, several times) and the
//! programs extend in the kernel (a `--comm` name at exec and rename, a target's children at
//! fork). Its figures are kept per process (`process`), as under `-a`.

/// `TARGETS` value: how the process came to be a target.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TargetEntry {
    /// The user-space target it belongs to (an index into what user space asked for: a `-p`
    /// pid, a `--comm` name, a command); what the children it brings in carry too.
    pub slot: u32,
    /// `flag` bits.
    pub flags: u32,
}

/// `TargetEntry::flags` bits.
pub mod flag {
    /// Its new processes (forks that are not threads) join the set at fork.
    pub const CHILDREN: u32 = 1 << 0;
    /// It joined by its name (`TARGET_COMMS`): it leaves at an exec or rename to another name,
    /// and its forks, which carry its name, join.
    pub const BY_COMM: u32 = 1 << 1;
    /// It joined as a process of a followed cgroup (`TARGET_CGROUPS`): it leaves when moved to
    /// a cgroup of that hierarchy that is not followed.
    pub const BY_CGROUP: u32 = 1 << 2;
}

/// `TARGET_CGROUPS` key: a cgroup as `cgroup:cgroup_attach_task` names it, its hierarchy's id
/// (0: the v2 hierarchy; a v1 hierarchy's as `/proc/PID/cgroup` numbers it) and its id (the
/// inode number of its directory). An entry with `id` 0 marks a hierarchy some followed cgroup
/// is in: a move there to a cgroup not in the map is a move out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupKey {
    pub hierarchy: u32,
    pub _pad: u32,
    pub id: u64,
}

/// Cgroups below the followed ones (their descendants, in all) that are followed: a node's
/// pods, their containers and systemd's own. One past it is not followed, and counted once as
/// a drop (`targets`/`cgroup_bound`).
pub const CGROUP_BOUND: u32 = 16384;

/// `TARGET_CGROUPS` size: the descendants within [`CGROUP_BOUND`], the followed cgroups
/// themselves and the hierarchies' marks.
pub const MAX_CGROUPS: u32 = CGROUP_BOUND + 1024;

/// `TARGETS` size unless user space asks for another (`--max-processes`): processes in the
/// set at once. One joining a full set is a counted drop (`targets`/`map_full`).
pub const MAX_TARGETS: u32 = 4096;

/// `MEMBERS`: one element per pid, non-zero while that process is in the set. The filter on
/// every fd syscall and wait reads it with an array load where `TARGETS` takes a hashed lookup
/// (an unrelated process pays one array load). Sized at load to `pid_max`, at most
/// `MAX_MEMBER_PIDS` (8 bytes each in the kernel); a larger pid is looked up in `TARGETS`.
pub const MAX_MEMBER_PIDS: u32 = 1 << 20;

/// `TARGET_COMMS` size: names matched in the kernel (comm, NUL-padded → slot).
pub const MAX_COMMS: u32 = 64;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data, two u32s, no padding.
    unsafe impl aya::Pod for super::TargetEntry {}
    // SAFETY: plain #[repr(C)] data, two u32s and a u64, no padding.
    unsafe impl aya::Pod for super::CgroupKey {}
}
