//! The top stacks, each with its figures and frames.

use crate::analysis::{Frame, Report, SortKey};
use crate::render::human::{self, duration, duration_f, percent};
use crate::render::layout::section;

pub(super) fn stacks(out: &mut Vec<String>, r: &Report) {
    section(
        out,
        &format!(
            "top {} of {} stacks by {}",
            r.top_stacks.len(),
            r.stacks_total,
            describe(r.options.sort)
        ),
    );
    if r.top_stacks.is_empty() {
        out.push("  no lock waits recorded".into());
        return;
    }
    for g in &r.top_stacks {
        let merged = if g.sites > 1 {
            format!("  ({} sites merged)", g.sites)
        } else {
            String::new()
        };
        out.push(String::new());
        out.push(format!(
            "#{}  {} {}  count {}  total {} ({} of all wait)  avg {}  p99 {}  max {}{merged}",
            g.rank,
            g.lock,
            g.operation,
            g.count,
            duration(g.total_wait_ns),
            percent(g.share_of_all),
            g.avg_wait_ns.map_or("-".into(), duration_f),
            human::opt(g.p99_wait_ns, duration),
            duration(g.max_wait_ns),
        ));
        if g.kernel_stack.is_empty() {
            out.push("      [unknown]  (kernel stack not captured)".into());
        }
        for f in &g.kernel_stack {
            out.push(format!("      {}", frame(f)));
        }
        out.push("      [user]".into());
        if g.user_stack.is_empty() {
            out.push("      [unknown]  (no user stack)".into());
        }
        for f in &g.user_stack {
            out.push(format!("      {}", frame(f)));
        }
    }
}

fn describe(sort: SortKey) -> &'static str {
    match sort {
        SortKey::Wait => "total wait",
        SortKey::Count => "count",
        SortKey::Max => "max wait",
        SortKey::Avg => "avg wait",
    }
}

/// `function+0x1f (module)`: the offset when the report keeps offsets, the module when known.
pub(super) fn frame(f: &Frame) -> String {
    let label = match f.offset {
        Some(offset) => format!("{}+{offset:#x}", f.function),
        None => f.function.clone(),
    };
    match &f.module {
        Some(m) if !m.is_empty() => format!("{label} ({})", crate::escape::name(m)),
        _ => label,
    }
}
