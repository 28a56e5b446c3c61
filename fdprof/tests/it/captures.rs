//! The daemon as a flight recorder (`--capture-on`), for real: a contended target's episode
//! is captured once, with the intervals around it, and the capture's counts are the daemon's
//! own stream's; the rate limit and `--capture-max` hold; a directory others could change is
//! refused; a full disk is an error line and the daemon goes on.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::common::daemon::{Daemon, capture_dir, fdprof_as, settled, sse_events};
use crate::common::{
    Waiting, assert_no_programs_left, fdprof, kernel_lock, one_line, require_root, run,
    start_workload_with,
};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

fn workload_as(comm: &str, args: &[&str]) -> Waiting {
    start_workload_with(fdprof_as(comm), args)
}

/// The capture files in `dir`, by name.
fn captures_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".data"))
        .collect();
    names.sort();
    names
}

/// `socket` calls in an interval's (or a report's) `syscalls`.
fn sockets(report: &Value) -> u64 {
    common::syscall(report, "socket").map_or(0, |s| s["calls"].as_u64().unwrap())
}

#[test]
fn an_episode_is_captured_once_with_the_intervals_around_it() {
    require_root();
    let _guard = kernel_lock();
    let dir = capture_dir("captures-episode");
    let (loud, quiet) = ("fdpc-loud", "fdpc-quiet");
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        loud,
        quiet,
        "--interval",
        "250ms",
        "--capture-on",
        "shared-table",
        "--capture-dir",
        dir.to_str().unwrap(),
        "--capture-window",
        "2s",
        "--capture-after",
        "4s",
    ]);
    let contended = workload_as(loud, &["opensock", "-t", "2", "-n", "4000", "-d", "3s"]);
    let calm = workload_as(quiet, &["socket-close", "-t", "1", "--ops", "20000"]);
    for w in [&contended, &calm] {
        daemon.wait_line("INFO", &format!("profiling pid {}", w.pid));
    }
    // Every interval of the daemon's stream from before the episode until after its capture.
    let addr = daemon.addr;
    let stream = std::thread::spawn(move || sse_events(addr, "/api/v1/stream", "interval", 48));
    let told = std::thread::spawn(move || sse_events(addr, "/api/v1/stream", "capture", 1));
    // The quiet target's burst first (alone: two CPUs are all there is for the contended
    // one's two threads), then quiet intervals: the capture must hold some from before the
    // rule fired.
    calm.go();
    let calm_result = calm.finish();
    std::thread::sleep(Duration::from_millis(2500));
    contended.go();
    let line = daemon.wait_line("INFO", "capture: wrote");
    let loud_result = contended.finish();
    let told: Value = serde_json::from_str(&told.join().unwrap().unwrap()[0]).unwrap();
    let intervals: Vec<Value> = stream
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()))
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    // The episode lasts 3 s, the rate limit 10 minutes: one capture, none for the quiet one
    // (which was followed: its sockets are in the daemon's figures).
    let quiet_sockets =
        format!("fdprof_fd_allocations_total{{target=\"{quiet}\",syscall=\"socket\"}}");
    assert_eq!(daemon.metric(&quiet_sockets), calm_result["ops"].as_f64());
    let names = captures_in(&dir);
    assert_eq!(names.len(), 1, "{names:?}\n{}", daemon.log());
    let name = &names[0];
    assert!(
        name.ends_with(&format!("-{loud}-shared-table.data")),
        "{name}"
    );
    assert!(
        name.starts_with("20") && name.as_bytes()[8] == b'T',
        "{name}"
    );
    let path = dir.join(name);
    assert!(line.contains(path.to_str().unwrap()), "{line}");
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(told["name"], name.as_str());
    assert_eq!(told["target"], loud);
    assert_eq!(told["rule"], "shared-table");

    // A recording like any other: its totals carry the diagnosis that fired it.
    let report = common::report_json(&[path.as_os_str()]);
    let rules: Vec<&str> = report["diagnosis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"shared-table"), "{rules:?}");

    // Its stacks drawn, as any recording's.
    let svg = dir.with_extension("svg");
    let drawn = run(fdprof().arg("flamegraph").arg(&path).arg("-o").arg(&svg));
    assert!(
        drawn.status.success(),
        "{}",
        String::from_utf8_lossy(&drawn.stderr)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("alloc_fd"));

    // Its intervals, played back, are the daemon's stream's for the same intervals, exactly.
    let out = run(fdprof().args(["top", "--from"]).arg(&path).arg("--jsonl"));
    let played: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fired = told["fired_unix_ms"].as_u64().unwrap();
    let at = |v: &Value| v["started_unix_ms"].as_u64().unwrap();
    assert!(
        played.iter().filter(|p| at(p) < fired).count() >= 4,
        "too few before"
    );
    assert!(
        played.iter().filter(|p| at(p) > fired).count() >= 2,
        "too few after"
    );
    assert_eq!(played.len(), told["intervals"].as_u64().unwrap() as usize);
    let loud_pid = contended_pid(&report, loud);
    let mut compared = 0;
    for p in &played {
        let Some(live) = intervals.iter().find(|i| at(i) == at(p)) else {
            continue;
        };
        let live_sockets = common::sockets_by_pid(live)
            .get(&loud_pid)
            .copied()
            .unwrap_or(0);
        assert_eq!(sockets(p), live_sockets, "interval at {}", at(p));
        let live_waits = live["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|q| q["pid"] == loud_pid)
            .and_then(|q| q["file_lock_count"].as_u64())
            .unwrap_or(0);
        assert_eq!(
            p["contention"]["file_lock_count"],
            live_waits,
            "at {}",
            at(p)
        );
        compared += 1;
    }
    assert_eq!(compared, played.len(), "intervals not in the stream");
    // The whole episode is in it (3 s, within 4 s after the first interval that fired).
    let made = loud_result["ops"].as_u64().unwrap();
    assert_eq!(sockets(&report), made);

    // Told everywhere: the counter, the listing, the file over HTTP.
    let series = format!("fdprof_captures_total{{target=\"{loud}\",rule=\"shared-table\"}}");
    assert_eq!(daemon.metric(&series), Some(1.0));
    let (code, listed) = daemon.get("/captures");
    assert_eq!(code, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["captures"][0]["name"], name.as_str());
    let (code, body) = daemon.get(&format!("/captures/{name}"));
    assert_eq!(code, 200);
    assert_eq!(body.as_bytes(), std::fs::read(&path).unwrap());
    assert_eq!(daemon.get("/captures/..%2Fdaemon.token").0, 404);
    assert_eq!(daemon.get_anonymous("/captures").0, 401);
    drop(daemon);
    assert_no_programs_left();
}

/// The pid of the process named `comm` in a report's processes.
fn contended_pid(report: &Value, comm: &str) -> u32 {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == comm)
        .and_then(|p| p["pid"].as_u64())
        .unwrap_or_else(|| panic!("no process {comm}")) as u32
}

