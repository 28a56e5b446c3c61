//! A real container for the tests that follow workloads into containers: Debian's podman 4.3.1
//! on runc runs the fdprof binary's workload (`fdprof workload ... --json --wait-signal`) as the
//! container's PID 1, from a root file system directory the test builds (the binary, the shared
//! libraries `ldd` names for it and the loader: no image, no registry). Each container has a
//! directory of its own (the rootfs, podman's storage and state, its containers.conf), a unique
//! name and its own cgroup parent, so tests never share podman state and know the cgroup path
//! in advance. Dropping it removes the container, its cgroups and the directory.
//!
//! What this host needs: `--runtime runc` (crun refuses hybrid cgroups), `--cgroup-manager
//! cgroupfs`, and a containers.conf with `default_ulimits = []` (raising RLIMIT_NOFILE or
//! RLIMIT_NPROC is refused). `--network none` keeps the container on its own loopback.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PODMAN: &str = "/usr/bin/podman";
pub const RUNC: &str = "/usr/sbin/runc";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const FINISH_TIMEOUT: Duration = Duration::from_secs(60);
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether podman and runc are installed (`cargo xtask bootstrap` does not install them).
pub fn available() -> bool {
    Path::new(PODMAN).is_file() && Path::new(RUNC).is_file()
}

/// A running container whose workload waits for [`Container::go`].
pub struct Container {
    /// The attached `podman run`: the workload's stdout comes through it.
    child: Child,
    /// The workload's stdout lines after the ready line, read by a thread of their own so that
    /// waits can time out.
    lines: Receiver<String>,
    name: String,
    id: String,
    host_pid: u32,
    ns_pid: u32,
    /// Dropped after `Container::drop` has stopped everything that uses it.
    scratch: Scratch,
}

impl Container {
    /// Runs `fdprof workload ARGS --json --wait-signal` in a new container, attached with its
    /// stdout piped, and returns once the workload has printed its ready line.
    pub fn start(workload_args: &[&str]) -> Container {
        assert!(
            available(),
            "{PODMAN} or {RUNC} is missing: install Debian's podman and runc"
        );
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("fdprof-test-{}-{n}", std::process::id());
        // Short: podman refuses a --runroot longer than 50 bytes (its sockets' paths live there).
        let scratch = Scratch::new(std::env::temp_dir().join(&name));
        let dir = &scratch.0;
        assert!(
            dir.join("run").as_os_str().len() <= 50,
            "{} is too long a path for podman's runroot: set TMPDIR shorter",
            dir.display()
        );
        fs::write(
            dir.join("containers.conf"),
            "[containers]\ndefault_ulimits = []\n",
        )
        .unwrap();
        build_rootfs(&dir.join("rootfs"));

        let mut child = podman(dir)
            .args(["run", "--rm", "--name", &name, "--network", "none"])
            .arg("--cgroup-parent")
            .arg(format!("/{name}"))
            .arg("--cidfile")
            .arg(dir.join("cid"))
            .arg("--rootfs")
            .arg(dir.join("rootfs"))
            .args(["/fdprof", "workload"])
            .args(workload_args)
            .args(["--json", "--wait-signal"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // A file: read only for failure messages, so nothing has to drain it meanwhile.
            .stderr(fs::File::create(dir.join("podman-run.err")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {PODMAN}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // From here on, a failure drops the container, which removes it.
        let mut container = Container {
            child,
            lines,
            name,
            id: String::new(),
            host_pid: 0,
            ns_pid: 0,
            scratch,
        };
        container.wait_ready();
        container
    }

    fn wait_ready(&mut self) {
        let line = match self.lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no ready line after {READY_TIMEOUT:?}:\n{}", self.log())
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().unwrap();
                panic!(
                    "podman run exited ({status}) before the ready line:\n{}",
                    self.log()
                )
            }
        };
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("ready line {line:?}: {e}\n{}", self.log()));
        assert_eq!(ready["event"], "ready", "{line}");
        self.ns_pid = ready["pid"].as_u64().expect("ready pid") as u32;

        // podman writes the cidfile when it creates the container, before starting it.
        self.id = fs::read_to_string(self.scratch.0.join("cid"))
            .unwrap()
            .trim()
            .to_string();
        assert!(
            self.id.len() == 64 && self.id.bytes().all(|b| b.is_ascii_hexdigit()),
            "container id {:?}",
            self.id
        );
        self.host_pid = self
            .inspect("{{.State.Pid}}")
            .parse()
            .expect("podman inspect: State.Pid");
        // The host PID is the workload's only if its innermost PID is the one it reported.
        let status = fs::read_to_string(format!("/proc/{}/status", self.host_pid)).unwrap();
        let nspid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|pids| pids.split_whitespace().last())
            .expect("NSpid in /proc/PID/status");
        assert_eq!(nspid, self.ns_pid.to_string(), "{status}");
    }

