//! The diagnosis: each finding's pattern, the figures that fired it against their thresholds,
//! the stacks that carry it and the remedy.

use super::stacks::frame;
use crate::analysis::{Evidence, Finding, FindingStack, Report, StackSource};
use crate::escape;
use crate::render::human::duration;
use crate::render::layout::section;

pub(super) fn diagnosis(out: &mut Vec<String>, r: &Report) {
    let d = &r.diagnosis;
    section(out, "diagnosis");
    if d.findings.is_empty() {
        out.push("  no rule fired: no fd-table pattern to fix in these figures".into());
    }
    for f in &d.findings {
        finding(out, f);
    }
    for n in &d.not_checked {
        out.push(format!(
            "  not checked: {}: {}",
            n.rule,
            escape::name(&n.why)
        ));
    }
}

fn finding(out: &mut Vec<String>, f: &Finding) {
    out.push(String::new());
    out.push(format!("  [{}] {}", f.rule, escape::name(&f.summary)));
    let fired: Vec<String> = f.evidence.iter().map(evidence).collect();
    out.push(format!("    fired by: {}", fired.join("; ")));
    out.push(format!("    remedy: {}", escape::name(&f.remedy.change)));
    out.push(format!("    saves: {}", escape::name(&f.remedy.saving)));
    if let Some(w) = &f.remedy.shown_by {
        out.push(format!("    shown by: {}", escape::name(w)));
    }
    if f.stacks.is_empty() {
        out.push("    stacks: not recorded for this pattern".into());
    }
    for s in &f.stacks {
        stack(out, s);
    }
}

fn evidence(e: &Evidence) -> String {
    format!(
        "{} {} {} {}",
        escape::name(&e.figure),
        number(e.value),
        e.comparison.symbol(),
        number(e.threshold)
    )
}

/// Integers as integers, shares with three decimals.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A stack in one line: the weight, then the user frames outermost first and the kernel frames
/// down to the innermost.
fn stack(out: &mut Vec<String>, s: &FindingStack) {
    let weight = match s.source {
        StackSource::Contention => format!("{} waited", duration(s.weight)),
        StackSource::Cpu => format!("{} on-CPU samples", s.weight),
    };
    let frames: Vec<String> = s
        .user_stack
        .iter()
        .rev()
        .chain(s.kernel_stack.iter().rev())
        .map(frame)
        .collect();
    out.push(format!(
        "    stack ({}, {weight}): {}",
        s.operation,
        frames.join(" > ")
    ));
}
