//! Where each process runs ([`Identity`]): read from `/proc/PID/cgroup` and `/proc/PID/status`
//! once per process, while it lives, and kept in a bounded cache ([`Identities`]).

use std::collections::HashMap;

use fdprof_figures::{Container, Identity, Runtime};

use super::target::process_alive;

/// Processes whose identity is kept; past it the entries of processes gone are dropped, then
/// all (they are read again while their processes live).
pub(crate) const IDENTITIES: usize = 16_384;

/// Identities read, by pid. A pid reused by a new process is read anew when the kernel tells
/// of the start ([`Identities::started`]).
#[derive(Debug, Default)]
pub(crate) struct Identities {
    known: HashMap<u32, Identity>,
}

impl Identities {
    /// `pid`'s identity: cached, or read now if it lives; empty when it is gone.
    pub(crate) fn of(&mut self, pid: u32) -> Identity {
        if let Some(id) = self.known.get(&pid) {
            return id.clone();
        }
        self.read(pid)
    }

    /// Reads the identities of every process running now (within the bound): those that ran
    /// before a system-wide profile started.
    pub(crate) fn running(&mut self) {
        let pids = crate::procfs::pids(IDENTITIES);
        self.started(&pids);
    }

    /// Reads the identities of processes that just started (forked or exec'd), while they
    /// live.
    pub(crate) fn started(&mut self, pids: &[u32]) {
        for &pid in pids {
            self.read(pid);
        }
    }

    /// Drops the entries of processes known to have ended: a live view's, each interval, so
    /// that under churn the cache holds the processes alive, not the last thousands gone.
    pub(crate) fn forget(&mut self, pids: &[u32]) {
        for pid in pids {
            self.known.remove(pid);
        }
        // The room a burst of starts took goes with it.
        if self.known.capacity() > 4 * self.known.len().max(256) {
            self.known.shrink_to_fit();
        }
    }

    /// Drops the entries of processes gone, once past half the bound.
    pub(crate) fn trim(&mut self) {
        if self.known.len() > IDENTITIES / 2 {
            self.known.retain(|&pid, _| process_alive(pid));
        }
    }

    fn read(&mut self, pid: u32) -> Identity {
        let Some(id) = read(pid) else {
            return Identity::default();
        };
        if self.known.len() >= IDENTITIES {
            self.known.retain(|&pid, _| process_alive(pid));
            if self.known.len() >= IDENTITIES {
                self.known.clear();
            }
        }
        self.known.insert(pid, id.clone());
        id
    }
}

/// `pid`'s identity, `None` when it is gone.
pub(crate) fn read(pid: u32) -> Option<Identity> {
    let cgroup = crate::procfs::cgroup(pid)?;
    let status = crate::procfs::status(pid).unwrap_or_default();
    let mut id = of_cgroup_file(&cgroup);
    id.ns_pid = ns_pid(&status);
    Some(id)
}

/// The identity `/proc/PID/cgroup` gives: the path of the v2 line (`0::PATH`) where it names a
/// container, else of the first v1 line that does; with no container, the v2 path, or on a
/// hybrid host whose v2 line is the root, the `name=systemd` line's (where the unit shows) or
/// else the first v1 line's that is not the root.
pub(crate) fn of_cgroup_file(text: &str) -> Identity {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else {
            v1.push((controllers, path));
        }
    }
    let chosen = v2
        .filter(|p| container(p).is_some())
        .or_else(|| v1.iter().map(|&(_, p)| p).find(|p| container(p).is_some()))
        .or(v2.filter(|&p| p != "/" || v1.is_empty()))
        .or_else(|| {
            v1.iter()
                .find(|&&(c, p)| c == "name=systemd" && p != "/")
                .or_else(|| v1.iter().find(|&&(_, p)| p != "/"))
                .map(|&(_, p)| p)
        })
        .or(v2)
        .or_else(|| v1.first().map(|&(_, p)| p));
    let Some(path) = chosen else {
        return Identity::default();
    };
    Identity {
        cgroup: Some(path.to_string()),
        unit: unit(path),
        container: container(path),
        pod_uid: pod_uid(path),
        ns_pid: None,
    }
}

/// The innermost `*.service` or `*.scope` of a path.
pub(crate) fn unit(path: &str) -> Option<String> {
    path.rsplit('/')
        .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
        .map(str::to_string)
}

/// The innermost container a path names.
pub(crate) fn container(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').collect();
    parts.iter().enumerate().rev().find_map(|(i, part)| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let (runtime, id) = if let Some(id) = part.strip_prefix("libpod-") {
            (Runtime::Podman, id)
        } else if let Some(id) = part.strip_prefix("docker-") {
            (Runtime::Docker, id)
        } else if let Some(id) = part.strip_prefix("cri-containerd-") {
            (Runtime::Containerd, id)
        } else if let Some(id) = part.strip_prefix("crio-") {
            (Runtime::Crio, id)
        } else if i > 0 && parts[i - 1] == "docker" {
            (Runtime::Docker, part)
        } else {
            return None;
        };
        // `libpod-conmon-<id>` and `crio-conmon-<id>` hold the runtime's monitor, not the
        // container: they fail the hex test.
        is_container_id(id).then(|| Container {
            runtime,
            id: id.to_string(),
        })
    })
}

fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The Kubernetes pod UID a path names: `kubepods-…-pod<uid>.slice` (systemd driver, `_` for
/// `-`) or `/kubepods/…/pod<uid>` (cgroupfs driver).
pub(crate) fn pod_uid(path: &str) -> Option<String> {
    if !path.contains("kubepods") {
        return None;
    }
    path.split('/').find_map(|part| {
        let part = part.strip_suffix(".slice").unwrap_or(part);
        let uid = part.rsplit_once("pod").map(|(_, u)| u)?;
        let uid = uid.replace('_', "-");
        (uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')).then_some(uid)
    })
}

/// The innermost pid of `NSpid:` in `/proc/PID/status`, where it differs from the host's.
pub(crate) fn ns_pid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Vec<u32> = line
        .split_ascii_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    (pids.len() > 1).then(|| *pids.last().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1e9b2c4d5a6f708192a3b4c5d6e7f80112233445566778899aabbccddeeff0";

    #[test]
    fn podman_on_a_hybrid_host_is_named_by_its_v1_lines() {
        let text = format!(
            "9:name=systemd:/libpod_parent/libpod-{ID}\n8:pids:/libpod_parent/libpod-{ID}\n\
             4:memory:/libpod_parent/libpod-{ID}\n0::/\n"
        );
        let id = of_cgroup_file(&text);
        assert_eq!(
            id.cgroup.as_deref(),
            Some(&*format!("/libpod_parent/libpod-{ID}"))
        );
        let c = id.container.unwrap();
        assert_eq!(
            (c.runtime, c.id.as_str(), c.short_id()),
            (Runtime::Podman, ID, &ID[..12])
        );
    }

    #[test]
    fn the_v2_line_wins_where_it_names_a_container() {
        let text = format!("1:cpu:/other\n0::/system.slice/docker-{ID}.scope\n");
        let id = of_cgroup_file(&text);
        assert_eq!(id.container.unwrap().runtime, Runtime::Docker);
        assert_eq!(id.unit.as_deref(), Some(&*format!("docker-{ID}.scope")));
    }

    #[test]
    fn runtimes_and_pods_are_recognised() {
        let cases = [
            (format!("/docker/{ID}"), Some(Runtime::Docker)),
            (
                format!("/machine.slice/libpod-{ID}.scope/container"),
                Some(Runtime::Podman),
            ),
            (format!("/machine.slice/libpod-conmon-{ID}.scope"), None),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
                ),
                Some(Runtime::Containerd),
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/crio-{ID}.scope"
                ),
                Some(Runtime::Crio),
            ),
            ("/system.slice/nginx.service".into(), None),
        ];
        for (path, runtime) in cases {
            assert_eq!(container(&path).map(|c| c.runtime), runtime, "{path}");
        }
        let pod = format!("/kubepods/besteffort/pod1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d/{ID}");
        assert_eq!(
            pod_uid(&pod).as_deref(),
            Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
        );
        let slice =
            "/kubepods.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice";
        assert_eq!(
            pod_uid(slice).as_deref(),
            Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
        );
        assert_eq!(pod_uid("/system.slice/pod.service"), None);
    }

    #[test]
    fn a_hybrid_host_names_the_unit_from_its_systemd_line() {
        let text = "9:name=systemd:/system.slice/nginx.service\n1:cpu:/\n0::/\n";
        let id = of_cgroup_file(text);
        assert_eq!(id.cgroup.as_deref(), Some("/system.slice/nginx.service"));
        assert_eq!(id.unit.as_deref(), Some("nginx.service"));
        assert_eq!(
            of_cgroup_file("0::/user.slice\n").cgroup.as_deref(),
            Some("/user.slice")
        );
    }

    #[test]
    fn a_hybrid_host_names_a_v1_only_cgroup_by_its_v1_line() {
        let v1_only = "9:name=systemd:/\n8:pids:/batch\n0::/\n";
        assert_eq!(of_cgroup_file(v1_only).cgroup.as_deref(), Some("/batch"));
        let root = "9:name=systemd:/\n8:pids:/\n0::/\n";
        assert_eq!(of_cgroup_file(root).cgroup.as_deref(), Some("/"));
    }

    #[test]
    fn ns_pid_is_the_innermost_where_it_differs() {
        assert_eq!(ns_pid("Name:\tx\nNSpid:\t4242\t1\n"), Some(1));
        assert_eq!(ns_pid("NSpid:\t4242\n"), None);
    }

    #[test]
    fn this_process_is_read_and_cached() {
        let mut ids = Identities::default();
        let me = std::process::id();
        let id = ids.of(me);
        assert!(id.cgroup.is_some());
        assert_eq!(ids.of(me), id);
        assert!(ids.of(u32::MAX).is_empty());
    }
}