    /// `podman inspect --format FORMAT` of this container. Retried for a while: once, right
    /// after the ready line, a fresh podman store answered "no such object".
    pub fn inspect(&self, format: &str) -> String {
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        loop {
            let out = super::run(podman(&self.scratch.0).args([
                "inspect",
                "--type",
                "container",
                "--format",
                format,
                &self.id,
            ]));
            if out.status.success() {
                return String::from_utf8(out.stdout).unwrap().trim().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "podman inspect {}: {}",
                self.id,
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The full (64 hex digit) container id.
    pub fn id(&self) -> String {
        self.id.clone()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The workload's PID on the host (in the initial PID namespace).
    pub fn host_pid(&self) -> u32 {
        self.host_pid
    }

    /// The workload's PID in the container, as its ready line reported it: 1.
    pub fn ns_pid(&self) -> u32 {
        self.ns_pid
    }

    /// The `--cgroup-parent` given to podman: `/NAME` below the root of every hierarchy.
    pub fn cgroup_parent(&self) -> String {
        format!("/{}", self.name)
    }

    /// The cgroup runc puts the workload in, the same path in every hierarchy (v1 and v2).
    pub fn cgroup_path(&self) -> String {
        format!("/{}/libpod-{}", self.name, self.id)
    }

    /// Lets the workload start its measured phase (SIGUSR1; as the container's PID 1 it gets
    /// it from the host because it handles it).
    pub fn go(&self) {
        // SAFETY: signalling the workload of the container this test started.
        let r = unsafe { libc::kill(self.host_pid as i32, libc::SIGUSR1) };
        assert_eq!(
            r,
            0,
            "kill {}: {}",
            self.host_pid,
            std::io::Error::last_os_error()
        );
    }

    /// Waits for the workload to exit and returns its summary (`--json`).
    pub fn finish(mut self) -> Value {
        let deadline = Instant::now() + FINISH_TIMEOUT;
        let mut out = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => out.push_str(&line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "workload not done after {FINISH_TIMEOUT:?}:\n{}",
                        self.log()
                    )
                }
            }
        }
        // Its stdout is closed: podman run has removed the container (--rm) and is exiting.
        let status = self.child.wait().unwrap();
        assert!(status.success(), "podman run: {status}\n{}", self.log());
        serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("workload result {out:?}: {e}\n{}", self.log()))
    }

    /// podman run's standard error so far (for failure messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.scratch.0.join("podman-run.err")).unwrap_or_default()
    }

    /// Whether the host PID is still the container's workload (and not a reused PID).
    fn workload_alive(&self) -> bool {
        self.host_pid != 0
            && fs::read_to_string(format!("/proc/{}/cgroup", self.host_pid))
                .is_ok_and(|c| c.contains(&self.cgroup_path()))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let dir = self.scratch.0.clone();
        // Stops it at once (SIGKILL: --time 0); --ignore: after finish() --rm has removed it.
        match podman(&dir)
            .args(["rm", "--force", "--ignore", "--time", "0", &self.name])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "podman rm {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("cannot run podman rm: {e}"),
        }
        // If podman could not stop it, its PID 1 is killed here: its PID namespace dies with it.
        if self.workload_alive() {
            // SAFETY: killing the workload of the container this test started.
            unsafe { libc::kill(self.host_pid as i32, libc::SIGKILL) };
        }
        // The attached podman run exits once the container is gone; our own child, by handle.
        if !wait_until(CLEANUP_TIMEOUT, || {
            self.child.try_wait().is_ok_and(|s| s.is_some())
        }) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // conmon, and the `podman container cleanup` it runs when the container exits, outlive
        // podman run for a moment and use the directory.
        if !wait_until(CLEANUP_TIMEOUT, || processes_using(&dir).is_empty()) {
            eprintln!(
                "processes still use {}: {:?}",
                dir.display(),
                processes_using(&dir)
            );
        }
        // podman leaves NAME and NAME/conmon (the conmon process's v1 cgroups) behind.
        remove_cgroups(&self.cgroup_parent());
    }
}

