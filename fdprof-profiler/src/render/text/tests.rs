//! The text report on the hand-built recordings of [`crate::testdata`].

use fdprof_recording::Recording;

use crate::analysis::{self, ReportOptions, SortKey};
use crate::testdata::{self, cells, line_with};

fn text(rec: &Recording, opts: &ReportOptions) -> String {
    super::text(&analysis::report(rec, opts))
}

fn json(rec: &Recording, opts: &ReportOptions) -> serde_json::Value {
    serde_json::to_value(analysis::report(rec, opts)).unwrap()
}

#[test]
fn contention_rows_have_shares_and_quantiles() {
    let rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    let alloc = cells(line_with(&t, "file_lock  alloc"));
    assert_eq!(
        alloc,
        [
            "file_lock",
            "alloc",
            "591",
            "6.00 ms",
            "10.2 µs",
            "16.4 µs",
            "16.4 µs",
            "100 µs",
            "60.0%",
            "54.5%"
        ],
        "{t}"
    );
    let close = cells(line_with(&t, "file_lock  close"));
    assert_eq!(close[close.len() - 2..], ["40.0%", "36.4%"]);
    let spin = cells(line_with(&t, "spinlock   other"));
    assert_eq!(spin[spin.len() - 2..], ["100.0%", "9.1%"]);
    // file_lock rows come before the spinlock row.
    assert!(t.find("file_lock  close").unwrap() < t.find("spinlock   other").unwrap());
}

#[test]
fn stack_text_shows_frames_in_order_with_user_marker() {
    let rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    let first = t.find("#1  file_lock alloc").expect("first stack");
    let block: Vec<&str> = t[first..].lines().skip(1).take(9).map(str::trim).collect();
    assert_eq!(
        block,
        [
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "alloc_fd",
            "__sys_socket",
            "do_syscall_64",
            "[user]",
            "__socket (libc.so.6)",
            "worker (opensock)",
            "start_thread (libc.so.6)",
        ]
    );
    assert!(line_with(&t, "#1  file_lock alloc").contains("(2 sites merged)"));
    assert!(line_with(&t, "#1  file_lock alloc").contains("max 100 µs"));

    let with_offsets = text(
        &rec,
        &ReportOptions {
            offsets: true,
            ..Default::default()
        },
    );
    assert!(with_offsets.contains("alloc_fd+0x3f\n"), "{with_offsets}");
    assert!(with_offsets.contains("alloc_fd+0x52\n"));
    assert!(with_offsets.contains("__socket+0xb (libc.so.6)"));
    assert!(!with_offsets.contains("sites merged"));
}

#[test]
fn drops_are_totalled_and_none_is_said() {
    let mut rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    assert_eq!(cells(line_with(&t, "  total  ")), ["total", "3"]);
    assert!(t.contains("3 events lost"));
    assert!(
        line_with(&t, "stack_id").ends_with(" 0"),
        "zero counters are listed too"
    );
    let j = json(&rec, &ReportOptions::default());
    assert_eq!(j["drops"]["total"], 3);
    assert_eq!(j["drops"]["none"], false);
    assert_eq!(j["drops"]["counters"].as_array().unwrap().len(), 3);

    for d in &mut rec.drops {
        d.count = 0;
    }
    let t = text(&rec, &ReportOptions::default());
    assert!(t.contains("none: no event was lost"), "{t}");
    assert_eq!(cells(line_with(&t, "  drops  ")), ["drops", "none"]);
    assert_eq!(json(&rec, &ReportOptions::default())["drops"]["none"], true);

    rec.drops.clear();
    let t = text(&rec, &ReportOptions::default());
    assert!(
        !t.contains("none"),
        "no counters is not the same as no loss:\n{t}"
    );
    assert!(t.contains("unknown"));
}

