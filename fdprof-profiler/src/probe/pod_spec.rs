//! Inside a container: what its pod spec lacks for fdprof, said in the manifest's own words
//! (deploy/kubernetes/daemonset.yaml), so an operator knows which line to add.
//!
//! Found by looking, not by version: the pid namespace, the effective capabilities, whether
//! the seccomp filter lets `bpf(2)` through, and the mounts fdprof reads.

use std::path::Path;

use serde::Serialize;

use crate::privileges::{self, Capability, HOST_PID_NS, in_container, namespace};

/// The inode of the initial cgroup namespace (`PROC_CGROUP_INIT_INO`).
const HOST_CGROUP_NS: u64 = 0xEFFF_FFFB;

/// One thing the pod spec lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "lacks", rename_all = "snake_case")]
pub enum Gap {
    /// The pid namespace is the container's own.
    HostPid,
    /// A capability fdprof uses is not in the effective set.
    Capability { name: &'static str },
    /// The seccomp filter refuses `bpf(2)` although the capabilities are held.
    Seccomp,
    /// A host path fdprof reads is not mounted in.
    HostPath { path: &'static str },
    /// A directory fdprof writes is read-only.
    Writable { path: &'static str },
}

impl Gap {
    /// The manifest's words for what to add.
    pub(crate) fn manifest(&self) -> String {
        match self {
            Gap::HostPid => "spec.hostPID: true".into(),
            Gap::Capability { name } => {
                format!("securityContext.capabilities.add: [{name}]")
            }
            Gap::Seccomp => {
                "securityContext.seccompProfile: {type: Localhost, localhostProfile: fdprof.json}"
                    .into()
            }
            Gap::HostPath { path } => format!(
                "volumes: [{{hostPath: {{path: {path}}}}}] with volumeMounts: \
                 [{{mountPath: {path}, readOnly: true}}]"
            ),
            Gap::Writable { path } => format!(
                "volumeMounts: [{{mountPath: {path}}}] of an emptyDir volume, or args: \
                 [--token-file, FILE]"
            ),
        }
    }

    /// What fdprof cannot do without it.
    pub(crate) fn why(&self) -> &'static str {
        match self {
            Gap::HostPid => {
                "this pid namespace is the container's own: fdprof sees only the pod's processes"
            }
            Gap::Capability { name } => match *name {
                "BPF" | "PERFMON" => "fdprof cannot load or attach its programs",
                "SYSLOG" => "/proc/kallsyms shows no addresses: kernel stacks go unnamed",
                "SYS_PTRACE" => {
                    "other processes' /proc/PID/root and maps are closed: user stacks go unnamed"
                }
                _ => "this kernel charges map memory to RLIMIT_MEMLOCK",
            },
            Gap::Seccomp => {
                "the container's seccomp filter refuses bpf(2); the profile is \
                 deploy/kubernetes/seccomp/fdprof.json, in the node's /var/lib/kubelet/seccomp"
            }
            Gap::HostPath { path } => match *path {
                "/sys/kernel/btf" => "the kernel's BTF is not in this container",
                "/sys/kernel/tracing" => {
                    "tracefs is not mounted: classic tracepoints, which this kernel needs, have no ids"
                }
                _ => {
                    "this cgroup hierarchy is the container's own: --cgroup and cgroup names \
                      need the host's"
                }
            },
            Gap::Writable { .. } => "the daemon cannot save the token it makes",
        }
    }

    /// One line: the manifest's words, then why.
    pub fn line(&self) -> String {
        format!("{} ({})", self.manifest(), self.why())
    }
}

/// Where fdprof runs, and what its pod spec lacks when that is a container.
#[derive(Debug, Clone, Serialize)]
pub struct PodSpec {
    pub in_container: bool,
    pub lacks: Vec<Gap>,
}

/// Facts about the kernel that decide which gaps matter, from the caller's trials.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Some tracepoint family can attach only as a classic tracepoint (tp_btf refused).
    pub classic_tracepoints: bool,
    /// Where the daemon saves the token it makes, when it would make one.
    pub token_dir: Option<&'static str>,
}

impl PodSpec {
    /// Looks; outside a container there is nothing to say.
    pub fn detect(needs: Needs) -> PodSpec {
        let in_container = in_container();
        let lacks = if in_container {
            gaps(needs)
        } else {
            Vec::new()
        };
        PodSpec {
            in_container,
            lacks,
        }
    }
}

/// Before loading: in a container, fails on what fdprof cannot run without (the seccomp
/// filter refusing `bpf(2)`, no BTF) in one line of the manifest's words, and returns the
/// other gaps, for the caller to say.
pub fn check_at_start() -> anyhow::Result<Vec<Gap>> {
    let pod = PodSpec::detect(Needs::default());
    let (fatal, said): (Vec<Gap>, Vec<Gap>) = pod.lacks.into_iter().partition(|g| {
        matches!(
            g,
            Gap::Seccomp
                | Gap::HostPath {
                    path: "/sys/kernel/btf"
                }
        )
    });
    if let Some(gap) = fatal.first() {
        anyhow::bail!("in a container: add {}", gap.line());
    }
    Ok(said)
}

fn gaps(needs: Needs) -> Vec<Gap> {
    let mut lacks = Vec::new();
    if namespace("pid").is_some_and(|n| n != HOST_PID_NS) {
        lacks.push(Gap::HostPid);
    }
    let effective = privileges::effective().unwrap_or(0);
    let lacking = privileges::missing(effective, &wanted());
    lacks.extend(lacking.iter().map(|c| Gap::Capability {
        name: c.manifest_name(),
    }));
    if !lacking.iter().any(|c| privileges::LOAD_BPF.contains(c)) && seccomp_refuses_bpf() {
        lacks.push(Gap::Seccomp);
    }
    if !Path::new(super::btf::SYS_FS).exists() {
        lacks.push(Gap::HostPath {
            path: "/sys/kernel/btf",
        });
    }
    if needs.classic_tracepoints && !super::tracefs::is_mounted() {
        lacks.push(Gap::HostPath {
            path: "/sys/kernel/tracing",
        });
    }
    let mountinfo = crate::procfs::own::mountinfo().unwrap_or_default();
    let host_cgroup_ns = namespace("cgroup") == Some(HOST_CGROUP_NS);
    if !hosts_cgroups(&mountinfo, host_cgroup_ns) {
        lacks.push(Gap::HostPath {
            path: "/sys/fs/cgroup",
        });
    }
    if let Some(dir) = needs.token_dir.filter(|d| !writable(d)) {
        lacks.push(Gap::Writable { path: dir });
    }
    lacks
}

/// The capabilities fdprof uses in a container: loading, kernel symbols, other processes'
/// files, and the memlock limit on kernels that charge maps to it (before 5.11).
fn wanted() -> Vec<Capability> {
    let mut wanted = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        wanted.push(Capability::Syslog);
    }
    wanted.push(Capability::SysPtrace);
    if memlock_charged(&crate::procfs::kernel_release()) {
        wanted.push(Capability::SysResource);
    }
    wanted
}

