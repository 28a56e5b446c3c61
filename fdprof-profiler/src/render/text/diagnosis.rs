//! The diagnosis: each finding's pattern, the figures that fired it against their thresholds,
//! the stacks that carry it and the remedy.

use super::stacks::frame;
use crate::analysis::{Evidence, Finding, FindingStack, Report, Rule, StackSource};
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
        finding(out, f, r.cpu.is_some());
    }
    for n in &d.not_checked {
        out.push(format!(
            "  not checked: {}: {}",
            n.rule,
            escape::name(&n.why)
        ));
    }
}

fn finding(out: &mut Vec<String>, f: &Finding, sampled: bool) {
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
        let hint = if f.rule == Rule::LongScans && !sampled {
            " (record --cpu samples the allocator's stacks)"
        } else {
            ""
        };
        out.push(format!("    stacks: not in this recording{hint}"));
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

/// Integers as integers, fractions to four significant digits (0.492, 0.0001).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let text = format!("{v:.digits$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Frames of a stack shown in a finding's one line.
const FRAMES: usize = 3;

/// The lock primitives, left out of the one line: the caller below them says more.
const LOCK_PRIMITIVES: [&str; 4] = ["_raw_", "__pv_queued", "native_queued", "queued_"];

/// A stack in one line: its weight, the innermost user frames (the call site) and the
/// innermost kernel frames below the lock primitives; `top_stacks` has them whole.
fn stack(out: &mut Vec<String>, s: &FindingStack) {
    let weight = match s.source {
        StackSource::Contention => format!("{} waited", duration(s.weight)),
        StackSource::Cpu => format!("{} on-CPU samples", s.weight),
    };
    let user: Vec<String> = s.user_stack.iter().take(FRAMES).map(frame).collect();
    let kernel: Vec<String> = s
        .kernel_stack
        .iter()
        .skip_while(|f| LOCK_PRIMITIVES.iter().any(|p| f.function.starts_with(p)))
        .take(FRAMES)
        .map(frame)
        .collect();
    let or_unknown = |v: Vec<String>| {
        if v.is_empty() {
            "[unknown]".to_string()
        } else {
            v.join(" < ")
        }
    };
    out.push(format!(
        "    stack ({}, {weight}): user {}; kernel {}",
        s.operation,
        or_unknown(user),
        or_unknown(kernel)
    ));
}

#[cfg(test)]
mod tests {
    use super::number;
    use crate::analysis::{ReportOptions, report};

    /// The test recording's findings, each with its evidence, remedy and stacks; the rule that
    /// could not look says why.
    #[test]
    fn findings_with_evidence_remedy_and_stacks() {
        let text = crate::render::text(&report(
            &crate::testdata::recording(),
            &ReportOptions::default(),
        ));
        let section = &text[text.find("== diagnosis ==").expect("a diagnosis section")..];
        assert!(section.contains("\n  [shared-table] file_lock wait is 60% alloc and 40% close"));
        assert!(section.contains(
            "    fired by: contention.file_lock_count 991 >= 100; \
             contention.file_lock_wait_share_of_duration 0.001 >= 0.0001\n"
        ));
        assert!(section.contains(
            "    stack (alloc, 6.00 ms waited): user __socket (libc.so.6) < worker (opensock) < \
             start_thread (libc.so.6); kernel alloc_fd < __sys_socket"
        ), "{section}");
        assert!(section.contains("\n  [table-growth] the table grew 4 times"));
        assert!(section.contains("    saves: 4 table copies under load"));
        assert!(section.contains("  not checked: close-loops: recorded without --trace"));
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(number(3047.0), "3047");
        assert_eq!(number(0.0001), "0.0001");
        assert_eq!(number(0.000_610_4), "0.0006104");
        assert_eq!(number(0.492_42), "0.4924");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(12.345_6), "12.35");
    }
}
