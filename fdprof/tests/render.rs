//! The renderers on a hand-built recording: report text and JSON, folded stacks, flamegraph SVG.
//! No kernel needed.

use std::collections::BTreeMap;

use fdprof::model::recording::{
    DropCount, Frame, OwnCost, ProgramCost, Recording, ScanStats, SyscallStats, TableStats, Target,
};
use fdprof::render::testdata::{cells, frame, hist, line_with, site};
use fdprof::render::{
    self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions, SortKey, flamegraph,
};

/// Innermost first, as recorded.
fn alloc_stack(alloc_fd_offset: u64) -> Vec<Frame> {
    vec![
        frame("native_queued_spin_lock_slowpath", 0x20, None),
        frame("_raw_spin_lock", 0x30, None),
        frame("alloc_fd", alloc_fd_offset, None),
        frame("__sys_socket", 0x5a, None),
    ]
}

fn close_stack() -> Vec<Frame> {
    vec![
        frame("native_queued_spin_lock_slowpath", 0x20, None),
        frame("_raw_spin_lock", 0x30, None),
        frame("file_close_fd", 0x1c, None),
        frame("__x64_sys_close", 0xf, None),
    ]
}

fn user_stack(call: &str) -> Vec<Frame> {
    vec![
        frame(call, 0x7, Some("libc.so.6")),
        frame("main", 0x99, Some("server")),
    ]
}

/// file_lock: alloc 3 ms (two sites, same functions, different `alloc_fd` offsets; one wait of
/// 200 µs), close 2 ms; mutex in `other` 5 ms without a user stack. 7 drops.
fn recording() -> Recording {
    Recording {
        format: "fdprof-recording".into(),
        version: 1,
        fdprof_version: "0.1.0".into(),
        kernel_release: "6.12.0-test".into(),
        target: Target {
            kind: "command".into(),
            pid: Some(77),
            tid: None,
            command: vec!["./server".into(), "-t".into(), "2".into()],
            comm: None,
            exit_status: None,
        },
        started_unix_ms: 0,
        duration_ns: 2_500_000_000,
        end_reason: "command_exited".into(),
        mode: "fentry".into(),
        modes: BTreeMap::from([("contention".to_string(), "fentry".to_string())]),
        raw_addrs: false,
        functions: Vec::new(),
        stack_walks: Default::default(),
        contention: vec![
            site(
                "file_lock",
                "alloc",
                alloc_stack(0x1f),
                user_stack("socket"),
                &[(20_000, 90)],
            ),
            site(
                "file_lock",
                "alloc",
                alloc_stack(0x2a),
                user_stack("socket"),
                &[(10_000, 100), (200_000, 1)],
            ),
            site(
                "file_lock",
                "close",
                close_stack(),
                user_stack("close"),
                &[(20_000, 100)],
            ),
            site(
                "mutex",
                "other",
                vec![
                    frame("__mutex_lock", 0x11, None),
                    frame("do_epoll_ctl", 0x40, None),
                ],
                vec![],
                &[(50_000, 100)],
            ),
        ],
        syscalls: vec![
            SyscallStats {
                name: "socket".into(),
                calls: 191,
                fds_created: 191,
                allocs: 191,
                latency: hist(&[(5_000, 191)]),
                ..Default::default()
            },
            SyscallStats {
                name: "accept4".into(),
                ..Default::default()
            },
        ],
        scan: ScanStats {
            allocations: 191,
            next_fd_hits: 191,
            below_origin: 0,
            origin: "read at alloc_fd entry (exact)".into(),
            bits: hist(&[(0, 191)]),
            open_fds_words: hist(&[(1, 191)]),
            full_fds_words: hist(&[(1, 191)]),
        },
        table: TableStats {
            max_fds_first: 256,
            max_fds_max: 256,
            expansions: 0,
        },
        drops: vec![
            DropCount {
                probe: "contention".into(),
                reason: "ringbuf_full".into(),
                count: 5,
            },
            DropCount {
                probe: "fdops".into(),
                reason: "recursion_miss".into(),
                count: 2,
            },
        ],
        own_cost: OwnCost {
            programs: vec![ProgramCost {
                name: "fexit_alloc_fd".into(),
                run_time_ns: 300_000,
                run_count: 1_000,
                recursion_misses: 2,
            }],
            collector_cpu_ns: 5_000_000,
            stats_window_ns: 0,
        },
        notes: vec![],
    }
}

