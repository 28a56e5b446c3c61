//! The figures the seeds quote that are model outputs.

use fdprof_replay::model::Fdt;
use fdprof_replay::synthetic::{Params, Pattern, generate};
use fdprof_replay::{Limits, Mainline, Meter, Model, ModelKind, Version, Viro, replay};

/// Linus Torvalds' loop (close(3); dup2(0, 3); dup(0)) a million times: the linear scan reads
/// ≈7.81·10⁹ open words, the 4.4 search ≈1.23·10⁸ full-words words, ≈64× fewer.
#[test]
fn linus_loop_a_million_times() {
    let trace = generate(
        Pattern::LinusLoop,
        &Params {
            ops: 1_000_000,
            ..Params::default()
        },
    );
    let linear = replay(
        &trace,
        ModelKind::Mainline(Version::Linear),
        Limits::default(),
    );
    let fb61 = replay(
        &trace,
        ModelKind::Mainline(Version::Fb61),
        Limits::default(),
    );
    for r in [&linear, &fb61] {
        assert_eq!(r.posix.unwrap().model_mismatch, 0);
        assert_eq!((r.allocations, r.largest_table), (1_000_000, 1 << 20));
    }
    let o = linear.alloc_cost.o_rd.total as f64;
    let f = fb61.alloc_cost.f_rd.total as f64;
    assert!(
        (o / 7.81e9 - 1.0).abs() < 0.005,
        "linear reads {o:e} open words"
    );
    assert!(
        (f / 1.23e8 - 1.0).abs() < 0.01,
        "4.4 reads {f:e} full words"
    );
    assert!((o / f / 64.0 - 1.0).abs() < 0.02, "ratio {}", o / f);
    assert_eq!(fb61.alloc_cost.o_rd.total, 1_000_000);
}

/// Al Viro's worst case: one free fd at the top of a 2²⁷-fd table, searched from 0. The 4.4
/// search reads "4000-odd" lines of the full-words bitmap; the multi-level bitmap a handful
/// (the model says 5; Al counted 7).
#[test]
fn viro_worst_case_lines() {
    let words = 1usize << 21;
    let mut open = vec![!0u64; words];
    open[words - 1] = !0 >> 1;
    let limits = Limits::new(1 << 28, 1 << 28);
    let fdt = Fdt::from_bits(&open, &[], 0, 1 << 27, &limits).unwrap();
    let mut m = Meter::default();
    let mut fb61 = Mainline::new(Version::Fb61, limits).with_fdt(fdt.clone());
    fb61.alloc(0, false, &mut m).unwrap();
    let old = m.take().lines;
    let mut viro = Viro::new(limits).with_fdt(fdt);
    viro.alloc(0, false, &mut m).unwrap();
    let new = m.take().lines;
    assert!((4000..4200).contains(&old), "{old}");
    assert!(new <= 7, "{new}");
}
