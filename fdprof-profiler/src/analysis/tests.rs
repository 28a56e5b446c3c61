//! The analysis on the hand-built recordings of [`crate::testdata`].

use super::stacks::frame_label;
use super::*;
use crate::testdata::{self, frame, site};

/// `testdata::recording()` with only `contention` replaced.
fn with_sites(contention: Vec<fdprof_recording::recording::ContentionSite>) -> Recording {
    let mut r = testdata::recording();
    r.contention = contention;
    r
}

fn kernel(function: &str, offset: u64) -> Vec<fdprof_recording::recording::Frame> {
    vec![frame(function, offset, None)]
}

fn main_user() -> Vec<fdprof_recording::recording::Frame> {
    vec![frame("main", 0x10, None)]
}

#[test]
fn lock_operation_rows_order_and_merge() {
    let r = with_sites(vec![
        site(
            "spinlock",
            "other",
            kernel("x", 0),
            main_user(),
            &[(5000, 1)],
        ),
        site(
            "file_lock",
            "close",
            kernel("file_close_fd", 1),
            main_user(),
            &[(100, 1), (300, 1)],
        ),
        site(
            "file_lock",
            "alloc",
            kernel("alloc_fd", 1),
            main_user(),
            &[(200, 1), (400, 1)],
        ),
        site(
            "file_lock",
            "alloc",
            kernel("alloc_fd", 2),
            main_user(),
            &[(700, 1)],
        ),
    ]);
    let rows = by_lock_operation(&r);
    let names: Vec<_> = rows
        .iter()
        .map(|r| (r.lock.name(), r.operation.name()))
        .collect();
    // file_lock first although the spinlock has more wait.
    assert_eq!(
        names,
        [
            ("file_lock", "alloc"),
            ("file_lock", "close"),
            ("spinlock", "other")
        ]
    );
    assert_eq!(rows[0].count, 3);
    assert_eq!(rows[0].sites, 2);
    assert_eq!(rows[0].total_wait_ns, 1300);
    assert_eq!(rows[0].max_wait_ns, 700);
    assert_eq!(rows[0].wait.count, 3);
    // Of the lock's 1700 ns and of all 6700 ns.
    assert_eq!(rows[0].share_of_lock, Some(1300.0 / 1700.0));
    assert_eq!(rows[0].share_of_all, Some(1300.0 / 6700.0));
}

#[test]
fn groups_merge_by_name_unless_offsets() {
    let r = with_sites(vec![
        site(
            "file_lock",
            "alloc",
            kernel("alloc_fd", 1),
            main_user(),
            &[(200, 1)],
        ),
        site(
            "file_lock",
            "alloc",
            kernel("alloc_fd", 2),
            main_user(),
            &[(700, 1)],
        ),
        site(
            "spinlock",
            "alloc",
            kernel("alloc_fd", 2),
            main_user(),
            &[(700, 1)],
        ),
    ]);
    let all = ReportOptions {
        top: 0,
        ..Default::default()
    };
    let (g, total) = top_stacks(&r, &all);
    assert_eq!(total, 2);
    assert_eq!((g[0].sites, g[0].count, g[0].total_wait_ns), (2, 2, 900));
    assert_eq!(g[0].max_wait_ns, 700);
    let offsets = ReportOptions {
        offsets: true,
        ..all
    };
    assert_eq!(top_stacks(&r, &offsets).1, 3);
}

#[test]
fn labels() {
    assert_eq!(
        frame_label(&frame("alloc_fd", 0x1f, None), false),
        "alloc_fd"
    );
    assert_eq!(
        frame_label(&frame("alloc_fd", 0x1f, None), true),
        "alloc_fd+0x1f"
    );
    assert_eq!(frame_label(&frame("", 0, None), false), "[unknown]");
}

#[test]
fn top_stacks_merge_by_name_and_sort() {
    let rec = testdata::recording();
    let (groups, total) = top_stacks(&rec, &ReportOptions::default());
    assert_eq!(total, 3);
    assert_eq!(groups[0].operation.name(), "alloc");
    assert_eq!((groups[0].sites, groups[0].count), (2, 591));
    assert_eq!(groups[0].total_wait_ns, 6_000_000);
    assert_eq!(groups[0].max_wait_ns, 100_000);

    let by_max = ReportOptions {
        sort: SortKey::Max,
        top: 1,
        offsets: false,
    };
    let (groups, total) = top_stacks(&rec, &by_max);
    assert_eq!((groups.len(), total), (1, 3));
    // alloc and the spinlock both reach 100 µs; the tie goes to more total wait.
    assert_eq!(groups[0].operation.name(), "alloc");

    let by_avg = ReportOptions {
        sort: SortKey::Avg,
        ..by_max
    };
    assert_eq!(top_stacks(&rec, &by_avg).0[0].lock.name(), "spinlock");
    let by_count = ReportOptions {
        sort: SortKey::Count,
        top: 0,
        offsets: true,
    };
    let (groups, total) = top_stacks(&rec, &by_count);
    assert_eq!((groups.len(), total), (4, 4));
    let counts: Vec<u64> = groups.iter().map(|g| g.count).collect();
    assert_eq!(counts, [400, 300, 291, 10]);
}

