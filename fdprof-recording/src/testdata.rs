//! The hand-built recordings and text helpers of the analysis and render tests: one fixture
//! set, compiled for tests only.

use std::collections::BTreeMap;

use fdprof_common::{
    contention::LockKind,
    fnops::Operation,
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
};

use crate::hist::Log2Hist;
use crate::recording::{
    ContentionSite, CpuEvent, CpuProfile, CpuSite, DropCount, Frame, OwnCost, ProgramCost,
    Recording, ScanStats, SyscallStats, TableStats, Target,
};

pub fn frame(function: &str, offset: u64, module: Option<&str>) -> Frame {
    Frame {
        function: function.into(),
        offset,
        module: module.map(Into::into),
        ..Default::default()
    }
}

/// A histogram of `n` copies of each `(value, n)`.
pub fn hist(values: &[(u64, u64)]) -> Log2Hist {
    let mut h = Log2Hist::default();
    for &(v, n) in values {
        for _ in 0..n {
            h.record(v);
        }
    }
    h
}

/// The lock kind named `name` (`file_lock`, `spinlock`, …).
pub fn lock_kind(name: &str) -> LockKind {
    *LockKind::ALL
        .iter()
        .find(|k| k.name() == name)
        .expect("a lock kind")
}

/// The operation named `name` (`alloc`, `close`, …).
pub fn operation(name: &str) -> Operation {
    *Operation::ALL
        .iter()
        .find(|o| o.name() == name)
        .expect("an operation")
}

pub fn site(
    lock: &str,
    operation: &str,
    kernel_stack: Vec<Frame>,
    user_stack: Vec<Frame>,
    waits: &[(u64, u64)],
) -> ContentionSite {
    let wait = hist(waits);
    ContentionSite {
        lock: lock_kind(lock),
        lock_name: None,
        operation: self::operation(operation),
        kernel_stack,
        user_stack,
        count: wait.count,
        total_wait_ns: wait.sum,
        max_wait_ns: wait.max,
        wait,
        pid: None,
    }
}

fn alloc_kernel(alloc_fd_offset: u64) -> Vec<Frame> {
    vec![
        frame("__pv_queued_spin_lock_slowpath", 0x1b4, None),
        frame("_raw_spin_lock", 0x2e, None),
        frame("alloc_fd", alloc_fd_offset, None),
        frame("__sys_socket", 0x5a, None),
        frame("do_syscall_64", 0x80, None),
    ]
}

fn user(call: &str) -> Vec<Frame> {
    vec![
        frame(call, 0xb, Some("libc.so.6")),
        frame("worker", 0x40, Some("opensock")),
        frame("start_thread", 0x9c, Some("libc.so.6")),
    ]
}

/// A drop counter of `probe` for `reason`.
fn drop_count(probe: &str, reason: &str, count: u64) -> DropCount {
    DropCount {
        probe: probe.into(),
        reason: reason.into(),
        count,
    }
}

/// The cost of one program (`name`, its run time, runs and recursion misses) and the
/// collector's CPU time.
fn own_cost(name: &str, run_time_ns: u64, run_count: u64, misses: u64, cpu_ns: u64) -> OwnCost {
    OwnCost {
        programs: vec![ProgramCost {
            name: name.into(),
            run_time_ns,
            run_count,
            recursion_misses: misses,
        }],
        collector_cpu_ns: cpu_ns,
        stats_window_ns: 0,
        walk_ns_sampled: 0,
    }
}

/// `recording`'s sites: file_lock on alloc and close, and a spinlock elsewhere.
fn opensock_contention() -> Vec<ContentionSite> {
    let close_kernel = vec![
        frame("__pv_queued_spin_lock_slowpath", 0x1b4, None),
        frame("_raw_spin_lock", 0x2e, None),
        frame("file_close_fd", 0x1c, None),
        frame("__x64_sys_close", 0xf, None),
        frame("do_syscall_64", 0x80, None),
    ];
    let spin_kernel = vec![
        frame("__pv_queued_spin_lock_slowpath", 0x1b4, None),
        frame("_raw_spin_lock", 0x2e, None),
        frame("tcp_v4_rcv", 0x99, None),
    ];
    vec![
        site(
            "file_lock",
            "alloc",
            alloc_kernel(0x3f),
            user("__socket"),
            &[(10_000, 300)],
        ),
        site(
            "file_lock",
            "close",
            close_kernel,
            user("__close"),
            &[(10_000, 400)],
        ),
        site(
            "file_lock",
            "alloc",
            alloc_kernel(0x52),
            user("__socket"),
            &[(10_000, 290), (100_000, 1)],
        ),
        site("spinlock", "other", spin_kernel, vec![], &[(100_000, 10)]),
    ]
}

