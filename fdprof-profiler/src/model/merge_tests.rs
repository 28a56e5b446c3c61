//! [`super::add`] and [`super::bound_sites`] on assembled and hand-built recordings.

use std::collections::BTreeMap;
use std::time::Duration;

use fdprof_common::{
    HIST_SLOTS,
    contention::{SiteKey, lock_class},
    counters::{drop, global, hist, per_syscall},
    fnops::{counter, kind, op},
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
    syscalls::FD_SYSCALLS,
};
use fdprof_recording::recording::Target;

use super::*;
use crate::collect::{Snapshot, snapshot::Contention, stats::ProgramStats};
use crate::model::assemble::{self, Run};
use crate::model::build::Symbolizers;
use crate::symbolize::{KernelSymbols, UserSymbolizer};
use crate::testdata::{self, frame, hist, site};

const KALLSYMS: &str = "\
ffffffff81000000 T _raw_spin_lock
ffffffff81000100 T alloc_fd
ffffffff81000200 T file_close_fd
ffffffff81000400 T tcp_v4_rcv
";

/// The cumulative maps of one profiler `elapsed_s` after attach, `k` (1, 2, …) intervals in:
/// counts grow with `k`, maxima never shrink, a site appears at `k` = 2.
fn cumulative(elapsed_s: u64, k: u64) -> Snapshot {
    let mut s = Snapshot {
        elapsed: Duration::from_secs(elapsed_s),
        stats_window: Duration::from_millis(300 * k),
        ..crate::collect::Snapshot::zeroed()
    };
    let cell = |class, kernel_stack, slot| {
        let key = SiteKey {
            lock: fdprof_common::contention::LockIdentity {
                class,
                ..Default::default()
            },
            kernel_stack,
            user_stack: -1,
            ..SiteKey::default()
        };
        (key, slot)
    };
    let waits = |(key, slot), count, total_ns, max_ns| {
        (key, Contention::in_slot(slot, count, total_ns, max_ns))
    };
    s.contention = vec![
        waits(
            cell(lock_class::FILE_LOCK, 1, 9),
            3 * k,
            1_200 * k,
            400 + 100 * k,
        ),
        waits(cell(lock_class::SPINLOCK, 3, 20), k, 900_000 * k, 900_000),
    ];
    if k >= 2 {
        s.contention
            .push(waits(cell(lock_class::FILE_LOCK, 2, 9), 2, 700, 400));
    }
    s.stacks
        .insert(1, vec![0xffffffff81000004, 0xffffffff81000110]);
    s.stacks
        .insert(2, vec![0xffffffff81000004, 0xffffffff81000208]);
    s.stacks
        .insert(3, vec![0xffffffff81000004, 0xffffffff81000401]);
    let socket = FD_SYSCALLS.iter().position(|d| d.name == "socket").unwrap() as u32;
    let sc = |c: u32| (socket * per_syscall::COUNT + c) as usize;
    s.syscall_counters[sc(per_syscall::CALLS)] = 10 * k;
    s.syscall_counters[sc(per_syscall::ERRORS)] = k;
    s.syscall_counters[sc(per_syscall::FDS_CREATED)] = 9 * k;
    s.syscall_counters[sc(per_syscall::ALLOCS)] = 9 * k;
    // One slower call per interval, each in a slot of its own.
    s.hists[(socket * HIST_SLOTS + 9) as usize] = 9 * k;
    for j in 1..=k as u32 {
        s.hists[(socket * HIST_SLOTS + 10 + j) as usize] = 1;
    }
    let g = |i: u32| i as usize;
    s.globals[g(global::NEXT_FD_HITS)] = 8 * k;
    s.globals[g(global::BELOW_ORIGIN)] = k;
    s.globals[g(global::SCAN_MAX)] = 30 + k;
    s.globals[g(global::MAX_FDS_FIRST)] = 64;
    s.globals[g(global::MAX_FDS_SEEN)] = 64 << k;
    s.globals[g(global::EXPANSIONS)] = k;
    s.globals[g(global::STACK_WALKS)] = 2 * k;
    s.globals[g(global::STACK_REUSES)] = 5 * k;
    s.hists[(hist::SCAN_BITS * HIST_SLOTS) as usize] = 8 * k;
    s.hists[(hist::OPEN_FDS_WORDS * HIST_SLOTS + 1) as usize] = 8 * k;
    s.drops[(drop::PROBE_CONTENTION * drop::COUNT + drop::KERNEL_STACK) as usize] = k;
    let fc = |o: u32, c: u32| (o * counter::COUNT + c) as usize;
    s.fn_counters[fc(op::ALLOC, counter::CALLS)] = 9 * k;
    s.fn_counters[fc(op::ALLOC, counter::UNPAIRED)] = k;
    s.fn_counters[fc(op::NONE, counter::SLOWPATH_WAIT_NS)] = 50 * k;
    s.fn_counters[fc(op::NONE, counter::SLOWPATH_WAIT_MAX)] = 40 + k;
    let fh = |o: u32, kd: u32, slot: u32| ((o * kind::COUNT + kd) * HIST_SLOTS + slot) as usize;
    s.fn_hists[fh(op::ALLOC, kind::DURATION, 10)] = 9 * k;
    s.fn_hists[fh(op::ALLOC, kind::HOLD, 8)] = 9 * k;
    s.fn_hists[fh(op::NONE, kind::SLOWPATH_WAIT, 6)] = k;
    s.programs = vec![ProgramStats {
        name: "fexit_alloc_fd".into(),
        run_time_ns: 1_000 * k,
        run_count: 9 * k,
        recursion_misses: k / 2,
    }];
    s
}

