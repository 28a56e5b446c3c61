//! Garbage traces: no model panics, none allocates beyond nr_open, and what cannot be applied
//! is counted as rejected.

use fdprof_replay::event::{Snapshot, TraceEvent, TraceOp};
use fdprof_replay::synthetic::Rng;
use fdprof_replay::{Limits, ModelKind, Version, replay};

fn fd(rng: &mut Rng) -> u32 {
    match rng.below(6) {
        0 => rng.next_u32(),
        1 => (1 << 20) + rng.below(1 << 20) as u32,
        2 => rng.below(4096) as u32,
        _ => rng.below(200) as u32,
    }
}

fn random_op(rng: &mut Rng) -> TraceOp {
    match rng.below(9) {
        0 | 1 => TraceOp::Alloc {
            start: if rng.below(4) == 0 { fd(rng) } else { 0 },
            cloexec: rng.below(2) == 0,
            fd: if rng.below(8) == 0 {
                Err(24)
            } else {
                Ok(fd(rng))
            },
            ambiguous: rng.below(16) == 0,
        },
        2 => TraceOp::Release { fd: fd(rng) },
        3 => TraceOp::InstallAt {
            fd: fd(rng),
            cloexec: rng.below(2) == 0,
        },
        4 => TraceOp::CloseRange {
            lo: fd(rng),
            hi: fd(rng),
            cloexec_only: rng.below(2) == 0,
            unshare: (rng.below(4) == 0).then(|| rng.below(4)),
        },
        5 => TraceOp::Fork {
            child: rng.below(4),
        },
        6 => TraceOp::Exec {
            unshare: (rng.below(4) == 0).then(|| rng.below(4)),
        },
        7 => TraceOp::Expand { max_fds: fd(rng) },
        _ => {
            let words = rng.below(40) as usize;
            let open = (0..words).map(|_| rng.next_u64()).collect();
            let cloexec = (0..rng.below(40)).map(|_| rng.next_u64()).collect();
            TraceOp::Snapshot(Box::new(Snapshot {
                open,
                cloexec,
                next_fd: fd(rng),
                max_fds: fd(rng),
            }))
        }
    }
}

#[test]
fn garbage_never_panics() {
    let kinds = [
        ModelKind::Mainline(Version::Linear),
        ModelKind::Mainline(Version::Fb61),
        ModelKind::Mainline(Version::Fb613),
        ModelKind::Viro,
        ModelKind::Fastalloc {
            base: Version::Fb613,
            seed: 5,
        },
    ];
    let mut rng = Rng::new(42);
    let mut rejected = 0;
    for case in 0..3000 {
        let trace: Vec<TraceEvent> = (0..rng.below(60))
            .map(|_| TraceEvent {
                time_ns: 0,
                tid: 0,
                table: rng.below(4),
                op: random_op(&mut rng),
            })
            .collect();
        let limits = if case % 2 == 0 {
            Limits::default()
        } else {
            Limits::new(u64::MAX, 1 << 16)
        };
        for kind in kinds {
            let r = replay(&trace, kind, limits);
            assert!(
                r.largest_table <= limits.nr_open,
                "case {case}: {kind:?} grew to {}",
                r.largest_table
            );
            assert_eq!(r.events, trace.len() as u64);
            rejected += r.rejected;
        }
    }
    assert!(
        rejected > 0,
        "the garbage should include fds no table holds"
    );
}