#[test]
fn report_breaks_contention_down_by_lock_and_operation() {
    let t = render::text(&recording(), &ReportOptions::default());
    // alloc: 191 waits, 3.00 ms, max 200 µs; p99 is the upper bound of the 16..32 µs bucket.
    assert_eq!(
        cells(line_with(&t, "file_lock  alloc")),
        [
            "file_lock",
            "alloc",
            "191",
            "3.00 ms",
            "15.7 µs",
            "16.4 µs",
            "32.8 µs",
            "200 µs",
            "60.0%",
            "30.0%"
        ],
        "{t}"
    );
    let close = cells(line_with(&t, "file_lock  close"));
    assert_eq!(close[2..4], ["100", "2.00 ms"]);
    assert_eq!(close[close.len() - 2..], ["40.0%", "20.0%"]);
    let mutex = cells(line_with(&t, "mutex      other"));
    assert_eq!(mutex[mutex.len() - 2..], ["100.0%", "50.0%"]);
    // file_lock first even though the mutex has the most wait.
    assert!(t.find("file_lock  alloc").unwrap() < t.find("mutex      other").unwrap());
    assert!(t.starts_with("fdprof report: `server -t 2` (pid 77)\n"));
    assert!(line_with(&t, "recorded").contains("for 2.50 s (ended: command exited)"));
}

#[test]
fn report_top_stacks_merge_offsets_away_unless_asked() {
    let rec = recording();
    let opts = ReportOptions {
        top: 2,
        sort: SortKey::Wait,
        offsets: false,
    };
    let t = render::text(&rec, &opts);
    assert!(t.contains("== top 2 of 3 stacks by total wait =="), "{t}");
    let first = line_with(&t, "#1  ");
    assert!(first.starts_with("#1  mutex other  count 100  total 5.00 ms (50.0% of all wait)"));
    let second = line_with(&t, "#2  ");
    assert!(
        second.starts_with("#2  file_lock alloc  count 191  total 3.00 ms (30.0% of all wait)"),
        "{second}"
    );
    assert!(second.contains("max 200 µs"));
    assert!(second.ends_with("(2 sites merged)"));
    assert!(!t.contains("#3  "));
    assert!(!t.contains("alloc_fd+0x"));

    let t = render::text(
        &rec,
        &ReportOptions {
            top: 0,
            offsets: true,
            ..opts
        },
    );
    assert!(t.contains("== top 4 of 4 stacks by total wait =="), "{t}");
    assert!(t.contains("      alloc_fd+0x1f\n"));
    assert!(t.contains("      alloc_fd+0x2a\n"));
    assert!(t.contains("      [user]\n      socket+0x7 (libc.so.6)\n      main+0x99 (server)\n"));
}

#[test]
fn report_shows_every_drop_with_a_total_and_says_none() {
    let mut rec = recording();
    let t = render::text(&rec, &ReportOptions::default());
    assert_eq!(
        cells(line_with(&t, "ringbuf_full")),
        ["contention", "ringbuf_full", "5"]
    );
    assert_eq!(
        cells(line_with(&t, "recursion_miss")),
        ["fdops", "recursion_miss", "2"]
    );
    assert_eq!(cells(line_with(&t, "  total  ")), ["total", "7"]);
    assert!(line_with(&t, "  drops  ").contains("7 events lost"));

    rec.drops.iter_mut().for_each(|d| d.count = 0);
    let t = render::text(&rec, &ReportOptions::default());
    assert_eq!(cells(line_with(&t, "  drops  ")), ["drops", "none"]);
    assert!(t.contains("none: no event was lost"));
    assert_eq!(
        cells(line_with(&t, "ringbuf_full")),
        ["contention", "ringbuf_full", "0"]
    );
    assert_eq!(cells(line_with(&t, "  total  ")), ["total", "0"]);
}