fn run(duration_ns: u64, collector_cpu_ns: u64) -> Run {
    let probes = BTreeMap::from([
        (
            Role::Allocate,
            Attachment::Direct {
                mode: Mode::Fentry,
                functions: vec!["alloc_fd".into()],
            },
        ),
        (Role::LockTracepoints, Attachment::TpBtf),
        (Role::FdSyscalls, Attachment::TpBtf),
    ]);
    Run {
        target: Target {
            kind: TargetKind::Pid,
            pid: Some(7),
            pids: Vec::new(),
            children: false,
            cgroups: Vec::new(),
            tid: None,
            command: Vec::new(),
            comm: Some("srv".into()),
            exit_status: None,
            threads: None,
        },
        started_unix_ms: 1_000_000,
        duration_ns,
        end_reason: EndReason::Duration,
        mode: Mode::Fentry,
        probes,
        raw_addrs: false,
        syscall_latency: true,
        notes: vec!["a note".into()],
        collector_cpu_ns,
    }
}

/// The recording of the delta between two snapshots, as the live stage assembles one.
fn assembled(later: &Snapshot, earlier: &Snapshot, collector_cpu_ns: u64) -> Recording {
    let delta = later.delta(earlier);
    let kernel = KernelSymbols::parse(KALLSYMS).unwrap();
    let mut user = UserSymbolizer::new();
    let mut sym = Symbolizers {
        kernel: &kernel,
        user: &mut user,
        user_pid: None,
        raw_addrs: false,
    };
    let duration = delta.elapsed.as_nanos() as u64;
    assemble::recording(&delta, run(duration, collector_cpu_ns), &mut sym)
}

fn json(r: &Recording) -> serde_json::Value {
    serde_json::to_value(r).unwrap()
}

/// No measurement at all, and no facts `add` would take over; `r`'s target and times. Every
/// field is named: a new one fails to compile here until its empty value is decided.
fn empty_like(r: &Recording) -> Recording {
    Recording {
        format: r.format.clone(),
        version: r.version,
        fdprof_version: String::new(),
        kernel_release: String::new(),
        target: r.target.clone(),
        started_unix_ms: r.started_unix_ms,
        duration_ns: r.duration_ns,
        end_reason: r.end_reason,
        mode: Mode::Tracepoint,
        probes: BTreeMap::new(),
        modes: BTreeMap::new(),
        raw_addrs: false,
        syscall_latency: false,
        contention: Vec::new(),
        stack_walks: StackWalks::default(),
        functions: Vec::new(),
        syscalls: Vec::new(),
        scan: ScanStats::default(),
        table: TableStats::default(),
        drops: Vec::new(),
        own_cost: OwnCost::default(),
        notes: Vec::new(),
        series: r.series.clone(),
        cpu: r.cpu.clone(),
        trace: None,
        counters: r.counters.clone(),
        processes: Vec::new(),
        processes_folded: None,
        steal: r.steal,
        full_tracing: r.full_tracing.clone(),
    }
}

#[test]
fn intervals_add_up_to_the_whole_run() {
    let start = Snapshot {
        elapsed: Duration::ZERO,
        ..crate::collect::Snapshot::zeroed()
    };
    let (first, second) = (cumulative(1, 1), cumulative(2, 2));
    let whole = assembled(&second, &start, 30);
    let mut sum = assembled(&first, &start, 10);
    let later = assembled(&second, &first, 20);
    add(&mut sum, &later);
    // Adding in time: the caller sets the duration.
    sum.duration_ns += later.duration_ns;
    assert_eq!(json(&sum), json(&whole));
    // The run has every kind of figure, so the comparison covers them all.
    assert_eq!(whole.contention.len(), 3);
    assert_eq!(whole.functions.len(), 2);
    assert_eq!(whole.table.max_fds_max, 256);
    assert_eq!(whole.own_cost.stats_window_ns, 600_000_000);
}

