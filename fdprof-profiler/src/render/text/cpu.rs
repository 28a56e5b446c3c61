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

#[cfg(test)]
mod tests {
    use crate::analysis::{self, ReportOptions};
    use crate::testdata::{self, frame, line_with};
    use fdprof_recording::recording::{CpuEvent, CpuProfile, CpuSite};

    #[test]
    fn section_shows_the_split_and_the_stacks_only_when_sampled() {
        let mut rec = testdata::recording();
        let text = super::super::text(&analysis::report(&rec, &ReportOptions::default()));
        assert!(!text.contains("on CPU"), "{text}");
        let kernel = ["_raw_spin_lock", "alloc_fd", "do_sys_openat2"];
        rec.cpu = Some(CpuProfile {
            event: CpuEvent::Cycles,
            frequency_hz: 99,
            samples: vec![
                CpuSite {
                    kernel_stack: kernel.iter().map(|f| frame(f, 0x8, None)).collect(),
                    user_stack: vec![frame("open_one", 0x4, Some("/srv/app"))],
                    count: 3,
                },
                CpuSite {
                    kernel_stack: Vec::new(),
                    user_stack: vec![frame("spin", 0x4, Some("/srv/app"))],
                    count: 1,
                },
            ],
        });
        let text = super::super::text(&analysis::report(&rec, &ReportOptions::default()));
        assert!(
            text.contains("== on CPU: 4 samples (cycles, 99 Hz per CPU) =="),
            "{text}"
        );
        assert!(line_with(&text, "under alloc").contains("75.0%"), "{text}");
        assert!(line_with(&text, "#1  alloc  3 samples").contains("75.0% of all"));
        assert!(text.contains("      (user mode)"), "{text}");
        assert!(text.contains("      spin (/srv/app)"), "{text}");
    }
}