/// A container run detached (`podman run -d`) from arguments a test makes, with its own storage,
/// state and cgroup parent as [`Container`]'s; removed, with its cgroups and directory, when
/// dropped. The test's `prepare` gets the directory first (to load an image or make a root file
/// system there) and returns the arguments after `podman run -d --name N --cgroup-parent P`.
pub struct Detached {
    name: String,
    id: String,
    scratch: Scratch,
}

impl Detached {
    pub fn run(prefix: &str, prepare: impl FnOnce(&Path) -> Vec<String>) -> Detached {
        assert!(
            available(),
            "{PODMAN} or {RUNC} is missing: install Debian's podman and runc"
        );
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let scratch = Scratch::new(std::env::temp_dir().join(&name));
        let dir = scratch.0.clone();
        assert!(
            dir.join("run").as_os_str().len() <= 50,
            "{}: too long",
            dir.display()
        );
        fs::write(
            dir.join("containers.conf"),
            "[containers]\ndefault_ulimits = []\n",
        )
        .unwrap();
        let args = prepare(&dir);
        let mut container = Detached {
            name,
            id: String::new(),
            scratch,
        };
        // Files, not pipes: conmon, which outlives `podman run -d`, keeps what it inherited.
        let err = dir.join("podman-run.err");
        let status = container
            .podman()
            .args(["run", "-d", "--name", &container.name])
            .arg("--cgroup-parent")
            .arg(format!("/{}", container.name))
            .arg("--cidfile")
            .arg(dir.join("cid"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap())
            .status()
            .unwrap_or_else(|e| panic!("cannot start {PODMAN}: {e}"));
        assert!(
            status.success(),
            "podman run {args:?}: {}",
            fs::read_to_string(&err).unwrap_or_default()
        );
        container.id = fs::read_to_string(dir.join("cid"))
            .unwrap()
            .trim()
            .to_string();
        container
    }

    /// podman on this container's storage and state.
    pub fn podman(&self) -> Command {
        podman(&self.scratch.0)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// What it printed so far (stdout and stderr).
    pub fn logs(&self) -> String {
        let out = super::run(self.podman().args(["logs", &self.id]));
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// The cgroup runc puts it in, the same path in every hierarchy (v1 and v2).
    pub fn cgroup_path(&self) -> String {
        format!("/{}/libpod-{}", self.name, self.id)
    }

    /// Waits until it has exited; its exit code.
    pub fn wait(&self) -> i64 {
        let out = super::run(self.podman().args(["wait", &self.id]));
        assert!(
            out.status.success(),
            "podman wait: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Its first process's PID on the host.
    pub fn host_pid(&self) -> u32 {
        let out = super::run(self.podman().args([
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Pid}}",
            &self.id,
        ]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no pid for {}: {}", self.name, self.logs()))
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let dir = self.scratch.0.clone();
        let _ = self
            .podman()
            .args(["rm", "--force", "--ignore", "--time", "0", &self.name])
            .output();
        if !wait_until(CLEANUP_TIMEOUT, || processes_using(&dir).is_empty()) {
            eprintln!(
                "processes still use {}: {:?}",
                dir.display(),
                processes_using(&dir)
            );
        }
        remove_cgroups(&format!("/{}", self.name));
    }
}

/// A root file system at `rootfs` holding `bin` at `at` (an absolute path inside), its shared
/// libraries and loader at the paths `ldd` gives, and the directories podman and runc mount on.
pub fn rootfs_with(bin: &Path, rootfs: &Path, at: &str) {
    for dir in ["proc", "sys", "dev", "tmp", "etc"] {
        fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
    place(bin, &rootfs.join(at.trim_start_matches('/')));
    for lib in shared_libraries(bin) {
        place(&lib, &rootfs.join(lib.strip_prefix("/").unwrap()));
    }
}

/// The container's directory, removed when dropped unless something is still mounted in it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: PathBuf) -> Scratch {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Never delete through a mount (podman mounts the container's /dev/shm in here while
        // it runs): leave the directory if one is left.
        let inside: Vec<PathBuf> = mounts()
            .into_iter()
            .map(|(_, point)| point)
            .filter(|point| point.starts_with(&self.0))
            .collect();
        if inside.is_empty() {
            let _ = fs::remove_dir_all(&self.0);
        } else {
            eprintln!("left {} in place: mounts {inside:?}", self.0.display());
        }
    }
}

/// podman with the container's own storage, state and configuration in `dir`.
pub fn podman(dir: &Path) -> Command {
    let mut cmd = Command::new(PODMAN);
    cmd.env("CONTAINERS_CONF", dir.join("containers.conf"))
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--runroot")
        .arg(dir.join("run"))
        .arg("--tmpdir")
        .arg(dir.join("tmp"))
        // No image layers with --rootfs; vfs, unlike overlay, mounts nothing in the directory.
        .args(["--storage-driver", "vfs"])
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    cmd
}

/// The container's root: the fdprof binary as /fdprof ([`rootfs_with`]).
fn build_rootfs(rootfs: &Path) {
    rootfs_with(Path::new(env!("CARGO_BIN_EXE_fdprof")), rootfs, "/fdprof");
}

/// The absolute paths `ldd` lists for `bin`: its libraries and the dynamic loader
/// (linux-vdso.so.1 has none).
fn shared_libraries(bin: &Path) -> Vec<PathBuf> {
    let out = super::run(Command::new("ldd").arg(bin));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ldd {}: {text}", bin.display());
    assert!(!text.contains("not found"), "ldd {}: {text}", bin.display());
    text.lines()
        .filter_map(|line| line.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect()
}

/// Hard-links `from` at `to` (the debug binary is large), copying across file systems. Symlinks
/// are resolved first: the loader's path is one, to a path absent from the rootfs.
fn place(from: &Path, to: &Path) {
    let real = fs::canonicalize(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    if fs::hard_link(&real, to).is_err() {
        fs::copy(&real, to).unwrap_or_else(|e| panic!("copy {}: {e}", real.display()));
    }
}

/// `(file system type, mount point)` of every mount this process sees.
fn mounts() -> Vec<(String, PathBuf)> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            let point = fields.split(' ').nth(4)?;
            let fstype = rest.split(' ').next()?;
            Some((fstype.to_string(), PathBuf::from(point)))
        })
        .collect()
}

/// Removes `parent` and the cgroups below it from every hierarchy (v1 controllers and v2).
/// A cgroup is busy while a process is in it: retried until its last one has exited.
fn remove_cgroups(parent: &str) {
    let relative = parent.trim_start_matches('/');
    for (_, root) in mounts()
        .into_iter()
        .filter(|(fstype, _)| fstype == "cgroup" || fstype == "cgroup2")
    {
        let dir = root.join(relative);
        if !wait_until(CLEANUP_TIMEOUT, || remove_cgroup_tree(&dir)) {
            eprintln!("cannot remove cgroup {}", dir.display());
        }
    }
}

/// Removes the cgroup `dir` and its children (rmdir, deepest first); true once it is gone.
fn remove_cgroup_tree(dir: &Path) -> bool {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
    !dir.exists()
}

/// PIDs of the processes whose command line names a path in `dir` (conmon, podman).
fn processes_using(dir: &Path) -> Vec<u32> {
    let mut needle = dir.as_os_str().as_bytes().to_vec();
    needle.push(b'/');
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_slice()))
        })
        .collect()
}

/// Polls `done` every 20 ms until it holds (true) or `timeout` has passed (false).
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