/// `recording`'s fd syscalls: sockets opened, closes, and a dup2 never called.
fn opensock_syscalls() -> Vec<SyscallStats> {
    vec![
        SyscallStats {
            name: "socket".into(),
            calls: 591,
            errors: 0,
            fds_created: 591,
            fds_closed: 0,
            allocs: 591,
            latency: hist(&[(3_000, 500), (40_000, 91)]),
        },
        SyscallStats {
            name: "close".into(),
            calls: 400,
            errors: 2,
            fds_created: 0,
            fds_closed: 398,
            allocs: 0,
            latency: hist(&[(1_500, 400)]),
        },
        SyscallStats {
            name: "dup2".into(),
            ..Default::default()
        },
    ]
}

/// file_lock: alloc 6 ms over two sites differing only in the offset of `alloc_fd` (591 waits,
/// max 100 µs), close 4 ms (400 waits of 10 µs); a spinlock in `other` 1 ms with no user stack.
/// 3 drops.
pub fn recording() -> Recording {
    let probes = BTreeMap::from([
        (Role::Allocate, Attachment::Tracepoint),
        (Role::LockTracepoints, Attachment::TpBtf),
        (Role::FdSyscalls, Attachment::TpBtf),
    ]);
    Recording {
        format: crate::recording::FORMAT.into(),
        version: crate::recording::VERSION,
        fdprof_version: "0.1.0".into(),
        kernel_release: "6.18.0-test".into(),
        target: Target {
            kind: TargetKind::Pid,
            pid: Some(4242),
            pids: Vec::new(),
            children: false,
            cgroups: Vec::new(),
            tid: None,
            command: vec![],
            comm: Some("opensock".into()),
            exit_status: None,
            threads: None,
        },
        started_unix_ms: 1_709_210_096_000,
        duration_ns: 10_000_000_000,
        end_reason: EndReason::Duration,
        mode: Mode::Tracepoint,
        modes: Recording::modes_text(&probes),
        probes,
        raw_addrs: false,
        syscall_latency: true,
        functions: Vec::new(),
        stack_walks: Default::default(),
        contention: opensock_contention(),
        syscalls: opensock_syscalls(),
        scan: ScanStats {
            allocations: 591,
            next_fd_hits: 590,
            below_origin: 1,
            origin: "read at syscall entry: exact for single-threaded tables".into(),
            bits: hist(&[(0, 590), (4000, 1)]),
            open_fds_words: hist(&[(1, 590), (63, 1)]),
            full_fds_words: hist(&[(1, 591)]),
        },
        table: TableStats {
            max_fds_first: 64,
            max_fds_max: 1024,
            expansions: 4,
        },
        drops: vec![
            drop_count("contention", "ringbuf_full", 3),
            drop_count("contention", "stack_id", 0),
            drop_count("fdops", "map_full", 0),
        ],
        own_cost: own_cost("contention_begin", 2_000_000, 10_000, 0, 30_000_000),
        notes: vec!["tracepoint mode: waits are seen from lock:contention_begin".into()],
        series: None,
        cpu: None,
        trace: None,
        counters: None,
        processes: Vec::new(),
        processes_folded: None,
        steal: None,
        full_tracing: None,
    }
}

/// [`recording`] with on-CPU samples at 99 Hz: 7 in `alloc_fd` under `main`, 3 in `main` in
/// user mode (no kernel stack).
pub fn cpu_recording() -> Recording {
    let mut rec = recording();
    rec.cpu = Some(CpuProfile {
        event: CpuEvent::CpuClock,
        frequency_hz: 99,
        samples: vec![
            CpuSite {
                kernel_stack: vec![frame("alloc_fd", 0x10, None)],
                user_stack: vec![frame("main", 0x1, Some("opensock"))],
                count: 7,
            },
            CpuSite {
                kernel_stack: vec![],
                user_stack: vec![frame("main", 0x1, Some("opensock"))],
                count: 3,
            },
        ],
    });
    rec
}