#[test]
fn scan_syscalls_table_and_cost() {
    let rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    assert!(line_with(&t, "next_fd hits").ends_with("590 (99.8% of allocations)"));
    assert!(line_with(&t, "below origin").ends_with(" 1"));
    assert!(line_with(&t, "  origin  ").contains("exact for single-threaded"));
    assert!(
        line_with(&t, "scan distance past origin (bits)")
            .ends_with("n 591  p50 0  p99 0  p999 4000  max 4000")
    );
    assert!(
        line_with(&t, "2048 -> 4095  : 1 ").contains("|                                        |")
    );
    assert!(line_with(&t, "open_fds words read (words)").contains("max 63"));
    assert!(t.contains("full_fds_bits words read (words)"));

    assert!(t.contains("== syscalls (latency: syscall-level) =="));
    assert_eq!(
        cells(line_with(&t, "  socket ")),
        [
            "socket", "591", "0", "591", "0", "591", "4.09 µs", "40.0 µs", "40.0 µs"
        ]
    );
    assert!(!t.contains("dup2"), "syscalls never called are left out");
    assert!(t.contains("socket latency (syscall-level)"));
    assert!(t.contains("close latency (syscall-level)"));

    assert!(line_with(&t, "max_fds").ends_with("64 at first syscall, 1024 max"));
    assert!(line_with(&t, "expansions").ends_with(" 4"));

    assert_eq!(
        cells(line_with(&t, "  contention_begin  ")),
        ["contention_begin", "2.00 ms", "10000", "200", "0"]
    );
    assert!(
        t.contains("collector CPU: 30.0 ms (0.30% of one CPU)"),
        "{t}"
    );
}

#[test]
fn header() {
    let rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    assert!(t.starts_with("fdprof report: pid 4242 (opensock)\n"));
    assert!(line_with(&t, "kernel").ends_with("6.18.0-test"));
    assert!(line_with(&t, "recorded").contains("for 10.0 s (ended: duration reached)"));
    assert!(line_with(&t, "probe mode").ends_with("tracepoint"));
    assert!(line_with(&t, "  allocate  ").ends_with("tracepoint"));
    assert!(t.contains("note: tracepoint mode: waits are seen"));
    assert!(line_with(&t, "file_lock wait").ends_with("10.0 ms in 991 waits"));
}

#[test]
fn empty_recording_says_so() {
    let mut rec = testdata::recording();
    rec.contention.clear();
    rec.syscalls.clear();
    let t = text(&rec, &ReportOptions::default());
    assert!(t.contains("== contention by lock and operation ==\n  no lock waits recorded"));
    assert!(t.contains("== top 0 of 0 stacks by total wait ==\n  no lock waits recorded"));
    assert!(t.contains("no traced syscalls were called"));
    let j = json(&rec, &ReportOptions::default());
    assert_eq!(j["contention"]["total_wait_ns"], 0);
    assert_eq!(j["top_stacks"].as_array().unwrap().len(), 0);
}

#[test]
fn lock_only_recordings_leave_fd_activity_out() {
    let mut rec = testdata::recording();
    rec.probes.insert(
        fdprof_common::probes::Role::FdSyscalls,
        fdprof_common::probes::Attachment::Off,
    );
    let t = text(&rec, &ReportOptions::default());
    assert!(t.contains(
        "== fd-table activity ==\n  not recorded (--lock-only): no scan, syscall or table figures"
    ));
    assert!(!t.contains("== syscalls"));
}

#[test]
fn direct_probe_figures_by_source() {
    let mut rec = testdata::recording();
    rec.functions = vec![
        fdprof_recording::recording::FunctionStats {
            operation: crate::testdata::operation("alloc"),
            calls: 600,
            duration: testdata::hist(&[(900, 600)]),
            hold: testdata::hist(&[(300, 600)]),
            slowpath_wait: testdata::hist(&[(10_000, 300)]),
            ..Default::default()
        },
        fdprof_recording::recording::FunctionStats {
            operation: crate::testdata::operation("expand"),
            calls: 4,
            expanded: 3,
            ..Default::default()
        },
    ];
    let t = text(&rec, &ReportOptions::default());
    // Quantiles are capped at the exact max.
    assert_eq!(
        cells(line_with(&t, "900 ns / 900 ns / 900 ns")),
        [
            "alloc",
            "600",
            "900 ns / 900 ns / 900 ns",
            "300 ns / 300 ns / 300 ns",
            "300",
            "3.00 ms",
            "0"
        ]
    );
    assert!(t.contains("  expand_files grew the table 3 times\n"), "{t}");
    let by_source = &t[t.find("file_lock waits by source").unwrap()..];
    assert_eq!(
        cells(line_with(by_source, "  alloc ")),
        ["alloc", "591", "6.00 ms", "300", "3.00 ms"]
    );
    assert_eq!(
        cells(line_with(by_source, "  expand ")),
        ["expand", "0", "0 ns", "0", "0 ns"]
    );
}

