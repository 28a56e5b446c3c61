use super::*;
use serde_json::json;

fn step(stdout: &str, stderr: &str, rc: i32) -> StepResult {
    StepResult {
        stdout: stdout.into(),
        stderr: stderr.into(),
        rc,
        secs: 1.0,
    }
}

fn report_with(socket: u64, close: u64, scan_max: u64) -> Report {
    let syscall = |name: &str, calls| fdprof_figures::Syscall {
        name: name.into(),
        calls,
        ..Default::default()
    };
    let mut r = Report::default();
    r.header.mode = fdprof_figures::Mode::Tracepoint;
    r.header
        .probes
        .insert(Role::Allocate, fdprof_figures::Attachment::Tracepoint);
    r.syscalls = vec![
        syscall("socket", socket),
        syscall("close", close),
        syscall("openat", 400),
    ];
    r.scan.bits.max = Some(scan_max);
    r.drops.known = true;
    r.drops.none = true;
    r.own_cost.stats_window_ns = 250_000_000;
    r
}

/// `report --json` as the guest prints it.
fn report(socket: u64, close: u64, scan_max: u64) -> String {
    serde_json::to_string_pretty(&report_with(socket, close, scan_max)).unwrap()
}

fn output(workload: &str, report: &str) -> GuestOutput {
    let mut out = GuestOutput::default();
    for s in guest::SCENARIOS {
        out.steps.insert(
            guest::record_step("tracepoint", s.name),
            step(workload, "fdprof: wrote /tmp/x", 0),
        );
        out.steps.insert(
            guest::report_step("tracepoint", s.name),
            step(report, "", 0),
        );
    }
    out.steps.insert(
        guest::record_step("fentry", "socket-close"),
        step(
            "",
            "fdprof: error: --mode fentry/kprobe is not implemented yet",
            2,
        ),
    );
    out
}

#[test]
fn exact_and_at_least() {
    let workload = json!({"expected": {"syscalls": {"socket": 2000, "close": 2000}}});
    let out = output(&workload.to_string(), &report(2000, 2000, 0));
    let row = scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]);
    assert!(row.pass, "{}", row.figures);
    assert!(
        row.figures.starts_with("close 2000/2000, socket 2000/2000"),
        "{}",
        row.figures
    );
    let out = output(&workload.to_string(), &report(2000, 2003, 0));
    assert!(!scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]).pass);

    let out = output(&workload.to_string(), &report(1999, 2003, 0));
    assert!(!scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]).pass);
    let out = output(&workload.to_string(), &report(2000, 1999, 0));
    assert!(!scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]).pass);
}

#[test]
fn holes_scan_max() {
    let workload = json!({"expected": {
        "syscalls": {"openat": 400, "close": 400},
        "allocs": [{"scan_bits": 0}, {"scan_bits": 296}],
    }});
    let holes = &guest::SCENARIOS[1];
    let out = output(&workload.to_string(), &report(0, 400, 296));
    let row = scenario_row(&out, "6.12", "tracepoint", holes);
    assert!(row.pass, "{}", row.figures);
    let out = output(&workload.to_string(), &report(0, 400, 295));
    assert!(!scenario_row(&out, "6.12", "tracepoint", holes).pass);
}

/// A recording whose programs' run time was never sampled fails: the collector opens its first
/// window at its start, however long the attach took.
#[test]
fn a_recording_without_a_stats_window_fails() {
    let workload = json!({"expected": {"syscalls": {"socket": 2000, "close": 2000}}});
    let mut r = report_with(2000, 2000, 0);
    r.own_cost.stats_window_ns = 0;
    let out = output(&workload.to_string(), &serde_json::to_string(&r).unwrap());
    let row = scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]);
    assert!(!row.pass, "{}", row.figures);
    assert!(row.figures.contains("stats window 0 ms"), "{}", row.figures);
}

/// The drop total is read from `drops.total` (the report's `drops` is an object: reading it
/// as an array, as the untyped check did, always said 0).
#[test]
fn drops_are_shown() {
    let workload = json!({"expected": {"syscalls": {"socket": 2000, "close": 2000}}});
    let mut lossy = report_with(2000, 2000, 0);
    lossy.drops.total = 5;
    lossy.drops.none = false;
    let lossy = serde_json::to_string_pretty(&lossy).unwrap();
    let out = output(&workload.to_string(), &lossy);
    let row = scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]);
    assert!(row.figures.contains("drops 5"), "{}", row.figures);
    assert!(
        row.figures.contains("[allocate=tracepoint]"),
        "{}",
        row.figures
    );
}

#[test]
fn a_report_of_another_schema_says_so() {
    let workload = json!({"expected": {"syscalls": {"socket": 2000, "close": 2000}}});
    let out = output(&workload.to_string(), r#"{"mode": "tracepoint"}"#);
    let row = scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]);
    assert!(!row.pass);
    assert!(
        row.figures
            .starts_with("report --json printed no fdprof-report JSON: missing field"),
        "{}",
        row.figures
    );
    let mut newer = report_with(2000, 2000, 0);
    newer.schema_version = SCHEMA_VERSION + 1;
    let out = output(
        &workload.to_string(),
        &serde_json::to_string(&newer).unwrap(),
    );
    let row = scenario_row(&out, "6.1", "tracepoint", &guest::SCENARIOS[0]);
    assert!(!row.pass);
    assert!(
        row.figures.contains(&format!(
            "this xtask reads fdprof-report version {SCHEMA_VERSION}"
        )),
        "{}",
        row.figures
    );
}

#[test]
fn failed_record_says_why() {
    let out = output("{}", "{}");
    let row = scenario_row(&out, "6.1", "fentry", &guest::SCENARIOS[0]);
    assert!(!row.pass);
    assert_eq!(
        row.figures,
        "record exit 2: fdprof: error: --mode fentry/kprobe is not implemented yet"
    );
    let row = scenario_row(&out, "6.1", "kprobe", &guest::SCENARIOS[0]);
    assert!(!row.pass);
    assert!(row.figures.starts_with("no result"));
}

#[test]
fn direct_modes_must_not_load_raw_syscall_tracepoints() {
    let program = |name: &str| fdprof_figures::ProgramCost {
        name: name.into(),
        run_time_ns: 0,
        run_count: 0,
        ns_per_run: None,
        recursion_misses: 0,
    };
    let mut r = report_with(1, 1, 0);
    r.header.probes.insert(
        Role::FdSyscalls,
        Attachment::Direct {
            mode: fdprof_figures::Mode::Fentry,
            functions: vec!["__x64_sys_socket".into()],
        },
    );
    r.own_cost.programs = vec![program("fdprof_fe_alloc"), program("fdprof_fes_5")];
    let (ok, text) = fd_syscalls_direct("fentry", &r);
    assert!(ok, "{text}");
    // Another mode than the recording's, or a raw tracepoint program loaded beside, fails.
    assert!(!fd_syscalls_direct("kprobe", &r).0);
    r.own_cost.programs.push(program("fdprof_sys_exit"));
    let (ok, text) = fd_syscalls_direct("fentry", &r);
    assert!(!ok && text.contains("fdprof_sys_exit"), "{text}");
    // The syscall tracepoints themselves fail in a direct mode.
    r.own_cost.programs.pop();
    r.header.probes.insert(Role::FdSyscalls, Attachment::TpBtf);
    assert!(!fd_syscalls_direct("fentry", &r).0);
}
