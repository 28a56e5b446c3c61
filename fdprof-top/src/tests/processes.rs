//! The processes pane: on screen only when the session is system-wide, its rows in either
//! order, comms escaped.

use super::*;
use crate::state::{Pane, ProcessOrder};
use fdprof_common::session::TargetKind;
use fdprof_profiler::analysis::{Process, Scan, Table};

/// The fixture's interval as a system-wide one with two processes: pid 100 waits the most on
/// its `file_lock`, pid 200 (a comm with an escape sequence) scans the most.
fn system_wide() -> State {
    let mut report = interval_report();
    report.header.target.kind = TargetKind::All;
    let process = |pid, comm: &str, wait_ns, bits, max_fds| Process {
        pid,
        comm: comm.into(),
        file_lock_count: wait_ns / 1000,
        file_lock_wait_ns: wait_ns,
        scan: Some(Scan {
            allocations: 500,
            ..Default::default()
        }),
        table: Some(Table {
            max_fds_max: max_fds,
            ..Default::default()
        }),
        scan_bits_at_least: bits,
        far_scans: bits / 100,
        ..Default::default()
    };
    report.processes = vec![
        process(100, "server", 5_000_000, 10, 256),
        process(200, "evil\x1b[2J", 1_000, 9_000, 1024),
    ];
    let mut state = State::default();
    state.on_update(update_with(0, report));
    state
}

#[test]
fn the_pane_shows_only_system_wide() {
    let screen = render(&fed(), 100, 30);
    assert!(!screen.iter().any(|r| r.contains("processes by")));
    let mut state = fed();
    for _ in 0..Pane::ALL.len() {
        state.on_key(key(KeyCode::Tab));
        assert_ne!(
            state.focus,
            Pane::Processes,
            "not a pane of a one-process view"
        );
    }

    let mut state = system_wide();
    let screen = render(&state, 100, 30);
    assert!(
        screen
            .iter()
            .any(|r| r.contains("processes by file_lock wait (2)"))
    );
    // 5000 waits, 5 ms of file_lock wait and 500 allocations in the fixture's 10 s.
    assert_eq!(
        text_of(&screen, "    100 server"),
        "100 server                 500       0.05%     50.0         0          10      256"
    );
    let evil = text_of(&screen, "    200 ");
    assert!(evil.starts_with("200 evil\\x1b[2J"), "{evil}");
    assert!(
        !screen.concat().contains('\x1b'),
        "no raw escape reaches the terminal"
    );
    let order = |screen: &[String]| (row_with(screen, "    100 "), row_with(screen, "    200 "));
    let (a, b) = order(&screen);
    assert!(a < b, "most file_lock wait first");

    state.on_key(ch('o'));
    assert_eq!(state.process_order, ProcessOrder::ScanWork);
    let screen = render(&state, 100, 30);
    assert!(screen.iter().any(|r| r.contains("processes by scan work")));
    let (a, b) = order(&screen);
    assert!(b < a, "most scan work first");
    state.on_key(ch('o'));
    assert_eq!(state.process_order, ProcessOrder::FileLockWait);

    // Tab reaches it, between the fd table and the events.
    state.focus = Pane::Fd;
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.focus, Pane::Processes);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.focus, Pane::Events);
    // Small screens still draw it.
    let screen = render(&state, 80, 24);
    assert!(screen.iter().any(|r| r.contains("processes by")));
}

#[test]
fn the_header_states_the_views_steal() {
    let mut report = interval_report();
    report.steal = Some(fdprof_profiler::analysis::Steal {
        steal_ns: 20_000_000,
        share: Some(0.001),
        ..Default::default()
    });
    let mut state = State::default();
    state.on_update(update_with(0, report));
    let screen = render(&state, 120, 30);
    assert!(
        screen[2]
            .trim_end()
            .ends_with("programs -  steal 20.0 ms (0.10%)"),
        "{}",
        screen[2]
    );
}

#[test]
fn g_groups_the_processes_by_container() {
    use fdprof_figures::{CgroupGroup, Container, FileLockWaits, Runtime};
    let mut state = system_wide();
    let mut report = state.report().unwrap().0.clone();
    let id = "3f1e9b2c4d5a6f708192a3b4c5d6e7f80112233445566778899aabbccddeeff0";
    report.cgroups = vec![
        CgroupGroup {
            path: Some(format!("/libpod_parent/libpod-{id}")),
            container: Some(Container {
                runtime: Runtime::Podman,
                id: id.into(),
            }),
            processes: vec![200],
            file_lock: FileLockWaits {
                count: 1,
                wait_ns: 1_000,
            },
            ..Default::default()
        },
        CgroupGroup {
            path: Some("/user.slice".into()),
            processes: vec![100],
            ..Default::default()
        },
    ];
    state.on_update(update_with(1, report));
    state.on_key(ch('g'));
    assert!(state.by_container);
    let screen = render(&state, 100, 30);
    let podman = row_with(&screen, "podman 3f1e9b2c4d5a · 1 processes");
    let user = row_with(&screen, "/user.slice · 1 processes");
    // Each process under its own group, in the report's order of groups.
    assert!(podman < row_with(&screen, "    200 ") && row_with(&screen, "    200 ") < user);
    assert!(user < row_with(&screen, "    100 "));
    state.on_key(ch('g'));
    let screen = render(&state, 100, 30);
    assert!(!screen.iter().any(|r| r.contains("/user.slice")));
}
