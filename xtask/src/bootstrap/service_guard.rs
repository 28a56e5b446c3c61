//! Installing a package must not leave its service running: the tests start their own
//! Prometheus on a free loopback port, and a packaged one on :9090 would only be in the way.
//!
//! Debian's maintainer scripts ask `/usr/sbin/policy-rc.d` before starting a service
//! (invoke-rc.d and deb-systemd-invoke both do); exit status 101 means "action forbidden". A
//! policy the machine already has (Docker images ship one) is moved aside and put back.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

const POLICY: &str = "/usr/sbin/policy-rc.d";
const SAVED_POLICY: &str = "/usr/sbin/policy-rc.d.fdprof-bootstrap-saved";
const FORBID_ALL: &str = "#!/bin/sh\n\
    # Written by `cargo xtask bootstrap` for the duration of one apt-get install: no service\n\
    # starts. Removed when the install ends.\n\
    exit 101\n";

/// Packages that ship a service, and its systemd unit.
const PACKAGED_SERVICES: &[(&str, &str)] = &[
    ("prometheus", "prometheus.service"),
    ("nginx", "nginx.service"),
    ("redis-server", "redis-server.service"),
];

/// While alive, `/usr/sbin/policy-rc.d` forbids every service start. Dropping it (also on a
/// panic) restores what was there before.
pub(super) struct NoServiceStarts {
    restored: bool,
}

impl NoServiceStarts {
    pub(super) fn install() -> Result<Self> {
        if Path::new(SAVED_POLICY).exists() {
            bail!(
                "{SAVED_POLICY} exists (left by an interrupted bootstrap): move it back to {POLICY} \
                 if it is the machine's own policy, else delete it, then run bootstrap again"
            );
        }
        if Path::new(POLICY).exists() {
            fs::rename(POLICY, SAVED_POLICY)
                .with_context(|| format!("cannot move {POLICY} aside"))?;
        }
        let guard = NoServiceStarts { restored: false };
        fs::write(POLICY, FORBID_ALL).with_context(|| format!("cannot write {POLICY}"))?;
        fs::set_permissions(POLICY, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {POLICY} executable"))?;
        Ok(guard)
    }

    /// Removes the forbidding policy and puts back the machine's own, if it had one.
    pub(super) fn restore(mut self) -> Result<()> {
        self.restored = true;
        restore_policy()
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        if !self.restored
            && let Err(err) = restore_policy()
        {
            eprintln!("[bootstrap] {err:#}");
        }
    }
}

fn restore_policy() -> Result<()> {
    match fs::remove_file(POLICY) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {POLICY}")),
    }
    if Path::new(SAVED_POLICY).exists() {
        fs::rename(SAVED_POLICY, POLICY)
            .with_context(|| format!("cannot move {SAVED_POLICY} back to {POLICY}"))?;
    }
    Ok(())
}

fn systemd_is_init() -> bool {
    fs::read_to_string("/proc/1/comm").is_ok_and(|comm| comm.trim() == "systemd")
}

/// On a systemd host, the packages' postinst enabled their units (started at next boot): stop
/// and disable those of `just_installed`. Without systemd as PID 1 nothing starts them.
pub(super) fn disable_packaged_services(just_installed: &[&str]) -> Result<()> {
    let units = PACKAGED_SERVICES
        .iter()
        .filter(|(package, _)| just_installed.contains(package))
        .map(|(_, unit)| *unit);
    for unit in units {
        if !systemd_is_init() {
            eprintln!(
                "[bootstrap] {unit}: not started (systemd is not PID 1, policy-rc.d forbade it)"
            );
            continue;
        }
        let status = Command::new("systemctl")
            .args(["disable", "--now", unit])
            .status()
            .context("cannot run systemctl")?;
        if !status.success() {
            bail!("systemctl disable --now {unit} failed ({status})");
        }
        eprintln!("[bootstrap] {unit}: stopped and disabled (the tests run their own)");
    }
    Ok(())
}