#[test]
fn captures_keep_to_the_rate_limit_and_to_capture_max() {
    require_root();
    let _guard = kernel_lock();
    let dir = capture_dir("captures-bounds");
    // Not a capture: left alone however many captures come.
    std::fs::write(dir.join("notes.txt"), "mine\n").unwrap();
    let comm = "fdpc-often";
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--capture-on",
        "shared-table,slow-wait",
        "--slow",
        "1us",
        "--capture-dir",
        dir.to_str().unwrap(),
        "--capture-window",
        "500ms",
        "--capture-after",
        "250ms",
        "--capture-every",
        "1s",
        "--capture-max",
        "2",
    ]);
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "8s"]);
    daemon.wait_line("INFO", &format!("profiling pid {}", w.pid));
    let addr = daemon.addr;
    let told = std::thread::spawn(move || sse_events(addr, "/api/v1/stream", "capture", 6));
    // The stream is read before the first capture can come.
    std::thread::sleep(Duration::from_millis(500));
    w.go();
    let told: Vec<Value> = told
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()))
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    for rule in ["shared-table", "slow-wait"] {
        let fired: Vec<u64> = told
            .iter()
            .filter(|t| t["rule"] == rule)
            .map(|t| t["fired_unix_ms"].as_u64().unwrap())
            .collect();
        // Interval starts are whole milliseconds of a nanosecond clock: 1 ms of rounding.
        for pair in fired.windows(2) {
            assert!(pair[1] >= pair[0] + 999, "{rule} fired at {fired:?}");
        }
    }
    let counted = |rule: &str| {
        daemon
            .metric(&format!(
                "fdprof_captures_total{{target=\"{comm}\",rule=\"{rule}\"}}"
            ))
            .unwrap_or(0.0)
    };
    // Once the load has ended and no capture comes any more: each written is counted, and the
    // directory keeps the newest two, and what is not a capture.
    w.finish();
    let wrote = settled(TIMEOUT, Duration::from_secs(2), || {
        daemon.lines("INFO", "capture: wrote")
    })
    .unwrap_or_else(|| panic!("captures still coming\n{}", daemon.log()));
    assert!(wrote.len() >= 6, "{wrote:?}");
    assert_eq!(
        counted("shared-table") + counted("slow-wait"),
        wrote.len() as f64
    );
    let mut newest: Vec<String> = wrote[wrote.len() - 2..]
        .iter()
        .map(|l| {
            let path = l.split("capture: wrote ").nth(1).unwrap();
            let path = Path::new(path.split(" (").next().unwrap());
            path.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    newest.sort();
    assert_eq!(captures_in(&dir), newest);
    assert!(dir.join("notes.txt").exists());
    assert!(!daemon.lines("INFO", "capture: removed").is_empty());
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn a_capture_dir_others_could_change_is_refused() {
    require_root();
    let base = capture_dir("captures-refused");
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = base.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let link = base.join("link");
    std::os::unix::fs::symlink(&base, &link).unwrap();
    let file = base.join("file");
    std::fs::write(&file, "").unwrap();
    let missing = base.join("missing");
    for (dir, why) in [
        (&open, "writable by group or others (mode 0777)"),
        (&theirs, "owned by uid 65534, not root"),
        (&link, "a symbolic link"),
        (&file, "not a directory"),
        (&missing, "does not exist"),
    ] {
        let out = fdprof()
            .args([
                "daemon",
                "-a",
                "--capture-on",
                "shared-table",
                "--capture-dir",
            ])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", dir.display());
        let line = one_line(&stderr);
        assert!(
            line.contains("cannot capture into") && line.contains(why),
            "{line}"
        );
    }
    // A rule that is none, and a window longer than the daemon keeps.
    for (args, why) in [
        (
            &["--capture-on", "shared-tabel"][..],
            "no rule named \"shared-tabel\"",
        ),
        (
            &["--capture-on", "long-scans", "--capture-window", "10m"][..],
            "must fit",
        ),
    ] {
        let out = fdprof()
            .args(["daemon", "-a", "--capture-dir"])
            .arg(&base)
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        // clap's own error: its line, then a hint.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.lines().next().unwrap().contains(why), "{stderr}");
    }

    // A reload that names a bad directory keeps the old config.
    let _guard = kernel_lock();
    let config = base.join("daemon.toml");
    let write_config = |dir: &Path| {
        std::fs::write(
            &config,
            format!(
                "comm = [\"fdpc-nobody\"]\ncapture_on = [\"shared-table\"]\ncapture_dir = {:?}\n",
                dir.to_str().unwrap()
            ),
        )
        .unwrap();
    };
    write_config(&base);
    let daemon = Daemon::start(&["--config", config.to_str().unwrap()]);
    write_config(&open);
    daemon.signal(libc::SIGHUP);
    let line = daemon.wait_line("ERROR", "config not reloaded");
    assert!(line.contains("writable by group or others"), "{line}");
    assert_eq!(daemon.get("/healthz").0, 200);
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn a_full_disk_is_an_error_line_and_the_daemon_goes_on() {
    require_root();
    let _guard = kernel_lock();
    let dir = capture_dir("captures-full");
    let mounted = run(std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k,mode=0700", "fdprof-test-full"])
        .arg(&dir));
    assert!(
        mounted.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&mounted.stderr)
    );
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&dir);
    let comm = "fdpc-full";
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--capture-on",
        "shared-table",
        "--capture-dir",
        dir.to_str().unwrap(),
        "--capture-window",
        "1s",
        "--capture-after",
        "250ms",
    ]);
    let w = workload_as(comm, &["opensock", "-t", "2", "-n", "4000", "-d", "3s"]);
    daemon.wait_line("INFO", &format!("profiling pid {}", w.pid));
    w.go();
    let line = daemon.wait_line("ERROR", "capture: cannot write");
    assert!(line.contains("shared-table"), "{line}");
    w.finish();
    // It goes on: intervals keep coming, and the failure is a counted drop.
    assert_eq!(daemon.stream(2).len(), 2);
    daemon.wait_metric(
        "fdprof_events_dropped_total{probe=\"daemon\",reason=\"capture_failed\"}",
        1.0,
    );
    assert!(captures_in(&dir).is_empty());
    assert_eq!(
        daemon.metric(&format!(
            "fdprof_captures_total{{target=\"{comm}\",rule=\"shared-table\"}}"
        )),
        None
    );
    drop(daemon);
    assert_no_programs_left();
}
