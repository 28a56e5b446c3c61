//! The daemon's profiles as Go's `net/http/pprof` serves them, read over HTTP by `go tool
//! pprof` as a scraper would, the credential in the URL as a user would type it: the lock waits
//! of opensock (`/debug/pprof/mutex`), exactly the waits `/report.json` counts over the same
//! window, and the on-CPU samples of `--cpu` (`/debug/pprof/profile`).

use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, fdprof_as, settled, spinning_under_daemon, token};
use crate::common::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn go_tool_pprof_reads_the_lock_waits_as_a_mutex_profile() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-mutex";
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "500ms"]);
    let load = start_workload_with(
        fdprof_as(comm),
        &["opensock", "-t", "2", "-n", "4000", "-d", "6s"],
    );
    daemon.wait_metric("fdprof_targets", 1.0);
    load.go();
    let base = format!("http://{}/debug/pprof", daemon.addr);

    // Under load: the next 3 seconds, answered within 3 + 2 s.
    let asked = Instant::now();
    let url = format!("{base}/mutex?seconds=3&token={}", token());
    let top = go_pprof(&["-top", "-sample_index=delay", "-nodecount=1000"], &url);
    let took = asked.elapsed();
    assert!(top.contains("Type: delay"), "{top}");
    assert!(top.contains(" alloc_fd\n"), "no alloc_fd in:\n{top}");
    eprintln!("mutex?seconds=3 answered in {took:?}");
    let tags = go_pprof(&["-tags"], &url);
    assert!(
        tags.contains("lock:") && tags.contains("file_lock"),
        "{tags}"
    );
    assert!(tags.contains("target:") && tags.contains(comm), "{tags}");
    assert!(
        tags.contains("operation:") && tags.contains("alloc"),
        "{tags}"
    );

    // Once the load has ended and its last interval is in: everything kept, the waits
    // /report.json counts over the same window, exactly.
    load.finish();
    // The load's last waits are in the kept history once two reports a second apart agree.
    let contention = settled(TIMEOUT, Duration::from_secs(1), || {
        let (code, body) = daemon.get("/report.json");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["contention"].clone()
    })
    .unwrap_or_else(|| panic!("waits still counted after the load\n{}", daemon.log()));
    let raw = go_pprof(&["-raw"], format!("{base}/mutex?token={}", token()));
    let totals = raw_totals(&raw);
    assert_eq!(totals[0], contention["count"].as_u64().unwrap(), "{raw}");
    assert_eq!(totals[1], contention["total_wait_ns"].as_u64().unwrap());
    assert!(totals[1] > 0);

    // Bad input: one line, 400; no credential: 401.
    assert_eq!(daemon.get("/debug/pprof/mutex?seconds=0").0, 400);
    assert_eq!(daemon.get("/debug/pprof/mutex?lock=maybe").0, 400);
    assert_eq!(daemon.get_anonymous("/debug/pprof/mutex").0, 401);
    let (code, index) = daemon.get("/debug/pprof/");
    assert_eq!(code, 200);
    assert!(index.contains("href=\"mutex\"") && index.contains("href=\"profile\""));
    // Without --cpu there are no on-CPU samples: 404, saying so. That, and a target the
    // daemon has no figures of, are said before the wait a `seconds` asks for (an hour here).
    let asked = Instant::now();
    let (code, body) = daemon.get("/debug/pprof/profile?seconds=3600");
    assert_eq!((code, body.lines().count()), (404, 1), "{body}");
    assert!(body.contains("--cpu"), "{body}");
    let (code, body) = daemon.get("/debug/pprof/mutex?seconds=3600&target=no-such-name");
    assert_eq!((code, body.lines().count()), (404, 1), "{body}");
    assert!(body.contains("no target named"), "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "{:?}",
        asked.elapsed()
    );
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn go_tool_pprof_reads_the_on_cpu_samples_as_a_cpu_profile() {
    require_root();
    let _guard = kernel_lock();
    let (mut target, daemon) = spinning_under_daemon("spin-pprof");
    let url = format!(
        "http://{}/debug/pprof/profile?seconds=3&token={}",
        daemon.addr,
        token()
    );
    let top = go_pprof(&["-top", "-nodecount=1000"], &url);
    assert!(top.contains("Type: cpu"), "{top}");
    assert!(top.contains("spin_here"), "{top}");
    let _ = target.kill();
    let _ = target.wait();
    drop(daemon);
    assert_no_programs_left();
}
