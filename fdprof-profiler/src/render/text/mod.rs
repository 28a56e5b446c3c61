//! `fdprof report` as text for people: one formatter per section, each laying out figures of
//! the [`Report`] computed by [`crate::analysis`].

mod activity;
mod cgroups;
mod contention;
mod cost;
mod counters;
mod cpu;
mod diagnosis;
mod functions;
mod header;
mod processes;
mod rates;
mod stacks;

#[cfg(test)]
mod tests;

use super::layout::section;
use crate::analysis::Report;

/// The text report.
pub fn text(report: &Report) -> String {
    let mut out = Vec::new();
    header::header(&mut out, report);
    contention::contention(&mut out, report);
    processes::processes(&mut out, report);
    cgroups::cgroups(&mut out, report);
    functions::functions(&mut out, report);
    stacks::stacks(&mut out, report);
    cpu::cpu(&mut out, report);
    if report.fd_activity_recorded {
        activity::scan(&mut out, report);
        activity::syscalls(&mut out, report);
        activity::table(&mut out, report);
    } else {
        section(&mut out, "fd-table activity");
        out.push("  not recorded (--lock-only): no scan, syscall or table figures".into());
    }
    rates::rates(&mut out, report);
    counters::counters(&mut out, report);
    cost::drops(&mut out, report);
    cost::own_cost(&mut out, report);
    diagnosis::diagnosis(&mut out, report);
    joined(out)
}

/// `report --cpu`: the header, the on-CPU section and the drops (every report states its probe
/// mode and everything dropped).
pub fn cpu_text(report: &Report) -> String {
    let mut out = Vec::new();
    header::header(&mut out, report);
    cpu::cpu(&mut out, report);
    cost::drops(&mut out, report);
    joined(out)
}

fn joined(out: Vec<String>) -> String {
    let mut s = out.join("\n");
    s.push('\n');
    s
}