/// The JSON of `report(rec, opts)`, as `report --json` prints it.
fn json(rec: &Recording, opts: &ReportOptions) -> serde_json::Value {
    serde_json::to_value(report(rec, opts)).unwrap()
}

#[test]
fn json_carries_computed_figures() {
    let rec = testdata::recording();
    let j = json(&rec, &ReportOptions::default());
    assert_eq!(j["schema"], "fdprof-report");
    assert_eq!(j["schema_version"], 2);
    let rows = j["contention"]["by_lock_operation"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["lock"], "file_lock");
    assert_eq!(rows[0]["lock_kind"], "file_lock");
    assert_eq!(rows[0]["lock_named_by"], "target");
    assert_eq!(rows[0]["operation"], "alloc");
    assert_eq!(rows[0]["count"], 591);
    assert_eq!(rows[0]["total_wait_ns"], 6_000_000);
    assert_eq!(rows[0]["p99_wait_ns"], 16_383);
    assert_eq!(rows[0]["max_wait_ns"], 100_000);
    assert_eq!(rows[0]["share_of_lock"], 0.6);
    assert_eq!(rows[1]["share_of_lock"], 0.4);
    assert_eq!(rows[2]["share_of_lock"], 1.0);
    assert_eq!(j["contention"]["total_wait_ns"], 11_000_000);
    assert_eq!(j["contention"]["file_lock_wait_ns"], 10_000_000);
    assert_eq!(j["contention"]["file_lock_count"], 991);
    let top = j["top_stacks"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert_eq!(j["stacks_total"], 3);
    assert_eq!(top[0]["sites"], 2);
    assert_eq!(top[0]["kernel_stack"][2]["function"], "alloc_fd");
    assert!(top[0]["kernel_stack"][2].get("offset").is_none());
    assert_eq!(top[0]["user_stack"][0]["module"], "libc.so.6");
    assert_eq!(j["scan"]["next_fd_hits"], 590);
    assert_eq!(j["scan"]["bits"]["max"], 4000);
    assert_eq!(j["scan"]["bits"]["unit"], "bits");
    let sc = j["syscalls"].as_array().unwrap();
    assert_eq!(sc.len(), 2);
    assert_eq!(sc[0]["latency"]["level"], "syscall-level");
    assert_eq!(
        j["syscalls_by_calls"],
        serde_json::json!(["socket", "close"])
    );
    assert_eq!(j["table"]["max_fds_max"], 1024);
    assert_eq!(j["own_cost"]["programs"][0]["ns_per_run"], 200.0);
    assert_eq!(j["own_cost"]["ns_per_run"], 200.0);
    assert_eq!(j["mode"], "tracepoint");
    assert_eq!(j["modes"]["allocate"], "tracepoint");
    assert_eq!(j["probes"]["fd_syscalls"]["how"], "tp_btf");
    assert_eq!(j["target"]["description"], "pid 4242 (opensock)");
    assert_eq!(j["duration_ns"], 10_000_000_000u64);
    assert_eq!(j["fd_activity_recorded"], true);
}

#[test]
fn report_json_shape() {
    let rec = testdata::command_recording();
    let j = json(&rec, &ReportOptions::default());
    for key in [
        "target",
        "duration_ns",
        "mode",
        "modes",
        "contention",
        "top_stacks",
        "scan",
        "syscalls",
        "table",
        "drops",
        "own_cost",
    ] {
        assert!(j.get(key).is_some(), "missing {key}");
    }
    let rows = j["contention"]["by_lock_operation"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| format!(
                "{}/{}",
                r["lock"].as_str().unwrap(),
                r["operation"].as_str().unwrap()
            ))
            .collect::<Vec<_>>(),
        ["file_lock/alloc", "file_lock/close", "mutex/other"]
    );
    assert_eq!(rows[0]["share_of_lock"], 0.6);
    assert_eq!(rows[0]["share_of_all"], 0.3);
    assert_eq!(rows[0]["p99_wait_ns"], 32_767);
    assert_eq!(rows[0]["max_wait_ns"], 200_000);
    assert_eq!(j["drops"]["total"], 7);
    assert_eq!(j["top_stacks"][0]["lock"], "mutex");
    assert_eq!(j["top_stacks"][1]["sites"], 2);
    assert_eq!(
        j["syscalls"].as_array().unwrap().len(),
        1,
        "accept4 was never called"
    );
    assert_eq!(j["syscalls"][0]["latency"]["level"], "entry-to-exit");
    assert_eq!(j["own_cost"]["programs"][0]["ns_per_run"], 300.0);
    assert_eq!(j["mode"], "fentry");
    assert_eq!(j["duration_ns"], 2_500_000_000u64);
    // What `report --json` prints reads back into the same typed report.
    let back: Report = serde_json::from_value(j).unwrap();
    assert_eq!(back, report(&rec, &ReportOptions::default()));
}