/// Innermost first, as recorded.
fn native_alloc_kernel(alloc_fd_offset: u64) -> Vec<Frame> {
    vec![
        frame("native_queued_spin_lock_slowpath", 0x20, None),
        frame("_raw_spin_lock", 0x30, None),
        frame("alloc_fd", alloc_fd_offset, None),
        frame("__sys_socket", 0x5a, None),
    ]
}

fn native_close_kernel() -> Vec<Frame> {
    vec![
        frame("native_queued_spin_lock_slowpath", 0x20, None),
        frame("_raw_spin_lock", 0x30, None),
        frame("file_close_fd", 0x1c, None),
        frame("__x64_sys_close", 0xf, None),
    ]
}

fn server_user(call: &str) -> Vec<Frame> {
    vec![
        frame(call, 0x7, Some("libc.so.6")),
        frame("main", 0x99, Some("server")),
    ]
}

fn direct_probes() -> BTreeMap<Role, Attachment> {
    BTreeMap::from([
        (
            Role::Allocate,
            Attachment::Direct {
                mode: Mode::Fentry,
                functions: vec!["alloc_fd".into()],
            },
        ),
        (Role::LockTracepoints, Attachment::TpBtf),
        (Role::FdSyscalls, Attachment::TpBtf),
    ])
}

/// `command_recording`'s sites: file_lock on alloc and close, and a mutex elsewhere.
fn server_contention() -> Vec<ContentionSite> {
    vec![
        site(
            "file_lock",
            "alloc",
            native_alloc_kernel(0x1f),
            server_user("socket"),
            &[(20_000, 90)],
        ),
        site(
            "file_lock",
            "alloc",
            native_alloc_kernel(0x2a),
            server_user("socket"),
            &[(10_000, 100), (200_000, 1)],
        ),
        site(
            "file_lock",
            "close",
            native_close_kernel(),
            server_user("close"),
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
    ]
}

/// A launched command (`./server -t 2`, pid 77) in fentry mode, 2.5 s. file_lock: alloc 3 ms
/// (two sites, same functions, different `alloc_fd` offsets; one wait of 200 µs), close 2 ms;
/// a mutex in `other` 5 ms without a user stack. 7 drops.
pub fn command_recording() -> Recording {
    Recording {
        format: crate::recording::FORMAT.into(),
        version: crate::recording::VERSION,
        fdprof_version: "0.1.0".into(),
        kernel_release: "6.12.0-test".into(),
        target: Target {
            kind: TargetKind::Command,
            pid: Some(77),
            pids: Vec::new(),
            children: false,
            cgroups: Vec::new(),
            tid: None,
            command: vec!["./server".into(), "-t".into(), "2".into()],
            comm: None,
            exit_status: None,
            threads: None,
        },
        started_unix_ms: 0,
        duration_ns: 2_500_000_000,
        end_reason: EndReason::CommandExited,
        mode: Mode::Fentry,
        modes: Recording::modes_text(&direct_probes()),
        probes: direct_probes(),
        raw_addrs: false,
        syscall_latency: true,
        functions: Vec::new(),
        stack_walks: Default::default(),
        contention: server_contention(),
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
            drop_count("contention", "ringbuf_full", 5),
            drop_count("fdops", "recursion_miss", 2),
        ],
        own_cost: own_cost("fexit_alloc_fd", 300_000, 1_000, 2, 5_000_000),
        notes: vec![],
        series: None,
        cpu: None,
        trace: None,
        counters: None,
        processes: Vec::new(),
        processes_folded: None,
        steal: None,
        full_tracing: None,
    }
}

/// The first line of `text` containing `needle`.
pub fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
}

/// A table row split into its cells (columns are two or more spaces apart).
pub fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// A fresh directory for one test, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// `/tmp/fdprof-WHAT-PID`, emptied first.
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fdprof-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }

    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }

    /// The names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
