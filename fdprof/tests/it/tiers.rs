//! `fdprof daemon --tier rest`, for real: between windows the fd syscall programs stay loaded
//! with no link (read with bpftool), so a workload then moves no fd syscall figure; SIGUSR1
//! opens a window of full tracing whose links appear, and a workload run wholly inside it is
//! counted exactly; once the window has passed the links are gone again, and nothing outlives
//! the daemon.

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

use crate::common::daemon::{Daemon, bpf_programs_held, fdprof_as};
use crate::common::*;

const NAME: &str = "fdpd-tier";
const OPS: u64 = 3000;

fn bpftool(args: &[&str]) -> Value {
    let out = Command::new("bpftool")
        .args(["--json"])
        .args(args)
        .output()
        .expect("bpftool runs");
    assert!(out.status.success(), "bpftool {args:?} failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The tracepoints that fdprof's fd syscall programs are linked to now (the kernel's own
/// account: every link, by its program's name).
fn fd_syscall_links() -> Vec<String> {
    let names: HashMap<u64, String> = bpftool(&["prog", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
        .collect();
    let mut links: Vec<String> = bpftool(&["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["prog_id"]
                .as_u64()
                .and_then(|id| names.get(&id))
                .is_some_and(|n| {
                    n.starts_with("fdprof_") && (n.contains("sys_enter") || n.contains("sys_exit"))
                })
        })
        .map(|l| l["tp_name"].as_str().unwrap_or("?").to_string())
        .collect();
    links.sort();
    links
}

/// `OPS` socket/close pairs as `NAME`, started once the daemon follows them.
fn workload(daemon: &Daemon) {
    let w = start_workload_with(
        fdprof_as(NAME),
        &["socket-close", "-t", "1", "--ops", &OPS.to_string()],
    );
    daemon.wait_line("INFO", &format!("profiling pid {} ({NAME})", w.pid));
    w.go();
    assert_eq!(w.finish()["expected"]["fds_created"]["socket"], OPS);
}

#[test]
fn at_rest_no_fd_syscall_program_is_linked_and_a_window_counts_exactly() {
    require_root();
    let _guard = kernel_lock();
    let mut daemon = Daemon::start(&[
        "--comm",
        NAME,
        "--tier",
        "rest",
        "--trace-window",
        "15s",
        "--interval",
        "500ms",
    ]);
    daemon.wait_line("INFO", "probes attach in");
    assert!(bpf_programs_held(daemon.pid()) > 0);
    assert_eq!(fd_syscall_links(), Vec::<String>::new(), "at rest");
    daemon.wait_metric("fdprof_full_tracing", 0.0);

    let sockets = format!("fdprof_fd_allocations_total{{target=\"{NAME}\",syscall=\"socket\"}}");
    workload(&daemon);
    daemon.stream(2);
    assert_eq!(daemon.metric(&sockets).unwrap_or(0.0), 0.0, "at rest");

    daemon.signal(libc::SIGUSR1);
    daemon.wait_line("INFO", "SIGUSR1: full tracing for 15s");
    assert_eq!(fd_syscall_links(), ["sys_enter", "sys_exit"], "in a window");
    daemon.wait_metric("fdprof_full_tracing", 1.0);
    workload(&daemon);
    daemon.wait_metric(&sockets, OPS as f64);

    daemon.wait_line("INFO", "full tracing ends");
    assert_eq!(fd_syscall_links(), Vec::<String>::new(), "after the window");
    daemon.wait_metric("fdprof_full_tracing", 0.0);
    assert_eq!(daemon.metric(&sockets), Some(OPS as f64));
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_no_programs_left();
}