#[test]
fn direct_probe_figures_sit_beside_the_tracepoint_ones() {
    let mut rec = testdata::recording();
    rec.functions = vec![fdprof_recording::recording::FunctionStats {
        operation: crate::testdata::operation("alloc"),
        calls: 600,
        slowpath_wait: testdata::hist(&[(10_000, 300)]),
        ..Default::default()
    }];
    let f = &report(&rec, &ReportOptions::default()).functions[0];
    assert_eq!((f.tracepoint_waits, f.tracepoint_wait_ns), (591, 6_000_000));
    assert_eq!(f.slowpath_wait.count, 300);
    assert_eq!(f.hold.max, None);
}

#[test]
fn lock_only_recordings_say_fd_activity_was_not_recorded() {
    let mut rec = testdata::recording();
    assert!(report(&rec, &ReportOptions::default()).fd_activity_recorded);
    rec.probes.insert(
        fdprof_common::probes::Role::FdSyscalls,
        fdprof_common::probes::Attachment::Off,
    );
    assert!(!report(&rec, &ReportOptions::default()).fd_activity_recorded);
}

/// A corrupt recording's counts can add up past u64: every sum saturates.
#[test]
fn sums_saturate() {
    let mut big = site(
        "file_lock",
        "alloc",
        kernel("alloc_fd", 1),
        vec![],
        &[(u64::MAX, 1)],
    );
    big.count = u64::MAX;
    let r = with_sites(vec![big.clone(), big]);
    let report = report(&r, &ReportOptions::default());
    let row = &report.contention.by_lock_operation[0];
    assert_eq!((row.count, row.total_wait_ns), (u64::MAX, u64::MAX));
    assert_eq!(report.contention.file_lock_count, u64::MAX);
    assert_eq!(report.top_stacks[0].total_wait_ns, u64::MAX);
    let graph = folded(&r, &FlamegraphOptions::default());
    assert_eq!(graph.total_weight, u64::MAX);
}

#[test]
fn latency_not_measured_is_a_level_with_empty_histograms() {
    let mut rec = testdata::recording();
    rec.syscall_latency = false;
    let j = json(&rec, &ReportOptions::default());
    assert_eq!(j["syscall_latency_level"], "not-measured");
    for s in j["syscalls"].as_array().unwrap() {
        assert_eq!(s["latency"]["level"], "not-measured");
        assert_eq!(
            s["latency"]["count"], 0,
            "even where the recording holds some"
        );
        assert!(s["calls"].as_u64().unwrap() > 0, "the counts stay");
    }
}

#[test]
fn probe_time_per_wait_leaves_the_stack_walks_out() {
    use fdprof_common::probes::program;
    use fdprof_recording::recording::ProgramCost;
    let cost = |name: &str, run_time_ns, run_count| ProgramCost {
        name: name.into(),
        run_time_ns,
        run_count,
        recursion_misses: 0,
    };
    let mut r = testdata::recording();
    r.own_cost.programs = vec![
        cost(program::LOCK_BEGIN, 100 * 300 + 4_000, 100),
        cost(program::LOCK_END, 100 * 120, 100),
    ];
    assert_eq!(
        contention::contention(&r).probe_ns_per_wait,
        Some(340.0 + 120.0)
    );
    // One 4 µs walk within the windows: timed by the begin program, not in its wait.
    r.own_cost.walk_ns_sampled = 4_000;
    assert_eq!(
        contention::contention(&r).probe_ns_per_wait,
        Some(300.0 + 120.0)
    );
    r.own_cost.programs.pop();
    assert_eq!(contention::contention(&r).probe_ns_per_wait, None);
}