#[test]
fn adding_nothing_changes_nothing_and_adding_to_nothing_copies() {
    let start = Snapshot {
        elapsed: Duration::ZERO,
        ..crate::collect::Snapshot::zeroed()
    };
    let r = assembled(&cumulative(2, 2), &start, 30);
    let mut same = r.clone();
    add(&mut same, &empty_like(&r));
    assert_eq!(json(&same), json(&r));
    let mut copy = empty_like(&r);
    add(&mut copy, &r);
    assert_eq!(json(&copy), json(&r));
}

#[test]
fn histogram_slots_add_slot_by_slot() {
    let mut a = testdata::recording();
    let b = testdata::recording();
    let before = a.syscalls[0].latency.clone();
    add(&mut a, &b);
    let after = &a.syscalls[0].latency;
    let doubled: Vec<u64> = before.slots.iter().map(|n| 2 * n).collect();
    assert_eq!(after.slots, doubled);
    assert_eq!(
        (after.count, after.sum, after.max),
        (2 * before.count, 2 * before.sum, before.max)
    );
    let mut c = testdata::recording();
    c.scan.bits = hist(&[(1, 2)]);
    let mut d = c.clone();
    d.scan.bits = hist(&[(1_000, 1)]);
    add(&mut c, &d);
    assert_eq!(c.scan.bits.slots[1], 2);
    assert_eq!(c.scan.bits.slots[10], 1);
    assert_eq!((c.scan.bits.count, c.scan.bits.max), (3, 1_000));
}

fn one_site(lock: &str, alloc_fd_offset: u64, module: Option<&str>) -> Recording {
    let mut r = testdata::recording();
    r.contention = vec![site(
        lock,
        "alloc",
        vec![
            frame("_raw_spin_lock", 0x2e, None),
            frame("alloc_fd", alloc_fd_offset, None),
        ],
        vec![frame("__socket", 0xb, module)],
        &[(10_000, 3)],
    )];
    r
}

#[test]
fn sites_with_the_same_frames_merge_and_others_do_not() {
    let mut a = one_site("file_lock", 0x3f, Some("libc.so.6"));
    // The same code at another raw address (another process): one site.
    let mut b = one_site("file_lock", 0x3f, Some("libc.so.6"));
    b.contention[0].user_stack[0].address = Some(0x7f00_0000_1234);
    add(&mut a, &b);
    assert_eq!(a.contention.len(), 1);
    assert_eq!((a.contention[0].count, a.contention[0].wait.count), (6, 6));
    assert_eq!(a.contention[0].total_wait_ns, 60_000);
    for other in [
        one_site("file_lock", 0x40, Some("libc.so.6")),
        one_site("spinlock", 0x3f, Some("libc.so.6")),
        one_site("file_lock", 0x3f, Some("libc.so.7")),
    ] {
        let mut x = a.clone();
        add(&mut x, &other);
        assert_eq!(x.contention.len(), 2, "{:?}", other.contention[0]);
    }
    // Sites of `other` with the same frames as each other become one.
    let mut twice = one_site("file_lock", 0x3f, None);
    twice.contention.push(twice.contention[0].clone());
    let mut y = empty_like(&twice);
    add(&mut y, &twice);
    assert_eq!(y.contention.len(), 1);
    assert_eq!(y.contention[0].count, 6);
}

#[test]
fn maxima_take_the_larger_and_first_table_size_the_smaller_known() {
    let mut a = one_site("file_lock", 0x3f, None);
    let mut b = one_site("file_lock", 0x3f, None);
    b.contention[0] = site(
        "file_lock",
        "alloc",
        a.contention[0].kernel_stack.clone(),
        a.contention[0].user_stack.clone(),
        &[(90_000, 1)],
    );
    a.table = TableStats {
        max_fds_first: 0,
        max_fds_max: 1024,
        expansions: 1,
    };
    b.table = TableStats {
        max_fds_first: 256,
        max_fds_max: 512,
        expansions: 2,
    };
    let mut c = a.clone();
    add(&mut a, &b);
    assert_eq!(
        (a.contention[0].max_wait_ns, a.contention[0].wait.max),
        (90_000, 90_000)
    );
    assert_eq!(
        (
            a.table.max_fds_first,
            a.table.max_fds_max,
            a.table.expansions
        ),
        (256, 1024, 3),
        "0 is no first size"
    );
    c.table.max_fds_first = 64;
    add(&mut c, &b);
    assert_eq!(c.table.max_fds_first, 64);
    let mut d = b.clone();
    d.table.max_fds_first = 64;
    add(&mut b, &d);
    assert_eq!(b.table.max_fds_first, 64);
}