#[test]
fn report_json_shape() {
    let rec = recording();
    let j = render::json(&rec, &ReportOptions::default());
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
}

#[test]
fn folded_lines_are_exact_and_merged() {
    let rec = recording();
    let folded = render::folded(&rec, &FlamegraphOptions::default());
    assert_eq!(
        folded,
        "alloc;main;socket;__sys_socket;alloc_fd;_raw_spin_lock;native_queued_spin_lock_slowpath 3000000\n\
         close;main;close;__x64_sys_close;file_close_fd;_raw_spin_lock;native_queued_spin_lock_slowpath 2000000\n"
    );
}

#[test]
fn folded_filters_and_offsets() {
    let rec = recording();
    let all_locks = FlamegraphOptions {
        lock: LockFilter::All,
        ..Default::default()
    };
    let folded = render::folded(&rec, &all_locks);
    assert_eq!(folded.lines().count(), 3);
    assert!(
        folded.ends_with("other;[unknown];do_epoll_ctl;__mutex_lock 5000000\n"),
        "{folded}"
    );

    let close = FlamegraphOptions {
        op: OpFilter::Close,
        ..Default::default()
    };
    let folded = render::folded(&rec, &close);
    assert_eq!(folded.lines().count(), 1);
    assert!(folded.starts_with("close;"));

    let alloc_offsets = FlamegraphOptions {
        op: OpFilter::Alloc,
        lock: LockFilter::FileLock,
        offsets: true,
    };
    assert_eq!(
        render::folded(&rec, &alloc_offsets),
        "alloc;main+0x99;socket+0x7;__sys_socket+0x5a;alloc_fd+0x1f;_raw_spin_lock+0x30;native_queued_spin_lock_slowpath+0x20 1800000\n\
         alloc;main+0x99;socket+0x7;__sys_socket+0x5a;alloc_fd+0x2a;_raw_spin_lock+0x30;native_queued_spin_lock_slowpath+0x20 1200000\n"
    );
}

#[test]
fn svg_has_title_and_fails_clearly_when_empty() {
    let rec = recording();
    let opts = FlamegraphOptions::default();
    let svg = String::from_utf8(render::svg(&rec, &opts).unwrap()).unwrap();
    assert!(
        svg.starts_with("<?xml") || svg.starts_with("<svg"),
        "{}",
        &svg[..80]
    );
    let title = "fdprof: file_lock wait — `server -t 2` (pid 77) — 2.50 s — fentry mode";
    assert_eq!(flamegraph::title(&rec, &opts), title);
    assert!(svg.contains(title));
    assert!(svg.contains("file_close_fd"));
    assert!(svg.contains("op=all, lock=file_lock"));
    assert!(svg.trim_end().ends_with("</svg>"));

    let mut quiet = rec.clone();
    quiet.contention.retain(|c| c.operation != "alloc");
    let alloc = FlamegraphOptions {
        op: OpFilter::Alloc,
        ..Default::default()
    };
    let err = format!("{:#}", render::svg(&quiet, &alloc).unwrap_err());
    assert!(err.starts_with("nothing to draw"), "{err}");
    assert!(err.contains("op=alloc, lock=file_lock"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn a_written_recording_renders_the_same() {
    let rec = recording();
    let dir = std::env::temp_dir().join(format!("fdprof-render-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rec.json");
    rec.write(&path).unwrap();
    let back = Recording::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let opts = ReportOptions::default();
    assert_eq!(render::text(&back, &opts), render::text(&rec, &opts));
    assert_eq!(render::json(&back, &opts), render::json(&rec, &opts));
    let f = FlamegraphOptions::default();
    assert_eq!(render::folded(&back, &f), render::folded(&rec, &f));
}
