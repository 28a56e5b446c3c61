//! The privileges checked before anything is loaded: capabilities, not the user id, so a
//! non-root process given the capabilities fdprof needs is let through.

use std::path::Path;

use anyhow::{Context, Result};

/// A capability fdprof may need, with its bit number in the kernel's capability sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    SysPtrace = 19,
    SysAdmin = 21,
    SysResource = 24,
    Syslog = 34,
    Perfmon = 38,
    Bpf = 39,
}

impl Capability {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Capability::SysPtrace => "CAP_SYS_PTRACE",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
            Capability::SysResource => "CAP_SYS_RESOURCE",
            Capability::Syslog => "CAP_SYSLOG",
            Capability::Perfmon => "CAP_PERFMON",
            Capability::Bpf => "CAP_BPF",
        }
    }

    /// As a pod spec names it (`securityContext.capabilities.add`).
    pub(crate) fn manifest_name(self) -> &'static str {
        self.name().trim_start_matches("CAP_")
    }

    fn held(self, effective: u64) -> bool {
        effective & (1 << self as u32) != 0
    }
}

/// What loading and attaching BPF tracing programs takes.
pub const LOAD_BPF: [Capability; 2] = [Capability::Bpf, Capability::Perfmon];

/// The capabilities of `needed` that the effective set `effective` (a `CapEff` bit mask) lacks.
/// CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON (kernels since 5.8 accept it for both).
pub(crate) fn missing(effective: u64, needed: &[Capability]) -> Vec<Capability> {
    let admin = Capability::SysAdmin.held(effective);
    needed
        .iter()
        .copied()
        .filter(|&c| !c.held(effective))
        .filter(|&c| !(admin && LOAD_BPF.contains(&c)))
        .collect()
}

/// The effective capability set of the calling thread (`CapEff` of `/proc/thread-self/status`).
pub(crate) fn effective() -> Result<u64> {
    let status =
        crate::procfs::own::thread_status().context("cannot read /proc/thread-self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .context("no CapEff line in /proc/thread-self/status")
}

fn sysctl(name: &str) -> Option<i64> {
    crate::procfs::kernel_setting(name)?.parse().ok()
}

/// Whether `/proc/kallsyms` shows symbol addresses only to CAP_SYSLOG, as the kernel decides
/// (`kallsyms_show_value`): with `kptr_restrict` 1, or 0 with `perf_event_paranoid` above 1.
/// With `kptr_restrict` 2 it shows them to no one, which the kallsyms reader reports.
pub fn kallsyms_needs_syslog() -> bool {
    match sysctl("kptr_restrict") {
        Some(0) => sysctl("perf_event_paranoid").is_none_or(|p| p > 1),
        Some(1) => true,
        _ => false,
    }
}

fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO`): the host's.
pub(crate) const HOST_PID_NS: u64 = 0xEFFF_FFFC;

/// Whether this process runs in a container: a pid namespace of its own, a root directory
/// other than the host's init's (seen through `/proc/1/root` where the pid namespace is the
/// host's), or a runtime's variable (podman's `container`, every pod's
/// `KUBERNETES_SERVICE_HOST`). Not marker files: hosts built from container images keep
/// `/.dockerenv`.
pub(crate) fn in_container() -> bool {
    use std::os::unix::fs::MetadataExt;
    let variable = ["container", "KUBERNETES_SERVICE_HOST"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let own_pid_ns = namespace("pid").is_some_and(|n| n != HOST_PID_NS);
    let id = |m: std::fs::Metadata| (m.dev(), m.ino());
    let other_root = match (
        std::fs::metadata("/"),
        std::fs::metadata(crate::procfs::in_root(1, Path::new("/"))),
    ) {
        (Ok(own), Ok(init)) => id(own) != id(init),
        _ => false,
    };
    variable || own_pid_ns || other_root
}

/// The inode of this process's namespace of `kind` (`/proc/self/ns/KIND` reads `kind:[N]`).
pub(crate) fn namespace(kind: &str) -> Option<u64> {
    let link = crate::procfs::own::namespace(kind)?;
    link.to_str()?
        .strip_prefix(kind)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// What a command needs and this process lacks. Exit code 2, like a usage error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPrivileges {
    pub(crate) command: String,
    pub(crate) needed: Vec<Capability>,
    pub(crate) lacking: Vec<Capability>,
    /// Whether fdprof runs in a container: then the pod spec, not sudo, gives them.
    pub(crate) in_container: bool,
}

impl std::fmt::Display for MissingPrivileges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names =
            |caps: &[Capability]| and_list(&caps.iter().map(|c| c.name()).collect::<Vec<_>>());
        write!(
            f,
            "{} needs {} (missing: {}); ",
            self.command,
            names(&self.needed),
            names(&self.lacking)
        )?;
        if self.in_container {
            let added: Vec<&str> = self.lacking.iter().map(|c| c.manifest_name()).collect();
            write!(
                f,
                "in a container, add securityContext.capabilities.add: [{}] to its pod spec",
                added.join(", ")
            )
        } else {
            write!(f, "run it as root, e.g. with sudo")
        }
    }
}

impl std::error::Error for MissingPrivileges {}

/// Fails with [`MissingPrivileges`] unless the effective set holds `needed`.
pub fn require(what: &str, needed: &[Capability]) -> Result<()> {
    let lacking = missing(effective()?, needed);
    if lacking.is_empty() {
        return Ok(());
    }
    Err(MissingPrivileges {
        command: what.to_string(),
        needed: needed.to_vec(),
        lacking,
        in_container: in_container(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_capabilities_are_named() {
        let bit = |c: Capability| 1u64 << c as u32;
        assert_eq!(missing(0, &LOAD_BPF), LOAD_BPF);
        assert_eq!(
            missing(bit(Capability::Bpf), &LOAD_BPF),
            [Capability::Perfmon]
        );
        let both = bit(Capability::Bpf) | bit(Capability::Perfmon);
        assert!(missing(both, &LOAD_BPF).is_empty());
        // CAP_SYS_ADMIN implies CAP_BPF and CAP_PERFMON, not CAP_SYSLOG.
        let with_syslog = [Capability::Bpf, Capability::Perfmon, Capability::Syslog];
        assert_eq!(
            missing(bit(Capability::SysAdmin), &with_syslog),
            [Capability::Syslog]
        );
        // Root's usual set (here without CAP_SYS_RESOURCE) has them all.
        assert!(missing(0x1fffeffffff, &with_syslog).is_empty());
        assert_eq!(and_list(&["A", "B", "C"]), "A, B and C");
        let in_a_pod = MissingPrivileges {
            command: "fdprof daemon".into(),
            needed: with_syslog.to_vec(),
            lacking: vec![Capability::Syslog, Capability::Bpf],
            in_container: true,
        };
        assert!(
            in_a_pod
                .to_string()
                .ends_with("add securityContext.capabilities.add: [SYSLOG, BPF] to its pod spec"),
            "{in_a_pod}"
        );
        assert_eq!(and_list(&["A", "B"]), "A and B");
    }
}