#[test]
fn drops_programs_and_functions_add_by_key() {
    let mut a = testdata::recording();
    let b = testdata::command_recording();
    add(&mut a, &b);
    let count = |probe: &str, reason: &str| {
        a.drops
            .iter()
            .filter(|d| d.probe == probe && d.reason == reason)
            .map(|d| d.count)
            .collect::<Vec<_>>()
    };
    assert_eq!(count("contention", "ringbuf_full"), [8]);
    assert_eq!(count("fdops", "recursion_miss"), [2]);
    assert_eq!(count("fdops", "map_full"), [0]);
    assert_eq!(a.drops.len(), 4);
    let names: Vec<&str> = a
        .own_cost
        .programs
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["contention_begin", "fexit_alloc_fd"]);
    assert_eq!(a.own_cost.collector_cpu_ns, 35_000_000);
    // Notes: union, in order. The first recording's probes and mode stay.
    assert_eq!(a.notes.len(), 1);
    assert_eq!(a.mode, Mode::Tracepoint);
    // Syscalls by name, in the syscall table's order.
    let socket = a.syscalls.iter().find(|s| s.name == "socket").unwrap();
    assert_eq!((socket.calls, socket.allocs), (782, 782));
    assert!(a.syscalls.iter().any(|s| s.name == "accept4"));

    let f = |operation, calls, unpaired| FunctionStats {
        operation,
        calls,
        unpaired,
        duration: hist(&[(500, calls)]),
        ..Default::default()
    };
    let mut x = testdata::recording();
    x.functions = vec![f(testdata::operation("close"), 4, 1)];
    let mut y = testdata::recording();
    y.functions = vec![
        f(testdata::operation("alloc"), 5, 0),
        f(testdata::operation("close"), 6, 2),
    ];
    add(&mut x, &y);
    let got: Vec<(&str, u64, u64, u64)> = x
        .functions
        .iter()
        .map(|f| (f.operation.name(), f.calls, f.unpaired, f.duration.count))
        .collect();
    assert_eq!(got, [("alloc", 5, 0, 5), ("close", 10, 3, 10)]);
}

#[test]
fn settings_are_not_added() {
    let mut a = testdata::recording();
    a.stack_walks = StackWalks {
        walked: 3,
        reused: 4,
        refresh_every: 64,
        ..Default::default()
    };
    let b = a.clone();
    add(&mut a, &b);
    let w = &a.stack_walks;
    assert_eq!((w.walked, w.reused, w.refresh_every), (6, 8, 64));
    assert_eq!(a.scan.origin, b.scan.origin);
    assert_eq!(a.notes, b.notes);
    assert_eq!(
        (a.duration_ns, a.started_unix_ms),
        (b.duration_ns, b.started_unix_ms)
    );
    // A recording with no probes takes the other's, with its mode.
    let mut none = empty_like(&b);
    none.mode = Mode::Kprobe;
    add(&mut none, &testdata::command_recording());
    assert_eq!(none.mode, Mode::Fentry);
    assert_eq!(none.probes, testdata::command_recording().probes);
}

#[test]
fn notes_stop_at_what_a_recording_may_hold() {
    let mut a = testdata::recording();
    let mut b = a.clone();
    b.notes = (0..2 * bounded::NOTES)
        .map(|i| format!("note {i}"))
        .collect();
    add(&mut a, &b);
    assert_eq!(a.notes.len(), bounded::NOTES);
    assert_eq!(a.notes[1], "note 0");
}

fn total(r: &Recording) -> (u64, u64, u64) {
    let sum = |f: fn(&ContentionSite) -> u64| r.contention.iter().map(f).sum::<u64>();
    (
        sum(|s| s.count),
        sum(|s| s.total_wait_ns),
        r.contention
            .iter()
            .map(|s| s.max_wait_ns)
            .max()
            .unwrap_or(0),
    )
}

fn bound_drops(r: &Recording) -> Vec<u64> {
    r.drops
        .iter()
        .filter(|d| d.probe == STACK_BOUND_PROBE && d.reason == STACK_BOUND_REASON)
        .map(|d| d.count)
        .collect()
}

