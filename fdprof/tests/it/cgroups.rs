//! `--cgroup PATH`: the processes of a cgroup this test makes, under the v2 hierarchy and under
//! a v1 one: the process in it at the start, one moved in mid-recording (counted from the move,
//! with no wait for a re-read), one forked inside while recording, and none of a process
//! outside; and paths that are not cgroups refused before anything is attached.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// A cgroup made for one test, removed when dropped (once its processes have ended).
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(hierarchy: &Path, name: &str) -> TestCgroup {
        let dir = hierarchy.join(format!("fdprof-test-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot make {dir:?}: {e}"));
        TestCgroup(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Moves process `pid` (all its threads) in.
    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let began = Instant::now();
        while std::fs::remove_dir(&self.0).is_err() && began.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The v2 hierarchy's mount: `/sys/fs/cgroup/unified` on a hybrid host, else `/sys/fs/cgroup`.
fn v2_hierarchy() -> PathBuf {
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.subtree_control").exists())
        .expect("a cgroup v2 hierarchy")
}

/// A v1 hierarchy (`pids`), where the host has one: this one does (hybrid).
fn v1_hierarchy() -> Option<PathBuf> {
    let pids = PathBuf::from("/sys/fs/cgroup/pids");
    pids.join("tasks").exists().then_some(pids)
}

/// A shell in `cgroup` that, once told to on its standard input, runs `socket-close --ops
/// ops` (a fork inside the cgroup) and prints the workload's pid.
fn forker(cgroup: &TestCgroup, ops: u64) -> Child {
    let script = format!(
        "read go; {} workload socket-close --ops {ops} > /dev/null & echo $!; wait",
        env!("CARGO_BIN_EXE_fdprof")
    );
    let child = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    cgroup.add(child.id());
    child
}

/// The processes of a report that made a socket, and how many each.
fn with_sockets(report: &Value) -> BTreeMap<u32, u64> {
    sockets_by_pid(report)
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
}

fn a_cgroup_is_recorded_exactly(hierarchy: &Path, name: &str) {
    let cgroup = TestCgroup::new(hierarchy, name);
    let (k_in, k_moved, k_forked, k_out) = (1000, 700, 400, 900);
    let inside = start_workload(&["socket-close", "--ops", &k_in.to_string()]);
    cgroup.add(inside.pid);
    let outside = start_workload(&["socket-close", "--ops", &k_out.to_string()]);
    let moved = start_workload(&["socket-close", "--ops", &k_moved.to_string()]);
    let mut forker = forker(&cgroup, k_forked);
    let out = tmp(&format!("{name}.data"));
    let rec = start_record(&["--cgroup", cgroup.path(), "-o", out.to_str().unwrap()]);

    // Moved in, then at once told to go: counted from the move, not from a later re-read.
    cgroup.add(moved.pid);
    moved.go();
    outside.go();
    inside.go();
    writeln!(forker.stdin.take().unwrap()).unwrap();
    let mut forked_pid = String::new();
    std::io::Read::read_to_string(forker.stdout.as_mut().unwrap(), &mut forked_pid).unwrap();
    assert!(forker.wait().unwrap().success());
    let forked: u32 = forked_pid.trim().parse().unwrap();
    let (in_pid, moved_pid) = (inside.pid, moved.pid);
    for (w, n) in [(inside, k_in), (moved, k_moved), (outside, k_out)] {
        assert_eq!(w.finish()["expected"]["fds_created"]["socket"], n);
    }
    stop_record(rec);

    let report = report_json(&[&out]);
    assert_eq!(report["target"]["kind"], "cgroup");
    let cgroup_path = report["target"]["cgroups"][0].as_str().unwrap().to_string();
    assert!(cgroup.path().ends_with(&cgroup_path), "{cgroup_path}");
    let expected = BTreeMap::from([(in_pid, k_in), (moved_pid, k_moved), (forked, k_forked)]);
    assert_eq!(with_sockets(&report), expected);
    // Narrowed by the cgroup path as /proc/PID/cgroup shows it: the processes that were read
    // while they lived (the one moved in may have ended first), none other.
    let narrowed = report_json(&[out.as_os_str(), "--cgroup".as_ref(), cgroup_path.as_ref()]);
    let kept = with_sockets(&narrowed);
    assert_eq!(kept.get(&in_pid), Some(&k_in), "{kept:?}");
    assert!(
        kept.iter().all(|(pid, n)| expected.get(pid) == Some(n)),
        "{kept:?}"
    );
    assert_no_programs_left();
}

fn stop_record(rec: Child) {
    // SAFETY: signalling the recorder this test started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    assert!(out.status.success());
}

#[test]
fn a_v2_cgroup_is_recorded_exactly() {
    require_root();
    let _guard = kernel_lock();
    a_cgroup_is_recorded_exactly(&v2_hierarchy(), "v2");
}

#[test]
fn a_v1_cgroup_is_recorded_exactly() {
    require_root();
    let _guard = kernel_lock();
    let Some(v1) = v1_hierarchy() else {
        eprintln!("no v1 pids hierarchy on this host: nothing to check");
        return;
    };
    a_cgroup_is_recorded_exactly(&v1, "v1");
}

#[test]
fn paths_that_are_not_cgroups_are_refused_before_attaching() {
    require_root();
    let _guard = kernel_lock();
    let link = tmp("cgroup-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let file = v2_hierarchy().join("cgroup.procs");
    let cases: [(&str, &str); 4] = [
        ("/sys/fs/cgroup/no-such-cgroup-here", "No such file"),
        ("/tmp", "not a cgroup"),
        (link.to_str().unwrap(), "not a cgroup"),
        (file.to_str().unwrap(), "not a cgroup"),
    ];
    // Bounded, should one be taken for a cgroup.
    for (command, bound) in [
        ("record", ["-d", "1s"]),
        ("top", ["--count", "1"]),
        ("daemon", ["--interval", "1s"]),
    ] {
        for (path, says) in cases {
            let out = run(fdprof().args([command, "--cgroup", path]).args(bound));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {path}: {stderr}");
            let line = one_line(&stderr);
            assert!(
                line.contains(says) && line.contains("--cgroup"),
                "{command}: {line}"
            );
            assert!(loaded_fdprof_programs().is_empty());
        }
    }
}
