//! The DaemonSet's pod as a user other than root: its daemon runs as the template's uid and gid
//! with its capabilities from the image's file capabilities (none ambient), and nothing in the
//! pod can write a root-owned host file through `/proc/PID/root` of a root process of the host
//! (hostPID: the host's root directory): neither a program exec'd in the running pod (Debian's
//! static busybox, bind-mounted read-only) nor fdprof itself (`record -o` into a root-owned host
//! directory). As a contrast, the same write from a root container holding only SYS_PTRACE (the
//! DaemonSet as it was) succeeds. The root process is one the test starts (`sleep`), not PID 1:
//! where the tests run, PID 1 holds a capability the tests' bounding set lacks, so not even
//! root may open its `/proc/1/root`; on a node, `/proc/1/root` is the same directory.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::credentials::runs_as_the_templates_user_with_file_capabilities;
use crate::common::daemon::poll;
use crate::common::podman::{Detached, podman};
use crate::common::prometheus::free_loopback_addr;
use crate::common::*;
use crate::pod::{image_archive, pod_template, podman_args, token_volume};

/// Debian's busybox-static: runs in an image with no libc.
const BUSYBOX: &str = "/bin/busybox";
const BUSYBOX_AT: &str = "/usr/bin/busybox";

/// A directory of the test's own on the host, root's and 0755, holding `target`: root's, 0644.
struct HostFiles(PathBuf);

impl HostFiles {
    fn new() -> HostFiles {
        let dir = std::env::temp_dir().join(format!("fdprof-escape-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "original\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        std::os::unix::fs::chown(&target, Some(0), Some(0)).unwrap();
        HostFiles(dir)
    }

    /// `name` in the directory as a process in a hostPID container reaches it: through the
    /// root directory of the host's process `pid`.
    fn through(&self, pid: u32, name: &str) -> String {
        format!("/proc/{pid}/root{}", self.0.join(name).display())
    }

    fn target(&self) -> String {
        std::fs::read_to_string(self.0.join("target")).unwrap()
    }
}

impl Drop for HostFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test's root process of the host, killed (by its pid) when dropped.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn nothing_in_the_pod_writes_a_root_owned_host_file_through_proc_pid_root() {
    require_root();
    assert!(
        Path::new(BUSYBOX).is_file(),
        "{BUSYBOX}: install busybox-static"
    );
    let _guard = kernel_lock();
    let host = HostFiles::new();
    // A root process of the host, in the host's mount namespace.
    let sleeper = Sleeper(
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap(),
    );
    let pid = sleeper.0.id();
    let archive = image_archive();
    let template = pod_template();
    let token = "0123456789abcdef0123456789abcdef".repeat(2);
    let addr = free_loopback_addr();
    let busybox = format!("--volume={BUSYBOX}:{BUSYBOX_AT}:ro");
    let pod = Detached::run("fdprof-escape", |dir| {
        let loaded = run(podman(dir).args(["load", "-i"]).arg(&archive));
        assert!(loaded.status.success(), "{}", text(&loaded));
        let secret = token_volume(&template, dir, &token);
        let mut args = vec![busybox.clone()];
        args.extend(podman_args(&template, &secret, &addr.to_string()));
        args
    });
    let attached = poll(Duration::from_secs(90), || {
        let logs = pod.logs();
        logs.contains("profiling every process")
            .then_some(())
            .ok_or(logs)
    });
    if let Err(logs) = attached {
        panic!("the pod's daemon never attached:\n{logs}");
    }
    runs_as_the_templates_user_with_file_capabilities(&template, &pod);
    let exec = |args: &[&str]| run(pod.podman().arg("exec").arg(pod.id()).args(args));

    // A shell exec'd in the pod, as `kubectl exec` would start it.
    let write = format!("echo written >> {}", host.through(pid, "target"));
    let shell = exec(&[BUSYBOX_AT, "sh", "-c", &write]);
    let status = exec(&[BUSYBOX_AT, "grep", "^Cap\\|^Uid", "/proc/self/status"]);
    assert!(
        !shell.status.success(),
        "a shell in the pod wrote a root-owned host file: {}\n{}",
        text(&shell),
        text(&status)
    );
    assert_eq!(host.target(), "original\n");
    let create = format!("echo created > {}", host.through(pid, "created"));
    assert!(!exec(&[BUSYBOX_AT, "sh", "-c", &create]).status.success());

    // fdprof itself, with its file capabilities: it may read through /proc/PID/root, not write.
    let out = host.through(pid, "recording");
    let record = exec(&["/usr/bin/fdprof", "record", "-a", "-d", "1s", "-o", &out]);
    assert!(
        !record.status.success(),
        "fdprof record wrote into a root-owned host directory: {}",
        text(&record)
    );
    assert!(!host.0.join("recording").exists());
    let read = exec(&[BUSYBOX_AT, "cat", &host.through(pid, "target")]);
    eprintln!(
        "in the pod: the write {}; record -o: {}; a plain read by the shell: {}; the shell's \
         credentials: {}",
        text(&shell).trim(),
        text(&record).trim(),
        text(&read).trim(),
        text(&status)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );

    // The contrast: a root container with SYS_PTRACE alone (and hostPID) writes it.
    let image = template["containers"][0]["image"].as_str().unwrap();
    let root = run(pod
        .podman()
        .args([
            "run",
            "--rm",
            "--pid=host",
            "--network=none",
            "--cap-drop=all",
        ])
        .args(["--cap-add=SYS_PTRACE", "--user=0:0", &busybox])
        .args(["--entrypoint", BUSYBOX_AT, image, "sh", "-c", &write]));
    drop(sleeper);
    assert!(root.status.success(), "{}", text(&root));
    assert_eq!(host.target(), "original\nwritten\n");
    drop(pod);
    assert_no_programs_left();
}