#[test]
fn report_breaks_contention_down_by_lock_and_operation() {
    let t = text(&testdata::command_recording(), &ReportOptions::default());
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
    let rec = testdata::command_recording();
    let opts = ReportOptions {
        top: 2,
        sort: SortKey::Wait,
        offsets: false,
    };
    let t = text(&rec, &opts);
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

    let t = text(
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
    let mut rec = testdata::command_recording();
    let t = text(&rec, &ReportOptions::default());
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
    let t = text(&rec, &ReportOptions::default());
    assert_eq!(cells(line_with(&t, "  drops  ")), ["drops", "none"]);
    assert!(t.contains("none: no event was lost"));
    assert_eq!(
        cells(line_with(&t, "ringbuf_full")),
        ["contention", "ringbuf_full", "0"]
    );
    assert_eq!(cells(line_with(&t, "  total  ")), ["total", "0"]);
}

#[test]
fn header_and_json_show_how_the_command_ended() {
    use fdprof_recording::recording::ExitStatus;
    let mut rec = testdata::recording();
    let t = text(&rec, &ReportOptions::default());
    assert!(
        !t.contains("exited with") && !t.contains("killed by"),
        "{t}"
    );
    let json = |rec: &fdprof_recording::Recording| {
        serde_json::to_value(crate::analysis::report(rec, &ReportOptions::default())).unwrap()
    };
    assert!(json(&rec)["target"].get("exit_status").is_none());

    rec.target.exit_status = Some(ExitStatus::Code(3));
    let t = text(&rec, &ReportOptions::default());
    assert!(
        line_with(&t, "exit status").ends_with("exited with code 3"),
        "{t}"
    );
    assert_eq!(json(&rec)["target"]["exit_status"]["code"], 3);

    rec.target.exit_status = Some(ExitStatus::Signal(15));
    let t = text(&rec, &ReportOptions::default());
    assert!(line_with(&t, "exit status").ends_with("killed by signal 15 (SIGTERM)"));
    assert_eq!(json(&rec)["target"]["exit_status"]["signal"], 15);
}

/// Without BPF run-time statistics (no CAP_SYS_ADMIN) the programs' share of a CPU is unknown,
/// and the report says so rather than dividing by the whole recording.
#[test]
fn programs_cost_says_when_it_was_not_measured() {
    let mut rec = testdata::recording();
    rec.own_cost.stats_window_ns = 0;
    let t = text(&rec, &ReportOptions::default());
    assert!(
        t.contains("programs: run times not measured (kernel BPF run-time statistics were off)"),
        "{t}"
    );
    rec.own_cost.stats_window_ns = 250_000_000;
    let t = text(&rec, &ReportOptions::default());
    assert!(
        line_with(&t, "programs: ").contains("of one CPU (measured over 250 ms of the 10.0 s"),
        "{t}"
    );
}

#[test]
fn syscalls_not_timed_are_counted_and_said_not_measured() {
    let mut rec = testdata::recording();
    rec.syscall_latency = false;
    let t = text(&rec, &ReportOptions::default());
    assert!(t.contains("== syscalls =="));
    assert!(t.contains("  syscall latency: not measured (record --latency)"));
    assert_eq!(
        cells(line_with(&t, "  socket ")),
        ["socket", "591", "0", "591", "0", "591"],
        "counts without the latency columns"
    );
    assert!(
        !t.contains("socket latency"),
        "no histogram shown as measured"
    );
}
