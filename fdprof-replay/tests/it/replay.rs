//! The driver over hand-made traces: mismatches and their adoption, tables by id, fork, exec,
//! close_range, and the non-POSIX accounting.

use fdprof_replay::event::{Snapshot, TraceEvent, TraceOp};
use fdprof_replay::synthetic::{Params, Pattern, generate};
use fdprof_replay::{Fastalloc, Limits, ModelKind, ModelResult, Version, ratios, replay, run};

const T: u64 = 0xffff_8880_0000_1000;

fn ev(table: u64, op: TraceOp) -> TraceEvent {
    TraceEvent::new(table, op)
}

fn alloc(fd: u32) -> TraceOp {
    TraceOp::Alloc {
        start: 0,
        cloexec: false,
        fd: Ok(fd),
        ambiguous: false,
    }
}

/// fds 0..n-1 open in a table of `max` fds.
fn snapshot(n: u32, max: u32) -> TraceOp {
    let mut open = vec![0u64; max as usize / 64];
    for fd in 0..n {
        open[fd as usize / 64] |= 1 << (fd % 64);
    }
    TraceOp::Snapshot(Box::new(Snapshot {
        cloexec: vec![0; open.len()],
        open,
        next_fd: n,
        max_fds: max,
    }))
}

const POSIX: [ModelKind; 4] = [
    ModelKind::Mainline(Version::Linear),
    ModelKind::Mainline(Version::Fb61),
    ModelKind::Mainline(Version::Fb613),
    ModelKind::Viro,
];

fn mismatches(r: &ModelResult) -> u64 {
    r.posix.expect("a POSIX model").model_mismatch
}

#[test]
fn vector_9_through_the_driver() {
    let mut trace = vec![ev(T, snapshot(100, 128))];
    trace.extend([10, 50, 90].map(|fd| ev(T, TraceOp::Release { fd })));
    trace.extend([10, 50, 90, 100].map(|fd| ev(T, alloc(fd))));
    let kind = ModelKind::Fastalloc {
        base: Version::Fb61,
        seed: 0,
    };
    let model = Fastalloc::new(Version::Fb61, Limits::default(), 0).scripted([
        Some(60),
        Some(100),
        Some(20),
        None,
    ]);
    let r = run(model, kind, &trace);
    let d = r.non_posix.expect("non-POSIX figures");
    assert_eq!(
        (d.diverged, d.non_lowest, d.collision, d.stale_close),
        (4, 3, 0, 0)
    );
    assert_eq!(r.alloc_cost.o_rd.total, 2 + 1 + 1 + 1);
    for kind in POSIX {
        assert_eq!(
            mismatches(&replay(&trace, kind, Limits::default())),
            0,
            "{kind:?}"
        );
    }
}

#[test]
fn a_mismatch_is_counted_and_the_traced_fd_adopted() {
    let trace = vec![
        ev(T, snapshot(3, 64)),
        ev(T, alloc(7)), // the model says 3
        ev(T, alloc(3)),
        ev(T, alloc(4)),
        ev(
            T,
            TraceOp::Alloc {
                start: 0,
                cloexec: false,
                fd: Ok(9),
                ambiguous: true,
            },
        ), // says 5
        ev(T, alloc(5)),
        ev(
            T,
            TraceOp::Alloc {
                start: 0,
                cloexec: false,
                fd: Err(24),
                ambiguous: false,
            },
        ), // says 6
        ev(T, alloc(6)),
    ];
    for kind in POSIX {
        let r = replay(&trace, kind, Limits::default());
        let check = r.posix.unwrap();
        assert_eq!((check.model_mismatch, check.ambiguous), (2, 1), "{kind:?}");
        assert_eq!(r.allocations, 7);
    }
}

#[test]
fn threads_share_a_table_and_fork_copies_it() {
    let child = T + 0x400;
    let mut trace = vec![ev(T, snapshot(3, 64))];
    for (tid, fd) in [(1, 3), (2, 4), (1, 5)] {
        trace.push(TraceEvent {
            time_ns: 0,
            tid,
            table: T,
            op: alloc(fd),
        });
    }
    trace.push(ev(T, TraceOp::Release { fd: 4 }));
    trace.push(ev(T, TraceOp::Fork { child }));
    // The child starts with next_fd 0 but still finds 4; the parent is unchanged by it.
    trace.push(ev(child, alloc(4)));
    trace.push(ev(child, alloc(6)));
    trace.push(ev(T, alloc(4)));
    for kind in POSIX {
        let r = replay(&trace, kind, Limits::default());
        assert_eq!(
            (mismatches(&r), r.tables, r.implicit_tables),
            (0, 2, 0),
            "{kind:?}"
        );
        assert_eq!(r.fork_cost.o_rd, 1);
    }
}

