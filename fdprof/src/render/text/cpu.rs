//! The on-CPU section: where the target's samples fell, the fd-table paths by operation, and
//! the top on-CPU stacks.

use super::stacks::frame;
use crate::analysis::{Cpu, Report, Share};
use crate::render::human::percent;
use crate::render::layout::section;

pub(super) fn cpu(out: &mut Vec<String>, r: &Report) {
    let Some(c) = &r.cpu else { return };
    section(
        out,
        &format!(
            "on CPU: {} samples ({}, {} Hz per CPU)",
            c.samples, c.event, c.frequency_hz
        ),
    );
    if c.samples == 0 {
        out.push("  no samples of the target: it did not run on a CPU".into());
        return;
    }
    let line = |what: &str, s: &Share| {
        format!(
            "  {what:<34} {:>8}  {:>6}",
            s.samples,
            percent(s.share_of_all)
        )
    };
    out.push(format!("  {:<34} {:>8}  {:>6}", "", "samples", "of all"));
    out.push(line("spinning on a lock", &c.spinning));
    out.push(line("in the fd-table paths", &c.fd_table));
    out.push(line("  spinning beneath them", &c.fd_table_spinning));
    for op in &c.by_operation {
        out.push(line(&format!("  under {}", op.operation), &op.samples));
        out.push(format!(
            "{}  ({} of {})",
            line("    spinning", &op.spinning),
            percent(op.spinning_share),
            op.operation
        ));
    }
    stacks(out, c);
}

fn stacks(out: &mut Vec<String>, c: &Cpu) {
    out.push(String::new());
    out.push(format!(
        "  top {} of {} on-CPU stacks by samples",
        c.top_stacks.len(),
        c.stacks_total
    ));
    for s in &c.top_stacks {
        out.push(String::new());
        out.push(format!(
            "  #{}  {}  {} samples ({} of all)",
            s.rank,
            s.operation,
            s.samples.samples,
            percent(s.samples.share_of_all)
        ));
        if s.kernel_stack.is_empty() {
            out.push("      (user mode)".into());
        }
        for f in &s.kernel_stack {
            out.push(format!("      {}", frame(f)));
        }
        out.push("      [user]".into());
        if s.user_stack.is_empty() {
            out.push("      [unknown]  (no user stack)".into());
        }
        for f in &s.user_stack {
            out.push(format!("      {}", frame(f)));
        }
    }
}