#[test]
fn bound_sites_keeps_the_heaviest_and_counts_the_rest() {
    // testdata: alloc 3 ms (300 waits), close 4 ms (400), alloc 2.9 ms + 100 µs (291), a
    // spinlock 1 ms (10).
    let mut r = testdata::recording();
    let before = total(&r);
    assert_eq!(bound_sites(&mut r, 4), 0, "within the bound");
    assert!(bound_drops(&r).is_empty());

    assert_eq!(bound_sites(&mut r, 1), 3);
    assert_eq!(total(&r), before, "only stacks are lost");
    // The heaviest keeps its stacks; the rest are one stack-less site per (lock, operation),
    // in order of total wait.
    let shape: Vec<(&str, &str, bool, u64)> = r
        .contention
        .iter()
        .map(|s| {
            let stacked = !s.kernel_stack.is_empty();
            (s.lock.name(), s.operation.name(), stacked, s.count)
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("file_lock", "alloc", false, 591),
            ("file_lock", "close", true, 400),
            ("spinlock", "other", false, 10),
        ]
    );
    assert_eq!(bound_drops(&r), [601]);
    // Bounding again loses nothing more: the folded sites have no stacks to lose.
    assert_eq!(bound_sites(&mut r, 1), 0);
    assert_eq!(bound_drops(&r), [601]);
    assert_eq!(total(&r), before);
    assert!(r.contention.len() <= 1 + fdprof_recording::bounded::SAMPLE_WAITS);
    // Folded waits join a stack-less site of their own kind on later adds.
    let mut more = testdata::recording();
    bound_sites(&mut more, 1);
    add(&mut r, &more);
    assert_eq!(r.contention.len(), 3);
    assert_eq!(bound_drops(&r), [1202]);
}

#[test]
fn a_sum_is_timed_only_if_both_parts_were() {
    let timed = testdata::recording();
    let mut untimed = testdata::recording();
    untimed.syscall_latency = false;
    for (a, b) in [(&timed, &untimed), (&untimed, &timed)] {
        let mut sum = a.clone();
        add(&mut sum, b);
        assert!(!sum.syscall_latency);
    }
    let mut sum = timed.clone();
    add(&mut sum, &timed);
    assert!(sum.syscall_latency);
}

/// Counters add per thread; a recording without counters adds none and takes the other's.
#[test]
fn recordings_add_their_counters() {
    use crate::collect::counters::{CounterReadings, Reading, ThreadReadings};
    use fdprof_figures::CounterName;
    use fdprof_recording::counters::Counters;
    let counted = |tid: u32, faults: u64| {
        let mut r = testdata::recording();
        r.counters = Some(Counters::from(&CounterReadings {
            unavailable: vec![(CounterName::Cycles, "no hardware PMU (ENOENT)".into())],
            threads: vec![ThreadReadings {
                tid,
                comm: "t".into(),
                readings: vec![Reading {
                    name: CounterName::PageFaults,
                    count: faults,
                    time_enabled_ns: 10,
                    time_running_ns: 10,
                }],
            }],
            notes: Vec::new(),
        }));
        r
    };
    let mut sum = testdata::recording();
    add(&mut sum, &counted(7, 100));
    add(&mut sum, &counted(7, 20));
    add(&mut sum, &counted(8, 3));
    add(&mut sum, &testdata::recording());
    let c = sum.counters.unwrap();
    let rows: Vec<(Option<u32>, u64)> = c
        .threads
        .iter()
        .map(|t| (t.tid, t.count(CounterName::PageFaults)))
        .collect();
    assert_eq!(rows, [(Some(7), 120), (Some(8), 3)]);
    let cycles = c
        .events
        .iter()
        .find(|e| e.name == CounterName::Cycles)
        .unwrap();
    assert_eq!(
        cycles.unavailable.as_deref(),
        Some("no hardware PMU (ENOENT)")
    );
    assert_eq!(c.events.len(), CounterName::ALL.len());
}

#[test]
fn steal_adds_in_time_and_keeps_the_most_stolen_cpu() {
    use fdprof_recording::recording::StealTime;
    let span = |steal_ns, max_cpu_steal_ns| StealTime {
        steal_ns,
        total_ns: 2_000,
        cpus: 2,
        max_cpu_steal_ns,
        max_cpu_total_ns: 1_000,
    };
    let mut total = Some(StealTime::default());
    add_steal_in_time(&mut total, Some(&span(30, 20)));
    add_steal_in_time(&mut total, Some(&span(10, 10)));
    let t = total.unwrap();
    assert_eq!((t.steal_ns, t.total_ns, t.cpus), (40, 4_000, 2));
    assert_eq!((t.max_cpu_steal_ns, t.max_cpu_total_ns), (20, 1_000));
    add_steal_in_time(&mut total, None);
    assert_eq!(total, None, "a span of unknown steal makes the sum unknown");
}