#[test]
fn exec_and_close_range_release_what_they_should() {
    let trace = vec![
        ev(T, snapshot(3, 64)),
        ev(
            T,
            TraceOp::Alloc {
                start: 0,
                cloexec: true,
                fd: Ok(3),
                ambiguous: false,
            },
        ),
        ev(T, alloc(4)),
        ev(T, alloc(5)),
        ev(T, alloc(6)),
        ev(
            T,
            TraceOp::CloseRange {
                lo: 5,
                hi: u32::MAX,
                cloexec_only: true,
                unshare: None,
            },
        ),
        ev(
            T,
            TraceOp::CloseRange {
                lo: 6,
                hi: 6,
                cloexec_only: false,
                unshare: None,
            },
        ),
        ev(T, TraceOp::Exec { unshare: None }), // closes 3 and 5
        ev(T, alloc(3)),
        ev(T, alloc(5)),
        ev(T, alloc(6)),
        ev(T, alloc(7)),
    ];
    for kind in POSIX {
        let r = replay(&trace, kind, Limits::default());
        assert_eq!((mismatches(&r), r.rejected), (0, 0), "{kind:?}");
        assert_eq!(r.exec_cost.c_rd, 1);
        assert_eq!(r.close_range_cost.ptr, 1);
    }
}

#[test]
fn a_dup2_onto_a_simulated_fd_collides() {
    // The simulation put traced fd 3 at 40 (r = 40); dup2(0, 40) then takes 40 from it.
    let trace = vec![
        ev(T, snapshot(3, 64)),
        ev(T, alloc(3)),
        ev(
            T,
            TraceOp::InstallAt {
                fd: 40,
                cloexec: false,
            },
        ),
        ev(T, TraceOp::Release { fd: 3 }),
        ev(T, TraceOp::Release { fd: 40 }),
    ];
    let kind = ModelKind::Fastalloc {
        base: Version::Fb613,
        seed: 0,
    };
    let r = run(
        Fastalloc::new(Version::Fb613, Limits::default(), 0).scripted([Some(40)]),
        kind,
        &trace,
    );
    let d = r.non_posix.unwrap();
    assert_eq!(
        (d.diverged, d.non_lowest, d.collision, d.stale_close),
        (1, 1, 1, 1)
    );
    assert_eq!(r.rejected, 0);
}

#[test]
fn generated_patterns_replay_without_a_mismatch() {
    let p = Params {
        fds: 3000,
        ops: 3000,
        threads: 8,
        hole: 3,
        seed: 7,
    };
    for pattern in [
        Pattern::LinusLoop,
        Pattern::Opensock,
        Pattern::Holes,
        Pattern::Dup2Worst,
    ] {
        let trace = generate(pattern, &p);
        assert_eq!(trace, generate(pattern, &p), "deterministic");
        for kind in POSIX {
            let r = replay(&trace, kind, Limits::default());
            assert_eq!(
                (mismatches(&r), r.rejected, r.alloc_failures),
                (0, 0, 0),
                "{pattern:?} {kind:?}"
            );
        }
        let r = replay(
            &trace,
            ModelKind::Fastalloc {
                base: Version::Fb61,
                seed: 3,
            },
            Limits::default(),
        );
        assert_eq!(r.rejected, 0, "{pattern:?}");
    }
}

#[test]
fn opensock_fastalloc_diverges_and_reads_less() {
    let p = Params {
        fds: 20_000,
        ops: 20_000,
        threads: 16,
        hole: 3,
        seed: 1,
    };
    let trace = generate(Pattern::Opensock, &p);
    let base = replay(
        &trace,
        ModelKind::Mainline(Version::Fb61),
        Limits::default(),
    );
    let fast = replay(
        &trace,
        ModelKind::Fastalloc {
            base: Version::Fb61,
            seed: 9,
        },
        Limits::default(),
    );
    let d = fast.non_posix.unwrap();
    assert!(d.diverged > 0 && d.non_lowest > 0);
    let r = ratios(&fast, &base);
    assert!(r.f_rd.unwrap() < 1.0, "{r:?}");
    let json = serde_json::to_string(&fast).unwrap();
    assert_eq!(serde_json::from_str::<ModelResult>(&json).unwrap(), fast);
}
