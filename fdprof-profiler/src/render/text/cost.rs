//! What recording lost and what it cost.

use crate::analysis::Report;
use crate::render::human::{duration, percent};
use crate::render::layout::{columns, section};

pub(super) fn drops(out: &mut Vec<String>, r: &Report) {
    section(out, "drops");
    let d = &r.drops;
    if !d.known {
        out.push(
            "  unknown: this recording has no drop counters, so loss cannot be ruled out".into(),
        );
        return;
    }
    let mut body: Vec<Vec<String>> = d
        .counters
        .iter()
        .map(|c| vec![c.probe.clone(), c.reason.clone(), c.count.to_string()])
        .collect();
    body.push(vec!["total".into(), String::new(), d.total.to_string()]);
    out.extend(columns(&["probe", "reason", "count"], 2, &body, 2));
    if d.none {
        out.push("  none: no event was lost".into());
    } else {
        out.push(format!(
            "  {} events lost: the figures above are lower bounds",
            d.total
        ));
    }
}

pub(super) fn own_cost(out: &mut Vec<String>, r: &Report) {
    let c = &r.own_cost;
    section(out, "fdprof's own cost");
    if c.programs.is_empty() {
        out.push("  no program statistics recorded".into());
    } else {
        let mut body: Vec<Vec<String>> = c
            .programs
            .iter()
            .map(|p| {
                vec![
                    p.name.clone(),
                    duration(p.run_time_ns),
                    p.run_count.to_string(),
                    per_run(p.ns_per_run),
                    p.recursion_misses.to_string(),
                ]
            })
            .collect();
        body.push(vec![
            "total".into(),
            duration(c.run_time_ns),
            c.run_count.to_string(),
            per_run(c.ns_per_run),
            c.recursion_misses.to_string(),
        ]);
        out.extend(columns(
            &["program", "run time", "runs", "ns/run", "recursion misses"],
            1,
            &body,
            2,
        ));
        if c.stats_window_ns == 0 {
            out.push(
                "  programs: run times not measured (kernel BPF run-time statistics were off)"
                    .into(),
            );
        } else {
            out.push(format!(
                "  programs: {} of one CPU (measured over {} of the {} recording, in sampled \
                 windows)",
                percent(c.programs_cpu_share),
                duration(c.stats_window_ns),
                duration(r.header.duration_ns)
            ));
        }
        if c.run_count == 0 && c.stats_window_ns > 0 {
            out.push(
                "  (all run counts are zero: kernel BPF run-time statistics were probably not enabled)"
                    .into(),
            );
        }
    }
    out.push(format!(
        "  collector CPU: {} ({} of one CPU)",
        duration(c.collector_cpu_ns),
        percent(c.collector_cpu_share)
    ));
    if let Some(t) = &c.target_cpu {
        let programs = match t.programs_ns {
            Some(ns) => format!(
                "fdprof's programs ran for ~{} ({} of it, extrapolated from the sampled windows)",
                duration(ns),
                percent(t.programs_share)
            ),
            None => "fdprof's programs' run time not measured".into(),
        };
        out.push(format!(
            "  beside the target's {} on CPU (task-clock): {programs}; collector {}",
            duration(t.target_cpu_ns),
            percent(t.collector_share)
        ));
    }
}

fn per_run(ns: Option<f64>) -> String {
    ns.map_or("-".into(), |ns| format!("{ns:.0}"))
}
