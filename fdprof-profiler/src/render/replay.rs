//! `fdprof replay` as text: one row per model, side by side, mainline first and the others'
//! allocation cost as a ratio of mainline's.

use std::fmt::Write as _;

use crate::analysis::replay::ReplayReport;
use fdprof_replay::{Distribution, ModelResult};

fn per_alloc(d: &Distribution) -> String {
    format!("{}/{}/{}", d.p50, d.p99, d.max)
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}×"))
}

fn check(r: &ModelResult) -> String {
    match (&r.posix, &r.non_posix) {
        (Some(p), _) if p.ambiguous > 0 => {
            format!("mismatch {} (ambiguous {})", p.model_mismatch, p.ambiguous)
        }
        (Some(p), _) => format!("mismatch {}", p.model_mismatch),
        (None, Some(d)) => format!(
            "diverged {}, non_lowest {}, collision {}, stale_close {}",
            d.diverged, d.non_lowest, d.collision, d.stale_close
        ),
        (None, None) => "-".into(),
    }
}

pub fn text(r: &ReplayReport) -> String {
    let s = &r.source;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay of {}: {} fds, {} ops, {} thread(s), {} events; mainline = {:?} (kernel {})",
        s.trace, s.fds, s.ops, s.threads, s.events, s.mainline, s.kernel
    );
    for note in &s.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let _ = writeln!(
        out,
        "per allocation: words read (open + full + summary bitmaps), lines touched, dirty lines \
         (p50/p99/max); totals over all allocations; × = total against mainline's\n"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>14} {:>20} {:>8} {:>12} {:>8} {:>16} {:>11} {:>10}  check",
        "model",
        "allocs",
        "words",
        "words/alloc",
        "×",
        "lines",
        "×",
        "lines/alloc",
        "dirty/alloc",
        "expansions"
    );
    for m in &r.models {
        let c = &m.result.alloc_cost;
        let words = c.o_rd.total + c.f_rd.total + c.lk_rd.total;
        // The per-allocation word count is shown for the array each model searches most.
        let main_array = [&c.o_rd, &c.f_rd, &c.lk_rd]
            .into_iter()
            .max_by_key(|d| d.total)
            .unwrap();
        let v = m.vs_mainline.as_ref();
        let _ = writeln!(
            out,
            "{:<16} {:>10} {:>14} {:>20} {:>8} {:>12} {:>8} {:>16} {:>11} {:>10}  {}",
            m.name,
            m.result.allocations,
            words,
            per_alloc(main_array),
            v.map_or("1×".into(), |v| ratio(v.words)),
            c.lines.total,
            v.map_or("1×".into(), |v| ratio(v.lines)),
            per_alloc(&c.lines),
            per_alloc(&c.dirty),
            m.result.expansions,
            check(&m.result)
        );
    }
    arrays(&mut out, r);
    let failures: Vec<String> = r
        .models
        .iter()
        .filter(|m| m.result.alloc_failures > 0 || m.result.rejected > 0)
        .map(|m| {
            format!(
                "{}: {} allocations refused (EMFILE), {} events not applicable",
                m.name, m.result.alloc_failures, m.result.rejected
            )
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\n{}", failures.join("\n"));
    }
    out
}

/// Each counter of an allocation on its own: words read from each array, words written and
/// fd-pointer slots loaded, p50/p99/max.
fn arrays(out: &mut String, r: &ReplayReport) {
    let _ = writeln!(
        out,
        "\nper allocation, by counter (p50/p99/max): words read from open_fds, full_fds_bits, the \
         summary levels and close_on_exec; words written; fd-pointer slots\n"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16}",
        "model", "open", "full", "levels", "cloexec", "written", "fd slots"
    );
    for m in &r.models {
        let c = &m.result.alloc_cost;
        let _ = writeln!(
            out,
            "{:<16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16}",
            m.name,
            per_alloc(&c.o_rd),
            per_alloc(&c.f_rd),
            per_alloc(&c.lk_rd),
            per_alloc(&c.c_rd),
            per_alloc(&c.wr),
            per_alloc(&c.ptr)
        );
    }
}
