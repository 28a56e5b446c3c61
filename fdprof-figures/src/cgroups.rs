//! Where a process runs: its cgroup, the systemd unit or container the cgroup names, and its
//! pid inside its own pid namespace; and the figures of a recording by container or cgroup.

use serde::{Deserialize, Deserializer, Serialize};

use crate::Syscall;

/// Longest cgroup path, unit name or id read back from a file (`PATH_MAX`).
pub(crate) const PATH_BYTES: usize = 4096;

/// Container runtimes recognised from a cgroup path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// podman / libpod: `libpod-<id>`.
    Podman,
    /// docker: `docker-<id>.scope`, `/docker/<id>`.
    Docker,
    /// containerd's CRI plugin: `cri-containerd-<id>.scope`.
    Containerd,
    /// cri-o: `crio-<id>.scope`.
    Crio,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Podman => "podman",
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::Crio => "crio",
        }
    }
}

/// A container, as its runtime names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Container {
    pub runtime: Runtime,
    /// The full id (64 hex digits).
    #[serde(deserialize_with = "bounded")]
    pub id: String,
}

impl Container {
    /// The first 12 digits, as `podman ps` and `docker ps` show it.
    pub fn short_id(&self) -> &str {
        &self.id[..self.id.len().min(12)]
    }
}

/// Where a process runs, read from `/proc/PID/cgroup` and `/proc/PID/status` while it lived.
/// Every field is absent where it is not known (the process ended before it was read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Its cgroup path: the v2 hierarchy's, or on a hybrid host the v1 line that names its
    /// container (or its systemd unit, where the v2 line is the root).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_opt"
    )]
    pub cgroup: Option<String>,
    /// The systemd unit the path names (`*.service`, `*.scope`), the innermost.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_opt"
    )]
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// The Kubernetes pod's UID (`kubepods…pod<uid>`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_opt"
    )]
    pub pod_uid: Option<String>,
    /// Its pid in its own (innermost) pid namespace, where that is not the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
}

impl Identity {
    pub fn is_empty(&self) -> bool {
        *self == Identity::default()
    }
}

/// `file_lock` waits of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLockWaits {
    pub count: u64,
    pub wait_ns: u64,
}

/// The processes of one container (or, outside containers, one cgroup) and their figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupGroup {
    /// The cgroup path of its first process; `null` for the processes whose cgroup is not
    /// known.
    pub path: Option<String>,
    pub unit: Option<String>,
    pub container: Option<Container>,
    pub pod_uid: Option<String>,
    /// Its processes' host pids, lowest first.
    pub processes: Vec<u32>,
    /// Waits on its processes' own `file_lock`s.
    pub file_lock: FileLockWaits,
    /// Its processes' fd syscalls added up (counted, not timed).
    pub syscalls: Vec<Syscall>,
    /// All of them.
    pub fd_syscalls: u64,
}

impl CgroupGroup {
    /// How the group is named to a person: the short container id and runtime, the unit, or
    /// the path.
    pub fn name(&self) -> String {
        match (&self.container, &self.unit, &self.path) {
            (Some(c), _, _) => format!("{} {}", c.runtime.as_str(), c.short_id()),
            (None, Some(unit), _) => unit.clone(),
            (None, None, Some(path)) => path.clone(),
            (None, None, None) => "(cgroup not known)".into(),
        }
    }
}

fn bounded<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.len() > PATH_BYTES {
        return Err(serde::de::Error::custom(format!(
            "a cgroup name longer than {PATH_BYTES} bytes"
        )));
    }
    Ok(s)
}

fn bounded_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    if s.as_ref().is_some_and(|s| s.len() > PATH_BYTES) {
        return Err(serde::de::Error::custom(format!(
            "a cgroup name longer than {PATH_BYTES} bytes"
        )));
    }
    Ok(s)
}
