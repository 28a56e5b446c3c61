//! Containers, for real: a podman + runc container (common/podman.rs) runs the workload as its
//! PID 1 beside a workload on the host. `record -a` and `daemon -a` attribute the container's
//! sockets to the id podman gives, exactly, and none of the host process's; `daemon --cgroup`
//! follows the container's cgroup by its path; Debian's Prometheus scrapes the daemons.

use std::time::Duration;

use crate::common::daemon::Daemon;
use crate::common::podman::Container;
use crate::common::prometheus::{Prometheus, sample_values};
use crate::common::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The `calls` of syscall `name` in `rows`.
fn calls(rows: &Value, name: &str) -> u64 {
    rows.as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .map_or(0, |s| s["calls"].as_u64().unwrap())
}

#[test]
fn record_a_attributes_a_container_exactly() {
    require_root();
    let _guard = kernel_lock();
    let (k_container, k_host) = (1200, 800);
    let container = Container::start(&["socket-close", "--ops", &k_container.to_string()]);
    let host = start_workload(&["socket-close", "--ops", &k_host.to_string()]);
    let (id, host_pid) = (container.id(), container.host_pid());
    let out = tmp("containers.data");
    let rec = start_record(&["-a", "-o", out.to_str().unwrap()]);
    container.go();
    host.go();
    let host_pid_outside = host.pid;
    assert_eq!(
        container.finish()["expected"]["syscalls"]["socket"],
        k_container
    );
    assert_eq!(host.finish()["expected"]["syscalls"]["socket"], k_host);
    // SAFETY: signalling the recorder this test started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    assert!(rec.wait_with_output().unwrap().status.success());
    let path = out.to_str().unwrap();

    let report = report_json(&[path]);
    let process = |pid: u32| {
        report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no process {pid}"))
            .clone()
    };
    let inside = process(host_pid);
    assert_eq!(calls(&inside["syscalls"], "socket"), k_container);
    assert_eq!(inside["container"]["runtime"], "podman");
    assert_eq!(inside["container"]["id"], id.as_str());
    assert_eq!(inside["ns_pid"], 1, "{inside}");
    assert!(
        inside["cgroup"]
            .as_str()
            .unwrap()
            .ends_with(&format!("libpod-{id}"))
    );
    let outside = process(host_pid_outside);
    assert!(outside.get("container").is_none(), "{outside}");

    let group = report["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["container"]["id"] == id.as_str())
        .expect("the container's group")
        .clone();
    assert_eq!(group["processes"], serde_json::json!([host_pid]));
    assert_eq!(calls(&group["syscalls"], "socket"), k_container);
    assert_eq!(group["container"]["runtime"], "podman");

    // Narrowed to the container by a 12-digit prefix: its figures only.
    let narrowed = report_json(&[path, "--container", &id[..12]]);
    assert_eq!(calls(&narrowed["syscalls"], "socket"), k_container);
    assert_eq!(narrowed["processes"].as_array().unwrap().len(), 1);
    let text = run(fdprof().args(["report", path]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("by container / cgroup"), "{text}");
    assert!(text.contains(&format!("podman {}", &id[..12])), "{text}");
    assert_no_programs_left();
}

#[test]
fn daemons_label_a_containers_series_exactly() {
    require_root();
    let _guard = kernel_lock();
    let k = 900;

    // daemon -a: the container's own series, by its id.
    let container = Container::start(&["socket-close", "--ops", &k.to_string()]);
    let id = container.id();
    let daemon = Daemon::start(&["--tier", "full", "-a", "--interval", "250ms"]);
    daemon.wait_line("INFO", "profiling every process");
    let prometheus = Prometheus::start(&[daemon.addr]);
    container.go();
    assert_eq!(container.finish()["expected"]["syscalls"]["socket"], k);
    let series = format!("fdprof_container_fd_allocations_total{{container=\"{id}\"}}");
    let result = prometheus.wait_for(&series, TIMEOUT, |r| sample_values(r) == [k as f64]);
    assert_eq!(result[0]["metric"]["runtime"], "podman", "{result}");
    let (code, body) = daemon.get(&format!("/report.json?container={}", &id[..12]));
    assert_eq!(code, 200, "{body}");
    let narrowed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(calls(&narrowed["syscalls"], "socket"), k);
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();

    // daemon --cgroup: the container's v2 cgroup, followed by its path.
    let container = Container::start(&["socket-close", "--ops", &k.to_string()]);
    let id = container.id();
    let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .find(|p| {
            std::path::Path::new(p)
                .join("cgroup.subtree_control")
                .exists()
        })
        .unwrap();
    let path = container.cgroup_path();
    let dir = format!("{unified}{path}");
    let daemon = Daemon::start(&["--tier", "full", "--cgroup", &dir, "--interval", "250ms"]);
    let prometheus = Prometheus::start(&[daemon.addr]);
    daemon.wait_metric("fdprof_targets", 1.0);
    container.go();
    assert_eq!(container.finish()["expected"]["syscalls"]["socket"], k);
    let series = format!("fdprof_fd_allocations_total{{target=\"{path}\",syscall=\"socket\"}}");
    prometheus.wait_for(&series, TIMEOUT, |r| sample_values(r) == [k as f64]);
    let series = format!("fdprof_container_fd_allocations_total{{container=\"{id}\"}}");
    prometheus.wait_for(&series, TIMEOUT, |r| sample_values(r) == [k as f64]);
    drop(prometheus);
    drop(daemon);
    assert_no_programs_left();
}