/// Whether kernel `release` charges BPF map memory to RLIMIT_MEMLOCK (before 5.11).
fn memlock_charged(release: &str) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) < (5, 11)
}

/// Whether a cgroup mount under /sys/fs/cgroup shows the host's whole hierarchy: its root is
/// `/` in the host's cgroup namespace, or an ancestor of a private namespace's root (`/..`).
/// A runtime's own mount shows only the container's cgroup (`/libpod_parent/libpod-…`, or `/`
/// in a namespace of its own).
fn hosts_cgroups(mountinfo: &str, host_cgroup_ns: bool) -> bool {
    mountinfo.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let fstype = fields
            .iter()
            .position(|f| *f == "-")
            .and_then(|i| fields.get(i + 1));
        let cgroup = matches!(fstype, Some(&"cgroup") | Some(&"cgroup2"));
        let (Some(root), Some(at)) = (fields.get(3), fields.get(4)) else {
            return false;
        };
        let whole = if *root == "/" {
            host_cgroup_ns
        } else {
            root.split('/').skip(1).all(|p| p == "..")
        };
        cgroup && at.starts_with("/sys/fs/cgroup") && whole
    })
}

/// Whether `dir`, or its parent where `dir` is missing, can be written (a read-only root file
/// system says EROFS even to root).
fn writable(dir: &str) -> bool {
    let path = Path::new(dir);
    let at = if path.exists() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let Ok(c) = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Whether `bpf(BPF_MAP_CREATE)` of a one-element array fails with EPERM under a seccomp
/// filter: with the capabilities held, only the filter refuses it.
fn seccomp_refuses_bpf() -> bool {
    let filtered = crate::procfs::own::status().is_some_and(|s| {
        s.lines()
            .any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "2"))
    });
    if !filtered {
        return false;
    }
    // map_type, key_size, value_size, max_entries, map_flags: BPF_MAP_TYPE_ARRAY of one u32.
    let attr: [u32; 5] = [2, 4, 4, 1, 0];
    // SAFETY: the kernel reads `size_of_val(&attr)` bytes of `attr`, which lives for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            0, // BPF_MAP_CREATE
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if fd >= 0 {
        // SAFETY: `fd` is the descriptor the call above returned, closed once.
        unsafe { libc::close(fd as i32) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_cgroup_hierarchy_is_told_from_a_containers_own() {
        let host = "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert!(hosts_cgroups(host, true));
        // The same root in a cgroup namespace of its own is the container's cgroup.
        assert!(!hosts_cgroups(host, false));
        // podman's bind of the container's own cgroup (cgroupns=host).
        let own =
            "87 86 0:29 /libpod_parent/libpod-0b47 /sys/fs/cgroup/cpu ro - cgroup cgroup rw\n";
        assert!(!hosts_cgroups(own, true));
        // The host's hierarchy seen from a private namespace: its root is an ancestor.
        let above = "40 30 0:26 /../../.. /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert!(hosts_cgroups(above, false));
        // Not a cgroup file system.
        assert!(!hosts_cgroups(
            "86 73 0:46 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n",
            true
        ));
    }

    #[test]
    fn memlock_is_charged_before_5_11() {
        assert!(memlock_charged("5.10.0-30-amd64"));
        assert!(memlock_charged("4.19.0"));
        assert!(!memlock_charged("5.11.0"));
        assert!(!memlock_charged("6.18.44-fc-v1300"));
    }

    #[test]
    fn gaps_are_said_in_the_manifests_words() {
        let cap = Gap::Capability { name: "SYSLOG" };
        assert_eq!(cap.manifest(), "securityContext.capabilities.add: [SYSLOG]");
        assert!(cap.line().contains("kallsyms"));
        assert_eq!(Gap::HostPid.manifest(), "spec.hostPID: true");
        let btf = Gap::HostPath {
            path: "/sys/kernel/btf",
        };
        assert!(btf.manifest().contains("hostPath: {path: /sys/kernel/btf}"));
    }
}
